"""Exceptions raised by pyriver. Each native status maps to one class."""


class PyriverError(Exception):
    """Base class of pyriver's own errors."""


class ModelLoadError(PyriverError, ValueError):
    """The file is not a usable model: not a GGUF, truncated, unsupported, or malformed."""


class ContextFullError(PyriverError, ValueError):
    """The tokens do not fit in the context (n_ctx)."""


class BackendError(PyriverError, RuntimeError):
    """ggml could not allocate or compute."""
