"""How much of River's error is the exited token's own, and how much the K/V it leaves behind
(docs/river-qwen1.5b.md, "The K/V of exited tokens").

Teacher-forced along full depth's greedy continuations (as `pyriver sweep`): each step runs under
the exit rule and its logits judge the next position. In the "recomputed" mode a step that exited
is then cut from the cache and run again at full depth (exits off), so every position's K/V is
full depth's and later tokens never read a river-written K/V; the exited token's prediction is
still the river's. The recomputation's own logits are full depth's on full depth's cache, so they
must agree everywhere (checked: `recomputed_logits_top1`).

    python scripts/river_kv_recompute.py MODEL_Q8_0 --river q4_0 --tau 0.95 0.97 0.98 --limit 8 -n 48 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from pyriver.api.llama import Llama
from pyriver.tools import datasets
from pyriver.tools.engine import references
from pyriver.tools.results import conditions, write_json


def run(llm, refs, tau: float, mn: int, recompute: bool) -> dict:
    """Top-1 agreement over every position (the prompt's logits judge the first), split by whether
    the judging step exited; exits; with recompute, the agreement of the full-depth reruns."""
    L = llm.info["n_layer"]
    agree = total = 0
    by = {"exited": [0, 0], "full depth": [0, 0]}
    rerun = [0, 0]
    exits = []
    for r in refs:
        cont = r["continuation"]
        llm.set_exit(tau, mn)
        llm.reset()
        logits = llm.decode_logits(r["tokens"])[-1]   # the prompt: full depth
        agree += int(logits.argmax()) == cont[0]
        total += 1
        for i, tok in enumerate(cont[:-1]):
            logits = llm.decode_logits([tok])[-1]
            e = llm.last_exits[0]
            exits.append(e)
            hit = int(logits.argmax()) == cont[i + 1]
            agree += hit
            total += 1
            b = by["exited" if e < L - 1 else "full depth"]
            b[0] += hit
            b[1] += 1
            if recompute and e < L - 1:
                llm.n_tokens = llm.n_tokens - 1
                llm.set_exit(2.0, mn)
                full = llm.decode_logits([tok])[-1]
                llm.set_exit(tau, mn)
                rerun[0] += int(full.argmax()) == cont[i + 1]
                rerun[1] += 1
    ex = np.asarray(exits)
    out = {"top1_agreement": agree / total, "positions": total,
           "top1_exited": by["exited"][0] / max(1, by["exited"][1]), "exited_positions": by["exited"][1],
           "top1_full_depth": by["full depth"][0] / max(1, by["full depth"][1]), "full_depth_positions": by["full depth"][1],
           "mean_exit_layer": float(ex.mean()), "exit_histogram": {int(k): int(v) for k, v in zip(*np.unique(ex, return_counts=True))}}
    if recompute:
        out["recomputed_logits_top1"] = rerun[0] / max(1, rerun[1])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--river", default="q4_0")
    p.add_argument("--tau", type=float, nargs="+", default=[0.95, 0.97, 0.98])
    p.add_argument("--min-exit-layer", type=int, default=4)
    p.add_argument("--prompts", default=None)
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("-n", type=int, default=48)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    kw = dict(n_ctx=2048, n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    t0 = time.time()
    llm = Llama(a.model, river=a.river, exit_threshold=2.0, **kw)
    llm.set_exit(2.0, a.min_exit_layer)   # references at full depth, on the same context
    prompts = datasets.subset(datasets.load_prompts(a.prompts), a.limit)
    refs = references(llm, prompts, a.n)
    res = {"conditions": conditions(a.model, a.threads, river=a.river, sidecar=llm.river_path, n_layer=llm.info["n_layer"],
                                    min_exit_layer=a.min_exit_layer, prompt_set=datasets.set_name(a.prompts, a.limit),
                                    prompts=len(refs), tokens_per_prompt=a.n),
           "points": []}
    for tau in a.tau:
        for recompute in (False, True):
            pt = {"tau": tau, "kv": "recomputed at full depth" if recompute else "river-written",
                  **run(llm, refs, tau, a.min_exit_layer, recompute)}
            print(json.dumps(pt), file=sys.stderr, flush=True)
            res["points"].append(pt)
    llm.close()
    res["seconds"] = time.time() - t0
    print(json.dumps(res, indent=1))
    if a.json:
        write_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
