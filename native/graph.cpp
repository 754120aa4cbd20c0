#include "graph.h"
#include "tiled_gemm.h"
#include "river.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <unordered_set>

namespace pr {

built_graph::~built_graph() {
    if (ctx) ggml_free(ctx);
}

device_carry::device_carry(const model & m, ggml_backend_dev_t dev) {
    ggml_init_params ip = {ggml_tensor_overhead(), nullptr, true};
    ctx = ggml_init(ip);
    if (!ctx) fail(PR_ERR_BACKEND, "cannot create the carry context");
    t = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, m.hp.n_embd, 1, m.hp.n_layer + 1);
    ggml_set_name(t, "carry");
    try {
        buf = alloc_tensors(ggml_backend_dev_buffer_type(dev), {t}, "the hidden-state carry");
    } catch (...) {
        ggml_free(ctx);
        throw;
    }
}

device_carry::~device_carry() {
    if (buf) ggml_backend_buffer_free(buf);
    if (ctx) ggml_free(ctx);
}

int lane::n_tokens() const {
    int n = 0;
    for (const seq_group & g : groups) n += g.n_tokens;
    return n;
}

int segment::n_tokens() const {
    int n = 0;
    for (const lane & l : lanes) n += l.n_tokens();
    return n;
}

int segment::n_outputs() const {
    int n = 0;
    for (const lane & l : lanes) n += l.n_outputs;
    return n;
}

// A block costs about 40 nodes per lane, and each sequence group's attention a dozen more; a
// mixture of experts some 20 more, and a view and an add per expert used.
size_t graph_capacity(const model & m, int n_lanes, int n_groups) {
    const size_t per_lane = 64 + (m.hp.n_expert_used > 0 ? 24 + 2 * (size_t) m.hp.n_expert_used : 0);
    // a group's attention: up to 15 nodes a block (tiled_attention's fold)
    return (size_t) m.hp.n_layer * (per_lane * n_lanes + 24 * n_groups) + 256 + 8 * n_lanes;
}

static ggml_tensor * rms_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, float eps) {
    return ggml_mul(ctx, ggml_rms_norm(ctx, x, eps), w);
}

static ggml_tensor * add_bias(ggml_context * ctx, ggml_tensor * x, ggml_tensor * b) {
    return b ? ggml_add(ctx, x, b) : x;
}

// Batch invariance. ggml's CPU picks a matrix product's kernel by the number of columns: one column
// goes through its dot-product loop, two or more through llamafile's tinyBLAS or a repacked GEMM,
// which add in another order. So a token computed in a step of several tokens got other bits than
// the same token in a step of one, and a near tie could turn. With token_products every product of
// a multi-token step is made of one-column products (the tokens in dimension 2 or 3), the kernel
// a single-token step uses: a token's logits no longer depend on the step it was computed in.
// A Q4_1 matrix's product of several tokens, and a Q6_K matrix's of 2 to 7, go through tiled_gemm
// where it applies: each output has the bits of a one-token product, so it is batch invariant as well.
// A Q6_K product of 8 to 24 tokens has the bits of ggml's tiled kernel there, a repacked Q4_K one of
// 2 to 64 those of ggml's repacked GEMM: not in such a step.
static ggml_tensor * linear(ggml_context * ctx, const graph_shape & s, ggml_tensor * w, ggml_tensor * x, ggml_tensor * b) {
    const int64_t T = x->ne[1];
    ggml_tensor * y = T > 1 ? tiled_gemm(ctx, w, x, s.invariant) : nullptr;
    if (!y && s.invariant && T > 1) {
        y = ggml_mul_mat(ctx, w, ggml_reshape_3d(ctx, x, x->ne[0], 1, T));
        y = ggml_reshape_2d(ctx, y, y->ne[0], T);
    } else if (!y) {
        y = ggml_mul_mat(ctx, w, x);
    }
    return add_bias(ctx, y, b);
}

// Whether the products of x's rows read the matrices in the file's layout (model::wide_blocks):
// prompts, where ggml's tiled kernel computes a step of the 1.5B Q4_K_M 1.15x (40 tokens) to 1.4x
// (300) faster than the repacked GEMM on a Zen 4, from 17 rows; on a Zen 3 (AVX2 only) it is slower
// up to 24 to 32 rows, so the prompt threshold is the context's (pyriver.widerows measures it).
// Not verify steps (logits for every row, at most 64 rows): from 21 rows the tiled kernel wins by 0
// to 15% there, less than the measured cost table's noise, and a table that says long steps are
// cheap makes the draft length rule lose (docs/lossless.md).
// Batch-invariant products are one row each.
static bool wide(const model & m, const graph_shape & s, const ggml_tensor * x, const lane * ln) {
    if (m.wide_blocks.empty() || s.invariant) return false;
    const bool is_prompt = ln->n_outputs <= (int) ln->groups.size();   // at most a last row per sequence
    return x->ne[1] > model::WIDE_ROWS || (is_prompt && x->ne[1] > s.wide_prompt_rows);
}

// RoPE of layer il: the frequency factors of this context size (Llama 3.1, LongRoPE), and the
// sliding-window layers' own base, scale and YaRN settings where the arch has them.
static ggml_tensor * rope(ggml_context * ctx, const model & m, const kv_cache & kv, ggml_tensor * x, ggml_tensor * pos, int il) {
    const hparams & hp = m.hp;
    return ggml_rope_ext(ctx, x, pos, m.rope_factors(kv.n_rows), hp.n_rot, m.arch->rope_type, hp.yarn_n_ctx_orig,
                         hp.rope_base(il), hp.rope_scale(il), hp.rope_ext(il), hp.rope_attn(il),
                         hp.yarn_beta_fast, hp.yarn_beta_slow);
}

// c * tanh(x / c): Gemma 2's attention logits and Gemma's final logits.
static ggml_tensor * softcap(ggml_context * ctx, ggml_tensor * x, float c) {
    return ggml_scale(ctx, ggml_tanh(ctx, ggml_scale(ctx, x, 1.0f / c)), c);
}

// Q and K as [hd, heads, T], V as [n_head_kv * hd, T]: a fused attn_qkv (Phi-3) or the joined
// Q/K(/V) is split by views of its one product, as llama.cpp's build_qkv does; else three products.
// Q/K norms per head, or over the whole projection (OLMo 2).
static void project_qkv(ggml_context * ctx, const model & m, const graph_shape & s, const block_weights & w, ggml_tensor * xn,
                        ggml_tensor *& q, ggml_tensor *& k, ggml_tensor *& v) {
    const hparams & hp = m.hp;
    const int64_t T = xn->ne[1], hd = hp.n_embd_head, Q = hd * hp.n_head, KV = hp.n_embd_k_gqa();
    const bool whole = m.arch->qk_norm_full;
    if (w.wqkv || w.qkv_joined) {
        ggml_tensor * b = w.wqkv ? w.bqkv : w.bqkv_joined;
        if (!b && w.wqkv && w.bq && w.bk && w.bv) b = ggml_concat(ctx, ggml_concat(ctx, w.bq, w.bk, 0), w.bv, 0);
        ggml_tensor * qkv = linear(ctx, s, w.wqkv ? w.wqkv : w.qkv_joined, xn, b);
        const size_t es = ggml_element_size(qkv), row = qkv->nb[1];
        q = ggml_view_2d(ctx, qkv, Q, T, row, 0);
        k = ggml_view_2d(ctx, qkv, KV, T, row, es * Q);
        if (qkv->ne[0] == Q + 2 * KV) {
            v = ggml_view_2d(ctx, qkv, KV, T, row, es * (Q + KV));
            if (T > 1) v = ggml_cont(ctx, v);   // the cache writes read it whole (one token's row is whole)
        } else {   // Q/K joined, V apart
            v = linear(ctx, s, w.wv, xn, w.bv);
        }
    } else {
        q = linear(ctx, s, w.wq, xn, w.bq);
        k = linear(ctx, s, w.wk, xn, w.bk);
        v = linear(ctx, s, w.wv, xn, w.bv);
    }
    if (whole && w.q_norm) q = rms_norm(ctx, q, w.q_norm, hp.rms_eps);
    if (whole && w.k_norm) k = rms_norm(ctx, k, w.k_norm, hp.rms_eps);
    // Rows of hd per head; a view where q or k is a part of the fused product's rows.
    q = ggml_view_3d(ctx, q, hd, hp.n_head, T, ggml_element_size(q) * hd, q->nb[1], 0);
    k = ggml_view_3d(ctx, k, hd, hp.n_head_kv, T, ggml_element_size(k) * hd, k->nb[1], 0);
    if (!whole && w.q_norm) q = rms_norm(ctx, q, w.q_norm, hp.rms_eps);   // per head: rows of hd
    if (!whole && w.k_norm) k = rms_norm(ctx, k, w.k_norm, hp.rms_eps);
}

// softmax(scale * KQ + mask) over the cache rows, accumulated in F32 as llama.cpp does (cuBLAS
// would use F16), soft-capped where the arch caps.
static ggml_tensor * attn_weights(ggml_context * ctx, ggml_tensor * kk, ggml_tensor * q, ggml_tensor * mask,
                                  float scale, float cap) {
    ggml_tensor * kq = ggml_mul_mat(ctx, kk, q);
    ggml_prec_set_acc(kq, GGML_PREC_F32);
    if (cap > 0.0f) kq = softcap(ctx, kq, cap);
    return ggml_soft_max_ext(ctx, kq, mask, scale, 0.0f);
}

// The attention of n_seq one-token groups of consecutive sequences with the same n_kv (a decode
// step of several slots) in one product each for KQ and KQV, or one flash attention, the
// sequences in dimension 3: the regions lie n_rows apart, so one 4-d view takes them all. Per
// sequence it is the one-query product a group of its own computes (the same kernel and order, so
// the same bits; but ggml's flash attention splits a lone query's rows across threads from 512 on,
// so there a joined row has llama.cpp's bits of several streams), with a few nodes a layer.
static ggml_tensor * run_attention(ggml_context * ctx, const model & m, const kv_cache & kv, const seq_group & g,
                                   int n_seq, int t0, ggml_tensor * q, ggml_tensor * k_all, ggml_tensor * v_all,
                                   ggml_tensor * mask, float scale, float cap) {
    const hparams & hp = m.hp;
    const int hd = hp.n_embd_head, n_kv = g.n_kv, E = hp.n_embd_k_gqa();
    const size_t kr = kv.k_bytes(E), kh = kv.k_bytes(hd), vr = kv.v_bytes(E), vh = kv.v_bytes(hd);   // whole blocks
    const int64_t base = kv.row(g.seq, 0), stride = kv.row(g.seq + 1, 0) - base, rows = kv.v[0]->ne[0];
    ggml_tensor * qq = ggml_view_4d(ctx, q, hd, 1, hp.n_head, n_seq, q->nb[2], q->nb[1], q->nb[2], q->nb[2] * t0);
    ggml_tensor * kk = ggml_view_4d(ctx, k_all, hd, n_kv, hp.n_head_kv, n_seq, kr, kh, kr * stride, kr * base);
    if (!kv.v_trans) {   // flash attention: V laid out as K, one product over the sequences (llama.cpp's streams)
        ggml_tensor * vv = ggml_view_4d(ctx, v_all, hd, n_kv, hp.n_head_kv, n_seq, vr, vh, vr * stride, vr * base);
        ggml_tensor * o = ggml_flash_attn_ext(ctx, qq, kk, vv, mask, scale, 0.0f, cap);   // [hd, n_head, 1, n_seq]
        ggml_prec_set_acc(o, GGML_PREC_F32);
        return ggml_reshape_2d(ctx, o, hd * hp.n_head, n_seq);
    }
    ggml_tensor * kq = attn_weights(ctx, kk, qq, mask, scale, cap);                     // [n_kv, 1, n_head, n_seq]
    const size_t es = ggml_type_size(kv.type_v);   // transposed V is never quantized (check_kv_types)
    ggml_tensor * vv = ggml_view_4d(ctx, v_all, n_kv, hd, hp.n_head_kv, n_seq, es * rows, es * rows * hd, es * stride, es * base);
    return ggml_reshape_2d(ctx, ggml_mul_mat(ctx, vv, kq), hd * hp.n_head, n_seq);           // [hd, 1, n_head, n_seq]
}

constexpr int fa_tile_q = 64;   // ggml-cpu/common.h's GGML_FA_TILE_Q (pyriver.draftlen.FA_TILE)

// ggml's CPU flash attention (ggml-cpu/ops.cpp) takes a product of fa_tile_q query rows or more a tile of
// rows at a time, and one of fewer a query row at a time, each row a pass over the whole cache with
// its own softmax bookkeeping per position. Where a head has 64 dimensions the second costs about
// 10 times as much a row (SmolLM2 after 1300 tokens: a step of 48 rows 740 ms against 27 ms for one
// row; tiled, 178 ms), so a verify step of 8 to 63 rows (lossless drafts) pays more for its
// attention than for its weights. Tiled here: the query heads that share a KV head become rows of
// one product (row t + T g for token t, head g of the group), zero rows pad the product to 64 where
// it has fewer (their outputs are dropped), and the mask's rows repeat to match. Each row attends as
// in a 64-row prompt step; only where the step meets graph_shape's verify_tile_rows (measured per
// model: pyriver.costcurve), since the padding costs a 64-row tile whatever the rows.
static ggml_tensor * tiled_attention(ggml_context * ctx, const hparams & hp, ggml_tensor * q, ggml_tensor * kk,
                                     ggml_tensor * vv, ggml_tensor * mask, float scale, float cap) {
    const int hd = hp.n_embd_head, T = (int) q->ne[2], gqa = hp.n_head / hp.n_head_kv, nkh = hp.n_head_kv;
    const int n_kv = (int) kk->ne[1], rows = std::max(T * gqa, fa_tile_q), reps = (rows + T - 1) / T;
    ggml_tensor * qh = ggml_view_4d(ctx, q, hd, gqa, nkh, T, q->nb[1], q->nb[1] * gqa, q->nb[2], 0);
    ggml_tensor * qf = ggml_reshape_3d(ctx, ggml_cont(ctx, ggml_permute(ctx, qh, 0, 2, 3, 1)), hd, T * gqa, nkh);
    if (rows > T * gqa) qf = ggml_pad(ctx, qf, 0, rows - T * gqa, 0, 0);
    ggml_tensor * m3 = ggml_view_3d(ctx, mask, n_kv, T, 1, mask->nb[1], mask->nb[1] * T, 0);
    ggml_tensor * mf = ggml_reshape_2d(ctx, ggml_repeat_4d(ctx, m3, n_kv, T, reps, 1), n_kv, (int64_t) T * reps);
    ggml_tensor * o = ggml_flash_attn_ext(ctx, qf, kk, vv, mf, scale, 0.0f, cap);   // [hd, nkh, rows]
    ggml_prec_set_acc(o, GGML_PREC_F32);
    ggml_tensor * oh = ggml_view_4d(ctx, o, hd, nkh, T, gqa, o->nb[1], o->nb[2], o->nb[2] * T, 0);
    return ggml_cont_2d(ctx, ggml_permute(ctx, oh, 0, 2, 3, 1), (int64_t) hd * hp.n_head, T);
}

// The attention of one sequence group: its queries (tokens t0.. of the lane) over the first n_kv
// rows of its sequence's region of the cache, under its mask; one_query: one query a product
// (attn_run's, with the mask in that shape).
static ggml_tensor * group_attention(ggml_context * ctx, const model & m, const kv_cache & kv, const graph_shape & s,
                                     bool one_query, const seq_group & g, int t0, ggml_tensor * q, ggml_tensor * k_all,
                                     ggml_tensor * v_all, ggml_tensor * mask, float scale, float cap) {
    const hparams & hp = m.hp;
    const int hd = hp.n_embd_head, T = g.n_tokens, n_kv = g.n_kv;
    const int E = hp.n_embd_k_gqa();
    const int64_t base = kv.row(g.seq, 0);
    q = ggml_view_3d(ctx, q, hd, hp.n_head, T, q->nb[1], q->nb[2], q->nb[2] * t0);
    ggml_tensor * kk = ggml_view_3d(ctx, k_all, hd, n_kv, hp.n_head_kv, kv.k_bytes(E), kv.k_bytes(hd), kv.k_bytes(E) * base);
    ggml_tensor * qp = ggml_permute(ctx, q, 0, 2, 1, 3);  // [hd, T, n_head]
    if (!kv.v_trans) {
        ggml_tensor * vv = ggml_view_3d(ctx, v_all, hd, n_kv, hp.n_head_kv, kv.v_bytes(E), kv.v_bytes(hd), kv.v_bytes(E) * base);
        // the tiled kernel reads an F16 or F32 cache (K and V); from 64 rows a group takes it as it is
        auto tileable = [](ggml_type t) { return t == GGML_TYPE_F16 || t == GGML_TYPE_F32; };
        if (g.verify && s.verify_tile_rows > 0 && T >= s.verify_tile_rows && T < fa_tile_q && !s.invariant && mask &&
            tileable(kv.type_k) && kv.type_k == kv.type_v) {
            return tiled_attention(ctx, hp, q, kk, vv, mask, scale, cap);
        }
        ggml_tensor * o = ggml_flash_attn_ext(ctx, qp, kk, vv, mask, scale, 0.0f, cap);
        ggml_prec_set_acc(o, GGML_PREC_F32);
        return ggml_reshape_2d(ctx, o, hd * hp.n_head, T);
    }
    // V is transposed in the cache: row d holds element d of every position.
    const size_t es = ggml_type_size(kv.type_v);
    const int64_t rows = kv.v[0]->ne[0];
    ggml_tensor * vv = ggml_view_3d(ctx, v_all, n_kv, hd, hp.n_head_kv, es * rows, es * rows * hd, es * base);
    if (one_query) {
        // One query per product (the tokens in dimension 3), as in a single-token step.
        ggml_tensor * kq = attn_weights(ctx, kk, ggml_reshape_4d(ctx, q, hd, 1, hp.n_head, T), mask, scale,
                                        cap);                                              // [n_kv, 1, n_head, T]
        return ggml_reshape_2d(ctx, ggml_mul_mat(ctx, vv, kq), hd * hp.n_head, T);              // [hd, 1, n_head, T]
    }
    ggml_tensor * kq = attn_weights(ctx, kk, qp, mask, scale, cap);        // [n_kv, T, n_head]
    ggml_tensor * kqv = ggml_mul_mat(ctx, vv, kq);                         // [hd, T, n_head]
    return ggml_cont_2d(ctx, ggml_permute(ctx, kqv, 0, 2, 1, 3), hd * hp.n_head, T);
}

// llama-impl.h's llama_mul_mat_hadamard: x's rows of rot's size times the Hadamard matrix rot,
// with the hint that lets a backend transform instead of multiply (the same bits as llama.cpp's).
ggml_tensor * hadamard(ggml_context * ctx, ggml_tensor * x, ggml_tensor * rot) {
    const int64_t n = rot->ne[0];
    ggml_tensor * r = ggml_is_contiguous(x) ? ggml_reshape_2d(ctx, x, n, ggml_nelements(x) / n)
                                            : ggml_cont_2d(ctx, x, n, ggml_nelements(x) / n);
    r = ggml_mul_mat(ctx, rot, r);
    ggml_mul_mat_set_hint(r, GGML_HINT_SRC0_IS_HADAMARD);
    return ggml_reshape_4d(ctx, r, x->ne[0], x->ne[1], x->ne[2], x->ne[3]);
}

// Attention of one block: writes the lane's K/V rows into layer il's cache, then each sequence
// group attends over its own region (the sliding-window mask on the arch's local layers).
static ggml_tensor * attention(ggml_context * ctx, const model & m, const kv_cache & kv, const graph_inputs & in,
                               const graph_shape & s, const std::vector<seq_group> & groups, const block_weights & w,
                               int il, ggml_tensor * xn) {
    const hparams & hp = m.hp;
    const int T = (int) xn->ne[1];

    ggml_tensor * q, * k, * v;
    project_qkv(ctx, m, s, w, xn, q, k, v);
    if (hp.uses_rope(il)) {   // SmolLM3 leaves every 4th layer unrotated
        q = rope(ctx, m, kv, q, in.pos, il);
        k = rope(ctx, m, kv, k, in.pos, il);
    } else if (!ggml_is_contiguous(q)) {
        q = ggml_cont(ctx, q);   // a view of the joined product: the attention reshapes it
    }
    if (in.attn_scale) q = ggml_mul(ctx, q, in.attn_scale);   // temperature tuning (Mistral 3), per token
    float scale = hp.kq_scale;
    if (m.arch->q_prescale) {
        q = ggml_scale(ctx, q, scale);   // as llama.cpp's Gemma and Phi-3 graphs: scale Q, then softmax at 1
        scale = 1.0f;
    }
    const float cap = hp.attn_softcap;
    if (kv.k_rot[il]) {   // a quantized cache holds rotated K (llama.cpp's attn_rot_k); Q turns with it
        q = hadamard(ctx, q, kv.k_rot[il]);
        k = hadamard(ctx, k, kv.k_rot[il]);
    }
    if (kv.v_rot[il]) v = hadamard(ctx, v, kv.v_rot[il]);

    // The attention reads views of the set_rows results, so it is ordered after the writes.
    const int E = hp.n_embd_k_gqa();
    // A view, as llama.cpp writes K: ggml-cuda fuses rope + view + set_rows.
    ggml_tensor * k_all = ggml_set_rows(ctx, kv.k[il], ggml_view_2d(ctx, k, E, T, k->nb[2], 0), in.kv_idx);
    ggml_tensor * v_all;
    if (!kv.v_trans) {
        v_all = ggml_set_rows(ctx, kv.v[il], v, in.kv_idx);
    } else {   // one element per row, scattered by v_idx
        const int64_t rows = kv.v[il]->ne[0];
        v_all = ggml_set_rows(ctx, ggml_reshape_2d(ctx, kv.v[il], 1, rows * E), ggml_reshape_2d(ctx, v, 1, (int64_t) E * T), in.v_idx);
        v_all = ggml_reshape_2d(ctx, v_all, rows, E);
    }
    ggml_tensor * o = nullptr;
    for (const attn_run & r : in.runs) {
        ggml_tensor * mask = hp.is_swa(il) ? r.mask_swa : r.mask;
        ggml_tensor * og = r.n_seq > 1
            ? run_attention(ctx, m, kv, groups[r.group], r.n_seq, r.t0, q, k_all, v_all, mask, scale, cap)
            : group_attention(ctx, m, kv, s, r.one_query, groups[r.group], r.t0, q, k_all, v_all, mask, scale, cap);
        o = o ? ggml_concat(ctx, o, og, 1) : og;
    }
    if (kv.v_rot[il]) o = hadamard(ctx, o, kv.v_rot[il]);   // back from V's rotation
    return linear(ctx, s, w.wo, o, w.bo);
}

// A mixture of experts (Qwen3-MoE), as llama.cpp's build_moe_ffn computes it for that arch: a
// softmax over the router's logits, the n_expert_used most probable experts, their probabilities
// normalized to sum 1 (the sum clamped away from 0), each expert's SwiGLU by ggml_mul_mat_id, and
// the weighted expert outputs added in rank order. Every op works per token, and the CPU's
// mul_mat_id takes one dot product per row whatever the batch: batch-invariant as it stands.
static ggml_tensor * moe_ffn(ggml_context * ctx, const model & m, const graph_shape & s, const block_weights & w, ggml_tensor * x) {
    const int64_t n_embd = x->ne[0], T = x->ne[1], E = m.hp.n_expert, K = m.hp.n_expert_used;
    ggml_tensor * probs = ggml_soft_max(ctx, linear(ctx, s, w.ffn_gate_inp, x, nullptr));        // [E, T]
    ggml_tensor * sel = ggml_argsort_top_k(ctx, probs, (int) K);                                   // [K, T]
    ggml_tensor * wt = ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, E, T), sel);              // [1, K, T]
    wt = ggml_reshape_2d(ctx, wt, K, T);
    ggml_tensor * sum = ggml_clamp(ctx, ggml_sum_rows(ctx, wt), 6.103515625e-5f, INFINITY);         // F16's smallest normal
    wt = ggml_reshape_3d(ctx, ggml_div(ctx, wt, sum), 1, K, T);
    ggml_tensor * xe = ggml_reshape_3d(ctx, x, n_embd, 1, T);
    ggml_tensor * up = ggml_mul_mat_id(ctx, w.ffn_up_exps, xe, sel);                               // [n_ff_exp, K, T]
    ggml_tensor * gate = ggml_mul_mat_id(ctx, w.ffn_gate_exps, xe, sel);
    ggml_tensor * out = ggml_mul_mat_id(ctx, w.ffn_down_exps, ggml_swiglu_split(ctx, gate, up), sel);   // [n_embd, K, T]
    out = ggml_mul(ctx, out, wt);
    ggml_tensor * f = nullptr;
    for (int64_t i = 0; i < K; i++) {
        ggml_tensor * e = ggml_view_2d(ctx, out, n_embd, T, out->nb[2], i * out->nb[1]);
        f = f ? ggml_add(ctx, f, e) : e;
    }
    return K == 1 ? ggml_cont(ctx, f) : f;
}

// One decoder block, the same unit for every architecture: attention and gated FFN (SwiGLU or
// GeGLU, two products or Phi-3's one fused product, or a mixture of experts), each with a
// residual, the pre-norms and post-norms where the arch has them (OLMo 2 has only post-norms).
// With out_ids, only those token rows continue after attention (the last block before the head).
static ggml_tensor * build_block(ggml_context * ctx, const model & m, const kv_cache & kv, const graph_inputs & in,
                                 const graph_shape & s, const std::vector<seq_group> & groups, const block_weights & w,
                                 int il, ggml_tensor * x, ggml_tensor * out_ids) {
    const float eps = m.hp.rms_eps;
    ggml_tensor * a = attention(ctx, m, kv, in, s, groups, w, il, w.attn_norm ? rms_norm(ctx, x, w.attn_norm, eps) : x);
    if (out_ids) {
        a = ggml_get_rows(ctx, a, out_ids);
        x = ggml_get_rows(ctx, x, out_ids);
    }
    if (w.attn_post_norm) a = rms_norm(ctx, a, w.attn_post_norm, eps);
    ggml_tensor * h = ggml_add(ctx, x, a);
    ggml_tensor * hn = w.ffn_norm ? rms_norm(ctx, h, w.ffn_norm, eps) : h;
    ggml_tensor * f;
    if (w.ffn_gate_inp) {
        f = moe_ffn(ctx, m, s, w, hn);
    } else {
        ggml_tensor * up = linear(ctx, s, w.gate_up_joined ? w.gate_up_joined : w.ffn_up, hn, w.ffn_up_b);
        if (!w.ffn_gate || w.gate_up_joined) {   // gate and up in one product, gate first
            f = m.arch->act == ffn_act::gelu ? ggml_geglu(ctx, up) : ggml_swiglu(ctx, up);
        } else {
            ggml_tensor * gate = linear(ctx, s, w.ffn_gate, hn, w.ffn_gate_b);
            f = m.arch->act == ffn_act::gelu ? ggml_geglu_split(ctx, gate, up) : ggml_swiglu_split(ctx, gate, up);
        }
        f = linear(ctx, s, w.ffn_down, f, w.ffn_down_b);
    }
    if (w.ffn_post_norm) f = rms_norm(ctx, f, w.ffn_post_norm, eps);
    return ggml_add(ctx, h, f);
}

static ggml_tensor * new_input(ggml_context * ctx, ggml_type type, int64_t n, const char * name) {
    ggml_tensor * t = ggml_new_tensor_1d(ctx, type, n);
    ggml_set_input(t);
    ggml_set_name(t, name);
    return t;
}

// A run's view of a mask (the groups' masks lie back to back in one input), in the shape its
// attention reads: [n_kv, 1, 1, n] for one query a product (several one-token groups, or a
// batch-invariant group of several tokens), else [n_kv, n_tokens].
static ggml_tensor * mask_view(ggml_context * ctx, ggml_tensor * mask, const seq_group & g, int n_seq,
                               bool one_query, size_t off) {
    if (!mask) return nullptr;
    const size_t ms = sizeof(ggml_fp16_t) * g.n_kv;
    if (n_seq > 1) return ggml_view_4d(ctx, mask, g.n_kv, 1, 1, n_seq, ms, ms, ms, off);
    if (one_query) return ggml_view_4d(ctx, mask, g.n_kv, 1, 1, g.n_tokens, ms, ms, ms, off);
    return ggml_view_2d(ctx, mask, g.n_kv, g.n_tokens, ms, off);
}

// The lane's groups as attention products: one-token groups of consecutive sequences with the same
// n_kv join into one (under flash attention fill_lane gives them one n_kv).
static void attention_runs(ggml_context * ctx, const kv_cache & kv, const graph_shape & s,
                           const std::vector<seq_group> & groups, graph_inputs & in) {
    int t0 = 0;
    size_t off = 0;
    for (size_t i = 0; i < groups.size();) {
        const seq_group & g = groups[i];
        size_t n = 1;
        while (g.n_tokens == 1 && i + n < groups.size() && groups[i + n].n_tokens == 1 &&
               groups[i + n].n_kv == g.n_kv && groups[i + n].seq == g.seq + (int) n) {
            n++;
        }
        attn_run r;
        r.group = (int) i;
        r.n_seq = (int) n;
        r.t0 = t0;
        // A batch-invariant group of several tokens: one query a product, as in a single-token step
        // (with a transposed V; flash attention takes the group whole).
        r.one_query = kv.v_trans && s.invariant && g.n_tokens > 1;
        r.mask = mask_view(ctx, in.mask, g, (int) n, r.one_query, off);
        r.mask_swa = mask_view(ctx, in.mask_swa, g, (int) n, r.one_query, off);
        in.runs.push_back(r);
        t0 += g.n_tokens * (int) n;
        off += sizeof(ggml_fp16_t) * g.n_kv * g.n_tokens * n;
        i += n;
    }
}

// The inputs of one lane, and the hidden state it starts from.
static ggml_tensor * lane_inputs(ggml_context * ctx, const model & m, const kv_cache & kv, const segment & seg,
                                 const lane & ln, lane_io & io, const device_carry * carry) {
    graph_inputs & in = io.in;
    const int T = ln.n_tokens();
    ggml_tensor * x = nullptr;
    if (ln.first == 0) {
        in.tokens = new_input(ctx, GGML_TYPE_I32, T, "inp_tokens");
        x = ggml_get_rows(ctx, m.tok_embd, in.tokens);
        if (m.hp.embd_scale != 1.0f) x = ggml_scale(ctx, x, m.hp.embd_scale);
    } else if (seg.carry_in >= 0) {
        x = io.hidden_in = ggml_view_2d(ctx, carry->t, m.hp.n_embd, 1, carry->t->nb[1], carry->t->nb[2] * seg.carry_in);
    } else {
        x = io.hidden_in = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, m.hp.n_embd, T);
        ggml_set_input(io.hidden_in);
        ggml_set_name(io.hidden_in, "inp_hidden");
    }
    in.kv_idx = new_input(ctx, GGML_TYPE_I64, T, "inp_kv_idx");
    // Each mask, and the positions, only when a block of the lane reads them: an unused input gets
    // no memory (SmolLM3's unrotated layers read no positions).
    bool any_swa = false, any_global = false, any_rope = false;
    for (int il = ln.first; il <= ln.last; il++) {
        (m.hp.is_swa(il) ? any_swa : any_global) = true;
        any_rope = any_rope || m.hp.uses_rope(il);
    }
    if (any_rope) in.pos = new_input(ctx, GGML_TYPE_I32, T, "inp_pos");
    if (m.hp.attn_temp_scale != 0.0f) {
        in.attn_scale = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, 1, T);
        ggml_set_input(in.attn_scale);
        ggml_set_name(in.attn_scale, "inp_attn_scale");
    }
    int64_t n_mask = 0;
    for (const seq_group & g : ln.groups) n_mask += (int64_t) g.n_kv * g.n_tokens;
    if (any_global) in.mask = new_input(ctx, GGML_TYPE_F16, n_mask, "inp_mask");
    if (any_swa) in.mask_swa = new_input(ctx, GGML_TYPE_F16, n_mask, "inp_mask_swa");
    if (kv.v_trans) in.v_idx = new_input(ctx, GGML_TYPE_I64, (int64_t) m.hp.n_embd_k_gqa() * T, "inp_v_idx");
    attention_runs(ctx, kv, seg.shape, ln.groups, in);
    if (ln.head() && ln.n_outputs < T) in.out_ids = new_input(ctx, GGML_TYPE_I32, ln.n_outputs, "inp_out_ids");
    return x;
}

// Cosines of the checked blocks of a lane, in the graph. The hidden states around them are stacked as
// [n_embd, T, n_checks + 1], so that all checked blocks cost a handful of ops at the end rather than
// several each (every op is a thread barrier on the CPU).
static ggml_tensor * stacked_checks(ggml_context * ctx, ggml_tensor * stack, int n) {
    const size_t nb2 = stack->nb[2];
    ggml_tensor * a = ggml_view_3d(ctx, stack, stack->ne[0], stack->ne[1], n, stack->nb[1], nb2, 0);
    ggml_tensor * b = ggml_view_3d(ctx, stack, stack->ne[0], stack->ne[1], n, stack->nb[1], nb2, nb2);
    ggml_tensor * dot = ggml_sum_rows(ctx, ggml_mul(ctx, a, b));              // [1, T, n]
    ggml_tensor * sq = ggml_sum_rows(ctx, ggml_sqr(ctx, stack));              // [1, T, n + 1]
    ggml_tensor * na = ggml_view_3d(ctx, sq, 1, sq->ne[1], n, sq->nb[1], sq->nb[2], 0);
    ggml_tensor * nb = ggml_view_3d(ctx, sq, 1, sq->ne[1], n, sq->nb[1], sq->nb[2], sq->nb[2]);
    ggml_tensor * c = ggml_div(ctx, dot, ggml_sqrt(ctx, ggml_mul(ctx, na, nb)));   // cos, [1, T, n]
    ggml_set_name(c, "checks");
    ggml_set_output(c);
    return c;
}

// The LM head a lane's output rows go through: the river's low-bit copy for tokens on the river
// (they left the backbone) when the sidecar has one, else the backbone's.
static ggml_tensor * head_of(const model & m, const lane & ln) {
    return ln.on_river(ln.last) && m.river && m.river->output ? m.river->output : m.output;
}

static void check_segment(const model & m, const segment & seg, const device_carry * carry) {
    const int L = m.hp.n_layer;
    if (seg.lanes.empty()) fail(PR_ERR_INTERNAL, "a segment without lanes");
    for (const lane & ln : seg.lanes) {
        if (ln.first < 0 || ln.last >= L || ln.first > ln.last || (ln.head() && ln.last != L - 1) || (ln.river && !m.river) ||
            ln.groups.empty()) {
            fail(PR_ERR_INTERNAL, "bad lane [%d, %d] head %d", ln.first, ln.last, (int) ln.head());
        }
        // A switch to the river inside the lane, after the blocks it checks (checks are the backbone's).
        if (ln.river_from >= 0 && (ln.river || !m.river || ln.river_from <= ln.first || ln.river_from > ln.last ||
                                   (ln.n_checks() > 0 && ln.check_last >= ln.river_from))) {
            fail(PR_ERR_INTERNAL, "bad river switch at %d in lane [%d, %d]", ln.river_from, ln.first, ln.last);
        }
    }
    if (seg.embd && !seg.head()) fail(PR_ERR_INTERNAL, "an embedding segment needs the head's rows");
    if ((seg.carry_in >= 0 || seg.carry_out) &&
        (!carry || seg.lanes.size() != 1 || seg.n_tokens() != 1 || (seg.carry_out && seg.head()))) {
        fail(PR_ERR_INTERNAL, "a carry segment needs a carry and one token, and a head ends the step");
    }
}

// Distinct tensors the graph's ops (views aside) read an input through: the input itself or a view
// of it. Off the CPU, the scheduler copies each one to the ops' device before every compute.
static int input_reads(ggml_cgraph * gf) {
    std::unordered_set<const ggml_tensor *> seen;
    for (int i = 0; i < ggml_graph_n_nodes(gf); i++) {
        const ggml_tensor * n = ggml_graph_node(gf, i);
        if (n->view_src) continue;
        for (const ggml_tensor * src : n->src) {
            if (src && ((src->view_src ? src->view_src : src)->flags & GGML_TENSOR_FLAG_INPUT)) seen.insert(src);
        }
    }
    return (int) seen.size();
}

built_graph * build_graph(const model & m, const kv_cache & kv, const segment & seg, const device_carry * carry) {
    check_segment(m, seg, carry);
    int n_groups = 0, lo = m.hp.n_layer, hi = 0;
    for (const lane & ln : seg.lanes) {
        n_groups += (int) ln.groups.size();
        lo = std::min(lo, ln.first);
        hi = std::max(hi, ln.last);
    }
    const size_t cap = graph_capacity(m, (int) seg.lanes.size(), n_groups);
    ggml_init_params ip = {ggml_tensor_overhead() * cap + ggml_graph_overhead_custom(cap, false), nullptr, true};
    std::unique_ptr<built_graph> g(new built_graph());
    g->seg = seg;
    g->ctx = ggml_init(ip);
    if (!g->ctx) fail(PR_ERR_BACKEND, "cannot create a graph context");
    ggml_context * ctx = g->ctx;
    g->gf = ggml_new_graph_custom(ctx, cap, false);
    const graph_shape & s = seg.shape;
    const int L = m.hp.n_layer;

    const size_t nl = seg.lanes.size();
    g->lanes.resize(nl);
    std::vector<ggml_tensor *> x(nl), stack(nl, nullptr);
    for (size_t i = 0; i < nl; i++) x[i] = lane_inputs(ctx, m, kv, seg, seg.lanes[i], g->lanes[i], carry);
    std::vector<bool> wide_lane(nl);   // the lane's blocks and head read the file's layout (one layout a step)
    for (size_t i = 0; i < nl; i++) wide_lane[i] = wide(m, s, x[i], &seg.lanes[i]);
    // Block by block, every lane that runs the block (lanes may start at different blocks).
    for (int il = lo; il <= hi; il++) {
        for (size_t i = 0; i < nl; i++) {
            const lane & ln = seg.lanes[i];
            lane_io & io = g->lanes[i];
            if (il < ln.first || il > ln.last) continue;
            const bool check = il >= ln.check_first && il <= ln.check_last;
            if (check && !io.check_in) {
                io.check_in = x[i];
                ggml_set_output(x[i]);   // also when x is the input: the allocator may reuse an input's memory
                if (!seg.host_checks) stack[i] = ggml_reshape_3d(ctx, x[i], x[i]->ne[0], x[i]->ne[1], 1);
            }
            ggml_tensor * sel = (ln.head() && il == L - 1) ? io.in.out_ids : nullptr;
            const block_weights & w = ln.on_river(il) ? m.river->blocks[il] : wide_lane[i] ? m.wide_blocks[il] : m.blocks[il];
            ggml_tensor * y = build_block(ctx, m, kv, io.in, s, ln.groups, w, il, x[i], sel);
            if (check) {
                if (stack[i]) stack[i] = ggml_concat(ctx, stack[i], ggml_reshape_3d(ctx, y, y->ne[0], y->ne[1], 1), 2);
                ggml_set_output(y);
                io.hidden_out.push_back(y);
            }
            x[i] = y;
        }
    }
    ggml_tensor * carry_src = nullptr;   // what the carry keeps: the check stack, else the last hidden state
    ggml_tensor * head_in = nullptr;     // the output rows of the lanes with a head, in lane order
    // Runs of consecutive head lanes that share a head matrix, each with its output rows.
    std::vector<std::pair<ggml_tensor *, ggml_tensor *>> head_runs;
    for (size_t i = 0; i < nl; i++) {
        lane_io & io = g->lanes[i];
        for (ggml_tensor * h : io.hidden_out) ggml_build_forward_expand(g->gf, h);
        if (stack[i]) {
            io.checks = stacked_checks(ctx, stack[i], seg.lanes[i].n_checks());
            ggml_build_forward_expand(g->gf, io.checks);
            carry_src = stack[i];
        }
        if (seg.lanes[i].head()) {
            head_in = head_in ? ggml_concat(ctx, head_in, x[i], 1) : x[i];
            ggml_tensor * w = head_of(m, seg.lanes[i]);
            if (w == m.output && wide_lane[i]) w = m.wide_output;
            if (!head_runs.empty() && head_runs.back().first == w) {
                head_runs.back().second = ggml_concat(ctx, head_runs.back().second, x[i], 1);
            } else {
                head_runs.push_back({w, x[i]});
            }
        } else {
            io.last_hidden = x[i];
            ggml_set_output(x[i]);
            ggml_build_forward_expand(g->gf, x[i]);
        }
    }
    if (head_in && seg.embd) {
        // llama.cpp's t_embd ("result_norm"): the embeddings are the hidden states after the final
        // norm; the head's matrix, the largest of a small model, is skipped.
        g->embd = rms_norm(ctx, head_in, m.output_norm, m.hp.rms_eps);
        ggml_set_name(g->embd, "embd");
        ggml_set_output(g->embd);
        ggml_build_forward_expand(g->gf, g->embd);
    } else if (head_in) {
        // One product per run of lanes with the same head (one run unless exited tokens have a
        // head of their own), concatenated in lane order.
        g->logits = nullptr;
        for (const auto & run : head_runs) {
            ggml_tensor * h = rms_norm(ctx, run.second, m.output_norm, m.hp.rms_eps);
            ggml_tensor * y = linear(ctx, s, run.first, h, m.output_b);
            g->logits = g->logits ? ggml_concat(ctx, g->logits, y, 1) : y;
        }
        if (m.hp.final_softcap > 0.0f) g->logits = softcap(ctx, g->logits, m.hp.final_softcap);
        ggml_set_name(g->logits, "logits");
        ggml_set_output(g->logits);
        ggml_build_forward_expand(g->gf, g->logits);
    }
    if (seg.carry_out) {
        // One copy of every hidden state the next segment may start from, into the carry.
        if (!carry_src) carry_src = ggml_reshape_3d(ctx, x[0], x[0]->ne[0], 1, 1);
        ggml_tensor * dst = ggml_view_3d(ctx, carry->t, carry_src->ne[0], 1, carry_src->ne[2], carry->t->nb[1], carry->t->nb[2], 0);
        ggml_build_forward_expand(g->gf, ggml_cpy(ctx, carry_src, dst));
    }
    g->input_reads = input_reads(g->gf);
    return g.release();
}

} // namespace pr
