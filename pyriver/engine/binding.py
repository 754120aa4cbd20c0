"""cffi binding of native/pyriver.h and native/pyriver_debug.h (ABI mode: the headers are the
whole contract)."""
from __future__ import annotations

import os
import re
import site
import sysconfig
from pathlib import Path
from typing import Callable

import cffi

from pyriver.errors import BackendError, ContextFullError, ModelLoadError, PyriverError

_HERE = Path(__file__).resolve().parent.parent   # the pyriver package: the library is installed there
HEADERS = ("pyriver.h", "pyriver_debug.h")   # the product API, then the testing knobs


def _lib_dirs():
    """Where the native library may be: next to this package (an installed wheel), the
    directory named by PYRIVER_LIB_DIR (a development build), or an installed pyriver whose
    package this source checkout shadows (running tests from the repository root)."""
    yield _HERE
    if os.environ.get("PYRIVER_LIB_DIR"):
        yield Path(os.environ["PYRIVER_LIB_DIR"])
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


def _header(lib: Path, name: str) -> Path:
    """The header that matches the library: installed beside it, or the checkout's for a dev build."""
    beside = lib.parent / name
    return beside if beside.exists() else _HERE.parent / "native" / name


# llama_cpp first: its libggml is the one the process uses; ours resolves to the same file.
import llama_cpp  # noqa: E402,F401

_LIB = _find("libpyriver.so" if os.name != "nt" else "pyriver.dll")
ffi = cffi.FFI()
for _name in HEADERS:
    ffi.cdef(_cdef(_header(_LIB, _name)))
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


def read_text(call: Callable[..., int]) -> str:
    """The text of a buffer-filling function (pyriver.h's text-out convention): call(buf, size,
    needed) once for the size, once to fill a buffer of that size."""
    needed = ffi.new("size_t *")
    check(call(ffi.NULL, 0, needed))
    buf = ffi.new("char[]", needed[0])
    check(call(buf, len(buf), needed))
    return ffi.string(buf).decode("utf-8", "replace")


def check_gguf(path: str) -> None:
    """ModelLoadError where llama.cpp would abort the process on the file (pr_gguf_check): called
    before any llama.cpp loader sees a file pyriver's own loader has not checked."""
    check(lib.pr_gguf_check(str(path).encode("utf-8")))


def gguf_meta(path: str, key: str) -> str:
    """A metadata value of a GGUF file as text (pr_gguf_meta), the model not loaded: ggml's parser,
    fast where gguf-py's reader walks a 262k-token vocabulary in Python for seconds."""
    return read_text(lambda buf, size, needed: lib.pr_gguf_meta(str(path).encode("utf-8"), key.encode("utf-8"),
                                                                 buf, size, needed))


def gguf_tensor_names(path: str) -> list:
    """The tensor names of one GGUF file (pr_gguf_tensor_names), the model not loaded."""
    return read_text(lambda buf, size, needed: lib.pr_gguf_tensor_names(str(path).encode("utf-8"), buf, size,
                                                                        needed)).splitlines()
