// One ggml product W x X of a random matrix quantized to TYPE, W either in ggml's CPU_REPACK buffer
// (the layout llama.cpp and pyriver load by default) or in a plain CPU buffer (the file's layout, where
// ggml's tiled kernel takes K-quant products of 8 or more columns), timed over X's columns k
// (median of 15). Why pyriver reads prompts in the second layout: docs/lossless-tiled.md, "Prompts on
// ggml's tiled kernel".
//
//   SP=$(python -c "import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))")
//   g++ -O2 -std=c++17 scripts/layout_matmul.cpp -I$SP/include -L$SP/llama_cpp/lib -lggml -lggml-base -lggml-cpu
//       -Wl,-rpath,$SP/llama_cpp/lib -o /tmp/layout_matmul      (one line)
//   /tmp/layout_matmul 12 1 1536 35840 512 2    # TYPE (12 = Q4_K) REPACK K N KMAX THREADS
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

static ggml_backend_buffer_type_t repack_buft(ggml_backend_dev_t cpu) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    auto get = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * b = get ? get(cpu) : nullptr; b && *b; ++b) {
        if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
    }
    return nullptr;
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s TYPE REPACK K N KMAX [THREADS]\n", argv[0]);
        return 2;
    }
    const ggml_type type = (ggml_type) atoi(argv[1]);
    const bool repack = atoi(argv[2]) != 0;
    const int64_t K = atoll(argv[3]), N = atoll(argv[4]);
    const int kmax = atoi(argv[5]), threads = argc > 6 ? atoi(argv[6]) : 2;
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, threads);
    ggml_backend_buffer_type_t bt = repack ? repack_buft(ggml_backend_get_device(be)) : ggml_backend_cpu_buffer_type();
    if (!bt) {
        fprintf(stderr, "this CPU backend has no CPU_REPACK buffer\n");
        return 1;
    }
    ggml_init_params wp = {ggml_tensor_overhead() * 2, nullptr, true};
    ggml_context * wctx = ggml_init(wp);
    ggml_tensor * w = ggml_new_tensor_2d(wctx, type, K, N);
    ggml_backend_buffer_t wb = ggml_backend_alloc_ctx_tensors_from_buft(wctx, bt);
    {   // asked as llama.cpp asks: does the CPU compute a product with w in this buffer (else ggml crashes)
        ggml_init_params pp = {ggml_tensor_overhead() * 2, nullptr, true};
        ggml_context * pctx = ggml_init(pp);
        ggml_tensor * op = ggml_mul_mat(pctx, w, ggml_new_tensor_2d(pctx, GGML_TYPE_F32, K, 512));
        const bool ok = ggml_backend_dev_supports_op(ggml_backend_get_device(be), op);
        ggml_free(pctx);
        if (!ok) {
            fprintf(stderr, "this CPU backend does not compute %s products in that buffer\n", ggml_type_name(type));
            return 1;
        }
    }
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> f(K * N);
    for (float & v : f) v = nd(rng);
    std::vector<uint8_t> q(ggml_row_size(type, K) * N);
    ggml_quantize_chunk(type, f.data(), q.data(), 0, N, K, nullptr);
    ggml_backend_tensor_set(w, q.data(), 0, q.size());   // a repacked buffer takes it whole
    double one = 0;
    for (int k = 1; k <= kmax; k = k < 8 ? k + 1 : 2 * k) {
        ggml_init_params ip = {ggml_tensor_overhead() * 4 + ggml_graph_overhead(), nullptr, true};
        ggml_context * ctx = ggml_init(ip);
        ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, k);
        ggml_cgraph * g = ggml_new_graph(ctx);
        ggml_build_forward_expand(g, ggml_mul_mat(ctx, w, x));
        ggml_backend_buffer_t xb = ggml_backend_alloc_ctx_tensors(ctx, be);
        std::vector<float> xv(K * k);
        for (float & v : xv) v = nd(rng);
        ggml_backend_tensor_set(x, xv.data(), 0, xv.size() * sizeof(float));
        std::vector<double> ms;
        for (int r = 0; r < 15; r++) {
            const auto t0 = std::chrono::steady_clock::now();
            ggml_backend_graph_compute(be, g);
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        if (k == 1) one = med;
        printf("%s %s k=%3d %9.3f ms %7.2f one-column products\n", ggml_type_name(type), repack ? "repacked" : "plain   ",
               k, med, med / one);
        ggml_backend_buffer_free(xb);
        ggml_free(ctx);
    }
    ggml_backend_buffer_free(wb);
    ggml_free(wctx);
    ggml_backend_free(be);
    return 0;
}
