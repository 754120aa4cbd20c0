"""What a sampled token costs: pyriver's sampler (llama.cpp's llama_sampler_* chain over a token-data
array of pyriver's logits) against the NumPy chain it replaced (pyriver/engine/sampling.py before c55bcbc,
read from git), on real logits rows of a model (the 1.5B's vocabulary has 151,936 entries).

    python scripts/sampling_cost.py [MODEL] [--json out.json]

Each setting samples every row of a real answer's logits in turn, both samplers interleaved within
a repeat; the figure is the median per token over 5 repeats (ms), and each repeat's ratio."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

OLD_REV = "c55bcbc^"   # the last commit with the NumPy chain
SETTINGS = {
    "llama_cpp defaults (temp 0.8, top_k 40, top_p 0.95, min_p 0.05)":
        dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    "unfiltered (temp 1.0, top_k 0, top_p 1, min_p 0)": dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    "penalties (defaults + repeat 1.1, frequency 0.5, presence 0.4)":
        dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, frequency_penalty=0.5,
             presence_penalty=0.4),
    "greedy (temp 0)": dict(temperature=0.0),
}


def old_sampling() -> types.ModuleType:
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(["git", "-C", str(root), "show", f"{OLD_REV}:pyriver/engine/sampling.py"], check=True,
                         capture_output=True, text=True).stdout
    mod = types.ModuleType("old_sampling")
    sys.modules[mod.__name__] = mod   # dataclasses look the module up
    exec(compile(src, "old_sampling.py", "exec"), mod.__dict__)
    return mod


def logits_rows(model: str, n: int):
    """n rows of real logits: a greedy answer's decode steps, and its tokens as the history."""
    from pyriver import Llama
    from pyriver import models
    from pyriver.tools.prompts import SERVE_EDIT_PROMPTS
    llm = Llama(str(models.resolve(model)), n_ctx=1024, verbose=False, river=None, lossless=False)
    prompt = SERVE_EDIT_PROMPTS[0][1]
    toks = llm.tokenize(prompt.encode())
    llm.eval(toks)
    rows, hist = [], list(toks)
    for _ in range(n):
        row = np.array(llm._last_logits, dtype=np.float32)
        rows.append(row)
        t = int(np.argmax(row))
        hist.append(t)
        llm.eval([t])
    llm.close()
    return rows, hist


def per_token(make, rows, hist, n_prompt) -> float:
    s = make()
    t0 = time.perf_counter()
    for i, row in enumerate(rows):
        s.sample(row, hist[:n_prompt + i])
    return (time.perf_counter() - t0) / len(rows) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    ap.add_argument("-n", type=int, default=48, help="logits rows (tokens) per repeat")
    ap.add_argument("-r", "--repeats", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    from pyriver.engine import sampling as new
    old = old_sampling()
    rows, hist = logits_rows(a.model, a.n)
    n_prompt = len(hist) - a.n
    out = {"model": a.model, "n_vocab": int(rows[0].size), "tokens": a.n, "repeats": a.repeats, "settings": {}}
    print(f"{a.model}: {rows[0].size} logits a row, {a.n} rows, {a.repeats} repeats (ms a token)")
    for name, kw in SETTINGS.items():
        runs = []
        for r in range(a.repeats):
            o = per_token(lambda: old.Sampler(old.SamplingParams(**kw), seed=r), rows, hist, n_prompt)
            n = per_token(lambda: new.Sampler(new.SamplingParams(**kw), seed=r, n_vocab=rows[0].size),
                          rows, hist, n_prompt)
            runs.append((o, n))
        o_med, n_med = statistics.median(x for x, _ in runs), statistics.median(y for _, y in runs)
        ratios = [round(y / x, 3) for x, y in runs]
        out["settings"][name] = {"numpy_ms": round(o_med, 4), "llama_cpp_chain_ms": round(n_med, 4),
                                 "ratio_each_repeat": ratios}
        print(f"  {name}: NumPy {o_med:.3f}, llama.cpp chain {n_med:.3f} (ratio {statistics.median(ratios):.2f}; "
              f"each repeat {ratios})")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
