// Go/no-go for a Q4_K kernel on AVX-512 VNNI (issue 71): ggml's product of a Q4_K matrix loaded
// repacked (CPU_REPACK, q4_K 8x8, as pyriver and llama.cpp load it) times R rows, against a custom
// op that reads the same repacked blocks, unpacks each 8-column superblock once and dots it with
// R rows (vpdpbusd, the sub-block scales by vpdpwssd). Both run in ggml's thread pool, rows quantized
// to q8_K in the graph, interleaved (median of 21). FLOAT_PER_SB=1 adds each 64-value half-pair to
// the float sums as ggml's 4-row GEMM does (its bits), 0 once a superblock as its GEMV does.
// Build at -O3 (the library's Release flags): at -O2 GCC keeps the unpacked vectors and the rows'
// sums in memory and the tile runs at about half the speed.
//
//   SP=$(python -c "import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))")
//   g++ -O3 -march=native -std=c++17 scripts/q4k_vnni.cpp -I$SP/include -L$SP/llama_cpp/lib -lggml -lggml-base
//       -lggml-cpu -Wl,-rpath,$SP/llama_cpp/lib -o /tmp/q4k_vnni      (one line)
//   /tmp/q4k_vnni K N THREADS
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

struct bq4kx8 { uint16_t d[8], dmin[8]; uint8_t scales[96]; uint8_t qs[1024]; };
struct bq8k { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(bq4kx8) == 1152, "q4_Kx8");
static_assert(sizeof(bq8k) == 292, "q8_K");

static int g_per_sb = 0;

// 8 scales and 8 mins (of 8 columns) of one sub-block from the 12 packed bytes
static inline void unpack_sm(const uint8_t * p, uint8_t * sc, uint8_t * mn) {
    uint32_t u[4];
    memcpy(u, p, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    const uint32_t a = u[1] & 0x3f3f3f3f;
    u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = a;
    u[0] &= 0x3f3f3f3f;
    memcpy(sc, u, 8);
    memcpy(mn, u + 2, 8);
}

template <int RT, bool PER_SB>
static void tile(const bq4kx8 * W, int nb, const bq8k * Y, int ldy, float * s, int lds) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 facc[RT], macc[RT];
    for (int t = 0; t < RT; ++t) { facc[t] = _mm512_setzero_ps(); macc[t] = _mm512_setzero_ps(); }
    for (int b = 0; b < nb; ++b) {
        const bq4kx8 & w = W[b];
        alignas(64) uint8_t sc[8][8], mn[8][8];
        for (int j = 0; j < 8; ++j) unpack_sm(w.scales + 12 * j, sc[j], mn[j]);
        // scale of column c in int16 lanes 4c and 4c+2 (the low halves of int32 lanes 2c, 2c+1)
        __m512i scv[8];
        for (int j = 0; j < 8; ++j) {
            const __m128i s8 = _mm_loadl_epi64((const __m128i *) sc[j]);
            const __m512i s32 = _mm512_cvtepu8_epi32(s8);                  // 8 lanes... widened below
            scv[j] = _mm512_permutexvar_epi32(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), s32);
        }
        // mins: int32 lane 2c+h holds (mn[2sb+h][c]) as int16 pair (mn, 0) -> times bsum32 of that sub-block
        __m512i mnv[4];
        for (int sb = 0; sb < 4; ++sb) {
            const __m512i m0 = _mm512_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) mn[2 * sb]));
            const __m512i m1 = _mm512_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) mn[2 * sb + 1]));
            // lanes 2c <- m0[c], 2c+1 <- m1[c]
            mnv[sb] = _mm512_permutex2var_epi32(m0, _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0), m1);
        }
        const __m256 dc8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) w.d));
        const __m256 dm8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) w.dmin));
        const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        const __m512 dcv = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(dc8));
        const __m512 dmv = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(dm8));
        __m512i iacc[RT], imin[RT];
        for (int t = 0; t < RT; ++t) { iacc[t] = _mm512_setzero_si512(); imin[t] = _mm512_setzero_si512(); }
        for (int sb = 0; sb < 4; ++sb) {
            __m512i lo[4], hi[4];
            for (int g = 0; g < 4; ++g) {
                const __m512i raw = _mm512_loadu_si512((const void *) (w.qs + 256 * sb + 64 * g));
                lo[g] = _mm512_and_si512(raw, m4);
                hi[g] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
            }
            for (int t = 0; t < RT; ++t) {
                const bq8k & y = Y[(size_t) t * ldy + b];
                __m512i l = _mm512_setzero_si512(), h = _mm512_setzero_si512();
                for (int g = 0; g < 4; ++g) {
                    l = _mm512_dpbusd_epi32(l, lo[g], _mm512_set1_epi64(*(const int64_t *) (y.qs + 64 * sb + 8 * g)));
                    h = _mm512_dpbusd_epi32(h, hi[g], _mm512_set1_epi64(*(const int64_t *) (y.qs + 64 * sb + 32 + 8 * g)));
                }
                __m512i v = _mm512_dpwssd_epi32(_mm512_setzero_si512(), l, scv[2 * sb]);
                v = _mm512_dpwssd_epi32(v, h, scv[2 * sb + 1]);
                // bsums of the two sub-blocks (32 values each): lanes 2c <- b0, 2c+1 <- b1
                const int b0 = y.bsums[4 * sb] + y.bsums[4 * sb + 1], b1 = y.bsums[4 * sb + 2] + y.bsums[4 * sb + 3];
                const __m512i bs = _mm512_set1_epi64(((int64_t) (uint32_t) b1 << 32) | (uint32_t) b0);
                __m512i mv = _mm512_madd_epi16(mnv[sb], bs);   // (mn, 0) int16 pairs times (bsum, sign)
                if (PER_SB) {
                    v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, (_MM_PERM_ENUM) 0xB1));
                    mv = _mm512_add_epi32(mv, _mm512_shuffle_epi32(mv, (_MM_PERM_ENUM) 0xB1));
                    const __m512 dy = _mm512_set1_ps(y.d);
                    facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dcv, dy), facc[t]);
                    macc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mv), _mm512_mul_ps(dmv, dy), macc[t]);
                } else {
                    iacc[t] = _mm512_add_epi32(iacc[t], v);
                    imin[t] = _mm512_add_epi32(imin[t], mv);
                }
            }
        }
        if (!PER_SB) {
            for (int t = 0; t < RT; ++t) {
                const bq8k & y = Y[(size_t) t * ldy + b];
                const __m512i v = _mm512_add_epi32(iacc[t], _mm512_shuffle_epi32(iacc[t], (_MM_PERM_ENUM) 0xB1));
                const __m512i mv = _mm512_add_epi32(imin[t], _mm512_shuffle_epi32(imin[t], (_MM_PERM_ENUM) 0xB1));
                const __m512 dy = _mm512_set1_ps(y.d);
                facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dcv, dy), facc[t]);
                macc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mv), _mm512_mul_ps(dmv, dy), macc[t]);
            }
        }
    }
    const __m512i even = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int t = 0; t < RT; ++t) {
        const __m512 r = _mm512_permutexvar_ps(even, _mm512_sub_ps(facc[t], macc[t]));
        _mm256_storeu_ps(s + (size_t) t * lds, _mm512_castps512_ps256(r));
    }
}

template <bool PER_SB>
static void rows_of(const bq4kx8 * W, int nb, const bq8k * Y, int R, float * s, int lds) {
    int t = 0;
    for (; t + 4 <= R; t += 4) tile<4, PER_SB>(W, nb, Y + (size_t) t * nb, nb, s + (size_t) t * lds, lds);
    switch (R - t) {
        case 3: tile<3, PER_SB>(W, nb, Y + (size_t) t * nb, nb, s + (size_t) t * lds, lds); break;
        case 2: tile<2, PER_SB>(W, nb, Y + (size_t) t * nb, nb, s + (size_t) t * lds, lds); break;
        case 1: tile<1, PER_SB>(W, nb, Y + (size_t) t * nb, nb, s + (size_t) t * lds, lds); break;
    }
}

static void custom(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * x = dst->src[1];
    const int K = (int) w->ne[0], N = (int) w->ne[1], R = (int) x->ne[1], nb = K / 256;
    const int groups = N / 8;
    const int g0 = groups * ith / nth, g1 = groups * (ith + 1) / nth;
    const bq4kx8 * W = (const bq4kx8 *) w->data;
    const bq8k * Y = (const bq8k *) x->data;
    float * s = (float *) dst->data;
    for (int gi = g0; gi < g1; ++gi) {
        if (g_per_sb) rows_of<true>(W + (size_t) gi * nb, nb, Y, R, s + 8 * gi, N);
        else rows_of<false>(W + (size_t) gi * nb, nb, Y, R, s + 8 * gi, N);
    }
}

static ggml_backend_buffer_type_t repack_buft(ggml_backend_dev_t cpu) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    auto get = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * b = get ? get(cpu) : nullptr; b && *b; ++b) {
        if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
    }
    return nullptr;
}

int main(int argc, char ** argv) {
    const int64_t K = argc > 1 ? atoll(argv[1]) : 1536, N = argc > 2 ? atoll(argv[2]) : 8960;
    const int threads = argc > 3 ? atoi(argv[3]) : 2;
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, threads);
    ggml_init_params wp = {ggml_tensor_overhead() * 2, nullptr, true};
    ggml_context * wctx = ggml_init(wp);
    ggml_tensor * w = ggml_new_tensor_2d(wctx, GGML_TYPE_Q4_K, K, N);
    ggml_backend_buffer_t wb = ggml_backend_alloc_ctx_tensors_from_buft(wctx, repack_buft(ggml_backend_get_device(be)));
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    {
        std::vector<float> f(K * N);
        for (float & v : f) v = nd(rng);
        std::vector<uint8_t> q(ggml_row_size(GGML_TYPE_Q4_K, K) * N);
        ggml_quantize_chunk(GGML_TYPE_Q4_K, f.data(), q.data(), 0, N, K, nullptr);
        ggml_backend_tensor_set(w, q.data(), 0, q.size());
    }
    printf("Q4_K %lld x %lld, %d threads: ggml repacked vs VNNI tile (per-superblock floats | per-64 floats)\n",
           (long long) K, (long long) N, threads);
    for (int R : {1, 2, 3, 4, 6, 8, 12, 16}) {
        ggml_init_params ip = {ggml_tensor_overhead() * 8 + ggml_graph_overhead() * 2, nullptr, true};
        ggml_context * ctx = ggml_init(ip);
        ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, R);
        ggml_tensor * ref = ggml_mul_mat(ctx, w, x);
        ggml_tensor * xq = ggml_cpy(ctx, x, ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_K, K, R));
        ggml_tensor * args[2] = {w, xq};
        ggml_tensor * got = ggml_custom_4d(ctx, GGML_TYPE_F32, N, R, 1, 1, args, 2, custom, GGML_N_TASKS_MAX, nullptr);
        ggml_cgraph * g1 = ggml_new_graph(ctx);
        ggml_build_forward_expand(g1, ref);
        ggml_cgraph * g2 = ggml_new_graph(ctx);
        ggml_build_forward_expand(g2, got);
        ggml_backend_buffer_t xb = ggml_backend_alloc_ctx_tensors(ctx, be);
        std::vector<float> xv(K * R);
        std::normal_distribution<float> nx(0.0f, 1.0f);
        for (float & v : xv) v = nx(rng);
        ggml_backend_tensor_set(x, xv.data(), 0, xv.size() * sizeof(float));
        std::vector<double> ta, tb, tc;
        auto time = [&](ggml_cgraph * g) {
            const auto t0 = std::chrono::steady_clock::now();
            ggml_backend_graph_compute(be, g);
            return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        };
        double maxd[2] = {0, 0}, maxr = 0;
        for (int rep = 0; rep < 21; ++rep) {
            ta.push_back(time(g1));
            g_per_sb = 0;
            tb.push_back(time(g2));
            if (rep == 0) {
                std::vector<float> a(N * R), c(N * R);
                ggml_backend_tensor_get(ref, a.data(), 0, a.size() * 4);
                ggml_backend_tensor_get(got, c.data(), 0, c.size() * 4);
                for (size_t i = 0; i < a.size(); ++i) { maxd[0] = std::max(maxd[0], (double) std::fabs(a[i] - c[i])); maxr = std::max(maxr, (double) std::fabs(a[i])); }
            }
            g_per_sb = 1;
            tc.push_back(time(g2));
            if (rep == 0) {
                std::vector<float> a(N * R), c(N * R);
                ggml_backend_tensor_get(ref, a.data(), 0, a.size() * 4);
                ggml_backend_tensor_get(got, c.data(), 0, c.size() * 4);
                for (size_t i = 0; i < a.size(); ++i) maxd[1] = std::max(maxd[1], (double) std::fabs(a[i] - c[i]));
            }
        }
        auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
        const double a = med(ta), b = med(tb), c = med(tc);
        printf("R=%2d  ggml %8.3f ms  vnni %8.3f ms (%.2fx)  vnni/64 %8.3f ms (%.2fx)  max|diff| %.2g %.2g of %.2g\n", R, a, b,
               a / b, c, a / c, maxd[0], maxd[1], maxr);
        fflush(stdout);
        ggml_backend_buffer_free(xb);
        ggml_free(ctx);
    }
    ggml_backend_buffer_free(wb);
    ggml_free(wctx);
    ggml_backend_free(be);
    return 0;
}
