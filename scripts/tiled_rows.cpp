// native/q4_1_gemm.cpp's and native/q6_k_gemm.cpp's tiled products against ggml's own (its per-output
// dot products under 8 rows for Q6_K, its tiled K-quant kernel from 8) by rows: ggml's ms and the
// kernel's (median of 7 passes, interleaved), their ratio, which of ggml's builds the Q6_K kernel of 8
// rows or more matched (fused: its last product and sum one fma, as GCC builds ggml; split: not),
// and DIFF where no output's bits agree.
//
//   SP=$(python -c "import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))")
//   g++ -O3 -std=c++17 scripts/tiled_rows.cpp -I$SP/include -L$SP/llama_cpp/lib -lggml -lggml-base
//       -lggml-cpu -Wl,-rpath,$SP/llama_cpp/lib -o /tmp/tiled_rows      (one line)
//   /tmp/tiled_rows q4_1 576 1536 2     # TYPE K M THREADS (SmolLM2's gate/up: 576 x 1536)
//   /tmp/tiled_rows q6_K 8960 1536 2    # the 1.5B's FFN down; 1536 151936: its output head
//   (-DPR_Q6_K_AVX2_ONLY=1: the Q6_K kernel's AVX2 body, as on a CPU without AVX-512)
#include "../native/q4_1_gemm.cpp"
#include "../native/q6_k_gemm.cpp"

#include <ggml-cpu.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

int main(int argc, char ** argv) {
    const std::string type = argc > 1 ? argv[1] : "q4_1";
    const bool q6 = type == "q6_K";
    const int K = argc > 2 ? atoi(argv[2]) : 576, M = argc > 3 ? atoi(argv[3]) : 1536;
    const int n_threads = argc > 4 ? atoi(argv[4]) : 2;
    const ggml_type wt = q6 ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_1, xt = q6 ? GGML_TYPE_Q8_K : GGML_TYPE_Q8_1;
    if ((!q6 && type != "q4_1") || K % ggml_blck_size(wt) != 0) {
        fprintf(stderr, "usage: tiled_rows q4_1|q6_K K M [THREADS], K a multiple of the type's block\n");
        return 2;
    }
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> wf((size_t) K * M);
    for (float & v : wf) v = nd(rng) * 0.05f;
    ggml_init_params ip = {(size_t) 2048 << 20, nullptr, false};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * w = ggml_new_tensor_2d(ctx, wt, K, M);
    ggml_quantize_chunk(wt, wf.data(), w->data, 0, M, K, nullptr);
    ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);
    ggml_threadpool * tp = ggml_threadpool_new(&tpp);
    printf("%s K=%d M=%d threads=%d: rows, ggml ms / kernel ms (ggml's time over the kernel's)\n", type.c_str(), K, M, n_threads);
    for (int N : q6 ? std::vector<int>{2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 24, 32} : std::vector<int>{2, 3, 4, 5, 8, 16, 32}) {
        ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, N);
        for (int i = 0; i < K * N; i++) ((float *) x->data)[i] = nd(rng);
        ggml_tensor * ref = ggml_mul_mat(ctx, w, x);
        ggml_tensor * xq = ggml_cpy(ctx, x, ggml_new_tensor_2d(ctx, xt, K, N));
        ggml_tensor * args[2] = {w, xq};
        ggml_cgraph * g1 = ggml_new_graph(ctx);
        ggml_build_forward_expand(g1, ref);
        ggml_cplan p1 = ggml_graph_plan(g1, n_threads, tp);
        std::vector<uint8_t> w1(p1.work_size + 64), w2;
        p1.work_data = w1.data();
        ggml_graph_compute(g1, &p1);
        // the kernel's arithmetic for these rows: Q6_K's from 8 rows is ggml's tiled kernel's, fused or
        // split as its compiler built it: the first with ggml's bits
        std::vector<std::pair<const char *, ggml_custom_op_t>> ops;
        if (!q6) ops = {{"", pr::tiled::q4_1_compute}};
        else if (N < 8) ops = {{"", pr::tiled::q6_k_compute}};
        else ops = {{" fused", pr::tiled::q6_k_tiled_fused_compute}, {" split", pr::tiled::q6_k_tiled_split_compute}};
        ggml_cgraph * g2 = nullptr;
        ggml_cplan p2 = {};
        bool same = false;
        const char * kind = "";
        for (auto [name, op] : ops) {
            ggml_tensor * got = ggml_custom_4d(ctx, GGML_TYPE_F32, M, N, 1, 1, args, 2, op, GGML_N_TASKS_MAX, nullptr);
            g2 = ggml_new_graph(ctx);
            ggml_build_forward_expand(g2, got);
            p2 = ggml_graph_plan(g2, n_threads, tp);
            w2.resize(p2.work_size + 64);
            p2.work_data = w2.data();
            ggml_graph_compute(g2, &p2);
            kind = name;
            same = memcmp(ref->data, got->data, sizeof(float) * M * N) == 0;
            if (same) break;
        }
        // about 50 ms of each a pass
        auto a0 = std::chrono::steady_clock::now();
        ggml_graph_compute(g1, &p1);
        const double once = std::chrono::duration<double>(std::chrono::steady_clock::now() - a0).count();
        const int reps = std::max(1, (int) (0.05 / std::max(once, 1e-6)));
        std::vector<double> t1, t2;
        for (int pass = 0; pass < 7; pass++) {
            auto a = std::chrono::steady_clock::now();
            for (int i = 0; i < reps; i++) ggml_graph_compute(g1, &p1);
            auto b = std::chrono::steady_clock::now();
            for (int i = 0; i < reps; i++) ggml_graph_compute(g2, &p2);
            auto c = std::chrono::steady_clock::now();
            t1.push_back(std::chrono::duration<double>(b - a).count() * 1e3 / reps);
            t2.push_back(std::chrono::duration<double>(c - b).count() * 1e3 / reps);
        }
        std::sort(t1.begin(), t1.end());
        std::sort(t2.begin(), t2.end());
        printf("  %2d  %.3f / %.3f  (%.2fx)%s%s\n", N, t1[3], t2[3], t1[3] / t2[3], kind, same ? "" : " DIFF");
        fflush(stdout);
    }
    ggml_threadpool_free(tp);
    ggml_free(ctx);
    return 0;
}
