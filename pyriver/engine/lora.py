"""LoRA adapters, llama.cpp's: loaded onto a llama.cpp model (llama_adapter_lora_init, which checks the
file against the model: general.type "adapter", the model's architecture, tensors of its shapes) and
applied to a context at a scale each (llama_set_adapters_lora, as llama-cpp-python's Llama and
llama-server call it: every loaded adapter with its scale, 0 leaving it out). The native graphs have
no LoRA: a model with adapters runs on the llama.cpp engine (pyriver.engine.load)."""
from __future__ import annotations

import ctypes
import math
import os
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import llama_cpp

from pyriver.engine import interrupts
from pyriver.errors import ModelLoadError


@dataclass
class Adapter:
    path: str
    scale: float          # the scale a context gets when none is set (Llama's lora_scale, --lora-scaled)
    handle: object        # llama_adapter_lora_p
    task_name: str = ""
    prompt_prefix: str = ""


def check_scale(scale, what: str = "lora scale") -> float:
    """A scale as a float; ValueError for what is not a finite number."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"{what} must be a finite number, got {scale!r}")
    return float(scale)


def _meta(handle, key: str) -> str:
    buf = ctypes.create_string_buffer(1024)
    n = llama_cpp.llama_adapter_meta_val_str(handle, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else ""


def load(model, specs: Sequence[Tuple[str, float]]) -> List[Adapter]:
    """Each (path, scale) loaded onto model; ModelLoadError naming the file llama.cpp refused (its
    log, with verbose=True, says why). The adapters loaded before a refused one are freed."""
    out: List[Adapter] = []
    try:
        for path, scale in specs:
            scale = check_scale(scale)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"LoRA adapter not found: {path}")
            with interrupts.held():   # its log lines run Python: see interrupts
                h = llama_cpp.llama_adapter_lora_init(model, os.fspath(path).encode("utf-8"))
            if not h:
                raise ModelLoadError(f"llama.cpp could not load the LoRA adapter {path} (not an adapter of this "
                                     f"model's architecture and shapes? verbose=True shows its log)")
            out.append(Adapter(str(path), scale, h, _meta(h, "adapter.lora.task_name"),
                               _meta(h, "adapter.lora.prompt_prefix")))
    except BaseException:
        free(out)
        raise
    return out


def free(adapters: List[Adapter]) -> None:
    while adapters:
        llama_cpp.llama_adapter_lora_free(adapters.pop().handle)


def apply(ctx, adapters: Sequence[Adapter], scales: Sequence[float]) -> None:
    """Sets the context's adapters at these scales (one per adapter; llama.cpp does nothing when they
    are the ones set already)."""
    if len(scales) != len(adapters):
        raise ValueError(f"{len(scales)} LoRA scales for {len(adapters)} adapters")
    n = len(adapters)
    handles = (llama_cpp.llama_adapter_lora_p_ctypes * max(n, 1))(*[a.handle for a in adapters])
    values = (ctypes.c_float * max(n, 1))(*[float(s) for s in scales])
    if llama_cpp.llama_set_adapters_lora(ctx, handles, n, values):
        raise RuntimeError("llama.cpp refused the LoRA adapters")
