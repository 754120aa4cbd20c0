"""What llama-bench says of a model file: llama_model_desc ("llama 1B Q4_K - Medium"), its tensor
bytes (llama_model_size) and parameter count (llama_model_n_params), read by loading it with
llama.cpp (weights mmapped, nothing computed)."""
from __future__ import annotations

import ctypes
from typing import Dict

import llama_cpp

from pyriver.engine import interrupts
from pyriver.engine.logs import set_verbose
from pyriver.errors import ModelLoadError


def describe(path: str) -> Dict:
    set_verbose(False)   # the loader's lines are not the grid's output
    p = llama_cpp.llama_model_default_params()
    p.n_gpu_layers = 0
    with interrupts.loading(p):   # Ctrl-C cancels it
        m = llama_cpp.llama_model_load_from_file(path.encode("utf-8"), p)
    if not m:
        raise ModelLoadError(f"llama.cpp could not load {path}")
    try:
        buf = ctypes.create_string_buffer(128)
        llama_cpp.llama_model_desc(m, buf, ctypes.sizeof(buf))
        return {"type": buf.value.decode("utf-8", "replace"), "size": int(llama_cpp.llama_model_size(m)),
                "n_params": int(llama_cpp.llama_model_n_params(m))}
    finally:
        llama_cpp.llama_model_free(m)
