// The KV cache: per block, K and V rows (one row per token position) on that block's device.
// Backbone and river blocks of layer l write the same rows, which is what makes River exits
// leave no holes.
#pragma once

#include "model.h"

namespace pr {

struct kv_cache {
    ggml_type type = GGML_TYPE_F16;
    int n_ctx = 0;
    int n_used = 0;                  // positions 0..n_used-1 hold valid K/V
    bool v_trans = true;             // V stored [n_ctx, n_embd_v] for the mul_mat attention path
    std::vector<ggml_tensor *> k;    // [n_embd_k_gqa, n_ctx]
    std::vector<ggml_tensor *> v;    // [n_ctx, n_embd_v_gqa] if v_trans, else like k
    ggml_context * ctx = nullptr;
    std::vector<ggml_backend_buffer_t> buffers;

    kv_cache(const model & m, int n_ctx, bool v_trans);
    ~kv_cache();
    kv_cache(const kv_cache &) = delete;
    kv_cache & operator=(const kv_cache &) = delete;

    void clear();
    void fill(float value);
};

} // namespace pr
