"""GGUF files as plans: metadata and tensors, each tensor's bytes produced by a generator, so that a
file of any size is written (atomically) one chunk at a time. A plan comes from scratch (synth),
or from an existing file to rewrite some of its metadata (calibrate, test files) or break it
(corrupt)."""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import math
import os
import pathlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import gguf
import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

from pyriver.atomic import replacing

__all__ = ["KV", "Tensor", "Plan", "nbytes", "field_to_kv", "reader_kv", "write_plan", "plan_from_file", "reshape_prefix", "rewrite_kv"]

_ALIGNMENT_KEY = "general.alignment"


@dataclass
class KV:
    value: Any
    vtype: GGUFValueType
    sub_type: GGUFValueType | None = None


@dataclass
class Tensor:
    """One tensor to write: ``ne`` is in ggml order (ne0 = contiguous dim)."""

    name: str
    ne: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    chunks: Callable[[], Iterator[np.ndarray]]  # yields raw data pieces in order
    nbytes: int = 0

    def __post_init__(self) -> None:
        if not self.nbytes:
            self.nbytes = nbytes(self.ne, self.ggml_type)


@dataclass
class Plan:
    kv: dict[str, KV] = field(default_factory=dict)  # insertion ordered
    tensors: list[Tensor] = field(default_factory=list)

    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


def nbytes(ne: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    n = math.prod(ne)
    if ne[0] % block:
        raise ValueError(f"row size {ne[0]} is not a multiple of {block} for {qtype.name}")
    return n // block * type_size


def field_to_kv(f: Any) -> KV:
    """Convert a ``gguf.ReaderField`` back into a writable value (raw bytes for strings)."""
    t0 = f.types[0]
    if t0 == GGUFValueType.ARRAY:
        if len(f.types) > 2:
            raise NotImplementedError(f"nested GGUF arrays are not supported ({f.name})")
        sub = f.types[-1] if len(f.types) > 1 else GGUFValueType.UINT8
        if not f.data:
            return KV([], t0, sub)
        if sub == GGUFValueType.STRING:
            return KV([bytes(f.parts[i]) for i in f.data], t0, sub)
        return KV(np.concatenate([f.parts[i] for i in f.data]).tolist(), t0, sub)
    if t0 == GGUFValueType.STRING:
        return KV(bytes(f.parts[f.data[0]]), t0)
    return KV(f.parts[f.data[0]][0].item(), t0)


def reader_kv(reader: gguf.GGUFReader) -> dict[str, KV]:
    out: dict[str, KV] = {}
    for name, f in reader.fields.items():
        if name.startswith("GGUF."):  # pseudo-fields: version, counts
            continue
        out[name] = field_to_kv(f)
    return out


def write_plan(path: str | os.PathLike[str], plan: Plan, bare: bool = False) -> pathlib.Path:
    """Write header + KV + tensor infos with GGUFWriter, then stream tensor data.

    Tensor data is appended chunk by chunk, so peak memory is one chunk (plus
    whatever a chunk generator holds), independent of model size. bare: no
    general.architecture unless the plan has one (a split model's later shards
    hold only the split keys, as gguf-split writes them); else "llama" by default.
    """
    path = pathlib.Path(path)
    kv = dict(plan.kv)
    arch_kv = kv.pop("general.architecture", None)
    arch = arch_kv.value if arch_kv is not None else None if bare else "llama"
    if isinstance(arch, bytes):
        arch = arch.decode("utf-8")
    alignment = gguf.GGUF_DEFAULT_ALIGNMENT
    if _ALIGNMENT_KEY in kv:
        alignment = int(kv[_ALIGNMENT_KEY].value)

    with replacing(path) as tmp:
        _write_file(tmp, arch, alignment, kv, plan.tensors)
    return path


def _write_file(tmp: pathlib.Path, arch: str | None, alignment: int, kv: dict[str, KV],
                tensors: list[Tensor]) -> None:
    writer = gguf.GGUFWriter(tmp, arch or "")
    if arch is None:   # the key GGUFWriter adds (it skips an empty value today)
        writer.kv_data[0].pop("general.architecture", None)
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

    def pieces(t: Tensor) -> list[np.ndarray]:
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


def plan_from_file(reader: gguf.GGUFReader) -> Plan:
    plan = Plan(kv=reader_kv(reader))
    mm = reader.data
    for rt in reader.tensors:
        start, n = int(rt.data_offset), int(rt.n_bytes)

        def chunks(start: int = start, n: int = n) -> Iterator[np.ndarray]:
            step = 1 << 24
            for o in range(start, start + n, step):
                yield np.asarray(mm[o:min(o + step, start + n)])

        plan.tensors.append(Tensor(rt.name, tuple(int(d) for d in rt.shape),
                                    GGMLQuantizationType(int(rt.tensor_type)), chunks, n))
    return plan


def reshape_prefix(plan: Plan, reader: gguf.GGUFReader, name: str, ne: tuple[int, ...]) -> None:
    """Give tensor `name` of a plan read by `reader` the extents ne and the first bytes of its old
    data: a misshapen tensor, for error tests."""
    t = plan.tensor(name)
    rt = next(r for r in reader.tensors if r.name == name)
    start, mm = int(rt.data_offset), reader.data
    n = nbytes(tuple(ne), t.ggml_type)
    t.ne, t.nbytes = tuple(ne), n
    t.chunks = lambda: iter([np.asarray(mm[start:start + n])])


def rewrite_kv(path: str | os.PathLike[str], values: Mapping[str, tuple[Any, GGUFValueType]],
               drop_prefix: str | None = None) -> pathlib.Path:
    """Rewrite a GGUF with metadata keys set (and every key under ``drop_prefix`` removed first),
    tensors and alignment unchanged; atomically (tmp + rename), so readers that have the old file
    mapped keep a valid file."""
    p = pathlib.Path(path)
    reader = gguf.GGUFReader(p, "r")
    plan = plan_from_file(reader)
    if drop_prefix:
        plan.kv = {k: v for k, v in plan.kv.items() if not k.startswith(drop_prefix)}
    for k, (v, vtype) in values.items():
        if vtype == GGUFValueType.STRING and isinstance(v, str):
            v = v.encode("utf-8")
        plan.kv[k] = KV(v, vtype)
    write_plan(p, plan, bare=True)   # no key added (a split's later shard has no architecture)
    del reader
    return p
