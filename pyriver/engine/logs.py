"""llama.cpp's (and ggml's) log lines: shown or not, as llama-cpp-python's `verbose` sets them."""
from __future__ import annotations

import llama_cpp._logger as _lg


def set_verbose(verbose: bool) -> None:
    """llama.cpp's log callback prints (verbose) or drops its lines (llama_cpp._logger's rule)."""
    _lg.set_verbose(verbose)


def logger():
    """llama-cpp-python's logger of llama.cpp's lines (a logging.Logger)."""
    return _lg.logger
