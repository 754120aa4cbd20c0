#include "kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <string>

namespace pr {

// llama.cpp's cache types (common/arg.cpp's kv_cache_types).
static const ggml_type kv_types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
                                     GGML_TYPE_Q4_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1};

static void check_one(const model & m, int t, const char * side) {
    if (std::find(std::begin(kv_types), std::end(kv_types), (ggml_type) t) == std::end(kv_types)) {
        std::string names;
        for (ggml_type k : kv_types) names += std::string(names.empty() ? "" : ", ") + ggml_type_name(k);
        fail(PR_ERR_INVALID_ARG, "Unsupported cache type %d for %s (allowed: %s)", t, side, names.c_str());
    }
    const int64_t blck = ggml_blck_size((ggml_type) t);
    if (m.hp.n_embd_head % blck != 0) {
        fail(PR_ERR_INVALID_ARG, "%s cache type %s with block size %lld does not divide n_embd_head_%c=%d", side,
             ggml_type_name((ggml_type) t), (long long) blck, side[0] == 'K' ? 'k' : 'v', m.hp.n_embd_head);
    }
}

void check_kv_types(const model & m, int type_k, int type_v, bool flash_attn) {
    check_one(m, type_k, "K");
    check_one(m, type_v, "V");
    if (!flash_attn && ggml_is_quantized((ggml_type) type_v)) {
        fail(PR_ERR_INVALID_ARG, "quantized V cache requires flash_attn to be enabled (type_v %s)", ggml_type_name((ggml_type) type_v));
    }
}

kv_cache::kv_cache(const model & m, int n_rows_, int n_seq_, bool v_trans_, ggml_type type_k_, ggml_type type_v_)
    : type_k(type_k_), type_v(type_v_), n_seq(n_seq_), n_rows(n_rows_), used(n_seq_, 0),
      delta((size_t) n_seq_ * n_rows_, 0), v_trans(v_trans_) {
    check_kv_types(m, type_k, type_v, !v_trans);
    const hparams & hp = m.hp;
    const int L = hp.n_layer;
    ggml_init_params ip = {ggml_tensor_overhead() * (size_t) (4 * L + 1), nullptr, true};
    ctx = ggml_init(ip);
    if (!ctx) fail(PR_ERR_BACKEND, "cannot create the KV cache context");
    std::map<ggml_backend_dev_t, std::vector<ggml_tensor *>> per_dev;
    const int64_t rows = (int64_t) n_seq * n_rows;
    for (int il = 0; il < L; il++) {
        ggml_tensor * kt = ggml_new_tensor_2d(ctx, type_k, hp.n_embd_k_gqa(), rows);
        ggml_tensor * vt = v_trans ? ggml_new_tensor_2d(ctx, type_v, rows, hp.n_embd_k_gqa())
                                   : ggml_new_tensor_2d(ctx, type_v, hp.n_embd_k_gqa(), rows);
        ggml_format_name(kt, "cache_k_l%d", il);
        ggml_format_name(vt, "cache_v_l%d", il);
        k.push_back(kt);
        v.push_back(vt);
        per_dev[m.layer_dev[il]].push_back(kt);
        per_dev[m.layer_dev[il]].push_back(vt);
    }
    // llama.cpp's rule for the rotations (LLAMA_ATTN_ROT_DISABLE=1 turns them off there and here)
    const char * off = getenv("LLAMA_ATTN_ROT_DISABLE");
    const bool rot_off = off && atoi(off) != 0;
    const int hd = hp.n_embd_head;
    const bool rot_k = !rot_off && ggml_is_quantized(type_k) && hd > 0 && hd % 64 == 0;
    const bool rot_v = !rot_off && ggml_is_quantized(type_v) && hd > 0 && hd % 64 == 0;
    int n_rot_k = 64;   // the largest power of 2 dividing the head (llama.cpp's build_input_k_rot)
    while (rot_k && hd % (2 * n_rot_k) == 0) n_rot_k *= 2;
    std::map<ggml_backend_dev_t, std::pair<ggml_tensor *, ggml_tensor *>> rot_of;
    for (int il = 0; il < L; il++) {
        auto & r = rot_of[m.layer_dev[il]];
        if (!r.first && (rot_k || rot_v)) {
            if (rot_k) r.first = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_rot_k, n_rot_k);
            if (rot_v) r.second = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 64);
            for (ggml_tensor * t : {r.first, r.second}) {
                if (!t) continue;
                ggml_set_name(t, t == r.first ? "attn_k_rot" : "attn_v_rot");
                per_dev[m.layer_dev[il]].push_back(t);
            }
        }
        k_rot.push_back(r.first);
        v_rot.push_back(r.second);
    }
    std::string what = "the KV cache of n_ctx=" + std::to_string(n_rows);
    if (n_seq > 1) what += " x " + std::to_string(n_seq) + " sequences";
    try {
        for (auto & kv : per_dev) buffers.push_back(alloc_tensors(ggml_backend_dev_buffer_type(kv.first), kv.second, what.c_str()));
    } catch (...) {
        for (auto b : buffers) ggml_backend_buffer_free(b);   // the destructor does not run
        ggml_free(ctx);
        throw;
    }
    clear();
}

kv_cache::~kv_cache() {
    for (auto b : buffers) ggml_backend_buffer_free(b);
    ggml_free(ctx);
}

void kv_cache::clear() {
    for (auto b : buffers) ggml_backend_buffer_clear(b, 0);
    std::fill(used.begin(), used.end(), 0);
    std::fill(delta.begin(), delta.end(), 0);
    shifted = false;
    set_rot();   // the clear wiped them
}

// llama-kv-cache.cpp's ggml_gen_hadamard: orthonormal, its own inverse.
static std::vector<float> hadamard(int n) {
    std::vector<float> d((size_t) n * n);
    d[0] = 1.0f / sqrtf((float) n);
    for (int s = 1; s < n; s *= 2) {
        for (int i = 0; i < s; i++) {
            for (int j = 0; j < s; j++) {
                const float val = d[(size_t) i * n + j];
                d[(size_t) (i + s) * n + j] = val;
                d[(size_t) i * n + j + s] = val;
                d[(size_t) (i + s) * n + j + s] = -val;
            }
        }
    }
    return d;
}

void kv_cache::set_rot() {
    for (const auto * rots : {&k_rot, &v_rot}) {
        for (ggml_tensor * t : *rots) {
            if (!t) continue;
            const std::vector<float> h = hadamard((int) t->ne[0]);
            ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
        }
    }
}

size_t kv_cache::total_bytes(bool v_side) const {
    size_t n = 0;
    for (const ggml_tensor * t : v_side ? v : k) n += ggml_nbytes(t);
    return n;
}

// Every element of every block's K and V set to value, in the cache's types.
void kv_cache::fill(float value) {
    auto set = [value](ggml_tensor * t) {
        const std::vector<float> f32((size_t) t->ne[0], value);
        std::vector<uint8_t> row(t->nb[1]);
        if (t->type == GGML_TYPE_F32) std::memcpy(row.data(), f32.data(), row.size());
        else ggml_get_type_traits(t->type)->from_float_ref(f32.data(), row.data(), t->ne[0]);
        std::vector<uint8_t> all(ggml_nbytes(t));
        for (int64_t r = 0; r < t->ne[1]; r++) std::memcpy(all.data() + r * t->nb[1], row.data(), row.size());
        ggml_backend_tensor_set(t, all.data(), 0, all.size());
    };
    for (size_t i = 0; i < k.size(); i++) {
        set(k[i]);
        set(v[i]);
    }
}

} // namespace pr
