"""llama.cpp's quantization (``llama_model_quantize``): a GGUF requantized to one of its file
types, and the cached "whole model at the river type" that River is compared against."""
from __future__ import annotations

import ctypes
import os
import pathlib
from typing import Optional

import llama_cpp
import llama_cpp._logger as _lg

from pyriver.atomic import replacing
from pyriver.models.cache import cache_dir, file_sha256
from pyriver.river.sidecar import parse_spec

# llama.cpp has no "all q3_K" file type: a K-quant river type is matched by its _S mix (that
# type for nearly every matrix). MXFP4's only file type (MXFP4_MOE) keeps a dense model's matrices
# in Q8_0, so an mxfp4 river has no uniform counterpart.
UNIFORM_FTYPE = {"q2_k": "q2_k", "q3_k": "q3_k_s", "q4_k": "q4_k_s", "q5_k": "q5_k_s", "q6_k": "q6_k", "mxfp4": None}


def ftype_constant(ftype: str) -> int:
    """llama.cpp's LLAMA_FTYPE_* value of a file-type name ("q4_0", "q4_k_m", ...)."""
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
    _lg.set_verbose(verbose)
    src_b = os.fsencode(os.fspath(src))
    dst_p = pathlib.Path(dst)
    dst_p.parent.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype_constant(ftype)
    params.nthread = int(nthread)
    params.pure = bool(pure)
    params.allow_requantize = bool(allow_requantize)
    rc = llama_cpp.llama_model_quantize(src_b, os.fsencode(str(dst_p)), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src!s} -> {dst!s}, {ftype}) failed: {rc}")
    return dst_p


def uniform_ftype(river_type: str) -> Optional[str]:
    """llama.cpp's file type for "the whole model at river_type" (a river spec's block type), or
    None when it has none."""
    blocks = parse_spec(river_type)[0].lower()
    return UNIFORM_FTYPE.get(blocks, blocks)


def requantized(path: str, river_type: str) -> str:
    """The model requantized by llama.cpp to the file type matching river_type (cached)."""
    ftype = uniform_ftype(river_type)
    if ftype is None:
        raise ValueError(f"llama.cpp has no uniform {river_type} file type for dense models "
                         "(MXFP4_MOE keeps non-expert matrices in Q8_0)")
    out = cache_dir() / "requantized" / f"{file_sha256(path)[:16]}-{os.path.basename(path)[:-5]}.{ftype}.gguf"
    if not out.exists():
        with replacing(out) as tmp:
            quantize(path, tmp, ftype)
    return str(out)
