"""One decode step of pyriver against one of llama.cpp (llama-cpp-python), in one process, the
steps alternated (first engine swapped every step) so that machine noise falls on both alike; the
logits are checked equal bit for bit after the prompt and every step (docs/bench/default-cpu.md).

    python scripts/decode_pair.py MODEL [N_STEPS] [N_PROMPTS]

Prints each engine's median step (ms) and the median of the per-step ratios llama.cpp / pyriver
(> 1: pyriver's step is faster); with N_PROMPTS, the same for the 512-token prompt, run that many
times by each engine (from an empty cache, alternated) before the steps.
"""
import json, sys, time
import numpy as np
from pyriver import Llama
from pyriver.tools.engine import LlamaCppEngine
from pyriver.tools.worker import WARMUP, text_prompt

path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100
n_prompts = int(sys.argv[3]) if len(sys.argv) > 3 else 0
n_ctx = 512 + n + WARMUP + 8
engines = {"pyriver": Llama(path, n_ctx=n_ctx, n_batch=512, n_threads=2, n_threads_batch=2, verbose=False, river=None),
           "llama.cpp": LlamaCppEngine(path, n_ctx, 2)}
prompt = text_prompt(lambda b: engines["llama.cpp"].tokenize(b, add_bos=False), 512)
prompt_ms = {k: [] for k in engines}
for i in range(n_prompts + 1):   # the first of each is a warm-up
    for k in (("pyriver", "llama.cpp") if i % 2 == 0 else ("llama.cpp", "pyriver")):
        engines[k].reset()
        t = time.perf_counter()
        engines[k].decode_logits(prompt)
        prompt_ms[k].append(1000 * (time.perf_counter() - t))
logits = {k: (e.reset(), e.decode_logits(prompt)[-1])[1] for k, e in engines.items()}
assert np.array_equal(logits["pyriver"], logits["llama.cpp"]), "prompt logits differ"
ms = {k: [] for k in engines}
for i in range(WARMUP + n):
    for k in (("pyriver", "llama.cpp") if i % 2 == 0 else ("llama.cpp", "pyriver")):
        tok = int(np.argmax(logits[k]))
        t = time.perf_counter()
        logits[k] = engines[k].decode_logits([tok])[-1]
        ms[k].append(1000 * (time.perf_counter() - t))
    assert np.array_equal(logits["pyriver"], logits["llama.cpp"]), f"step {i}: logits differ"
py, lc = np.array(ms["pyriver"][WARMUP:]), np.array(ms["llama.cpp"][WARMUP:])
out = {"steps": n, "pyriver_ms": round(float(np.median(py)), 2), "llama_cpp_ms": round(float(np.median(lc)), 2),
       "speed_ratio_per_step": round(float(np.median(lc / py)), 4)}
if n_prompts:
    pp, lp = np.array(prompt_ms["pyriver"][1:]), np.array(prompt_ms["llama.cpp"][1:])
    out.update(prompts=n_prompts, pyriver_prompt_ms=round(float(np.median(pp)), 1),
               llama_cpp_prompt_ms=round(float(np.median(lp)), 1), speed_ratio_per_prompt=round(float(np.median(lp / pp)), 4))
print(json.dumps(out))
