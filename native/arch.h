// The architectures pyriver runs, as data: what each reads from the GGUF (tensors, keys) and the
// few switches the block builder (graph.cpp) branches on. Everything else is the shared block.
#pragma once

#include "ggml.h"

#include <string>
#include <vector>

namespace pr {

struct block_weights;

enum class ffn_act { silu, gelu };                    // gated FFN: SwiGLU or GeGLU (tanh GELU)
enum class ffn_kind {
    gated,    // ffn_gate and ffn_up, n_ff wide each
    fused,    // one ffn_up of 2 x n_ff, gate first (Phi-3: llama.cpp's ggml_swiglu of the whole)
    moe,      // a router and n_expert SwiGLU experts of n_ff_exp, n_expert_used of them per token (Qwen3-MoE)
};
// Tensor extents, resolved from the hparams: q = n_head * head, kv = n_head_kv * head, qkv = q + 2 kv,
// ff2 = 2 n_ff; expert = n_expert, ff_exp = an expert's n_ff_exp.
enum class dim { one, embd, q, kv, ff, head, qkv, ff2, expert, ff_exp };
enum class need {
    required,
    optional,
    qkv,      // required unless the block has a fused attn_qkv.weight (then not read, as in llama.cpp)
};
enum class swa_kind {
    none,     // attention.sliding_window is not read (llama.cpp ignores it for llama and phi3)
    optional, // sliding-window layers when attention.sliding_window > 0 (Gemma 3, OLMo 2 / OLMo 3)
    always,   // always (Gemma 2: a window of 4096 unless the file says otherwise)
};
enum class head_out { optional, required, tied };   // output.weight: may be absent (tied), must be there, never read

struct tensor_spec {
    const char * name;                                // after "blk.N.", e.g. "attn_q.bias"
    ggml_tensor * block_weights::* member;
    dim ne0, ne1;                                     // ne1 == dim::one: a vector
    need req;
    bool matrix;                                      // used by mul_mat (any type), else F32 only
    dim ne2 = dim::one;                               // the experts of a mixture (dim::expert), else one
    bool river = true;                                // a matrix the river requantizes (not a MoE router)
};

struct arch_info {
    const char * name = "";
    int rope_type = GGML_ROPE_TYPE_NORMAL;   // or GGML_ROPE_TYPE_NEOX (llama_model_rope_type)
    ffn_act act = ffn_act::silu;
    head_out output = head_out::optional;
    bool embd_scale = false;    // token embeddings times sqrt(n_embd) (Gemma)
    bool q_prescale = false;    // Q scaled after RoPE, softmax scale 1 (Gemma, Phi-3)
    int q_scale_embd_layers = 0;// with this many layers Q scales by 1/sqrt(n_embd/n_head) (Gemma's 27B)
    bool rope_freqs = false;    // reads rope_freqs.weight (Llama 3.1 frequency factors)
    bool rope_long_short = false;  // reads rope_factors_long/short.weight (LongRoPE: Phi-3; Mistral 3 with "longrope")
    bool longrope_only = false; // the long/short factors only when rope.scaling.type is "longrope" (Mistral 3)
    swa_kind swa = swa_kind::none;
    int swa_pattern = 0;        // default: every swa_pattern-th layer is global
    bool swa_base_is_global = false;   // SWA layers' rope.freq_base_swa defaults to the global base (Gemma 2)
    bool swa_scale_trained = false;    // SWA layers rotate with the trained frequency scale (Gemma 2; Gemma 3: 1)
    bool swa_plain_rope = false;       // SWA layers rotate with the global base, unscaled (OLMo 2 / OLMo 3)
    bool final_softcap = false; // reads final_logit_softcapping
    float final_softcap_default = 0.0f;   // > 0: always applied, this when the key is absent (Gemma 2: 30)
    float attn_softcap_default = 0.0f;    // > 0: attention logits soft-capped, attn_logit_softcapping or this (Gemma 2: 50)
    bool output_bias = false;   // reads output.bias (Qwen2)
    bool q_is_embd = false;     // Q and attn_output are n_embd wide (llama.cpp's shapes for Qwen2, Phi-3, OLMo 2)
    bool rot_is_head = false;   // rope.dimension_count must equal the head size
    bool qk_norm_full = false;  // Q/K norms over the whole projection, before the heads (OLMo 2), else per head
    int nope_interval = 0;      // every nope_interval-th layer has no RoPE (SmolLM3: 4, fixed in llama.cpp)
    bool attn_temp = false;     // reads attention.temperature_scale (Llama 4 / Mistral 3 temperature tuning)
    bool yarn_keys = false;     // reads rope.scaling.yarn_beta_fast/slow and yarn_log_multiplier (Mistral 3)
    bool moe = false;           // reads expert_count, expert_used_count, expert_feed_forward_length (ffn_kind::moe)
    std::vector<tensor_spec> block;
};

// The architecture named in general.architecture; an unsupported one fails naming it.
const arch_info & find_arch(const std::string & name);

} // namespace pr
