"""Exceptions raised by pyriver. Each native status maps to one class."""


class PyriverError(Exception):
    """Base class of pyriver's own errors."""


class ModelLoadError(PyriverError, ValueError):
    """The file is not a usable model: not a GGUF, truncated, unsupported, or malformed."""


class ContextFullError(PyriverError, ValueError):
    """The tokens do not fit in the context (n_ctx)."""


class BackendError(PyriverError, RuntimeError):
    """ggml could not allocate or compute."""


class ModelFetchError(RuntimeError):
    """A model could not be downloaded, assembled or verified."""


class UnknownModelError(ValueError, KeyError):
    """The name is neither a registry model, an existing file nor a hub reference.

    Subclasses both ``ValueError`` and ``KeyError``.
    """

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""
