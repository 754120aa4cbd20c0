"""A model's verify steps with one type's tiled kernel off and on (issue 71): costcurve.measure's
ratios (an n-row step over the single steps beside it) in rounds that alternate off / on, each a
fresh context (the switch holds for graphs built after it), and with --tables the automatic tables
(costcurve.auto, as lossless mode measures them) both ways, written as JSON for workload_replay.py.

    python scripts/tiled_verify_ab.py MODEL --type q4_K --rounds 2 [--tables PREFIX]
"""
from __future__ import annotations

import argparse
import json
import statistics

from pyriver import Llama, models
from pyriver.engine import debug
from pyriver.speculative import costcurve
from pyriver.api.drafts import COST_PROMPT


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--type", default="q4_K")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sizes", type=int, nargs="+", default=[2, 3, 4, 6, 8, 12, 16, 24, 32])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tables", help="also write PREFIX-off.json and PREFIX-on.json: the automatic tables")
    a = p.parse_args()
    path = str(models.resolve(a.model))

    def llm():
        return Llama(path, n_ctx=1216, n_threads=a.threads, n_threads_batch=a.threads, flash_attn=True, verbose=False)

    rows = {False: [], True: []}
    for r in range(a.rounds):
        for on in (False, True):
            debug.tiled_gemm(a.type, on)
            with llm() as m:
                prompt = m.tokenize(COST_PROMPT.encode())
                t = costcurve.table(costcurve.measure(m, a.sizes, a.repeats, prompt))
                runs = debug.tiled_gemm_runs(a.type)
            rows[on].append(t)
            print(f"round {r} {a.type} {'on ' if on else 'off'} (context {len(prompt)}, kernel runs so far {runs}): " +
                  "  ".join(f"{n}: {t[n]:.2f}" for n in a.sizes), flush=True)
    for on in (False, True):
        print(f"median {'on ' if on else 'off'}: " + "  ".join(f"{n}: {statistics.median(t[n] for t in rows[on]):.2f}" for n in a.sizes))
    if a.tables:
        for on in (False, True):
            debug.tiled_gemm(a.type, on)
            with llm() as m:
                cost, tile = costcurve.auto(m, m.tokenize(COST_PROMPT.encode()))
                out = f"{a.tables}-{'on' if on else 'off'}.json"
                with open(out, "w") as f:
                    f.write(costcurve.to_json(cost, path, a.threads, tile) + "\n")
                print(f"{out}: verify_tile_rows {tile}, " + json.dumps(cost.to_dict()["verify"]), flush=True)
    debug.tiled_gemm(a.type, True)


if __name__ == "__main__":
    main()
