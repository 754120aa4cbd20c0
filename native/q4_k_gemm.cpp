// The tiled Q4_K kernel (tiled_kernels.h): a Q4_K matrix in ggml's repacked layout (CPU_REPACK,
// q4_K 8x8: 8 weight rows interleaved a superblock) times several rows, AVX-512 VNNI. Each group of
// 8 weight rows has its superblock's nibbles unpacked once for all the rows of the step (vpdpbusd
// against the row's bytes, the 6-bit sub-block scales applied by vpdpwssd), where ggml runs its
// 4-row GEMM once per 4 rows and its one-row GEMV for each of the rest, each reading the weights.
//
// The bits are those of the ggml product it replaces (ggml-cpu/arch/x86/repack.cpp): rows 0 to
// 4*floor(R/4)-1 go through its GEMM, the others through its GEMV. Both sum the integers exactly
// (a sub-block's dot, times its scale; the mins times the activations' 32-sums), then in floats:
//   GEMM: for each superblock, for each of its 4 halves-pairs (64 values): acc = fma(float(sum),
//         d_w * d_y, acc), and the mins' sum alike into acc_min;
//   GEMV: the same once a superblock (its 256 values' sum);
// the output is acc - acc_min. Rows quantized by ggml's quantize_row_q8_K (the GEMV's) or by its
// 4-row packer (the GEMM's) differ at most in sign (a block holding both +max and -max), which
// leaves every product above, and so every bit, the same.
// GCC 12 warns that the AVX-512 intrinsics' own _mm512_undefined_*() placeholders are uninitialized
// (GCC bug 105593): silenced before immintrin.h is read, the header being where it points.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "tiled_kernels.h"
#include "tiled_x86.h"

#include <cstdint>
#include <cstring>

namespace pr::tiled {

#ifdef PR_TILED_X86

namespace {

// ggml's blocks (repack.h, ggml-common.h): 8 Q4_K superblocks interleaved 8 bytes at a time, their
// scales and mins a sub-block at a time (12 bytes: 8 scales, 8 mins, Q4_K's 6-bit packing); 256
// activations as d * q with bsums the sums of 16.
struct block_q4_Kx8 { uint16_t d[8], dmin[8]; uint8_t scales[96]; uint8_t qs[1024]; };
struct block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(block_q4_Kx8) == 1152 && sizeof(block_q8_K) == 292, "ggml's block layout");

// Sub-block j's 8 scales and 8 mins of the 8 rows.
inline void scales_mins(const uint8_t * p, uint8_t * sc, uint8_t * mn) {
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

// Lanes: int32 lane 2c + h is weight row c's bytes 4h..4h+3 of each 8-byte chunk (how the repacked
// qs lie); the pair's sum is row c's.

// A superblock's 8 scales and 4 mins-pairs of the 8 weight rows, and their d and dmin in both lanes of
// each pair.
struct unpacked {
    __m512i scale[8];   // sub-block j's scale of row c as the int16 pair (scale, 0), lanes 2c and 2c+1
    __m512i mins[4];    // sub-blocks 2p and 2p+1's mins of row c as the int16 pair (min 2p, min 2p+1), lanes 2c and 2c+1
    __m512 d, dmin;
};

PR_AVX512 inline void unpack_scales(const block_q4_Kx8 & x, unpacked & u) {
    const __m512i pairs = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    alignas(16) uint8_t sc[8][16], mn[8][16];
    for (int j = 0; j < 8; j++) scales_mins(x.scales + 12 * j, sc[j], mn[j]);
    for (int j = 0; j < 8; j++) u.scale[j] = _mm512_permutexvar_epi32(pairs, _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *) sc[j])));
    for (int p = 0; p < 4; p++) {
        const __m128i m = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *) mn[2 * p]), _mm_loadl_epi64((const __m128i *) mn[2 * p + 1]));
        u.mins[p] = _mm512_permutexvar_epi32(pairs, _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(m)));
    }
    u.d = _mm512_permutexvar_ps(pairs, _mm512_zextps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) x.d))));
    u.dmin = _mm512_permutexvar_ps(pairs, _mm512_zextps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) x.dmin))));
}

// A row's bsums of half-pair p (sub-blocks 2p and 2p+1, 32 values each) as the int16 pair against
// u.mins[p] (|a sum of 32| <= 4096): vpmaddwd of the two gives the row's mins' sum of the half-pair.
inline uint32_t bsums_pair(const block_q8_K & a, int p) {
    return (uint16_t) (a.bsums[4 * p] + a.bsums[4 * p + 1]) | (uint32_t) (uint16_t) (a.bsums[4 * p + 2] + a.bsums[4 * p + 3]) << 16;
}

// Half-pair p's 64 values of the 8 weight rows: sub-block 2p's nibbles (low) and 2p+1's (high).
PR_AVX512 inline void nibbles(const block_q4_Kx8 & x, int p, __m512i * lo, __m512i * hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int g = 0; g < 4; g++) {
        const __m512i q = _mm512_loadu_si512((const void *) (x.qs + 256 * p + 64 * g));
        lo[g] = _mm512_and_si512(q, m4);
        hi[g] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    }
}

// Row t's sub-block sums of half-pair p (64 values, sub-blocks 2p and 2p+1) against the unpacked
// nibbles, each lane scaled: the row's sum is lane 2c's plus lane 2c+1's.
PR_AVX512 inline __m512i half_pair(const __m512i * lo, const __m512i * hi, const int8_t * q8, __m512i s_lo, __m512i s_hi) {
    __m512i l = _mm512_setzero_si512(), h = _mm512_setzero_si512();
    for (int g = 0; g < 4; g++) {   // |lane| <= 16 * 15 * 128 < 2^15: the low int16 is the sum
        l = _mm512_dpbusd_epi32(l, lo[g], _mm512_set1_epi64(*(const int64_t *) (q8 + 8 * g)));
        h = _mm512_dpbusd_epi32(h, hi[g], _mm512_set1_epi64(*(const int64_t *) (q8 + 32 + 8 * g)));
    }
    return _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), l, s_lo), h, s_hi);
}

// RT rows (RT <= 3) times one group of 8 weight rows over nb superblocks with ggml's GEMV's sums (a
// float step once a superblock). Floats are kept in both lanes of a pair. out[t * ldo + c].
template <int RT>
PR_AVX512 void tile(const block_q4_Kx8 * w, int nb, const block_q8_K * y, int ldy, float * out, int64_t ldo) {
    __m512 acc[RT], acc_min[RT];
    for (int t = 0; t < RT; t++) acc[t] = acc_min[t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_q4_Kx8 & x = w[b];
        unpacked u;
        unpack_scales(x, u);
        __m512i sum[RT], sum_min[RT];   // sum_min: row t's whole mins' sum in both lanes of a pair
        for (int t = 0; t < RT; t++) sum[t] = sum_min[t] = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++) {   // 64 values: sub-blocks 2p (low nibbles) and 2p+1 (high)
            __m512i lo[4], hi[4];
            nibbles(x, p, lo, hi);
            for (int t = 0; t < RT; t++) {
                const block_q8_K & a = y[(size_t) t * ldy + b];
                sum[t] = _mm512_add_epi32(sum[t], half_pair(lo, hi, a.qs + 64 * p, u.scale[2 * p], u.scale[2 * p + 1]));
                sum_min[t] = _mm512_add_epi32(sum_min[t], _mm512_madd_epi16(u.mins[p], _mm512_set1_epi32((int32_t) bsums_pair(a, p))));
            }
        }
        for (int t = 0; t < RT; t++) {
            const __m512i s = _mm512_add_epi32(sum[t], _mm512_shuffle_epi32(sum[t], _MM_PERM_CDAB));
            const __m512 dy = _mm512_set1_ps(y[(size_t) t * ldy + b].d);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(u.d, dy), acc[t]);
            acc_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum_min[t]), _mm512_mul_ps(u.dmin, dy), acc_min[t]);
        }
    }
    // row c's output from lane 2c
    const __m512i even = _mm512_set_epi32(14, 12, 10, 8, 6, 4, 2, 0, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int t = 0; t < RT; t++) {
        _mm256_storeu_ps(out + t * ldo, _mm512_castps512_ps256(_mm512_permutexvar_ps(even, _mm512_sub_ps(acc[t], acc_min[t]))));
    }
}

// 2 * P rows (P = 2 or 4: ggml's GEMM's 4-row tiles, one or two) times one group of 8 weight rows
// with ggml's GEMM's sums (a float step every 64 values); 8 rows share one unpacking of the weights.
// Two rows share a register from the integer pair-sums on: row 2k's floats in lane 2c, row 2k+1's in
// lane 2c+1, so each float op serves two rows, every lane doing what ggml's GEMM does for its row (the
// same products d_w * d_y, once a superblock, and the same fma order: the same bits).
template <int P>
PR_AVX512 void tile_gemm(const block_q4_Kx8 * w, int nb, const block_q8_K * y, int ldy, float * out, int64_t ldo) {
    const __mmask16 odd = 0xAAAA;
    __m512 acc[P], acc_min[P];
    for (int k = 0; k < P; k++) acc[k] = acc_min[k] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_q4_Kx8 & x = w[b];
        unpacked u;
        unpack_scales(x, u);
        // rows 2k and 2k+1's bsums pairs of half-pair p, in even and odd lanes
        int64_t bs[P][4];
        for (int k = 0; k < P; k++) {
            for (int p = 0; p < 4; p++) {
                bs[k][p] = (int64_t) ((uint64_t) bsums_pair(y[(size_t) (2 * k + 1) * ldy + b], p) << 32 | bsums_pair(y[(size_t) (2 * k) * ldy + b], p));
            }
        }
        // d_w * d_y and dmin * d_y of rows 2k (even lanes) and 2k+1 (odd)
        __m512 dd[P], dm[P];
        for (int k = 0; k < P; k++) {
            const __m512 dy = _mm512_mask_blend_ps(odd, _mm512_set1_ps(y[(size_t) (2 * k) * ldy + b].d), _mm512_set1_ps(y[(size_t) (2 * k + 1) * ldy + b].d));
            dd[k] = _mm512_mul_ps(u.d, dy);
            dm[k] = _mm512_mul_ps(u.dmin, dy);
        }
        for (int p = 0; p < 4; p++) {
            __m512i lo[4], hi[4];
            nibbles(x, p, lo, hi);
            for (int k = 0; k < P; k++) {
                const __m512i se = half_pair(lo, hi, y[(size_t) (2 * k) * ldy + b].qs + 64 * p, u.scale[2 * p], u.scale[2 * p + 1]);
                const __m512i so = half_pair(lo, hi, y[(size_t) (2 * k + 1) * ldy + b].qs + 64 * p, u.scale[2 * p], u.scale[2 * p + 1]);
                // lane 2c: row 2k's pair-sum, lane 2c+1: row 2k+1's
                const __m512i s = _mm512_mask_add_epi32(_mm512_add_epi32(se, _mm512_shuffle_epi32(se, _MM_PERM_CDAB)), odd, so,
                                                        _mm512_shuffle_epi32(so, _MM_PERM_CDAB));
                const __m512i m = _mm512_madd_epi16(u.mins[p], _mm512_set1_epi64(bs[k][p]));
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dd[k], acc[k]);
                acc_min[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), dm[k], acc_min[k]);
            }
        }
    }
    const __m512i even_lanes = _mm512_set_epi32(14, 12, 10, 8, 6, 4, 2, 0, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd_lanes = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int k = 0; k < P; k++) {
        const __m512 r = _mm512_sub_ps(acc[k], acc_min[k]);
        _mm256_storeu_ps(out + (2 * k) * ldo, _mm512_castps512_ps256(_mm512_permutexvar_ps(even_lanes, r)));
        _mm256_storeu_ps(out + (2 * k + 1) * ldo, _mm512_castps512_ps256(_mm512_permutexvar_ps(odd_lanes, r)));
    }
}

// All R rows times one group of 8 weight rows, each row with the bits ggml gives it.
PR_AVX512 void group(const block_q4_Kx8 * w, int nb, const block_q8_K * y, int64_t R, float * out, int64_t ldo) {
    int64_t t = 0;
    for (; t + 8 <= R; t += 8) tile_gemm<4>(w, nb, y + t * nb, nb, out + t * ldo, ldo);
    if (t + 4 <= R) {
        tile_gemm<2>(w, nb, y + t * nb, nb, out + t * ldo, ldo);
        t += 4;
    }
    switch (R - t) {
        case 3: tile<3>(w, nb, y + t * nb, nb, out + t * ldo, ldo); break;
        case 2: tile<2>(w, nb, y + t * nb, nb, out + t * ldo, ldo); break;
        case 1: tile<1>(w, nb, y + t * nb, nb, out + t * ldo, ldo); break;
    }
}

}  // namespace

bool q4_k_cpu_ok() {
    __builtin_cpu_init();
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

void q4_k_compute(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const ggml_tensor * w = (const ggml_tensor *) userdata;
    const ggml_tensor * x = dst->src[0];
    const int nb = (int) (w->ne[0] / 256);
    const int64_t groups = w->ne[1] / 8, R = x->ne[1];
    const int64_t g0 = groups * ith / nth, g1 = groups * (ith + 1) / nth;
    const auto * W = (const block_q4_Kx8 *) w->data;
    const auto * Y = (const block_q8_K *) x->data;
    float * out = (float *) dst->data;
    const int64_t ldo = dst->nb[1] / sizeof(float);
    for (int64_t g = g0; g < g1; g++) group(W + g * nb, nb, Y, R, out + 8 * g, ldo);
}

#else

bool q4_k_cpu_ok() { return false; }
void q4_k_compute(ggml_tensor *, int, int, void *) {}

#endif

}  // namespace pr::tiled
