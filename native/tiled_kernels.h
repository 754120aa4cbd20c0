// The tiled kernels behind tiled_gemm.h, each a ggml custom op: dst (F32, M x N) = w * xq, with xq
// the rows quantized by ggml's CPU copy to the type ggml's own product quantizes them to.
#pragma once

#include <ggml.h>

namespace pr::tiled {

// Q4_1 times Q8_1 rows (q4_1_gemm.cpp): an x86 CPU with AVX2, FMA and F16C.
bool q4_1_cpu_ok();
void q4_1_compute(ggml_tensor * dst, int ith, int nth, void * userdata);

// Q6_K times Q8_K rows (q6_k_gemm.cpp): AVX2, FMA and F16C; AVX-512 (BW, VL, VNNI) where present.
// Each output with the bits of ggml's product of 1 to 7 rows (its dot product: q6_k_compute) or of
// 8 or more (its tiled kernel, its last product and sum fused or not, as its compiler built it).
bool q6_k_cpu_ok();
int q6_k_tiled_max_rows();   // the tiled-sum kernels' most rows on this CPU (past them ggml's own is faster)
void q6_k_compute(ggml_tensor * dst, int ith, int nth, void * userdata);
void q6_k_tiled_fused_compute(ggml_tensor * dst, int ith, int nth, void * userdata);
void q6_k_tiled_split_compute(ggml_tensor * dst, int ith, int nth, void * userdata);

// Q4_K, repacked by ggml (CPU_REPACK, 8x8), times Q8_K rows (q4_k_gemm.cpp): AVX-512 (BW, VL, VNNI).
// Each output with the bits of ggml's repacked product of as many rows (its GEMM for the first
// 4*floor(R/4) rows, its GEMV for the rest). dst's one source is xq; userdata is the matrix (not a
// source: tiled_gemm.cpp, bind).
bool q4_k_cpu_ok();
void q4_k_compute(ggml_tensor * dst, int ith, int nth, void * userdata);

}  // namespace pr::tiled
