/* pyriver testing and benchmark knobs: not part of the product API (pyriver.h), kept stable only
 * for pyriver's own tests and benchmarks. Errors as in pyriver.h.
 *
 * The region between the CDEF markers is parsed by cffi after pyriver.h's: no preprocessor lines
 * inside it.
 */
#ifndef PYRIVER_DEBUG_H
#define PYRIVER_DEBUG_H

#include "pyriver.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */
typedef struct {
    int32_t force_exit_layer; /* >= 0: every token exits after this block */
    int32_t check_chunk;      /* blocks per graph after min_exit_layer; 0: 2 on the CPU, 8 over RPC, 16 on a GPU */
    int32_t host_checks;      /* -1: automatic (host for one token on the CPU); 0: always in the graph */
    int32_t device_carry;     /* -1: a token's hidden state stays on the device between graphs when every
                                 block is on one non-CPU device; 0: through the host */
    int32_t predict;          /* 1: the first graph runs to the previous token's exit block */
} pr_exit_debug_params;

PR_API pr_exit_debug_params pr_exit_debug_default_params(void);
/* The exit rule with its knobs, set at once (nothing changes when either part is refused). */
PR_API pr_status pr_context_set_exit_debug(pr_context * ctx, const pr_exit_params * params,
                                           const pr_exit_debug_params * knobs);
/* For each token of the last pr_decode under exit_rule 1 or 2: the first backbone block at or above tau
 * among those it ran (n_layer-1: none, it ran at full depth; -1: none, its backbone ended at a forecast
 * that was too early, or no forecast), as pr_exit_layers. */
PR_API int32_t   pr_exit_observed(const pr_context * ctx, int32_t * out, int32_t n_max);
/* Graphs computed since the context was created (the cost of the exit checks). */
PR_API int64_t   pr_graph_runs(const pr_context * ctx);
/* Distinct tensors through which the last computed graph's ops read its inputs (an input, or a view
 * of one). With the blocks on a device other than the CPU, where inputs live, the scheduler copies
 * each of them there once a graph: it should not grow with the number of blocks. */
PR_API int32_t   pr_graph_input_reads(const pr_context * ctx);
/* What the context's steps cost a GPU, counted on any device (native/counters.cpp):
 *   graphs            graphs computed
 *   graph_changes     of those, graphs ggml-cuda finds changed against the last graph it ran with
 *                     the same first node (ggml_cuda_graph_update_required: node count, each node's
 *                     whole ggml_tensor, its sources' data pointers, ne and nb): run without a CUDA
 *                     graph, then captured anew; only from the first pr_context_counters_reset on
 *   graph_captures    graphs ggml-cuda would capture (the first unchanged run after a change)
 *   nodes             nodes of the computed graphs
 *   syncs             host synchronizations: waits for a computed graph, each read of a result
 *                     (logits, exit similarities, hidden states, embeddings) after the first of a graph
 *   host_bytes        device-to-host bytes read
 *   host_bytes_pinned of those, bytes into the context's output buffer, of its GPU's host buffer type
 *                     (pinned memory; without a GPU the same buffer of the CPU backend's type: see
 *                     pr_context_output_buffer)
 *   reads             device-to-host copies (queued ones and blocking ones) */
typedef struct {
    int64_t graphs;
    int64_t graph_changes;
    int64_t graph_captures;
    int64_t nodes;
    int64_t syncs;
    int64_t host_bytes;
    int64_t host_bytes_pinned;
    int64_t reads;
} pr_counters;

PR_API pr_status pr_context_counters(const pr_context * ctx, pr_counters * out);
/* Zeroes the counters; the first call also starts comparing graphs (graphs already seen are kept). */
PR_API pr_status pr_context_counters_reset(pr_context * ctx);
/* The buffer type of the context's output buffer (the rows of logits and the exit similarities a step
 * reads back; llama.cpp's output buffer): its name, and in *pinned 1 when it is a GPU's host buffer
 * type (pinned memory), 0 when it is the CPU backend's (no GPU: what a GPU's would hold). NULL on error. */
PR_API const char * pr_context_output_buffer(const pr_context * ctx, int32_t * pinned);
/* Fills every cache slot with a value (NaN proves that no unwritten slot is read). */
PR_API pr_status pr_kv_fill(pr_context * ctx, float value);
/* The block placement arithmetic alone: the device index (0..n_devices-1, or -1 for the CPU) of
 * each of n_layer blocks and then of the head (n_layer + 1 entries in out), for n_gpu_layers and
 * the devices' shares (n_devices values, not all zero). */
PR_API pr_status pr_place_layers(int32_t n_layer, int32_t n_gpu_layers, int32_t n_devices, const float * shares,
                                 int32_t * out);
/* Matrices the model joined at load (Q/K/V, gate/up of a CPU block: one product instead of several). */
PR_API int32_t   pr_model_joined(const pr_model * model);
/* The tiled product of several tokens (tiled_gemm.h) of matrices of a type ("q4_1", "q6_K") in
 * graphs built from now on: on 1, off 0, -1 only asks. Returns how many of the type's kernels are used
 * (the switch, and probes that found ggml's bits; Q6_K has one for 2 to 7 rows, one for 8 to 24). */
PR_API int32_t   pr_debug_tiled_gemm(const char * type, int32_t on);
/* Products the tiled kernels of a type computed in this process. */
PR_API int64_t   pr_debug_tiled_gemm_runs(const char * type);
/* The tiled kernels' revision, raised whenever one gets faster or takes other rows (a step cost
 * measured under an earlier one is not this library's). */
PR_API int32_t   pr_debug_tiled_gemm_revision(void);
/* CDEF END */

#ifdef __cplusplus
}
#endif

#endif /* PYRIVER_DEBUG_H */
