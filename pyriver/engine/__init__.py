"""Which engine computes a file: pyriver's own graphs (native) where pyriver has a builder for its
architecture, llama.cpp's own graphs (llama.cpp) on request or where it has none. The engine is the
one caller of the native library (binding) and of llama.cpp's API (vocab, samplers, contexts).
May import: pyriver.errors, pyriver.atomic, pyriver.models (cache), pyriver.river (sidecar names), llama_cpp."""
from __future__ import annotations

import sys

from pyriver.errors import ModelLoadError
from pyriver.engine.base import BATCH_RULES, EXIT_RULES, VERIFY, Context, ContextArgs, Engine, ExitRule, ModelArgs, check_exit_rule

ENGINES = ("auto", "native", "llama.cpp")
_UNSUPPORTED = "unsupported architecture"   # the native loader's message for a file without a builder


def load(path: str, engine: str, args: ModelArgs, verbose: bool = False) -> Engine:
    """The engine for path: engine="native" or "llama.cpp" as asked, "auto" (or None) the native one
    unless the native loader has no builder for the file's architecture, or LoRA adapters are asked
    for (args.lora: llama.cpp's graphs apply them, pyriver's own have none)."""
    engine = "auto" if engine is None else engine
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    if args.lora:
        check_lora(engine)
    if engine == "llama.cpp" or args.lora:
        e = _llamacpp(path, args)
        e.asked = engine == "llama.cpp"
        why = "asked for" if e.asked else "LoRA adapters run on llama.cpp's graphs, pyriver's own have none"
    else:
        from pyriver.engine.native import NativeEngine
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


def check_file(path: str) -> None:
    """ModelLoadError where llama.cpp's loader would abort the process on the file: what a caller
    that hands a file to llama.cpp (the llama.cpp engine, the tokenizer) checks first."""
    from pyriver.engine import binding as native
    native.check_gguf(path)


def file_meta(path: str, key: str) -> str:
    """A metadata value of a GGUF file as text, the model not loaded (ValueError when absent)."""
    from pyriver.engine import binding as native
    return native.gguf_meta(path, key)


def file_tensor_names(path: str) -> list:
    """The tensor names of one GGUF file, the model not loaded."""
    from pyriver.engine import binding as native
    return native.gguf_tensor_names(path)


def check_projector(model_path: str, mmproj_path: str) -> str:
    """ModelLoadError where a projector (mmproj) cannot serve the model, read from both files before
    anything loads (engine/mmproj.py); else the projector type."""
    from pyriver.engine import mmproj
    try:
        arch = file_meta(model_path, "general.architecture")
        n_embd = int(file_meta(model_path, f"{arch}.embedding_length"))
    except Exception as e:   # the model's own load says more; the projector cannot be judged without it
        raise ModelLoadError(f"{model_path}: no embedding width to check the projector against: {e}") from None
    return mmproj.check(mmproj_path, n_embd)


def check_lora(engine: str) -> None:
    """LoRA adapters run on the llama.cpp engine: asking for the native one with them is an error."""
    if engine == "native":
        raise ValueError("LoRA adapters (lora_path, --lora) run on the llama.cpp engine: pyriver's own graphs "
                         "have no LoRA; use engine='auto' or 'llama.cpp' (--engine auto or llama.cpp)")


def _llamacpp(path: str, args: ModelArgs) -> Engine:
    from pyriver.engine.llamacpp import LlamaCppEngine
    return LlamaCppEngine(path, args)


__all__ = ["BATCH_RULES", "Context", "ContextArgs", "Engine", "ENGINES", "EXIT_RULES", "ExitRule", "ModelArgs",
           "VERIFY", "check_exit_rule", "check_lora", "check_projector", "file_meta", "file_tensor_names", "load"]
