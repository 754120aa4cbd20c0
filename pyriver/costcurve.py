"""What a lossless verify step costs on this machine, for one model and setting: one full-depth step
of n tokens with logits for every row, in single decode steps. Lossless mode's draft length by cost
(pyriver.draftlen) reads it. `pyriver bench --verify-cost` measures every n; draft_cost="auto"
(the server's and chat's default) measures the sizes in SIZES once per model file, threads and
device setting and keeps the table in the cache (`<cache>/verify-cost/`), so a later start reads it.

Why measured and not a formula: the curve is not monotone per token. On the 2-core EPYC the 1.5B
Q4_K_M's step of 8 tokens costs 7.1 single steps and its step of 16 only 7.6 (ggml's multi-token
kernels pay from about 16 rows on), so where a draft of 9 is worth taking a draft of 15 is cheaper
per kept token (docs/lossless.md, "The verify cost curve"). Verify steps of these sizes (logits
for every row) never read batch_layout's second layout (native: a prompt step or more than 64 rows),
so one table serves both settings.

Every row of a step attends over the whole cache, so a long step's cost over a single step's grows
with the context: on the 1.5B Q4_K_M (Xeon, flash attention) a step of 32 rows costs 6.3 single
steps after 144 tokens, 7.3 after 1152 and 8.7 after 2016. The automatic table is measured at two
contexts, the cost prompt and FAR times it, and read at each step's context (DraftCost.at)."""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

from .atomic import write_text
from .cache import cache_dir, setting_key
from .draftlen import DraftCost, DEFAULT_COST
from .engine.debug import tiled_in_use

# The step sizes the automatic table measures: every size to 4, then the kernels' steps (16, 32, 48,
# 64) and a point between each; a size not measured is never taken (DraftCost.step).
SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SCHEMA = "pyriver.verify_cost/3"
# Repeats of each size. Each step is timed between two single steps and read as its ratio to them,
# the median over the repeats: on a shared 2-core machine the speed moves between repeats (single
# steps of 12 to 14 ms within a minute), so the fastest step of a size over the fastest single one
# (schema 2) read SmolLM2's 2-row step at 1.51 to 1.89 single steps in five measurements, where
# interleaved pairs read 1.66 and the server's own steps 1.70 (docs/lossless.md). The small sizes,
# where drafting one or two tokens or none turns on a few percent (a chat's drafts), are cheap and
# get SMALL_REPEATS, spread between the full passes (one cached table read SmolLM2's 2-row step at
# 1.55 with 5 of them, where 15 passes read 1.67 to 1.68 three times): 53 s on the 1.5B Q4_K_M's
# first start on the Xeon, 25 s on SmolLM2.
REPEATS = 3
SMALL, SMALL_REPEATS = 4, 9
# The far context: the cost prompt this many times over (1152 tokens on the 1.5B), where it fits. Far
# from the near one, so that a step's growth is read over a long distance (a single step grows by
# about 5% there: measured at 576 tokens, the noise of a repeat was as large as the growth).
FAR = 8


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(llm, sizes, repeats: int, prompt: List[int], small_repeats: int = 0) -> Dict[int, Dict[str, List[float]]]:
    """Per size n: seconds of each n-token verify step after prompt (logits for every row), the mean
    of the single decode steps timed just before and after it (each pass times single, n1, single,
    n2, single, ...) and the ratio of the two, one per pass: repeats passes over every size, and
    passes over the sizes up to SMALL alone between them, to small_repeats in all. The cache is cut
    back to the prompt after each step and emptied at the end. llm: a pyriver Llama with an empty cache."""
    n0 = len(prompt)
    llm.decode_logits(prompt, prompt=True)
    toks = (prompt * (1 + max(sizes) // len(prompt)))[:max(sizes)]   # any tokens: the cost does not depend on which

    def step(n: int, verify: bool = True) -> float:
        t = _time(lambda: llm.decode_logits(toks[:n], logits_all=True, prompt=True) if verify
                  else llm.decode_logits(toks[:1]))
        llm._truncate(n0)
        return t

    # the passes over the small sizes alone between those over every size, so that a spell of other
    # load on the machine falls on a few of each size's passes, not on all of the small sizes'
    small = [n for n in sizes if n <= SMALL]
    total = max(repeats, small_repeats)
    every = {round(i * total / repeats) for i in range(repeats)} if repeats else set()
    passes = [list(sizes) if i in every else small for i in range(total)]
    out: Dict[int, Dict[str, List[float]]] = {n: {"multi_s": [], "single_s": [], "ratio": []} for n in sizes}
    try:
        for ns in passes:
            before = step(1, verify=False)
            for n in ns:
                m, after = step(n), step(1, verify=False)
                one = (before + after) / 2
                out[n]["multi_s"].append(m)
                out[n]["single_s"].append(one)
                out[n]["ratio"].append(m / one)
                before = after
    finally:
        llm.reset()
        llm._truncate(0)
    return out


def single(res: Dict[int, Dict[str, List[float]]]) -> float:
    """The median single step of a measurement, seconds."""
    return statistics.median(s for r in res.values() for s in r["single_s"])


def table(res: Dict[int, Dict[str, List[float]]]) -> Dict[int, float]:
    """{n: the median of the n-token step's ratios to the single steps beside it}, the single step itself 1."""
    t = {n: statistics.median(r["ratio"]) for n, r in res.items() if n > 1}
    t[1] = 1.0   # the unit (a 1-token verify step is a decode step's cost)
    return dict(sorted(t.items()))


def to_json(cost: DraftCost, model: str, threads: int) -> str:
    return json.dumps({"schema": SCHEMA, "model": model, "threads": threads, **cost.to_dict()})


def read(path) -> DraftCost:
    """An automatic table's file (to_json), with DEFAULT_COST's river draft."""
    d = json.loads(Path(path).read_text())
    if d.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} table")
    return DraftCost.from_dict({**d, "river_draft": DEFAULT_COST.river_draft})


def auto(llm, prompt: List[int]) -> DraftCost:
    """The verify cost table of llm's model and setting: from the cache, else measured now (REPEATS
    of SIZES, SMALL_REPEATS of the small ones, after the prompt and after FAR times it: about 50 s on
    the 1.5B Q4_K_M on 2 cores, once)
    and cached; the river draft's cost is DEFAULT_COST's. A model whose context cannot hold the
    largest step gets the sizes that fit, and one table where the far context does not fit."""
    # the tiled products make SmolLM2's multi-token steps 1.2x to 1.4x cheaper, the 1.5B's of 2 to 7
    # rows cheaper still: a table is its kernels' own
    key = setting_key(llm, sizes=list(SIZES), schema=SCHEMA, repeats=[REPEATS, SMALL, SMALL_REPEATS],
                      tiled=tiled_in_use())
    path = cache_dir() / "verify-cost" / f"{key}.json"
    try:
        return read(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    near = prompt[:max(1, llm.n_ctx() // 2)]   # a small context: a shorter text, the sizes that fit after it
    sizes = [n for n in SIZES if len(near) + n <= llm.n_ctx()]
    far = (prompt * FAR)[:llm.n_ctx() - max(sizes)]
    if llm.verbose:
        print(f"pyriver: measuring the verify cost of {len(sizes)} step sizes for lossless drafts (once)",
              file=sys.stderr)
    res = measure(llm, sizes, REPEATS, near, SMALL_REPEATS)
    cost = DraftCost(table(res), DEFAULT_COST.river_draft)
    if len(far) >= 2 * len(near):
        res_far = measure(llm, sizes, REPEATS, far, SMALL_REPEATS)
        cost = DraftCost(cost.points, cost.river_draft, len(near),
                         (len(far), table(res_far), single(res_far) / single(res)))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, to_json(cost, llm.model_path, llm.n_threads))
    return cost
