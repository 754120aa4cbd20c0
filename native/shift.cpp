// Context shift: a sequence's rows after a dropped range move down, their keys rotated by the
// position delta, as llama.cpp's seq_rm + seq_add and K-shift do (llama-kv-cache.cpp's
// build_graph_shift / build_rope_shift). llama.cpp rotates the keys in place and leaves the cells
// where they are; here a row is its position, so each block's moved K rows are rotated into their
// new rows and its V rows copied there, in one graph over every block.
#include "context.h"

#include <memory>

namespace pr {

namespace {

struct shift_graph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * delta = nullptr;   // I32 [n]: the moved rows' position delta, p0 - p1
    ~shift_graph() { if (ctx) ggml_free(ctx); }
};

// The rotation of layer il's keys by delta, as build_rope_shift: the context's YaRN extrapolation
// and attention factors for every layer (not the sliding-window layers' plain RoPE of the forward
// graph: llama.cpp's shift takes cparams'), the layer's own base and scale.
ggml_tensor * rotate(ggml_context * ctx, const model & m, const kv_cache & kv, ggml_tensor * k, ggml_tensor * delta, int il) {
    const hparams & hp = m.hp;
    return ggml_rope_ext(ctx, k, delta, m.rope_factors(kv.n_rows), hp.n_rot, m.arch->rope_type, hp.yarn_n_ctx_orig,
                         hp.rope_base(il), hp.rope_scale(il), hp.yarn_ext_factor, hp.yarn_attn_factor,
                         hp.yarn_beta_fast, hp.yarn_beta_slow);
}

// Rows [p1, p1 + n) of sequence s to rows [p0, p0 + n), p0 < p1. Each move reads its rows into a
// tensor of the compute buffer before it writes the cache, so the overlapping ranges are safe.
shift_graph * build_shift(const model & m, const kv_cache & kv, int s, int p0, int p1, int n) {
    const hparams & hp = m.hp;
    const int L = hp.n_layer;
    const int64_t hd = hp.n_embd_head, nh = hp.n_head_kv, E = hp.n_embd_k_gqa();
    std::unique_ptr<shift_graph> g(new shift_graph());
    const size_t cap = (size_t) 32 * L + 16;
    ggml_init_params ip = {ggml_tensor_overhead() * cap + ggml_graph_overhead_custom(cap, false), nullptr, true};
    g->ctx = ggml_init(ip);
    if (!g->ctx) fail(PR_ERR_BACKEND, "cannot create the context shift graph");
    ggml_context * ctx = g->ctx;
    g->gf = ggml_new_graph_custom(ctx, cap, false);
    g->delta = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    ggml_set_name(g->delta, "shift_delta");
    ggml_set_input(g->delta);
    const int64_t src = kv.row(s, p1), dst = kv.row(s, p0);
    for (int il = 0; il < L; il++) {
        ggml_tensor * K = kv.k[il];
        ggml_tensor * to = ggml_view_2d(ctx, K, E, n, K->nb[1], dst * K->nb[1]);
        ggml_tensor * k;
        if (!hp.uses_rope(il)) {
            k = ggml_dup(ctx, ggml_view_2d(ctx, K, E, n, K->nb[1], src * K->nb[1]));
        } else if (K->type == GGML_TYPE_F16 || K->type == GGML_TYPE_F32) {
            // the cached type in and out, as llama.cpp's ggml_rope_ext_inplace on the cache
            k = rotate(ctx, m, kv, ggml_view_3d(ctx, K, hd, nh, n, ggml_row_size(K->type, hd), K->nb[1], src * K->nb[1]), g->delta, il);
        } else {
            // a quantized K through F32 and back, turned out of its Hadamard rotation and into it
            // again (attn_rot_k) around the RoPE, as llama.cpp's; BF16 too (ggml's CPU RoPE takes
            // F16 and F32 only, where llama.cpp would abort)
            k = ggml_cast(ctx, ggml_view_2d(ctx, K, E, n, K->nb[1], src * K->nb[1]), GGML_TYPE_F32);
            k = ggml_reshape_3d(ctx, k, hd, nh, n);
            if (kv.k_rot[il]) k = hadamard(ctx, k, kv.k_rot[il]);
            k = rotate(ctx, m, kv, k, g->delta, il);
            if (kv.k_rot[il]) k = hadamard(ctx, k, kv.k_rot[il]);
        }
        ggml_build_forward_expand(g->gf, ggml_cpy(ctx, k, to));
        // V: the rows as they are (its Hadamard rotation is per row, not per position)
        ggml_tensor * V = kv.v[il];
        ggml_tensor * v_from, * v_to;
        if (kv.v_trans) {   // [rows, E]: the n columns of each of E rows
            const size_t es = ggml_element_size(V);
            v_from = ggml_view_2d(ctx, V, n, E, V->nb[1], src * es);
            v_to = ggml_view_2d(ctx, V, n, E, V->nb[1], dst * es);
        } else {
            v_from = ggml_view_2d(ctx, V, E, n, V->nb[1], src * V->nb[1]);
            v_to = ggml_view_2d(ctx, V, E, n, V->nb[1], dst * V->nb[1]);
        }
        ggml_build_forward_expand(g->gf, ggml_cpy(ctx, ggml_cont(ctx, v_from), v_to));
    }
    return g.release();
}

} // namespace

void context::drop(int s, int p0, int p1) {
    if (s < 0 || s >= kv->n_seq) fail(PR_ERR_INVALID_ARG, "sequence %d is not in [0, %d)", s, kv->n_seq);
    const int used_s = kv->used[s];
    if (p0 < 0 || p0 > p1 || p1 > used_s) {
        fail(PR_ERR_INVALID_ARG, "cannot drop positions [%d, %d): the sequence holds %d tokens", p0, p1, used_s);
    }
    if (p0 == p1) return;
    const int n = used_s - p1;
    if (n > 0) {
        settle();   // a graph in flight may still write the cache
        // The multi-token graph's scheduler runs the shift: its graph is built again at the next step.
        main.graph.reset();
        ggml_backend_sched_reset(main.sched);
        std::unique_ptr<shift_graph> g(build_shift(*m, *kv, s, p0, p1, n));
        if (!ggml_backend_sched_alloc_graph(main.sched, g->gf)) {
            ggml_backend_sched_reset(main.sched);
            fail(PR_ERR_BACKEND, "cannot allocate the context shift graph");
        }
        const std::vector<int32_t> delta((size_t) n, p0 - p1);
        ggml_backend_tensor_set(g->delta, delta.data(), 0, sizeof(int32_t) * delta.size());
        if (set_n_threads) set_n_threads(cpu, params.n_threads_batch);
        const ggml_status st = ggml_backend_sched_graph_compute(main.sched, g->gf);
        ggml_backend_sched_reset(main.sched);
        if (st != GGML_STATUS_SUCCESS) {
            truncate(s, p0);   // the rows from p0 on may be half moved: what stays is what is whole
            fail(PR_ERR_BACKEND, "the context shift graph failed (status %d)", (int) st);
        }
    }
    kv->used[s] = used_s - (p1 - p0);
    forget_forecast(s);
    n_outputs = 0;
    n_embd_rows = 0;
    embd.clear();
}

} // namespace pr
