"""The server's drafters measured: `pyriver serve` without a drafter, with a draft model
(--model-draft) and with n-gram lookup (--spec-type ngram-simple), greedy, at 1 and 4 concurrent
streams, on open-ended prompts and on a code edit (the answer repeats most of its prompt, which
n-gram lookup drafts). Every server in its own process; within each repeat the servers rotate;
reported: medians over repeats of aggregate decode tok/s, and of each drafter's ratio to no drafter
within a repeat, with the drafts kept (timings of a /completion per prompt).

  python -m pyriver_dev.draft_bench [--model M] [--draft D] [--repeats 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Dict, List

from pyriver.tools.results import write_json
from pyriver.tools.serve_bench import PROMPTS, _get, _port, _Server, _stream

CODE = '''def mean(values):
    total = 0
    count = 0
    for v in values:
        total += v
        count += 1
    if count == 0:
        return 0.0
    return total / count


def variance(values):
    m = mean(values)
    total = 0
    count = 0
    for v in values:
        total += (v - m) ** 2
        count += 1
    if count == 0:
        return 0.0
    return total / count
'''
EDIT = [f"Here is a Python module:\n```python\n{CODE}```\nThe same module with `values` renamed to `{name}`:\n```python\n"
        for name in ("xs", "data", "samples", "items")]
WORKLOADS = {"open": PROMPTS[:4], "code edit": EDIT}


def run(url: str, prompts: List[str], k: int, n: int) -> float:
    recs = [dict() for _ in range(k)]
    t0 = time.perf_counter()
    ts = [threading.Thread(target=_stream, args=(url, prompts[i % len(prompts)], n, t0, recs[i])) for i in range(k)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(r["tokens"] for r in recs) / (max(r["end"] for r in recs) - t0)


def kept(url: str, prompts: List[str], n: int) -> Dict:
    d = a = 0
    for p in prompts:
        t = json.loads(_get(url + "/completion", {"prompt": p, "n_predict": n, "temperature": 0.0})[1])["timings"]
        d, a = d + t.get("draft_n", 0), a + t.get("draft_n_accepted", 0)
    return {"drafted": d, "accepted": a}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pyriver_dev.draft_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="the target (default SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="the draft model (default: the target itself)")
    p.add_argument("--draft-max", type=int, default=4)
    p.add_argument("--ngram", default="3,16", help="ngram-simple size_n,size_m")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    p.add_argument("--gen-tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    from pyriver import models
    path = str(models.resolve(a.model))
    draft = str(models.resolve(a.draft)) if a.draft else path
    n, m = a.ngram.split(",")
    base = [sys.executable, "-m", "pyriver.server", path, "-t", str(a.threads), "--ctx", "1024",
            "--parallel", str(max(a.streams))]
    flags = {"no drafter": [], "draft model": ["--model-draft", draft, "--spec-draft-n-max", str(a.draft_max)],
             "ngram-simple": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", n,
                              "--spec-ngram-simple-size-m", m]}
    srvs = []
    try:
        for name, f in flags.items():
            srvs.append(_Server(name, base + f + ["--port", str(q := _port())], q))
        res = {s.name: {w: {k: [] for k in a.streams} for w in WORKLOADS} for s in srvs}
        for s in srvs:   # warm-up
            run(s.url, PROMPTS, 1, 8)
        for rep in range(a.repeats):
            order = srvs[rep % len(srvs):] + srvs[:rep % len(srvs)]
            for w, prompts in WORKLOADS.items():
                for k in a.streams:
                    for s in order:
                        res[s.name][w][k].append(run(s.url, prompts, k, a.gen_tokens))
        drafts = {s.name: {w: kept(s.url, pr, a.gen_tokens) for w, pr in WORKLOADS.items()} for s in srvs[1:]}
    finally:
        for s in srvs:
            s.close()
    ref = res["no drafter"]
    print(f"{'server':<14}{'workload':<11}{'streams':>8}{'tok/s':>8}{'ratio':>8}  drafts kept")
    out = {}
    for name, ws in res.items():
        for w, ks in ws.items():
            for k, runs in ks.items():
                med = statistics.median(runs)
                ratio = statistics.median(x / y for x, y in zip(runs, ref[w][k]))
                dk = drafts.get(name, {}).get(w)
                out.setdefault(name, {}).setdefault(w, {})[k] = {"tok_s": med, "ratio": ratio, "runs": runs}
                print(f"{name:<14}{w:<11}{k:>8}{med:>8.1f}{ratio:>7.2f}x  "
                      + (f"{dk['accepted']}/{dk['drafted']}" if dk else "-"))
    print(f"medians over {a.repeats} repeats; {a.gen_tokens} tokens a stream, greedy; {a.threads} threads; "
          f"draft max {a.draft_max}; ngram-simple {a.ngram}")
    if a.json:
        write_json(a.json, {"results": out, "drafts": drafts, "args": vars(a)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
