// The C boundary: every entry point catches what the core throws and turns it into a status and
// a message for pr_last_error().
#include "context.h"
#include "gguf_meta.h"
#include "placement.h"
#include "pyriver_debug.h"
#include "river.h"
#include "rpc.h"
#include "tiled_gemm.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>

struct pr_model {
    pr::model * m;
    std::string river_report;   // fallbacks of the last pr_river_build
};
struct pr_context { pr::context * c; };

static thread_local std::string g_last_error;

// For the entry points that return a value rather than a status: a NULL object leaves a message.
static bool live(const void * obj, const char * what) {
    if (!obj) g_last_error = std::string(what) + " is NULL";
    return obj != nullptr;
}

template <typename F>
static pr_status guarded(F && f) {
    try {
        f();
        g_last_error.clear();
        return PR_OK;
    } catch (const pr::error & e) {
        g_last_error = e.what();
        return e.status;
    } catch (const std::bad_alloc &) {
        g_last_error = "out of memory";
        return PR_ERR_BACKEND;
    } catch (const std::exception & e) {
        g_last_error = e.what();
        return PR_ERR_INTERNAL;
    }
}

// Runs f where a dead RPC server of the model cannot crash or hang the caller (rpc.h); without
// RPC servers, directly. A model that lost a server is refused.
static void on_model(pr::model * m, const std::function<void()> & f) {
    if (m->broken) pr::fail(PR_ERR_BACKEND, "this model lost its RPC server earlier and cannot be used any more");
    pr::rpc_guarded(m->rpc_endpoints, m->rpc_timeout_ms, m->broken, f);
}

// The text-out convention of pyriver.h: *needed always; NULL/0 asks for the size only.
static void copy_text(const std::string & s, char * buf, size_t n, size_t * needed) {
    if (needed) *needed = s.size() + 1;
    if (!buf && n == 0) return;
    if (!buf) pr::fail(PR_ERR_INVALID_ARG, "output buffer is NULL");
    if (s.size() + 1 > n) pr::fail(PR_ERR_INVALID_ARG, "output buffer of %zu bytes is too small for %zu", n, s.size() + 1);
    memcpy(buf, s.c_str(), s.size() + 1);
}

extern "C" {

const char * pr_last_error(void) { return g_last_error.c_str(); }
const char * pr_version(void) { return "0.1.0"; }

pr_model_params pr_model_default_params(void) {
    pr_model_params p;
    memset(&p, 0, sizeof(p));
    p.n_gpu_layers = 0;
    p.use_mmap = 1;
    p.split_mode = 1;
    p.main_gpu = 0;
    p.rpc_servers = nullptr;
    p.rpc_timeout_ms = 300000;
    p.rope_scaling_type = PR_ROPE_SCALING_UNSPECIFIED;   // llama_context_default_params' RoPE
    p.yarn_ext_factor = p.yarn_attn_factor = p.yarn_beta_fast = p.yarn_beta_slow = -1.0f;
    return p;
}

pr_status pr_model_load(const char * path, const pr_model_params * params, pr_model ** out) {
    return guarded([&] {
        if (!out) pr::fail(PR_ERR_INVALID_ARG, "out is NULL");
        *out = nullptr;
        const pr_model_params p = params ? *params : pr_model_default_params();
        const std::vector<std::string> eps = pr::parse_endpoints(p.rpc_servers);
        const std::string file = path ? path : "";
        // Results go through shared cells: an abandoned call (rpc.h) may outlive this frame.
        auto m = std::make_shared<pr::model *>(nullptr);
        bool broken = false;
        pr::rpc_guarded(eps, p.rpc_timeout_ms, broken, [m, file, p] { *m = pr::load_model(file.c_str(), p); });
        *out = new pr_model{*m, std::string()};
    });
}

pr_status pr_gguf_check(const char * path) {
    return guarded([&] { pr::check_file(path); });
}

pr_status pr_gguf_meta(const char * path, const char * key, char * buf, size_t buf_size, size_t * needed) {
    return guarded([&] {
        if (needed) *needed = 0;
        if (!key) pr::fail(PR_ERR_INVALID_ARG, "key is NULL");
        const std::unique_ptr<pr::weight_file> f = pr::open_weight_file(path);   // the header, the tensors' bounds
        std::string v;
        if (!pr::meta_text(f->gguf, key, v)) pr::fail(PR_ERR_INVALID_ARG, "%s: no metadata value '%s'", path, key);
        copy_text(v, buf, buf_size, needed);
    });
}

pr_status pr_gguf_tensor_names(const char * path, char * buf, size_t buf_size, size_t * needed) {
    return guarded([&] {
        if (needed) *needed = 0;
        const std::unique_ptr<pr::weight_file> f = pr::open_weight_file(path);
        std::string s;
        for (int64_t i = 0; i < gguf_get_n_tensors(f->gguf); i++) s += std::string(gguf_get_tensor_name(f->gguf, i)) + "\n";
        copy_text(s, buf, buf_size, needed);
    });
}

void pr_model_free(pr_model * model) {
    if (!model) return;
    pr::model * m = model->m;
    delete model;
    // A model whose server went away keeps its remote buffers: freeing them would wait forever.
    if (m->broken) return;
    const pr_status st = guarded([&] { on_model(m, [m] { delete m; }); });
    (void) st;
}

pr_status pr_model_get_info(const pr_model * model, pr_model_info * out) {
    return guarded([&] {
        if (!model || !out) pr::fail(PR_ERR_INVALID_ARG, "model or out is NULL");
        const pr::hparams & hp = model->m->hp;
        memset(out, 0, sizeof(*out));
        snprintf(out->arch, sizeof(out->arch), "%s", hp.arch.c_str());
        snprintf(out->name, sizeof(out->name), "%s", hp.name.c_str());
        out->n_layer = hp.n_layer;
        out->n_embd = hp.n_embd;
        out->n_head = hp.n_head;
        out->n_head_kv = hp.n_head_kv;
        out->n_embd_head = hp.n_embd_head;
        out->n_ff = hp.n_ff;
        out->n_vocab = hp.n_vocab;
        out->n_ctx_train = hp.n_ctx_train;
        out->n_params = model->m->n_params;
        out->n_bytes = model->m->n_bytes;
        out->ftype_hint = (int32_t) model->m->main_type;
        out->n_wide = (int32_t) model->m->file->wide.size();
    });
}

pr_status pr_model_meta(const pr_model * model, const char * key, char * buf, size_t buf_size, size_t * needed) {
    return guarded([&] {
        if (needed) *needed = 0;
        if (!model || !key) pr::fail(PR_ERR_INVALID_ARG, "model or key is NULL");
        std::string v;
        if (!pr::meta_text(model->m->gguf, key, v)) pr::fail(PR_ERR_INVALID_ARG, "no metadata value '%s'", key);
        copy_text(v, buf, buf_size, needed);
    });
}

pr_status pr_model_devices(const pr_model * model, char * buf, size_t buf_size, size_t * needed) {
    return guarded([&] {
        if (needed) *needed = 0;
        if (!model) pr::fail(PR_ERR_INVALID_ARG, "model is NULL");
        std::string s;
        for (auto d : model->m->layer_dev) s += std::string(ggml_backend_dev_name(d)) + "\n";
        s += std::string(ggml_backend_dev_name(model->m->output_dev)) + "\n";
        copy_text(s, buf, buf_size, needed);
    });
}

pr_status pr_rpc_register(const char * servers, int32_t timeout_ms) {
    return guarded([&] {
        const std::vector<std::string> eps = pr::parse_endpoints(servers);
        if (eps.empty()) pr::fail(PR_ERR_INVALID_ARG, "no RPC server given");
        pr::rpc_register_servers(eps, timeout_ms);
    });
}

pr_status pr_rpc_start_server(const char * endpoint, int32_t n_threads, const char * cache_dir) {
    return guarded([&] { pr::rpc_start_server(endpoint, n_threads, cache_dir); });
}

pr_status pr_devices(char * buf, size_t buf_size, size_t * needed) {
    return guarded([&] {
        if (needed) *needed = 0;
        std::string s;
        for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
            ggml_backend_dev_t d = ggml_backend_dev_get(i);
            const auto t = ggml_backend_dev_type(d);
            const char * tn = t == GGML_BACKEND_DEVICE_TYPE_CPU ? "cpu" : t == GGML_BACKEND_DEVICE_TYPE_GPU ? "gpu"
                            : t == GGML_BACKEND_DEVICE_TYPE_IGPU ? "igpu" : "accel";
            s += std::string(ggml_backend_dev_name(d)) + "\t" + ggml_backend_dev_description(d) + "\t" + tn + "\n";
        }
        copy_text(s, buf, buf_size, needed);
    });
}

pr_context_params pr_context_default_params(void) {
    pr_context_params p;
    p.n_ctx = 2048;
    p.n_batch = 512;
    p.n_threads = 2;
    p.n_threads_batch = 2;
    p.flash_attn = 0;
    p.batch_invariant = -1;
    p.n_seq_max = 1;
    p.type_k = GGML_TYPE_F16;
    p.type_v = GGML_TYPE_F16;
    return p;
}

pr_status pr_context_new(pr_model * model, const pr_context_params * params, pr_context ** out) {
    return guarded([&] {
        if (!model || !out) pr::fail(PR_ERR_INVALID_ARG, "model or out is NULL");
        *out = nullptr;
        const pr_context_params p = params ? *params : pr_context_default_params();
        auto c = std::make_shared<pr::context *>(nullptr);
        pr::model * m = model->m;
        on_model(m, [c, m, p] { *c = new pr::context(m, p); });
        *out = new pr_context{*c};
    });
}

void pr_context_free(pr_context * ctx) {
    if (!ctx) return;
    pr::context * c = ctx->c;
    delete ctx;
    if (c->m->broken) return;   // as pr_model_free: its remote buffers stay
    const pr_status st = guarded([&] { on_model(c->m, [c] { delete c; }); });
    (void) st;
}

int32_t pr_context_batch_invariant(const pr_context * ctx) { return live(ctx, "ctx") && ctx->c->batch_invariant ? 1 : 0; }

pr_status pr_context_set_batch_invariant(pr_context * ctx, int32_t on) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        if (on != 0 && on != 1) pr::fail(PR_ERR_INVALID_ARG, "on must be 0 or 1, got %d", on);
        if (on && ctx->c->params.flash_attn) pr::fail(PR_ERR_INVALID_ARG, "batch_invariant needs flash_attn off");
        ctx->c->batch_invariant = on == 1;
    });
}

pr_status pr_context_set_wide_prompt_rows(pr_context * ctx, int32_t n) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        if (n < 0) pr::fail(PR_ERR_INVALID_ARG, "wide_prompt_rows must be >= 0, got %d", n);
        ctx->c->wide_prompt_rows = n;
    });
}

pr_status pr_context_set_abort_callback(pr_context * ctx, pr_abort_fn fn, void * user) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        ctx->c->abort_fn = fn;
        ctx->c->abort_user = user;
    });
}

pr_status pr_context_set_verify_tile_rows(pr_context * ctx, int32_t n) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        if (n < 0) pr::fail(PR_ERR_INVALID_ARG, "verify_tile_rows must be >= 0, got %d", n);
        ctx->c->verify_tile_rows = n;
    });
}

pr_status pr_context_kv_bytes(const pr_context * ctx, int64_t * k_bytes, int64_t * v_bytes) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        if (k_bytes) *k_bytes = (int64_t) ctx->c->kv->total_bytes(false);
        if (v_bytes) *v_bytes = (int64_t) ctx->c->kv->total_bytes(true);
    });
}

pr_status pr_decode(pr_context * ctx, const int32_t * tokens, int32_t n, int32_t logits_all, int32_t prompt) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        if (!tokens || n < 1) pr::fail(PR_ERR_INVALID_ARG, "decode needs at least one token");
        // The tokens are copied: an abandoned call (rpc.h) may outlive the caller's array.
        std::vector<int32_t> toks(tokens, tokens + n);
        pr::context * c = ctx->c;
        on_model(c->m, [c, toks, logits_all, prompt] {
            c->decode(0, toks.data(), (int) toks.size(), logits_all != 0, prompt);
        });
    });
}

const float * pr_logits(pr_context * ctx, int32_t i) {
    if (!live(ctx, "ctx")) return nullptr;
    if (i < 0 || i >= ctx->c->n_outputs) {
        g_last_error = "logits row " + std::to_string(i) + " is not in [0, " + std::to_string(ctx->c->n_outputs) + ")";
        return nullptr;
    }
    return ctx->c->out + (size_t) i * ctx->c->m->hp.n_vocab;
}

pr_status pr_embed(pr_context * ctx, const int32_t * tokens, int32_t n) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        if (!tokens || n < 1) pr::fail(PR_ERR_INVALID_ARG, "embed needs at least one token");
        std::vector<int32_t> toks(tokens, tokens + n);   // copied, as in pr_decode
        pr::context * c = ctx->c;
        on_model(c->m, [c, toks] { c->embed(0, toks.data(), (int) toks.size()); });
    });
}

const float * pr_embeddings(pr_context * ctx, int32_t i) {
    if (!live(ctx, "ctx")) return nullptr;
    if (i < 0 || i >= ctx->c->n_embd_rows) {
        g_last_error = "embedding row " + std::to_string(i) + " is not in [0, " + std::to_string(ctx->c->n_embd_rows) + ")";
        return nullptr;
    }
    return ctx->c->embd + (size_t) i * ctx->c->m->hp.n_embd;
}

int32_t pr_n_outputs(const pr_context * ctx) { return live(ctx, "ctx") ? ctx->c->n_outputs : 0; }
int32_t pr_kv_pos(const pr_context * ctx) { return live(ctx, "ctx") ? ctx->c->kv->used[0] : 0; }
int32_t pr_n_ctx(const pr_context * ctx) { return live(ctx, "ctx") ? ctx->c->params.n_ctx : 0; }

pr_status pr_kv_truncate(pr_context * ctx, int32_t n_keep) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        ctx->c->truncate(0, n_keep);
    });
}

pr_status pr_kv_clear(pr_context * ctx) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        ctx->c->truncate(0, 0);
    });
}

pr_status pr_state_size(const pr_context * ctx, int32_t seq, size_t * size) {
    return guarded([&] {
        if (!ctx || !size) pr::fail(PR_ERR_INVALID_ARG, "ctx or size is NULL");
        *size = pr::state_size(*ctx->c, seq);
    });
}

pr_status pr_state_get(pr_context * ctx, int32_t seq, uint8_t * buf, size_t buf_size, size_t * written) {
    return guarded([&] {
        if (!ctx || !buf || !written) pr::fail(PR_ERR_INVALID_ARG, "ctx, buf or written is NULL");
        *written = pr::state_get(*ctx->c, seq, buf, buf_size);
    });
}

pr_status pr_state_set(pr_context * ctx, int32_t seq, const uint8_t * buf, size_t size) {
    return guarded([&] {
        if (!ctx || !buf) pr::fail(PR_ERR_INVALID_ARG, "ctx or buf is NULL");
        pr::state_set(*ctx->c, seq, buf, size);
    });
}

pr_status pr_decode_batch(pr_context * ctx, const int32_t * tokens, const int32_t * seq, const int32_t * pos,
                          const int32_t * logits, const int32_t * prompt, int32_t n) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        if (n < 1) pr::fail(PR_ERR_INVALID_ARG, "a batch needs at least one token");
        if (!tokens || !seq || !pos || !logits || !prompt) pr::fail(PR_ERR_INVALID_ARG, "a batch array is NULL");
        // Copied: an abandoned call (rpc.h) may outlive the caller's arrays.
        std::vector<pr::batch_token> b(n);
        std::vector<uint8_t> pr_flags(n);
        for (int i = 0; i < n; i++) {
            b[i].token = tokens[i];
            b[i].seq = seq[i];
            b[i].pos = pos[i];
            b[i].logits = logits[i] != 0;
            pr_flags[i] = prompt[i] == PR_VERIFY ? PR_VERIFY : prompt[i] != 0;
        }
        pr::context * c = ctx->c;
        on_model(c->m, [c, b, pr_flags] { c->decode_batch(b, pr_flags); });
    });
}

int32_t pr_n_seq_max(const pr_context * ctx) { return live(ctx, "ctx") ? ctx->c->kv->n_seq : 0; }

int32_t pr_seq_pos(const pr_context * ctx, int32_t seq) {
    if (!live(ctx, "ctx")) return -1;
    if (seq < 0 || seq >= ctx->c->kv->n_seq) {
        g_last_error = "sequence " + std::to_string(seq) + " is not in [0, " + std::to_string(ctx->c->kv->n_seq) + ")";
        return -1;
    }
    return ctx->c->kv->used[seq];
}

pr_status pr_seq_truncate(pr_context * ctx, int32_t seq, int32_t n_keep) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        ctx->c->truncate(seq, n_keep);
    });
}

pr_status pr_seq_drop(pr_context * ctx, int32_t seq, int32_t p0, int32_t p1) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        pr::context * c = ctx->c;
        on_model(c->m, [c, seq, p0, p1] { c->drop(seq, p0, p1); });
    });
}

pr_status pr_river_build(pr_model * model, const char * river_type, const char * head_type, int32_t keep_attn, int32_t force,
                         const char * backbone_sha256, const char * out_path, int32_t n_threads, pr_progress_fn progress,
                         void * user) {
    return guarded([&] {
        if (!model) pr::fail(PR_ERR_INVALID_ARG, "model is NULL");
        model->river_report.clear();
        pr::build_river(*model->m, river_type, head_type, keep_attn != 0, force != 0, backbone_sha256, out_path, n_threads, progress, user,
                        model->river_report);
    });
}

pr_status pr_river_report(const pr_model * model, char * buf, size_t buf_size, size_t * needed) {
    return guarded([&] {
        if (needed) *needed = 0;
        if (!model) pr::fail(PR_ERR_INVALID_ARG, "model is NULL");
        copy_text(model->river_report, buf, buf_size, needed);
    });
}

pr_status pr_river_attach(pr_model * model, const char * path, const char * backbone_sha256, int32_t use_mmap) {
    return guarded([&] {
        if (!model) pr::fail(PR_ERR_INVALID_ARG, "model is NULL");
        if (model->m->river) pr::fail(PR_ERR_INVALID_ARG, "the model already has a river");
        pr::model * m = model->m;
        const std::string p = path ? path : "", sha = backbone_sha256 ? backbone_sha256 : "";
        on_model(m, [m, p, sha, use_mmap] { pr::attach_river(*m, p.c_str(), sha.c_str(), use_mmap != 0); });
    });
}

pr_exit_params pr_exit_default_params(void) {
    const pr::exit_rule r;
    pr_exit_params p;
    p.exit_threshold = r.tau;
    p.min_exit_layer = r.min_layer;
    p.prefill_exit = r.prefill ? 1 : 0;
    p.batch_rule = (int32_t) r.batch;
    p.exit_rule = (int32_t) r.mode;
    return p;
}

pr_exit_debug_params pr_exit_debug_default_params(void) {
    const pr::exit_rule r;
    pr_exit_debug_params d;
    d.force_exit_layer = r.force_layer;
    d.check_chunk = r.chunk;
    d.host_checks = r.host_checks;
    d.device_carry = r.carry;
    d.predict = r.predict ? 1 : 0;
    return d;
}

pr_status pr_context_set_exit_debug(pr_context * ctx, const pr_exit_params * params, const pr_exit_debug_params * knobs) {
    return guarded([&] {
        if (!ctx || !params || !knobs) pr::fail(PR_ERR_INVALID_ARG, "ctx, params or knobs is NULL");
        pr::exit_rule r;
        r.tau = params->exit_threshold;
        r.min_layer = params->min_exit_layer;
        r.prefill = params->prefill_exit != 0;
        if (params->batch_rule < 0 || params->batch_rule > 2) pr::fail(PR_ERR_INVALID_ARG, "batch_rule must be 0, 1 or 2, got %d", params->batch_rule);
        r.batch = (pr::batch_rule) params->batch_rule;
        if (params->exit_rule < 0 || params->exit_rule > 2) pr::fail(PR_ERR_INVALID_ARG, "exit_rule must be 0 (checked), 1 (predicted) or 2 (guarded), got %d", params->exit_rule);
        r.mode = (pr::exit_mode) params->exit_rule;
        r.force_layer = knobs->force_exit_layer;
        r.chunk = knobs->check_chunk;
        r.host_checks = knobs->host_checks;
        r.carry = knobs->device_carry;
        r.predict = knobs->predict != 0;
        ctx->c->set_rule(r);
    });
}

pr_status pr_context_set_exit(pr_context * ctx, const pr_exit_params * params) {
    const pr_exit_debug_params knobs = pr_exit_debug_default_params();
    return pr_context_set_exit_debug(ctx, params, &knobs);
}

// A per-token list of the last decode, copied as pr_exit_layers says.
static int32_t copy_per_token(const std::vector<int32_t> & e, int32_t * out, int32_t n_max) {
    const int32_t n = (int32_t) std::min<size_t>(e.size(), n_max > 0 ? (size_t) n_max : 0);
    if (out) std::copy(e.begin(), e.begin() + n, out);
    return (int32_t) e.size();
}

int32_t pr_exit_layers(const pr_context * ctx, int32_t * out, int32_t n_max) {
    return live(ctx, "ctx") ? copy_per_token(ctx->c->exits, out, n_max) : 0;
}

int32_t pr_exit_forecasts(const pr_context * ctx, int32_t * out, int32_t n_max) {
    return live(ctx, "ctx") ? copy_per_token(ctx->c->forecast_of, out, n_max) : 0;
}

int32_t pr_exit_observed(const pr_context * ctx, int32_t * out, int32_t n_max) {
    return live(ctx, "ctx") ? copy_per_token(ctx->c->observed, out, n_max) : 0;
}

// ---- pyriver_debug.h -----------------------------------------------------------------------

int32_t pr_model_joined(const pr_model * model) { return live(model, "model") ? model->m->n_joined : 0; }
// A ggml type by its name ("q4_1", "q6_K": any case); GGML_TYPE_COUNT for none.
static ggml_type type_named(const char * name) {
    for (int t = 0; name && t < GGML_TYPE_COUNT; t++) {
        const char * n = ggml_type_name((ggml_type) t);
        size_t i = 0;
        while (n && n[i] && name[i] && std::tolower((unsigned char) n[i]) == std::tolower((unsigned char) name[i])) i++;
        if (n && !n[i] && !name[i]) return (ggml_type) t;
    }
    return GGML_TYPE_COUNT;
}

int32_t pr_debug_tiled_gemm(const char * type, int32_t on) {
    const ggml_type t = type_named(type);
    return t == GGML_TYPE_COUNT ? 0 : pr::tiled_gemm_switch(t, on);
}
int64_t pr_debug_tiled_gemm_runs(const char * type) {
    const ggml_type t = type_named(type);
    return t == GGML_TYPE_COUNT ? 0 : pr::tiled_gemm_runs(t);
}
int32_t pr_debug_tiled_gemm_revision(void) { return pr::tiled_gemm_revision(); }

int64_t pr_graph_runs(const pr_context * ctx) { return live(ctx, "ctx") ? ctx->c->n_graph_runs : 0; }

int32_t pr_graph_input_reads(const pr_context * ctx) { return live(ctx, "ctx") ? ctx->c->last_input_reads : 0; }

pr_status pr_context_counters(const pr_context * ctx, pr_counters * out) {
    return guarded([&] {
        if (!ctx || !out) pr::fail(PR_ERR_INVALID_ARG, "ctx and out must not be NULL");
        const pr::gpu_counts & k = ctx->c->counts;
        *out = pr_counters{k.graphs, k.graph_changes, k.graph_captures, k.nodes, k.syncs, k.host_bytes, k.host_bytes_pinned, k.reads};
    });
}

const char * pr_context_output_buffer(const pr_context * ctx, int32_t * pinned) {
    if (!live(ctx, "ctx")) return nullptr;
    if (pinned) *pinned = ctx->c->output_pinned() ? 1 : 0;
    return ggml_backend_buft_name(ggml_backend_buffer_get_type(ctx->c->outbuf));
}

pr_status pr_context_counters_reset(pr_context * ctx) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        ctx->c->counts = pr::gpu_counts{};
        ctx->c->compare_graphs = true;
    });
}

pr_status pr_kv_fill(pr_context * ctx, float value) {
    return guarded([&] {
        if (!ctx) pr::fail(PR_ERR_INVALID_ARG, "ctx is NULL");
        pr::context * c = ctx->c;
        on_model(c->m, [c, value] { c->kv->fill(value); });
    });
}

pr_status pr_place_layers(int32_t n_layer, int32_t n_gpu_layers, int32_t n_devices, const float * shares, int32_t * out) {
    return guarded([&] {
        if (n_layer < 1) pr::fail(PR_ERR_INVALID_ARG, "n_layer must be >= 1, got %d", n_layer);
        if (n_devices < 0 || n_devices > 16) pr::fail(PR_ERR_INVALID_ARG, "n_devices must be in [0, 16], got %d", n_devices);
        if (!out || (n_devices > 0 && !shares)) pr::fail(PR_ERR_INVALID_ARG, "shares or out is NULL");
        std::vector<float> s(shares, shares + n_devices);
        bool any = false;
        for (float x : s) {
            if (!(x >= 0.0f) || !std::isfinite(x)) pr::fail(PR_ERR_INVALID_ARG, "shares must be finite numbers >= 0");
            any = any || x > 0.0f;
        }
        if (n_devices > 0 && !any) pr::fail(PR_ERR_INVALID_ARG, "shares are all zero");
        const std::vector<int> where = pr::split_layers(n_layer, n_gpu_layers, s);
        std::copy(where.begin(), where.end(), out);
    });
}

} // extern "C"
