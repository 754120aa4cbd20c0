// The KV cache: per block, K and V rows on that block's device. Each sequence owns a region of
// n_rows rows (row = position in the sequence), as llama.cpp's per-sequence streams do: a token
// attends to its own region only, so its attention costs what it costs alone, whatever the other
// sequences hold. Backbone and river blocks of layer l write the same rows, which is what makes
// River exits leave no holes.
#pragma once

#include "model.h"

namespace pr {

struct kv_cache {
    ggml_type type = GGML_TYPE_F16;
    int n_seq = 1;                   // sequences, one region each
    int n_rows = 0;                  // rows per region
    std::vector<int> used;           // per sequence: positions 0..used-1 hold valid K/V
    bool v_trans = true;             // V stored [n_seq * n_rows, n_embd_v] for the mul_mat attention path
    std::vector<ggml_tensor *> k;    // [n_embd_k_gqa, n_seq * n_rows]
    std::vector<ggml_tensor *> v;    // [n_seq * n_rows, n_embd_v_gqa] if v_trans, else like k
    ggml_context * ctx = nullptr;
    std::vector<ggml_backend_buffer_t> buffers;

    kv_cache(const model & m, int n_rows, int n_seq, bool v_trans);
    ~kv_cache();
    kv_cache(const kv_cache &) = delete;
    kv_cache & operator=(const kv_cache &) = delete;

    int64_t row(int seq, int pos) const { return (int64_t) seq * n_rows + pos; }
    void clear();
    void fill(float value);
};

} // namespace pr
