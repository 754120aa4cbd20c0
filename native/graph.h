// Compute graphs. A block is one unit (build_block); a graph runs one or more lanes, each a set of
// tokens going through a range of blocks of the backbone or of the river (with several sequences
// in a step, tokens that left the backbone run beside those that did not). Graphs are reused while
// their shape stays the same: only the input tensors change between steps.
#pragma once

#include "kv_cache.h"

namespace pr {

// One sequence's tokens in a lane: consecutive token rows, at consecutive positions at the end of
// the sequence. Their attention reads the first n_kv rows of the sequence's region only.
struct seq_group {
    int seq = 0;
    int n_tokens = 0;
    int n_kv = 0;       // rows attended to (a multiple of kv_pad, or the region's length)
    bool verify = false;   // a lossless verify step (PR_VERIFY): may attend through the tiled kernel (graph_shape)
    bool operator==(const seq_group & o) const {
        return seq == o.seq && n_tokens == o.n_tokens && n_kv == o.n_kv && verify == o.verify;
    }
};

// Tokens that run blocks first..last of the backbone or of the river together, starting from the
// token embeddings (first == 0) or from a hidden state given as input; with the exit similarity of
// blocks check_first..check_last; the final norm and LM head when the lane has outputs (last == L-1).
struct lane {
    std::vector<seq_group> groups;
    int first = 0, last = -1;
    bool river = false;
    int river_from = -1;  // > first: the backbone until this block, the river from it on (a predicted exit, one graph)
    int check_first = 0, check_last = -1;
    int n_outputs = 0;  // rows of logits; 0 = no head
    bool operator==(const lane & o) const {
        return groups == o.groups && first == o.first && last == o.last && river == o.river && river_from == o.river_from &&
               check_first == o.check_first && check_last == o.check_last && n_outputs == o.n_outputs;
    }
    bool on_river(int il) const { return river || (river_from >= 0 && il >= river_from); }
    int n_tokens() const;
    int n_checks() const { return check_last >= check_first ? check_last - check_first + 1 : 0; }
    bool head() const { return n_outputs > 0; }
};

struct graph_shape {
    bool flash_attn = false;
    bool invariant = false;  // every product is one token's (see linear in graph.cpp)
    int wide_prompt_rows = 16;   // with batch_layout, prompt steps of more rows read the file's layout (wide in graph.cpp)
    int verify_tile_rows = 0;    // > 0: verify groups of this many tokens or more attend tiled (tiled_attention in graph.cpp)
    bool operator==(const graph_shape & o) const {
        return flash_attn == o.flash_attn && invariant == o.invariant && wide_prompt_rows == o.wide_prompt_rows &&
               verify_tile_rows == o.verify_tile_rows;
    }
};

// What one graph computes: its lanes (one for a single-sequence step). Device carry (one lane of one
// token on one device): the hidden state stays in a device buffer between segments instead of a
// round trip through the host.
struct segment {
    graph_shape shape;
    std::vector<lane> lanes;
    bool host_checks = false;        // similarities computed by the caller from hidden outputs
    int carry_in = -1;               // >= 0: start from this slot of the carry (first > 0)
    bool carry_out = false;          // write the hidden states the next segment may start from
    bool embd = false;               // the head stops at the final norm: its output rows are embeddings, no logits
    bool operator==(const segment & o) const {
        return shape == o.shape && lanes == o.lanes && host_checks == o.host_checks && carry_in == o.carry_in &&
               carry_out == o.carry_out && embd == o.embd;
    }
    int n_tokens() const;
    int n_outputs() const;
    bool head() const { return n_outputs() > 0; }
    const lane & one() const { return lanes[0]; }   // the lane of a single-lane segment
};

// One attention product of a lane: group `group` and the n_seq-1 one-token groups after it, of
// consecutive sequences with the same n_kv (n_seq > 1 only with a transposed V), from token t0,
// with the views of the masks it reads. Made once a graph and read by every block: the scheduler
// copies each distinct tensor that a block on another device reads, so one view a block cost a
// copy a block (28 a decode step on the Qwen2.5 1.5B on CUDA, 0.9x llama.cpp's decode).
struct attn_run {
    int group = 0, n_seq = 1, t0 = 0;
    bool one_query = false;   // a group of several tokens computed one query a product (batch invariance)
    ggml_tensor * mask = nullptr, * mask_swa = nullptr;
};

struct graph_inputs {
    ggml_tensor * tokens = nullptr;  // I32 [n_tokens]
    ggml_tensor * pos = nullptr;     // I32 [n_tokens]
    ggml_tensor * kv_idx = nullptr;  // I64 [n_tokens]: cache row each token writes
    ggml_tensor * v_idx = nullptr;   // I64 [n_embd_v * n_tokens]: element index in a transposed V
    ggml_tensor * mask = nullptr;    // F16, the groups' masks back to back ([n_kv, n_tokens] each): 0 or -inf
    ggml_tensor * mask_swa = nullptr; // the same within the sliding window (models with one)
    ggml_tensor * out_ids = nullptr; // I32 [n_outputs]: token rows that get logits
    ggml_tensor * attn_scale = nullptr; // F32 [1, 1, n_tokens]: Q's temperature factor (Mistral 3 tuning)
    std::vector<attn_run> runs;          // the lane's groups as attention products, in token order
};

// One lane's tensors in a built graph.
struct lane_io {
    graph_inputs in;
    ggml_tensor * hidden_in = nullptr;       // F32 [n_embd, n_tokens] when first > 0
    ggml_tensor * checks = nullptr;          // F32 [1, n_tokens, n_checks]: cos(block input, output)
    std::vector<ggml_tensor *> hidden_out;   // F32 [n_embd, n_tokens] after each checked block
    ggml_tensor * check_in = nullptr;        // F32 [n_embd, n_tokens] into the first checked block
    ggml_tensor * last_hidden = nullptr;     // F32 [n_embd, n_tokens] after block last (no head)
};

struct built_graph {
    segment seg;
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    std::vector<lane_io> lanes;
    ggml_tensor * logits = nullptr;          // F32 [n_vocab, n_outputs]: the lanes' outputs in lane order
    ggml_tensor * embd = nullptr;            // F32 [n_embd, n_outputs] instead, after the final norm (seg.embd)
    int input_reads = 0;                     // distinct tensors its ops read inputs through (input_reads())
    ~built_graph();
};

constexpr int kv_pad = 256;

// Hidden states of one token kept on the device between the segments of a step: slot 0 is the
// input of the first checked block (or the last hidden state of a segment without checks), slot
// k + 1 the output of checked block k.
struct device_carry {
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buf = nullptr;
    ggml_tensor * t = nullptr;       // F32 [n_embd, 1, n_layer + 1]
    device_carry(const model & m, ggml_backend_dev_t dev);
    ~device_carry();
    device_carry(const device_carry &) = delete;
    device_carry & operator=(const device_carry &) = delete;
};

// Nodes a graph of n_lanes lanes over n_groups sequence groups in all may need.
size_t graph_capacity(const model & m, int n_lanes, int n_groups);
built_graph * build_graph(const model & m, const kv_cache & kv, const segment & seg, const device_carry * carry);
// x's rows of rot's size times the Hadamard matrix rot (llama-impl.h's llama_mul_mat_hadamard).
ggml_tensor * hadamard(ggml_context * ctx, ggml_tensor * x, ggml_tensor * rot);

} // namespace pr
