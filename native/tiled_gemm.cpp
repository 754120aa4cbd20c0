#include "tiled_gemm.h"
#include "tiled_kernels.h"
#include "weights.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

namespace pr {

namespace {

struct kernel {
    ggml_type w, x;      // the matrix's type; the rows' (what ggml's own product quantizes them to)
    int64_t most_rows;   // the most rows ggml's product computes output by output (0: any)
    bool (*cpu_ok)();
    ggml_custom_op_t compute;
    std::atomic<bool> probe_ok{false}, on{true};
    std::atomic<int64_t> runs{0};
};

// Q6_K: from 8 rows ggml's tiled K-quant kernel (ggml-cpu/tiled/tiled.cpp, ggml_tiled_min_batch) sums
// in another order.
kernel kernels[] = {
    {GGML_TYPE_Q4_1, GGML_TYPE_Q8_1, 0, tiled::q4_1_cpu_ok, tiled::q4_1_compute},
    {GGML_TYPE_Q6_K, GGML_TYPE_Q8_K, 7, tiled::q6_k_cpu_ok, tiled::q6_k_compute},
};

kernel * find(ggml_type type) {
    for (kernel & k : kernels) {
        if (k.w == type) return &k;
    }
    return nullptr;
}

void run(ggml_tensor * dst, int ith, int nth, void * userdata) {
    kernel * k = (kernel *) userdata;
    if (ith == 0) k->runs++;
    k->compute(dst, ith, nth, nullptr);
}

// The tiled product of w and x (x quantized first by ggml's CPU copy), built whatever the probe said.
ggml_tensor * build(ggml_context * ctx, kernel & k, ggml_tensor * w, ggml_tensor * x) {
    ggml_tensor * xq = ggml_cpy(ctx, x, ggml_new_tensor_2d(ctx, k.x, x->ne[0], x->ne[1]));
    ggml_tensor * args[2] = {w, xq};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], 1, 1, args, 2, run, GGML_N_TASKS_MAX, &k);
}

// Random weights (three blocks a row, 13 rows) times the most rows the kernel takes (up to 11: a
// partial group of columns) and two rows, both products on the CPU backend, every output's bits
// compared with ggml's.
bool probe(ggml_backend_t cpu, kernel & k) {
    if (!k.cpu_ok()) return false;
    const int64_t K = 3 * ggml_blck_size(k.w), M = 13;
    const int64_t sizes[2] = {k.most_rows ? k.most_rows : 11, 2};
    ggml_init_params ip = {ggml_tensor_overhead() * 16 + ggml_graph_overhead() * 2, nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    if (!ctx) return false;
    ggml_tensor * w = ggml_new_tensor_2d(ctx, k.w, K, M);
    ggml_tensor *x[2], *ref[2], *got[2];
    ggml_cgraph * gf = ggml_new_graph(ctx);
    for (int i = 0; i < 2; i++) {
        x[i] = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, sizes[i]);
        ref[i] = ggml_mul_mat(ctx, w, x[i]);
        got[i] = build(ctx, k, w, x[i]);
        ggml_build_forward_expand(gf, ref[i]);
        ggml_build_forward_expand(gf, got[i]);
    }
    bool same = false;
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cpu);
    if (buf) {
        std::mt19937 rng(7);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> wf((size_t) (K * M));
        for (float & v : wf) v = nd(rng) * 0.1f;
        std::vector<uint8_t> wq(ggml_nbytes(w));
        ggml_quantize_chunk(k.w, wf.data(), wq.data(), 0, M, K, nullptr);
        ggml_backend_tensor_set(w, wq.data(), 0, wq.size());
        for (int i = 0; i < 2; i++) {
            std::vector<float> xf((size_t) (K * sizes[i]));
            for (float & v : xf) v = nd(rng);
            ggml_backend_tensor_set(x[i], xf.data(), 0, xf.size() * sizeof(float));
        }
        if (ggml_backend_graph_compute(cpu, gf) == GGML_STATUS_SUCCESS) {
            same = true;
            for (int i = 0; i < 2; i++) {
                std::vector<float> a((size_t) (M * sizes[i])), b(a.size());
                ggml_backend_tensor_get(ref[i], a.data(), 0, a.size() * sizeof(float));
                ggml_backend_tensor_get(got[i], b.data(), 0, b.size() * sizeof(float));
                same = same && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
            }
        }
        ggml_backend_buffer_free(buf);
    }
    ggml_free(ctx);
    return same;
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
        for (kernel & k : kernels) k.probe_ok = probe(cpu, k);
    });
}

int64_t tiled_gemm_runs(ggml_type type) {
    kernel * k = find(type);
    return k ? k->runs.load() : 0;
}

int tiled_gemm_switch(ggml_type type, int on) {
    kernel * k = find(type);
    if (!k) return 0;
    if (on >= 0) k->on = on != 0;
    return k->on && k->probe_ok;
}

ggml_tensor * tiled_gemm(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x) {
    static const bool offloads = gpu_registered();
    kernel * k = find(w->type);
    if (!k || !k->on || !k->probe_ok) return nullptr;
    const int64_t rows = x->ne[1];
    if (rows < 2 || (k->most_rows && rows > k->most_rows) || (offloads && rows >= 32)) return nullptr;
    if (ggml_n_dims(w) != 2 || w->ne[0] % ggml_blck_size(w->type) != 0 || !ggml_is_contiguous(w)) return nullptr;
    if (x->type != GGML_TYPE_F32 || x->ne[2] != 1 || x->ne[3] != 1 || x->ne[0] != w->ne[0] || !ggml_is_contiguous(x)) {
        return nullptr;
    }
    if (!plain_host(w)) return nullptr;
    return build(ctx, *k, w, x);
}

}  // namespace pr
