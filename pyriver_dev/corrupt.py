"""Broken GGUF files for error-path tests: each a way a model file can be wrong (not a GGUF,
truncated in its data or in its metadata, an unknown architecture, a misshapen or missing
tensor)."""

from __future__ import annotations

import os
import pathlib

import gguf
import numpy as np
from gguf import GGUFValueType

from pyriver.tools.gguf_io import KV, plan_from_file, reshape_prefix, write_plan


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
    plan = plan_from_file(reader)
    old_arch = plan.kv["general.architecture"].value
    old_arch = old_arch.decode() if isinstance(old_arch, bytes) else str(old_arch)
    new_kv: dict[str, KV] = {}
    for k, v in plan.kv.items():
        if k == "general.architecture":
            v = KV("nosucharch", GGUFValueType.STRING)
        elif k.startswith(old_arch + "."):
            k = "nosucharch." + k[len(old_arch) + 1:]
        new_kv[k] = v
    plan.kv = new_kv
    res["bad_arch"] = write_plan(out / "bad_arch.gguf", plan)

    # wrong_shape
    plan = plan_from_file(reader)
    t = plan.tensor("blk.0.attn_q.weight")
    if len(t.ne) != 2 or t.ne[1] < 2:
        raise ValueError("blk.0.attn_q.weight is not a 2-D matrix with >= 2 rows")
    reshape_prefix(plan, reader, t.name, (t.ne[0], t.ne[1] // 2))
    res["wrong_shape"] = write_plan(out / "wrong_shape.gguf", plan)

    # missing_tensor
    plan = plan_from_file(reader)
    plan.tensors = [x for x in plan.tensors if x.name != "blk.0.ffn_up.weight"]
    res["missing_tensor"] = write_plan(out / "missing_tensor.gguf", plan)
    del reader
    return res
