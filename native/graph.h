// Compute graphs. A block is one unit (build_block); a graph is a path of blocks, one per layer,
// each taken from the backbone or, once River exits, from the river. Graphs are reused while their
// shape and path stay the same: only the input tensors change between tokens.
#pragma once

#include "kv_cache.h"

namespace pr {

struct graph_shape {
    bool flash_attn = false;
    bool invariant = false;  // every product is one token's (see token_products in graph.cpp)
    int n_tokens = 0;
    int n_kv = 0;       // cache rows attended to (a multiple of kv_pad, or n_ctx)
    int n_outputs = 0;  // rows of logits; 0 = no head
    bool operator==(const graph_shape & o) const {
        return flash_attn == o.flash_attn && invariant == o.invariant && n_tokens == o.n_tokens && n_kv == o.n_kv &&
               n_outputs == o.n_outputs;
    }
};

struct graph_inputs {
    ggml_tensor * tokens = nullptr;  // I32 [n_tokens]
    ggml_tensor * pos = nullptr;     // I32 [n_tokens]
    ggml_tensor * kv_idx = nullptr;  // I64 [n_tokens]: cache row each token writes
    ggml_tensor * v_idx = nullptr;   // I64 [n_embd_v * n_tokens]: element index in a transposed V
    ggml_tensor * mask = nullptr;    // F16 [n_kv, n_tokens]: 0 or -inf
    ggml_tensor * mask_swa = nullptr; // the same within the sliding window (models with one)
    ggml_tensor * out_ids = nullptr; // I32 [n_outputs]: token rows that get logits
    ggml_tensor * attn_scale = nullptr; // F32 [1, 1, n_tokens]: Q's temperature factor (Mistral 3 tuning)
};

// What one graph computes: blocks first..last of the backbone or of the river, starting from the token embeddings
// (first == 0) or from a hidden state given as input; the exit similarity of blocks
// check_first..check_last; the final norm and LM head when it has outputs (needs last == L-1).
struct segment {
    graph_shape shape;
    int first = 0, last = -1;
    bool river = false;              // blocks first..last are the river's (else the backbone's)
    int check_first = 0, check_last = -1;
    bool host_checks = false;        // similarities computed by the caller from hidden outputs
    // Device carry (single-token segments on one device): the hidden state stays in a device
    // buffer between segments instead of a round trip through the host.
    int carry_in = -1;               // >= 0: start from this slot of the carry (first > 0)
    bool carry_out = false;          // write the hidden states the next segment may start from
    bool operator==(const segment & o) const {
        return shape == o.shape && first == o.first && last == o.last && check_first == o.check_first &&
               check_last == o.check_last && host_checks == o.host_checks && river == o.river &&
               carry_in == o.carry_in && carry_out == o.carry_out;
    }
    int n_checks() const { return check_last >= check_first ? check_last - check_first + 1 : 0; }
    bool head() const { return shape.n_outputs > 0; }
};

struct built_graph {
    segment seg;
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    graph_inputs in;
    ggml_tensor * hidden_in = nullptr;       // F32 [n_embd, n_tokens] when first > 0
    ggml_tensor * checks = nullptr;          // F32 [1, n_tokens, n_checks]: cos(block input, output)
    std::vector<ggml_tensor *> hidden_out;   // F32 [n_embd, n_tokens] after each checked block
    ggml_tensor * check_in = nullptr;        // F32 [n_embd, n_tokens] into the first checked block
    ggml_tensor * last_hidden = nullptr;     // F32 [n_embd, n_tokens] after block last (no head)
    ggml_tensor * logits = nullptr;          // F32 [n_vocab, n_outputs]
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

size_t graph_capacity(const model & m);
built_graph * build_graph(const model & m, const kv_cache & kv, const segment & seg, const device_carry * carry);

} // namespace pr
