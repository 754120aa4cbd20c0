// Context shift, as llama.cpp's seq_rm + seq_add and K-shift (llama-kv-cache.cpp's
// build_graph_shift / build_rope_shift). A row here is its position, so a drop moves the later rows
// of the sequence down at once (K and V as they are) and records the position delta of each moved
// row; before the cache is next read, one graph rotates every block's keys by their rows' deltas,
// so that shifts in a row add up to one rotation per key, as llama.cpp's deltas per cell do.
#include "context.h"

#include <memory>

namespace pr {

namespace {

struct shift_graph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * delta = nullptr;   // I32: each row's delta (apply_shift)
    ~shift_graph() { if (ctx) ggml_free(ctx); }
};

shift_graph * new_graph(size_t cap) {
    std::unique_ptr<shift_graph> g(new shift_graph());
    ggml_init_params ip = {ggml_tensor_overhead() * cap + ggml_graph_overhead_custom(cap, false), nullptr, true};
    g->ctx = ggml_init(ip);
    if (!g->ctx) fail(PR_ERR_BACKEND, "cannot create the context shift graph");
    g->gf = ggml_new_graph_custom(g->ctx, cap, false);
    return g.release();
}

// Rows [p1, p1 + n) of sequence s to rows [p0, p0 + n), p0 < p1, K and V of every block as they
// are. Each move reads its rows into the compute buffer before it writes the cache, so the
// overlapping ranges are safe.
shift_graph * build_move(const model & m, const kv_cache & kv, int s, int p0, int p1, int n) {
    const int64_t E = m.hp.n_embd_k_gqa();
    std::unique_ptr<shift_graph> g(new_graph((size_t) 8 * m.hp.n_layer + 16));
    ggml_context * ctx = g->ctx;
    const int64_t src = kv.row(s, p1), dst = kv.row(s, p0);
    for (size_t il = 0; il < kv.k.size(); il++) {
        ggml_tensor * K = kv.k[il], * V = kv.v[il];
        ggml_tensor * k_from = ggml_view_2d(ctx, K, E, n, K->nb[1], src * K->nb[1]);
        ggml_tensor * k_to = ggml_view_2d(ctx, K, E, n, K->nb[1], dst * K->nb[1]);
        ggml_build_forward_expand(g->gf, ggml_cpy(ctx, ggml_cont(ctx, k_from), k_to));
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

// Every block's keys, all rows of all sequences, rotated by their deltas, as build_graph_shift:
// the context's YaRN extrapolation and attention factors (llama.cpp's shift takes cparams', not the
// plain RoPE of Gemma 3's sliding-window layers), the layer's own base and scale. An F16/F32 K in
// place; a quantized K through F32 and back, turned out of its Hadamard rotation and into it again
// around the RoPE (attn_rot_k), as llama.cpp's; a BF16 K through F32 as well (ggml's CPU RoPE takes
// F16 and F32 only: llama.cpp would abort).
shift_graph * build_rotate(const model & m, const kv_cache & kv) {
    const hparams & hp = m.hp;
    const int64_t hd = hp.n_embd_head, nh = hp.n_head_kv, rows = (int64_t) kv.n_seq * kv.n_rows;
    std::unique_ptr<shift_graph> g(new_graph((size_t) 16 * hp.n_layer + 16));
    ggml_context * ctx = g->ctx;
    g->delta = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, rows);
    ggml_set_name(g->delta, "k_shift");
    ggml_set_input(g->delta);
    for (int il = 0; il < hp.n_layer; il++) {
        if (!hp.uses_rope(il)) continue;
        ggml_tensor * K = kv.k[il];
        ggml_tensor * k = ggml_view_3d(ctx, K, hd, nh, rows, ggml_row_size(K->type, hd), K->nb[1], 0);
        auto rope = [&](ggml_tensor * x, bool inplace) {
            return (inplace ? ggml_rope_ext_inplace : ggml_rope_ext)(
                ctx, x, g->delta, m.rope_factors(kv.n_rows), hp.n_rot, m.arch->rope_type, hp.yarn_n_ctx_orig,
                hp.rope_base(il), hp.rope_scale(il), hp.yarn_ext_factor, hp.yarn_attn_factor, hp.yarn_beta_fast,
                hp.yarn_beta_slow);
        };
        ggml_tensor * out;
        if (K->type == GGML_TYPE_F16 || K->type == GGML_TYPE_F32) {
            out = rope(k, true);
        } else {
            ggml_tensor * t = ggml_cast(ctx, k, GGML_TYPE_F32);
            if (kv.k_rot[il]) t = hadamard(ctx, t, kv.k_rot[il]);
            t = rope(t, false);
            if (kv.k_rot[il]) t = hadamard(ctx, t, kv.k_rot[il]);
            out = ggml_cpy(ctx, t, k);
        }
        ggml_build_forward_expand(g->gf, out);
    }
    return g.release();
}

} // namespace

// Runs a graph of the context's in its multi-token scheduler (that graph is built again at the next
// step), after any graph in flight; delta, when the graph has one, set first.
static void run_now(context & c, shift_graph & g) {
    c.settle();
    c.main.graph.reset();
    ggml_backend_sched_reset(c.main.sched);
    if (!ggml_backend_sched_alloc_graph(c.main.sched, g.gf)) {
        ggml_backend_sched_reset(c.main.sched);
        fail(PR_ERR_BACKEND, "cannot allocate the context shift graph");
    }
    if (g.delta) ggml_backend_tensor_set(g.delta, c.kv->delta.data(), 0, ggml_nbytes(g.delta));
    if (c.set_n_threads) c.set_n_threads(c.cpu, c.params.n_threads_batch);
    const ggml_status st = ggml_backend_sched_graph_compute(c.main.sched, g.gf);
    ggml_backend_sched_reset(c.main.sched);
    if (st != GGML_STATUS_SUCCESS) fail(PR_ERR_BACKEND, "the context shift graph failed (status %d)", (int) st);
}

void context::drop(int s, int p0, int p1) {
    if (s < 0 || s >= kv->n_seq) fail(PR_ERR_INVALID_ARG, "sequence %d is not in [0, %d)", s, kv->n_seq);
    const int used_s = kv->used[s];
    if (p0 < 0 || p0 > p1 || p1 > used_s) {
        fail(PR_ERR_INVALID_ARG, "cannot drop positions [%d, %d): the sequence holds %d tokens", p0, p1, used_s);
    }
    if (p0 == p1) return;
    const int n = used_s - p1;
    if (n > 0) {
        std::unique_ptr<shift_graph> g(build_move(*m, *kv, s, p0, p1, n));
        try {
            run_now(*this, *g);
        } catch (...) {
            truncate(s, p0);   // the rows from p0 on may be half moved: what stays is what is whole
            throw;
        }
        int32_t * d = kv->delta.data() + kv->row(s, 0);
        for (int i = 0; i < n; i++) d[p0 + i] = d[p1 + i] + (p0 - p1);
        kv->shifted = true;
    }
    kv->used[s] = used_s - (p1 - p0);
    forget_forecast(s);
    n_outputs = 0;
    n_embd_rows = 0;
}

void context::apply_shift() {
    if (!kv->shifted) return;
    bool any_rope = false;   // a model without RoPE has nothing to rotate (llama.cpp's LLAMA_ROPE_TYPE_NONE)
    for (int il = 0; il < m->hp.n_layer; il++) any_rope = any_rope || m->hp.uses_rope(il);
    if (any_rope) {
        std::unique_ptr<shift_graph> g(build_rotate(*m, *kv));
        run_now(*this, *g);
    }
    std::fill(kv->delta.begin(), kv->delta.end(), 0);
    kv->shifted = false;
}

} // namespace pr
