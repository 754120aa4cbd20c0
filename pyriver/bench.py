"""`pyriver bench`: pyriver against llama.cpp (llama-cpp-python) on the same GGUF and threads.

Every repeat of every engine runs in a fresh process (so peak RSS is that engine's alone), and
the engines alternate within each repeat (so machine noise falls on both). Reported: medians,
min and max, and pyriver / llama.cpp ratios. Timings exclude model loading."""
from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Dict, List

ENGINES = ("pyriver", "llama.cpp")
TEXT = ("The river carries the water of the mountains down to the sea. Along its banks, towns grew where "
        "boats could land, and people traded grain, wool and stories. ")


def _prompt(vocab_tokenize, n: int) -> List[int]:
    toks: List[int] = []
    while len(toks) < n:
        toks += vocab_tokenize(TEXT.encode())
    return toks[:n]


def worker(engine: str, model: str, threads: int, n_prompt: int, n_gen: int) -> Dict:
    import numpy as np
    n_ctx = n_prompt + n_gen + 8
    if engine == "pyriver":
        from pyriver import Llama
        llm = Llama(model, n_ctx=n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads, verbose=False)
        tokenize = lambda b: llm.tokenize(b, add_bos=False)
        prefill = lambda t: llm.eval(t)[-1]
        step = lambda t: llm.eval([t])[-1]
    else:
        import llama_cpp
        # n_batch = n_ctx keeps llama-cpp-python's score buffer as long as the run; n_ubatch = 512
        # makes llama.cpp compute the prompt in the same 512-token steps as pyriver.
        llm = llama_cpp.Llama(model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=512, n_threads=threads,
                              n_threads_batch=threads, verbose=False)
        tokenize = lambda b: llm.tokenize(b, add_bos=False)

        def prefill(t):
            llm.eval(t)
            return llm.scores[llm.n_tokens - 1]

        def step(t):
            llm.eval([t])
            return llm.scores[llm.n_tokens - 1]
    prompt = _prompt(tokenize, n_prompt)
    t0 = time.perf_counter()
    logits = prefill(prompt)
    t1 = time.perf_counter()
    for _ in range(n_gen):
        logits = step(int(np.argmax(logits)))
    t2 = time.perf_counter()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"prefill_tok_s": n_prompt / (t1 - t0), "decode_tok_s": n_gen / (t2 - t1), "peak_rss_mib": rss_kb / 1024.0}


def _run_worker(engine, model, threads, n_prompt, n_gen) -> Dict:
    cmd = [sys.executable, "-m", "pyriver.bench", "--worker", engine, model, str(threads), str(n_prompt), str(n_gen)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{engine} worker failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _summary(vals: List[float]) -> Dict:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "values": vals}


def _sha256(path: str) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def main(a) -> int:
    from . import models
    path = str(models.resolve(a.model, progress=True))
    runs: Dict[str, List[Dict]] = {e: [] for e in ENGINES}
    try:
        from tqdm import tqdm
        bar = tqdm(total=a.repeats * len(ENGINES), desc="bench", unit="run", file=sys.stderr)
    except ImportError:  # pragma: no cover
        bar = None
    try:
        for r in range(a.repeats):
            order = ENGINES if r % 2 == 0 else ENGINES[::-1]
            for e in order:
                runs[e].append(_run_worker(e, path, a.threads, a.prompt_tokens, a.gen_tokens))
                if bar:
                    bar.update(1)
    except KeyboardInterrupt:
        print("\ninterrupted: reporting the repeats that finished", file=sys.stderr)
    finally:
        if bar:
            bar.close()
    n = min(len(v) for v in runs.values())
    if n == 0:
        print("no complete repeat", file=sys.stderr)
        return 1
    metrics = ("prefill_tok_s", "decode_tok_s", "peak_rss_mib")
    res = {
        "conditions": {
            "model": path, "model_sha256": _sha256(path), "threads": a.threads, "prompt_tokens": a.prompt_tokens,
            "gen_tokens": a.gen_tokens, "repeats": n, "machine": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "engines": {e: {m: _summary([x[m] for x in runs[e][:n]]) for m in metrics} for e in ENGINES},
    }
    res["ratios"] = {m: res["engines"]["pyriver"][m]["median"] / res["engines"]["llama.cpp"][m]["median"] for m in metrics}
    print(f"\nmodel {os.path.basename(path)}  threads {a.threads}  prompt {a.prompt_tokens}  gen {a.gen_tokens}  repeats {n}")
    print(f"{'metric':<16}{'pyriver median [min..max]':>32}{'llama.cpp median [min..max]':>34}{'ratio':>8}")
    for m in metrics:
        p, l = res["engines"]["pyriver"][m], res["engines"]["llama.cpp"][m]
        print(f"{m:<16}{p['median']:>12.1f} [{p['min']:.1f}..{p['max']:.1f}]".ljust(48)
              + f"{l['median']:>12.1f} [{l['min']:.1f}..{l['max']:.1f}]".ljust(34) + f"{res['ratios'][m]:>8.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 7 and sys.argv[1] == "--worker":
        e, mdl, th, npr, ng = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
        print(json.dumps(worker(e, mdl, th, npr, ng)))
    else:
        print("usage: pyriver bench MODEL (the worker mode is internal)", file=sys.stderr)
        sys.exit(2)
