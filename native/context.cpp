#include "context.h"
#include "placement.h"
#include "tiled_gemm.h"
#include "river.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace pr {

static constexpr size_t max_small_graphs = 32;

graph_slot::~graph_slot() {
    graph.reset();
    if (sched) ggml_backend_sched_free(sched);
}

context::context(model * m_, const pr_context_params & p) : m(m_), params(p) {
    if (p.n_ctx < 1 || p.n_ctx > (1 << 22)) fail(PR_ERR_INVALID_ARG, "n_ctx must be in [1, 4194304], got %d", p.n_ctx);
    if (p.n_batch < 1) fail(PR_ERR_INVALID_ARG, "n_batch must be >= 1, got %d", p.n_batch);
    if (p.n_threads < 1 || p.n_threads_batch < 1) fail(PR_ERR_INVALID_ARG, "thread counts must be >= 1");
    if (p.n_seq_max < 1 || p.n_seq_max > 256) fail(PR_ERR_INVALID_ARG, "n_seq_max must be in [1, 256], got %d", p.n_seq_max);
    params.n_batch = std::min(p.n_batch, p.n_ctx * p.n_seq_max);

    // Each region holds a multiple of kv_pad rows, as llama.cpp pads n_ctx, so that the attended
    // rows (n_kv) are always such a multiple: ggml-cuda's flash attention takes its fast path only
    // then. Tokens past n_ctx are still refused (kv->n_rows is not the limit; params.n_ctx is).
    check_kv_types(*m, p.type_k, p.type_v, p.flash_attn != 0);   // before any allocation
    kv.reset(new kv_cache(*m, (int) GGML_PAD(p.n_ctx, kv_pad), p.n_seq_max, p.flash_attn == 0, (ggml_type) p.type_k,
                          (ggml_type) p.type_v));
    forecasts.resize(p.n_seq_max);

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
    tiled_gemm_probe(cpu);
    backends.push_back(cpu);
    for (ggml_backend_t b : backends) {
        if (b != cpu && !host_buft) host_buft = ggml_backend_dev_host_buffer_type(ggml_backend_get_device(b));
    }
    // The output buffer, sized for a row per slot as llama.cpp's (n_seq_max rows): pinned memory
    // with a GPU, plain host memory of the CPU backend without one (the same path, so that the
    // counters count on the CPU what a GPU's step reads).
    reserve_outputs(p.n_seq_max, 0);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(m->cpu_dev);
    set_n_threads = (ggml_backend_set_n_threads_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");

    main.sched = new_sched(graph_capacity(*m, p.n_seq_max, p.n_seq_max));
    // Batch invariance only when asked for: one-token products cost prompt speed on the CPU (and
    // re-read a GPU's weights once per token of a step), and llama.cpp computes multi-token steps
    // with its batched kernels, whose bits pyriver's default reproduces.
    if (p.batch_invariant < -1 || p.batch_invariant > 1) fail(PR_ERR_INVALID_ARG, "batch_invariant must be -1, 0 or 1");
    if (p.batch_invariant == 1 && p.flash_attn) {
        fail(PR_ERR_INVALID_ARG, "batch_invariant needs flash_attn off: ggml's flash attention is computed differently for steps of many tokens");
    }
    batch_invariant = p.batch_invariant == 1;
    bool one_dev = true;
    for (ggml_backend_dev_t d : m->layer_dev) one_dev = one_dev && d == m->layer_dev[0];
    if (one_dev && m->layer_dev[0] != m->cpu_dev) carry.reset(new device_carry(*m, m->layer_dev[0]));

    // Reserve the compute buffers for the largest step once, so that decoding never grows them.
    segment worst = make_segment(std::min(params.n_batch, p.n_ctx), params.n_batch, 0, m->hp.n_layer - 1, false, 0, -1);
    worst.lanes[0].groups[0].n_kv = kv->n_rows;
    worst.lanes[0].n_outputs = worst.lanes[0].n_tokens();
    std::unique_ptr<built_graph> g(build_graph(*m, *kv, worst, nullptr));
    if (!ggml_backend_sched_reserve(main.sched, g->gf)) fail(PR_ERR_BACKEND, "cannot reserve compute buffers (n_ctx %d, n_batch %d)", p.n_ctx, params.n_batch);
}

context::~context() {
    settle();
    small.clear();
    main.graph.reset();
    if (main.sched) ggml_backend_sched_free(main.sched);
    main.sched = nullptr;
    for (auto b : backends) ggml_backend_free(b);
    if (outbuf) ggml_backend_buffer_free(outbuf);
}

void context::reserve_outputs(int rows, size_t after_rows) {
    const size_t need = ((size_t) rows * m->hp.n_vocab + after_rows) * sizeof(float);
    if (!outbuf || ggml_backend_buffer_get_size(outbuf) < need) {
        settle();   // no read may still be landing in the old buffer
        if (outbuf) ggml_backend_buffer_free(outbuf);
        outbuf = ggml_backend_buft_alloc_buffer(host_buft ? host_buft : ggml_backend_cpu_buffer_type(), need);
        if (!outbuf) fail(PR_ERR_BACKEND, "cannot allocate %zu bytes of host memory for the outputs", need);
    }
    out = (float *) ggml_backend_buffer_get_base(outbuf);
    checks_out = out + (size_t) rows * m->hp.n_vocab;
    checks_room = after_rows;
}

ggml_backend_sched_t context::new_sched(size_t capacity) {
    std::vector<ggml_backend_buffer_type_t> bufts;
    for (ggml_backend_t b : backends) bufts.push_back(b == cpu && host_buft ? host_buft : ggml_backend_get_default_buffer_type(b));
    ggml_backend_sched_t s = ggml_backend_sched_new(backends.data(), bufts.data(), (int) backends.size(), capacity, false, true);
    if (!s) fail(PR_ERR_BACKEND, "cannot create a ggml scheduler");
    return s;
}

void context::set_rule(const exit_rule & r) {
    const int L = m->hp.n_layer;
    if (!(r.tau == r.tau)) fail(PR_ERR_INVALID_ARG, "exit_threshold is NaN");
    if (r.min_layer < 0 || r.min_layer >= L) fail(PR_ERR_INVALID_ARG, "min_exit_layer must be in [0, %d), got %d", L, r.min_layer);
    if (r.force_layer < -1 || r.force_layer >= L) fail(PR_ERR_INVALID_ARG, "force_exit_layer must be -1 or in [0, %d), got %d", L, r.force_layer);
    if (r.chunk < 0) fail(PR_ERR_INVALID_ARG, "check chunk must be >= 0 (0: automatic)");
    const bool exits = r.force_layer >= 0 || r.tau <= 1.0f;
    if (exits && !m->river) fail(PR_ERR_INVALID_ARG, "exits need a river: attach one to the model first");
    if (r.mode != exit_mode::checked && r.mode != exit_mode::predicted && r.mode != exit_mode::guarded) {
        fail(PR_ERR_INVALID_ARG, "exit_rule must be 0 (checked), 1 (predicted) or 2 (guarded), got %d", (int) r.mode);
    }
    rule = r;
    for (exit_forecast & f : forecasts) f.reset();   // exits seen under another rule forecast nothing
}

segment context::base_segment() const {
    segment s;
    s.shape.flash_attn = params.flash_attn != 0;
    s.shape.invariant = batch_invariant;
    s.shape.wide_prompt_rows = wide_prompt_rows;
    s.shape.verify_tile_rows = verify_tile_rows;
    return s;
}

// n tokens of sequence s at the end of its cache.
seq_group context::group_of(int s, int n) const {
    seq_group g;
    g.seq = s;
    g.n_tokens = n;
    g.n_kv = std::min(kv->n_rows, (int) GGML_PAD(kv->used[s] + n, kv_pad));
    return g;
}

bool context::on_cpu(int first, int last) const {
    bool cpu_only = true;
    for (int il = first; il <= last; il++) cpu_only = cpu_only && m->layer_dev[il] == m->cpu_dev;
    return cpu_only;
}

// A single-sequence segment: one lane of n tokens of sequence `seq`.
segment context::make_segment(int n, int n_out, int first, int last, bool river_path, int check_first, int check_last) const {
    segment s = base_segment();
    lane ln;
    ln.groups.push_back(group_of(seq, n));
    ln.groups[0].verify = verifying;
    ln.n_outputs = last == m->hp.n_layer - 1 ? n_out : 0;
    ln.first = first;
    ln.last = last;
    ln.river = river_path;
    ln.check_first = check_first;
    ln.check_last = check_last;
    s.lanes.push_back(ln);
    // A single token's similarities are cheaper on the host (a few KB read back) than as graph
    // ops (each a thread barrier), when the blocks live in host memory anyway.
    s.host_checks = n == 1 && on_cpu(first, last) && check_last >= check_first && rule.host_checks != 0;
    return s;
}

built_graph & context::graph_for(const segment & seg) {
    if (seg.n_tokens() > 1) {
        // Multi-token graphs share the reserved scheduler; rebuilt when the segment changes.
        if (main.graph && main.graph->seg == seg) return *main.graph;
        main.graph.reset();
        ggml_backend_sched_reset(main.sched);
        main.graph.reset(build_graph(*m, *kv, seg, carry.get()));
        if (!ggml_backend_sched_alloc_graph(main.sched, main.graph->gf)) {
            main.graph.reset();
            ggml_backend_sched_reset(main.sched);
            fail(PR_ERR_BACKEND, "cannot allocate the compute graph");
        }
        return *main.graph;
    }
    auto n_kv_free = [](segment s) { s.lanes[0].groups[0].n_kv = 0; return s; };
    for (auto it = small.begin(); it != small.end(); ++it) {
        if (it->first == seg) {
            small.splice(small.begin(), small, it);
            return *small.front().second->graph;
        }
    }
    // The same segment over a longer cache (the cache grew past a multiple of kv_pad): rebuilt in
    // the slot's scheduler, whose buffers were reserved for n_ctx, so nothing is allocated again
    // (on a GPU an allocation of device and pinned memory costs milliseconds).
    for (auto it = small.begin(); it != small.end(); ++it) {
        if (n_kv_free(it->first) == n_kv_free(seg)) {
            graph_slot & slot = *it->second;
            slot.graph.reset();
            ggml_backend_sched_reset(slot.sched);
            slot.graph.reset(build_graph(*m, *kv, seg, carry.get()));
            if (!ggml_backend_sched_alloc_graph(slot.sched, slot.graph->gf)) fail(PR_ERR_BACKEND, "cannot allocate a decode graph");
            it->first = seg;
            small.splice(small.begin(), small, it);
            return *slot.graph;
        }
    }
    std::unique_ptr<graph_slot> slot(new graph_slot());
    slot->sched = new_sched(graph_capacity(*m, 1, 1));
    segment worst = seg;
    worst.lanes[0].groups[0].n_kv = kv->n_rows;
    {
        std::unique_ptr<built_graph> w(build_graph(*m, *kv, worst, carry.get()));
        if (!ggml_backend_sched_reserve(slot->sched, w->gf)) fail(PR_ERR_BACKEND, "cannot reserve a decode graph");
    }
    slot->graph.reset(build_graph(*m, *kv, seg, carry.get()));
    if (!ggml_backend_sched_alloc_graph(slot->sched, slot->graph->gf)) fail(PR_ERR_BACKEND, "cannot allocate a decode graph");
    small.emplace_front(seg, std::move(slot));
    if (small.size() > max_small_graphs) small.pop_back();
    return *small.front().second->graph;
}

void context::set_lane_inputs(const built_graph & g, size_t li, const lane_feed & f) {
    const lane & ln = g.seg.lanes[li];
    const lane_io & io = g.lanes[li];
    const int n = ln.n_tokens();
    std::vector<int32_t> pos;
    std::vector<int64_t> idx;
    for (const seq_group & gr : ln.groups) {
        for (int i = 0; i < gr.n_tokens; i++) {
            pos.push_back(kv->used[gr.seq] + i);
            idx.push_back(kv->row(gr.seq, kv->used[gr.seq] + i));
        }
    }
    if (io.in.tokens) {
        if (!f.tokens) fail(PR_ERR_INTERNAL, "segment tokens missing");
        ggml_backend_tensor_set(io.in.tokens, f.tokens, 0, sizeof(int32_t) * n);
    }
    if (io.hidden_in && g.seg.carry_in < 0) {   // else the hidden state is in the device carry already
        if (!f.hidden || f.hidden->size() != (size_t) ggml_nelements(io.hidden_in)) fail(PR_ERR_INTERNAL, "segment input missing");
        ggml_backend_tensor_set(io.hidden_in, f.hidden->data(), 0, sizeof(float) * f.hidden->size());
    }
    if (io.in.pos) ggml_backend_tensor_set(io.in.pos, pos.data(), 0, sizeof(int32_t) * n);
    if (io.in.attn_scale) {
        // Temperature tuning as llama.cpp's llm_graph_input_attn_temp computes it, per position.
        const hparams & hp = m->hp;
        std::vector<float> t(n);
        for (int i = 0; i < n; i++) t[i] = std::log(std::floor((float) pos[i] / hp.attn_temp_floor) + 1.0) * hp.attn_temp_scale + 1.0;
        ggml_backend_tensor_set(io.in.attn_scale, t.data(), 0, sizeof(float) * n);
    }
    ggml_backend_tensor_set(io.in.kv_idx, idx.data(), 0, sizeof(int64_t) * n);
    if (io.in.v_idx) {
        // Transposed V: element d of a token lives at row d, column (its cache row).
        const int64_t E = m->hp.n_embd_k_gqa(), rows = kv->v[0]->ne[0];
        std::vector<int64_t> vidx((size_t) E * n);
        for (int i = 0; i < n; i++) {
            for (int64_t d = 0; d < E; d++) vidx[(size_t) i * E + d] = d * rows + idx[i];
        }
        ggml_backend_tensor_set(io.in.v_idx, vidx.data(), 0, sizeof(int64_t) * vidx.size());
    }

    // Each group's mask, back to back: token i of a group (at position p) sees its sequence's rows
    // 0..p; on sliding-window layers also not rows p - j >= n_swa (llama.cpp's standard SWA; rows are
    // positions, so the full-length region holds what the window needs).
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), ninf = ggml_fp32_to_fp16(-INFINITY);
    std::vector<ggml_fp16_t> mask, mask_swa;
    for (const seq_group & gr : ln.groups) {
        const int p0 = kv->used[gr.seq], n_kv = gr.n_kv;
        for (int i = 0; i < gr.n_tokens; i++) {
            const int p = p0 + i, vis = std::min(p + 1, n_kv);
            const size_t at = mask.size();
            mask.resize(at + n_kv, ninf);
            std::fill(mask.begin() + at, mask.begin() + at + vis, zero);
            if (io.in.mask_swa) {
                mask_swa.insert(mask_swa.end(), mask.begin() + at, mask.end());
                const int lo = std::min(std::max(0, p - m->hp.n_swa + 1), n_kv);
                std::fill(mask_swa.end() - n_kv, mask_swa.end() - n_kv + lo, ninf);
            }
        }
    }
    if (io.in.mask) ggml_backend_tensor_set(io.in.mask, mask.data(), 0, mask.size() * sizeof(ggml_fp16_t));
    if (io.in.mask_swa) ggml_backend_tensor_set(io.in.mask_swa, mask_swa.data(), 0, mask_swa.size() * sizeof(ggml_fp16_t));
    if (io.in.out_ids) {
        if ((int) f.out_ids.size() != ln.n_outputs) fail(PR_ERR_INTERNAL, "output rows missing");
        ggml_backend_tensor_set(io.in.out_ids, f.out_ids.data(), 0, sizeof(int32_t) * f.out_ids.size());
    }
}

built_graph & context::compute(const segment & seg, const std::vector<lane_feed> & feeds) {
    settle();   // a graph whose results nobody read (a prompt's chunk without logits): its buffers are reused
    built_graph & g = graph_for(seg);
    for (size_t i = 0; i < seg.lanes.size(); i++) set_lane_inputs(g, i, feeds[i]);
    const int n = seg.n_tokens();
    if (set_n_threads) set_n_threads(cpu, n == 1 ? params.n_threads : params.n_threads_batch);
    ggml_backend_sched_t sched = n > 1 ? main.sched : small.front().second->sched;
    // Launched without waiting (ggml_backend_sched_graph_compute would wait, a second sync before
    // the read of its results): the first read() waits, as llama.cpp's decode does.
    const ggml_status st = ggml_backend_sched_graph_compute_async(sched, g.gf);
    pending = sched;
    if (st != GGML_STATUS_SUCCESS) {
        settle();
        fail(PR_ERR_BACKEND, "graph compute failed (status %d)", (int) st);
    }
    note_graph(g.gf);
    n_graph_runs++;
    last_input_reads = g.input_reads;
    return g;
}

// A single-sequence segment: its outputs are the last tokens of the step.
built_graph & context::run_segment(const segment & seg, const int32_t * tokens, const std::vector<float> * hidden, int n) {
    lane_feed f;
    f.tokens = tokens;
    f.hidden = hidden;
    const int n_out = seg.one().n_outputs;
    for (int i = 0; i < n_out; i++) f.out_ids.push_back(n - n_out + i);
    return compute(seg, {f});
}

// The graph's logits rows after those the step already holds, in the output buffer (begin_step
// reserved them); wait: false leaves the copy queued for the step's next settle().
void context::take_logits(const built_graph & g, bool wait) {
    const int n_out = g.seg.n_outputs();
    const size_t nv = m->hp.n_vocab;
    if (n_out > 0) {
        if (!out || (size_t) (n_outputs + n_out) * nv > (size_t) (checks_out - out)) fail(PR_ERR_INTERNAL, "output rows not reserved");
        fetch(g.logits, out + (size_t) n_outputs * nv, 0, (size_t) n_out * nv * sizeof(float));
        n_outputs += n_out;
    }
    if (wait) settle();
}

std::vector<float> read_tensor(const context & c, ggml_tensor * t) {
    std::vector<float> v((size_t) ggml_nelements(t));
    c.read(t, v.data(), 0, v.size() * sizeof(float));
    return v;
}

// cos(input, output) of each checked block of lane i for each of its tokens, [n_checks][n_tokens]:
// from the hidden outputs on the host (a few KB read back a token), or the graph's own.
std::vector<float> lane_similarities(const context & c, const built_graph & g, size_t i) {
    const lane_io & io = g.lanes[i];
    const int nc = g.seg.lanes[i].n_checks();
    if (!g.seg.host_checks) return read_tensor(c, io.checks);   // a step's own read: see queue_checks
    std::vector<float> prev = read_tensor(c, io.check_in);
    const size_t E = (size_t) io.check_in->ne[0], T = prev.size() / E;
    std::vector<float> sims((size_t) nc * T);
    for (int k = 0; k < nc; k++) {
        std::vector<float> cur = read_tensor(c, io.hidden_out[k]);
        for (size_t t = 0; t < T; t++) {
            double dot = 0, na = 0, nb = 0;
            for (size_t d = t * E; d < (t + 1) * E; d++) {
                dot += (double) prev[d] * cur[d];
                na += (double) prev[d] * prev[d];
                nb += (double) cur[d] * cur[d];
            }
            sims[(size_t) k * T + t] = (float) (dot / std::sqrt(na * nb));
        }
        prev.swap(cur);
    }
    return sims;
}

void queue_checks(const context & c, const built_graph & g, size_t i, float * dst) {
    const lane_io & io = g.lanes[i];
    if (g.seg.host_checks || !io.checks) fail(PR_ERR_INTERNAL, "lane %zu has no similarities in its graph", i);
    c.fetch(io.checks, dst, 0, ggml_nbytes(io.checks));
}

// One step of at most n_batch tokens at the end of the cache: a decode step under the exit rule,
// else (a prompt, or no exits) at full depth.
void context::run(const int32_t * tokens, int n, int n_out, bool decoding) {
    const int L = m->hp.n_layer;
    const bool exiting = rule.force_layer >= 0 || rule.tau <= 1.0f;
    if (exiting && (decoding || rule.prefill)) {
        run_exiting(tokens, n, n_out);
        return;
    }
    built_graph & g = run_segment(make_segment(n, n_out, 0, L - 1, false, 0, -1), tokens, nullptr, n);
    if (n_out > 0) take_logits(g);
    kv->used[seq] += n;
    note_tokens(n, L - 1, -1, -1);
}

segment context::chained(segment s, const handoff & ho) const {
    if (s.one().first > 0) s.carry_in = ho.slot;
    s.carry_out = ho.use_carry && !s.head();
    return s;
}

const std::vector<float> * context::input_of(const segment & s, const handoff & ho) const {
    return s.one().first == 0 || s.carry_in >= 0 ? nullptr : &ho.h;
}

// After segment g: the hidden state after block b (a checked block, or g's last) is handed on.
void context::hand_on(const built_graph & g, int b, handoff & ho) const {
    const lane & s = g.seg.one();
    const lane_io & io = g.lanes[0];
    if (g.seg.carry_out) {
        ho.slot = s.n_checks() > 0 ? b - s.check_first + 1 : 0;
    } else {
        ho.h = read_tensor(*this, b == s.last && io.last_hidden ? io.last_hidden : io.hidden_out[b - s.check_first]);
    }
}

// Blocks per backbone graph when the exit rule does not say. On the CPU a graph is cheap and chunk
// 2 is best (README, River). Over RPC chunk 8 decoded 69.0 tok/s, 2 58.9, 13 65.2 (README, Devices
// and RPC). On a GPU every graph costs a launch and a wait for its similarities (about 60 us on an
// H200, whatever the model): a synthetic 8B Q8_0 whose tokens never exit lost 5.1% to the checks in
// graphs of 8 blocks, 3.1% in 16 and 1.7% in 32 (README, GPU; docs/results/gpu/overhead-8b.json).
static int default_chunk(ggml_backend_dev_t dev) {
    if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) return 2;
    return is_rpc(dev) ? 8 : 16;
}

// Blocks in the backbone segment that starts after `block`.
int context::chunk_after(int block) const {
    return rule.chunk > 0 ? rule.chunk : default_chunk(m->layer_dev[block + 1]);
}

// One step under the exit rule: the backbone until the exit block, then the river to the end.
void context::run_exiting(const int32_t * tokens, int n, int n_out) {
    const int L = m->hp.n_layer;
    if (n == 1 && rule.mode == exit_mode::predicted && rule.force_layer < 0) {
        run_predicted(tokens, n_out);
        return;
    }
    handoff ho;
    // A single token on one GPU keeps its hidden state there: no round trip through the host.
    ho.use_carry = carry && n == 1 && rule.carry != 0;
    int seen = -1;
    const int exit_at = run_backbone(tokens, n, n_out, ho, seen);
    if (exit_at < L - 1) {
        const segment seg = chained(make_segment(n, n_out, exit_at + 1, L - 1, true, 0, -1), ho);
        take_logits(run_segment(seg, nullptr, input_of(seg, ho), n));
    }
    if (n == 1) prev_exit = exit_at;
    kv->used[seq] += n;
    const bool guarded = n == 1 && rule.mode == exit_mode::guarded && rule.force_layer < 0;
    int forecast = -1;
    if (guarded) {   // the forecast the first segment ended at, and the first block at tau it showed
        forecast = forecasts[seq].next(rule.min_layer, L);
        forecasts[seq].observe(seen, L);
    }
    note_tokens(n, exit_at, forecast, guarded ? seen : -1);
}

// One decode step in one graph: the backbone to the forecast block, the river after it, the head.
// The similarities of the backbone blocks it checked come back with the logits and are the next
// forecast's evidence. A full-depth forecast is the full-depth graph (bit-identical logits).
void context::run_predicted(const int32_t * tokens, int n_out) {
    const int L = m->hp.n_layer, lo = rule.min_layer, hi = L - 2;
    exit_forecast & fc = forecasts[seq];
    const int f = fc.next(lo, L);
    segment seg = make_segment(1, n_out, 0, L - 1, false, lo, std::min(f, hi));
    if (f < L - 1) seg.lanes[0].river_from = f + 1;
    built_graph & g = run_segment(seg, tokens, nullptr, 1);
    const int nc = seg.one().n_checks();
    // The logits and the similarities computed in the graph come back in two queued copies into the
    // output buffer and one wait, as llama.cpp's logits alone.
    const bool in_graph = nc > 0 && !seg.host_checks;
    if (n_out > 0) take_logits(g, !in_graph);
    std::vector<float> sims;
    if (in_graph) {
        if ((size_t) nc > checks_room) fail(PR_ERR_INTERNAL, "similarities not reserved");
        queue_checks(*this, g, 0, checks_out);
        settle();
        sims.assign(checks_out, checks_out + nc);
    } else if (nc > 0) {
        sims = lane_similarities(*this, g, 0);
    }
    const int seen = nc > 0 ? first_at_tau(sims, lo, nc, rule.tau) : -1;
    const int obs = seen >= 0 || f < L - 1 ? seen : L - 1;   // -1: left at f before any block reached tau
    fc.observe(obs, L);
    prev_exit = f;
    kv->used[seq] += 1;
    note_tokens(1, f, f, obs);
}

// The backbone in segments; after each, the similarities of its blocks come back to the host and
// the first block at or above tau ends the backbone. Returns the exit block, with its hidden state
// in ho (L-1: no exit, the head ran and its logits are taken). The river then continues from that
// block's output, writing the same cache rows the backbone would have (and overwriting any a
// segment wrote past the exit block).
// The first segment ends at min_layer, later ones every `chunk` blocks (a prompt, n > 1: every
// block, on the minimum similarity over its tokens). Measured on SmolLM2 on the CPU: a graph launch
// costs far less than a backbone block computed past the exit, so short segments win. Starting
// from the previous token's exit block (predict) wasted more blocks than it saved launches on the
// CPU, and on a GPU each predicted end is another graph to capture (0.41x full depth against 0.63x
// without, SmolLM2 on an H200, device carry; docs/results/gpu/inprocess-smol.json): off by default.
int context::run_backbone(const int32_t * tokens, int n, int n_out, handoff & ho, int & seen) {
    const int L = m->hp.n_layer;
    if (rule.force_layer >= 0) {
        const int exit_at = std::min(rule.force_layer, L - 1);
        if (exit_at < L - 1) {
            const segment seg = chained(make_segment(n, n_out, 0, exit_at, false, 0, -1), ho);
            hand_on(run_segment(seg, tokens, nullptr, n), exit_at, ho);
        } else {
            take_logits(run_segment(make_segment(n, n_out, 0, L - 1, false, 0, -1), tokens, nullptr, n));
        }
        return exit_at;
    }
    const int lo = rule.min_layer, hi = L - 2;   // blocks that may end the backbone
    int start = 0;
    int end = std::min(lo, L - 1);
    // Prediction: the first segment runs to the previous token's exit block, so that a token
    // exiting there costs one backbone graph.
    if (rule.predict && n == 1 && prev_exit > end && prev_exit <= hi) end = prev_exit;
    // guarded: the first segment ends at the forecast block f, with the checks of min_layer..f (one
    // sync); a block at tau among them ends the backbone at f (no earlier than the checked path, and
    // no block is computed twice), none continues in the checked path's segments.
    int guard_end = -1;
    if (rule.mode == exit_mode::guarded && n == 1) end = guard_end = std::max(std::min(lo, L - 1), forecasts[seq].next(lo, L));
    seen = L - 1;
    for (;;) {
        const int cf = std::max(start, lo), cl = std::min(end, hi);
        const segment seg = chained(make_segment(n, n_out, start, end, false, cf, cl), ho);
        built_graph & g = run_segment(seg, tokens, input_of(seg, ho), n);
        const int nc = seg.one().n_checks();
        if (nc > 0) {
            const std::vector<float> c = lane_similarities(*this, g, 0);  // [nc][n]
            for (int k = 0; k < nc; k++) {
                float mn = c[(size_t) k * n];
                for (int i = 1; i < n; i++) mn = std::min(mn, c[(size_t) k * n + i]);
                if (mn >= rule.tau) {
                    seen = cf + k;
                    if (end == guard_end && end == L - 1) {   // forecast full depth: the head has run
                        take_logits(g);
                        return L - 1;
                    }
                    const int at = end == guard_end ? end : cf + k;
                    hand_on(g, at, ho);
                    return at;
                }
            }
        }
        if (end == L - 1) {
            take_logits(g);
            return L - 1;
        }
        hand_on(g, end, ho);
        start = end + 1;
        end = std::min(L - 1, end + (n == 1 ? chunk_after(end) : 1));
    }
}

void context::note_tokens(int n, int exit_block, int forecast, int seen) {
    exits.insert(exits.end(), n, exit_block);
    forecast_of.insert(forecast_of.end(), n, forecast);
    observed.insert(observed.end(), n, seen);
}

void context::begin_step(int rows, int tokens) {
    apply_shift();
    n_outputs = 0;
    // Rows for the step's logits and room for the similarities of one check per block for each of
    // `tokens` (a predicted step reads them with its logits).
    reserve_outputs(rows, (size_t) m->hp.n_layer * std::max(tokens, 1));
    exits.clear();
    forecast_of.clear();
    observed.clear();
    n_embd_rows = 0;
}

void check_tokens(const model & m, const int32_t * tokens, int n) {
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= m.hp.n_vocab) {
            fail(PR_ERR_INVALID_ARG, "token id %d at index %d is out of range [0, %d)", tokens[i], i, m.hp.n_vocab);
        }
    }
}

// The prompt rule, in one place: a call of more than one token is a prompt, and so is a single
// token flagged as one (a prompt's cache must not depend on how it was split into calls or
// n_batch chunks). A prompt runs at full depth (or under the prefill exit rule); a decode step,
// one token, applies token-level exits.
// What a call that appends n tokens to sequence s checks before any graph is built.
void context::check_append(int s, const int32_t * tokens, int n) const {
    if (n < 1) fail(PR_ERR_INVALID_ARG, "decode needs at least one token");
    if (!tokens) fail(PR_ERR_INVALID_ARG, "tokens is NULL");
    if (s < 0 || s >= kv->n_seq) fail(PR_ERR_INVALID_ARG, "sequence %d is not in [0, %d)", s, kv->n_seq);
    check_tokens(*m, tokens, n);
    if ((int64_t) kv->used[s] + n > params.n_ctx) {
        fail(PR_ERR_CONTEXT_FULL, "%d tokens do not fit: %d of n_ctx %d are in use", n, kv->used[s], params.n_ctx);
    }
}

void context::decode(int s, const int32_t * tokens, int n, bool logits_all, int prompt) {
    check_append(s, tokens, n);
    const bool decoding = n == 1 && !prompt;
    seq = s;
    verifying = prompt == PR_VERIFY;
    begin_step(logits_all ? n : 1, 1);   // similarities into the buffer: a decode step's, one token
    // A prompt starts a sequence's forecasts afresh: what it decodes next does not depend on what
    // the cache held before (as with the checked path).
    if (!decoding) forget_forecast(s);
    for (int done = 0; done < n;) {
        const int step = std::min(params.n_batch, n - done);
        const bool last = done + step == n;
        run(tokens + done, step, logits_all ? step : (last ? 1 : 0), decoding);
        done += step;
        if (!last) check_abort();
    }
    settle();   // no graph in flight when a call returns
}

void context::check_abort() {
    if (abort_fn && abort_fn(abort_user) != 0) {
        settle();
        fail(PR_ERR_INVALID_ARG, "aborted");
    }
}

// Embeddings are a prompt's: every token at full depth, whatever the exit rule (exits are a
// decode step's, and even prefill_exit would change what the model says a text means). Each
// token's hidden state after the final norm is kept; the head is not computed. The step uses
// llama.cpp's kernels for many tokens even in a batch-invariant context: an embedding is one step's
// result (nothing decodes from it), and so equals llama.cpp's bit for bit on the CPU, where one-token
// products were 0.4 away on SmolLM2 (tests/runtime/test_embeddings.py).
void context::embed(int s, const int32_t * tokens, int n) {
    check_append(s, tokens, n);
    const int L = m->hp.n_layer;
    const size_t E = m->hp.n_embd;
    seq = s;
    verifying = false;
    begin_step(0, 0);
    forget_forecast(s);   // a prompt's
    reserve_outputs(0, (size_t) n * E);   // every row's hidden state in the output buffer, as llama.cpp's embd
    embd = checks_out;
    for (int done = 0; done < n;) {
        const int step = std::min(params.n_batch, n - done);
        segment seg = make_segment(step, step, 0, L - 1, false, 0, -1);
        seg.embd = true;
        seg.shape.invariant = false;
        built_graph & g = run_segment(seg, tokens + done, nullptr, step);
        read(g.embd, embd + (size_t) done * E, 0, (size_t) step * E * sizeof(float));
        kv->used[seq] += step;
        n_embd_rows += step;
        note_tokens(step, L - 1, -1, -1);
        done += step;
        if (done < n) check_abort();
    }
    settle();
}

void context::truncate(int s, int n_keep) {
    if (s < 0 || s >= kv->n_seq) fail(PR_ERR_INVALID_ARG, "sequence %d is not in [0, %d)", s, kv->n_seq);
    if (n_keep < 0 || n_keep > kv->used[s]) fail(PR_ERR_INVALID_ARG, "cannot truncate to %d: the cache holds %d tokens", n_keep, kv->used[s]);
    kv->used[s] = n_keep;   // rows past n_keep are masked out and overwritten by later tokens
    forget_forecast(s);
    n_outputs = 0;
    n_embd_rows = 0;
}

} // namespace pr
