// A Q4_1 matrix times two or more rows on the CPU, tiled. ggml's CPU has no multi-row kernel for
// Q4_1 (no tinyBLAS, no repack): it computes each output as its own dot product, so a step of k
// tokens costs k times a token's products. The tiled kernel reuses each unpacked weight block for
// several rows and each activation block for several weight rows, and keeps ggml's arithmetic per
// output (its x86 dot-product loop: the same lanes, the same order), so its bits are ggml's.
#pragma once

#include <ggml.h>
#include <ggml-backend.h>

#include <cstdint>

namespace pr {

// Once per process, on the CPU backend: whether the kernel gives ggml's bits here (an x86 CPU with
// AVX2, FMA and F16C, and the ggml in use agreeing on a random probe). Until then it is not used.
void q4_1_gemm_probe(ggml_backend_t cpu);

// w * x through the tiled kernel where it applies: w a 2-D Q4_1 matrix in a plain CPU buffer (the
// file's layout), x contiguous F32 rows, two or more of them (fewer than 32 where a GPU is
// registered: from 32 ggml's scheduler gives the product to the GPU), the probe passed and the
// debug switch on. Else nullptr (the caller uses ggml_mul_mat).
ggml_tensor * q4_1_gemm(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x);

// The debug switch (pr_debug_tiled_q4_1): -1 asks; 0 or 1 sets it for graphs built from then on.
// Returns whether graphs built from then on use the kernel (the switch and the probe).
int q4_1_gemm_switch(int on);
// Products the kernel computed in this process (the probe's included).
int64_t q4_1_gemm_runs();

}  // namespace pr
