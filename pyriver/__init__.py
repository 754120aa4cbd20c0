"""pyriver: GGUF language models on ggml, with River token-level early exit.

`Llama` is imported on first use, so that modules which need no native library (the model
registry, sidecar naming, the synthetic-model tool) import without one."""
from pyriver.errors import BackendError, ContextFullError, ModelLoadError, PyriverError

__version__ = "0.1.0"
__all__ = ["Llama", "PromptLookupDecoding", "PyriverError", "ModelLoadError", "ContextFullError", "BackendError", "__version__"]


def __getattr__(name):
    if name == "Llama":
        from pyriver.api.llama import Llama
        return Llama
    if name == "PromptLookupDecoding":   # lossless mode's n-gram draft model (no native library)
        from pyriver.speculative.draft import PromptLookupDecoding
        return PromptLookupDecoding
    raise AttributeError(f"module 'pyriver' has no attribute {name!r}")
