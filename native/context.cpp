#include "context.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace pr {

context::context(model * m_, const pr_context_params & p) : m(m_), params(p) {
    if (p.n_ctx < 1 || p.n_ctx > (1 << 22)) fail(PR_ERR_INVALID_ARG, "n_ctx must be in [1, 4194304], got %d", p.n_ctx);
    if (p.n_batch < 1) fail(PR_ERR_INVALID_ARG, "n_batch must be >= 1, got %d", p.n_batch);
    if (p.n_threads < 1 || p.n_threads_batch < 1) fail(PR_ERR_INVALID_ARG, "thread counts must be >= 1");
    params.n_batch = std::min(p.n_batch, p.n_ctx);

    kv.reset(new kv_cache(*m, p.n_ctx, p.flash_attn == 0));

    std::set<ggml_backend_dev_t> devs(m->layer_dev.begin(), m->layer_dev.end());
    devs.insert(m->output_dev);
    for (ggml_backend_dev_t d : devs) {
        if (d == m->cpu_dev) continue;
        ggml_backend_t b = ggml_backend_dev_init(d, nullptr);
        if (!b) fail(PR_ERR_BACKEND, "cannot start device %s", ggml_backend_dev_name(d));
        backends.push_back(b);
    }
    cpu = ggml_backend_dev_init(m->cpu_dev, nullptr);
    if (!cpu) fail(PR_ERR_BACKEND, "cannot start the CPU backend");
    backends.push_back(cpu);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(m->cpu_dev);
    set_n_threads = (ggml_backend_set_n_threads_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");

    sched = ggml_backend_sched_new(backends.data(), nullptr, (int) backends.size(), graph_capacity(*m), false, true);
    if (!sched) fail(PR_ERR_BACKEND, "cannot create the ggml scheduler");

    for (auto & b : m->blocks) backbone.push_back(&b);

    // Reserve the compute buffers for the largest step once, so that decoding never grows them.
    graph_shape worst;
    worst.flash_attn = p.flash_attn != 0;
    worst.n_tokens = worst.n_outputs = params.n_batch;
    worst.n_kv = kv->n_ctx;
    std::unique_ptr<built_graph> g(build_graph(*m, *kv, worst, backbone));
    if (!ggml_backend_sched_reserve(sched, g->gf)) fail(PR_ERR_BACKEND, "cannot reserve compute buffers (n_ctx %d, n_batch %d)", p.n_ctx, params.n_batch);
}

context::~context() {
    graph.reset();
    if (sched) ggml_backend_sched_free(sched);
    for (auto b : backends) ggml_backend_free(b);
}

built_graph & context::graph_for(const graph_shape & s, const block_path & path) {
    if (graph && graph->shape == s && graph->path == path) return *graph;
    graph.reset();
    ggml_backend_sched_reset(sched);
    graph.reset(build_graph(*m, *kv, s, path));
    if (!ggml_backend_sched_alloc_graph(sched, graph->gf)) {
        graph.reset();
        ggml_backend_sched_reset(sched);
        fail(PR_ERR_BACKEND, "cannot allocate the compute graph");
    }
    return *graph;
}

void context::set_inputs(const built_graph & g, const int32_t * tokens, int n, int pos0) {
    const int n_kv = g.shape.n_kv;
    std::vector<int32_t> pos(n);
    std::vector<int64_t> idx(n);
    for (int i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        idx[i] = pos0 + i;
    }
    ggml_backend_tensor_set(g.in.tokens, tokens, 0, sizeof(int32_t) * n);
    ggml_backend_tensor_set(g.in.pos, pos.data(), 0, sizeof(int32_t) * n);
    ggml_backend_tensor_set(g.in.kv_idx, idx.data(), 0, sizeof(int64_t) * n);
    if (g.in.v_idx) {
        // Transposed V: element d of token i lives at row d, column pos0+i.
        const int64_t E = m->hp.n_embd_k_gqa(), n_ctx = kv->n_ctx;
        std::vector<int64_t> vidx((size_t) E * n);
        for (int i = 0; i < n; i++) {
            for (int64_t d = 0; d < E; d++) vidx[(size_t) i * E + d] = d * n_ctx + pos0 + i;
        }
        ggml_backend_tensor_set(g.in.v_idx, vidx.data(), 0, sizeof(int64_t) * vidx.size());
    }

    // Causal mask: token i (at pos0+i) sees cache rows 0..pos0+i.
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), ninf = ggml_fp32_to_fp16(-INFINITY);
    std::vector<ggml_fp16_t> mask((size_t) n_kv * n, ninf);
    for (int i = 0; i < n; i++) {
        std::fill(mask.begin() + (size_t) i * n_kv, mask.begin() + (size_t) i * n_kv + std::min(pos0 + i + 1, n_kv), zero);
    }
    ggml_backend_tensor_set(g.in.mask, mask.data(), 0, mask.size() * sizeof(ggml_fp16_t));

    if (g.in.out_ids) {
        // Output rows are always the last n_outputs tokens of the step.
        std::vector<int32_t> ids(g.shape.n_outputs);
        for (int i = 0; i < g.shape.n_outputs; i++) ids[i] = n - g.shape.n_outputs + i;
        ggml_backend_tensor_set(g.in.out_ids, ids.data(), 0, sizeof(int32_t) * ids.size());
    }
}

// One step of at most n_batch tokens at the end of the cache.
void context::run(const int32_t * tokens, int n, int n_out) {
    const int pos0 = kv->n_used;
    graph_shape s;
    s.flash_attn = params.flash_attn != 0;
    s.n_tokens = n;
    s.n_kv = std::min(kv->n_ctx, (int) GGML_PAD(pos0 + n, kv_pad));
    s.n_outputs = n_out;
    built_graph & g = graph_for(s, backbone);
    set_inputs(g, tokens, n, pos0);
    if (set_n_threads) set_n_threads(cpu, n == 1 ? params.n_threads : params.n_threads_batch);
    const ggml_status st = ggml_backend_sched_graph_compute(sched, g.gf);
    if (st != GGML_STATUS_SUCCESS) fail(PR_ERR_BACKEND, "graph compute failed (status %d)", (int) st);
    kv->n_used = pos0 + n;
    if (n_out > 0) {
        const size_t base = (size_t) n_outputs * m->hp.n_vocab;
        logits.resize(base + (size_t) n_out * m->hp.n_vocab);
        ggml_backend_tensor_get(g.logits, logits.data() + base, 0, (size_t) n_out * m->hp.n_vocab * sizeof(float));
        n_outputs += n_out;
    }
}

void context::decode(const int32_t * tokens, int n, bool logits_all) {
    if (n < 1) fail(PR_ERR_INVALID_ARG, "decode needs at least one token");
    if (!tokens) fail(PR_ERR_INVALID_ARG, "tokens is NULL");
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab) {
            fail(PR_ERR_INVALID_ARG, "token id %d at index %d is out of range [0, %d)", tokens[i], i, m->hp.n_vocab);
        }
    }
    if ((int64_t) kv->n_used + n > kv->n_ctx) {
        fail(PR_ERR_CONTEXT_FULL, "%d tokens do not fit: %d of n_ctx %d are in use", n, kv->n_used, kv->n_ctx);
    }
    n_outputs = 0;
    logits.clear();
    for (int done = 0; done < n;) {
        const int step = std::min(params.n_batch, n - done);
        const bool last = done + step == n;
        run(tokens + done, step, logits_all ? step : (last ? 1 : 0));
        done += step;
    }
}

void context::truncate(int n_keep) {
    if (n_keep < 0 || n_keep > kv->n_used) fail(PR_ERR_INVALID_ARG, "cannot truncate to %d: the cache holds %d tokens", n_keep, kv->n_used);
    kv->n_used = n_keep;   // rows past n_keep are masked out and overwritten by later tokens
    n_outputs = 0;
    logits.clear();
}

} // namespace pr
