"""Synthetic GGUFs of architectures llama.cpp runs and pyriver has no builder for (the llama.cpp
engine's test files): random weights drawn as synth.py draws them, a real tokenizer, the tensor
names and keys of llama.cpp 0.3.36's loaders (vendor/llama.cpp/src/models/<arch>.cpp), assembled
from synth_parts' pieces, one small function per architecture (its docstring says what it has).

    write_foreign(path, arch="lfm2", n_layer=4, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, tokenizer_from=...)
"""
from __future__ import annotations

import os
import pathlib

from pyriver_dev import synth
from pyriver.tools.gguf_io import write_plan
from pyriver_dev.synth_foreign_hybrid import granitehybrid, lfm2, qwen35
from pyriver_dev.synth_parts import Parts

ARCHS = ("granite", "lfm2", "qwen35", "qwen35moe", "gemma4", "gpt-oss", "granitehybrid", "llama4", "glm4",
         "glm4moe", "deepseek2")


def _granite(kw):
    """Granite 3: llama's block and four scales (embedding, residual, attention, logit)."""
    p = Parts("granite", **kw)
    for k, v in (("logit_scale", 0.5), ("residual_scale", 0.8), ("embedding_scale", 0.5),
                 ("attention.scale", 1.0 / p.head_dim)):
        p.key(k, v)
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        p.attn(i)
        p.norm(p.blk(i, "ffn_norm"))
        p.ffn(i)
    p.head()
    return p


def _gemma4(kw, swa=(True, True, True, False), window=16, hd_full=32):
    """Gemma 4: sliding-window blocks and full blocks of wider heads (their RoPE with frequency
    factors), Q/K norms (V normed without weights), pre and post norms round both branches,
    scaled embeddings, a soft-capped head."""
    p = Parts("gemma4", embd_scaled=True, **kw)
    hd = p.head_dim
    for k, v in (("attention.sliding_window_pattern", list(swa)), ("attention.sliding_window", window),
                 ("embedding_length_per_layer_input", 0), ("attention.key_length", hd_full),
                 ("attention.value_length", hd_full), ("attention.key_length_swa", hd),
                 ("attention.value_length_swa", hd), ("rope.dimension_count", hd_full),
                 ("rope.dimension_count_swa", hd), ("rope.freq_base", 1e6), ("rope.freq_base_swa", 1e4),
                 ("final_logit_softcapping", 30.0)):
        p.key(k, v)
    p.vec("rope_freqs.weight", (hd_full // 2,), 0.5, 1.5)   # the full blocks' (one tensor, shared)
    for i in p.layers():
        h = hd if swa[i] else hd_full
        p.norm(p.blk(i, "attn_norm"))
        p.attn(i, q=p.n_head * h, k=p.n_head_kv * h, qk_norm=h)
        p.norm(p.blk(i, "post_attention_norm"), mean=p.branch)
        p.norm(p.blk(i, "ffn_norm"))
        p.ffn(i)
        p.norm(p.blk(i, "post_ffw_norm"), mean=p.branch)
    p.head()
    return p


def _gpt_oss(kw, n_expert=4, n_used=2, n_ff_exp=64, window=16):
    """gpt-oss: alternating sliding-window and full attention with biases and a learnt sink per
    head, mixture-of-experts FFNs with biases (llama.cpp's clamped SwiGLU), an untied head."""
    p = Parts("gpt-oss", **kw)
    for k, v in (("expert_count", n_expert), ("expert_used_count", n_used),
                 ("expert_feed_forward_length", n_ff_exp), ("attention.sliding_window", window)):
        p.key(k, v)
    e = p.n_embd
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        p.norm(p.blk(i, "post_attention_norm"))
        p.attn(i, bias=True)
        p.vec(p.blk(i, "attn_output", "bias"), (e,), 0.1 * p.branch)
        p.vec(p.blk(i, "attn_sinks"), (p.n_head,), 1.0)
        p.experts(i, n_expert, n_ff_exp)
        for name, ne in (("ffn_gate_inp", (n_expert,)), ("ffn_gate_exps", (n_ff_exp, n_expert)),
                         ("ffn_up_exps", (n_ff_exp, n_expert)), ("ffn_down_exps", (e, n_expert))):
            p.vec(p.blk(i, name, "bias"), ne, 0.1 * p.branch if name == "ffn_down_exps" else 0.5)
    p.head(tied=False)
    return p


def _llama4(kw, n_expert=4, n_ff_exp=64, step=2):
    """Llama 4: llama's attention with weightless Q/K norms, chunked attention on three blocks of
    four and no RoPE on the fourth; every `step`-th FFN a top-1 sigmoid-routed expert and a shared one."""
    p = Parts("llama4", **kw)
    for k, v in (("expert_count", n_expert), ("expert_used_count", 1), ("expert_feed_forward_length", n_ff_exp),
                 ("interleave_moe_layer_step", step)):
        p.key(k, v)
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        p.attn(i)
        p.norm(p.blk(i, "ffn_norm"))
        if (i + 1) % step == 0:
            p.experts(i, n_expert, n_ff_exp)
            p.ffn(i, n_ff_exp, "_shexp")
        else:
            p.ffn(i)
    p.head(tied=False)
    return p


def _glm4(kw):
    """GLM-4: Q/K/V biases, RoPE on half of each head, post-norms after both branches, gate and
    up in one product (ffn_up of 2 * n_ff)."""
    p = Parts("glm4", **kw)
    p.key("rope.dimension_count", p.head_dim // 2)
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        p.attn(i, bias=True)
        p.norm(p.blk(i, "post_attention_norm"), mean=p.branch)
        p.norm(p.blk(i, "ffn_norm"))
        p.mat(p.blk(i, "ffn_up"), (p.n_embd, 2 * p.n_ff))
        p.mat(p.blk(i, "ffn_down"), (p.n_ff, p.n_embd), out=True, fan_var=synth._SWIGLU_VAR)
        p.norm(p.blk(i, "post_ffw_norm"), mean=p.branch)
    p.head(tied=False)
    return p


def _moe_keys(p, n_expert, n_used, n_ff_exp, n_shared=1, dense_lead=1):
    """DeepSeek-V3-style routing (GLM-4.5, DeepSeek): sigmoid scores with a selection bias,
    normalised top-k weights, shared experts, the first blocks dense."""
    for k, v in (("expert_count", n_expert), ("expert_used_count", n_used), ("expert_feed_forward_length", n_ff_exp),
                 ("expert_shared_count", n_shared), ("leading_dense_block_count", dense_lead),
                 ("expert_weights_scale", 1.5), ("expert_weights_norm", True), ("expert_gating_func", 2)):
        p.key(k, v)


def _moe_ffn(p, i, n_expert, n_ff_exp, dense_lead=1):
    """Block i's feed-forward under _moe_keys: dense in the first dense_lead blocks, routed after."""
    if i < dense_lead:
        p.ffn(i)
    else:
        _routed(p, i, n_expert, n_ff_exp)


def _routed(p, i, n_expert, n_ff_exp, n_shared=1):
    p.experts(i, n_expert, n_ff_exp)
    p.vec(p.blk(i, "exp_probs_b", "bias"), (n_expert,), 0.1)
    p.ffn(i, n_ff_exp * n_shared, "_shexp")


def _glm4moe(kw, n_expert=4, n_used=2, n_ff_exp=64):
    """GLM-4.5: Q/K/V biases and Q/K norms, RoPE on half of each head, the first block dense and
    the others DeepSeek-V3-style experts; the FFN's pre-norm is post_attention_norm."""
    p = Parts("glm4moe", **kw)
    p.key("rope.dimension_count", p.head_dim // 2)
    _moe_keys(p, n_expert, n_used, n_ff_exp)
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        p.attn(i, bias=True, qk_norm=p.head_dim)
        p.norm(p.blk(i, "post_attention_norm"))
        _moe_ffn(p, i, n_expert, n_ff_exp)
    p.head(tied=False)
    return p


def _deepseek2(kw, q_lora=32, kv_lora=32, rope=8, nope=16, v_head=16, n_expert=4, n_used=2, n_ff_exp=32):
    """DeepSeek-V3 (as llama.cpp's deepseek2 loads it): multi-head latent attention in the MLA form
    converters write (K and V decompressions per head, attn_k_b/attn_v_b; one cached KV head of
    kv_lora + rope), low-rank Q, the first block dense and the others routed experts."""
    p = Parts("deepseek2", **kw)
    e, h = p.n_embd, p.n_head
    for k, v in (("attention.head_count_kv", 1), ("attention.q_lora_rank", q_lora), ("attention.kv_lora_rank", kv_lora),
                 ("attention.key_length", kv_lora + rope), ("attention.value_length", kv_lora),
                 ("attention.key_length_mla", nope + rope), ("attention.value_length_mla", v_head),
                 ("rope.dimension_count", rope)):
        p.key(k, v)
    _moe_keys(p, n_expert, n_used, n_ff_exp)
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        p.mat(p.blk(i, "attn_q_a"), (e, q_lora))
        p.norm(p.blk(i, "attn_q_a_norm"), q_lora)
        p.mat(p.blk(i, "attn_q_b"), (q_lora, h * (nope + rope)), gain=1.25)
        p.mat(p.blk(i, "attn_kv_a_mqa"), (e, kv_lora + rope), gain=1.25)
        p.norm(p.blk(i, "attn_kv_a_norm"), kv_lora)
        p.mat(p.blk(i, "attn_k_b"), (nope, kv_lora, h))
        p.mat(p.blk(i, "attn_v_b"), (kv_lora, v_head, h))
        p.mat(p.blk(i, "attn_output"), (h * v_head, e), out=True)
        p.norm(p.blk(i, "ffn_norm"))
        _moe_ffn(p, i, n_expert, n_ff_exp)
    p.head(tied=False)
    return p


_WRITERS = {"granite": _granite, "lfm2": lfm2, "qwen35": qwen35, "qwen35moe": lambda kw: qwen35(kw, moe=True),
            "gemma4": _gemma4, "gpt-oss": _gpt_oss, "granitehybrid": granitehybrid, "llama4": _llama4,
            "glm4": _glm4, "glm4moe": _glm4moe, "deepseek2": _deepseek2}


def write_foreign(path: str | os.PathLike[str], arch: str, **kw) -> pathlib.Path:
    """Write a synthetic f32 `arch` file (one of ARCHS); the other arguments are synth_parts.Parts'
    (n_layer, n_embd, n_head, n_head_kv, n_ff, n_ctx_train, rms_eps, rope_freq_base, seed, tokenizer_from)."""
    if arch not in _WRITERS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    return write_plan(pathlib.Path(path), _WRITERS[arch](kw).plan())
