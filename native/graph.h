// Compute graphs. A block is one unit (build_block); a graph is a path of blocks, one per layer,
// each taken from the backbone or, once River exits, from the river. Graphs are reused while their
// shape and path stay the same: only the input tensors change between tokens.
#pragma once

#include "kv_cache.h"

namespace pr {

struct graph_shape {
    bool flash_attn = false;
    int n_tokens = 0;
    int n_kv = 0;       // cache rows attended to (a multiple of kv_pad, or n_ctx)
    int n_outputs = 0;  // rows of logits; 0 = no head
    bool operator==(const graph_shape & o) const {
        return flash_attn == o.flash_attn && n_tokens == o.n_tokens && n_kv == o.n_kv && n_outputs == o.n_outputs;
    }
};

struct graph_inputs {
    ggml_tensor * tokens = nullptr;  // I32 [n_tokens]
    ggml_tensor * pos = nullptr;     // I32 [n_tokens]
    ggml_tensor * kv_idx = nullptr;  // I64 [n_tokens]: cache row each token writes
    ggml_tensor * v_idx = nullptr;   // I64 [n_embd_v * n_tokens]: element index in a transposed V
    ggml_tensor * mask = nullptr;    // F16 [n_kv, n_tokens]: 0 or -inf
    ggml_tensor * out_ids = nullptr; // I32 [n_outputs]: token rows that get logits
};

using block_path = std::vector<const block_weights *>;  // one entry per layer

struct built_graph {
    graph_shape shape;
    block_path path;
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    graph_inputs in;
    ggml_tensor * logits = nullptr;  // F32 [n_vocab, n_outputs]
    ~built_graph();
};

constexpr int kv_pad = 256;

size_t graph_capacity(const model & m);
built_graph * build_graph(const model & m, const kv_cache & kv, const graph_shape & s, const block_path & path);

} // namespace pr
