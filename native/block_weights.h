// One decoder block's weights, on their own: arch.cpp's tables point into them, model.h and
// river_blocks.h hold them.
#pragma once

#include "ggml.h"

namespace pr {

// The weights of one decoder block. A river block (issue: the River) is another instance of this
// struct whose matrices are requantized and whose norms point at the backbone's.
// Which of the optional members an architecture has is in its arch_info table (arch.cpp).
struct block_weights {
    ggml_tensor * attn_norm = nullptr;
    ggml_tensor * wq = nullptr, * wk = nullptr, * wv = nullptr, * wo = nullptr;
    ggml_tensor * wqkv = nullptr, * bqkv = nullptr;   // fused Q/K/V (then wq, wk, wv are null)
    ggml_tensor * ffn_norm = nullptr;
    ggml_tensor * ffn_gate = nullptr, * ffn_up = nullptr, * ffn_down = nullptr;
    ggml_tensor * bq = nullptr, * bk = nullptr, * bv = nullptr, * bo = nullptr;   // biases
    ggml_tensor * ffn_gate_b = nullptr, * ffn_up_b = nullptr, * ffn_down_b = nullptr;
    ggml_tensor * q_norm = nullptr, * k_norm = nullptr;                            // per head, or whole (OLMo 2)
    ggml_tensor * attn_post_norm = nullptr, * ffn_post_norm = nullptr;
    ggml_tensor * ffn_gate_inp = nullptr;                                          // MoE router [n_embd, n_expert]
    ggml_tensor * ffn_gate_exps = nullptr, * ffn_up_exps = nullptr, * ffn_down_exps = nullptr;   // [.., .., n_expert]
    // The backbone's Q/K/V (or Q/K alone, when V differs in type; with their biases) and gate/up
    // stacked at load, one product instead of three or two, the same bits (join_projections).
    // The file's matrices above stay descriptors: the river is built from them, but they hold no
    // memory of their own.
    ggml_tensor * qkv_joined = nullptr, * bqkv_joined = nullptr, * gate_up_joined = nullptr;
};

} // namespace pr
