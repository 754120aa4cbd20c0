"""llama.cpp's quantization (``llama_model_quantize``, held by pyriver.engine.quantize, whose
quantize and ftype_constant this module re-exports): a GGUF requantized to one of its file types,
and the cached "whole model at the river type" that River is compared against."""
from __future__ import annotations

import os
from typing import Optional

from pyriver.atomic import replacing
from pyriver.engine.quantize import ftype_constant, quantize  # noqa: F401 (this module's API: scripts call them here)
from pyriver.models.cache import cache_dir, file_sha256
from pyriver.river.sidecar import parse_spec

# llama.cpp has no "all q3_K" file type: a K-quant river type is matched by its _S mix (that
# type for nearly every matrix). MXFP4's only file type (MXFP4_MOE) keeps a dense model's matrices
# in Q8_0, so an mxfp4 river has no uniform counterpart.
UNIFORM_FTYPE = {"q2_k": "q2_k", "q3_k": "q3_k_s", "q4_k": "q4_k_s", "q5_k": "q5_k_s", "q6_k": "q6_k", "mxfp4": None}


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
    return requantized_to(path, ftype)


def requantized_path(path: str, ftype: str):
    """Where requantized_to keeps path at ftype (the source's content, not its name, keys it)."""
    return cache_dir() / "requantized" / f"{file_sha256(path)[:16]}-{os.path.basename(path)[:-5]}.{ftype.lower()}.gguf"


def requantized_to(path: str, ftype: str) -> str:
    """The model requantized by llama.cpp to the file type ftype ("q4_0", "q3_k_m", ...; cached)."""
    ftype_constant(ftype)   # an unknown name is a ValueError before anything is written
    out = requantized_path(path, ftype)
    if not out.exists():
        with replacing(out) as tmp:
            quantize(path, tmp, ftype)
    return str(out)
