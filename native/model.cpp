// Loading a GGUF model: read metadata, validate every hyper-parameter and tensor, then place the
// weights (CPU: mapped from the file; other devices: uploaded). Validation is complete before any
// ggml call that could assert, so a bad file is an exception, never an abort.
#include "model.h"
#include "gguf_meta.h"
#include "placement.h"
#include "river_blocks.h"
#include "rpc.h"
#include "split.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string_view>
#include <unordered_set>
#include <cstdlib>
#include <cstring>
#include <map>

namespace pr {

model::model() = default;
model::~model() = default;

// The per-layer sliding-window flags as llama.cpp's load_swa_pattern sets them: an array of
// booleans, or a period n (layer il is local unless il % n == n - 1; n = 0: all local).
static void read_swa_pattern(const gguf_context * g, const std::string & key, int def, hparams & hp) {
    hp.swa_layer.assign(hp.n_layer, 0);
    const int64_t id = gguf_find_key(g, key.c_str());
    if (id >= 0 && gguf_get_kv_type(g, id) == GGUF_TYPE_ARRAY) {
        const gguf_type at = gguf_get_arr_type(g, id);
        if (at != GGUF_TYPE_BOOL && at != GGUF_TYPE_UINT8 && at != GGUF_TYPE_INT8) fail(PR_ERR_MODEL, "'%s' is not an array of booleans", key.c_str());
        if ((int64_t) gguf_get_arr_n(g, id) != hp.n_layer) fail(PR_ERR_MODEL, "'%s' has %zu entries for %d layers", key.c_str(), gguf_get_arr_n(g, id), hp.n_layer);
        const uint8_t * v = (const uint8_t *) gguf_get_arr_data(g, id);
        for (int il = 0; il < hp.n_layer; il++) hp.swa_layer[il] = v[il] != 0;
        return;
    }
    const int n = (int) meta_int(g, key.c_str(), def, 0, 1 << 16);
    for (int il = 0; il < hp.n_layer; il++) hp.swa_layer[il] = n == 0 || il % n < n - 1;
}

// RoPE scaling as llama.cpp reads it (llama_model_base::load_hparams): a type ("linear" when
// absent; "none" never scales), a factor (freq_scale = 1/factor; old key rope.scale_linear when the
// factor key is absent), the original context, an attention factor, and (Mistral 3) YaRN's betas and
// log multiplier. The effective values are set_rope_params's. Returns the trained frequency scale
// (1/factor) that some sliding-window layers use.
static float read_rope_scaling(const gguf_context * g, const std::string & a, const arch_info & ar, hparams & hp) {
    const std::string stype = meta_str(g, (a + "rope.scaling.type").c_str(), "linear");
    const std::string factor_key = gguf_find_key(g, (a + "rope.scaling.factor").c_str()) >= 0 ? a + "rope.scaling.factor" : a + "rope.scale_linear";
    const float ropescale = (float) meta_float(g, factor_key.c_str(), 0.0);
    if (!(ropescale >= 0.0f) || !std::isfinite(ropescale)) fail(PR_ERR_MODEL, "bad %s %g", factor_key.c_str(), ropescale);
    const float freq_scale_train = ropescale == 0.0f ? 1.0f : 1.0f / ropescale;
    hp.rope_attn_factor_train = (float) meta_float(g, (a + "rope.scaling.attn_factor").c_str(), 1.0);
    if (!(hp.rope_attn_factor_train > 0.0f) || !std::isfinite(hp.rope_attn_factor_train)) fail(PR_ERR_MODEL, "bad rope.scaling.attn_factor %g", hp.rope_attn_factor_train);
    hp.rope_n_ctx_orig = (int) meta_int(g, (a + "rope.scaling.original_context_length").c_str(), hp.n_ctx_train, 1, 1 << 24);
    hp.rope_freq_scale_train = freq_scale_train;
    if (stype == "none") {
        hp.scaling = rope_scaling::none;
        hp.rope_type_train = PR_ROPE_SCALING_NONE;
    } else if (stype == "linear") {
        hp.scaling = freq_scale_train == 1.0f ? rope_scaling::none : rope_scaling::linear;
        hp.rope_type_train = PR_ROPE_SCALING_LINEAR;
    } else if (stype == "longrope") {
        hp.scaling = rope_scaling::longrope;
        hp.rope_type_train = PR_ROPE_SCALING_LONGROPE;
    } else if (stype == "yarn") {
        hp.scaling = rope_scaling::yarn;
        hp.rope_type_train = PR_ROPE_SCALING_YARN;
    } else {
        fail(PR_ERR_MODEL, "unsupported rope.scaling.type '%s'", stype.c_str());
    }
    if (ar.yarn_keys) {
        hp.yarn_beta_fast_train = (float) meta_float(g, (a + "rope.scaling.yarn_beta_fast").c_str(), 32.0);
        hp.yarn_beta_slow_train = (float) meta_float(g, (a + "rope.scaling.yarn_beta_slow").c_str(), 1.0);
        hp.yarn_log_mul = (float) meta_float(g, (a + "rope.scaling.yarn_log_multiplier").c_str(), 0.0);
        if (!std::isfinite(hp.yarn_beta_fast_train) || !std::isfinite(hp.yarn_beta_slow_train) || !std::isfinite(hp.yarn_log_mul)) {
            fail(PR_ERR_MODEL, "bad rope.scaling.yarn_beta_fast / yarn_beta_slow / yarn_log_multiplier");
        }
    }
    return freq_scale_train;
}

// The RoPE a context computes with, as llama_context's constructor derives its cparams from the
// context parameters (pr_model_params' RoPE block: < 0 / 0 / -1 = the file's) and the file's values,
// in the same float operations. YaRN extrapolates (ext_factor 1 unless given) and its attention
// factor (which replaces a given one) cancels ggml's magnitude correction.
static void set_rope_params(hparams & hp, const pr_model_params & p) {
    const auto finite_or = [](float v, const char * name) {
        if (!std::isfinite(v)) fail(PR_ERR_INVALID_ARG, "%s must be finite, got %g", name, v);
        return v;
    };
    if (!std::isfinite(p.rope_freq_base) || p.rope_freq_base < 0.0f || !std::isfinite(p.rope_freq_scale) || p.rope_freq_scale < 0.0f) {
        fail(PR_ERR_INVALID_ARG, "rope_freq_base and rope_freq_scale must be finite and >= 0 (0: the file's), got %g and %g", p.rope_freq_base, p.rope_freq_scale);
    }
    if (p.rope_scaling_type < PR_ROPE_SCALING_UNSPECIFIED || p.rope_scaling_type > PR_ROPE_SCALING_LONGROPE) {
        fail(PR_ERR_INVALID_ARG, "rope_scaling_type must be -1 (the file's), 0 (none), 1 (linear), 2 (yarn) or 3 (longrope), got %d", p.rope_scaling_type);
    }
    if (p.yarn_orig_ctx < 0) fail(PR_ERR_INVALID_ARG, "yarn_orig_ctx must be >= 0 (0: the file's), got %d", p.yarn_orig_ctx);
    hp.yarn_ext_factor = finite_or(p.yarn_ext_factor, "yarn_ext_factor") >= 0.0f ? p.yarn_ext_factor : -1.0f;
    hp.yarn_attn_factor = finite_or(p.yarn_attn_factor, "yarn_attn_factor") >= 0.0f ? p.yarn_attn_factor : 1.0f;
    hp.yarn_beta_fast = finite_or(p.yarn_beta_fast, "yarn_beta_fast") >= 0.0f ? p.yarn_beta_fast : hp.yarn_beta_fast_train;
    hp.yarn_beta_slow = finite_or(p.yarn_beta_slow, "yarn_beta_slow") >= 0.0f ? p.yarn_beta_slow : hp.yarn_beta_slow_train;
    if (p.rope_freq_base > 0.0f) hp.rope_freq_base = p.rope_freq_base;
    hp.rope_freq_scale = p.rope_freq_scale > 0.0f ? p.rope_freq_scale : hp.rope_freq_scale_train;
    hp.yarn_n_ctx_orig = p.yarn_orig_ctx != 0 ? p.yarn_orig_ctx : hp.rope_n_ctx_orig;
    const int type = p.rope_scaling_type == PR_ROPE_SCALING_UNSPECIFIED ? hp.rope_type_train : p.rope_scaling_type;
    if (type == PR_ROPE_SCALING_NONE) hp.rope_freq_scale = 1.0f;
    if (hp.yarn_ext_factor < 0.0f) hp.yarn_ext_factor = type == PR_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    if (hp.yarn_ext_factor != 0.0f) {
        auto get_mscale = [](float scale, float mscale) { return scale <= 1.0f ? 1.0f : (0.1f * mscale * logf(scale) + 1.0f); };
        const float factor = 1.0f / hp.rope_freq_scale;
        hp.yarn_attn_factor = hp.yarn_log_mul != 0.0f ? get_mscale(factor, 1.0f) / get_mscale(factor, hp.yarn_log_mul) : get_mscale(factor, 1.0f);
        hp.yarn_attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    hp.yarn_attn_factor *= hp.rope_attn_factor_train;
}

// The keys only some architectures read: attention temperature tuning, sliding windows, soft-caps.
static void read_arch_keys(const gguf_context * g, const std::string & a, const arch_info & ar, float freq_scale_train, hparams & hp) {
    if (ar.attn_temp) {
        hp.attn_temp_scale = (float) meta_float(g, (a + "attention.temperature_scale").c_str(), 0.0);
        if (!std::isfinite(hp.attn_temp_scale)) fail(PR_ERR_MODEL, "bad attention.temperature_scale %g", hp.attn_temp_scale);
        if (hp.attn_temp_scale != 0.0f) hp.attn_temp_floor = hp.rope_n_ctx_orig;
    }

    if (ar.swa != swa_kind::none) {
        const int def = ar.swa == swa_kind::always ? 4096 : 0;
        hp.n_swa = (int) meta_int(g, (a + "attention.sliding_window").c_str(), def, 0, 1 << 24);
        if (ar.swa == swa_kind::always && hp.n_swa == 0) fail(PR_ERR_MODEL, "%s needs attention.sliding_window > 0", ar.name);
        if (hp.n_swa > 0) {
            read_swa_pattern(g, a + "attention.sliding_window_pattern", ar.swa_pattern, hp);
            hp.rope_freq_base_swa = (float) meta_float(g, (a + "rope.freq_base_swa").c_str(), ar.swa_base_is_global ? hp.rope_freq_base : 10000.0);
            if (!(hp.rope_freq_base_swa > 0.0f) || !std::isfinite(hp.rope_freq_base_swa)) fail(PR_ERR_MODEL, "bad rope.freq_base_swa %g", hp.rope_freq_base_swa);
            hp.rope_freq_scale_swa = ar.swa_scale_trained ? freq_scale_train : 1.0f;
            hp.swa_plain_rope = ar.swa_plain_rope;
        }
    }
    if (ar.final_softcap) {
        hp.final_softcap = (float) meta_float(g, (a + "final_logit_softcapping").c_str(), ar.final_softcap_default);
        if (!(hp.final_softcap >= 0.0f) || !std::isfinite(hp.final_softcap)) fail(PR_ERR_MODEL, "bad final_logit_softcapping %g", hp.final_softcap);
        if (ar.final_softcap_default > 0.0f && hp.final_softcap == 0.0f) fail(PR_ERR_MODEL, "%s needs final_logit_softcapping > 0", ar.name);
    }
    if (ar.attn_softcap_default > 0.0f) {
        hp.attn_softcap = (float) meta_float(g, (a + "attn_logit_softcapping").c_str(), ar.attn_softcap_default);
        if (!(hp.attn_softcap > 0.0f) || !std::isfinite(hp.attn_softcap)) fail(PR_ERR_MODEL, "bad attn_logit_softcapping %g", hp.attn_softcap);
    }
}

// A mixture of experts as llama.cpp reads it: expert_count and expert_used_count (both > 0), an
// expert's width expert_feed_forward_length (else feed_forward_length / expert_used_count).
// llama.cpp's Mistral 3 (and llama) loaders also read experts when expert_count > 0; pyriver runs
// mixtures only for qwen3moe, so such a file is refused rather than read as a dense model.
static void read_experts(const gguf_context * g, const std::string & a, const arch_info & ar, hparams & hp) {
    const int64_t n_expert = meta_int(g, (a + "expert_count").c_str(), ar.moe ? -1 : 0, 0, 1024);   // LLAMA_MAX_EXPERTS
    if (!ar.moe) {
        if (n_expert > 0) fail(PR_ERR_MODEL, "%s with experts (expert_count %lld) is not supported", ar.name, (long long) n_expert);
        return;
    }
    if (n_expert == 0) fail(PR_ERR_MODEL, "%s needs expert_count > 0", ar.name);
    hp.n_expert = (int) n_expert;
    hp.n_expert_used = (int) meta_int(g, (a + "expert_used_count").c_str(), -1, 1, n_expert);
    hp.n_ff_exp = (int) meta_int(g, (a + "expert_feed_forward_length").c_str(), hp.n_ff / hp.n_expert_used, 0, 1 << 20);
    if (hp.n_ff_exp == 0) fail(PR_ERR_MODEL, "%s: the experts' width is 0 (expert_feed_forward_length)", ar.name);
}

static void read_hparams(const gguf_context * g, hparams & hp, const arch_info & ar) {
    hp.name = meta_str(g, "general.name", "");
    const std::string a = hp.arch + ".";

    hp.n_layer = (int) meta_int(g, (a + "block_count").c_str(), -1, 1, 4096);
    hp.n_embd = (int) meta_int(g, (a + "embedding_length").c_str(), -1, 1, 1 << 17);
    hp.n_ff = (int) meta_int(g, (a + "feed_forward_length").c_str(), -1, 1, 1 << 20);
    hp.n_head = (int) meta_int(g, (a + "attention.head_count").c_str(), -1, 1, 4096);
    hp.n_head_kv = (int) meta_int(g, (a + "attention.head_count_kv").c_str(), hp.n_head, 1, 4096);
    hp.n_ctx_train = (int) meta_int(g, (a + "context_length").c_str(), 2048, 1, 1 << 24);
    hp.rms_eps = (float) meta_float(g, (a + "attention.layer_norm_rms_epsilon").c_str(), 1e-5);
    if (!(hp.rms_eps > 0.0f && hp.rms_eps < 1.0f)) fail(PR_ERR_MODEL, "bad RMS norm epsilon %g", hp.rms_eps);

    if (hp.n_head % hp.n_head_kv != 0) fail(PR_ERR_MODEL, "head_count %d is not a multiple of head_count_kv %d", hp.n_head, hp.n_head_kv);
    // The head size is its own key in many files (Gemma 3 270M: 256 with n_embd 640, 4 heads).
    if (gguf_find_key(g, (a + "attention.key_length").c_str()) < 0 && hp.n_embd % hp.n_head != 0) {
        fail(PR_ERR_MODEL, "embedding_length %d is not a multiple of head_count %d and key_length is not set", hp.n_embd, hp.n_head);
    }
    hp.n_embd_head = (int) meta_int(g, (a + "attention.key_length").c_str(), hp.n_embd / hp.n_head, 1, 1 << 14);
    const int v_len = (int) meta_int(g, (a + "attention.value_length").c_str(), hp.n_embd_head, 1, 1 << 14);
    if (v_len != hp.n_embd_head) fail(PR_ERR_MODEL, "key_length %d != value_length %d is not supported", hp.n_embd_head, v_len);
    if (hp.n_embd_head % 2 != 0) fail(PR_ERR_MODEL, "head size %d is odd", hp.n_embd_head);
    if (ar.q_is_embd && hp.n_embd_head * hp.n_head != hp.n_embd) {
        fail(PR_ERR_MODEL, "%s needs head_count * key_length == embedding_length (%d * %d != %d)", ar.name, hp.n_head, hp.n_embd_head, hp.n_embd);
    }

    hp.n_rot = (int) meta_int(g, (a + "rope.dimension_count").c_str(), hp.n_embd_head, 2, hp.n_embd_head);
    if (hp.n_rot % 2 != 0) fail(PR_ERR_MODEL, "rope.dimension_count %d is odd", hp.n_rot);
    if (ar.rot_is_head && hp.n_rot != hp.n_embd_head) fail(PR_ERR_MODEL, "rope.dimension_count %d must equal the head size %d for %s", hp.n_rot, hp.n_embd_head, ar.name);
    hp.rope_freq_base = (float) meta_float(g, (a + "rope.freq_base").c_str(), 10000.0);
    if (!(hp.rope_freq_base > 0.0f) || !std::isfinite(hp.rope_freq_base)) fail(PR_ERR_MODEL, "bad rope.freq_base %g", hp.rope_freq_base);
    hp.rope_layer.assign(hp.n_layer, 1);
    for (int il = 0; ar.nope_interval > 0 && il < hp.n_layer; il++) hp.rope_layer[il] = (il + 1) % ar.nope_interval != 0;

    const float freq_scale_train = read_rope_scaling(g, a, ar, hp);
    read_arch_keys(g, a, ar, freq_scale_train, hp);

    read_experts(g, a, ar, hp);

    // Gemma scales Q by 1/sqrt(head size), except the 27Bs: 1/sqrt(n_embd/n_head).
    const int scale_dim = ar.q_prescale && hp.n_layer == ar.q_scale_embd_layers ? hp.n_embd / hp.n_head : hp.n_embd_head;
    hp.kq_scale = 1.0f / std::sqrt((float) scale_dim);
    hp.embd_scale = ar.embd_scale ? std::sqrt((float) hp.n_embd) : 1.0f;
}

struct expect {
    ggml_tensor ** dst;
    std::string name;
    int64_t ne0, ne1;   // ne1 = 0: a vector
    bool required;
    bool matrix;        // used by mul_mat: any quantized type; otherwise F32 only
    ggml_tensor * const * unless = nullptr;   // once this is bound, the tensor is not read (need::qkv)
    int64_t ne2 = 1;    // experts of a mixture
};

static void check_tensor(const expect & e, const ggml_tensor * t) {
    const int64_t * ne = t->ne;   // as the GGUF gives them (gguf_init_from_file made the descriptor)
    const ggml_type type = t->type;
    const int64_t want1 = e.ne1 ? e.ne1 : 1;
    if (ne[0] != e.ne0 || ne[1] != want1 || ne[2] != e.ne2 || ne[3] != 1) {
        fail(PR_ERR_MODEL, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld]", e.name.c_str(),
             (long long) ne[0], (long long) ne[1], (long long) ne[2], (long long) ne[3], (long long) e.ne0, (long long) want1,
             (long long) e.ne2);
    }
    if (!usable_type(type)) fail(PR_ERR_MODEL, "tensor '%s' has unsupported type %d", e.name.c_str(), (int) type);
    if (!e.matrix && type != GGML_TYPE_F32) fail(PR_ERR_MODEL, "tensor '%s' must be F32, is %s", e.name.c_str(), ggml_type_name(type));
    if (ne[0] % ggml_blck_size(type) != 0) fail(PR_ERR_MODEL, "tensor '%s': row size %lld is not a multiple of its type's block", e.name.c_str(), (long long) ne[0]);
}

// llama.cpp's vocabulary loader (which pyriver's tokenizer is) asserts, and so aborts, on some
// malformed tokenizers: check what it assumes before Python hands it the file. n_vocab < 0: the
// embedding's rows are not known (a file for llama.cpp's own loader, which compares them itself).
static void validate_tokenizer(const gguf_context * g, int64_t n_vocab) {
    const int64_t id = gguf_find_key(g, "tokenizer.ggml.tokens");
    if (id < 0) fail(PR_ERR_MODEL, "the file has no tokenizer (tokenizer.ggml.tokens)");
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(g, id) != GGUF_TYPE_STRING) {
        fail(PR_ERR_MODEL, "tokenizer.ggml.tokens is not an array of strings");
    }
    const size_t n = gguf_get_arr_n(g, id);
    if (n_vocab >= 0 && (int64_t) n != n_vocab) {
        fail(PR_ERR_MODEL, "the tokenizer has %zu tokens, the embedding %lld rows", n, (long long) n_vocab);
    }
    std::unordered_set<std::string_view> seen;
    seen.reserve(n);
    for (size_t i = 0; i < n; i++) {
        const char * t = gguf_get_arr_str(g, id, i);
        if (!seen.insert(std::string_view(t)).second) fail(PR_ERR_MODEL, "tokenizer token %zu ('%.40s') appears twice", i, t);
    }
}

static void validate_and_bind(model & m) {
    const hparams & hp = m.hp;
    // tok_embd gives the vocabulary size; everything else follows from the hyper-parameters.
    const ggml_tensor * embd = m.file->tensor("token_embd.weight");   // in any shard of a split model
    if (!embd) fail(PR_ERR_MODEL, "tensor 'token_embd.weight' is missing");
    const int64_t n_vocab = embd->ne[1];
    if (n_vocab < 1 || n_vocab > (1 << 24)) fail(PR_ERR_MODEL, "bad vocabulary size %lld", (long long) n_vocab);
    m.hp.n_vocab = (int) n_vocab;
    validate_tokenizer(m.gguf, n_vocab);

    const int64_t E = hp.n_embd, Q = (int64_t) hp.n_embd_head * hp.n_head, KV = hp.n_embd_k_gqa(), F = hp.n_ff;
    auto extent = [&](dim d) -> int64_t {
        switch (d) {
            case dim::one: return 0;
            case dim::embd: return E;
            case dim::q: return Q;
            case dim::kv: return KV;
            case dim::ff: return F;
            case dim::head: return hp.n_embd_head;
            case dim::qkv: return Q + 2 * KV;
            case dim::ff2: return 2 * F;
            case dim::expert: return hp.n_expert;
            case dim::ff_exp: return hp.n_ff_exp;
        }
        return 0;
    };
    const arch_info & ar = *m.arch;
    const bool longrope = hp.scaling == rope_scaling::longrope;
    std::vector<expect> ex;
    ex.push_back({&m.tok_embd, "token_embd.weight", E, n_vocab, true, true});
    ex.push_back({&m.output_norm, "output_norm.weight", E, 0, true, false});
    if (ar.output != head_out::tied) ex.push_back({&m.output, "output.weight", E, n_vocab, ar.output == head_out::required, true});
    if (ar.rope_freqs && !(ar.longrope_only && longrope)) ex.push_back({&m.rope_freqs, "rope_freqs.weight", hp.n_rot / 2, 0, false, false});
    if (ar.rope_long_short && (!ar.longrope_only || longrope)) {
        ex.push_back({&m.rope_long, "rope_factors_long.weight", hp.n_rot / 2, 0, false, false});
        ex.push_back({&m.rope_short, "rope_factors_short.weight", hp.n_rot / 2, 0, false, false});
    }
    if (ar.output_bias) ex.push_back({&m.output_b, "output.bias", n_vocab, 0, false, false});
    m.blocks.resize(hp.n_layer);
    for (int il = 0; il < hp.n_layer; il++) {
        block_weights & b = m.blocks[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        for (const tensor_spec & t : ar.block) {
            ex.push_back({&(b.*t.member), p + t.name, extent(t.ne0), extent(t.ne1), t.req != need::optional, t.matrix,
                          t.req == need::qkv ? &b.wqkv : nullptr, t.ne2 == dim::one ? 1 : extent(t.ne2)});
        }
    }

    std::map<ggml_type, int> type_count;
    for (const expect & e : ex) {
        if (e.unless && *e.unless) continue;   // the fused attn_qkv replaces it, as in llama.cpp
        ggml_tensor * t = m.file->tensor(e.name);
        if (!t) {
            if (e.required) fail(PR_ERR_MODEL, "tensor '%s' is missing", e.name.c_str());
            continue;
        }
        check_tensor(e, t);
        *e.dst = t;
        if (e.matrix && e.name.rfind("blk.", 0) == 0) type_count[t->type]++;
    }
    if (!m.output) m.output = m.tok_embd;   // tied embeddings
    if (m.hp.scaling != rope_scaling::llama3 && m.rope_freqs) {
        // llama.cpp applies rope_freqs whenever the tensor is present (Llama 3.1 style scaling).
        m.hp.scaling = rope_scaling::llama3;
    }

    int best = -1;
    for (auto & kv : type_count) {
        if (kv.second > best) {
            best = kv.second;
            m.main_type = kv.first;
        }
    }
}

// Blocks and head on devices as llama.cpp places them (placement.cpp); RPC servers first.
static void assign_devices(model & m, const pr_model_params & params) {
    m.rpc_endpoints = parse_endpoints(params.rpc_servers);
    m.rpc_timeout_ms = params.rpc_timeout_ms;
    const std::vector<ggml_backend_dev_t> rpc = rpc_add_servers(m.rpc_endpoints, params.rpc_timeout_ms);
    const placement p = place_layers(m.hp.n_layer, params.n_gpu_layers, model_devices(rpc, params.split_mode, params.main_gpu),
                                     params.tensor_split);
    m.cpu_dev = p.cpu;
    m.layer_dev = p.layer;
    m.output_dev = p.output;
    // A tied head off the CPU reads its own copy of the embedding table there, as in llama.cpp.
    if (m.output == m.tok_embd && m.output_dev != m.cpu_dev) m.output = m.file->duplicate(m.tok_embd, "output.weight");
}

// Device of a tensor: block tensors follow their block, the head follows output_dev, the embedding
// table stays on the CPU (it is read by get_rows, one row per token).
static ggml_backend_dev_t tensor_dev(const model & m, const ggml_tensor * t) {
    if (t == m.tok_embd) return m.cpu_dev;   // when tied on the CPU, the head reads this one copy too
    if (t == m.output || t == m.output_norm) return m.output_dev;
    int il = -1;
    if (sscanf(ggml_get_name(t), "blk.%d.", &il) == 1 && il >= 0 && il < m.hp.n_layer) return m.layer_dev[il];
    return m.cpu_dev;
}

// Q/K/V, and gate/up, of each block on the CPU stacked into one matrix each: a decode step is
// dozens of small products, each two thread barriers, and one product of the stacked rows gives
// every row the bits its own product gives (each output is one row's dot product with the same
// quantized input), so llama.cpp's logits stay. Only where the parts share type and kernel.
static void join_projections(model & m) {
    const char * off = getenv("PYRIVER_JOIN");   // "0": not joined (scripts/join_ab.py measures the gain)
    if (off && strcmp(off, "0") == 0) return;
    auto joinable = [](const std::vector<const ggml_tensor *> & p) {
        for (const ggml_tensor * t : p) {
            if (!t || t->type != p[0]->type || t->ne[0] != p[0]->ne[0] || ggml_n_dims(t) != 2) return false;
        }
        return true;
    };
    auto join = [&](const std::vector<const ggml_tensor *> & parts, const std::string & name) -> ggml_tensor * {
        ggml_tensor * t = m.file->join(parts, name, true);
        if (!same_cpu_kernel(m.cpu_dev, t, parts)) {   // undo: the parts stay as they are
            m.file->unjoin(name);
            return nullptr;
        }
        m.n_joined++;
        return t;
    };
    for (int il = 0; il < m.hp.n_layer; il++) {
        if (m.layer_dev[il] != m.cpu_dev) continue;   // GPU kernels may pick their algorithm by shape
        block_weights & b = m.blocks[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        const bool biases = b.bq && b.bk && b.bv;
        if (!b.wqkv && (biases || !(b.bq || b.bk || b.bv))) {
            // Q/K/V, else Q/K alone (Q4_K_M files often keep V at another type).
            if (joinable({b.wq, b.wk, b.wv})) b.qkv_joined = join({b.wq, b.wk, b.wv}, p + "attn_qkv.joined");
            const bool with_v = b.qkv_joined != nullptr;
            if (!with_v && joinable({b.wq, b.wk})) b.qkv_joined = join({b.wq, b.wk}, p + "attn_qk.joined");
            if (b.qkv_joined && biases) {
                b.bqkv_joined = with_v ? m.file->join({b.bq, b.bk, b.bv}, p + "attn_qkv_b.joined", false)
                                       : m.file->join({b.bq, b.bk}, p + "attn_qk_b.joined", false);
            }
        }
        if (!b.ffn_gate_inp && !b.ffn_gate_b && !b.ffn_up_b && joinable({b.ffn_gate, b.ffn_up})) {
            b.gate_up_joined = join({b.ffn_gate, b.ffn_up}, p + "ffn_gate_up.joined");
        }
    }
}

// The blocks as wide products read them (batch_layout): each matrix with a second binding in the
// mapping swapped for it, and a joined product split back into its parts, which place_weights bound
// there (on many rows a product's own overhead is nothing, and its kernel is everything).
static void bind_wide(model & m) {
    const auto & wide = m.file->wide;
    if (wide.empty()) return;
    auto swap = [&](ggml_tensor *& t) {
        auto it = t ? wide.find(t) : wide.end();
        if (it != wide.end() && it->second != t) t = it->second;
    };
    m.wide_blocks = m.blocks;
    for (block_weights & b : m.wide_blocks) {
        if (b.qkv_joined && wide.count(b.qkv_joined)) b.qkv_joined = b.bqkv_joined = nullptr;
        if (b.gate_up_joined && wide.count(b.gate_up_joined)) b.gate_up_joined = nullptr;
        for (ggml_tensor ** t : {&b.wq, &b.wk, &b.wv, &b.wo, &b.wqkv, &b.ffn_gate, &b.ffn_up, &b.ffn_down, &b.ffn_gate_exps,
                                 &b.ffn_up_exps, &b.ffn_down_exps, &b.qkv_joined, &b.gate_up_joined}) {
            swap(*t);
        }
    }
    m.wide_output = m.output;
    swap(m.wide_output);
}

void check_file(const char * path) {
    std::unique_ptr<weight_file> f = open_model_file(path);   // every shard of a split model
    // A file without a vocabulary ("no_vocab" models) is llama.cpp's to judge: it does not assert there.
    if (gguf_find_key(f->gguf, "tokenizer.ggml.tokens") >= 0) validate_tokenizer(f->gguf, -1);
}

model * load_model(const char * path, const pr_model_params & params) {
    std::unique_ptr<model> m(new model());
    m->file = open_model_file(path);
    m->path = path;
    m->gguf = m->file->gguf;
    m->meta = m->file->meta;

    m->hp.arch = meta_str(m->gguf, "general.architecture", "");
    if (m->hp.arch.empty()) fail(PR_ERR_MODEL, "not a model file: general.architecture is missing");
    m->arch = &find_arch(m->hp.arch);
    read_hparams(m->gguf, m->hp, *m->arch);
    // llama.cpp's context overrides (cparams' RoPE): the sliding-window layers keep the trained
    // base and scale, which their defaults were read from above
    set_rope_params(m->hp, params);
    validate_and_bind(*m);

    for (const weight_file * f : m->file->files()) {
        for (ggml_tensor * t = ggml_get_first_tensor(f->meta); t; t = ggml_get_next_tensor(f->meta, t)) {
            m->n_params += ggml_nelements(t);
            m->n_bytes += ggml_nbytes(t);
        }
    }
    assign_devices(*m, params);
    join_projections(*m);
    const model & mr = *m;
    place_weights(*m->file, [&](const ggml_tensor * t) { return tensor_dev(mr, t); }, m->cpu_dev, params.use_mmap != 0,
                  [&](const ggml_tensor * t) { return t != mr.tok_embd && ggml_n_dims(t) == 2; }, params.batch_layout != 0,
                  [&](int done, int total) {
                      if (params.progress && params.progress(done, total, params.progress_user) != 0) {
                          fail(PR_ERR_INVALID_ARG, "model load cancelled");
                      }
                  });
    bind_wide(*m);
    return m.release();
}

} // namespace pr
