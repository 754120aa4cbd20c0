"""llama.cpp's quantization (llama_model_quantize, through llama-cpp-python): a GGUF rewritten at
one of llama.cpp's file types (LLAMA_FTYPE_*), and the file-type names it knows. The tools'
requantized model (pyriver.tools.quantize) is made with it."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import llama_cpp


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

    llama.cpp's quantization has no way to stop it short, so it runs in a child process: Ctrl-C
    (or any exception while it runs) ends the child at once, where the call itself would run to
    its end, and raises here (llama-quantize stops so, killed by the signal). What the child
    wrote of ``dst`` stays; pyriver's own callers write to a temporary name (pyriver.atomic).
    """
    dst_p = pathlib.Path(dst)
    dst_p.parent.mkdir(parents=True, exist_ok=True)
    args = [os.fspath(src), os.fspath(dst_p), str(ftype_constant(ftype)), str(int(nthread)),
            str(int(bool(pure))), str(int(bool(allow_requantize))), str(int(bool(verbose)))]
    child = subprocess.Popen([sys.executable, "-c", _CHILD, *args], stdin=subprocess.DEVNULL)
    try:
        rc = child.wait()
    except BaseException:
        child.kill()
        child.wait()
        raise
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src!s} -> {dst!s}, {ftype}) failed: "
                           + (f"{rc}" if rc > 0 else f"the process ended by signal {-rc}"))
    return dst_p


# The child: llama_cpp alone (no pyriver import: a quick start); SIGINT is the parent's to act on.
# llama_model_quantize's return code is the child's exit status; its log lines go to the stderr both
# share, shown as llama-cpp-python's verbose shows them (errors always).
_CHILD = """
import ctypes, os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
import llama_cpp, llama_cpp._logger as lg
src, dst, ftype, nthread, pure, allow_requantize, verbose = sys.argv[1:]
lg.set_verbose(verbose == "1")
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.nthread, p.pure, p.allow_requantize = int(ftype), int(nthread), pure == "1", allow_requantize == "1"
sys.exit(llama_cpp.llama_model_quantize(os.fsencode(src), os.fsencode(dst), ctypes.byref(p)))
"""
