#include "river.h"
#include "gguf_meta.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cctype>
#include <cstring>
#include <thread>

namespace pr {

static const char * KEY_VERSION = "pyriver.river.version";
static const char * KEY_TYPE = "pyriver.river.type";
static const char * KEY_SHA = "pyriver.river.backbone.sha256";
static const char * KEY_SIZE = "pyriver.river.backbone.size";
static const char * KEY_NAME = "pyriver.river.backbone.name";
static const char * KEY_TYPES = "pyriver.river.tensor_types";
static const char * KEY_HEAD = "pyriver.river.head_type";
static const char * KEY_KEPT = "pyriver.river.backbone_matrices";   // "attn": the river's attention is the backbone's
static const char * KEPT_ATTN = "attn";
static const char * RIVER_HEAD = "output.weight";   // the exited tokens' head, when the sidecar has one

// The attention's matrices (Q/K/V/O, a fused QKV), by the tables' one naming rule.
static bool attention_matrix(const tensor_spec & t) { return strncmp(t.name, "attn_", 5) == 0; }

// The matrices a river requantizes: those its architecture's table marks as matrices, each
// expert of a mixture (a stacked tensor's rows) included, its router not (river == false).
static std::vector<const tensor_spec *> block_matrices(const model & m) {
    std::vector<const tensor_spec *> out;
    for (const tensor_spec & t : m.arch->block) {
        if (t.matrix && t.river) out.push_back(&t);
    }
    return out;
}

// ggml's names, in any case: users write q3_k as often as ggml's q3_K (no two names differ in case only)
static bool same_name(const std::string & a, const char * b) {
    size_t n = strlen(b);
    if (a.size() != n) return false;
    for (size_t i = 0; i < n; i++) {
        if (tolower((unsigned char) a[i]) != tolower((unsigned char) b[i])) return false;
    }
    return true;
}

static ggml_type type_by_name(const std::string & name) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const ggml_type_traits * tr = ggml_get_type_traits((ggml_type) t);
        if (tr && tr->type_name && same_name(name, tr->type_name) && usable_type((ggml_type) t)) return (ggml_type) t;
    }
    fail(PR_ERR_INVALID_ARG, "unknown river type '%s'", name.c_str());
}

static bool quantizable(ggml_type t) {
    if (!usable_type(t) || ggml_quantize_requires_imatrix(t)) return false;
    if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) return true;
    return ggml_get_type_traits(t)->is_quantized && ggml_get_type_traits(t)->from_float_ref != nullptr;
}

// The requested type when a row fits its blocks, else the type of nearest bits per weight among
// the 32-element-block types (and F16) that fit.
static double bits_per_weight(ggml_type t) {
    return 8.0 * (double) ggml_type_size(t) / (double) ggml_blck_size(t);
}

static ggml_type fit_type(ggml_type want, int64_t n_per_row) {
    if (n_per_row % ggml_blck_size(want) == 0) return want;
    static const ggml_type cands[] = {GGML_TYPE_MXFP4, GGML_TYPE_Q4_0, GGML_TYPE_IQ4_NL, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
                                      GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_F16};
    const double bpw = bits_per_weight(want);
    ggml_type best = GGML_TYPE_F16;
    double best_d = 1e9;
    for (ggml_type c : cands) {
        if (!quantizable(c) || n_per_row % ggml_blck_size(c) != 0) continue;
        const double d = std::fabs(bits_per_weight(c) - bpw);
        if (d < best_d - 1e-9) { best_d = d; best = c; }
    }
    return best;
}

static void to_f32(const ggml_tensor * t, const void * src, float * dst) {
    const int64_t n = ggml_nelements(t);
    if (t->type == GGML_TYPE_F32) { memcpy(dst, src, n * sizeof(float)); return; }
    ggml_get_type_traits(t->type)->to_float(src, dst, n);
}

void build_river(const model & m, const char * river_type, const char * head_type, bool keep_attn, bool force,
                 const char * backbone_sha256, const char * out_path, int n_threads, progress_fn progress, void * user,
                 std::string & report) {
    if (!river_type || !out_path || !backbone_sha256) fail(PR_ERR_INVALID_ARG, "river type, output path and sha256 are required");
    const ggml_type want = type_by_name(river_type);
    if (!quantizable(want)) fail(PR_ERR_INVALID_ARG, "river type '%s' cannot be made without an importance matrix", river_type);
    const bool with_head = head_type && *head_type;
    const ggml_type want_head = with_head ? type_by_name(head_type) : want;
    if (!quantizable(want_head)) fail(PR_ERR_INVALID_ARG, "river head type '%s' cannot be made without an importance matrix", head_type);
    if (m.file->mapping == nullptr) fail(PR_ERR_INTERNAL, "the model file is not mapped");

    const int L = m.hp.n_layer;
    struct job { std::string name; const ggml_tensor * src; ggml_type type; std::vector<uint8_t> data; };
    std::vector<job> jobs;
    auto add_job = [&](const std::string & name, const ggml_tensor * src, ggml_type type_wanted) {
        job j;
        j.name = name;
        j.src = src;
        j.type = fit_type(type_wanted, src->ne[0]);
        const size_t row_new = ggml_row_size(j.type, src->ne[0]), row_old = ggml_row_size(src->type, src->ne[0]);
        if (j.type != type_wanted) report += j.name + ": " + ggml_type_name(type_wanted) + " does not fit rows of " + std::to_string(src->ne[0]) + ", using " + ggml_type_name(j.type) + "\n";
        if (row_new >= row_old && !force) {
            fail(PR_ERR_INVALID_ARG, "river type %s is not cheaper than the backbone's %s for %s (%zu vs %zu bytes a row); pass force to build it anyway",
                 ggml_type_name(j.type), ggml_type_name(src->type), j.name.c_str(), row_new, row_old);
        }
        jobs.push_back(std::move(j));
    };
    for (int il = 0; il < L; il++) {
        for (const tensor_spec * spec : block_matrices(m)) {
            const ggml_tensor * src = m.blocks[il].*(spec->member);
            if (!src) continue;   // an optional matrix this file lacks (separate Q/K/V beside a fused attn_qkv)
            if (keep_attn && attention_matrix(*spec)) continue;   // the backbone's own, bound at attach
            add_job("blk." + std::to_string(il) + "." + spec->name, src, want);
        }
    }
    // The head is the largest matrix of a small model and an exited token's head costs as much as
    // a full-depth token's; its copy reads the tied embedding where the model ties them.
    if (with_head) add_job(RIVER_HEAD, m.output, want_head);

    const int nt = std::max(1, n_threads);
    for (size_t ji = 0; ji < jobs.size(); ji++) {
        job & j = jobs[ji];
        const ggml_tensor * src = j.src;
        const int64_t n_per_row = src->ne[0], nrows = ggml_nrows(src);   // all experts' rows
        const uint8_t * src_data = m.file->data(src);   // in its shard, for a split model
        std::vector<float> f32((size_t) ggml_nelements(src));
        to_f32(src, src_data, f32.data());
        j.data.resize(ggml_row_size(j.type, n_per_row) * nrows);
        ggml_quantize_init(j.type);
        // Rows split over threads; each chunk writes its own rows.
        std::vector<std::thread> th;
        const int64_t per = (nrows + nt - 1) / nt;
        for (int t = 0; t < nt; t++) {
            const int64_t r0 = t * per, r1 = std::min(nrows, r0 + per);
            if (r0 >= r1) break;
            th.emplace_back([&, r0, r1] { ggml_quantize_chunk(j.type, f32.data(), j.data.data(), r0 * n_per_row, r1 - r0, n_per_row, nullptr); });
        }
        for (auto & t : th) t.join();
        if (progress && progress((int32_t) ji + 1, (int32_t) jobs.size(), user) != 0) fail(PR_ERR_INVALID_ARG, "river build cancelled");
    }

    gguf_context * g = gguf_init_empty();
    ggml_init_params ip = {ggml_tensor_overhead() * (jobs.size() + 1), nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    struct cleanup { gguf_context * g; ggml_context * c; ~cleanup() { gguf_free(g); ggml_free(c); } } cl{g, ctx};
    gguf_set_val_str(g, "general.architecture", "pyriver-river");
    gguf_set_val_str(g, KEY_VERSION, pr_version());
    gguf_set_val_str(g, KEY_TYPE, ggml_type_name(want));
    if (with_head) gguf_set_val_str(g, KEY_HEAD, ggml_type_name(want_head));
    if (keep_attn) gguf_set_val_str(g, KEY_KEPT, KEPT_ATTN);
    gguf_set_val_str(g, KEY_SHA, backbone_sha256);
    gguf_set_val_u64(g, KEY_SIZE, (uint64_t) m.file->total_size());
    const std::string bname = m.path.substr(m.path.find_last_of('/') + 1);
    gguf_set_val_str(g, KEY_NAME, bname.c_str());
    std::vector<std::string> types;
    for (auto & j : jobs) types.push_back(j.name + "=" + ggml_type_name(j.type));
    std::vector<const char *> tp;
    for (auto & s : types) tp.push_back(s.c_str());
    gguf_set_arr_str(g, KEY_TYPES, tp.data(), tp.size());
    for (auto & j : jobs) {
        ggml_tensor * t = ggml_new_tensor_3d(ctx, j.type, j.src->ne[0], j.src->ne[1], j.src->ne[2]);
        ggml_set_name(t, j.name.c_str());
        t->data = j.data.data();
        gguf_add_tensor(g, t);
    }
    const std::string tmp = std::string(out_path) + ".tmp";
    if (!gguf_write_to_file(g, tmp.c_str(), false)) {
        remove(tmp.c_str());
        fail(PR_ERR_IO, "cannot write the river sidecar '%s'", tmp.c_str());
    }
    if (rename(tmp.c_str(), out_path) != 0) {
        remove(tmp.c_str());
        fail(PR_ERR_IO, "cannot move the river sidecar into place at '%s'", out_path);
    }
}

void attach_river(model & m, const char * path, const char * backbone_sha256, bool use_mmap) {
    std::unique_ptr<river_blocks> r(new river_blocks());
    r->file = open_weight_file(path);
    const gguf_context * g = r->file->gguf;
    if (meta_str(g, "general.architecture", "") != "pyriver-river") fail(PR_ERR_MODEL, "'%s' is not a pyriver river sidecar", path);
    const std::string sha = meta_str(g, KEY_SHA, "");
    const int64_t size = meta_int(g, KEY_SIZE, 0, 0, INT64_MAX);
    if (backbone_sha256 && *backbone_sha256 && sha != backbone_sha256) {
        fail(PR_ERR_MODEL, "river sidecar '%s' belongs to another model (backbone sha256 %.12s..., this model %.12s...)", path, sha.c_str(), backbone_sha256);
    }
    if ((size_t) size != m.file->total_size()) fail(PR_ERR_MODEL, "river sidecar '%s' was built for a backbone of %lld bytes, this one has %zu", path, (long long) size, m.file->total_size());

    // What the sidecar declares left at the backbone's: those matrices must be absent from it (a
    // file that declares and holds them is not one this code wrote), the others present.
    const std::string kept = meta_str(g, KEY_KEPT, "");
    if (!kept.empty() && kept != KEPT_ATTN) fail(PR_ERR_MODEL, "river sidecar '%s' keeps unknown backbone matrices '%s'", path, kept.c_str());
    const bool keep_attn = kept == KEPT_ATTN;

    const int L = m.hp.n_layer;
    r->blocks.resize(L);
    for (int il = 0; il < L; il++) {
        block_weights & rb = r->blocks[il];
        const block_weights & bb = m.blocks[il];
        rb = bb;   // norms, biases, Q/K norms and post-norms are shared, not copied; matrices follow
        rb.gate_up_joined = nullptr;   // the river's own matrices; its attention the backbone's joined one only when kept
        if (!keep_attn) rb.qkv_joined = rb.bqkv_joined = nullptr;
        for (const tensor_spec * spec : block_matrices(m)) {
            const ggml_tensor * b = bb.*(spec->member);
            if (!b) continue;
            const std::string name = "blk." + std::to_string(il) + "." + spec->name;
            ggml_tensor * t = r->file->tensor(name);
            if (keep_attn && attention_matrix(*spec)) {
                if (t) fail(PR_ERR_MODEL, "river sidecar '%s' declares its attention the backbone's but holds '%s'", path, name.c_str());
                continue;   // rb's is bb's: shared, no copy
            }
            if (!t) fail(PR_ERR_MODEL, "river sidecar '%s' lacks tensor '%s'", path, name.c_str());
            if (!usable_type(t->type)) fail(PR_ERR_MODEL, "river tensor '%s' has unsupported type %d", name.c_str(), (int) t->type);
            if (t->ne[0] != b->ne[0] || t->ne[1] != b->ne[1] || t->ne[2] != b->ne[2] || t->ne[3] != 1) {
                fail(PR_ERR_MODEL, "river tensor '%s' has shape [%lld, %lld, %lld, %lld], the backbone's is [%lld, %lld, %lld]", name.c_str(),
                     (long long) t->ne[0], (long long) t->ne[1], (long long) t->ne[2], (long long) t->ne[3], (long long) b->ne[0],
                     (long long) b->ne[1], (long long) b->ne[2]);
            }
            if (t->ne[0] % ggml_blck_size(t->type) != 0) fail(PR_ERR_MODEL, "river tensor '%s': rows do not fit its type", name.c_str());
            rb.*(spec->member) = t;
        }
    }
    if (ggml_tensor * h = r->file->tensor(RIVER_HEAD)) {
        const ggml_tensor * b = m.output;
        if (!usable_type(h->type)) fail(PR_ERR_MODEL, "river head '%s' has unsupported type %d", RIVER_HEAD, (int) h->type);
        if (h->ne[0] != b->ne[0] || h->ne[1] != b->ne[1] || h->ne[2] != 1 || h->ne[3] != 1 || h->ne[0] % ggml_blck_size(h->type) != 0) {
            fail(PR_ERR_MODEL, "river sidecar '%s': its head has shape [%lld, %lld, %lld, %lld] (%s), the backbone's is [%lld, %lld]", path,
                 (long long) h->ne[0], (long long) h->ne[1], (long long) h->ne[2], (long long) h->ne[3], ggml_type_name(h->type),
                 (long long) b->ne[0], (long long) b->ne[1]);
        }
        r->output = h;
    }
    // River blocks live on the device of their backbone block: their K/V go to the same cache. The
    // river's head goes with the backbone's.
    const model & mr = m;
    place_weights(*r->file, [&](const ggml_tensor * t) {
        int il = -1;
        if (sscanf(ggml_get_name(t), "blk.%d.", &il) == 1 && il >= 0 && il < mr.hp.n_layer) return mr.layer_dev[il];
        if (strcmp(ggml_get_name(t), RIVER_HEAD) == 0) return mr.output_dev;
        return mr.cpu_dev;
    }, m.cpu_dev, use_mmap, [](const ggml_tensor *) { return true; });
    m.river = std::move(r);
}

} // namespace pr
