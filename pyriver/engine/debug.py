"""The testing and benchmark knobs of native/pyriver_debug.h for a Llama: what pyriver's own tests
and benchmarks measure or provoke, not part of the product API."""
from __future__ import annotations

from typing import List, Sequence

from ..native import check, ffi, lib


def _native(llm, handle: str):
    """The Llama's native handle; these knobs are the native engine's."""
    h = getattr(llm, handle)
    if not h:
        raise ValueError(f"pyriver.debug: the native engine's knob; this Llama runs on the {getattr(llm, 'engine', None)} "
                         "engine (or is closed)")
    return h


def graph_runs(llm) -> int:
    """Graphs the Llama's context has computed since it was created."""
    return int(lib.pr_graph_runs(_native(llm, "_native_ctx")))


def joined(llm) -> int:
    """Matrices the Llama's model joined at load (Q/K/V and gate/up of its CPU blocks)."""
    return int(lib.pr_model_joined(_native(llm, "_native_model")))


def kv_fill(llm, value: float) -> None:
    """Fill every KV cache slot with value (rows a token reads must have been written)."""
    check(lib.pr_kv_fill(_native(llm, "_native_ctx"), float(value)))


def place_layers(n_layer: int, n_gpu_layers: int, shares: Sequence[float]) -> List[int]:
    """Device index (into shares; -1: the CPU) of each block and then of the head, as a model with
    these devices would be placed."""
    out = ffi.new("int32_t[]", n_layer + 1 if n_layer > 0 else 1)
    check(lib.pr_place_layers(int(n_layer), int(n_gpu_layers), len(shares), ffi.new("float[]", list(shares)), out))
    return list(out)
