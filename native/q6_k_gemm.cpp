// The tiled Q6_K kernels (tiled_kernels.h): one weight row by up to 8 columns a tile (16 with
// AVX-512), the row's superblock unpacked once for all its columns. Under 8 rows each output has the
// arithmetic of ggml's x86 ggml_vec_dot_q6_K_q8_K (its AVX2 loop, which every x86 build with AVX2
// runs), from 8 that of its tiled kernel (sum_kind below). Both sum per superblock 8 int32 lanes,
// lane l the scaled sums of bytes 4l..4l+3 of its 32-byte vectors (exact in any order and any
// instructions, no pair sum can saturate: 63 * 128 * 2 < 2^15) less 32 times the scaled bsums (madd
// of bsums and scales, shifted by 5). With AVX-512 two of ggml's vectors go in one register (lanes
// 8..15 added to 0..7 at the superblock's end) and VNNI's dpwssd adds the scaled pairs in one
// instruction.
#include "tiled_kernels.h"
#include "tiled_x86.h"

#include <algorithm>
#include <cstdint>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace pr::tiled {

#ifdef PR_TILED_X86

// ggml's blocks (ggml-common.h): 256 weights as d * scale[16-weight group] * (q - 32), q the 4 low
// bits in ql and 2 high bits in qh; 256 activations as d * q with bsums the sums of 16.
struct block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct block_q8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292, "ggml's block layout");


// Columns a tile: 8 in the AVX2 body (16 registers), up to 16 in the AVX-512 one (32): a weight row is
// unpacked, and read from memory, once for every tile of a step (the 1.5B's output head, 151,936 rows
// of 1536, 190 MB, on an AMX Xeon: 16 rows 27 ms in one tile where two of 8 took 36). A tile reads its
// columns' activations for every weight row, so they are kept within L1 where they can be (cols()).
static constexpr int COLS_AVX2 = 8, COLS = 16;

// The L1 data cache's bytes (glibc's sysconf; 32 KiB where it does not say).
static int64_t l1_bytes() {
    static const int64_t bytes = [] {
#if defined(_SC_LEVEL1_DCACHE_SIZE)
        const long b = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#else
        const long b = 0;
#endif
        return b > 0 ? (int64_t) b : (int64_t) 32768;
    }();
    return bytes;
}

// Columns a tile for n rows of nb superblocks: AVX-512 tiles of 16 unless their activations (16 * nb
// blocks of 292 bytes) overflow three quarters of L1 while tiles of 8 would not; then the fewest tiles
// that fit, of sizes as even as can be. On a Zen 4 (32 KiB L1) the head's 16 rows in one tile (28 KB
// of activations) took 84 ms on one thread against 62 in two of 8 (scripts/tiled_rows.cpp), 24 rows
// 119 against 97 in two of 12; at 1024 weights a row (16 columns: 19 KB) one tile and two were level,
// at 2048 a tile of 12 rows (28 KB) lost as well (32 ms against 27 in 8 + 4); a matrix whose tiles of 8
// overflow L1 too (FFN down, 8960 a row) keeps 16, where the two were within the machine's noise.
static int cols(bool wide, int nb, int64_t n) {
    if (!wide) return COLS_AVX2;
    const int64_t room = l1_bytes() * 3 / 4, per_col = (int64_t) nb * (int64_t) sizeof(block_q8_K);
    if (COLS * per_col <= room || 8 * per_col > room) return COLS;
    const int64_t most = room / per_col, tiles = (n + most - 1) / most;
    return (int) ((n + tiles - 1) / tiles);
}

// 32 * (bsums . scales) in ggml's lanes: what the -32 offset of every weight takes from the sums.
PR_AVX2 static inline __m256i offset(const block_q8_K & y, __m256i scales_16) {
    return _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *) y.bsums), scales_16), 5);
}

// How an output adds up its superblocks: as the ggml product whose bits it keeps.
//  DOT: ggml_vec_dot_q6_K_q8_K (ggml's product of 1 to 7 rows): 8 float lanes an output,
//    acc = fma(d_y * d_x, float(lanes), acc), then hsum_float_8.
//  TILED_FUSED, TILED_SPLIT: ggml's tiled K-quant kernel (8 rows or more; ggml-cpu/tiled), which sums
//    a superblock exactly (s, an int32) and adds the superblocks in order from 0: acc = fma(d_x *
//    float(s), d_y, acc) where the compiler fused the last product and sum (its AVX2 body says fma;
//    its AVX-512 VNNI body says acc + (float(s) * d_x) * d_y, which GCC fuses, its default being
//    -ffp-contract=fast), acc + round((float(s) * d_x) * d_y) where not. The probe finds which.
enum sum_kind { DOT, TILED_FUSED, TILED_SPLIT };

// Each of 8 vectors' lanes summed, vector c's sum in lane c (exact: integers).
PR_AVX2 static inline __m256i column_sums(const __m256i * v) {
    const __m256i t0 = _mm256_hadd_epi32(v[0], v[1]), t1 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i t2 = _mm256_hadd_epi32(v[4], v[5]), t3 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// Superblock i's lanes of a group of N <= 8 columns (y: the group's first) added to their outputs'
// sums: acc[c] for column c for DOT, else acc[0] with column c in lane c. lanes: room for 8.
template <int N, sum_kind K>
PR_AVX2 static inline void add_group(__m256i * lanes, float dx, const block_q8_K * const * y, int i, __m256 * acc) {
    if constexpr (K == DOT) {
        for (int c = 0; c < N; c++) acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(y[c][i].d * dx), _mm256_cvtepi32_ps(lanes[c]), acc[c]);
    } else {
        for (int c = N; c < 8; c++) lanes[c] = _mm256_setzero_si256();
        const __m256 s = _mm256_cvtepi32_ps(column_sums(lanes));
        alignas(32) float d[8];
        for (int c = 0; c < 8; c++) d[c] = y[std::min(c, N - 1)][i].d;
        const __m256 dy = _mm256_load_ps(d);
        if constexpr (K == TILED_FUSED) {
            acc[0] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dx), s), dy, acc[0]);
        } else {
            __m256 p = _mm256_mul_ps(_mm256_mul_ps(s, _mm256_set1_ps(dx)), dy);
#if defined(__GNUC__)
            __asm__("" : "+x"(p));   // the product rounded: no contraction into an fma with the sum
#endif
            acc[0] = _mm256_add_ps(acc[0], p);
        }
    }
}

template <int C, sum_kind K>
PR_AVX2 static inline void store(const __m256 * acc, float * out, int64_t ldo) {
    if constexpr (K == DOT) {
        for (int c = 0; c < C; c++) out[c * ldo] = hsum_float_8(acc[c]);
    } else {
        alignas(32) float v[16];
        for (int g = 0; g < (C + 7) / 8; g++) _mm256_store_ps(v + 8 * g, acc[g]);
        for (int c = 0; c < C; c++) out[c * ldo] = v[c];
    }
}

// One weight row times C columns, AVX2: a half superblock's four vectors and scales at a time.
template <int C, sum_kind K>
PR_AVX2 static void row_avx2(int nb, const block_q6_K * x, const block_q8_K * const * y, float * out, int64_t ldo) {
    __m256 acc[C];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    for (int i = 0; i < nb; i++) {
        const block_q6_K & b = x[i];
        __m256i sumi[8];
        for (int c = 0; c < C; c++) sumi[c] = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++) {
            const __m256i b1 = _mm256_loadu_si256((const __m256i *) (b.ql + 64 * j));
            const __m256i b2 = _mm256_loadu_si256((const __m256i *) (b.ql + 64 * j + 32));
            const __m256i bh = _mm256_loadu_si256((const __m256i *) (b.qh + 32 * j));
            __m256i q[4], s[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(b1, m15), _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(b2, m15), _mm256_slli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(12)), 2));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15), _mm256_and_si256(bh, _mm256_set1_epi8(48)));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15),
                                   _mm256_srli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(-64)), 2));
            for (int k = 0; k < 4; k++) {   // ggml's get_scale_shuffle(4j + k): 8 bytes of one scale, 8 of the next
                const int is = 4 * j + k;
                s[k] = _mm256_cvtepi8_epi16(_mm_set_epi64x(0x0101010101010101LL * (uint8_t) b.scales[2 * is + 1],
                                                           0x0101010101010101LL * (uint8_t) b.scales[2 * is]));
            }
            for (int c = 0; c < C; c++) {
                const int8_t * q8 = y[c][i].qs + 128 * j;
                for (int k = 0; k < 4; k++) {
                    const __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *) (q8 + 32 * k)));
                    sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(s[k], p));
                }
            }
        }
        const __m256i scales_16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) b.scales));
        for (int c = 0; c < C; c++) sumi[c] = _mm256_sub_epi32(sumi[c], offset(y[c][i], scales_16));
        add_group<C, K>(sumi, _cvtsh_ss(b.d), y, i, acc);
    }
    store<C, K>(acc, out, ldo);
}

// The AVX-512 loop's constants, per 512-bit register: the high bits of each half superblock are
// (qh & 3) << 4 | (qh & 12) << 2 for [q4_0 | q4_1] and (qh & 48) | (qh & 192) >> 2 for [q4_2 | q4_3];
// register k's scales are scale 4k .. 4k + 3, each over 16 bytes (8 int16 pairs).
static const struct avx512_consts {
    alignas(64) int8_t mask_a[64], mask_b[64];
    alignas(64) int16_t shift_a[32], shift_b[32], pick[4][32];
    avx512_consts() {
        for (int e = 0; e < 64; e++) {
            mask_a[e] = e < 32 ? 3 : 12;
            mask_b[e] = (int8_t) (e < 32 ? 48 : 192);
        }
        for (int e = 0; e < 32; e++) {
            shift_a[e] = e < 16 ? 4 : 2;
            shift_b[e] = e < 16 ? 0 : 2;
            for (int k = 0; k < 4; k++) pick[k][e] = (int16_t) (4 * k + e / 8);
        }
    }
} consts;

// Superblock i of a weight row (q, s: its unpacked registers) times a group of N <= 8 columns.
template <int N, sum_kind K>
PR_AVX512 static inline void group_avx512(const __m512i * q, const __m512i * s, __m256i scales_16, float dx,
                                          const block_q8_K * const * y, int i, __m256 * acc) {
    __m256i lanes[8];
    for (int c = 0; c < N; c++) {
        __m512i sumi = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            const __m512i p = _mm512_maddubs_epi16(q[k], _mm512_loadu_si512(y[c][i].qs + 64 * k));
            sumi = _mm512_dpwssd_epi32(sumi, p, s[k]);
        }
        lanes[c] = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xF, sumi, 0), _mm512_maskz_extracti64x4_epi64(0xF, sumi, 1));
        lanes[c] = _mm256_sub_epi32(lanes[c], offset(y[c][i], scales_16));
    }
    add_group<N, K>(lanes, dx, y, i, acc);
}

// One weight row times C columns, AVX-512: register k holds ggml's vectors 2k and 2k + 1 of the
// superblock ([q4_0 | q4_1] and [q4_2 | q4_3] of each half), its int16 scales beside it.
template <int C, sum_kind K>
PR_AVX512 static void row_avx512(int nb, const block_q6_K * x, const block_q8_K * const * y, float * out, int64_t ldo) {
    static_assert(K != DOT || C <= 8, "the dot product's kernel takes at most 7 rows: one group of columns");
    __m256 acc[C];
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m512i m15 = _mm512_set1_epi8(15);
    const __m512i mask_a = _mm512_load_si512(consts.mask_a), shift_a = _mm512_load_si512(consts.shift_a);
    const __m512i mask_b = _mm512_load_si512(consts.mask_b), shift_b = _mm512_load_si512(consts.shift_b);
    __m512i pick[4];
    for (int k = 0; k < 4; k++) pick[k] = _mm512_load_si512(consts.pick[k]);
    for (int i = 0; i < nb; i++) {
        const block_q6_K & b = x[i];
        const __m256i scales_16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) b.scales));
        const __m512i sc = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(0xFFFF, b.scales));   // 16 scales, 16 zeros
        __m512i q[4], s[4];
        for (int j = 0; j < 2; j++) {
            const __m512i ql = _mm512_loadu_si512(b.ql + 64 * j);
            const __m512i qh = _mm512_maskz_broadcast_i64x4(0xFF, _mm256_loadu_si256((const __m256i *) (b.qh + 32 * j)));
            q[2 * j] = _mm512_or_si512(_mm512_and_si512(ql, m15), _mm512_sllv_epi16(_mm512_and_si512(qh, mask_a), shift_a));
            q[2 * j + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m15),
                                           _mm512_srlv_epi16(_mm512_and_si512(qh, mask_b), shift_b));
            s[2 * j] = _mm512_permutexvar_epi16(pick[2 * j], sc);
            s[2 * j + 1] = _mm512_permutexvar_epi16(pick[2 * j + 1], sc);
        }
        const float dx = _cvtsh_ss(b.d);
        group_avx512<std::min(C, 8), K>(q, s, scales_16, dx, y, i, acc);
        if constexpr (C > 8) group_avx512<C - 8, K>(q, s, scales_16, dx, y + 8, i, acc + 1);
    }
    store<C, K>(acc, out, ldo);
}

using row_fn = void (*)(int, const block_q6_K *, const block_q8_K * const *, float *, int64_t);

template <template <int, sum_kind> class F, sum_kind K, int C = 16>
static row_fn pick_cols(int n) {
    if constexpr (C == 1) {
        return F<1, K>::f;
    } else {
        return n >= C ? F<C, K>::f : pick_cols<F, K, C - 1>(n);
    }
}
template <int C, sum_kind K> struct avx2_cols { static constexpr row_fn f = row_avx2<C, K>; };
template <int C, sum_kind K> struct avx512_cols { static constexpr row_fn f = row_avx512<C, K>; };

static bool cpu_has_avx512() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

bool q6_k_cpu_ok() { return cpu_has_avx2(); }

#ifndef PR_Q6_K_AVX2_ONLY
#define PR_Q6_K_AVX2_ONLY 0   // 1: the AVX2 body on an AVX-512 CPU too (scripts/tiled_rows.cpp measures it)
#endif
static bool use_avx512() {
    static const bool wide = !PR_Q6_K_AVX2_ONLY && cpu_has_avx512();
    return wide;
}

// The most rows the tiled-sum kernel takes: its AVX2 body's tiles of 8 columns read a weight row
// twice from 9 rows on and lose to ggml from 12 (8960 x 1536: 1.37x at 8 rows, 1.09x at 9, 0.92x at
// 12); the AVX-512 body's tiles beat it to 24 rows (at 32, with tiles within L1, the 1.5B's verify
// steps 1.03x on a Zen 4: not taken, as the AMX Xeon's 32 rows were not faster on every matrix).
int q6_k_tiled_max_rows() { return use_avx512() ? 24 : 8; }

// dst = w * xq (xq: x quantized to Q8_K by ggml's CPU copy, as its own product quantizes it). Each
// thread takes a range of weight rows for every group of columns.
template <sum_kind K>
static void compute(ggml_tensor * dst, int ith, int nth) {
    const bool wide = use_avx512();
    const ggml_tensor * w = dst->src[0];
    const ggml_tensor * xq = dst->src[1];
    const int nb = (int) (w->ne[0] / 256);
    const int64_t M = w->ne[1], N = xq->ne[1];
    const int64_t r0 = M * ith / nth, r1 = M * (ith + 1) / nth;
    const int64_t ldo = dst->nb[1] / (int64_t) sizeof(float);
    const int tile = cols(wide, nb, N);
    for (int64_t c0 = 0; c0 < N; c0 += tile) {
        const int n = (int) std::min<int64_t>(tile, N - c0);
        const block_q8_K * y[COLS];
        for (int c = 0; c < COLS; c++) y[c] = (const block_q8_K *) ((const char *) xq->data + std::min<int64_t>(c0 + c, N - 1) * xq->nb[1]);
        // (the dot product's kernel takes at most 7 rows: tiles of 8 columns)
        const row_fn f = wide ? pick_cols<avx512_cols, K, K == DOT ? 8 : COLS>(n) : pick_cols<avx2_cols, K, COLS_AVX2>(n);
        float * base = (float *) dst->data + c0 * ldo;
        for (int64_t r = r0; r < r1; r++) f(nb, (const block_q6_K *) ((const char *) w->data + r * w->nb[1]), y, base + r, ldo);
    }
}

void q6_k_compute(ggml_tensor * dst, int ith, int nth, void *) { compute<DOT>(dst, ith, nth); }
void q6_k_tiled_fused_compute(ggml_tensor * dst, int ith, int nth, void *) { compute<TILED_FUSED>(dst, ith, nth); }
void q6_k_tiled_split_compute(ggml_tensor * dst, int ith, int nth, void *) { compute<TILED_SPLIT>(dst, ith, nth); }

#else

bool q6_k_cpu_ok() { return false; }
int q6_k_tiled_max_rows() { return 0; }
void q6_k_compute(ggml_tensor *, int, int, void *) {}
void q6_k_tiled_fused_compute(ggml_tensor *, int, int, void *) {}
void q6_k_tiled_split_compute(ggml_tensor *, int, int, void *) {}

#endif  // PR_TILED_X86

}  // namespace pr::tiled
