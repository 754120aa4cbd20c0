"""`pyriver bench --verify-cost`: what a lossless verify step costs on this machine. One step of k
tokens at full depth with logits for every row (as lossless mode verifies) against k single
decode steps, k = 1..8, after a chat prompt in the cache; interleaved, medians over repeats, the
ratio within each repeat. Lossless mode's adaptive draft length reads the same shape
(pyriver.lossless.VerifyCost)."""
from __future__ import annotations

import statistics
import time
from typing import Dict, List

from pyriver import models
from pyriver.args import device_kwargs
from pyriver.llama import Llama

from .prompts import CODE_EDIT_PROMPTS
from .results import write_json


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(llm, ks: List[int], repeats: int) -> Dict[int, Dict]:
    """Per k: seconds of one k-token verify step and of k single steps (each repeat's pair back to
    back, k in turn), the cache cut back to the prompt after each."""
    prompt = llm.tokenize(CODE_EDIT_PROMPTS[0][1].encode())
    n0 = len(prompt)
    llm.decode_logits(prompt, prompt=True)
    toks = prompt[:max(ks)]   # any tokens: the cost does not depend on which
    out: Dict[int, Dict] = {k: {"multi_s": [], "single_s": [], "ratio": []} for k in ks}
    for _ in range(repeats):
        for k in ks:
            m = _time(lambda: llm.decode_logits(toks[:k], logits_all=True, prompt=True))
            llm._truncate(n0)
            s = _time(lambda: [llm.decode_logits([t]) for t in toks[:k]])
            llm._truncate(n0)
            out[k]["multi_s"].append(m)
            out[k]["single_s"].append(s)
            out[k]["ratio"].append(m / s)
    return out


def main(a) -> int:
    path = str(models.resolve(a.model, progress=True))
    llm = Llama(path, n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                batch_invariant=True if getattr(a, "batch_invariant", False) else None, **device_kwargs(a))
    ks = list(range(1, 9))
    res = measure(llm, ks, a.repeats)
    one = statistics.median(res[1]["single_s"])
    print(f"model {path}  threads {a.threads}  repeats {a.repeats}  batch-invariant {llm.batch_invariant}")
    print(f"{'k':>3}{'k-token step ms':>18}{'k single steps ms':>20}{'ratio':>8}{'in decode steps':>17}")
    table = {}
    for k in ks:
        m, s, r = (statistics.median(res[k][f]) for f in ("multi_s", "single_s", "ratio"))
        table[k] = {"multi_ms": 1e3 * m, "single_ms": 1e3 * s, "ratio": r, "decode_steps": m / one, "runs": res[k]}
        print(f"{k:>3}{1e3 * m:>18.1f}{1e3 * s:>20.1f}{r:>8.2f}{m / one:>17.2f}")
    print("ratio: a k-token step over k single steps, median of the ratios within each repeat; "
          "in decode steps: the k-token step over one single step")
    if a.json:
        write_json(a.json, {"schema": "pyriver.bench.verify_cost/1", "model": path, "threads": a.threads,
                            "repeats": a.repeats, "batch_invariant": llm.batch_invariant,
                            "n_prompt": len(llm.tokenize(CODE_EDIT_PROMPTS[0][1].encode())), "k": table})
    llm.close()
    return 0
