"""`pyriver bench --verify-cost`: what a lossless verify step costs on this machine. One step of k
tokens at full depth with logits for every row (as lossless mode verifies), k = 1..--verify-k-max
(64), against one single decode step, after a code-edit prompt in the cache; each repeat times one
single step (the median of three) and then every k, the ratio within the repeat, medians over
repeats. ggml's multi-token kernels pay from about 16 rows on, so the cost per token is not monotone
in k: the table goes as far as lossless mode may draft (pyriver.speculative.draftlen.DraftCost reads it)."""
from __future__ import annotations

import statistics

from pyriver import models
from pyriver.cli.args import device_kwargs, layout_kwargs
from pyriver.speculative.costcurve import measure
from pyriver.api.llama import Llama

from pyriver.tools.prompts import CODE_EDIT_PROMPTS
from pyriver.tools.results import write_json


def main(a) -> int:
    path = str(models.resolve(a.model, progress=True))
    llm = Llama(path, n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                batch_invariant=True if getattr(a, "batch_invariant", False) else None, **device_kwargs(a), **layout_kwargs(a))
    ks = list(range(1, getattr(a, "verify_k_max", 64) + 1))
    res = measure(llm, ks, a.repeats, llm.tokenize(CODE_EDIT_PROMPTS[0][1].encode()))
    print(f"model {path}  threads {a.threads}  repeats {a.repeats}  batch-invariant {llm.batch_invariant}  batch layout {llm.batch_layout}")
    print(f"{'k':>3}{'k-token step ms':>18}{'single step ms':>16}{'in decode steps':>17}{'ms per token':>14}")
    table = {}
    for k in ks:
        m, s, r = (statistics.median(res[k][f]) for f in ("multi_s", "single_s", "ratio"))
        table[k] = {"multi_ms": 1e3 * m, "single_ms": 1e3 * s, "decode_steps": r, "runs": res[k]}
        print(f"{k:>3}{1e3 * m:>18.1f}{1e3 * s:>16.1f}{r:>17.2f}{1e3 * m / k:>14.1f}")
    print("in decode steps: the k-token step over a single step timed in the same repeat, median over repeats")
    if a.json:
        write_json(a.json, {"schema": "pyriver.bench.verify_cost/1", "model": path, "threads": a.threads,
                            "repeats": a.repeats, "batch_invariant": llm.batch_invariant, "batch_layout": llm.batch_layout,
                            "n_prompt": len(llm.tokenize(CODE_EDIT_PROMPTS[0][1].encode())), "k": table})
    llm.close()
    return 0
