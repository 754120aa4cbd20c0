// One pass over a Q4_K matrix in the file's layout for R activation rows (q8_K), AVX2: the
// weights unpacked once a block and dotted with every row, ggml's own per-row arithmetic (the
// results equal ggml's vec_dot bit for bit). Tried as a kernel for verify steps of 2 to 15 rows,
// where ggml runs a 4-row GEMM per 4 rows and its one-row kernel for the rest; on the 2-core Zen 3
// (AVX2 only) one row costs about 0.85 ms of a 1536 x 35840 product in either, so the products of
// few rows are bound by arithmetic, not by reading the weights, and this pass is no faster than
// ggml's (docs/lossless-zen3.md, "A second CPU"). Not built into pyriver.
//
//   SP=$(python -c "import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))")
//   g++ -O3 -march=native -std=c++17 scripts/q4k_rows.cpp -I$SP/include -L$SP/llama_cpp/lib -lggml -lggml-base
//       -lggml-cpu -Wl,-rpath,$SP/llama_cpp/lib -lpthread -o /tmp/q4k_rows      (one line)
//   /tmp/q4k_rows 1536 35840 2     # K N THREADS; compare: /tmp/layout_matmul 12 1 1536 35840 16 2
#include "ggml.h"
#include "ggml-cpu.h"
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

struct bq4k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct bq8k { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(bq4k) == 144, "q4_K");
static_assert(sizeof(bq8k) == 292, "q8_K");

static inline float hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// rows [o0, o1) of W (N x K), R activation rows of Y (R x K as q8_K), out s[t*N + o]
static void q4k_rows(int K, const bq4k * W, int o0, int o1, const bq8k * Y, int R, float * s, int N) {
    const int nb = K / 256;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    static const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    __m256 acc[16];
    __m128 accm[16];
    for (int o = o0; o < o1; ++o) {
        for (int t = 0; t < R; ++t) { acc[t] = _mm256_setzero_ps(); accm[t] = _mm_setzero_ps(); }
        const bq4k * x = W + (size_t) o * nb;
        for (int b = 0; b < nb; ++b) {
            uint32_t utmp[4];
            memcpy(utmp, x[b].scales, 12);
            utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
            const uint32_t uaux = utmp[1] & kmask1;
            utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
            utmp[2] = uaux;
            utmp[0] &= kmask1;
            const __m256i ms = _mm256_cvtepu8_epi16(_mm_set_epi32(utmp[3], utmp[2], utmp[1], utmp[0]));
            const __m128i mins = _mm256_extracti128_si256(ms, 1);
            const uint8_t * sc8 = (const uint8_t *) utmp;
            __m256i sc[8], q[8];
            for (int i = 0; i < 8; ++i) sc[i] = _mm256_set1_epi16(sc8[i]);
            for (int j = 0; j < 4; ++j) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *) (x[b].qs + 32 * j));
                q[2 * j] = _mm256_and_si256(bits, m4);
                q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            }
            const float d = _cvtsh_ss(x[b].d), dmin = _cvtsh_ss(x[b].dmin);
            for (int t = 0; t < R; ++t) {
                const bq8k * y = Y + (size_t) t * nb + b;
                __m256i sumi = _mm256_setzero_si256();
                for (int i = 0; i < 8; ++i) {
                    const __m256i q8 = _mm256_loadu_si256((const __m256i *) (y->qs + 32 * i));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc[i], _mm256_maddubs_epi16(q[i], q8)));
                }
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d * y->d), _mm256_cvtepi32_ps(sumi), acc[t]);
                const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y->bsums);
                const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
                accm[t] = _mm_fmadd_ps(_mm_set1_ps(-dmin * y->d), _mm_cvtepi32_ps(_mm_madd_epi16(mins, q8s)), accm[t]);
            }
        }
        for (int t = 0; t < R; ++t) {
            __m128 m = accm[t];
            m = _mm_add_ps(m, _mm_movehl_ps(m, m));
            m = _mm_add_ss(m, _mm_movehdup_ps(m));
            s[(size_t) t * N + o] = hsum8(acc[t]) + _mm_cvtss_f32(m);
        }
    }
}

int main(int argc, char ** argv) {
    const int K = argc > 1 ? atoi(argv[1]) : 1536, N = argc > 2 ? atoi(argv[2]) : 35840;
    const int nth = argc > 3 ? atoi(argv[3]) : 2;
    ggml_cpu_init();
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> wf((size_t) K * N);
    for (auto & v : wf) v = nd(rng) * 0.02f;
    std::vector<bq4k> W((size_t) N * K / 256);
    ggml_quantize_chunk(GGML_TYPE_Q4_K, wf.data(), W.data(), 0, N, K, nullptr);
    const auto * q8tr = ggml_get_type_traits_cpu(GGML_TYPE_Q8_K);
    const auto * q4tr = ggml_get_type_traits_cpu(GGML_TYPE_Q4_K);
    for (int R : {1, 2, 3, 4, 6, 8, 12, 15}) {
        std::vector<float> xf((size_t) R * K);
        for (auto & v : xf) v = nd(rng);
        std::vector<bq8k> Y((size_t) R * K / 256);
        for (int t = 0; t < R; ++t) q8tr->from_float(xf.data() + (size_t) t * K, Y.data() + (size_t) t * K / 256, K);
        std::vector<float> s((size_t) R * N), ref((size_t) R * N);
        for (int t = 0; t < R; ++t)
            for (int o = 0; o < N; ++o)
                q4tr->vec_dot(K, &ref[(size_t) t * N + o], 0, W.data() + (size_t) o * K / 256, 0, Y.data() + (size_t) t * K / 256, 0, 1);
        std::vector<double> ts;
        for (int rep = 0; rep < 15; ++rep) {
            auto t0 = std::chrono::steady_clock::now();
            std::vector<std::thread> th;
            for (int i = 0; i < nth; ++i) {
                const int o0 = (int) ((int64_t) N * i / nth) / 8 * 8, o1 = i == nth - 1 ? N : (int) ((int64_t) N * (i + 1) / nth) / 8 * 8;
                th.emplace_back(q4k_rows, K, W.data(), o0, o1, Y.data(), R, s.data(), N);
            }
            for (auto & x : th) x.join();
            ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ts.begin(), ts.end());
        double maxd = 0, maxr = 0;
        for (size_t i = 0; i < s.size(); ++i) { maxd = std::max(maxd, (double) std::fabs(s[i] - ref[i])); maxr = std::max(maxr, (double) std::fabs(ref[i])); }
        printf("R=%2d  %.3f ms  max|diff| %.3g of max %.3g  exact %s\n", R, ts[7], maxd, maxr, maxd == 0 ? "yes" : "no");
    }
}
