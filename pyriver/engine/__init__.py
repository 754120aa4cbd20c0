"""Which engine computes a file: pyriver's own graphs (native) where pyriver has a builder for its
architecture, llama.cpp's own graphs (llama.cpp) on request or where it has none."""
from __future__ import annotations

import sys

from ..errors import ModelLoadError
from .base import BATCH_RULES, Context, ContextArgs, Engine, ExitRule, ModelArgs

ENGINES = ("auto", "native", "llama.cpp")
_UNSUPPORTED = "unsupported architecture"   # the native loader's message for a file without a builder


def load(path: str, engine: str, args: ModelArgs, verbose: bool = False) -> Engine:
    """The engine for path: engine="native" or "llama.cpp" as asked, "auto" (or None) the native one
    unless the native loader has no builder for the file's architecture."""
    engine = "auto" if engine is None else engine
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    if engine == "llama.cpp":
        e = _llamacpp(path, args)
        e.asked, why = True, "asked for"
    else:
        from .native import NativeEngine
        try:
            e, why = NativeEngine(path, args), "pyriver's own graphs"
        except ModelLoadError as native_error:
            if engine == "native" or _UNSUPPORTED not in str(native_error):
                raise
            try:
                e = _llamacpp(path, args)
            except ModelLoadError as e2:
                raise ModelLoadError(f"{native_error}; llama.cpp could not load it either: {e2}") from None
            why = f"pyriver has no builder for architecture '{e.info['arch']}'"
    if verbose:
        print(f"pyriver: engine {e.name} ({why}) runs {e.info['arch']} from {path}", file=sys.stderr)
    return e


def _llamacpp(path: str, args: ModelArgs) -> Engine:
    from .llamacpp import LlamaCppEngine
    return LlamaCppEngine(path, args)


__all__ = ["BATCH_RULES", "Context", "ContextArgs", "Engine", "ENGINES", "ExitRule", "ModelArgs", "load"]
