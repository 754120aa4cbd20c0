"""Diagnostic: how often ggml-cuda re-captures or skips its CUDA graph in decode (its debug log)."""
import os, sys, io, collections
import numpy as np
import llama_cpp
from llama_cpp import _logger
lines = []
@llama_cpp.llama_log_callback
def cb(level, text, user):
    lines.append(text.decode(errors="replace"))
llama_cpp.llama_log_set(cb, None)
path, engine, fa = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
toks = list(range(100, 612))
if engine == "pyriver":
    import pyriver.api.llama as PL
    _logger.set_verbose = lambda v: None
    from pyriver import Llama
    llm = Llama(path, n_ctx=1024, n_gpu_layers=-1, flash_attn=fa, verbose=True, river=None)
    llama_cpp.llama_log_set(cb, None)
    ev = lambda t: llm.decode_logits(t)[-1]
else:
    llm = llama_cpp.Llama(path, n_ctx=1024, n_batch=1024, n_ubatch=512, n_gpu_layers=-1, flash_attn=fa, verbose=True)
    llama_cpp.llama_log_set(cb, None)
    def ev(t):
        llm.decode_logits(t)
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(llm.n_vocab(),))
lines.clear()
tok = int(np.argmax(ev(toks)))
n0 = len(lines)
for _ in range(40):
    tok = int(np.argmax(ev([tok])))
c = collections.Counter(l.strip().split(":", 1)[-1].strip()[:60] for l in lines[n0:] if "graph" in l.lower())
print(engine, "fa" if fa else "nofa", "log lines during decode:", len(lines) - n0, dict(c))
