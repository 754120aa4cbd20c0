"""Command-line values that the `pyriver` commands and the tools read alike."""
from __future__ import annotations

import argparse
from typing import Dict, List, Optional


def tensor_split(text: Optional[str]) -> Optional[List[float]]:
    """--tensor-split "1,2" -> [1.0, 2.0] (None when not given)."""
    if not text:
        return None
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--tensor-split takes numbers separated by commas, got {text!r}") from None


def add_flash_attn_arg(p: argparse.ArgumentParser) -> None:
    """-fa/--flash-attn on|off|auto, llama.cpp's flag (llama-server's and llama-cli's), auto by default."""
    p.add_argument("--flash-attn", "-fa", dest="flash_attn", nargs="?", const="on", default="auto",
                   choices=("on", "off", "auto"),
                   help="flash attention, llama.cpp's flag: auto (the default, as llama.cpp's) is on unless "
                   "--batch-invariant, which needs it off")


def flash_attn(setting: str, batch_invariant: bool) -> bool:
    """-fa on|off|auto as Llama's flash_attn. auto is llama.cpp's default and on here as there
    (ggml's CPU, CUDA and Metal backends have the op), so pyriver computes llama.cpp's bits.
    Batch invariance is built on the mul_mat + soft_max attention, so it turns auto off."""
    if setting == "on" and batch_invariant:
        raise ValueError("--batch-invariant needs flash attention off: leave out -fa on (or give -fa off)")
    return setting == "on" or (setting == "auto" and not batch_invariant)


def cache_type(text: str) -> str:
    """An argparse type: one of llama.cpp's KV cache type names, else its message."""
    from pyriver.engine import kv_types
    try:
        kv_types.type_id(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_cache_type_args(p: argparse.ArgumentParser, draft: bool = False) -> None:
    """-ctk/--cache-type-k and -ctv/--cache-type-v TYPE, llama.cpp's flags (llama-server's, llama-cli's);
    draft: the draft model's, -ctkd/--cache-type-k-draft and -ctvd/--cache-type-v-draft (llama-server's
    --spec-draft-type-k/-v, its newer names, too)."""
    from pyriver.engine import kv_types
    for side in ("k", "v"):
        names = ((f"--cache-type-{side}-draft", f"-ct{side}d", f"--spec-draft-type-{side}") if draft
                 else (f"--cache-type-{side}", f"-ct{side}"))
        whose = " for the draft model" if draft else ""
        p.add_argument(*names, dest=f"cache_type_{side}" + ("_draft" if draft else ""), type=cache_type, default="f16",
                       metavar="TYPE", help=f"KV cache data type for {side.upper()}{whose}, llama.cpp's: "
                       f"{kv_types.allowed()} (default: f16)"
                       + ("; a quantized V needs flash attention (-fa on or auto)" if side == "v" else ""))


def cache_kwargs(a, flash: bool, draft: bool = False) -> Dict:
    """Llama's type_k and type_v from -ctk/-ctv (draft: -ctkd/-ctvd), checked against flash attention
    (llama.cpp's rules: ValueError); nothing where a command has no such flags."""
    from pyriver.engine import kv_types
    tail = "_draft" if draft else ""
    if not hasattr(a, "cache_type_k" + tail):
        return {}
    k, v = kv_types.check(getattr(a, "cache_type_k" + tail), getattr(a, "cache_type_v" + tail), flash)
    return {"type_k": k, "type_v": v}


def device_kwargs(a) -> Dict:
    """Llama's (and llama.cpp's) n_gpu_layers, flash_attn, tensor_split and KV cache types from a
    command's arguments (--n-gpu-layers, -fa on|off|auto or the tools' --flash-attn, --tensor-split,
    -ctk/-ctv; absent ones at Llama's defaults)."""
    fa = getattr(a, "flash_attn", False)
    fa = flash_attn(fa, bool(getattr(a, "batch_invariant", False))) if isinstance(fa, str) else bool(fa)
    kw = {"n_gpu_layers": getattr(a, "n_gpu_layers", 0), "flash_attn": fa, **cache_kwargs(a, fa)}
    split = tensor_split(getattr(a, "tensor_split", None))
    if split:
        kw["tensor_split"] = split
    return kw


def add_layout_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-batch-layout", action="store_true",
                   help="one layout of the weights, llama.cpp's (by default, on x86 CPUs, the K-quant matrices that ggml "
                   "repacks for single tokens are also read in the file's layout by prompt steps of more "
                   "than 16 tokens, where ggml's tiled kernel is faster; the file's pages stay in memory: docs/lossless.md)")
    p.add_argument("--no-tiled-verify", action="store_true",
                   help="lossless verify steps attend a row at a time, as a prompt of their size (by default, with "
                   "flash attention on the CPU, those of the sizes where this machine measured it cheaper attend "
                   "through ggml's tiled kernel: docs/lossless.md)")


def layout_kwargs(a) -> Dict:
    """Llama's batch_layout and tiled_verify for the commands that serve or run a model: on unless
    --no-batch-layout, --no-tiled-verify."""
    return {"batch_layout": not getattr(a, "no_batch_layout", False),
            "tiled_verify": not getattr(a, "no_tiled_verify", False)}


def positive(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def draft_cost(spec: str):
    """--draft-cost: "default" or a `pyriver bench --verify-cost --json` file (pyriver.speculative.draftlen.parse_cost)."""
    from pyriver.speculative.draftlen import parse_cost
    try:
        return parse_cost(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def require_lossless(a: argparse.Namespace, flags: str) -> None:
    """The drafter flags (add_draft_args') choose lossless mode's drafter and draft length: an error
    without --lossless (flags: their names on this command line)."""
    if (a.draft is not None or a.draft_cost is not None) and not a.lossless:
        raise ValueError(f"{flags} choose lossless mode's drafter and draft length: add --lossless")


def add_draft_args(p: argparse.ArgumentParser, many: bool = False, flag: str = "--draft") -> None:
    """Lossless mode's drafter and draft length rule, alike in run, bench and calibrate (serve: flag
    --lossless-draft, since its --draft is llama-server's --draft-max). many: several drafters, each
    measured."""
    from pyriver.speculative.draft import DRAFTERS
    p.add_argument(flag, dest="draft", nargs="+" if many else None, choices=DRAFTERS, default=None,
                   help="lossless: the drafter" + ("s to measure" if many else "") + ": river (decode steps on the "
                   "River path), ngram (prompt lookup, no model work) or both (n-grams where the text has a match, else "
                   "the river) (default river)")
    p.add_argument("--draft-cost", type=draft_cost, default=None, metavar="default|FILE.json",
                   help="lossless: the draft length by cost (pyriver.speculative.draftlen) from the CPU table measured here "
                   "('default') or a `pyriver bench --verify-cost --json` file's")


ROPE_SCALINGS = {"none": 0, "linear": 1, "yarn": 2}   # llama.cpp's LLAMA_ROPE_SCALING_TYPE_*


def add_rope_args(p: argparse.ArgumentParser) -> None:
    """llama.cpp's RoPE flags (common/arg.cpp), at its defaults: the file's settings."""
    p.add_argument("--rope-scaling", choices=tuple(ROPE_SCALINGS), default=None,
                   help="RoPE frequency scaling method, defaults to linear unless specified by the model")
    p.add_argument("--rope-scale", type=float, default=None, metavar="N",
                   help="RoPE context scaling factor, expands context by a factor of N (--rope-freq-scale 1/N)")
    p.add_argument("--rope-freq-base", type=float, default=0.0, metavar="N",
                   help="RoPE base frequency, used by NTK-aware scaling (default: loaded from model)")
    p.add_argument("--rope-freq-scale", type=float, default=0.0, metavar="N",
                   help="RoPE frequency scaling factor, expands context by a factor of 1/N")
    p.add_argument("--yarn-orig-ctx", type=int, default=0, metavar="N",
                   help="YaRN: original context size of model (default: 0 = model training context size)")
    p.add_argument("--yarn-ext-factor", type=float, default=-1.0, metavar="N",
                   help="YaRN: extrapolation mix factor (default: -1.00, 0.0 = full interpolation)")
    p.add_argument("--yarn-attn-factor", type=float, default=-1.0, metavar="N",
                   help="YaRN: scale sqrt(t) or attention magnitude (default: -1.00)")
    p.add_argument("--yarn-beta-slow", type=float, default=-1.0, metavar="N",
                   help="YaRN: high correction dim or alpha (default: -1.00)")
    p.add_argument("--yarn-beta-fast", type=float, default=-1.0, metavar="N",
                   help="YaRN: low correction dim or beta (default: -1.00)")


def rope_kwargs(a) -> Dict:
    """Llama's RoPE arguments from add_rope_args' flags; negative yarn values are llama.cpp's 'the
    file's' (llama-server's defaults, where llama-cpp-python's Llama passes 1.0, 32.0 and 1.0)."""
    scale = a.rope_freq_scale
    if a.rope_scale is not None:
        if not a.rope_scale > 0:
            raise ValueError(f"--rope-scale must be > 0, got {a.rope_scale}")
        scale = 1.0 / a.rope_scale
    return {"rope_scaling_type": -1 if a.rope_scaling is None else ROPE_SCALINGS[a.rope_scaling],
            "rope_freq_base": a.rope_freq_base, "rope_freq_scale": scale, "yarn_orig_ctx": a.yarn_orig_ctx,
            "yarn_ext_factor": a.yarn_ext_factor, "yarn_attn_factor": a.yarn_attn_factor,
            "yarn_beta_slow": a.yarn_beta_slow, "yarn_beta_fast": a.yarn_beta_fast}
