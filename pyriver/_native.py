"""cffi binding of native/pyriver.h (ABI mode: the header is the whole contract)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import cffi

from .errors import BackendError, ContextFullError, ModelLoadError, PyriverError

_HERE = Path(__file__).resolve().parent


def _lib_dirs():
    """Where the native library may be: next to this package (an installed wheel), the
    directory named by PYRIVER_LIB_DIR (a development build), or an installed pyriver whose
    package this source checkout shadows (running tests from the repository root)."""
    yield _HERE
    if os.environ.get("PYRIVER_LIB_DIR"):
        yield Path(os.environ["PYRIVER_LIB_DIR"])
    import site
    import sysconfig
    for sp in [sysconfig.get_paths()["platlib"], *site.getsitepackages(), site.getusersitepackages()]:
        yield Path(sp) / "pyriver"


def _find(name: str) -> Path:
    for d in _lib_dirs():
        if (d / name).exists():
            return d / name
    raise ImportError(f"pyriver: {name} not found; install the package with `pip install .` "
                      "(or set PYRIVER_LIB_DIR to a CMake build directory)")


def _cdef(header: Path) -> str:
    text = header.read_text()
    m = re.search(r"/\* CDEF BEGIN \*/(.*)/\* CDEF END \*/", text, re.S)
    if not m:
        raise ImportError(f"pyriver: {header} has no CDEF region")
    return m.group(1).replace("PR_API ", "")


# llama_cpp first: its libggml is the one the process uses; ours resolves to the same file.
import llama_cpp  # noqa: E402,F401

_LIB = _find("libpyriver.so" if os.name != "nt" else "pyriver.dll")
# The header that matches the library: installed beside it, or the checkout's for a dev build.
_HEADER = _LIB.parent / "pyriver.h"
if not _HEADER.exists():
    _HEADER = _HERE.parent / "native" / "pyriver.h"
ffi = cffi.FFI()
ffi.cdef(_cdef(_HEADER))
lib = ffi.dlopen(str(_LIB))

PR_OK = 0
_ERRORS = {
    1: ValueError,        # PR_ERR_INVALID_ARG
    2: ModelLoadError,    # PR_ERR_IO
    3: ModelLoadError,    # PR_ERR_MODEL
    4: ContextFullError,  # PR_ERR_CONTEXT_FULL
    5: BackendError,      # PR_ERR_BACKEND
    6: PyriverError,      # PR_ERR_INTERNAL
}


def last_error() -> str:
    return ffi.string(lib.pr_last_error()).decode("utf-8", "replace")


def check(status: int) -> None:
    """Raise the exception that a native status stands for."""
    if status != PR_OK:
        raise _ERRORS.get(status, PyriverError)(last_error())
