// Per-architecture tables, read from llama.cpp's loaders and graphs (src/models/*.cpp of the
// llama.cpp that llama-cpp-python 0.3.36 ships). Optional tensors are optional there too.
#include "arch.h"
#include "block_weights.h"
#include "error.h"

namespace pr {

using B = block_weights;
using M = ggml_tensor * B::*;

static tensor_spec vec(const char * name, M m, dim d, need r = need::required) {
    return {name, m, d, dim::one, r, false};
}
static tensor_spec mat(const char * name, M m, dim d0, dim d1, need r = need::required) {
    return {name, m, d0, d1, r, true};
}
// The experts of a mixture: one matrix of d0 x d1 per expert, stacked (ffn_*_exps).
static tensor_spec experts(const char * name, M m, dim d0, dim d1) {
    return {name, m, d0, d1, need::required, true, dim::expert};
}

// One block as llama.cpp's create_tensor_qkv and FFN loaders read it, in file order: the
// attention's Q/K/V either fused (attn_qkv, split by views in the graph) or separate, each with
// optional biases; then the FFN of the given kind. pre_norms: attn_norm and ffn_norm (OLMo 2 has
// norms after attention and FFN instead).
static std::vector<tensor_spec> block(ffn_kind ffn, bool pre_norms = true) {
    // A fused attn_qkv only where the converters write one (Phi-3).
    const bool fused = ffn == ffn_kind::fused;
    const need sep = fused ? need::qkv : need::required;
    std::vector<tensor_spec> v;
    if (pre_norms) v.push_back(vec("attn_norm.weight", &B::attn_norm, dim::embd));
    if (fused) v.push_back(mat("attn_qkv.weight", &B::wqkv, dim::embd, dim::qkv, need::optional));
    v.push_back(mat("attn_q.weight", &B::wq, dim::embd, dim::q, sep));
    v.push_back(mat("attn_k.weight", &B::wk, dim::embd, dim::kv, sep));
    v.push_back(mat("attn_v.weight", &B::wv, dim::embd, dim::kv, sep));
    v.push_back(mat("attn_output.weight", &B::wo, dim::q, dim::embd));
    if (pre_norms) v.push_back(vec("ffn_norm.weight", &B::ffn_norm, dim::embd));
    switch (ffn) {
        case ffn_kind::gated:
            v.push_back(mat("ffn_gate.weight", &B::ffn_gate, dim::embd, dim::ff));
            v.push_back(mat("ffn_up.weight", &B::ffn_up, dim::embd, dim::ff));
            v.push_back(mat("ffn_down.weight", &B::ffn_down, dim::ff, dim::embd));
            break;
        case ffn_kind::fused:
            v.push_back(mat("ffn_up.weight", &B::ffn_up, dim::embd, dim::ff2));
            v.push_back(mat("ffn_down.weight", &B::ffn_down, dim::ff, dim::embd));
            break;
        case ffn_kind::moe: {
            // The router stays the backbone's in a river: a river token picks the experts the
            // backbone would pick from the same input, and the router is a sliver of the bytes.
            tensor_spec router = mat("ffn_gate_inp.weight", &B::ffn_gate_inp, dim::embd, dim::expert);
            router.river = false;
            v.push_back(router);
            v.push_back(experts("ffn_gate_exps.weight", &B::ffn_gate_exps, dim::embd, dim::ff_exp));
            v.push_back(experts("ffn_down_exps.weight", &B::ffn_down_exps, dim::ff_exp, dim::embd));
            v.push_back(experts("ffn_up_exps.weight", &B::ffn_up_exps, dim::embd, dim::ff_exp));
            break;
        }
    }
    if (fused) v.push_back(vec("attn_qkv.bias", &B::bqkv, dim::qkv, need::optional));
    v.push_back(vec("attn_q.bias", &B::bq, dim::q, need::optional));
    v.push_back(vec("attn_k.bias", &B::bk, dim::kv, need::optional));
    v.push_back(vec("attn_v.bias", &B::bv, dim::kv, need::optional));
    return v;
}

static std::vector<tensor_spec> with(std::vector<tensor_spec> v, std::initializer_list<tensor_spec> more) {
    v.insert(v.end(), more);
    return v;
}

static const tensor_spec qk_norm_head[] = {
    vec("attn_q_norm.weight", &B::q_norm, dim::head),
    vec("attn_k_norm.weight", &B::k_norm, dim::head),
};
static const tensor_spec post_norms[] = {
    vec("post_attention_norm.weight", &B::attn_post_norm, dim::embd),
    vec("post_ffw_norm.weight", &B::ffn_post_norm, dim::embd),
};
// The optional output and FFN biases llama.cpp's llama and Mistral 3 loaders read.
static std::vector<tensor_spec> llama_biases(std::vector<tensor_spec> v) {
    return with(std::move(v), {vec("attn_output.bias", &B::bo, dim::embd, need::optional),
                               vec("ffn_gate.bias", &B::ffn_gate_b, dim::ff, need::optional),
                               vec("ffn_up.bias", &B::ffn_up_b, dim::ff, need::optional),
                               vec("ffn_down.bias", &B::ffn_down_b, dim::embd, need::optional)});
}

// An entry: its name, RoPE type and block; the switches that differ from arch_info's defaults are
// set by the caller, a line per concern.
static arch_info entry(const char * name, int rope_type, std::vector<tensor_spec> blk) {
    arch_info a;
    a.name = name;
    a.rope_type = rope_type;
    a.block = std::move(blk);
    return a;
}

static std::vector<arch_info> make_table() {
    const int NORM = GGML_ROPE_TYPE_NORMAL, NEOX = GGML_ROPE_TYPE_NEOX;
    std::vector<arch_info> t;

    // llama (also Mistral 7B and other llama-family files): optional biases as llama.cpp reads them.
    // llama.cpp ignores llama.attention.sliding_window for this architecture, and so do we.
    t.push_back(entry("llama", NORM, llama_biases(block(ffn_kind::gated))));
    t.back().rope_freqs = t.back().rot_is_head = true;

    // qwen2 (Qwen2, Qwen2.5): biases on Q, K, V; NEOX RoPE; an optional output bias.
    t.push_back(entry("qwen2", NEOX, block(ffn_kind::gated)));
    t.back().output_bias = t.back().q_is_embd = t.back().rot_is_head = true;

    // qwen3: RMS norms on Q and K per head, before RoPE.
    t.push_back(entry("qwen3", NEOX, with(block(ffn_kind::gated), {qk_norm_head[0], qk_norm_head[1]})));
    t.back().rot_is_head = true;

    // gemma3: scaled embeddings, Q/K norms, post-norms, GeGLU, sliding-window layers (5 of 6 by
    // default) with their own RoPE base, optional final logit soft-capping. The GGUF converter
    // folds Gemma's (1 + w) into the norm weights, so they multiply as stored.
    t.push_back(entry("gemma3", NEOX, with(block(ffn_kind::gated), {qk_norm_head[0], qk_norm_head[1], post_norms[0], post_norms[1]})));
    {
        arch_info & a = t.back();
        a.act = ffn_act::gelu;
        a.embd_scale = a.q_prescale = a.final_softcap = true;
        a.q_scale_embd_layers = 62;
        a.swa = swa_kind::optional, a.swa_pattern = 6;
    }

    // mistral3 (Ministral 3, Mistral Small 3 text models): llama's block; YaRN with its own beta
    // and log-multiplier keys; Llama 4 attention temperature tuning when the file has
    // attention.temperature_scale; LongRoPE factors when its scaling type is longrope, else
    // optional Llama 3 frequency factors. (llama.cpp's mixture-of-experts branch of this loader
    // is not supported: a file with expert_count > 0 is refused.)
    t.push_back(entry("mistral3", NORM, llama_biases(block(ffn_kind::gated))));
    {
        arch_info & a = t.back();
        a.rope_freqs = a.rope_long_short = a.longrope_only = a.rot_is_head = true;
        a.attn_temp = a.yarn_keys = true;
    }

    // gemma2: scaled embeddings, post-norms, GeGLU, Q scaled by 1/sqrt(head) (1/sqrt(n_embd/n_head)
    // for the 27B's 46 layers), attention logits soft-capped (50 by default) and final logits
    // soft-capped (30 by default), always; every other layer slides over a window (4096 by
    // default) with the global RoPE base and scale unless the file gives its own base. The head
    // is always the embedding table (llama.cpp does not read output.weight).
    t.push_back(entry("gemma2", NEOX, with(block(ffn_kind::gated), {post_norms[0], post_norms[1]})));
    {
        arch_info & a = t.back();
        a.act = ffn_act::gelu;
        a.output = head_out::tied;
        a.embd_scale = a.q_prescale = a.final_softcap = true;
        a.q_scale_embd_layers = 46;
        a.swa = swa_kind::always, a.swa_pattern = 2, a.swa_base_is_global = a.swa_scale_trained = true;
        a.final_softcap_default = 30.0f, a.attn_softcap_default = 50.0f;
    }

    // smollm3: llama's block; every 4th layer (il % 4 == 3) attends without RoPE. llama.cpp fixes
    // the interval at 4 (SmolLM3's no_rope_layer_interval; the converter writes no key for it).
    t.push_back(entry("smollm3", NORM, block(ffn_kind::gated)));
    t.back().rot_is_head = true;
    t.back().nope_interval = 4;

    // olmo2 (OLMo 2; OLMo 3 with its sliding window): no pre-norms, norms after attention and
    // FFN instead; RMS norms on Q and K over the whole projection; an untied head. Sliding-window
    // layers (3 of 4 by default) rotate with the global base, unscaled.
    t.push_back(entry("olmo2", NEOX, with(block(ffn_kind::gated, false), {vec("attn_q_norm.weight", &B::q_norm, dim::q),
                                                                         vec("attn_k_norm.weight", &B::k_norm, dim::kv),
                                                                         post_norms[0], post_norms[1]})));
    {
        arch_info & a = t.back();
        a.output = head_out::required;
        a.q_is_embd = a.rot_is_head = a.qk_norm_full = true;
        a.swa = swa_kind::optional, a.swa_pattern = 4, a.swa_plain_rope = true;
    }

    // phi3 (Phi-3, Phi-3.5, Phi-4 mini): fused attn_qkv (or separate Q/K/V), one ffn_up of 2 x n_ff
    // whose first half is the gate, partial rotary dimension, LongRoPE factors (long when the
    // context is longer than the original one), Q scaled before attention. llama.cpp disables
    // Phi's sliding window ("Phi SWA is currently disabled"): the key is ignored, here too.
    t.push_back(entry("phi3", NEOX, block(ffn_kind::fused)));
    t.back().q_prescale = t.back().q_is_embd = t.back().rope_long_short = true;

    // qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention; the FFN is a mixture of
    // experts: a softmax router picks expert_used_count of expert_count SwiGLU experts per token,
    // their weights normalized to sum to 1, as llama.cpp's build_moe_ffn for this arch.
    t.push_back(entry("qwen3moe", NEOX, with(block(ffn_kind::moe), {qk_norm_head[0], qk_norm_head[1]})));
    t.back().rot_is_head = t.back().moe = true;
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
