"""Synthetic GGUF models for tests and benchmarks.

Writes ``llama``, ``qwen2``, ``qwen3`` and ``gemma3`` GGUF files with random (seeded, deterministic)
weights, small or large dimensions, and a *real* tokenizer copied from an
existing GGUF file, so that llama.cpp (and llama-cpp-python) can load and run
them.  Used for parity tests of pyriver against llama.cpp and for benchmarks.

Public API
----------
``write_llama(path, ...)``
    Write a synthetic llama model (f32 / f16 / q8_0 weights).
``write_model(path, arch=..., ...)``
    The same for any of ``ARCHS``, with their extra tensors and keys.
``quantize(src, dst, ftype)``
    Re-quantize a GGUF with ``llama_cpp.llama_model_quantize``
    (``"q4_0"``, ``"q4_1"``, ``"q8_0"``, ``"q4_k_m"``, ``"f16"``, ...).
``write_corrupt_variants(src, outdir)``
    Produce broken files (bad magic, truncations, unknown architecture, wrong
    tensor shape, missing tensor) for error-path tests.

Command line::

    python -m pyriver.synth OUT.gguf [--arch gemma3 --head-dim 48 --sliding-window 16] --layers 4 --embd 128 --heads 4 --heads-kv 2 \\
        --ff 352 --dtype f16 --seed 0 [--tokenizer-from SOME.gguf] [--untied]

Weight recipe (see ``write_llama``): every matrix is N(0, 1/fan_in) times a
per-tensor gain, the residual-branch output projections (attn_output,
ffn_down) are scaled by ``RESIDUAL_STD/sqrt(2*n_layer)`` so each block adds an
O(1/sqrt(n_layer)) update and the final residual RMS is ~``RESIDUAL_STD``
whatever the depth, token embeddings are small (``LOGIT_STD/sqrt(n_embd)``)
so the residual stream is dominated by the blocks (this avoids the
"predict the current token again" collapse of tied random embeddings), and the
output head gives logits with standard deviation ~``LOGIT_STD``.  Norm weights
are ``1 + 0.1*N(0,1)`` so that implementations that forget them are caught.

Only the standard library, numpy and gguf are imported at module level;
``llama_cpp`` and ``pyriver.models`` are imported lazily.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import itertools
import math
import os
import pathlib
import sys
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import gguf
from gguf import GGMLQuantizationType, GGUFValueType

__all__ = ["write_llama", "write_model", "ARCHS", "quantize", "write_corrupt_variants", "rewrite_kv", "LOGIT_STD"]

#: Target standard deviation of the output logits of a synthetic model.
LOGIT_STD = 3.0
#: Target RMS of the summed residual-branch outputs (all layers together).
RESIDUAL_STD = 3.0
#: E[silu(a)^2] for a ~ N(0,1): variance of silu(gate) * up at unit inputs.
_SWIGLU_VAR = 0.3559

# Default per-role gains (multiplied with the base std of each tensor).
_DEFAULT_GAINS = {
    "token_embd": 1.0,
    "output": 1.0,
    "attn_q": 1.25,  # q and k slightly larger -> attention scores std ~1.5
    "attn_k": 1.25,
    "attn_v": 1.0,
    "attn_output": 1.0,
    "ffn_gate": 1.0,
    "ffn_up": 1.0,
    "ffn_down": 1.0,
    "norm": 0.1,  # std of the jitter around 1.0 for RMSNorm weights
}

_FILE_TYPES = {"f32": 0, "f16": 1, "q8_0": 7}
_GGML_TYPES = {
    "f32": GGMLQuantizationType.F32,
    "f16": GGMLQuantizationType.F16,
    "q8_0": GGMLQuantizationType.Q8_0,
}
_CHUNK_ELEMS = 1 << 22  # elements generated per chunk (16 MiB of float32)
_ALIGNMENT_KEY = "general.alignment"


# --------------------------------------------------------------------------
# internal plan representation
# --------------------------------------------------------------------------

@dataclass
class _KV:
    value: Any
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None


@dataclass
class _Tensor:
    """One tensor to write: ``ne`` is in ggml order (ne0 = contiguous dim)."""

    name: str
    ne: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    chunks: Callable[[], Iterator[np.ndarray]]  # yields raw data pieces in order
    nbytes: int = 0

    def __post_init__(self) -> None:
        if not self.nbytes:
            self.nbytes = _nbytes(self.ne, self.ggml_type)


@dataclass
class _Plan:
    kv: dict[str, _KV] = field(default_factory=dict)  # insertion ordered
    tensors: list[_Tensor] = field(default_factory=list)

    def tensor(self, name: str) -> _Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


def _nbytes(ne: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    n = math.prod(ne)
    if ne[0] % block:
        raise ValueError(f"row size {ne[0]} is not a multiple of {block} for {qtype.name}")
    return n // block * type_size


# --------------------------------------------------------------------------
# reading metadata from an existing GGUF
# --------------------------------------------------------------------------

def _field_to_kv(f: Any) -> _KV:
    """Convert a ``gguf.ReaderField`` back into a writable value (raw bytes for strings)."""
    t0 = f.types[0]
    if t0 == GGUFValueType.ARRAY:
        if len(f.types) > 2:
            raise NotImplementedError(f"nested GGUF arrays are not supported ({f.name})")
        sub = f.types[-1] if len(f.types) > 1 else GGUFValueType.UINT8
        if not f.data:
            return _KV([], t0, sub)
        if sub == GGUFValueType.STRING:
            return _KV([bytes(f.parts[i]) for i in f.data], t0, sub)
        return _KV(np.concatenate([f.parts[i] for i in f.data]).tolist(), t0, sub)
    if t0 == GGUFValueType.STRING:
        return _KV(bytes(f.parts[f.data[0]]), t0)
    return _KV(f.parts[f.data[0]][0].item(), t0)


def _reader_kv(reader: gguf.GGUFReader) -> dict[str, _KV]:
    out: dict[str, _KV] = {}
    for name, f in reader.fields.items():
        if name.startswith("GGUF."):  # pseudo-fields: version, counts
            continue
        out[name] = _field_to_kv(f)
    return out


_TOKENIZER_CACHE: dict[tuple[str, int, int], dict[str, _KV]] = {}


def _tokenizer_kv(path: str | os.PathLike[str]) -> dict[str, _KV]:
    """All ``tokenizer.*`` metadata of a GGUF file (cached per process)."""
    p = os.path.realpath(os.fspath(path))
    st = os.stat(p)
    key = (p, st.st_size, st.st_mtime_ns)
    if key not in _TOKENIZER_CACHE:
        reader = gguf.GGUFReader(p, "r")
        kv = {k: _field_to_kv(f) for k, f in reader.fields.items() if k.startswith("tokenizer.")}
        if "tokenizer.ggml.tokens" not in kv:
            raise ValueError(f"{p}: no tokenizer.ggml.tokens metadata")
        _TOKENIZER_CACHE[key] = kv
        del reader
    return _TOKENIZER_CACHE[key]


def _default_tokenizer_path() -> str:
    try:
        from pyriver import models  # lazy: written concurrently, heavy deps possible
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "pyriver.models is not available to locate the default tokenizer GGUF; "
            "pass tokenizer_from=PATH explicitly"
        ) from e
    return os.fspath(models.resolve(None))


# --------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------

def _write_plan(path: pathlib.Path, plan: _Plan) -> pathlib.Path:
    """Write header + KV + tensor infos with GGUFWriter, then stream tensor data.

    Tensor data is appended chunk by chunk, so peak memory is one chunk (plus
    whatever a chunk generator holds), independent of model size.
    """
    kv = dict(plan.kv)
    arch_kv = kv.pop("general.architecture", None)
    arch = arch_kv.value if arch_kv is not None else "llama"
    if isinstance(arch, bytes):
        arch = arch.decode("utf-8")
    alignment = gguf.GGUF_DEFAULT_ALIGNMENT
    if _ALIGNMENT_KEY in kv:
        alignment = int(kv[_ALIGNMENT_KEY].value)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write_file(tmp, arch, alignment, kv, plan.tensors)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _write_file(tmp: pathlib.Path, arch: str, alignment: int, kv: dict[str, _KV],
                tensors: list[_Tensor]) -> None:
    writer = gguf.GGUFWriter(tmp, arch)
    writer.data_alignment = alignment
    try:
        for key, v in kv.items():
            if v.vtype == GGUFValueType.ARRAY and len(v.value) == 0:
                continue  # gguf-py cannot write empty arrays
            writer.add_key_value(key, v.value, v.vtype, v.sub_type)
        for t in tensors:
            # logical (numpy-order) shape with an explicit ggml type: no byte-shape conversion
            writer.add_tensor_info(t.name, tuple(reversed(t.ne)), np.dtype(np.float32), t.nbytes,
                                   raw_dtype=t.ggml_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
    finally:
        writer.close()

    def pieces(t: _Tensor) -> list[np.ndarray]:
        out = [np.ascontiguousarray(p) for p in t.chunks()]
        if any(b.dtype.byteorder == ">" for b in out):
            raise ValueError("big-endian tensor data")
        return out

    # Tensors are generated ahead on a thread pool (numpy's generators and casts release the
    # GIL), a window of them at a time, and written in order: an 8B model takes seconds per core.
    workers = max(1, min(os.cpu_count() or 1, 16))
    with open(tmp, "ab") as fout, concurrent.futures.ThreadPoolExecutor(workers) as pool:
        _pad(fout, fout.tell(), alignment)
        window: collections.deque = collections.deque()
        todo = iter(tensors)
        for t in itertools.islice(todo, workers):
            window.append((t, pool.submit(pieces, t)))
        while window:
            t, fut = window.popleft()
            written = 0
            for b in fut.result():
                fout.write(memoryview(b).cast("B"))
                written += b.nbytes
            del fut
            if written != t.nbytes:
                raise RuntimeError(f"{t.name}: wrote {written} bytes, expected {t.nbytes}")
            _pad(fout, written, alignment)
            nxt = next(todo, None)
            if nxt is not None:
                window.append((nxt, pool.submit(pieces, nxt)))


def _pad(fout: Any, n: int, alignment: int) -> None:
    pad = (-n) % alignment
    if pad:
        fout.write(b"\0" * pad)


def _tensor_seed(seed: int, name: str) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(name.encode())])


def _random_tensor(name: str, ne: tuple[int, ...], qtype: GGMLQuantizationType, seed: int,
                   std: float, mean: float = 0.0) -> _Tensor:
    """Tensor with elements ``mean + std * N(0,1)``, generated row-chunk by row-chunk.

    The float32 values do not depend on ``qtype``: f32/f16/q8_0 files written with
    the same seed hold the same weights up to rounding.
    """
    cols = ne[0]
    rows = math.prod(ne[1:]) if len(ne) > 1 else 1
    rows_per_chunk = max(1, _CHUNK_ELEMS // cols)

    def chunks() -> Iterator[np.ndarray]:
        rng = np.random.Generator(np.random.PCG64(_tensor_seed(seed, name)))
        for r0 in range(0, rows, rows_per_chunk):
            n = min(rows_per_chunk, rows - r0)
            x = rng.standard_normal((n, cols), dtype=np.float32)
            x *= np.float32(std)
            if mean:
                x += np.float32(mean)
            if qtype == GGMLQuantizationType.F32:
                yield x
            elif qtype == GGMLQuantizationType.F16:
                yield x.astype(np.float16)
            else:
                yield gguf.quants.quantize(x, qtype)

    return _Tensor(name, tuple(int(d) for d in ne), qtype, chunks)


def _gains(weight_scale: float | Mapping[str, float] | None) -> dict[str, float]:
    g = dict(_DEFAULT_GAINS)
    if weight_scale is None:
        return g
    if isinstance(weight_scale, Mapping):
        unknown = set(weight_scale) - set(g)
        if unknown:
            raise ValueError(f"unknown weight_scale roles {sorted(unknown)}; known: {sorted(g)}")
        for k, v in weight_scale.items():
            g[k] *= float(v)
        return g
    s = float(weight_scale)
    return {k: (v if k == "norm" else v * s) for k, v in g.items()}


#: Architectures :func:`write_model` writes, with the per-block tensors each adds to llama's.
ARCHS = ("llama", "qwen2", "qwen3", "gemma3")


def _model_plan(*, arch: str, n_layer: int, n_embd: int, n_head: int, n_head_kv: int, n_ff: int,
                n_ctx_train: int, rope_freq_base: float, rms_eps: float, tied_output: bool,
                dtype: str, seed: int, tokenizer_from: str | os.PathLike[str] | None,
                weight_scale: float | Mapping[str, float] | None,
                rope_scaling: Mapping[str, Any] | None, name: str | None = None,
                n_embd_head: int | None = None, sliding_window: int = 0,
                swa_pattern: int | list[bool] | None = None, rope_freq_base_swa: float | None = None,
                final_logit_softcapping: float | None = None, biases: bool = False) -> _Plan:
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    dtype = dtype.lower()
    if dtype not in _GGML_TYPES:
        raise ValueError(f"dtype must be one of {sorted(_GGML_TYPES)}, got {dtype!r}")
    for k, v in dict(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
                     n_ff=n_ff, n_ctx_train=n_ctx_train).items():
        if int(v) <= 0:
            raise ValueError(f"{k} must be positive, got {v}")
    if n_head % n_head_kv:
        raise ValueError(f"n_head={n_head} is not divisible by n_head_kv={n_head_kv}")
    if n_embd_head is None:
        if n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} is not divisible by n_head={n_head}")
        head_dim = n_embd // n_head
    else:
        head_dim = int(n_embd_head)
    if head_dim % 2 or head_dim <= 0:
        raise ValueError(f"head_dim={head_dim} must be even and positive for RoPE")
    if biases and arch != "llama":
        raise ValueError("biases=True is for llama files (qwen2 always has its Q/K/V biases)")
    if arch == "qwen2" and head_dim * n_head != n_embd:
        raise ValueError("qwen2 (as llama.cpp loads it) needs n_head * head_dim == n_embd")
    wtype = _GGML_TYPES[dtype]
    block = gguf.GGML_QUANT_SIZES[wtype][0]
    if n_embd % block or n_ff % block or (head_dim * n_head) % block:
        raise ValueError(f"dtype {dtype} needs n_embd, n_ff and n_head*head_dim to be multiples of {block}")

    tok_path = tokenizer_from if tokenizer_from is not None else _default_tokenizer_path()
    tok_kv = _tokenizer_kv(tok_path)
    n_vocab = len(tok_kv["tokenizer.ggml.tokens"].value)

    n_embd_q = n_head * head_dim
    n_embd_kv = n_head_kv * head_dim
    g = _gains(weight_scale)

    plan = _Plan()
    U32, F32, STR = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING
    kv = plan.kv
    A = arch + "."
    kv["general.architecture"] = _KV(arch, STR)
    kv["general.type"] = _KV("model", STR)
    kv["general.name"] = _KV(name or f"pyriver-synth-{arch}-L{n_layer}-E{n_embd}-H{n_head}"
                                      f"-KV{n_head_kv}-F{n_ff}-{dtype}-s{seed}", STR)
    kv["general.file_type"] = _KV(_FILE_TYPES[dtype], U32)
    if dtype not in ("f32", "f16"):
        kv["general.quantization_version"] = _KV(gguf.GGML_QUANT_VERSION, U32)
    kv[A + "block_count"] = _KV(n_layer, U32)
    kv[A + "context_length"] = _KV(n_ctx_train, U32)
    kv[A + "embedding_length"] = _KV(n_embd, U32)
    kv[A + "feed_forward_length"] = _KV(n_ff, U32)
    kv[A + "attention.head_count"] = _KV(n_head, U32)
    kv[A + "attention.head_count_kv"] = _KV(n_head_kv, U32)
    if n_embd_head is not None:
        kv[A + "attention.key_length"] = _KV(head_dim, U32)
        kv[A + "attention.value_length"] = _KV(head_dim, U32)
    kv[A + "rope.freq_base"] = _KV(float(rope_freq_base), F32)
    kv[A + "attention.layer_norm_rms_epsilon"] = _KV(float(rms_eps), F32)
    kv[A + "rope.dimension_count"] = _KV(head_dim, U32)
    kv[A + "vocab_size"] = _KV(n_vocab, U32)
    if sliding_window:
        # gemma3 reads it; llama.cpp ignores it for llama (Mistral-style files carry it anyway).
        kv[A + "attention.sliding_window"] = _KV(int(sliding_window), U32)
    if swa_pattern is not None:
        if isinstance(swa_pattern, int):
            kv[A + "attention.sliding_window_pattern"] = _KV(int(swa_pattern), U32)
        else:
            if len(swa_pattern) != n_layer:
                raise ValueError("swa_pattern as a list needs one entry per layer")
            kv[A + "attention.sliding_window_pattern"] = _KV([bool(x) for x in swa_pattern],
                                                             GGUFValueType.ARRAY, GGUFValueType.BOOL)
    if rope_freq_base_swa is not None:
        kv[A + "rope.freq_base_swa"] = _KV(float(rope_freq_base_swa), F32)
    if final_logit_softcapping is not None:
        kv[A + "final_logit_softcapping"] = _KV(float(final_logit_softcapping), F32)
    if rope_scaling:
        rs = dict(rope_scaling)
        rtype = rs.pop("type", rs.pop("rope_type", "linear"))
        if rtype is not None:  # None: no type key (llama.cpp then reads the factor as linear)
            kv[A + "rope.scaling.type"] = _KV(str(rtype), STR)
        if "factor" in rs:
            kv[A + "rope.scaling.factor"] = _KV(float(rs.pop("factor")), F32)
        if "original_context_length" in rs:
            kv[A + "rope.scaling.original_context_length"] = _KV(
                int(rs.pop("original_context_length")), U32)
        if rs:
            raise ValueError(f"unsupported rope_scaling keys: {sorted(rs)}")
    kv.update(tok_kv)

    # --- tensors (ggml order: ne0 = input/contiguous dim) -------------------
    branch = RESIDUAL_STD / math.sqrt(2 * n_layer)  # per-branch output RMS
    emb_std = LOGIT_STD / math.sqrt(n_embd) * g["token_embd"]
    if arch == "gemma3":
        emb_std /= math.sqrt(n_embd)  # the graph multiplies embeddings by sqrt(n_embd)
    out_std = LOGIT_STD / math.sqrt(n_embd) * g["output"]
    norm_std = g["norm"]

    def mat(tname: str, ne0: int, ne1: int, std: float) -> _Tensor:
        return _random_tensor(tname, (ne0, ne1), wtype, seed, std)

    def norm(tname: str, n: int = n_embd, mean: float = 1.0) -> _Tensor:
        return _random_tensor(tname, (n,), GGMLQuantizationType.F32, seed, norm_std * mean, mean)

    def bias(tname: str, n: int, std: float) -> _Tensor:
        return _random_tensor(tname, (n,), GGMLQuantizationType.F32, seed, std)

    T = plan.tensors
    T.append(mat("token_embd.weight", n_embd, n_vocab, emb_std))
    for i in range(n_layer):
        p = f"blk.{i}."
        T.append(norm(p + "attn_norm.weight"))
        T.append(mat(p + "attn_q.weight", n_embd, n_embd_q, g["attn_q"] / math.sqrt(n_embd)))
        T.append(mat(p + "attn_k.weight", n_embd, n_embd_kv, g["attn_k"] / math.sqrt(n_embd)))
        T.append(mat(p + "attn_v.weight", n_embd, n_embd_kv, g["attn_v"] / math.sqrt(n_embd)))
        if arch == "qwen2" or biases:
            T.append(bias(p + "attn_q.bias", n_embd_q, 0.5))
            T.append(bias(p + "attn_k.bias", n_embd_kv, 0.5))
            T.append(bias(p + "attn_v.bias", n_embd_kv, 0.5))
        if arch in ("qwen3", "gemma3"):
            T.append(norm(p + "attn_q_norm.weight", head_dim))
            T.append(norm(p + "attn_k_norm.weight", head_dim))
        T.append(mat(p + "attn_output.weight", n_embd_q, n_embd,
                     g["attn_output"] * branch / math.sqrt(n_embd_q)))
        T.append(norm(p + "ffn_norm.weight"))
        T.append(mat(p + "ffn_gate.weight", n_embd, n_ff, g["ffn_gate"] / math.sqrt(n_embd)))
        T.append(mat(p + "ffn_up.weight", n_embd, n_ff, g["ffn_up"] / math.sqrt(n_embd)))
        T.append(mat(p + "ffn_down.weight", n_ff, n_embd,
                     g["ffn_down"] * branch / math.sqrt(n_ff * _SWIGLU_VAR)))
        if biases:  # the optional biases llama.cpp reads for llama
            T.append(bias(p + "attn_output.bias", n_embd, 0.5 * branch))
            T.append(bias(p + "ffn_gate.bias", n_ff, 0.5))
            T.append(bias(p + "ffn_up.bias", n_ff, 0.5))
            T.append(bias(p + "ffn_down.bias", n_embd, 0.5 * branch))
        if arch == "gemma3":
            # Post-norms set each branch's RMS to their weights: ~branch, as the others get it.
            T.append(norm(p + "post_attention_norm.weight", mean=branch))
            T.append(norm(p + "post_ffw_norm.weight", mean=branch))
    T.append(norm("output_norm.weight"))
    if not tied_output:
        T.append(mat("output.weight", n_embd, n_vocab, out_std))
    return plan


def write_model(path: str | os.PathLike[str], *, arch: str = "llama", n_layer: int = 4,
                n_embd: int = 128, n_head: int = 4, n_head_kv: int = 4, n_ff: int = 352,
                n_ctx_train: int = 2048, rope_freq_base: float = 10000.0, rms_eps: float = 1e-5,
                tied_output: bool = True, dtype: str = "f32", seed: int = 0,
                tokenizer_from: str | os.PathLike[str] | None = None,
                weight_scale: float | Mapping[str, float] | None = None,
                rope_scaling: Mapping[str, Any] | None = None, n_embd_head: int | None = None,
                sliding_window: int = 0, swa_pattern: int | list[bool] | None = None,
                rope_freq_base_swa: float | None = None,
                final_logit_softcapping: float | None = None,
                biases: bool = False) -> pathlib.Path:
    """Write a synthetic GGUF model of ``arch`` (``llama``, ``qwen2``, ``qwen3``, ``gemma3``).

    Arguments as :func:`write_llama`, plus: ``n_embd_head`` (head size written as
    ``attention.key_length``, independent of ``n_embd / n_head``); ``sliding_window``
    (``attention.sliding_window``: gemma3's local layers; on llama files llama.cpp ignores it);
    ``swa_pattern`` (an int period or one bool per layer); ``rope_freq_base_swa``;
    ``final_logit_softcapping``; ``biases`` (llama: every optional bias llama.cpp reads).
    Per arch: qwen2 adds Q/K/V biases, qwen3 Q/K norms, gemma3
    Q/K norms and post-attention / post-FFN norms (embeddings are drawn smaller by
    sqrt(n_embd), which gemma3's graph multiplies back).
    """
    plan = _model_plan(arch=arch, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                       n_head_kv=n_head_kv, n_ff=n_ff, n_ctx_train=n_ctx_train,
                       rope_freq_base=rope_freq_base, rms_eps=rms_eps, tied_output=tied_output,
                       dtype=dtype, seed=seed, tokenizer_from=tokenizer_from,
                       weight_scale=weight_scale, rope_scaling=rope_scaling,
                       n_embd_head=n_embd_head, sliding_window=sliding_window,
                       swa_pattern=swa_pattern, rope_freq_base_swa=rope_freq_base_swa,
                       final_logit_softcapping=final_logit_softcapping, biases=biases)
    return _write_plan(pathlib.Path(path), plan)


def write_llama(path: str | os.PathLike[str], *, n_layer: int = 4, n_embd: int = 128,
                n_head: int = 4, n_head_kv: int = 4, n_ff: int = 352, n_ctx_train: int = 2048,
                rope_freq_base: float = 10000.0, rms_eps: float = 1e-5,
                tied_output: bool = True, dtype: str = "f32", seed: int = 0,
                tokenizer_from: str | os.PathLike[str] | None = None,
                weight_scale: float | Mapping[str, float] | None = None,
                rope_scaling: Mapping[str, Any] | None = None) -> pathlib.Path:
    """Write a synthetic ``llama`` GGUF model with seeded random weights.

    Args:
        path: output file (parent directories are created; written atomically).
        n_layer, n_embd, n_head, n_head_kv, n_ff: model dimensions
            (``head_dim = n_embd // n_head``; ``n_head_kv < n_head`` gives GQA).
        n_ctx_train: ``llama.context_length``.
        rope_freq_base, rms_eps: ``llama.rope.freq_base`` and
            ``llama.attention.layer_norm_rms_epsilon``.
        tied_output: if False an independent ``output.weight`` is written,
            otherwise llama.cpp reuses ``token_embd.weight``.
        dtype: ``"f32"``, ``"f16"`` or ``"q8_0"`` for the 2-D weights (norms are
            always F32). q8_0 needs ``n_embd`` and ``n_ff`` multiples of 32. For
            other types write f16/f32 and call :func:`quantize`.
        seed: RNG seed. Each tensor gets its own stream derived from
            ``(seed, tensor name)``, so the float values are identical across
            dtypes and independent of the other dimensions' tensors.
        tokenizer_from: GGUF whose ``tokenizer.*`` metadata (vocab, types,
            merges, model, pre, special ids, add_bos..., chat template) is copied;
            ``n_vocab`` is its token count. Default: ``pyriver.models.resolve(None)``.
        weight_scale: ``None``; a float multiplying the std of every matrix; or a
            dict of per-role multipliers with roles ``token_embd, output, attn_q,
            attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down, norm``
            (``norm`` scales the jitter of the norm weights around 1).
        rope_scaling: e.g. ``{"type": "linear", "factor": 2.0}``; writes
            ``llama.rope.scaling.type`` / ``.factor`` (and
            ``.original_context_length`` if given).

    Returns:
        The path written, as :class:`pathlib.Path`.
    """
    return write_model(path, arch="llama", n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                       n_head_kv=n_head_kv, n_ff=n_ff, n_ctx_train=n_ctx_train,
                       rope_freq_base=rope_freq_base, rms_eps=rms_eps, tied_output=tied_output,
                       dtype=dtype, seed=seed, tokenizer_from=tokenizer_from,
                       weight_scale=weight_scale, rope_scaling=rope_scaling)


# --------------------------------------------------------------------------
# quantization through llama.cpp
# --------------------------------------------------------------------------

def _ftype_constant(ftype: str) -> int:
    import llama_cpp

    name = ftype.strip().upper().replace("-", "_")
    for cand in (f"LLAMA_FTYPE_MOSTLY_{name}", f"LLAMA_FTYPE_ALL_{name}"):
        if hasattr(llama_cpp, cand):
            return int(getattr(llama_cpp, cand))
    known = sorted(k[len("LLAMA_FTYPE_MOSTLY_"):].lower() for k in dir(llama_cpp)
                   if k.startswith("LLAMA_FTYPE_MOSTLY_"))
    raise ValueError(f"unknown ftype {ftype!r}; known: {known}")


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str, *,
             nthread: int = 0, pure: bool = False, allow_requantize: bool = True,
             verbose: bool = False) -> pathlib.Path:
    """Quantize ``src`` into ``dst`` with ``llama_cpp.llama_model_quantize``.

    ``ftype`` is a llama.cpp file-type name, case-insensitive: ``"q4_0"``,
    ``"q4_1"``, ``"q5_0"``, ``"q8_0"``, ``"q4_k_m"``, ``"q6_k"``, ``"f16"``,
    ``"f32"``... (``LLAMA_FTYPE_MOSTLY_*``). K-quants need row sizes that are
    multiples of 256 (llama.cpp falls back to other types for tensors that are
    not). ``pure=True`` disables llama.cpp's per-tensor type mixing (e.g. Q6_K
    for the output matrix). ``allow_requantize`` lets an already quantized file
    (SmolLM2's Q4_1) be requantized. ``nthread<=0`` uses all cores. Returns ``dst``.
    """
    import ctypes

    import llama_cpp
    import llama_cpp._logger as _lg

    _lg.set_verbose(verbose)
    src_b = os.fsencode(os.fspath(src))
    dst_p = pathlib.Path(dst)
    dst_p.parent.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = _ftype_constant(ftype)
    params.nthread = int(nthread)
    params.pure = bool(pure)
    params.allow_requantize = bool(allow_requantize)
    rc = llama_cpp.llama_model_quantize(src_b, os.fsencode(str(dst_p)), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src!s} -> {dst!s}, {ftype}) failed: {rc}")
    return dst_p


# --------------------------------------------------------------------------
# corrupt files for error tests
# --------------------------------------------------------------------------

def _plan_from_file(reader: gguf.GGUFReader) -> _Plan:
    plan = _Plan(kv=_reader_kv(reader))
    mm = reader.data
    for rt in reader.tensors:
        start, n = int(rt.data_offset), int(rt.n_bytes)

        def chunks(start: int = start, n: int = n) -> Iterator[np.ndarray]:
            step = 1 << 24
            for o in range(start, start + n, step):
                yield np.asarray(mm[o:min(o + step, start + n)])

        plan.tensors.append(_Tensor(rt.name, tuple(int(d) for d in rt.shape),
                                    GGMLQuantizationType(int(rt.tensor_type)), chunks, n))
    return plan


def rewrite_kv(path: str | os.PathLike[str], values: Mapping[str, tuple[Any, GGUFValueType]],
               drop_prefix: str | None = None) -> pathlib.Path:
    """Rewrite a GGUF with metadata keys set (and every key under ``drop_prefix`` removed first),
    tensors and alignment unchanged; atomically (tmp + rename), so readers that have the old file
    mapped keep a valid file."""
    p = pathlib.Path(path)
    reader = gguf.GGUFReader(p, "r")
    plan = _plan_from_file(reader)
    if drop_prefix:
        plan.kv = {k: v for k, v in plan.kv.items() if not k.startswith(drop_prefix)}
    for k, (v, vtype) in values.items():
        if vtype == GGUFValueType.STRING and isinstance(v, str):
            v = v.encode("utf-8")
        plan.kv[k] = _KV(v, vtype)
    _write_plan(p, plan)
    del reader
    return p


def _copy_prefix(src: pathlib.Path, dst: pathlib.Path, n: int) -> pathlib.Path:
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        left = n
        while left > 0:
            buf = fi.read(min(left, 1 << 24))
            if not buf:
                break
            fo.write(buf)
            left -= len(buf)
    return dst


def write_corrupt_variants(src: str | os.PathLike[str],
                           outdir: str | os.PathLike[str]) -> dict[str, pathlib.Path]:
    """Write broken variants of the valid llama GGUF ``src`` into ``outdir``.

    Returns ``{variant: path}`` for:

    - ``not_gguf``: 4 KiB of random bytes;
    - ``truncated``: ``src`` cut in the middle of its tensor data;
    - ``truncated_header``: ``src`` cut in the middle of its metadata (KV) section;
    - ``bad_arch``: ``general.architecture = "nosucharch"`` (``llama.*`` keys renamed
      to ``nosucharch.*``), otherwise identical;
    - ``wrong_shape``: ``blk.0.attn_q.weight`` with half its second dimension (ne1);
    - ``missing_tensor``: ``blk.0.ffn_up.weight`` removed.

    The last three are written fresh with the GGUF writer (valid GGUF files that
    llama.cpp must reject at model-load time).
    """
    src = pathlib.Path(src)
    out = pathlib.Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, pathlib.Path] = {}

    rng = np.random.default_rng(1234)
    junk = rng.integers(0, 256, size=4096, dtype=np.uint8).tobytes()
    if junk[:4] == b"GGUF":
        junk = b"JUNK" + junk[4:]
    res["not_gguf"] = out / "not_gguf.gguf"
    res["not_gguf"].write_bytes(junk)

    reader = gguf.GGUFReader(src, "r")
    size = src.stat().st_size
    data_off = int(reader.data_offset)
    res["truncated"] = _copy_prefix(src, out / "truncated.gguf", data_off + (size - data_off) // 2)
    kv_start = 24  # magic(4) + version(4) + n_tensors(8) + n_kv(8)
    kv_end = int(reader.tensors[0].field.offset) if reader.tensors else data_off
    res["truncated_header"] = _copy_prefix(src, out / "truncated_header.gguf",
                                           kv_start + (kv_end - kv_start) // 2)

    # bad_arch
    plan = _plan_from_file(reader)
    old_arch = plan.kv["general.architecture"].value
    old_arch = old_arch.decode() if isinstance(old_arch, bytes) else str(old_arch)
    new_kv: dict[str, _KV] = {}
    for k, v in plan.kv.items():
        if k == "general.architecture":
            v = _KV("nosucharch", GGUFValueType.STRING)
        elif k.startswith(old_arch + "."):
            k = "nosucharch." + k[len(old_arch) + 1:]
        new_kv[k] = v
    plan.kv = new_kv
    res["bad_arch"] = _write_plan(out / "bad_arch.gguf", plan)

    # wrong_shape
    plan = _plan_from_file(reader)
    t = plan.tensor("blk.0.attn_q.weight")
    if len(t.ne) != 2 or t.ne[1] < 2:
        raise ValueError("blk.0.attn_q.weight is not a 2-D matrix with >= 2 rows")
    row_bytes = t.nbytes // t.ne[1]
    new_rows = t.ne[1] // 2
    rt = next(r for r in reader.tensors if r.name == t.name)
    start = int(rt.data_offset)
    mm = reader.data
    t.ne = (t.ne[0], new_rows)
    t.nbytes = row_bytes * new_rows
    t.chunks = lambda: iter([np.asarray(mm[start:start + row_bytes * new_rows])])
    res["wrong_shape"] = _write_plan(out / "wrong_shape.gguf", plan)

    # missing_tensor
    plan = _plan_from_file(reader)
    plan.tensors = [x for x in plan.tensors if x.name != "blk.0.ffn_up.weight"]
    res["missing_tensor"] = _write_plan(out / "missing_tensor.gguf", plan)
    del reader, mm
    return res


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyriver.synth",
                                 description="Write a synthetic GGUF model with random weights.")
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--arch", default="llama", choices=ARCHS)
    ap.add_argument("--head-dim", type=int, default=None, help="default: embd / heads")
    ap.add_argument("--sliding-window", type=int, default=0)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--heads-kv", type=int, default=None, help="default: --heads")
    ap.add_argument("--ff", type=int, default=352)
    ap.add_argument("--ctx", type=int, default=2048, help="n_ctx_train")
    ap.add_argument("--rope-base", type=float, default=10000.0)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--untied", action="store_true", help="write a separate output.weight")
    ap.add_argument("--dtype", default="f32", choices=sorted(_GGML_TYPES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", default=None)
    ap.add_argument("--weight-scale", type=float, default=None)
    ap.add_argument("--rope-scaling", default=None, metavar="TYPE:FACTOR",
                    help="e.g. linear:2.0")
    ap.add_argument("--quantize", default=None, metavar="FTYPE",
                    help="additionally re-quantize with llama.cpp (q4_0, q8_0, q4_k_m, ...) "
                         "into OUT with the ftype appended to the stem")
    a = ap.parse_args(argv)
    rs = None
    if a.rope_scaling:
        typ, _, fac = a.rope_scaling.partition(":")
        rs = {"type": typ, "factor": float(fac or 1.0)}
    p = write_model(a.out, arch=a.arch, n_embd_head=a.head_dim, sliding_window=a.sliding_window,
                    n_layer=a.layers, n_embd=a.embd, n_head=a.heads,
                    n_head_kv=a.heads_kv or a.heads, n_ff=a.ff, n_ctx_train=a.ctx,
                    rope_freq_base=a.rope_base, rms_eps=a.rms_eps, tied_output=not a.untied,
                    dtype=a.dtype, seed=a.seed, tokenizer_from=a.tokenizer_from,
                    weight_scale=a.weight_scale, rope_scaling=rs)
    print(p)
    if a.quantize:
        q = quantize(p, p.with_name(f"{p.stem}.{a.quantize.lower()}{p.suffix}"), a.quantize)
        print(q)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
