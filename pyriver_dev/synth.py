"""Synthetic GGUF models for tests and benchmarks.

Writes ``llama``, ``qwen2``, ``qwen3``, ``gemma3``, ``mistral3``, ``gemma2``, ``smollm3``, ``olmo2`` and
``phi3`` GGUF files with random (seeded, deterministic)
weights, small or large dimensions, and a *real* tokenizer copied from an existing GGUF file, so
that llama.cpp (and llama-cpp-python) can load and run them. Only numpy and gguf do the work: no
native library is loaded (the default tokenizer file comes from the model registry).

``write_model(path, arch=..., ...)`` writes any of ``ARCHS``; ``write_llama(path, ...)`` a llama.
Requantizing one with llama.cpp: pyriver.tools.quantize; broken files: pyriver_dev.corrupt.

Command line::

    python -m pyriver_dev.synth OUT.gguf [--arch gemma3 --head-dim 48 --sliding-window 16] --layers 4 --embd 128 \\
        --heads 4 --heads-kv 2 --ff 352 --dtype f16 --seed 0 [--tokenizer-from SOME.gguf] [--untied] [--quantize q4_0]

Weight recipe (see ``write_llama``): every matrix is N(0, 1/fan_in) times a
per-tensor gain, the residual-branch output projections (attn_output,
ffn_down) are scaled by ``RESIDUAL_STD/sqrt(2*n_layer)`` so each block adds an
O(1/sqrt(n_layer)) update and the final residual RMS is ~``RESIDUAL_STD``
whatever the depth, token embeddings are small (``LOGIT_STD/sqrt(n_embd)``)
so the residual stream is dominated by the blocks (this avoids the
"predict the current token again" collapse of tied random embeddings), and the
output head gives logits with standard deviation ~``LOGIT_STD``.  Norm weights
are ``1 + 0.1*N(0,1)`` so that implementations that forget them are caught.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import zlib
from types import SimpleNamespace
from typing import Any, Iterator, Mapping, NamedTuple, Optional

import gguf
import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType

from pyriver import models

from pyriver.tools.gguf_io import KV, Plan, Tensor, field_to_kv, write_plan

__all__ = ["write_llama", "write_model", "ARCHS", "LOGIT_STD"]

#: Target standard deviation of the output logits of a synthetic model.
LOGIT_STD = 3.0
#: Target RMS of the summed residual-branch outputs (all layers together).
RESIDUAL_STD = 3.0
#: E[silu(a)^2] for a ~ N(0,1): variance of silu(gate) * up at unit inputs.
_SWIGLU_VAR = 0.3559

# Default per-role gains (multiplied with the base std of each tensor).
_DEFAULT_GAINS = {
    "token_embd": 1.0,
    "output": 1.0,
    "attn_q": 1.25,  # q and k slightly larger -> attention scores std ~1.5
    "attn_k": 1.25,
    "attn_v": 1.0,
    "attn_output": 1.0,
    "ffn_gate": 1.0,
    "ffn_up": 1.0,
    "ffn_down": 1.0,
    "ffn_gate_inp": 1.0,  # MoE router: logits ~ N(0, 1) per expert
    "norm": 0.1,  # std of the jitter around 1.0 for RMSNorm weights
}

_FILE_TYPES = {"f32": 0, "f16": 1, "q8_0": 7}
_GGML_TYPES = {
    "f32": GGMLQuantizationType.F32,
    "f16": GGMLQuantizationType.F16,
    "q8_0": GGMLQuantizationType.Q8_0,
}
_CHUNK_ELEMS = 1 << 22  # elements generated per chunk (16 MiB of float32)


# --------------------------------------------------------------------------
# the architectures, as data
# --------------------------------------------------------------------------

class _Block(NamedTuple):
    """One tensor of every block: its name after "blk.N.", its extents (fields of _Dims, ggml
    order), how it is drawn, and the group that adds it (None: every architecture)."""
    name: str
    ne: tuple
    kind: str                   # "mat": N(0, (gain / sqrt(fan_in))^2), "router" the same in F32; "norm": mean + jitter; "bias"
    role: str = ""              # mat: its gain in weight_scale
    branch: bool = False        # output of a residual branch: scaled by the per-branch RMS
    group: Optional[str] = None
    fan_var: float = 1.0        # mat: variance of one input unit (SwiGLU's output for ffn_down)


# In file order.
_BLOCK = (
    _Block("attn_norm.weight", ("embd",), "norm"),
    _Block("attn_q.weight", ("embd", "q"), "mat", "attn_q"),
    _Block("attn_k.weight", ("embd", "kv"), "mat", "attn_k"),
    _Block("attn_v.weight", ("embd", "kv"), "mat", "attn_v"),
    _Block("attn_q.bias", ("q",), "bias", group="qkv_bias"),
    _Block("attn_k.bias", ("kv",), "bias", group="qkv_bias"),
    _Block("attn_v.bias", ("kv",), "bias", group="qkv_bias"),
    _Block("attn_q_norm.weight", ("head",), "norm", group="qk_norm"),
    _Block("attn_k_norm.weight", ("head",), "norm", group="qk_norm"),
    _Block("attn_output.weight", ("q", "embd"), "mat", "attn_output", branch=True),
    _Block("ffn_norm.weight", ("embd",), "norm"),
    _Block("ffn_gate.weight", ("embd", "ff"), "mat", "ffn_gate"),
    _Block("ffn_up.weight", ("embd", "ff"), "mat", "ffn_up"),
    _Block("ffn_down.weight", ("ff", "embd"), "mat", "ffn_down", branch=True, fan_var=_SWIGLU_VAR),
    # The optional biases llama.cpp reads for llama.
    _Block("attn_output.bias", ("embd",), "bias", branch=True, group="llama_bias"),
    _Block("ffn_gate.bias", ("ff",), "bias", group="llama_bias"),
    _Block("ffn_up.bias", ("ff",), "bias", group="llama_bias"),
    _Block("ffn_down.bias", ("embd",), "bias", branch=True, group="llama_bias"),
    # Post-norms set each branch's RMS to their weights: ~branch, as the others get it.
    _Block("post_attention_norm.weight", ("embd",), "norm", branch=True, group="post_norm"),
    _Block("post_ffw_norm.weight", ("embd",), "norm", branch=True, group="post_norm"),
    # OLMo 2: Q/K norms over the whole projection.
    _Block("attn_q_norm.weight", ("q",), "norm", group="qk_norm_full"),
    _Block("attn_k_norm.weight", ("kv",), "norm", group="qk_norm_full"),
    # Phi-3: Q/K/V in one product, gate and up in one (gate first).
    _Block("attn_qkv.weight", ("embd", "qkv"), "mat", "attn_q", group="fused"),
    _Block("ffn_up.weight", ("embd", "ff2"), "mat", "ffn_up", group="fused"),
    # Qwen3-MoE: a router (F32, as converters write it) and the experts stacked in ne2. A token's
    # FFN output is a weighted mean of its experts' outputs, drawn as a dense FFN's.
    _Block("ffn_gate_inp.weight", ("embd", "expert"), "router", "ffn_gate_inp", group="moe"),
    _Block("ffn_gate_exps.weight", ("embd", "ff_exp", "expert"), "mat", "ffn_gate", group="moe"),
    _Block("ffn_down_exps.weight", ("ff_exp", "embd", "expert"), "mat", "ffn_down", branch=True, group="moe",
           fan_var=_SWIGLU_VAR),
    _Block("ffn_up_exps.weight", ("embd", "ff_exp", "expert"), "mat", "ffn_up", group="moe"),
)


class _Arch(NamedTuple):
    groups: tuple               # block tensor groups added to llama's
    embd_scaled: bool = False   # the graph multiplies embeddings by sqrt(n_embd): drawn smaller by it
    q_is_embd: bool = False     # llama.cpp's shapes need n_head * head_dim == n_embd
    drop: tuple = ()            # llama's block tensors this arch does not have
    head: str = "either"        # output.weight: "either" (tied_output decides), "tied" (never), "untied" (always)
    rope_factors: bool = False  # LongRoPE's rope_factors_long/short.weight (Phi-3)
    moe: bool = False           # a mixture of experts: expert_count, expert_used_count, expert_feed_forward_length


_NAME = {"phi3": "phi-mini"}   # general.name's arch part, where the arch's own name would not load
_FUSED_DROP = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "ffn_gate.weight", "ffn_up.weight")
_DENSE_FFN = ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")
_ARCHS = {
    "llama": _Arch(()),
    "qwen2": _Arch(("qkv_bias",), q_is_embd=True),
    "qwen3": _Arch(("qk_norm",)),
    "gemma3": _Arch(("qk_norm", "post_norm"), embd_scaled=True),
    "mistral3": _Arch(()),
    "gemma2": _Arch(("post_norm",), embd_scaled=True, head="tied"),
    "smollm3": _Arch(()),
    "olmo2": _Arch(("qk_norm_full", "post_norm"), q_is_embd=True, head="untied",
                   drop=("attn_norm.weight", "ffn_norm.weight")),
    "phi3": _Arch(("fused",), q_is_embd=True, drop=_FUSED_DROP, rope_factors=True),
    "qwen3moe": _Arch(("qk_norm", "moe"), drop=_DENSE_FFN, moe=True),
}
#: Architectures :func:`write_model` writes.
ARCHS = tuple(_ARCHS)
_BIASES = ("qkv_bias", "llama_bias")   # biases=True on a llama file


class _Dims(NamedTuple):
    embd: int
    q: int
    kv: int
    ff: int
    head: int
    qkv: int
    ff2: int
    expert: int
    ff_exp: int


# --------------------------------------------------------------------------
# tensors
# --------------------------------------------------------------------------

def _tensor_seed(seed: int, name: str) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, zlib.crc32(name.encode())])


def _random_tensor(name: str, ne: tuple[int, ...], qtype: GGMLQuantizationType, seed: int,
                   std: float, mean: float = 0.0) -> Tensor:
    """Tensor with elements ``mean + std * N(0,1)``, generated row-chunk by row-chunk.

    The float32 values do not depend on ``qtype``: f32/f16/q8_0 files written with
    the same seed hold the same weights up to rounding.
    """
    cols = ne[0]
    rows = math.prod(ne[1:]) if len(ne) > 1 else 1
    rows_per_chunk = max(1, _CHUNK_ELEMS // cols)

    def chunks() -> Iterator[np.ndarray]:
        rng = np.random.Generator(np.random.PCG64(_tensor_seed(seed, name)))
        for r0 in range(0, rows, rows_per_chunk):
            n = min(rows_per_chunk, rows - r0)
            x = rng.standard_normal((n, cols), dtype=np.float32)
            x *= np.float32(std)
            if mean:
                x += np.float32(mean)
            if qtype == GGMLQuantizationType.F32:
                yield x
            elif qtype == GGMLQuantizationType.F16:
                yield x.astype(np.float16)
            else:
                yield gguf.quants.quantize(x, qtype)

    return Tensor(name, tuple(int(d) for d in ne), qtype, chunks)


def _gains(weight_scale: float | Mapping[str, float] | None) -> dict[str, float]:
    g = dict(_DEFAULT_GAINS)
    if weight_scale is None:
        return g
    if isinstance(weight_scale, Mapping):
        unknown = set(weight_scale) - set(g)
        if unknown:
            raise ValueError(f"unknown weight_scale roles {sorted(unknown)}; known: {sorted(g)}")
        for k, v in weight_scale.items():
            g[k] *= float(v)
        return g
    s = float(weight_scale)
    return {k: (v if k == "norm" else v * s) for k, v in g.items()}


def _block_tensor(spec: _Block, prefix: str, dims: _Dims, wtype: GGMLQuantizationType, seed: int,
                  gains: dict, branch: float) -> Tensor:
    ne = tuple(getattr(dims, d) for d in spec.ne)
    scale = branch if spec.branch else 1.0
    if spec.kind in ("mat", "router"):
        std = gains[spec.role] * scale / math.sqrt(ne[0] * spec.fan_var)
        qtype = wtype if spec.kind == "mat" else GGMLQuantizationType.F32
        return _random_tensor(prefix + spec.name, ne, qtype, seed, std)
    if spec.kind == "norm":
        return _random_tensor(prefix + spec.name, ne, GGMLQuantizationType.F32, seed, gains["norm"] * scale, scale)
    return _random_tensor(prefix + spec.name, ne, GGMLQuantizationType.F32, seed, 0.5 * scale)


# --------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------

# write_model's arguments and their defaults (write_llama's docstring says what each is).
_DEFAULTS = dict(arch="llama", n_layer=4, n_embd=128, n_head=4, n_head_kv=4, n_ff=352, n_ctx_train=2048,
                 rope_freq_base=10000.0, rms_eps=1e-5, tied_output=True, dtype="f32", seed=0, tokenizer_from=None,
                 weight_scale=None, rope_scaling=None, n_embd_head=None, sliding_window=0, swa_pattern=None,
                 rope_freq_base_swa=None, final_logit_softcapping=None, biases=False,
                 attn_logit_softcapping=None, attn_temperature_scale=None, n_rot=None,
                 n_expert=8, n_expert_used=2, n_ff_exp=None)


class _Model(SimpleNamespace):
    """Everything write_model takes; checks itself, and gives the file's metadata and tensors."""

    def __init__(self, **kw):
        unknown = sorted(set(kw) - set(_DEFAULTS))
        if unknown:
            raise TypeError(f"write_model() got unexpected arguments: {', '.join(unknown)}")
        super().__init__(**{**_DEFAULTS, **kw})

    def check(self) -> int:
        """Validates the arguments; returns the head size."""
        if self.arch not in _ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        self.dtype = self.dtype.lower()
        if self.dtype not in _GGML_TYPES:
            raise ValueError(f"dtype must be one of {sorted(_GGML_TYPES)}, got {self.dtype!r}")
        for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "n_ff", "n_ctx_train"):
            if int(getattr(self, k)) <= 0:
                raise ValueError(f"{k} must be positive, got {getattr(self, k)}")
        if self.n_head % self.n_head_kv:
            raise ValueError(f"n_head={self.n_head} is not divisible by n_head_kv={self.n_head_kv}")
        if self.n_embd_head is None:
            if self.n_embd % self.n_head:
                raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
            head_dim = self.n_embd // self.n_head
        else:
            head_dim = int(self.n_embd_head)
        if head_dim % 2 or head_dim <= 0:
            raise ValueError(f"head_dim={head_dim} must be even and positive for RoPE")
        if self.biases and self.arch not in ("llama", "mistral3"):
            raise ValueError("biases=True is for llama and mistral3 files (qwen2 always has its Q/K/V biases)")
        if _ARCHS[self.arch].q_is_embd and head_dim * self.n_head != self.n_embd:
            raise ValueError(f"{self.arch} (as llama.cpp loads it) needs n_head * head_dim == n_embd")
        if self.n_rot is not None and (int(self.n_rot) % 2 or not 0 < int(self.n_rot) <= head_dim):
            raise ValueError(f"n_rot={self.n_rot} must be even and in (0, head_dim={head_dim}]")
        if _ARCHS[self.arch].moe:
            if not 0 < int(self.n_expert_used) <= int(self.n_expert):
                raise ValueError(f"need 0 < n_expert_used <= n_expert, got {self.n_expert_used} of {self.n_expert}")
            if int(self.n_ff_expert) <= 0:
                raise ValueError(f"n_ff_exp must be positive, got {self.n_ff_exp}")
        block = gguf.GGML_QUANT_SIZES[_GGML_TYPES[self.dtype]][0]
        ff_exp = self.n_ff_expert if _ARCHS[self.arch].moe else 0
        if self.n_embd % block or self.n_ff % block or ff_exp % block or (head_dim * self.n_head) % block:
            raise ValueError(f"dtype {self.dtype} needs n_embd, n_ff, an expert's n_ff and n_head*head_dim to be multiples of {block}")
        if isinstance(self.swa_pattern, (list, tuple)) and len(self.swa_pattern) != self.n_layer:
            raise ValueError("swa_pattern as a list needs one entry per layer")
        return head_dim

    @property
    def n_ff_expert(self) -> int:
        """An expert's width: n_ff_exp, else llama.cpp's default n_ff / n_expert_used."""
        return int(self.n_ff_exp) if self.n_ff_exp is not None else self.n_ff // max(1, int(self.n_expert_used))

    def metadata(self, head_dim: int, tok_kv: dict[str, KV]) -> dict[str, KV]:
        U32, F32, STR = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING
        A = self.arch + "."
        kv = {"general.architecture": KV(self.arch, STR), "general.type": KV("model", STR),
              # llama.cpp's vocabulary loader sets Phi-3's token attributes on any file whose name
              # contains "phi3" and needs Phi-3's "</s>" then: the name is "phi-mini" for phi3.
              "general.name": KV(f"pyriver-synth-{_NAME.get(self.arch, self.arch)}-L{self.n_layer}-E{self.n_embd}-H{self.n_head}"
                                 f"-KV{self.n_head_kv}-F{self.n_ff}-{self.dtype}-s{self.seed}", STR),
              "general.file_type": KV(_FILE_TYPES[self.dtype], U32)}
        if self.dtype not in ("f32", "f16"):
            kv["general.quantization_version"] = KV(gguf.GGML_QUANT_VERSION, U32)
        for key, v in (("block_count", self.n_layer), ("context_length", self.n_ctx_train),
                       ("embedding_length", self.n_embd), ("feed_forward_length", self.n_ff),
                       ("attention.head_count", self.n_head), ("attention.head_count_kv", self.n_head_kv)):
            kv[A + key] = KV(v, U32)
        if self.n_embd_head is not None:
            kv[A + "attention.key_length"] = KV(head_dim, U32)
            kv[A + "attention.value_length"] = KV(head_dim, U32)
        kv[A + "rope.freq_base"] = KV(float(self.rope_freq_base), F32)
        kv[A + "attention.layer_norm_rms_epsilon"] = KV(float(self.rms_eps), F32)
        kv[A + "rope.dimension_count"] = KV(head_dim if self.n_rot is None else int(self.n_rot), U32)
        kv[A + "vocab_size"] = KV(len(tok_kv["tokenizer.ggml.tokens"].value), U32)
        if self.sliding_window:
            # gemma3 reads it; llama.cpp ignores it for llama (Mistral-style files carry it anyway).
            kv[A + "attention.sliding_window"] = KV(int(self.sliding_window), U32)
        if isinstance(self.swa_pattern, int):
            kv[A + "attention.sliding_window_pattern"] = KV(int(self.swa_pattern), U32)
        elif self.swa_pattern is not None:
            kv[A + "attention.sliding_window_pattern"] = KV([bool(x) for x in self.swa_pattern],
                                                            GGUFValueType.ARRAY, GGUFValueType.BOOL)
        if self.rope_freq_base_swa is not None:
            kv[A + "rope.freq_base_swa"] = KV(float(self.rope_freq_base_swa), F32)
        if self.final_logit_softcapping is not None:
            kv[A + "final_logit_softcapping"] = KV(float(self.final_logit_softcapping), F32)
        if self.attn_logit_softcapping is not None:
            kv[A + "attn_logit_softcapping"] = KV(float(self.attn_logit_softcapping), F32)
        if self.attn_temperature_scale is not None:
            kv[A + "attention.temperature_scale"] = KV(float(self.attn_temperature_scale), F32)
        if _ARCHS[self.arch].moe:
            kv[A + "expert_count"] = KV(int(self.n_expert), U32)
            kv[A + "expert_used_count"] = KV(int(self.n_expert_used), U32)
            kv[A + "expert_feed_forward_length"] = KV(self.n_ff_expert, U32)
        kv.update(_rope_scaling_kv(A, self.rope_scaling))
        kv.update(tok_kv)
        return kv

    def tensors(self, head_dim: int, n_vocab: int) -> list[Tensor]:
        """In ggml order (ne0 = input/contiguous dim)."""
        wtype, seed, g = _GGML_TYPES[self.dtype], self.seed, _gains(self.weight_scale)
        arch = _ARCHS[self.arch]
        q, kvd = self.n_head * head_dim, self.n_head_kv * head_dim
        dims = _Dims(self.n_embd, q, kvd, self.n_ff, head_dim, q + 2 * kvd, 2 * self.n_ff, int(self.n_expert),
                     self.n_ff_expert)
        groups = set(arch.groups) | (set(_BIASES) if self.biases else set())
        branch = RESIDUAL_STD / math.sqrt(2 * self.n_layer)  # per-branch output RMS
        emb_std = LOGIT_STD / math.sqrt(self.n_embd) * g["token_embd"]
        if arch.embd_scaled:
            emb_std /= math.sqrt(self.n_embd)
        out = [_random_tensor("token_embd.weight", (self.n_embd, n_vocab), wtype, seed, emb_std)]
        for i in range(self.n_layer):
            out += [_block_tensor(s, f"blk.{i}.", dims, wtype, seed, g, branch) for s in _BLOCK
                    if (s.group is None and s.name not in arch.drop) or s.group in groups]
        out.append(_random_tensor("output_norm.weight", (self.n_embd,), GGMLQuantizationType.F32, seed, g["norm"], 1.0))
        if arch.rope_factors:
            # LongRoPE: frequency divisors per rotated pair, ~1 within the original context, larger beyond.
            n = (head_dim if self.n_rot is None else int(self.n_rot)) // 2
            out.append(_random_tensor("rope_factors_long.weight", (n,), GGMLQuantizationType.F32, seed, 0.5, 3.0))
            out.append(_random_tensor("rope_factors_short.weight", (n,), GGMLQuantizationType.F32, seed, 0.1, 1.0))
        if arch.head == "untied" or (arch.head == "either" and not self.tied_output):
            out_std = LOGIT_STD / math.sqrt(self.n_embd) * g["output"]
            out.append(_random_tensor("output.weight", (self.n_embd, n_vocab), wtype, seed, out_std))
        return out


def _rope_scaling_kv(prefix: str, rope_scaling: Optional[Mapping[str, Any]]) -> dict[str, KV]:
    """e.g. {"type": "linear", "factor": 2.0}; type None writes no type key (llama.cpp then reads
    the factor as linear)."""
    kv: dict[str, KV] = {}
    if not rope_scaling:
        return kv
    rs = dict(rope_scaling)
    rtype = rs.pop("type", rs.pop("rope_type", "linear"))
    if rtype is not None:
        kv[prefix + "rope.scaling.type"] = KV(str(rtype), GGUFValueType.STRING)
    if "factor" in rs:
        kv[prefix + "rope.scaling.factor"] = KV(float(rs.pop("factor")), GGUFValueType.FLOAT32)
    if "original_context_length" in rs:
        kv[prefix + "rope.scaling.original_context_length"] = KV(int(rs.pop("original_context_length")),
                                                                 GGUFValueType.UINT32)
    # attn_factor, and the YaRN keys Mistral 3 files carry.
    for key in ("attn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_log_multiplier"):
        if key in rs:
            kv[prefix + "rope.scaling." + key] = KV(float(rs.pop(key)), GGUFValueType.FLOAT32)
    if rs:
        raise ValueError(f"unsupported rope_scaling keys: {sorted(rs)}")
    return kv


_TOKENIZER_CACHE: dict[tuple[str, int, int], dict[str, KV]] = {}


def _tokenizer_kv(path: str | os.PathLike[str]) -> dict[str, KV]:
    """All ``tokenizer.*`` metadata of a GGUF file (cached per process)."""
    p = os.path.realpath(os.fspath(path))
    st = os.stat(p)
    key = (p, st.st_size, st.st_mtime_ns)
    if key not in _TOKENIZER_CACHE:
        reader = gguf.GGUFReader(p, "r")
        kv = {k: field_to_kv(f) for k, f in reader.fields.items() if k.startswith("tokenizer.")}
        if "tokenizer.ggml.tokens" not in kv:
            raise ValueError(f"{p}: no tokenizer.ggml.tokens metadata")
        _TOKENIZER_CACHE[key] = kv
        del reader
    return _TOKENIZER_CACHE[key]


def write_model(path: str | os.PathLike[str], **kw) -> pathlib.Path:
    """Write a synthetic GGUF model of ``arch`` (any of ``ARCHS``).

    Arguments as :func:`write_llama`, plus: ``arch``; ``n_embd_head`` (head size written as
    ``attention.key_length``, independent of ``n_embd / n_head``); ``sliding_window``
    (``attention.sliding_window``: gemma3's local layers; on llama files llama.cpp ignores it);
    ``swa_pattern`` (an int period or one bool per layer); ``rope_freq_base_swa``;
    ``final_logit_softcapping``; ``attn_logit_softcapping`` (gemma2); ``attn_temperature_scale``
    (mistral3's ``attention.temperature_scale``); ``n_rot`` (``rope.dimension_count`` below the head
    size: phi3's partial rotary); ``biases`` (llama, mistral3: every optional bias llama.cpp reads).
    ``rope_scaling`` may also give ``attn_factor`` and the YaRN keys ``yarn_beta_fast``,
    ``yarn_beta_slow``, ``yarn_log_multiplier``.
    Per arch (the table _ARCHS): qwen2 adds Q/K/V biases, qwen3 Q/K norms, gemma3
    Q/K norms and post-attention / post-FFN norms (embeddings are drawn smaller by
    sqrt(n_embd), which gemma3's graph multiplies back); gemma2 post-norms (always tied, drawn as
    gemma3); smollm3 and mistral3 llama's block; olmo2 post-norms only and Q/K norms over the whole
    projection (always untied); phi3 a fused attn_qkv, a fused gate/up ffn_up of 2 x n_ff and
    LongRoPE factors; qwen3moe qwen3's attention and, instead of the dense FFN, a router and
    ``n_expert`` experts of ``n_ff_exp`` (default ``n_ff // n_expert_used``), ``n_expert_used``
    per token.
    """
    m = _Model(**kw)
    head_dim = m.check()
    tok = m.tokenizer_from if m.tokenizer_from is not None else models.resolve(None)
    tok_kv = _tokenizer_kv(tok)
    plan = Plan(kv=m.metadata(head_dim, tok_kv),
                tensors=m.tensors(head_dim, len(tok_kv["tokenizer.ggml.tokens"].value)))
    return write_plan(pathlib.Path(path), plan)


def write_llama(path: str | os.PathLike[str], *, n_layer: int = 4, n_embd: int = 128,
                n_head: int = 4, n_head_kv: int = 4, n_ff: int = 352, n_ctx_train: int = 2048,
                rope_freq_base: float = 10000.0, rms_eps: float = 1e-5,
                tied_output: bool = True, dtype: str = "f32", seed: int = 0,
                tokenizer_from: str | os.PathLike[str] | None = None,
                weight_scale: float | Mapping[str, float] | None = None,
                rope_scaling: Mapping[str, Any] | None = None) -> pathlib.Path:
    """Write a synthetic ``llama`` GGUF model with seeded random weights.

    Args:
        path: output file (parent directories are created; written atomically).
        n_layer, n_embd, n_head, n_head_kv, n_ff: model dimensions
            (``head_dim = n_embd // n_head``; ``n_head_kv < n_head`` gives GQA).
        n_ctx_train: ``llama.context_length``.
        rope_freq_base, rms_eps: ``llama.rope.freq_base`` and
            ``llama.attention.layer_norm_rms_epsilon``.
        tied_output: if False an independent ``output.weight`` is written,
            otherwise llama.cpp reuses ``token_embd.weight``.
        dtype: ``"f32"``, ``"f16"`` or ``"q8_0"`` for the 2-D weights (norms are
            always F32). q8_0 needs ``n_embd`` and ``n_ff`` multiples of 32. For
            other types write f16/f32 and requantize (pyriver.tools.quantize).
        seed: RNG seed. Each tensor gets its own stream derived from
            ``(seed, tensor name)``, so the float values are identical across
            dtypes and independent of the other dimensions' tensors.
        tokenizer_from: GGUF whose ``tokenizer.*`` metadata (vocab, types,
            merges, model, pre, special ids, add_bos..., chat template) is copied;
            ``n_vocab`` is its token count. Default: ``pyriver.models.resolve(None)``.
        weight_scale: ``None``; a float multiplying the std of every matrix; or a
            dict of per-role multipliers with roles ``token_embd, output, attn_q,
            attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down, ffn_gate_inp, norm``
            (``norm`` scales the jitter of the norm weights around 1).
        rope_scaling: e.g. ``{"type": "linear", "factor": 2.0}``; writes
            ``llama.rope.scaling.type`` / ``.factor`` (and
            ``.original_context_length`` if given).

    Returns:
        The path written, as :class:`pathlib.Path`.
    """
    return write_model(path, arch="llama", n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                       n_head_kv=n_head_kv, n_ff=n_ff, n_ctx_train=n_ctx_train,
                       rope_freq_base=rope_freq_base, rms_eps=rms_eps, tied_output=tied_output,
                       dtype=dtype, seed=seed, tokenizer_from=tokenizer_from,
                       weight_scale=weight_scale, rope_scaling=rope_scaling)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyriver_dev.synth",
                                 description="Write a synthetic GGUF model with random weights.")
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--arch", default="llama", choices=ARCHS)
    ap.add_argument("--head-dim", type=int, default=None, help="default: embd / heads")
    ap.add_argument("--sliding-window", type=int, default=0)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--heads-kv", type=int, default=None, help="default: --heads")
    ap.add_argument("--ff", type=int, default=352)
    ap.add_argument("--experts", type=int, default=8, help="qwen3moe: experts per block")
    ap.add_argument("--experts-used", type=int, default=2, help="qwen3moe: experts per token")
    ap.add_argument("--ff-exp", type=int, default=None, help="qwen3moe: an expert's width (default: ff / experts-used)")
    ap.add_argument("--ctx", type=int, default=2048, help="n_ctx_train")
    ap.add_argument("--rope-base", type=float, default=10000.0)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--untied", action="store_true", help="write a separate output.weight")
    ap.add_argument("--dtype", default="f32", choices=sorted(_GGML_TYPES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", default=None)
    ap.add_argument("--weight-scale", type=float, default=None)
    ap.add_argument("--rope-scaling", default=None, metavar="TYPE:FACTOR",
                    help="e.g. linear:2.0")
    ap.add_argument("--quantize", default=None, metavar="FTYPE",
                    help="additionally re-quantize with llama.cpp (q4_0, q8_0, q4_k_m, ...) "
                         "into OUT with the ftype appended to the stem")
    a = ap.parse_args(argv)
    rs = None
    if a.rope_scaling:
        typ, _, fac = a.rope_scaling.partition(":")
        rs = {"type": typ, "factor": float(fac or 1.0)}
    p = write_model(a.out, arch=a.arch, n_embd_head=a.head_dim, sliding_window=a.sliding_window,
                    n_layer=a.layers, n_embd=a.embd, n_head=a.heads,
                    n_head_kv=a.heads_kv or a.heads, n_ff=a.ff, n_ctx_train=a.ctx,
                    rope_freq_base=a.rope_base, rms_eps=a.rms_eps, tied_output=not a.untied,
                    dtype=a.dtype, seed=a.seed, tokenizer_from=a.tokenizer_from,
                    weight_scale=a.weight_scale, rope_scaling=rs, n_expert=a.experts,
                    n_expert_used=a.experts_used, n_ff_exp=a.ff_exp)
    print(p)
    if a.quantize:
        from pyriver.tools.quantize import quantize  # llama.cpp only when asked for: writing needs none
        q = quantize(p, p.with_name(f"{p.stem}.{a.quantize.lower()}{p.suffix}"), a.quantize)
        print(q)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
