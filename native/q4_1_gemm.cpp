// The tiled Q4_1 kernel (tiled_kernels.h): 8 weight rows by up to 8 columns a tile, each output
// with the arithmetic of ggml's x86 ggml_vec_dot_q4_1_q8_1.
#include "tiled_kernels.h"
#include "tiled_x86.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace pr::tiled {

#ifdef PR_TILED_X86

// ggml's blocks (ggml-common.h): 32 weights as d * q + m, q in 0..15 (two per byte, low nibbles
// first); 32 activations as d * q, s = d * sum(q).
struct block_q4_1 { uint16_t d, m; uint8_t qs[16]; };
struct block_q8_1 { uint16_t d, s; int8_t qs[32]; };
static_assert(sizeof(block_q4_1) == 20 && sizeof(block_q8_1) == 36, "ggml's block layout");

// The steps of ggml's ggml_vec_dot_q4_1_q8_1 (ggml-cpu/arch/x86/quants.c), one output each:
// acc = fma(d_x * d_y, float(lanes of sum(q_x * q_y) over 4 bytes), acc) block by block, summs +=
// m_x * s_y (exact in float: two halves' product), then hsum(acc) + summs. The integer sums are
// exact whichever instructions make them.
PR_AVX2 static inline __m256i nibbles(const uint8_t * qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *) qs);
    return _mm256_and_si256(_mm256_set1_epi8(0xF), _mm256_set_m128i(_mm_srli_epi16(t, 4), t));
}

PR_AVX2 static inline __m256 lane_sums(__m256i ux, __m256i sy) {
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), _mm256_maddubs_epi16(ux, sy)));
}

// The columns of one group: their blocks, and each block's d and s as floats, [block][G].
static constexpr int G = 8;
struct column_group {
    const block_q8_1 * y[G];
    const float * d;
    const float * s;
    int n;
};

// R weight rows times the group's first C columns; out[c * ldo + r].
template <int R, int C>
PR_AVX2 static void tile(int nb, const block_q4_1 * const * x, const column_group & g, float * out, int64_t ldo) {
    __m256 acc[R][C];
    __m256 summs[R];
    for (int r = 0; r < R; r++) {
        summs[r] = _mm256_setzero_ps();
        for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    }
    for (int ib = 0; ib < nb; ib++) {
        const __m256 sy = _mm256_loadu_ps(g.s + G * ib);
        const __m256 dys = _mm256_loadu_ps(g.d + G * ib);
        __m256i qy[C];
        __m256 dy[C];
        for (int c = 0; c < C; c++) {
            qy[c] = _mm256_loadu_si256((const __m256i *) g.y[c][ib].qs);
            if constexpr (C <= 4) dy[c] = _mm256_broadcast_ss(g.d + G * ib + c);
        }
        for (int r = 0; r < R; r++) {
            // d and m side by side: one conversion
            int32_t dm16;
            std::memcpy(&dm16, &x[r][ib], sizeof dm16);
            const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(dm16));
            summs[r] = _mm256_add_ps(summs[r], _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)), sy));
            const __m256 dx = _mm256_broadcastss_ps(dm);
            const __m256i ux = nibbles(x[r][ib].qs);
            // d_x * d_y per column: a product each for a few columns, else all eight at once through memory
            alignas(32) float dd[G];
            if constexpr (C > 4) _mm256_store_ps(dd, _mm256_mul_ps(dx, dys));
            for (int c = 0; c < C; c++) {
                const __m256 dxy = C <= 4 ? _mm256_mul_ps(dx, dy[c]) : _mm256_set1_ps(dd[c]);
                acc[r][c] = _mm256_fmadd_ps(dxy, lane_sums(ux, qy[c]), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        alignas(32) float s[G];
        _mm256_store_ps(s, summs[r]);
        for (int c = 0; c < C; c++) out[c * ldo + r] = hsum_float_8(acc[r][c]) + s[c];
    }
}

template <int R>
PR_AVX2 static void tile_n(int nb, const block_q4_1 * const * x, const column_group & g, float * out, int64_t ldo) {
    switch (g.n) {
    case 8: tile<R, 8>(nb, x, g, out, ldo); break;
    case 7: tile<R, 7>(nb, x, g, out, ldo); break;
    case 6: tile<R, 6>(nb, x, g, out, ldo); break;
    case 5: tile<R, 5>(nb, x, g, out, ldo); break;
    case 4: tile<R, 4>(nb, x, g, out, ldo); break;
    case 3: tile<R, 3>(nb, x, g, out, ldo); break;
    case 2: tile<R, 2>(nb, x, g, out, ldo); break;
    default: tile<R, 1>(nb, x, g, out, ldo); break;
    }
}

template <int R>
PR_AVX2 static void rows(const ggml_tensor * w, const std::vector<column_group> & groups, ggml_tensor * dst, int ith, int nth) {
    const int nb = (int) (w->ne[0] / 32);
    const int64_t M = w->ne[1];
    const int64_t n_tiles = (M + R - 1) / R;
    const int64_t t0 = n_tiles * ith / nth, t1 = n_tiles * (ith + 1) / nth;
    const int64_t ldo = dst->nb[1] / (int64_t) sizeof(float);
    for (size_t gi = 0; gi < groups.size(); gi++) {
        const column_group & g = groups[gi];
        float * base = (float *) ((char *) dst->data + gi * G * dst->nb[1]);
        for (int64_t t = t0; t < t1; t++) {
            const int64_t r0 = t * R;
            const block_q4_1 * x[R];
            for (int r = 0; r < R; r++) x[r] = (const block_q4_1 *) ((const char *) w->data + std::min(r0 + r, M - 1) * w->nb[1]);
            if (r0 + R <= M) {
                tile_n<R>(nb, x, g, base + r0, ldo);
            } else {
                for (int64_t r = r0; r < M; r++) tile_n<1>(nb, x + (r - r0), g, base + r, ldo);
            }
        }
    }
}

// dst = w * xq (xq: x quantized to Q8_1 by ggml's CPU copy, as its own product quantizes it).
// Each thread takes a range of weight rows for every column; the columns' scales are converted by
// each thread for itself (N * K / 32 values, nothing beside the product).
PR_AVX2 void q4_1_compute(ggml_tensor * dst, int ith, int nth, void *) {
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * xq = dst->src[1];
    const int nb = (int) (w->ne[0] / 32);
    const int64_t N = xq->ne[1];
    const int64_t n_groups = (N + G - 1) / G;

    thread_local std::vector<float> scales;
    thread_local std::vector<column_group> groups;
    scales.resize((size_t) n_groups * nb * G * 2);
    groups.resize((size_t) n_groups);
    for (int64_t gi = 0; gi < n_groups; gi++) {
        column_group & g = groups[gi];
        g.n = (int) std::min<int64_t>(G, N - gi * G);
        float * d = scales.data() + (size_t) gi * nb * G * 2;
        float * s = d + (size_t) nb * G;
        for (int c = 0; c < G; c++) {
            const int64_t col = gi * G + std::min(c, g.n - 1);
            g.y[c] = (const block_q8_1 *) ((const char *) xq->data + col * xq->nb[1]);
            for (int ib = 0; ib < nb; ib++) {
                d[ib * G + c] = _cvtsh_ss(g.y[c][ib].d);
                s[ib * G + c] = _cvtsh_ss(g.y[c][ib].s);
            }
        }
        g.d = d;
        g.s = s;
    }
    rows<8>(w, groups, dst, ith, nth);   // 8 rows a tile: 1.42x ggml at 2 columns, 1.74x at 8 (docs/lossless.md)
}

bool q4_1_cpu_ok() { return cpu_has_avx2(); }

#else

bool q4_1_cpu_ok() { return false; }
void q4_1_compute(ggml_tensor *, int, int, void *) {}

#endif  // PR_TILED_X86

}  // namespace pr::tiled
