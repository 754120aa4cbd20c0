"""The pieces synth_foreign's architectures are assembled from: a file's metadata (keys typed from
their Python values, the architecture's prefix added) and its random tensors, drawn as synth.py
draws them (every matrix N(0, 1/fan_in) times a gain; the outputs of residual branches scaled so
that the blocks together add an RMS of ~synth.RESIDUAL_STD; norms 1 + 0.1 N(0, 1); small token
embeddings and logits of standard deviation ~synth.LOGIT_STD).

    p = Parts("glm4", n_layer=4, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, tokenizer_from=...)
    p.key("rope.dimension_count", 8)
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        p.attn(i)
        ...
    p.head()
    plan = p.plan()
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Optional

from gguf import GGMLQuantizationType, GGUFValueType

from pyriver_dev import synth
from pyriver.tools.gguf_io import KV, Plan, Tensor

F32 = GGMLQuantizationType.F32
_SCALAR = {bool: GGUFValueType.BOOL, int: GGUFValueType.UINT32, float: GGUFValueType.FLOAT32,
           str: GGUFValueType.STRING}


def typed(value: Any) -> KV:
    """A metadata value: bool, int (uint32), float (float32), str, or a list of one of them."""
    if isinstance(value, (list, tuple)):
        return KV(list(value), GGUFValueType.ARRAY, _SCALAR[type(value[0])])
    return KV(value, _SCALAR[type(value)])


class Parts:
    """A synthetic file of `arch` being assembled. The llama keys every loader reads are written
    at once (block_count, context_length, embedding_length, feed_forward_length, head counts, RMS
    epsilon, rope.freq_base, vocab_size) with the tokenizer of `tokenizer_from` (a GGUF file,
    default the model registry's) and the token embeddings; an architecture adds the rest."""

    def __init__(self, arch: str, *, n_layer: int = 4, n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2,
                 n_ff: int = 128, n_ctx_train: int = 2048, rms_eps: float = 1e-5, rope_freq_base: float = 10000.0,
                 seed: int = 0, tokenizer_from: Optional[str] = None, embd_scaled: bool = False, **unused: Any):
        if unused.pop("dtype", "f32") != "f32" or unused:
            raise TypeError(f"synth_foreign writes f32 files of n_layer, n_embd, n_head, n_head_kv, n_ff, "
                            f"n_ctx_train, rms_eps, rope_freq_base, seed, tokenizer_from; got {sorted(unused)}")
        self.arch, self.n_layer, self.n_embd, self.n_head, self.n_head_kv, self.n_ff = arch, n_layer, n_embd, n_head, n_head_kv, n_ff
        self.seed = seed
        self.head_dim = n_embd // n_head
        tok_kv = synth._tokenizer_kv(tokenizer_from if tokenizer_from is not None else synth.models.resolve(None))
        self.n_vocab = len(tok_kv["tokenizer.ggml.tokens"].value)
        #: a residual branch's output RMS (synth's recipe)
        self.branch = synth.RESIDUAL_STD / math.sqrt(2 * n_layer)
        self.kv: dict[str, KV] = {
            "general.architecture": typed(arch), "general.type": typed("model"),
            "general.name": typed(f"pyriver-synth-{arch}-L{n_layer}-E{n_embd}-H{n_head}-KV{n_head_kv}-F{n_ff}-f32-s{seed}"),
            "general.file_type": typed(0)}
        self.tensors: list[Tensor] = []
        self.key("block_count", n_layer)
        self.key("context_length", n_ctx_train)
        self.key("embedding_length", n_embd)
        self.key("feed_forward_length", n_ff)
        self.key("attention.head_count", n_head)
        self.key("attention.head_count_kv", n_head_kv)
        self.key("attention.layer_norm_rms_epsilon", float(rms_eps))
        self.key("rope.freq_base", float(rope_freq_base))
        self.key("vocab_size", self.n_vocab)
        self.kv.update(tok_kv)
        # small embeddings (the blocks dominate the residual stream); smaller by sqrt(n_embd)
        # where the graph scales them up by it (Gemma)
        std = synth.LOGIT_STD / math.sqrt(n_embd) / (math.sqrt(n_embd) if embd_scaled else 1.0)
        self.vec("token_embd.weight", (n_embd, self.n_vocab), std)

    # -- metadata -----------------------------------------------------------------------------
    def key(self, name: str, value: Any) -> None:
        """`<arch>.<name>` = value (typed as `typed` types it)."""
        self.kv[f"{self.arch}.{name}"] = typed(value)

    # -- tensors ------------------------------------------------------------------------------
    def layers(self) -> Iterable[int]:
        return range(self.n_layer)

    @staticmethod
    def blk(i: int, name: str, suffix: str = "weight") -> str:
        return f"blk.{i}.{name}" + (f".{suffix}" if suffix else "")

    def vec(self, name: str, ne: tuple, std: float, mean: float = 0.0) -> None:
        """Any f32 tensor of elements mean + std * N(0, 1)."""
        self.tensors.append(synth._random_tensor(name, tuple(int(d) for d in ne), F32, self.seed, std, mean))

    def mat(self, name: str, ne: tuple, out: bool = False, gain: float = 1.0, fan_var: float = 1.0) -> None:
        """A product's weights (ne[0] inputs): N(0, (gain / sqrt(ne[0] * fan_var))^2), times the
        branch RMS where `out` (the product ends a residual branch)."""
        self.vec(name, ne, gain * (self.branch if out else 1.0) / math.sqrt(ne[0] * fan_var))

    def norm(self, name: str, n: Optional[int] = None, mean: float = 1.0) -> None:
        self.vec(name, (n or self.n_embd,), 0.1, mean)

    def attn(self, i: int, q: Optional[int] = None, k: Optional[int] = None, v: Optional[int] = None,
             o: Optional[int] = None, qk_norm: int = 0, bias: bool = False) -> None:
        """attn_q/k/v/output of block i: Q of q outputs (default n_head * head_dim), K of k and V of v
        (default n_head_kv * head_dim), attn_output of o inputs (default q); with Q/K norms of
        qk_norm each, and Q/K/V biases."""
        q = q or self.n_head * self.head_dim
        k = k or self.n_head_kv * self.head_dim
        v = v or k
        for name, n in (("attn_q", q), ("attn_k", k), ("attn_v", v)):
            self.mat(self.blk(i, name), (self.n_embd, n), gain=1.25 if name != "attn_v" else 1.0)
            if bias:
                self.vec(self.blk(i, name, "bias"), (n,), 0.5)
        if qk_norm:
            self.norm(self.blk(i, "attn_q_norm"), qk_norm)
            self.norm(self.blk(i, "attn_k_norm"), qk_norm)
        self.mat(self.blk(i, "attn_output"), (o or q, self.n_embd), out=True)

    def ffn(self, i: int, n_ff: Optional[int] = None, suffix: str = "") -> None:
        """SwiGLU's ffn_gate/up/down of block i (ffn_gate_shexp... with suffix "_shexp")."""
        f = n_ff or self.n_ff
        self.mat(self.blk(i, "ffn_gate" + suffix), (self.n_embd, f))
        self.mat(self.blk(i, "ffn_up" + suffix), (self.n_embd, f))
        self.mat(self.blk(i, "ffn_down" + suffix), (f, self.n_embd), out=True, fan_var=synth._SWIGLU_VAR)

    def experts(self, i: int, n_expert: int, n_ff_exp: int) -> None:
        """A router (f32, as converters write it) and SwiGLU experts stacked in ne2."""
        e, f = self.n_embd, n_ff_exp
        self.mat(self.blk(i, "ffn_gate_inp"), (e, n_expert))
        self.mat(self.blk(i, "ffn_gate_exps"), (e, f, n_expert))
        self.mat(self.blk(i, "ffn_up_exps"), (e, f, n_expert))
        self.mat(self.blk(i, "ffn_down_exps"), (f, e, n_expert), out=True, fan_var=synth._SWIGLU_VAR)

    def head(self, tied: bool = True, norm: str = "output_norm.weight") -> None:
        """The final norm, and output.weight unless tied to the token embeddings."""
        self.norm(norm)
        if not tied:
            self.vec("output.weight", (self.n_embd, self.n_vocab), synth.LOGIT_STD / math.sqrt(self.n_embd))

    def plan(self) -> Plan:
        return Plan(kv=self.kv, tensors=self.tensors)
