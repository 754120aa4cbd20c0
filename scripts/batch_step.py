"""One decode step of N sequences: pyriver's BatchDecoder against llama.cpp's llama_decode
(n_seq_max N, a cache stream per sequence, flash attention off unless --flash-attn), same file, same threads, in one
process, rounds interleaved; prints the median ms per step of each and their ratio (speed).

    python scripts/batch_step.py MODEL.gguf --seqs 4 [--steps 48 --rounds 3 --threads 2]

It measures the kernels and graph of a step only: no scheduler, no HTTP (docs/benchmarks.md, Server,
quotes it beside `pyriver bench --serve`)."""
from __future__ import annotations

import argparse
import statistics
import time

import llama_cpp
import numpy as np

from pyriver import Llama
from pyriver.api.batch import BatchDecoder, Feed
from pyriver.tools.prompts import SERVE_EDIT_PROMPTS

PROMPTS = ["The history of the river begins in the mountains, where", "def quicksort(items):",
           "Dear hiring manager, I am writing to apply for", "import json\n\ndef load_config(path):"]


def ours(llm, prompts, steps):
    n = len(prompts)
    dec = BatchDecoder(llm, n)
    try:
        res = {}
        for i, p in enumerate(prompts):   # one prompt a step: four long ones exceed a batch
            res.update(dec.step([Feed(i, p, prompt=True)]))
        ts = []
        for _ in range(steps):
            feeds = [Feed(i, [int(np.argmax(res[i][0]))]) for i in range(n)]
            t = time.perf_counter()
            res = dec.step(feeds)
            ts.append(time.perf_counter() - t)
        return ts
    finally:
        dec.close()


def theirs(model, prompts, steps, threads, flash=False):
    n = len(prompts)
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_seq_max = 1024 * n, 512, n
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.kv_unified = False
    ctx = llama_cpp.llama_init_from_model(model, cp)
    b = llama_cpp.llama_batch_init(512, 0, n)
    try:
        def decode(items):   # (token, sequence, position, wants logits)
            b.n_tokens = len(items)
            for j, (tok, seq, pos, lg) in enumerate(items):
                b.token[j], b.pos[j], b.n_seq_id[j], b.logits[j] = tok, pos, 1, lg
                b.seq_id[j][0] = seq
            if llama_cpp.llama_decode(ctx, b) != 0:
                raise RuntimeError("llama_decode failed")

        def argmax(row):
            return int(np.argmax(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, row), (n_vocab,))))

        nxt = []
        for i, p in enumerate(prompts):   # one prompt a step: four long ones exceed a batch
            decode([(t, i, j, int(j == len(p) - 1)) for j, t in enumerate(p)])
            nxt.append(argmax(len(p) - 1))
        pos = [len(p) for p in prompts]
        ts = []
        for _ in range(steps):
            t = time.perf_counter()
            decode([(nxt[i], i, pos[i], 1) for i in range(n)])
            ts.append(time.perf_counter() - t)
            nxt = [argmax(i) for i in range(n)]
            pos = [p + 1 for p in pos]
        return ts
    finally:
        llama_cpp.llama_batch_free(b)
        llama_cpp.llama_free(ctx)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--not-batch-invariant", action="store_true")
    ap.add_argument("--flash-attn", action="store_true", help="flash attention in both engines (the servers' default)")
    ap.add_argument("--code-edit", action="store_true", help="the code-edit prompts of `pyriver bench --spec-serve` "
                    "(about 300 tokens each) instead of short ones")
    a = ap.parse_args()
    kw = {"batch_invariant": False} if a.not_batch_invariant else {}
    llm = Llama(a.model, n_ctx=1024 * a.seqs, n_threads=a.threads, n_threads_batch=a.threads,
                verbose=False, river=None, flash_attn=a.flash_attn, **kw)
    texts = [p for _, p in SERVE_EDIT_PROMPTS] if a.code_edit else PROMPTS
    prompts = [llm.tokenize(texts[i % len(texts)].encode()) for i in range(a.seqs)]
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(a.model.encode(), llama_cpp.llama_model_default_params())
    try:
        mine, ref = [], []
        for _ in range(a.rounds):   # interleaved: a slower moment of the machine hits both
            mine.append(statistics.median(ours(llm, prompts, a.steps)))
            ref.append(statistics.median(theirs(model, prompts, a.steps, a.threads, a.flash_attn)))
    finally:
        llama_cpp.llama_model_free(model)
        llm.close()
    m, r = statistics.median(mine), statistics.median(ref)
    print(f"{a.seqs} sequences, batch_invariant={llm.batch_invariant}, flash_attn={a.flash_attn}: pyriver {m * 1e3:.2f} ms/step, "
          f"llama.cpp {r * 1e3:.2f} ms/step, speed {r / m:.3f}x "
          f"(rounds {[round(x * 1e3, 2) for x in mine]} vs {[round(x * 1e3, 2) for x in ref]})")


if __name__ == "__main__":
    main()
