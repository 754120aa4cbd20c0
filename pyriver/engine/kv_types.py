"""KV cache types: llama.cpp's (common/arg.cpp's kv_cache_types), by ggml type id and name, and its
rules for them, the same on both engines: a quantized V needs flash attention (without it V is
stored transposed, read a column at a time), and a quantized type's block must divide the head
dimension. Imports nothing (the CLI parses -ctk/-ctv without the native library or llama_cpp)."""
from __future__ import annotations

from typing import Tuple, Union

F16 = 1   # GGML_TYPE_F16: the default, llama.cpp's and pyriver's
# name -> (ggml type id, elements a block, bytes a block), in llama.cpp's order
TYPES = {
    "f32": (0, 1, 4),
    "f16": (1, 1, 2),
    "bf16": (30, 1, 2),
    "q8_0": (8, 32, 34),
    "q4_0": (2, 32, 18),
    "q4_1": (3, 32, 20),
    "iq4_nl": (20, 32, 18),
    "q5_0": (6, 32, 22),
    "q5_1": (7, 32, 24),
}
_BY_ID = {v[0]: k for k, v in TYPES.items()}


def allowed() -> str:
    return ", ".join(TYPES)


def type_id(value: Union[None, int, str]) -> int:
    """A cache type as llama_cpp.Llama's type_k/type_v take it (a ggml type id; None: f16) or by
    name (-ctk q8_0); others: ValueError with llama.cpp's message."""
    if value is None:
        return F16
    if isinstance(value, str):
        if value in TYPES:
            return TYPES[value][0]
        raise ValueError(f"Unsupported cache type: {value} (allowed values: {allowed()})")
    if isinstance(value, bool) or not isinstance(value, int) or value not in _BY_ID:
        raise ValueError(f"Unsupported cache type: {value!r} (allowed values: {allowed()}, or their ggml type ids)")
    return int(value)


def name(tid: int) -> str:
    return _BY_ID[tid]


def quantized(tid: int) -> bool:
    return TYPES[_BY_ID[tid]][1] > 1


def tileable(type_k: int, type_v: int) -> bool:
    """Whether flash attention's tiled kernel reads this cache (graph.cpp's rule: F16 or F32, K as V)."""
    return type_k == type_v and name(type_k) in ("f16", "f32")


def row_bytes(tid: int, n: int) -> int:
    """Bytes of n elements of a cache row (ggml_row_size)."""
    _, blck, size = TYPES[_BY_ID[tid]]
    return n // blck * size


def check(type_k: Union[None, int, str], type_v: Union[None, int, str], flash_attn: bool,
          n_embd_head: int = 0) -> Tuple[int, int]:
    """The (type_k, type_v) ids of a context, or ValueError with llama.cpp's message
    (llama_init_from_model's checks)."""
    k, v = type_id(type_k), type_id(type_v)
    if quantized(v) and not flash_attn:
        raise ValueError(f"quantized V cache requires flash_attn to be enabled (type_v {name(v)}; "
                         "llama.cpp's rule: without flash attention V is stored transposed)")
    for side, t in (("K", k), ("V", v)):
        blck = TYPES[name(t)][1]
        if n_embd_head and n_embd_head % blck:
            raise ValueError(f"{side} cache type {name(t)} with block size {blck} does not divide "
                             f"n_embd_head_{side.lower()}={n_embd_head}")
    return k, v


def describe(type_k: int, type_v: int, k_bytes: int, v_bytes: int) -> dict:
    """A context's cache as /props and Llama.kv_cache() report it."""
    return {"type_k": name(type_k), "type_v": name(type_v), "k_bytes": int(k_bytes), "v_bytes": int(v_bytes),
            "bytes": int(k_bytes) + int(v_bytes)}


def line(d: dict) -> str:
    """describe()'s dict in llama.cpp's log words (llama_kv_cache: size = ..., K (q8_0): ..., V (...): ...)."""
    mib = 1024.0 * 1024.0
    return (f"KV cache size = {d['bytes'] / mib:.2f} MiB, K ({d['type_k']}): {d['k_bytes'] / mib:.2f} MiB, "
            f"V ({d['type_v']}): {d['v_bytes'] / mib:.2f} MiB")
