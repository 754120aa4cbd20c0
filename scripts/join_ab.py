"""Joined Q/K/V and gate/up (native/model.cpp, join_projections) against the same model not joined
(PYRIVER_JOIN=0 at its load) and llama.cpp (llama-cpp-python), all three in one process, each
prompt and decode step rotated among them; logits checked equal bit for bit after every step.

    python scripts/join_ab.py MODEL [N_STEPS] [N_PROMPTS]

Prints per engine its median step (ms), the median of the per-step ratios llama.cpp / engine and
the same for the 512-token prompt (> 1: faster than llama.cpp).
"""
import json, os, sys, time
import numpy as np
from pyriver import Llama
from pyriver.engine import debug
from pyriver.tools.engine import LlamaCppEngine
from pyriver.tools.worker import WARMUP, text_prompt
path = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 150
n_prompts = int(sys.argv[3]) if len(sys.argv) > 3 else 6
n_ctx = 512 + n + WARMUP + 8
mk = lambda: Llama(path, n_ctx=n_ctx, n_batch=512, n_threads=2, n_threads_batch=2, verbose=False, river=None)
J = mk()
assert debug.joined(J) > 0
os.environ["PYRIVER_JOIN"] = "0"; P = mk(); del os.environ["PYRIVER_JOIN"]
assert debug.joined(P) == 0
engines = {"joined": J, "plain": P, "llama.cpp": LlamaCppEngine(path, n_ctx, 2)}
names = list(engines)
prompt = text_prompt(lambda b: engines["llama.cpp"].tokenize(b, add_bos=False), 512)
pm = {k: [] for k in names}
for i in range(n_prompts + 1):
    for k in names[i % 3:] + names[:i % 3]:
        engines[k].reset(); t = time.perf_counter(); engines[k].decode_logits(prompt); pm[k].append(time.perf_counter() - t)
logits = {k: (e.reset(), e.decode_logits(prompt)[-1])[1] for k, e in engines.items()}
ms = {k: [] for k in names}
for i in range(WARMUP + n):
    for k in names[i % 3:] + names[:i % 3]:
        tok = int(np.argmax(logits[k])); t = time.perf_counter(); logits[k] = engines[k].decode_logits([tok])[-1]; ms[k].append(time.perf_counter() - t)
    assert all(np.array_equal(logits[k], logits["llama.cpp"]) for k in ("joined", "plain")), f"step {i}: logits differ"
lc = np.array(ms["llama.cpp"][WARMUP:]); lp = np.array(pm["llama.cpp"][1:])
out = {}
for k in ("joined", "plain"):
    out[k] = {"step_ms": round(1000 * float(np.median(ms[k][WARMUP:])), 2), "step_ratio": round(float(np.median(lc / np.array(ms[k][WARMUP:]))), 4),
              "prompt_ratio": round(float(np.median(lp / np.array(pm[k][1:]))), 4)}
out["llama.cpp_step_ms"] = round(1000 * float(np.median(lc)), 2)
print(json.dumps(out))
