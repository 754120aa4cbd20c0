// A tiled Q6_K product for 2 to 7 activation rows (where ggml's CPU computes each output as its own
// ggml_vec_dot_q6_K_q8_K: its tiled K-quant kernel takes 8 rows or more), keeping that dot product's
// arithmetic per output: the same 8 int32 lanes per superblock (exact in any order), one
// fma(d_y * d_x, float(lanes - 32 * scaled bsums), acc) per superblock, the same horizontal sum. R
// weight rows share the 6-bit unpack and the scales, the columns' q8 blocks are loaded once per tile.
// Measures ggml's time over the kernel's and checks every output's bits. Not built into pyriver: on
// the 2-core Xeon at -O3 -mavx2 ggml's time over its own is 0.93x (2 rows) to 1.39x (7 rows)
// (docs/lossless.md, "The same gap in K-quant files"). -DROWS=R sets the tile's weight rows (4).
//
//   SP=$(python -c "import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))")
//   g++ -O3 -std=c++17 -mavx2 -mfma -mf16c scripts/q6_k_rows.cpp -I$SP/include -L$SP/llama_cpp/lib
//       -lggml -lggml-base -lggml-cpu -Wl,-rpath,$SP/llama_cpp/lib -o /tmp/q6_k_rows      (one line)
//   /tmp/q6_k_rows 8960 1536 2     # K M THREADS (the 1.5B's ffn_down)
#include <ggml.h>
#include <ggml-cpu.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

struct block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292, "ggml's block layout");

static inline float hsum_float_8(__m256 x) {
    __m128 res = _mm256_extractf128_ps(x, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    return _mm_cvtss_f32(res);
}

// one half (128 weights) of a superblock: four 32-byte vectors of 6-bit values, and the scale pairs
struct half_unpacked { __m256i q[4]; __m256i sc[4]; };

static inline void unpack(const block_q6_K & x, int j, half_unpacked & u) {
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    const __m256i b1 = _mm256_loadu_si256((const __m256i *) (x.ql + 64 * j));
    const __m256i b2 = _mm256_loadu_si256((const __m256i *) (x.ql + 64 * j + 32));
    const __m256i bh = _mm256_loadu_si256((const __m256i *) (x.qh + 32 * j));
    const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4);
    const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(12)), 2);
    const __m256i h2 = _mm256_and_si256(bh, _mm256_set1_epi8(48));
    const __m256i h3 = _mm256_srli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(-64)), 2);
    u.q[0] = _mm256_or_si256(_mm256_and_si256(b1, m15), h0);
    u.q[1] = _mm256_or_si256(_mm256_and_si256(b2, m15), h1);
    u.q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15), h2);
    u.q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15), h3);
    for (int k = 0; k < 4; k++) {
        const int is = 4 * j + k;   // ggml's get_scale_shuffle(is): 8 bytes of scale 2is, 8 of 2is+1
        const __m128i pair = _mm_set_epi64x(0x0101010101010101LL * (uint8_t) x.scales[2 * is + 1],
                                            0x0101010101010101LL * (uint8_t) x.scales[2 * is]);
        u.sc[k] = _mm256_cvtepi8_epi16(pair);
    }
}

template <int R, int C>
static void tile(int nb, const block_q6_K * const * x, const block_q8_K * const * y, float * out, int64_t ldo) {
    __m256 acc[R][C];
    for (int r = 0; r < R; r++) for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    for (int i = 0; i < nb; i++) {
        __m256i sumi[R][C];
        __m256i sub[R][C];
        for (int r = 0; r < R; r++) {
            const __m256i scales_16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) x[r][i].scales));
            for (int c = 0; c < C; c++) {
                sumi[r][c] = _mm256_setzero_si256();
                const __m256i q8sums = _mm256_loadu_si256((const __m256i *) y[c][i].bsums);
                sub[r][c] = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales_16), 5);
            }
        }
        for (int j = 0; j < 2; j++) {
            half_unpacked u[R];
            for (int r = 0; r < R; r++) unpack(x[r][i], j, u[r]);
            for (int c = 0; c < C; c++) {
                __m256i q8[4];
                for (int k = 0; k < 4; k++) q8[k] = _mm256_loadu_si256((const __m256i *) (y[c][i].qs + 128 * j + 32 * k));
                for (int r = 0; r < R; r++) {
                    __m256i p[4];
                    for (int k = 0; k < 4; k++) p[k] = _mm256_madd_epi16(u[r].sc[k], _mm256_maddubs_epi16(u[r].q[k], q8[k]));
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_add_epi32(p[0], p[1]));
                    sumi[r][c] = _mm256_add_epi32(sumi[r][c], _mm256_add_epi32(p[2], p[3]));
                }
            }
        }
        for (int r = 0; r < R; r++) {
            const float dx = _cvtsh_ss(x[r][i].d);
            for (int c = 0; c < C; c++) {
                const float d = y[c][i].d * dx;
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[r][c], sub[r][c])), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++) for (int c = 0; c < C; c++) out[c * ldo + r] = hsum_float_8(acc[r][c]);
}

template <int R>
static void tile_n(int n, int nb, const block_q6_K * const * x, const block_q8_K * const * y, float * out, int64_t ldo) {
    switch (n) {
    case 7: tile<R, 7>(nb, x, y, out, ldo); break;
    case 6: tile<R, 6>(nb, x, y, out, ldo); break;
    case 5: tile<R, 5>(nb, x, y, out, ldo); break;
    case 4: tile<R, 4>(nb, x, y, out, ldo); break;
    case 3: tile<R, 3>(nb, x, y, out, ldo); break;
    case 2: tile<R, 2>(nb, x, y, out, ldo); break;
    default: tile<R, 1>(nb, x, y, out, ldo); break;
    }
}

#ifndef ROWS
#define ROWS 4
#endif

static void compute(ggml_tensor * dst, int ith, int nth, void *) {
    constexpr int R = ROWS;
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * xq = dst->src[1];
    const int nb = (int) (w->ne[0] / 256);
    const int64_t M = w->ne[1], N = xq->ne[1];
    const block_q8_K * y[8];
    for (int c = 0; c < 8; c++) y[c] = (const block_q8_K *) ((const char *) xq->data + std::min<int64_t>(c, N - 1) * xq->nb[1]);
    const int64_t n_tiles = (M + R - 1) / R, t0 = n_tiles * ith / nth, t1 = n_tiles * (ith + 1) / nth;
    const int64_t ldo = dst->nb[1] / (int64_t) sizeof(float);
    float * base = (float *) dst->data;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t r0 = t * R;
        const block_q6_K * x[R];
        for (int r = 0; r < R; r++) x[r] = (const block_q6_K *) ((const char *) w->data + std::min(r0 + r, M - 1) * w->nb[1]);
        if (r0 + R <= M) {
            tile_n<R>((int) N, nb, x, y, base + r0, ldo);
        } else {
            for (int64_t r = r0; r < M; r++) tile_n<1>((int) N, nb, x + (r - r0), y, base + r, ldo);
        }
    }
}

int main(int argc, char ** argv) {
    const int K = argc > 1 ? atoi(argv[1]) : 8960, M = argc > 2 ? atoi(argv[2]) : 1536;
    const int n_threads = argc > 3 ? atoi(argv[3]) : 2;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> wf((size_t) K * M);
    for (float & v : wf) v = nd(rng) * 0.05f;
    ggml_init_params ip = {1024u << 20, nullptr, false};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_Q6_K, K, M);
    ggml_quantize_chunk(GGML_TYPE_Q6_K, wf.data(), w->data, 0, M, K, nullptr);
    ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);
    ggml_threadpool * tp = ggml_threadpool_new(&tpp);
    printf("R=%d K=%d M=%d threads=%d, ggml's time over the kernel's:", ROWS, K, M, n_threads);
    for (int N : {2, 3, 4, 5, 6, 7}) {
        ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, N);
        for (int i = 0; i < K * N; i++) ((float *) x->data)[i] = nd(rng);
        ggml_tensor * ref = ggml_mul_mat(ctx, w, x);
        ggml_tensor * xq = ggml_cpy(ctx, x, ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_K, K, N));
        ggml_tensor * args[2] = {w, xq};
        ggml_tensor * got = ggml_custom_4d(ctx, GGML_TYPE_F32, M, N, 1, 1, args, 2, compute, GGML_N_TASKS_MAX, nullptr);
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
            for (int i = 0; i < 10; i++) ggml_graph_compute(g1, &p1);
            auto b = std::chrono::steady_clock::now();
            for (int i = 0; i < 10; i++) ggml_graph_compute(g2, &p2);
            auto c = std::chrono::steady_clock::now();
            t1.push_back(std::chrono::duration<double>(b - a).count());
            t2.push_back(std::chrono::duration<double>(c - b).count());
        }
        std::sort(t1.begin(), t1.end());
        std::sort(t2.begin(), t2.end());
        printf("  N=%d %.2fx%s", N, t1[3] / t2[3], same ? "" : " DIFF");
        fflush(stdout);
    }
    printf("\n");
    ggml_threadpool_free(tp);
    ggml_free(ctx);
    return 0;
}
