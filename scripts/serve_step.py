"""Where a step of the server's scheduler spends its time, in one process with no HTTP: the engine's
decode call (pr_decode_batch, or llama_decode with --engine llama.cpp), the rest of BatchDecoder.step (feeds in, logits out) and the rest of
Scheduler._step (sampling, hand-over to the requests); medians per step over N greedy streams.

    python scripts/serve_step.py MODEL.gguf --streams 4 [--tokens 64 --rounds 4 --threads 2 --engine llama.cpp]

It wraps the two methods and the binding's decode call from outside; nothing in pyriver changes."""
from __future__ import annotations

import argparse
import statistics
import time

import pyriver.api.batch as batch
import llama_cpp

import pyriver.engine.native as native_engine
from pyriver import Llama
from pyriver.engine.sampling import Sampler, SamplingParams
from pyriver.server.scheduler import Request, Scheduler
from pyriver.tools.serve_bench import PROMPTS  # the bench's prompts, so the two measure alike

T = {"native": [], "decoder": [], "scheduler": []}


def timed(fn, key):
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            T[key].append(time.perf_counter() - t)
    return wrapper


class TimedLib:
    """The binding's lib with pr_decode_batch timed."""

    def __init__(self, lib):
        self._lib = lib
        self.pr_decode_batch = timed(lib.pr_decode_batch, "native")

    def __getattr__(self, name):
        return getattr(self._lib, name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", default="auto")
    a = ap.parse_args()
    native_engine.lib = TimedLib(native_engine.lib)   # the native engine's context calls it
    llama_cpp.llama_decode = timed(llama_cpp.llama_decode, "native")   # the llama.cpp engine's (module attribute)
    batch.BatchDecoder.step = timed(batch.BatchDecoder.step, "decoder")
    Scheduler._step = timed(Scheduler._step, "scheduler")
    llm = Llama(a.model, n_ctx=1024, n_threads=a.threads, n_threads_batch=a.threads, verbose=False, engine=a.engine)
    sched = Scheduler(llm, a.streams)
    try:
        for rnd in range(a.rounds):
            for v in T.values():
                v.clear()
            reqs = [Request(prompt=llm.tokenize(PROMPTS[i % len(PROMPTS)].encode(), add_bos=True, special=True),
                            sampler=Sampler(SamplingParams(temperature=0.0)), max_tokens=a.tokens)
                    for i in range(a.streams)]
            t0 = time.perf_counter()
            for r in reqs:
                sched.submit(r)
            for r in reqs:
                while r.out.get()[0] != "end":
                    pass
            wall = time.perf_counter() - t0
            m = {k: 1e3 * statistics.median(v) for k, v in T.items()}
            print(f"round {rnd}: {len(T['scheduler'])} steps, {sum(r.n_generated for r in reqs) / wall:.1f} tok/s; "
                  f"ms per step: native {m['native']:.2f}, BatchDecoder.step {m['decoder']:.2f}, "
                  f"Scheduler._step {m['scheduler']:.2f} (Python around the native call "
                  f"{100 * (m['scheduler'] - m['native']) / m['scheduler']:.1f}%)", flush=True)
    finally:
        sched.stop()


if __name__ == "__main__":
    main()
