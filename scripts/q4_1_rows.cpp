// native/q4_1_gemm.cpp's tiled Q4_1 product against ggml's own (its per-output dot products) for
// 2 to 32 activation rows: the ratio of ggml's time to the kernel's (median of 7 passes of 100,
// interleaved), and whether every output's bits agree (DIFF where not).
//
//   SP=$(python -c "import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))")
//   g++ -O3 -std=c++17 scripts/q4_1_rows.cpp -I$SP/include -L$SP/llama_cpp/lib -lggml -lggml-base
//       -lggml-cpu -Wl,-rpath,$SP/llama_cpp/lib -o /tmp/q4_1_rows      (one line)
//   /tmp/q4_1_rows 576 1536 2     # K M THREADS (SmolLM2's gate/up: 576 x 1536)
#include "../native/q4_1_gemm.cpp"

#include <ggml-cpu.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char ** argv) {
    const int K = argc > 1 ? atoi(argv[1]) : 576, M = argc > 2 ? atoi(argv[2]) : 1536;
    const int n_threads = argc > 3 ? atoi(argv[3]) : 2;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> wf((size_t) K * M);
    for (float & v : wf) v = nd(rng) * 0.05f;
    ggml_init_params ip = {512u << 20, nullptr, false};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_1, K, M);
    ggml_quantize_chunk(GGML_TYPE_Q4_1, wf.data(), w->data, 0, M, K, nullptr);
    ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);
    ggml_threadpool * tp = ggml_threadpool_new(&tpp);
    printf("K=%d M=%d threads=%d, ggml's time over the kernel's:", K, M, n_threads);
    for (int N : {2, 3, 4, 5, 8, 16, 32}) {
        ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, N);
        for (int i = 0; i < K * N; i++) ((float *) x->data)[i] = nd(rng);
        ggml_tensor * ref = ggml_mul_mat(ctx, w, x);
        ggml_tensor * got = pr::build(ctx, w, x);
        ggml_cgraph * g1 = ggml_new_graph(ctx);
        ggml_cgraph * g2 = ggml_new_graph(ctx);
        ggml_build_forward_expand(g1, ref);
        ggml_build_forward_expand(g2, got);
        ggml_cplan p1 = ggml_graph_plan(g1, n_threads, tp), p2 = ggml_graph_plan(g2, n_threads, tp);
        std::vector<uint8_t> w1(p1.work_size + 64), w2(p2.work_size + 64);
        p1.work_data = w1.data();
        p2.work_data = w2.data();
        ggml_graph_compute(g1, &p1);
        ggml_graph_compute(g2, &p2);
        const bool same = memcmp(ref->data, got->data, sizeof(float) * M * N) == 0;
        std::vector<double> t1, t2;
        for (int pass = 0; pass < 7; pass++) {
            auto a = std::chrono::steady_clock::now();
            for (int i = 0; i < 100; i++) ggml_graph_compute(g1, &p1);
            auto b = std::chrono::steady_clock::now();
            for (int i = 0; i < 100; i++) ggml_graph_compute(g2, &p2);
            auto c = std::chrono::steady_clock::now();
            t1.push_back(std::chrono::duration<double>(b - a).count());
            t2.push_back(std::chrono::duration<double>(c - b).count());
        }
        std::sort(t1.begin(), t1.end());
        std::sort(t2.begin(), t2.end());
        printf("  N=%d %.2fx%s", N, t1[3] / t2[3], same ? "" : " DIFF");
    }
    printf("\n");
    ggml_threadpool_free(tp);
    ggml_free(ctx);
    return 0;
}
