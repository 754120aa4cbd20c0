"""What a step of n rows costs llama.cpp itself (llama_cpp.Llama, logits for every row, as a verify step
asks) over a one-row step, after a context of prose/code: the anchor for pyriver's verify-cost table
(docs/lossless-draft-store.md). Sizes interleaved in a rotating order every repeat; medians.

    python scripts/llamacpp_step_costs.py [--model NAME] [--context 300] [--sizes 1 2 4 8 16] [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

import llama_cpp

from pyriver import models


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    path = str(models.resolve(a.model, progress=True))
    llm = llama_cpp.Llama(path, n_ctx=a.context + max(a.sizes) + 8, n_threads=a.threads, verbose=False,
                          logits_all=True, flash_attn=False)
    text = llm.tokenize(b"def add(a, b):\n    return a + b\n\nclass Stack:\n    def push(self, x):\n" * 40)
    llm.eval(text[:a.context])
    times = {n: [] for n in a.sizes}
    for r in range(a.repeats):
        k = r % len(a.sizes)
        for n in a.sizes[k:] + a.sizes[:k]:
            llm._ctx.kv_cache_seq_rm(-1, a.context, -1)   # back to the context before each step
            llm.n_tokens = a.context
            t = time.perf_counter()
            llm.eval(text[a.context:a.context + n])
            times[n].append(time.perf_counter() - t)
    one = statistics.median(times[1]) if 1 in times else None
    for n in a.sizes:
        m = statistics.median(times[n])
        print(f"{n:>3} rows  {m * 1000:8.1f} ms" + (f"  {m / one:5.2f} one-row steps" if one else ""))


if __name__ == "__main__":
    main()
