// What the x86 tiled kernels (q4_1_gemm.cpp, q6_k_gemm.cpp) share: their target attributes (built
// for every x86 CPU, run after a runtime check), that check, and ggml's horizontal sum of 8 floats,
// in its order.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PR_TILED_X86 1

#define PR_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PR_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace pr::tiled {

// Whether this CPU runs the PR_AVX2 code.
static inline bool cpu_has_avx2() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

// ggml-cpu/arch/x86's hsum_float_8
PR_AVX2 static inline float hsum_float_8(__m256 x) {
    __m128 res = _mm256_extractf128_ps(x, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    return _mm_cvtss_f32(res);
}

}  // namespace pr::tiled

#endif
