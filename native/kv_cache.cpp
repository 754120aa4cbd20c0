#include "kv_cache.h"

#include <algorithm>
#include <map>
#include <string>

namespace pr {

kv_cache::kv_cache(const model & m, int n_rows_, int n_seq_, bool v_trans_)
    : n_seq(n_seq_), n_rows(n_rows_), used(n_seq_, 0), v_trans(v_trans_) {
    const hparams & hp = m.hp;
    const int L = hp.n_layer;
    ggml_init_params ip = {ggml_tensor_overhead() * (size_t) (2 * L + 1), nullptr, true};
    ctx = ggml_init(ip);
    if (!ctx) fail(PR_ERR_BACKEND, "cannot create the KV cache context");
    std::map<ggml_backend_dev_t, std::vector<ggml_tensor *>> per_dev;
    const int64_t rows = (int64_t) n_seq * n_rows;
    for (int il = 0; il < L; il++) {
        ggml_tensor * kt = ggml_new_tensor_2d(ctx, type, hp.n_embd_k_gqa(), rows);
        ggml_tensor * vt = v_trans ? ggml_new_tensor_2d(ctx, type, rows, hp.n_embd_k_gqa())
                                   : ggml_new_tensor_2d(ctx, type, hp.n_embd_k_gqa(), rows);
        ggml_format_name(kt, "cache_k_l%d", il);
        ggml_format_name(vt, "cache_v_l%d", il);
        k.push_back(kt);
        v.push_back(vt);
        per_dev[m.layer_dev[il]].push_back(kt);
        per_dev[m.layer_dev[il]].push_back(vt);
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
}

void kv_cache::fill(float value) {
    std::vector<ggml_fp16_t> row((size_t) ggml_nelements(k[0]), ggml_fp32_to_fp16(value));
    for (size_t i = 0; i < k.size(); i++) {
        ggml_backend_tensor_set(k[i], row.data(), 0, ggml_nbytes(k[i]));
        ggml_backend_tensor_set(v[i], row.data(), 0, ggml_nbytes(v[i]));
    }
}

} // namespace pr
