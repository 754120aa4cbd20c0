"""pyriver: GGUF language models on ggml, with River token-level early exit."""
from .errors import BackendError, ContextFullError, ModelLoadError, PyriverError
from .llama import Llama

__version__ = "0.1.0"
__all__ = ["Llama", "PyriverError", "ModelLoadError", "ContextFullError", "BackendError", "__version__"]
