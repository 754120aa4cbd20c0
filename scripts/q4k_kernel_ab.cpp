// Two builds of native/q4_k_gemm.cpp's kernel side by side: bits and time on random repacked blocks
// (random bytes: both kernels read the same ones; the bits against ggml's own product are the
// library's probe's and tests/runtime/test_tiled_gemm.py's job). One thread, the two alternated,
// median of PASSES; exits 1 where one output differs.
//
//   SP=$(python -c "import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))")
//   git show REV:native/q4_k_gemm.cpp > /tmp/q4k_old.cpp
//   g++ -O3 -std=c++17 -I$SP/include -Inative -Dq4_k_compute=q4_k_compute_old -Dq4_k_cpu_ok=q4_k_cpu_ok_old
//       -c /tmp/q4k_old.cpp -o /tmp/old.o                                                (one line)
//   g++ -O3 -std=c++17 -I$SP/include -Inative -c native/q4_k_gemm.cpp -o /tmp/new.o
//   g++ -O3 -std=c++17 -I$SP/include scripts/q4k_kernel_ab.cpp /tmp/old.o /tmp/new.o -o /tmp/q4k_ab
//   /tmp/q4k_ab K N [PASSES]       (K x N: the matrix, e.g. 1536 17920, the 1.5B's gate/up joined)
#include <ggml.h>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include <algorithm>
namespace pr::tiled { void q4_k_compute(ggml_tensor *, int, int, void *); void q4_k_compute_old(ggml_tensor *, int, int, void *); }
struct bq8k { float d; int8_t qs[256]; int16_t bsums[16]; };
int main(int argc, char ** argv) {
    if (argc < 3 || atoll(argv[1]) % 256 || atoll(argv[2]) % 8) { fprintf(stderr, "usage: %s K N [PASSES] (K a multiple of 256, N of 8)\n", argv[0]); return 2; }
    const int64_t K = atoll(argv[1]), N = atoll(argv[2]);
    const int reps = argc > 3 ? atoi(argv[3]) : 21;
    std::mt19937 rng(42);
    const int nb = K / 256;
    std::vector<uint8_t> W((N / 8) * nb * 1152);
    for (size_t i = 0; i < W.size(); i++) W[i] = rng();
    // d, dmin: sane halves
    for (int64_t g = 0; g < (N / 8) * nb; g++) {
        uint16_t * h = (uint16_t *) (W.data() + g * 1152);
        for (int i = 0; i < 16; i++) h[i] = 0x2000 + (rng() & 0x0fff);
    }
    bool all_eq = true;
    for (int R : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16}) {
        std::vector<bq8k> Y(R * nb);
        for (auto & y : Y) {
            y.d = std::ldexp((float) (rng() % 1000 + 1), -16);
            for (int i = 0; i < 256; i++) y.qs[i] = (int8_t) (rng() % 255 - 127);
            for (int i = 0; i < 16; i++) { int s = 0; for (int j = 0; j < 16; j++) s += y.qs[16 * i + j]; y.bsums[i] = s; }
        }
        ggml_tensor w{}, x{}, d0{}, d1{};
        w.ne[0] = K; w.ne[1] = N; w.data = W.data();
        x.ne[0] = K; x.ne[1] = R; x.data = Y.data();
        std::vector<float> o0(N * R), o1(N * R);
        d0.src[0] = &x; d1.src[0] = &x; d0.nb[1] = d1.nb[1] = N * sizeof(float);
        d0.data = o0.data(); d1.data = o1.data();
        std::vector<double> t0, t1;
        for (int r = 0; r < reps; r++) {
            for (int k = 0; k < 2; k++) {
                const bool old = (k == 0) == (r % 2 == 0);
                auto a = std::chrono::steady_clock::now();
                if (old) pr::tiled::q4_k_compute_old(&d0, 0, 1, &w); else pr::tiled::q4_k_compute(&d1, 0, 1, &w);
                auto b = std::chrono::steady_clock::now();
                (old ? t0 : t1).push_back(std::chrono::duration<double, std::milli>(b - a).count());
            }
        }
        std::sort(t0.begin(), t0.end()); std::sort(t1.begin(), t1.end());
        const bool eq = memcmp(o0.data(), o1.data(), o0.size() * 4) == 0;
        all_eq &= eq;
        printf("R=%2d old %.3f ms new %.3f ms  x%.3f  bits %s\n", R, t0[reps / 2], t1[reps / 2], t0[reps / 2] / t1[reps / 2], eq ? "equal" : "DIFFER");
    }
    return all_eq ? 0 : 1;
}
