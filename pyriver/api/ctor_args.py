"""llama-cpp-python 0.3.36's `Llama.__init__` keyword arguments that pyriver has no machinery for:
each is accepted at the values that change nothing pyriver computes, and refused with an error
naming it otherwise (docs/api.md, "Constructor arguments", is the table of every argument)."""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Optional, Tuple

import llama_cpp

def _falsy(v) -> bool:
    return not v


# name -> (llama_cpp's default, test for a value that changes nothing, why others are refused)
INERT: Dict[str, tuple] = {
    "use_mlock": (False, _falsy, "pyriver does not lock the model in RAM"),
    "kv_overrides": (None, _falsy, "pyriver reads the GGUF's metadata as stored"),
    "attention_type": (llama_cpp.LLAMA_ATTENTION_TYPE_UNSPECIFIED,
                       lambda v: v in (llama_cpp.LLAMA_ATTENTION_TYPE_UNSPECIFIED, llama_cpp.LLAMA_ATTENTION_TYPE_CAUSAL),
                       "pyriver's attention is causal"),
    "offload_kqv": (True, lambda v: bool(v), "pyriver keeps each block's KV cache on the block's device"),
    "op_offload": (None, lambda v: v is None or bool(v), "pyriver places operations with their weights"),
    # output-identical whatever the value (memory or timing knobs)
    "swa_full": (None, lambda v: True, ""),
    "no_perf": (False, lambda v: True, ""),
    "numa": (False, _falsy, "pyriver sets no NUMA policy"),
}
# the inert arguments llama_cpp.Llama keeps as attributes of the same name
ATTRS = ("kv_overrides", "numa")


def inert_attrs(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    return {k: kwargs.get(k, INERT[k][0]) for k in ATTRS}


def check_inert(kwargs: Dict[str, Any], verbose: bool = False) -> None:
    """llama_cpp.Llama takes any other keyword (its **kwargs) and ignores it, and the libraries
    built on it pass old ones (LangChain: f16_kv, n_parts): pyriver does the same, naming them in
    a warning when verbose. Known names at values pyriver cannot honour: ValueError naming it."""
    unknown = sorted(k for k in kwargs if k not in INERT)
    if unknown and verbose:
        warnings.warn(f"pyriver.Llama ignores keyword arguments it does not know, as llama_cpp.Llama does: "
                      f"{', '.join(unknown)}", stacklevel=3)
    for k, v in kwargs.items():
        if k not in INERT:
            continue
        default, ok, why = INERT[k]
        if not ok(v):
            raise ValueError(f"{k}={v!r} is not supported: {why} (llama-cpp-python's default is {default!r})")


def lora_specs(lora_path, lora_scale, lora_adapters) -> Tuple[Tuple[str, float], ...]:
    """The LoRA adapters to load, (path, scale) each: llama_cpp's one (lora_path at lora_scale; its
    lora_base is kept and unread, as llama_cpp 0.3.36 leaves it) or pyriver's list (lora_adapters),
    not both. They run on the llama.cpp engine (pyriver.engine.load)."""
    from pyriver.engine.lora import check_scale
    if lora_path and lora_adapters:
        raise ValueError("give lora_path (one adapter, at lora_scale) or lora_adapters [(path, scale), ...], not both")
    specs = [(lora_path, lora_scale)] if lora_path else list(lora_adapters or ())
    out = []
    for spec in specs:
        if not (isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], (str, os.PathLike))):
            raise ValueError(f"a LoRA adapter is (path, scale), got {spec!r}")
        out.append((os.fspath(spec[0]), check_scale(spec[1], f"the scale of LoRA adapter {spec[0]}")))
    return tuple(out)


def rng_seed(seed):
    """llama.cpp's seed rule: LLAMA_DEFAULT_SEED (0xFFFFFFFF, also -1) draws a random seed."""
    if seed is None:
        return None
    s = int(seed) & 0xFFFFFFFF
    return None if s == llama_cpp.LLAMA_DEFAULT_SEED else s


def check_chat_format(chat_format, chat_handler) -> None:
    """None / "gguf": the GGUF's template; else a format llama_cpp registers (its formatter is used)."""
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry
    if chat_handler is not None and not callable(chat_handler):
        raise TypeError("chat_handler must be callable (a llama_cpp chat completion handler)")
    known = LlamaChatCompletionHandlerRegistry()._chat_handlers
    if chat_format not in (None, "gguf", "chat_template.default") and chat_format not in known:
        raise ValueError(f"chat_format {chat_format!r} is not one of llama_cpp's: {', '.join(sorted(known))} "
                         f"(None or 'gguf': the template stored in the GGUF)")


def handler_engine(chat_handler, engine: Optional[str]) -> Optional[str]:
    """The engine a chat_handler needs: llama-cpp-python's multimodal handlers (MTMDChatHandler,
    Llava15ChatHandler and their kin: a clip_model_path) evaluate images with libmtmd on the Llama's
    own llama.cpp context, so they run on the llama.cpp engine, chosen for them under "auto";
    engine="native" with one is an error saying so."""
    if chat_handler is None or getattr(chat_handler, "clip_model_path", None) is None:
        return engine
    if engine == "native":
        raise ValueError(f"{type(chat_handler).__name__} evaluates images with libmtmd on llama.cpp's own context: "
                         "it runs on the llama.cpp engine (engine='auto' or 'llama.cpp'), not pyriver's graphs")
    return "llama.cpp"
