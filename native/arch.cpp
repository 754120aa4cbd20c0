// Per-architecture tables, read from llama.cpp's loaders and graphs (src/models/*.cpp of the
// llama.cpp that llama-cpp-python 0.3.36 ships). Optional tensors are optional there too.
#include "arch.h"
#include "error.h"
#include "model.h"

namespace pr {

using B = block_weights;

static std::vector<tensor_spec> base_block() {
    return {
        {"attn_norm.weight", &B::attn_norm, dim::embd, dim::one, true, false},
        {"attn_q.weight", &B::wq, dim::embd, dim::q, true, true},
        {"attn_k.weight", &B::wk, dim::embd, dim::kv, true, true},
        {"attn_v.weight", &B::wv, dim::embd, dim::kv, true, true},
        {"attn_output.weight", &B::wo, dim::q, dim::embd, true, true},
        {"ffn_norm.weight", &B::ffn_norm, dim::embd, dim::one, true, false},
        {"ffn_gate.weight", &B::ffn_gate, dim::embd, dim::ff, true, true},
        {"ffn_up.weight", &B::ffn_up, dim::embd, dim::ff, true, true},
        {"ffn_down.weight", &B::ffn_down, dim::ff, dim::embd, true, true},
    };
}

static std::vector<tensor_spec> with(std::vector<tensor_spec> v, std::initializer_list<tensor_spec> more) {
    v.insert(v.end(), more);
    return v;
}

static const tensor_spec qkv_bias[] = {
    {"attn_q.bias", &B::bq, dim::q, dim::one, false, false},
    {"attn_k.bias", &B::bk, dim::kv, dim::one, false, false},
    {"attn_v.bias", &B::bv, dim::kv, dim::one, false, false},
};
static const tensor_spec qk_norm[] = {
    {"attn_q_norm.weight", &B::q_norm, dim::head, dim::one, true, false},
    {"attn_k_norm.weight", &B::k_norm, dim::head, dim::one, true, false},
};

static std::vector<arch_info> make_table() {
    std::vector<arch_info> t;
    // llama (also Mistral 7B and other llama-family files): optional biases as llama.cpp reads them.
    // llama.cpp ignores llama.attention.sliding_window for this architecture, and so do we.
    t.push_back({"llama", GGML_ROPE_TYPE_NORMAL, ffn_act::silu, false, false, true, false, false, false, false, true, 0,
                 with(base_block(), {qkv_bias[0], qkv_bias[1], qkv_bias[2],
                                     {"attn_output.bias", &B::bo, dim::embd, dim::one, false, false},
                                     {"ffn_gate.bias", &B::ffn_gate_b, dim::ff, dim::one, false, false},
                                     {"ffn_up.bias", &B::ffn_up_b, dim::ff, dim::one, false, false},
                                     {"ffn_down.bias", &B::ffn_down_b, dim::embd, dim::one, false, false}})});
    // qwen2 (Qwen2, Qwen2.5): biases on Q, K, V; NEOX RoPE; an optional output bias.
    t.push_back({"qwen2", GGML_ROPE_TYPE_NEOX, ffn_act::silu, false, false, false, false, false, true, true, true, 0,
                 with(base_block(), {qkv_bias[0], qkv_bias[1], qkv_bias[2]})});
    // qwen3: RMS norms on Q and K per head, before RoPE.
    t.push_back({"qwen3", GGML_ROPE_TYPE_NEOX, ffn_act::silu, false, false, false, false, false, false, false, true, 0,
                 with(base_block(), {qk_norm[0], qk_norm[1]})});
    // gemma3: scaled embeddings, Q/K norms, post-norms, GeGLU, sliding-window layers (5 of 6 by
    // default) with their own RoPE base, optional final logit soft-capping. The GGUF converter
    // folds Gemma's (1 + w) into the norm weights, so they multiply as stored.
    t.push_back({"gemma3", GGML_ROPE_TYPE_NEOX, ffn_act::gelu, true, true, false, true, true, false, false, false, 6,
                 with(base_block(), {qk_norm[0], qk_norm[1],
                                     {"post_attention_norm.weight", &B::attn_post_norm, dim::embd, dim::one, true, false},
                                     {"post_ffw_norm.weight", &B::ffn_post_norm, dim::embd, dim::one, true, false}})});
    return t;
}

const arch_info & find_arch(const std::string & name) {
    static const std::vector<arch_info> table = make_table();
    std::string names;
    for (const arch_info & a : table) {
        if (name == a.name) return a;
        names += names.empty() ? a.name : std::string(", ") + a.name;
    }
    fail(PR_ERR_MODEL, "unsupported architecture '%s' (supported: %s)", name.c_str(), names.c_str());
}

} // namespace pr
