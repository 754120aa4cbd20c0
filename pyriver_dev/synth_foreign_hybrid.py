"""synth_foreign's hybrids: architectures whose blocks keep a recurrent state in llama.cpp's memory
(short convolutions, gated delta nets, Mamba-2) beside attention blocks."""
from __future__ import annotations

import math

from pyriver_dev.synth_parts import Parts


def lfm2(kw, attn_layers=(2,), l_cache=3):
    """LFM2, a hybrid: short-convolution blocks (shortconv.*, a recurrent state in llama.cpp's
    memory) and attention blocks with Q/K norms where the layer's attention.head_count_kv is
    nonzero; the final norm is token_embd_norm."""
    p = Parts("lfm2", **kw)
    e = p.n_embd
    p.key("attention.head_count_kv", [p.n_head_kv if i in attn_layers else 0 for i in p.layers()])
    p.key("shortconv.l_cache", l_cache)
    for i in p.layers():
        p.norm(p.blk(i, "attn_norm"))
        if i in attn_layers:
            p.attn(i, qk_norm=p.head_dim)
        else:
            p.vec(p.blk(i, "shortconv.conv"), (l_cache, e), 1.0 / math.sqrt(l_cache))
            p.mat(p.blk(i, "shortconv.in_proj"), (e, 3 * e))
            p.mat(p.blk(i, "shortconv.out_proj"), (e, e), out=True)
        p.norm(p.blk(i, "ffn_norm"))
        p.ffn(i)
    p.head(norm="token_embd_norm.weight")
    return p


def delta_net(p: Parts, i: int, d_state: int, n_k: int, n_v: int, d_conv: int) -> None:
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


def qwen35(kw, moe=False, interval=2, d_state=16, n_k=2, n_v=4, d_conv=4, n_expert=4, n_used=2, n_ff_exp=64):
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
            delta_net(p, i, d_state, n_k, n_v, d_conv)
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


def granitehybrid(kw, attn_layers=(1, 3), d_state=16, n_ssm_head=4, n_group=1, d_conv=4):
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
