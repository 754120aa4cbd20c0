"""Median milliseconds of a model's verify steps (logits for every row) of a few sizes, after the cost
prompt, in one process: run it alternately under two builds of the library to compare a kernel end to
end (a development build: PYTHONPATH=CHECKOUT PYRIVER_LIB_DIR=CHECKOUT/build).

    python scripts/verify_steps_ms.py MODEL LABEL [--sizes 4 8 12 --passes 40 --threads 2]
"""
from __future__ import annotations

import argparse
import statistics
import time

from pyriver import Llama, models
from pyriver.api.drafts import COST_PROMPT
from pyriver.speculative import costcurve


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("label")
    p.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 12])
    p.add_argument("--passes", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    m = Llama(str(models.resolve(a.model)), n_ctx=1216, n_threads=a.threads, n_threads_batch=a.threads,
              flash_attn=True, verbose=False)
    prompt = m.tokenize(COST_PROMPT.encode())
    m.decode_logits(prompt, prompt=True)
    toks = (prompt * (1 + max(a.sizes) // len(prompt)))[:max(a.sizes)]
    ms = {n: [] for n in a.sizes}
    for _ in range(a.passes):   # the sizes rotated in each pass: a spell of load falls on all of them
        for n in a.sizes:
            t0 = time.perf_counter()
            m.decode_logits(toks[:n], logits_all=True, prompt=costcurve.VERIFY)
            ms[n].append(1000 * (time.perf_counter() - t0))
            m.context.truncate(len(prompt))
    m.close()
    print(a.label, "  ".join(f"{n} rows {statistics.median(v):.2f} ms" for n, v in ms.items()), flush=True)


if __name__ == "__main__":
    main()
