"""Diagnostic: GPU kernel time per decode step (torch.profiler's CUPTI tracing sees every kernel of
the process) against wall time, for llama.cpp and pyriver on the same file."""
import sys, time
import numpy as np
import torch
import llama_cpp
path, engine, fa = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
toks = list(range(100, 612))
if engine == "pyriver":
    from pyriver import Llama
    llm = Llama(path, n_ctx=1024, n_gpu_layers=-1, flash_attn=fa, verbose=False, river=None, n_threads=4)
    ev = lambda t: llm.decode_logits(t)[-1]
else:
    llm = llama_cpp.Llama(path, n_ctx=1024, n_batch=1024, n_ubatch=512, n_gpu_layers=-1, flash_attn=fa, verbose=False, n_threads=4)
    def ev(t):
        llm.decode_logits(t)
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(llm.n_vocab(),))
tok = int(np.argmax(ev(toks)))
for _ in range(20):
    tok = int(np.argmax(ev([tok])))
N = 30
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]) as prof:
    t0 = time.perf_counter()
    for _ in range(N):
        tok = int(np.argmax(ev([tok])))
    wall = (time.perf_counter() - t0) / N
ev_list = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
gpu = sum(e.device_time for e in ev_list) / N / 1000.0
by = {}
for e in ev_list:
    k = e.name[:70]
    d = by.setdefault(k, [0, 0.0]); d[0] += 1; d[1] += e.device_time
print(f"{engine} fa={int(fa)}: wall {wall*1000:.3f} ms/token, GPU busy {gpu:.3f} ms/token, kernels/token {len(ev_list)/N:.0f}")
for k, (n, t) in sorted(by.items(), key=lambda x: -x[1][1])[:14]:
    print(f"   {t/N/1000:7.3f} ms {n/N:6.1f}x  {k}")
# Per-call device time of the last step, in launch order, for the kernels named in DIAG_ORDER
import os
for pat in filter(None, os.environ.get("DIAG_ORDER", "").split(";")):
    calls = [e for e in ev_list if pat in e.name]
    per = len(calls) // N
    print(f"   order {pat}: " + " ".join(f"{e.device_time:.1f}" for e in calls[-per:]))
