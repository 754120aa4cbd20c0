"""llama.cpp's quantization (llama_model_quantize, through llama-cpp-python): a GGUF rewritten at
one of llama.cpp's file types (LLAMA_FTYPE_*), and the file-type names it knows. The tools'
requantized model (pyriver.tools.quantize) is made with it."""
from __future__ import annotations

import ctypes
import os
import pathlib

import llama_cpp

from pyriver.engine import interrupts
from pyriver.engine.logs import set_verbose


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
    set_verbose(verbose)
    src_b = os.fsencode(os.fspath(src))
    dst_p = pathlib.Path(dst)
    dst_p.parent.mkdir(parents=True, exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype_constant(ftype)
    params.nthread = int(nthread)
    params.pure = bool(pure)
    params.allow_requantize = bool(allow_requantize)
    with interrupts.held():   # a log line a tensor, each Python: Ctrl-C comes when it ends (interrupts)
        rc = llama_cpp.llama_model_quantize(src_b, os.fsencode(str(dst_p)), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src!s} -> {dst!s}, {ftype}) failed: {rc}")
    return dst_p
