"""Does a token's result depend on the step it was computed in, on this device? The logits of the
last tokens of a text computed in one multi-token step and in single-token steps, compared.

    python -m pyriver_dev.stepcheck [MODEL] [--n-gpu-layers N] [--flash-attn] [--batch-invariant auto|on|off]

By default ggml's kernels depend on the number of tokens in a step, as llama.cpp's do; with
--batch-invariant on (CPU) every position is identical (docs/gpu.md for devices)."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from pyriver import Llama
from pyriver import models

TEXT = ("The river carries the water of the mountains down to the sea. Along its banks, towns grew where "
        "boats could land, and people traded grain, wool and stories. ") * 8


def compare(llm, n_tokens: int, tail: int):
    """(positions that differ, largest difference, positions whose argmax differs) over the last
    `tail` of n_tokens tokens: one step against a prompt of the rest then single-token steps."""
    toks = llm.tokenize(TEXT.encode())[:n_tokens]
    if len(toks) < tail + 1:
        raise ValueError(f"the text has {len(toks)} tokens; need more than {tail}")
    llm.reset()
    one = llm.decode_logits(toks, logits_all=True, prompt=True)[-tail:]
    llm.reset()
    llm.decode_logits(toks[:-tail], prompt=True)
    steps = np.concatenate([llm.decode_logits([t]) for t in toks[-tail:]])
    d = np.abs(one - steps).max(axis=1)
    return int((d > 0).sum()), float(d.max()), int((one.argmax(1) != steps.argmax(1)).sum())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyriver_dev.stepcheck", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--flash-attn", action="store_true")
    ap.add_argument("--batch-invariant", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--tokens", type=int, nargs="+", default=[64, 300], help="text lengths to check")
    ap.add_argument("--tail", type=int, default=24, help="positions compared at the end of each")
    a = ap.parse_args(argv)
    inv = {"auto": None, "on": True, "off": False}[a.batch_invariant]
    path = str(models.resolve(a.model, progress=True))
    with Llama(path, n_ctx=max(a.tokens) + 16, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
               river=None, n_gpu_layers=a.n_gpu_layers, flash_attn=a.flash_attn, batch_invariant=inv) as llm:
        print(f"{path.rsplit('/', 1)[-1]}: devices {sorted(set(llm.devices()))}, batch_invariant {llm.batch_invariant}, "
              f"flash_attn {a.flash_attn}")
        worst = 0
        for n in a.tokens:
            diff, big, argmax = compare(llm, n, a.tail)
            worst = max(worst, diff)
            print(f"  {n} tokens: {diff}/{a.tail} positions differ between one step and single-token steps "
                  f"(largest {big:.3g}, argmax differs at {argmax})")
    return 0 if worst == 0 or not llm.batch_invariant else 1


if __name__ == "__main__":
    sys.exit(main())
