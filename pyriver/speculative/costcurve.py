"""What a lossless verify step costs on this machine, for one model and setting: one full-depth step
of n tokens with logits for every row, in single decode steps. Lossless mode's draft length by cost
(pyriver.speculative.draftlen) reads it. `pyriver bench --verify-cost` measures every n; draft_cost="auto"
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
contexts, the cost prompt and FAR times it, and read at each step's context (DraftCost.at).

Where ggml's CPU flash attention computes a verify step (fewer than 64 rows: a row at a time, each
a pass over the cache), the step's attention can cost more than its weights: SmolLM2 (heads of 64
dimensions) after 1300 tokens, 48 rows 740 ms against 27 ms for one. The native engine can attend
such a step through the tiled kernel instead (pr_context_set_verify_tile_rows); the table measures
the sizes of TILE_SIZES both ways and takes the tiled steps from the size where they pay
(tile_rows): SmolLM2 from 8 rows, the 1.5B from 48, Gemma 3 never (docs/lossless.md)."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from pyriver.atomic import write_text
from pyriver.models.cache import cache_dir, setting_key
from pyriver.speculative.draftlen import DEFAULT_COST, FA_TILE, DraftCost
from pyriver.engine import VERIFY, kv_types
from pyriver.engine.debug import tiled_in_use, tiled_revision
from pyriver.engine.firststart import Measuring

# The step sizes the automatic table measures: every size to 4, then the kernels' steps (16, 32, 48,
# 64) and a point between each; a size not measured is never taken (DraftCost.step).
SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SCHEMA = "pyriver.verify_cost/4"
# The sizes measured with their attention tiled as well, and what a tiled step must cost against the
# plain one at the far context to be taken (at the near one: no more): tile_rows. Fewer than 6 rows
# pad a 64-row tile with 10 or more rows of nothing (SmolLM2's 4-row step dearer tiled at every context).
TILE_SIZES = tuple(n for n in SIZES if 6 <= n < FA_TILE)
TILE_GAIN = 0.95
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


def _passes(sizes, repeats: int, small_repeats: int) -> List[List[int]]:
    """The passes of a measurement: repeats over every size, the rest (to small_repeats) over the
    sizes up to SMALL alone, spread between them, so that a spell of other load on the machine falls
    on a few of each size's passes, not on all of the small sizes'."""
    small = [n for n in sizes if n <= SMALL]
    total = max(repeats, small_repeats)
    every = {round(i * total / repeats) for i in range(repeats)} if repeats else set()
    return [list(sizes) if i in every else small for i in range(total)]


def steps(sizes, repeats: int, small_repeats: int = 0, tiled: Sequence[int] = ()) -> int:
    """The timed steps measure() takes (its progress bar's total)."""
    return sum(1 + sum(2 * (2 if n in tiled and len(ns) == len(sizes) else 1) for n in ns)
               for ns in _passes(sizes, repeats, small_repeats))


def measure(llm, sizes, repeats: int, prompt: List[int], small_repeats: int = 0,
            tiled: Sequence[int] = (), tick=None) -> Dict[int, Dict[str, List[float]]]:
    """Per size n: seconds of each n-token verify step after prompt (logits for every row), the mean
    of the single decode steps timed just before and after it (each pass times single, n1, single,
    n2, single, ...) and the ratio of the two, one per pass: repeats passes over every size, and
    passes over the sizes up to SMALL alone between them, to small_repeats in all. The sizes in tiled
    are timed in the full passes a second time each, their attention tiled, after the plain step
    ("tiled_s", "tiled_ratio"). The cache is cut back to the prompt after each step and emptied at the
    end; tick() after each timed step (steps() of them). llm: a pyriver Llama with an empty cache."""
    n0 = len(prompt)
    llm.decode_logits(prompt, prompt=True)
    toks = (prompt * (1 + max(sizes) // len(prompt)))[:max(sizes)]   # any tokens: the cost does not depend on which

    def step(n: int, verify: bool = True, tile: int = 0) -> float:
        if tile:
            llm.context.engine.set_verify_tile_rows(tile)
        try:
            t = _time(lambda: llm.decode_logits(toks[:n], logits_all=True, prompt=VERIFY) if verify
                      else llm.decode_logits(toks[:1]))
        finally:
            if tile:
                llm.context.engine.set_verify_tile_rows(0)
        llm.context.truncate(n0)
        if tick is not None:
            tick()
        return t

    passes = _passes(sizes, repeats, small_repeats)
    out: Dict[int, Dict[str, List[float]]] = {n: {"multi_s": [], "single_s": [], "ratio": []} for n in sizes}
    for n in tiled:
        out[n].update(tiled_s=[], tiled_ratio=[])
    try:
        for ns in passes:
            before = step(1, verify=False)
            for n in ns:
                for tile in (0, n) if n in tiled and len(ns) == len(sizes) else (0,):
                    m, after = step(n, tile=tile), step(1, verify=False)
                    one, r = (before + after) / 2, out[n]
                    if tile:
                        r["tiled_s"].append(m)
                        r["tiled_ratio"].append(m / one)
                    else:
                        r["multi_s"].append(m)
                        r["single_s"].append(one)
                        r["ratio"].append(m / one)
                    before = after
    finally:
        llm.reset()
        llm.context.truncate(0)
    return out


def single(res: Dict[int, Dict[str, List[float]]]) -> float:
    """The median single step of a measurement, seconds."""
    return statistics.median(s for r in res.values() for s in r["single_s"])


def table(res: Dict[int, Dict[str, List[float]]], tile: int = 0) -> Dict[int, float]:
    """{n: the median of the n-token step's ratios to the single steps beside it}, the single step
    itself 1; the tiled steps' from tile rows on (below FA_TILE)."""
    t = {n: statistics.median(r["tiled_ratio"] if tile and tile <= n < FA_TILE else r["ratio"])
         for n, r in res.items() if n > 1}
    t[1] = 1.0   # the unit (a 1-token verify step is a decode step's cost)
    return dict(sorted(t.items()))


def tile_rows(far: Dict[int, Dict[str, List[float]]], near: Optional[Dict[int, Dict[str, List[float]]]] = None) -> int:
    """From how many rows verify steps attend tiled (0: never): the smallest tiled size from which
    every tiled step measured (median ratio) at most TILE_GAIN of the plain one at the far context
    and no more than it at the near one (where attention weighs least); near None: the far context's
    own answer, or the answer of a table measured at one context (far)."""
    def pays(n: int) -> bool:
        med = lambda res, key: statistics.median(res[n][key])   # noqa: E731
        if med(far, "tiled_ratio") > TILE_GAIN * med(far, "ratio"):
            return False
        return near is None or ("tiled_ratio" in near[n] and med(near, "tiled_ratio") <= med(near, "ratio"))
    rows = 0
    for n in sorted((n for n, r in far.items() if r.get("tiled_ratio")), reverse=True):
        if not pays(n):
            break
        rows = n
    return rows


def can_tile(llm) -> bool:
    """Whether llm's verify steps can attend tiled: the native engine's flash attention on the CPU
    (the kernel whose row-at-a-time path the tiling avoids) over an f16 or f32 cache (the tiled
    kernel's; graph.cpp keeps a quantized one off it), unless made with tiled_verify=False."""
    a = llm.context.args
    return bool(getattr(llm, "tiled_verify", False) and getattr(llm.backend, "supports_river", False) and
                a.flash_attn and kv_types.tileable(a.type_k, a.type_v) and all(d == "CPU" for d in llm.devices()))


def to_json(cost: DraftCost, model: str, threads: int, tile: int = 0) -> str:
    return json.dumps({"schema": SCHEMA, "model": model, "threads": threads, "verify_tile_rows": tile, **cost.to_dict()})


def read(path) -> Tuple[DraftCost, int]:
    """An automatic table's file (to_json), with DEFAULT_COST's river draft, and its verify_tile_rows."""
    d = json.loads(Path(path).read_text())
    if d.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} table")
    tile = int(d.pop("verify_tile_rows"))
    return DraftCost.from_dict({**d, "river_draft": DEFAULT_COST.river_draft}), tile


def auto(llm, prompt: List[int]) -> Tuple[DraftCost, int]:
    """The verify cost table of llm's model and setting, and the verify_tile_rows it was measured
    with (tile_rows; Llama sets it): from the cache, else measured now (REPEATS of SIZES,
    SMALL_REPEATS of the small ones, after FAR times the prompt and after the prompt: about 60 s on
    the 1.5B Q4_K_M on 2 cores, once) and cached; the river draft's cost is DEFAULT_COST's. A model
    whose context cannot hold the largest step gets the sizes that fit, and one table where the far
    context does not fit. The far context is measured first: the tiled steps are timed at the near
    one only where they paid there."""
    # the tiled products make SmolLM2's multi-token steps 1.2x to 1.4x cheaper, the 1.5B's of 2 to 7
    # rows cheaper still: a table is its kernels' own
    tiles = can_tile(llm)
    key = setting_key(llm, sizes=list(SIZES), schema=SCHEMA, repeats=[REPEATS, SMALL, SMALL_REPEATS],
                      tiled=tiled_in_use(), kernels=tiled_revision(), tile_sizes=list(TILE_SIZES) if tiles else [], tile_gain=TILE_GAIN)
    path = cache_dir() / "verify-cost" / f"{key}.json"
    try:
        return read(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    near = prompt[:max(1, llm.n_ctx() // 2)]   # a small context: a shorter text, the sizes that fit after it
    sizes = [n for n in SIZES if len(near) + n <= llm.n_ctx()]
    far = (prompt * FAR)[:llm.n_ctx() - max(sizes)]
    tiled = [n for n in TILE_SIZES if n in sizes] if tiles else []
    two = len(far) >= 2 * len(near)
    what = f"the verify cost of {len(sizes)} step sizes for lossless drafts" + (" and the tiled crossover" if tiled else "")
    with Measuring(what, steps(sizes, REPEATS, SMALL_REPEATS, tiled), path, "draft costs") as m:
        if two:
            res_far = measure(llm, sizes, REPEATS, far, SMALL_REPEATS, tiled, tick=m.tick)
            first = tile_rows(res_far)
            again = [n for n in tiled if first and n >= first]
            m.grow(steps(sizes, REPEATS, SMALL_REPEATS, again))
            res = measure(llm, sizes, REPEATS, near, SMALL_REPEATS, again, tick=m.tick)
            tile = tile_rows(res_far, res)
            grow = single(res_far) / single(res)
            tables = lambda t: (table(res, t), DEFAULT_COST.river_draft, len(near), (len(far), table(res_far, t), grow))  # noqa: E731
        else:
            res = measure(llm, sizes, REPEATS, near, SMALL_REPEATS, tiled, tick=m.tick)
            tile = tile_rows(res)
            tables = lambda t: (table(res, t), DEFAULT_COST.river_draft)  # noqa: E731
    cost = DraftCost(*tables(tile), untiled=DraftCost(*tables(0)) if tile else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, to_json(cost, llm.model_path, llm.n_threads, tile))
    return cost, tile
