#include "tiled_gemm.h"
#include "tiled_kernels.h"
#include "weights.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

namespace pr {

namespace {

// The kernels' revision (tiled_gemm_revision): 2, Q4_K's GEMM rows two a register and 8 an unpacking
// (8-row steps 1.10x); 3, Q6_K's tiles kept within L1 (the 1.5B's head at 16 to 24 rows 1.2x on a Zen
// 4); 4, Q4_K to 32 rows (20- to 24-row steps 1.2x to 1.3x); 5, Q4_K to 64 (48 and 64 rows 1.16x).
constexpr int REVISION = 5;

// The most rows of a step the Q4_K kernel takes: 16 by scripts/q4k_vnni.cpp on a Zen 4 (its first
// tile: 1.10x ggml's 16-row AVX-512 body at 16), 64 since its 8-row tile (the 1.5B's verify steps of
// 20 and 24 rows 1.22x to 1.30x on that Zen 4, of 32 1.11x to 1.15x, of 48 and 64 1.14x to 1.19x;
// scripts/verify_steps_ms.py). A prompt step of at most 64 rows takes it too.
constexpr int64_t Q4_K_MAX_ROWS = 64;

struct kernel {
    ggml_type w, x;                  // the matrix's type; the rows' (what ggml's own product quantizes them to)
    int64_t min_rows, max_rows;      // the rows it takes (ggml's product of as many has the bits it keeps)
    int (*most_rows)();              // where set, the most rows on this CPU (max_rows at most)
    bool one_row_bits;               // those are a one-row product's bits: a batch-invariant step may take it
    bool repacked;                   // it reads the matrix as ggml's CPU_REPACK buffer holds it, not the file's layout
    bool (*cpu_ok)();
    ggml_custom_op_t candidates[2];  // the arithmetic of ggml's product as built one way or another: the
                                     // probe keeps the first whose bits are ggml's (null: none more)
    std::atomic<ggml_custom_op_t> compute{nullptr};   // what the probe kept
    std::atomic<bool> on{true};
    std::atomic<int64_t> runs{0};
};

// Q6_K: under 8 rows ggml computes each output as its own dot product; from 8 its tiled K-quant kernel
// (ggml-cpu/tiled/tiled.cpp, ggml_tiled_min_batch) sums each superblock exactly and adds them in order,
// with an fma or (built without contraction) a rounded product and a sum. Up to 24 rows tiles of one
// weight row by 16 columns beat it (AVX-512; scripts/tiled_rows.cpp: 1.08x to 2.7x on the 1.5B's
// matrices), at 32 not on all; tiles of 8 (AVX2) to 8 rows (q6_k_tiled_max_rows).
kernel kernels[] = {
    {GGML_TYPE_Q4_1, GGML_TYPE_Q8_1, 2, INT64_MAX, nullptr, true, false, tiled::q4_1_cpu_ok, {tiled::q4_1_compute, nullptr}},
    {GGML_TYPE_Q6_K, GGML_TYPE_Q8_K, 2, 7, nullptr, true, false, tiled::q6_k_cpu_ok, {tiled::q6_k_compute, nullptr}},
    {GGML_TYPE_Q6_K, GGML_TYPE_Q8_K, 8, 24, tiled::q6_k_tiled_max_rows, false, false, tiled::q6_k_cpu_ok,
     {tiled::q6_k_tiled_fused_compute, tiled::q6_k_tiled_split_compute}},
    // Q4_K as loaded (repacked 8x8): ggml's 4-row GEMM and one-row GEMV each read the weights again,
    // a group of 8 weight rows unpacked once for all rows beats them (AVX-512 VNNI; q4_k_gemm.cpp).
    {GGML_TYPE_Q4_K, GGML_TYPE_Q8_K, 2, Q4_K_MAX_ROWS, nullptr, false, true, tiled::q4_k_cpu_ok, {tiled::q4_k_compute, nullptr}},
};

// The kernel of a type that takes this many rows.
kernel * find(ggml_type type, int64_t rows) {
    for (kernel & k : kernels) {
        if (k.w == type && k.min_rows <= rows && rows <= k.max_rows) return &k;
    }
    return nullptr;
}

void run(ggml_tensor * dst, int ith, int nth, void * userdata) {
    kernel * k = (kernel *) userdata;
    if (ith == 0) k->runs++;
    k->compute.load()(dst, ith, nth, nullptr);
}

// A repacked matrix cannot be a source of the op: ggml's scheduler then asks the repacked buffer's
// type whether it computes the op, and it computes only its own products. So the op carries the
// matrix in its userdata: one binding per kernel and matrix, kept for the process (graphs are rebuilt
// every step; a binding is a pointer pair).
struct bound {
    kernel * k;
    ggml_tensor * w;
};

bound * bind(kernel & k, ggml_tensor * w) {
    static std::mutex mu;
    static std::map<std::pair<kernel *, ggml_tensor *>, std::unique_ptr<bound>> all;
    std::lock_guard<std::mutex> lock(mu);
    std::unique_ptr<bound> & b = all[{&k, w}];
    if (!b) b.reset(new bound{&k, w});
    return b.get();
}

void run_bound(ggml_tensor * dst, int ith, int nth, void * userdata) {
    bound * b = (bound *) userdata;
    if (ith == 0) b->k->runs++;
    b->k->compute.load()(dst, ith, nth, b->w);
}

// The tiled product of w and x (x quantized first by ggml's CPU copy), built whatever the probe said.
ggml_tensor * build(ggml_context * ctx, kernel & k, ggml_tensor * w, ggml_tensor * x) {
    ggml_tensor * xq = ggml_cpy(ctx, x, ggml_new_tensor_2d(ctx, k.x, x->ne[0], x->ne[1]));
    if (k.repacked) {
        return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], 1, 1, &xq, 1, run_bound, GGML_N_TASKS_MAX, bind(k, w));
    }
    ggml_tensor * args[2] = {w, xq};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], 1, 1, args, 2, run, GGML_N_TASKS_MAX, &k);
}

// Random weights (three blocks a row, 13 rows; 24 repacked, groups of 8) times the fewest rows the
// kernel takes, 7 and the most (at most 17: a partial group of columns; ggml's tiled kernel past its
// 16-row band; its repacked GEMM's 4- and 16-row bodies, and its GEMV), every output's bits compared
// with ggml's product on the CPU backend (the matrix in the buffer the kernel reads it from).
bool same_bits(ggml_backend_t cpu, kernel & k) {
    constexpr int S = 3;
    const int64_t K = 3 * ggml_blck_size(k.w), M = k.repacked ? 24 : 13;
    const int64_t sizes[S] = {k.min_rows, std::clamp<int64_t>(7, k.min_rows, k.max_rows), std::min<int64_t>(k.max_rows, 17)};
    ggml_backend_buffer_type_t repack = k.repacked ? cpu_repack_buft(ggml_backend_get_device(cpu)) : nullptr;
    if (k.repacked && !repack) return false;
    ggml_init_params wp = {ggml_tensor_overhead(), nullptr, true};
    ggml_context * wctx = ggml_init(wp);
    ggml_init_params ip = {ggml_tensor_overhead() * 16 + ggml_graph_overhead() * 2, nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    if (!ctx || !wctx) {
        if (ctx) ggml_free(ctx);
        if (wctx) ggml_free(wctx);
        return false;
    }
    ggml_tensor * w = ggml_new_tensor_2d(wctx, k.w, K, M);
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, repack ? repack : ggml_backend_get_default_buffer_type(cpu));
    ggml_tensor *x[S], *ref[S], *got[S];
    ggml_cgraph * gf = ggml_new_graph(ctx);
    for (int i = 0; i < S; i++) {
        x[i] = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, sizes[i]);
        ref[i] = ggml_mul_mat(ctx, w, x[i]);
        got[i] = build(ctx, k, w, x[i]);
        ggml_build_forward_expand(gf, ref[i]);
        ggml_build_forward_expand(gf, got[i]);
    }
    bool same = false;
    ggml_backend_buffer_t buf = wbuf ? ggml_backend_alloc_ctx_tensors(ctx, cpu) : nullptr;
    if (buf) {
        std::mt19937 rng(7);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> wf((size_t) (K * M));
        for (float & v : wf) v = nd(rng) * 0.1f;
        std::vector<uint8_t> wq(ggml_nbytes(w));
        ggml_quantize_chunk(k.w, wf.data(), wq.data(), 0, M, K, nullptr);
        ggml_backend_tensor_set(w, wq.data(), 0, wq.size());   // whole: a repacked buffer takes it so
        for (int i = 0; i < S; i++) {
            std::vector<float> xf((size_t) (K * sizes[i]));
            for (float & v : xf) v = nd(rng);
            ggml_backend_tensor_set(x[i], xf.data(), 0, xf.size() * sizeof(float));
        }
        if (ggml_backend_graph_compute(cpu, gf) == GGML_STATUS_SUCCESS) {
            same = true;
            for (int i = 0; i < S; i++) {
                std::vector<float> a((size_t) (M * sizes[i])), b(a.size());
                ggml_backend_tensor_get(ref[i], a.data(), 0, a.size() * sizeof(float));
                ggml_backend_tensor_get(got[i], b.data(), 0, b.size() * sizeof(float));
                same = same && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
            }
        }
        ggml_backend_buffer_free(buf);
    }
    if (wbuf) ggml_backend_buffer_free(wbuf);
    ggml_free(ctx);
    ggml_free(wctx);
    return same;
}

// The first candidate with ggml's bits here, or none.
void probe(ggml_backend_t cpu, kernel & k) {
    if (!k.cpu_ok()) return;
    if (k.most_rows) k.max_rows = std::min<int64_t>(k.max_rows, k.most_rows());
    if (k.max_rows < k.min_rows) return;
    for (ggml_custom_op_t c : k.candidates) {
        if (!c) break;
        k.compute = c;
        if (same_bits(cpu, k)) return;
    }
    k.compute = nullptr;
}

// A buffer that holds w in the file's layout on the host: not one of the CPU's extra buffer types
// (repacked, AMX), whose layouts are their own.
bool plain_host(const ggml_tensor * w) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu || !w->buffer || !ggml_backend_buffer_is_host(w->buffer)) return false;
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(w->buffer);
    for (ggml_backend_buffer_type_t * b = cpu_extra_bufts(cpu); b && *b; ++b) {
        if (*b == buft) return false;
    }
    return true;
}

// w in ggml's CPU_REPACK buffer, repacked (its traits set: a matrix of 8k rows); on x86 with AVX2
// a Q4_K matrix is repacked 8x8 there, the layout the Q4_K kernel reads.
bool repacked_host(const ggml_tensor * w) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!cpu || !w->buffer || !w->extra || w->ne[1] % 8 != 0) return false;
    ggml_backend_buffer_type_t repack = cpu_repack_buft(cpu);
    return repack && ggml_backend_buffer_get_type(w->buffer) == repack;
}

// Whether a GPU is registered: its backend takes a CPU matrix's product of 32 rows or more (the
// scheduler's op offload), and a custom op would keep it on the CPU.
bool gpu_registered() {
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        const enum ggml_backend_dev_type t = ggml_backend_dev_type(ggml_backend_dev_get(i));
        if (t == GGML_BACKEND_DEVICE_TYPE_GPU || t == GGML_BACKEND_DEVICE_TYPE_IGPU) return true;
    }
    return false;
}

}  // namespace

void tiled_gemm_probe(ggml_backend_t cpu) {
    static std::once_flag once;
    std::call_once(once, [cpu] {
        for (kernel & k : kernels) probe(cpu, k);
    });
}

int tiled_gemm_revision() { return REVISION; }

int64_t tiled_gemm_runs(ggml_type type) {
    int64_t n = 0;
    for (const kernel & k : kernels) {
        if (k.w == type) n += k.runs;
    }
    return n;
}

int tiled_gemm_switch(ggml_type type, int on) {
    int used = 0;
    for (kernel & k : kernels) {
        if (k.w != type) continue;
        if (on >= 0) k.on = on != 0;
        used += k.on && k.compute != nullptr;
    }
    return used;
}

ggml_tensor * tiled_gemm(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, bool batch_invariant) {
    static const bool offloads = gpu_registered();
    const int64_t rows = x->ne[1];
    kernel * k = find(w->type, rows);
    if (!k || !k->on || !k->compute || (batch_invariant && !k->one_row_bits) || (offloads && rows >= 32)) return nullptr;
    if (ggml_n_dims(w) != 2 || w->ne[0] % ggml_blck_size(w->type) != 0 || !ggml_is_contiguous(w)) return nullptr;
    if (x->type != GGML_TYPE_F32 || x->ne[2] != 1 || x->ne[3] != 1 || x->ne[0] != w->ne[0] || !ggml_is_contiguous(x)) {
        return nullptr;
    }
    if (k->repacked ? !repacked_host(w) : !plain_host(w)) return nullptr;
    return build(ctx, *k, w, x);
}

}  // namespace pr
