"""The testing and benchmark knobs of native/pyriver_debug.h for a Llama (or a BatchDecoder): what
pyriver's own tests and benchmarks measure or provoke, not part of the product API."""
from __future__ import annotations

from typing import List, Optional, Sequence

from pyriver.engine.binding import check, ffi, last_error, lib
from pyriver.engine.native import NativeEngine


def _native(obj, what: str):
    """The native handle of a Llama or a BatchDecoder (pyriver.api.batch): its engine's model
    (what="model") or its context's (what="ctx"); these knobs are the native engine's."""
    engine, ctx = getattr(obj, "_engine", None), getattr(obj, "_ectx", None)
    h = getattr(engine, "model", None) if what == "model" else getattr(ctx, "handle", None)
    if not isinstance(engine, NativeEngine) or not h:
        raise ValueError(f"pyriver.engine.debug: the native engine's knob; this one runs on the {getattr(engine, 'name', None)} "
                         "engine (or is closed)")
    return h


def graph_runs(llm) -> int:
    """Graphs the Llama's context has computed since it was created."""
    return int(lib.pr_graph_runs(_native(llm, "ctx")))


def graph_input_reads(llm_or_batch) -> int:
    """Distinct tensors through which the last computed graph read its inputs (an input or a view of
    one): what the scheduler copies to a GPU or RPC device before each graph."""
    return int(lib.pr_graph_input_reads(_native(llm_or_batch, "ctx")))


def exit_forecasts(llm_or_batch):
    """(forecast, observed) exit blocks of each token of the last decode under exit_rule "predicted"
    or "guarded" (pr_exit_forecasts, pr_exit_observed): -1 where none; observed L-1 = no block at tau
    at full depth, -1 = the backbone ended at a forecast that was too early. A Llama or a BatchDecoder."""
    h = _native(llm_or_batch, "ctx")
    out = []
    for fn in (lib.pr_exit_forecasts, lib.pr_exit_observed):
        n = fn(h, ffi.NULL, 0)
        buf = ffi.new("int32_t[]", max(n, 1))
        fn(h, buf, n)
        out.append(list(buf[0:n]))
    return tuple(out)


def joined(llm) -> int:
    """Matrices the Llama's model joined at load (Q/K/V and gate/up of its CPU blocks)."""
    return int(lib.pr_model_joined(_native(llm, "model")))


TILED_TYPES = ("q4_1", "q4_K", "q6_K")


def tiled_gemm(type: str, on: Optional[bool] = None) -> int:
    """The tiled products of several tokens (native/tiled_gemm.h) of the matrices of a type (one of
    TILED_TYPES) in graphs built from now on (a context made after the call): on, off, or None to
    ask. Returns how many of the type's kernels graphs use (the switch, and the probes that found
    ggml's bits on this CPU): Q4_1 has one, Q6_K one for 2 to 7 rows and one for 8 to 24."""
    if type not in TILED_TYPES:
        raise ValueError(f"tiled_gemm: no tiled kernel for {type!r} (one of {TILED_TYPES})")
    return int(lib.pr_debug_tiled_gemm(type.encode(), -1 if on is None else int(bool(on))))


def tiled_gemm_runs(type: str) -> int:
    """Products the tiled kernel of a type computed in this process."""
    return int(lib.pr_debug_tiled_gemm_runs(type.encode()))


def tiled_revision() -> int:
    """The tiled kernels' revision (native/tiled_gemm.cpp): a step cost measured under another one,
    in a cache key beside tiled_in_use, is not this library's."""
    return int(lib.pr_debug_tiled_gemm_revision())


def tiled_in_use() -> str:
    """The tiled kernels graphs built from now on use, by type ("q4_1:1,q6_K:2"; a cost table
    measured with other kernels is not this setting's)."""
    return ",".join(f"{t}:{n}" for t in TILED_TYPES for n in [tiled_gemm(t)] if n)


def kv_fill(llm, value: float) -> None:
    """Fill every KV cache slot with value (rows a token reads must have been written)."""
    check(lib.pr_kv_fill(_native(llm, "ctx"), float(value)))


def place_layers(n_layer: int, n_gpu_layers: int, shares: Sequence[float]) -> List[int]:
    """Device index (into shares; -1: the CPU) of each block and then of the head, as a model with
    these devices would be placed."""
    out = ffi.new("int32_t[]", n_layer + 1 if n_layer > 0 else 1)
    check(lib.pr_place_layers(int(n_layer), int(n_gpu_layers), len(shares), ffi.new("float[]", list(shares)), out))
    return list(out)


COUNTER_FIELDS = ("graphs", "graph_changes", "graph_captures", "nodes", "syncs", "host_bytes", "host_bytes_pinned",
                  "reads")


def counters(llm_or_batch) -> dict:
    """What the context's steps since the last reset_counters cost a GPU (pr_context_counters,
    native/counters.cpp): graphs, graph_changes and graph_captures by ggml-cuda's rule for reusing a
    captured CUDA graph, nodes, host syncs, device-to-host bytes, those into the output buffer (pinned
    memory on a GPU: see output_buffer) and the device-to-host copies."""
    out = ffi.new("pr_counters *")
    check(lib.pr_context_counters(_native(llm_or_batch, "ctx"), out))
    return {f: int(getattr(out, f)) for f in COUNTER_FIELDS}


def output_buffer(llm_or_batch) -> dict:
    """The context's output buffer (a step's logits rows and exit similarities, an embed's rows;
    llama.cpp's output buffer): its buffer type's name and whether that is pinned memory (a GPU's
    host buffer type; on the CPU alone it is the CPU backend's, where a GPU's pinned buffer would be)."""
    pinned = ffi.new("int32_t *")
    name = lib.pr_context_output_buffer(_native(llm_or_batch, "ctx"), pinned)
    if name == ffi.NULL:
        raise ValueError(last_error())
    return {"type": ffi.string(name).decode(), "pinned": bool(pinned[0])}


def reset_counters(llm_or_batch) -> None:
    """Zero the counters (the first call also starts comparing graphs by ggml-cuda's rule)."""
    check(lib.pr_context_counters_reset(_native(llm_or_batch, "ctx")))
