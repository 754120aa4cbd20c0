"""Synthetic GGUFs of architectures llama.cpp runs and pyriver has no builder for (the llama.cpp
engine's test files): random weights drawn as synth.py draws them, a real tokenizer, the tensor
names and keys of llama.cpp 0.3.36's loaders (vendor/llama.cpp/src/models/<arch>.cpp).

- ``granite``: llama's block and four scales (embedding, residual, attention, logit).
- ``lfm2``: a hybrid: short-convolution blocks (``shortconv.*``, a recurrent state in llama.cpp's
  memory) and attention blocks with Q/K norms where ``attention.head_count_kv`` of the layer is
  nonzero; the final norm is ``token_embd_norm``.

    write_foreign(path, arch="lfm2", n_layer=4, ...)
"""
from __future__ import annotations

import math
import os
import pathlib

from gguf import GGMLQuantizationType, GGUFValueType

from . import synth
from .gguf_io import KV, Plan, write_plan
from .synth_parts import Parts

F32 = GGMLQuantizationType.F32
ARCHS = ("granite", "lfm2", "qwen35", "qwen35moe", "gemma4", "gpt-oss", "granitehybrid", "llama4", "glm4",
         "glm4moe", "deepseek2")


def _llama_plan(**kw):
    """synth's llama model: its metadata and tensors, the base the others are rewritten from."""
    m = synth._Model(arch="llama", **kw)
    head_dim = m.check()
    tok = m.tokenizer_from if m.tokenizer_from is not None else synth.models.resolve(None)
    tok_kv = synth._tokenizer_kv(tok)
    n_vocab = len(tok_kv["tokenizer.ggml.tokens"].value)
    return m, head_dim, m.metadata(head_dim, tok_kv), m.tensors(head_dim, n_vocab)


def _rename(kv: dict, arch: str) -> dict:
    out = {(arch + k[len("llama"):] if k.startswith("llama.") else k): v for k, v in kv.items()}
    out["general.architecture"] = KV(arch, GGUFValueType.STRING)
    out["general.name"] = KV(kv["general.name"].value.replace("llama", arch), GGUFValueType.STRING)
    return out


def _granite(kw):
    m, head_dim, kv, tensors = _llama_plan(**kw)
    kv = _rename(kv, "granite")
    for key, v in (("logit_scale", 0.5), ("residual_scale", 0.8), ("embedding_scale", 0.5),
                   ("attention.scale", 1.0 / head_dim)):
        kv["granite." + key] = KV(float(v), GGUFValueType.FLOAT32)
    return kv, tensors


def _lfm2(kw, attn_layers=(2,), l_cache=3):
    m, head_dim, kv, tensors = _llama_plan(**kw)
    kv = _rename(kv, "lfm2")
    n = m.n_layer
    kv["lfm2.attention.head_count_kv"] = KV([m.n_head_kv if i in attn_layers else 0 for i in range(n)],
                                            GGUFValueType.ARRAY, GGUFValueType.UINT32)
    kv["lfm2.shortconv.l_cache"] = KV(int(l_cache), GGUFValueType.UINT32)
    conv_names = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight")
    out, e, seed = [], m.n_embd, m.seed
    wtype = synth._GGML_TYPES[m.dtype]
    branch = synth.RESIDUAL_STD / math.sqrt(2 * n)
    for t in tensors:
        if t.name == "output_norm.weight":   # llama.cpp's name for LFM2's final norm
            t = synth._random_tensor("token_embd_norm.weight", t.ne, F32, seed, 0.1, 1.0)
        parts = t.name.split(".")
        if parts[0] == "blk" and int(parts[1]) not in attn_layers and ".".join(parts[2:]) in conv_names:
            continue   # a convolution block has no attention
        out.append(t)
        if parts[0] == "blk" and parts[2:] == ["attn_norm", "weight"]:
            i = int(parts[1])
            p = f"blk.{i}."
            if i in attn_layers:
                out += [synth._random_tensor(p + f"attn_{x}_norm.weight", (head_dim,), F32, seed, 0.1, 1.0) for x in "qk"]
            else:
                out += [synth._random_tensor(p + "shortconv.conv.weight", (l_cache, e), F32, seed, 1.0 / math.sqrt(l_cache)),
                        synth._random_tensor(p + "shortconv.in_proj.weight", (e, 3 * e), wtype, seed, 1.0 / math.sqrt(e)),
                        synth._random_tensor(p + "shortconv.out_proj.weight", (e, e), wtype, seed, branch / math.sqrt(e))]
    return kv, out


def _delta_net(p: Parts, i: int, d_state: int, n_k: int, n_v: int, d_conv: int) -> None:
    """Qwen3.5's gated delta-net block i (a recurrent state in llama.cpp's memory): n_k key heads
    and n_v value heads of d_state each, their Q/K/V through a d_conv-wide convolution."""
    e, key, val = p.n_embd, d_state * n_k, d_state * n_v
    p.mat(p.blk(i, "attn_qkv"), (e, 2 * key + val))
    p.mat(p.blk(i, "attn_gate"), (e, val))
    p.vec(p.blk(i, "ssm_conv1d"), (d_conv, 2 * key + val), 1.0 / math.sqrt(d_conv))
    p.vec(p.blk(i, "ssm_dt", "bias"), (n_v,), 0.5)
    p.vec(p.blk(i, "ssm_a", ""), (n_v,), 0.3, -1.0)   # -exp(A_log): a decay
    p.mat(p.blk(i, "ssm_beta"), (e, n_v))
    p.mat(p.blk(i, "ssm_alpha"), (e, n_v))
    p.norm(p.blk(i, "ssm_norm"), d_state)
    p.mat(p.blk(i, "ssm_out"), (val, e), out=True)


def _qwen35(kw, moe=False, interval=2, d_state=16, n_k=2, n_v=4, d_conv=4, n_expert=4, n_used=2, n_ff_exp=64):
    """Qwen3.5: every `interval`-th block attention (a gated Q, Q/K norms, multi-section RoPE),
    the others gated delta nets; post-attention norms; dense FFNs, or (moe) routed and shared experts."""
    p = Parts("qwen35moe" if moe else "qwen35", **kw)
    hd = p.head_dim
    s = 3 * hd // 16   # the rotated pairs (hd / 2) in three sections (text positions: all alike)
    p.key("rope.dimension_sections", [s, s, hd // 2 - 2 * s, 0])
    for k, v in (("conv_kernel", d_conv), ("inner_size", d_state * n_v), ("state_size", d_state),
                 ("time_step_rank", n_v), ("group_count", n_k)):
        p.key("ssm." + k, v)
    p.key("full_attention_interval", interval)
    if moe:
        p.key("expert_count", n_expert)
        p.key("expert_used_count", n_used)
        p.key("expert_feed_forward_length", n_ff_exp)
        p.key("expert_shared_feed_forward_length", n_ff_exp)
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        p.norm(p.blk(i, "post_attention_norm"))
        if (i + 1) % interval:
            _delta_net(p, i, d_state, n_k, n_v, d_conv)
        else:
            p.attn(i, q=2 * p.n_head * hd, o=p.n_head * hd, qk_norm=hd)
        if moe:
            p.experts(i, n_expert, n_ff_exp)
            p.mat(p.blk(i, "ffn_gate_inp_shexp"), (p.n_embd,))
            p.ffn(i, n_ff_exp, "_shexp")
        else:
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


def _granitehybrid(kw, attn_layers=(1, 3), d_state=16, n_ssm_head=4, n_group=1, d_conv=4):
    """Granite 4 (hybrid): Mamba-2 blocks (llama.cpp's recurrent memory) where the layer's
    attention.head_count_kv is 0, llama attention blocks elsewhere, Granite's four scales."""
    p = Parts("granitehybrid", **kw)
    e, d_inner = p.n_embd, 2 * p.n_embd   # llama.cpp supports an expansion factor of 2 only
    p.key("attention.head_count_kv", [p.n_head_kv if i in attn_layers else 0 for i in p.layers()])
    for k, v in (("ssm.conv_kernel", d_conv), ("ssm.inner_size", d_inner), ("ssm.state_size", d_state),
                 ("ssm.time_step_rank", n_ssm_head), ("ssm.group_count", n_group), ("logit_scale", 0.5),
                 ("residual_scale", 0.8), ("embedding_scale", 2.0), ("attention.scale", 1.0 / p.head_dim)):
        p.key(k, v)
    xbc = d_inner + 2 * n_group * d_state
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        if i in attn_layers:
            p.attn(i)
        else:
            p.mat(p.blk(i, "ssm_in"), (e, d_inner + xbc + n_ssm_head))
            p.vec(p.blk(i, "ssm_conv1d"), (d_conv, xbc), 1.0 / math.sqrt(d_conv))
            p.vec(p.blk(i, "ssm_conv1d", "bias"), (xbc,), 0.1)
            p.vec(p.blk(i, "ssm_dt", "bias"), (n_ssm_head,), 0.5)
            p.vec(p.blk(i, "ssm_a", ""), (1, n_ssm_head), 0.3, -1.0)
            p.vec(p.blk(i, "ssm_d", ""), (1, n_ssm_head), 0.3, 1.0)
            p.norm(p.blk(i, "ssm_norm"), d_inner // n_group)
            p.mat(p.blk(i, "ssm_out"), (d_inner, e), out=True)
        p.norm(p.blk(i, "ffn_norm"))
        p.ffn(i)
    p.head()
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
        if i == 0:
            p.ffn(i)
        else:
            _routed(p, i, n_expert, n_ff_exp)
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
        if i == 0:
            p.ffn(i)
        else:
            _routed(p, i, n_expert, n_ff_exp)
    p.head(tied=False)
    return p


_WRITERS = {"granite": _granite, "lfm2": _lfm2, "qwen35": _qwen35, "qwen35moe": lambda kw: _qwen35(kw, moe=True),
            "gemma4": _gemma4, "gpt-oss": _gpt_oss, "granitehybrid": _granitehybrid, "llama4": _llama4,
            "glm4": _glm4, "glm4moe": _glm4moe, "deepseek2": _deepseek2}


def write_foreign(path: str | os.PathLike[str], arch: str, **kw) -> pathlib.Path:
    """Write a synthetic `arch` file (one of ARCHS); the other arguments are synth.write_model's
    llama ones (n_layer, n_embd, n_head, n_head_kv, n_ff, dtype, seed, tokenizer_from, ...)."""
    if arch not in _WRITERS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    out = _WRITERS[arch](kw)
    plan = out.plan() if isinstance(out, Parts) else Plan(kv=out[0], tensors=out[1])
    return write_plan(pathlib.Path(path), plan)
