"""From how many rows a prompt step reads batch_layout's second layout (the file's, where ggml's
tiled kernel computes K-quant products) on this machine: measured once per model file and setting,
and cached (`<cache>/wide-rows/`), as pyriver.speculative.costcurve does for verify steps.

Why measured: where the tiled kernel overtakes the repacked GEMM depends on the CPU. The 1.5B
Q4_K_M's prompt steps, one process, median of 5: on a Zen 4 (AVX-512) the file's layout is faster
from 17 rows (24 rows 301 -> 287 ms); on a Zen 3 (AVX2 only) it is slower up to 32 rows (17 rows
683 ms against 383, 32 rows 802 against 706) and faster from 48 (docs/lossless.md, "Prompts on
ggml's tiled kernel")."""
from __future__ import annotations

import json
import time
from typing import Dict, List, Sequence

from pyriver.atomic import write_text
from pyriver.engine.firststart import Measuring
from pyriver.engine.debug import tiled_revision
from pyriver.models.cache import cache_dir, setting_key

# The prompt step sizes timed in both layouts; the threshold is 16 (native's default) or one of them
# (from 40 rows the file's layout wins on both CPUs measured).
SIZES = (17, 24, 32)
DEFAULT = 16
REPEATS = 3
ONE_LAYOUT = 64   # a prompt step of at most this many rows keeps the repacked layout (more: any step is wide)


def threshold(times: Dict[int, Dict[str, List[float]]]) -> int:
    """The wide_prompt_rows for measured times ({n: {"wide": [s, ...], "one": [s, ...]}}): the largest
    size at which the file's layout was slower (fastest of each, since another process only ever
    adds time), else DEFAULT, so that every measured size above it is read where it is faster."""
    slower = [n for n, t in times.items() if min(t["wide"]) > min(t["one"])]
    return max([DEFAULT] + slower)


def measure(llm, prompt: List[int], sizes: Sequence[int] = SIZES, repeats: int = REPEATS,
            tick=None) -> Dict[int, Dict[str, List[float]]]:
    """Seconds of one prompt step of n rows (last row's logits) in each layout, alternated; the
    cache is emptied after each (tick() after each: repeats * len(sizes) * 2 steps). llm: a pyriver
    Llama with batch_layout, its cache empty."""
    toks = (prompt * (1 + max(sizes) // max(len(prompt), 1)))[:max(sizes)]
    out = {n: {"wide": [], "one": []} for n in sizes}
    try:
        for r in range(repeats):
            for n in sizes:
                for kind in (("wide", "one") if r % 2 == 0 else ("one", "wide")):
                    llm.context.engine.set_wide_prompt_rows(n - 1 if kind == "wide" else ONE_LAYOUT)
                    t0 = time.perf_counter()
                    llm.decode_logits(toks[:n], prompt=True)
                    out[n][kind].append(time.perf_counter() - t0)
                    llm.context.truncate(0)
                    if tick is not None:
                        tick()
    finally:
        llm.reset()
        llm.context.truncate(0)
    return out


def auto(llm, prompt: List[int]) -> int:
    """llm's wide_prompt_rows on this machine: from the cache, else measured now (about 14 s on the
    1.5B Q4_K_M on a 2-core Zen 3) and cached. A context too small for the largest size keeps DEFAULT."""
    if max(SIZES) > llm.n_ctx():
        return DEFAULT
    # the repacked layout's steps are the Q4_K kernel's up to 64 rows: a threshold measured under
    # other kernels is not this library's
    key = setting_key(llm, sizes=list(SIZES), what='wide_prompt_rows', kernels=tiled_revision())
    path = cache_dir() / "wide-rows" / f"{key}.json"
    try:
        return int(json.loads(path.read_text())["wide_prompt_rows"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    with Measuring("from how many rows prompts read the second layout", REPEATS * len(SIZES) * 2, path,
                   "prompt layouts") as m:
        times = measure(llm, prompt, tick=m.tick)
    n = threshold(times)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps({"schema": "pyriver.wide_rows/1", "model": llm.model_path,
                                 "threads_batch": llm.n_threads_batch, "wide_prompt_rows": n,
                                 "seconds": {str(k): v for k, v in times.items()}}))
    return n
