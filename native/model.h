// A GGUF decoder model: hyper-parameters, the weights of each block, and where they live.
#pragma once

#include "arch.h"
#include "block_weights.h"
#include "error.h"
#include "weights.h"

#include "ggml.h"
#include "ggml-backend.h"
#include "gguf.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pr {

enum class rope_scaling { none, linear, yarn, llama3, longrope };

struct hparams {
    std::string arch;
    std::string name;
    int n_layer = 0;
    int n_embd = 0;
    int n_head = 0;
    int n_head_kv = 0;
    int n_embd_head = 0;   // per-head size of Q and K (= of V here)
    int n_ff = 0;
    int n_expert = 0;      // mixture of experts: experts per block, used per token, an expert's n_ff
    int n_expert_used = 0;
    int n_ff_exp = 0;
    int n_vocab = 0;
    int n_ctx_train = 0;
    int n_rot = 0;         // rotated dims per head
    float rms_eps = 1e-5f;
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;         // the context's (set_rope_params), as the yarn_* below
    rope_scaling scaling = rope_scaling::none;
    int rope_n_ctx_orig = 0;              // the file's original context (LongRoPE's factors, temperature tuning)
    int yarn_n_ctx_orig = 0;              // the context's (yarn_orig_ctx), what ggml_rope_ext takes
    float yarn_ext_factor = 0.0f;
    float yarn_attn_factor = 1.0f;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
    // the file's, as llama.cpp's hparams keep them
    int rope_type_train = PR_ROPE_SCALING_LINEAR;
    float rope_freq_scale_train = 1.0f;
    float rope_attn_factor_train = 1.0f;
    float yarn_beta_fast_train = 32.0f;
    float yarn_beta_slow_train = 1.0f;
    float yarn_log_mul = 0.0f;
    std::vector<uint8_t> rope_layer;   // per layer: Q and K are rotated (SmolLM3 leaves every 4th alone)

    // Sliding-window attention (Gemma 2 and 3, OLMo 3): layers with swa_layer[il] see the last
    // n_swa positions and rotate with their own base and scale (or, swa_plain_rope, with the
    // global base and no scaling at all); the others are global.
    int n_swa = 0;
    std::vector<uint8_t> swa_layer;
    float rope_freq_base_swa = 10000.0f;
    float rope_freq_scale_swa = 1.0f;
    bool swa_plain_rope = false;

    float kq_scale = 0.0f;         // softmax scale, or the Q scale when the arch pre-scales Q
    float embd_scale = 1.0f;       // token embeddings are multiplied by this
    float final_softcap = 0.0f;    // > 0: logits = c * tanh(logits / c)
    float attn_softcap = 0.0f;     // > 0: attention logits = c * tanh(logits / c) before the softmax

    // Attention temperature tuning (Llama 4, Mistral 3): Q of the token at position p is
    // multiplied by log(floor(p / attn_temp_floor) + 1) * attn_temp_scale + 1.
    float attn_temp_scale = 0.0f;
    int attn_temp_floor = 0;

    int n_embd_k_gqa() const { return n_embd_head * n_head_kv; }
    bool is_swa(int il) const { return n_swa > 0 && swa_layer[il]; }
    bool uses_rope(int il) const { return rope_layer[il] != 0; }
    float rope_base(int il) const { return is_swa(il) && !swa_plain_rope ? rope_freq_base_swa : rope_freq_base; }
    float rope_scale(int il) const { return is_swa(il) ? (swa_plain_rope ? 1.0f : rope_freq_scale_swa) : rope_freq_scale; }
    float rope_ext(int il) const { return is_swa(il) && swa_plain_rope ? 0.0f : yarn_ext_factor; }
    float rope_attn(int il) const { return is_swa(il) && swa_plain_rope ? 1.0f : yarn_attn_factor; }
};

struct river_blocks;

struct model {
    hparams hp;
    const arch_info * arch = nullptr;
    std::string path;

    std::unique_ptr<weight_file> file;
    gguf_context * gguf = nullptr;       // == file->gguf
    ggml_context * meta = nullptr;       // == file->meta

    ggml_tensor * tok_embd = nullptr;
    ggml_tensor * output_norm = nullptr;
    ggml_tensor * output = nullptr;      // == tok_embd when tied
    ggml_tensor * output_b = nullptr;    // optional (Qwen2)
    ggml_tensor * rope_freqs = nullptr;  // optional per-dimension frequency factors (llama3)
    ggml_tensor * rope_long = nullptr;   // LongRoPE factors beyond the original context (Phi-3)
    ggml_tensor * rope_short = nullptr;  // and within it
    std::vector<block_weights> blocks;
    // batch_layout: the blocks and head as products of many rows (prompts: graph.cpp's wide) read them, each
    // repacked matrix in the file's layout (file->wide) and joined ones as their parts; empty when off.
    std::vector<block_weights> wide_blocks;
    ggml_tensor * wide_output = nullptr;
    static constexpr int64_t WIDE_ROWS = 64;          // any step

    ggml_backend_dev_t cpu_dev = nullptr;
    std::vector<ggml_backend_dev_t> layer_dev;   // device of each block's weights, river block and KV
    ggml_backend_dev_t output_dev = nullptr;
    std::vector<std::string> rpc_endpoints;      // RPC servers the model's devices live on
    int rpc_timeout_ms = 0;
    bool broken = false;                         // an RPC server went away: never used or freed again

    std::unique_ptr<river_blocks> river;  // optional: attached with attach_river

    // The RoPE frequency factors of a context of n_ctx rows (llama.cpp's get_rope_factors with its
    // n_ctx_seq, the padded n_ctx): rope_freqs, else LongRoPE's long factors when the context is
    // longer than the original one, else the short ones (or none).
    ggml_tensor * rope_factors(int n_ctx) const {
        if (rope_freqs) return rope_freqs;
        return n_ctx > hp.rope_n_ctx_orig ? rope_long : rope_short;
    }

    int n_joined = 0;                    // joined matrices (join_projections)
    int64_t n_params = 0;
    int64_t n_bytes = 0;
    ggml_type main_type = GGML_TYPE_F32;

    model();
    ~model();
};

// The checks of a file that llama.cpp, not pyriver, will load (pr_gguf_check).
void check_file(const char * path);
model * load_model(const char * path, const pr_model_params & params);

} // namespace pr
