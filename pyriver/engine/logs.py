"""llama.cpp's (and ggml's) log lines: shown or not, as llama-cpp-python's `verbose` sets them."""
from __future__ import annotations

import ctypes

import llama_cpp
import llama_cpp._logger as _lg

_CONT = 5   # GGML_LOG_LEVEL_CONT: goes on with the previous line


def set_verbose(verbose: bool) -> None:
    """llama.cpp's log callback prints (verbose) or drops its lines (llama_cpp._logger's rule)."""
    _lg.set_verbose(verbose)


def logger():
    """llama-cpp-python's logger of llama.cpp's lines (a logging.Logger)."""
    return _lg.logger


def log_cont(text: bytes) -> None:
    """text to llama.cpp's log callback now in place (llama-cpp-python's, or one an application set
    with llama_log_set) as a continued line: what llama.cpp's LLAMA_LOG_CONT does from C."""
    cb, user = llama_cpp.llama_log_callback(), ctypes.c_void_p()
    llama_cpp.llama_log_get(ctypes.byref(cb), ctypes.byref(user))
    if cb:
        cb(_CONT, text, user)
