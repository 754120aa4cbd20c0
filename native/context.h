// A context: one KV cache (a region per sequence), ggml schedulers over the model's devices, graphs,
// logits, and the River exit rule applied token by token.
#pragma once

#include "forecast.h"
#include "graph.h"

#include <list>
#include <memory>
#include <unordered_map>

namespace pr {

// How the decode steps of several sequences in one step leave the backbone (pr_exit_params).
enum class batch_rule { split = 0, minimum = 1, all_may_exit = 2 };

struct exit_rule {
    float tau = 2.0f;          // exit when cos(block in, block out) >= tau; > 1 never exits
    int min_layer = 1;         // first block whose similarity is checked
    int force_layer = -1;      // >= 0: every token leaves the backbone after this block
    bool prefill = false;      // prompts exit too (sequence level: the minimum over the tokens)
    batch_rule batch = batch_rule::split;
    int chunk = 0;             // blocks per graph after min_layer; 0: 2 on the CPU, 8 over RPC, 16 on a GPU
    int host_checks = -1;      // -1: single-token similarities on the host when blocks are on the CPU; 0: in the graph
    int carry = -1;            // -1: a token's hidden state stays on the device between segments (one non-CPU
                               // device); 0: through the host
    bool predict = false;      // the first segment ends at the previous token's exit block
    exit_mode mode = exit_mode::checked;   // how a decode step finds its exit block (forecast.h)
};

// A graph together with the scheduler that holds its allocation. Single-token graphs are kept in
// a small cache (one scheduler each) so that switching between segments costs no re-allocation.
struct graph_slot {
    ggml_backend_sched_t sched = nullptr;
    std::unique_ptr<built_graph> graph;
    ~graph_slot();
};

// What one segment of a step hands to the next: the hidden state after its last block (or its
// exit block) on the host, or the slot of the device carry that holds it.
struct handoff {
    bool use_carry = false;
    std::vector<float> h;
    int slot = -1;
};

// What a step costs a GPU, counted on any device (pr_counters, pyriver_debug.h; counters.cpp).
struct gpu_counts {
    int64_t graphs = 0, graph_changes = 0, graph_captures = 0, nodes = 0;
    int64_t syncs = 0, host_bytes = 0, host_bytes_pinned = 0, reads = 0;
};

// ggml-cuda's record of one CUDA graph (ggml_cuda_graph::node_properties, common.cuh), kept per
// graph key (the graph's first node, ggml_cuda_graph_get_key) to apply its rule on any backend.
struct cuda_graph_record {
    struct node_properties {
        ggml_tensor node;
        void * node_src_data_ptrs[GGML_MAX_SRC];
        int64_t node_src_ne[GGML_MAX_SRC][GGML_MAX_DIMS];
        size_t node_src_nb[GGML_MAX_SRC][GGML_MAX_DIMS];
    };
    std::vector<node_properties> node_props;
    bool warmup_complete = false;
};

// One token of a multi-sequence step (pr_batch), and where it is in the step.
struct batch_token {
    int32_t token = 0, seq = 0, pos = 0;
    bool logits = false;
};

struct context {
    model * m = nullptr;
    pr_context_params params{};
    std::unique_ptr<kv_cache> kv;
    std::vector<ggml_backend_t> backends;  // non-CPU first, CPU last (the scheduler's rule)
    ggml_backend_t cpu = nullptr;
    ggml_backend_set_n_threads_t set_n_threads = nullptr;
    graph_slot main;                       // multi-token graphs, buffers reserved for the largest
    std::list<std::pair<segment, std::unique_ptr<graph_slot>>> small;   // most recent first

    bool batch_invariant = false;          // multi-token steps use one-token products (graph.cpp)
    int wide_prompt_rows = 16;             // prompt steps of more rows read batch_layout's file layout
    int verify_tile_rows = 0;              // verify steps of more tokens attend tiled (graph_shape; 0: never)
    pr_abort_fn abort_fn = nullptr;        // asked between the graphs of one call (pr_context_set_abort_callback)
    void * abort_user = nullptr;
    exit_rule rule;
    std::unique_ptr<device_carry> carry;   // when every block is on one non-CPU device
    int prev_exit = -1;                    // exit block of the last single-token step
    int seq = 0;                           // the sequence of the current single-sequence step
    bool verifying = false;                // ... and whether it is a verify step (PR_VERIFY)
    std::vector<int32_t> exits;            // exit block of each token of the last decode (L-1: none)
    std::vector<exit_forecast> forecasts;  // per sequence: its recent exits (exit_mode predicted, guarded)
    std::vector<int32_t> forecast_of;      // per token of the last decode: its forecast exit block (-1: none)
    std::vector<int32_t> observed;         // ... the first block at tau it ran (L-1: none at full depth; -1: censored)
    int64_t n_graph_runs = 0;              // graphs computed since creation (the cost of checks)
    int last_input_reads = 0;              // the last computed graph's input_reads

    int n_outputs = 0;
    float * out = nullptr;                 // the rows of the last decode: n_outputs x n_vocab in the output buffer
    float * embd = nullptr;                // n_embd_rows x n_embd in the output buffer: the last embed's hidden states after the final norm
    int n_embd_rows = 0;
    // With a GPU: its pinned host memory holds the scheduler's host-side buffers (inputs are copied
    // from it) and the output buffer, as llama.cpp does; copies to and from pageable memory are slower.
    ggml_backend_buffer_type_t host_buft = nullptr;
    // The output buffer (llama.cpp's buf_output, output_reserve): a step's logits rows and then its
    // exit similarities, read from the device in one queued copy each and one wait, or an embed's
    // rows. Allocated from host_buft (pinned) or, without a GPU, the CPU buffer type; grown, never
    // shrunk, to a step's rows.
    ggml_backend_buffer_t outbuf = nullptr;
    float * checks_out = nullptr;          // past the logits rows: room for the step's similarities
    size_t checks_room = 0;                // ... in floats

    // Host synchronizations, graph changes and reads, as a GPU would see them (counters.cpp).
    mutable gpu_counts counts;
    bool compare_graphs = false;           // set by the first pr_context_counters_reset
    std::unordered_map<const void *, cuda_graph_record> cuda_graphs;
    mutable ggml_backend_sched_t pending = nullptr;   // computed asynchronously, not yet waited for

    context(model * m, const pr_context_params & p);
    ~context();

    void decode(int seq, const int32_t * tokens, int n, bool logits_all, int prompt);   // prompt: PR_VERIFY, else != 0
    void embed(int seq, const int32_t * tokens, int n);
    void check_abort();   // between the graphs of one call: abort_fn may stop it (a failure)
    void decode_batch(const std::vector<batch_token> & batch, const std::vector<uint8_t> & prompt);   // as pr_decode_batch's
    void truncate(int seq, int n_keep);
    // Removes positions [p0, p1) of sequence seq: the rows after them move down by p1 - p0, their
    // keys to be rotated to the new positions (llama.cpp's seq_rm + seq_add and K-shift; shift.cpp).
    void drop(int seq, int p0, int p1);
    void apply_shift();   // the recorded deltas rotated into the keys (before any read of the cache)
    void set_rule(const exit_rule & r);
    int used(int s) const { return kv->used[s]; }

    // Shared by the single-sequence and the batch paths (context.cpp).
    struct lane_feed {
        const int32_t * tokens = nullptr;              // a lane that starts at block 0
        const std::vector<float> * hidden = nullptr;   // other lanes (unless the device carry holds it)
        std::vector<int32_t> out_ids;                  // the lane's token rows that get logits
    };
    segment base_segment() const;
    seq_group group_of(int s, int n) const;
    built_graph & compute(const segment & seg, const std::vector<lane_feed> & feeds);
    bool on_cpu(int first, int last) const;
    int chunk_after(int block) const;
    void begin_step(int rows, int tokens); // the step's logits rows and tokens, at most
    void note_tokens(int n, int exit_block, int forecast, int seen);
    void forget_forecast(int s) { forecasts[s].reset(); }
    void check_append(int s, const int32_t * tokens, int n) const;
    // Every read of a device result goes through fetch(): while the graph is in flight it is queued
    // on the device's stream, and settle() waits once for the graph and every read queued after it
    // (one host synchronization, as llama.cpp's read of its logits); after that each read is a
    // blocking copy. read() is fetch() and settle().
    void fetch(ggml_tensor * t, void * dst, size_t offset, size_t size) const;
    void read(ggml_tensor * t, void * dst, size_t offset, size_t size) const;
    void settle() const;                   // waits for a graph still in flight (before touching its buffers)
    void note_graph(ggml_cgraph * gf);     // the graph just launched, against ggml-cuda's rule
    // Room in the output buffer for rows of logits and after_rows floats past them (a step's
    // similarities, an embed's rows; no graph in flight): grown from host_buft as llama.cpp's
    // output_reserve grows its buffer.
    void reserve_outputs(int rows, size_t after_rows);
    bool output_pinned() const { return host_buft != nullptr; }

private:
    ggml_backend_sched_t new_sched(size_t capacity);
    built_graph & graph_for(const segment & seg);
    void set_lane_inputs(const built_graph & g, size_t i, const lane_feed & f);
    void take_logits(const built_graph & g, bool wait = true);
    void run(const int32_t * tokens, int n, int n_out, bool decoding);
    void run_exiting(const int32_t * tokens, int n, int n_out);
    void run_predicted(const int32_t * tokens, int n_out);
    int run_backbone(const int32_t * tokens, int n, int n_out, handoff & ho, int & seen);
    built_graph & run_segment(const segment & seg, const int32_t * tokens, const std::vector<float> * hidden, int n);
    segment chained(segment s, const handoff & ho) const;
    const std::vector<float> * input_of(const segment & s, const handoff & ho) const;
    void hand_on(const built_graph & g, int b, handoff & ho) const;
    segment make_segment(int n, int n_out, int first, int last, bool river_path, int check_first, int check_last) const;
};

// Similarities of the checked blocks of lane i of a graph, [n_checks][n_tokens]: computed on the
// host from its hidden outputs, or read from the graph.
std::vector<float> lane_similarities(const context & c, const built_graph & g, size_t i);
// The read of lane i's similarities computed in the graph, queued into dst (n_checks x n_tokens floats).
void queue_checks(const context & c, const built_graph & g, size_t i, float * dst);
std::vector<float> read_tensor(const context & c, ggml_tensor * t);   // an F32 tensor on the host
void check_tokens(const model & m, const int32_t * tokens, int n);   // ids in the vocabulary

// A saved KV cache of sequence 0 (state.cpp): its size, a copy of it, and putting one back
// (checked against this context first: model, n_ctx, KV layout, length).
size_t state_size(const context & c, int seq);
size_t state_get(context & c, int seq, uint8_t * buf, size_t size);
void state_set(context & c, int seq, const uint8_t * buf, size_t size);

} // namespace pr
