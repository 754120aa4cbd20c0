// A quantized matrix times several tokens on the CPU, in tiles, where ggml computes each output as
// its own dot product: Q4_1 (no multi-row kernel on x86: no tinyBLAS case, no repack) and Q6_K under
// 8 rows (its tiled K-quant kernel starts at 8), so a step of k tokens cost k times a token's
// products; and Q6_K from 8 to 24 rows, where ggml's tiled kernel is slower than a tile of one weight
// row by 8 or 16 columns; and Q4_K as ggml repacks it, 2 to 64 rows, where its 4-row GEMM and one-row
// GEMV each read the weights again. The kernels (tiled_kernels.h) reuse each unpacked weight block for several rows
// and keep the arithmetic of ggml's product per output (the same lanes, the same order), so their bits
// are ggml's, and a probe at the first context checks that they are.
#pragma once

#include <ggml.h>
#include <ggml-backend.h>

#include <cstdint>

namespace pr {

// Once per process, on the CPU backend: for each kernel, whether it gives ggml's bits here (the CPU
// has its instructions, and the ggml in use agrees on a random probe). Until then none is used.
void tiled_gemm_probe(ggml_backend_t cpu);

// w * x through a tiled kernel where one applies: w a 2-D matrix of a kernel's type in a plain CPU
// buffer (the file's layout; Q4_K's: ggml's CPU_REPACK buffer, repacked), x contiguous F32 rows, two or more of them and no more than ggml's
// per-output path takes (fewer than 32 where a GPU is registered: from 32 ggml's scheduler gives the
// product to the GPU), the probe passed and the debug switch on; in a batch-invariant step only a
// kernel with a one-row product's bits. Else nullptr (use ggml_mul_mat).
ggml_tensor * tiled_gemm(ggml_context * ctx, ggml_tensor * w, ggml_tensor * x, bool batch_invariant);

// The debug switch of type's kernels (pr_debug_tiled_gemm): -1 asks; 0 or 1 sets it for graphs built
// from then on. Returns how many of them graphs built from then on use (the switch and the probes).
int tiled_gemm_switch(ggml_type type, int on);
// Products type's kernels computed in this process (the probes' included).
int64_t tiled_gemm_runs(ggml_type type);
// The kernels' revision, raised whenever one gets faster or takes other rows: a step cost measured
// under an earlier one (a verify-cost table, the prompt layouts' threshold) is not this library's.
int tiled_gemm_revision();

}  // namespace pr
