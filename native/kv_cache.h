// The KV cache: per block, K and V rows on that block's device. Each sequence owns a region of
// n_rows rows (row = position in the sequence), as llama.cpp's per-sequence streams do: a token
// attends to its own region only, so its attention costs what it costs alone, whatever the other
// sequences hold. Backbone and river blocks of layer l write the same rows, which is what makes
// River exits leave no holes.
#pragma once

#include "model.h"

namespace pr {

struct kv_cache {
    ggml_type type_k = GGML_TYPE_F16;
    ggml_type type_v = GGML_TYPE_F16;
    int n_seq = 1;                   // sequences, one region each
    int n_rows = 0;                  // rows per region
    std::vector<int> used;           // per sequence: positions 0..used-1 hold valid K/V
    // Per row: the position delta its key still has to be rotated by (context::drop records it,
    // context::apply_shift rotates every row at once before the cache is read: llama.cpp's
    // seq_add and K-shift), and whether any is not 0.
    std::vector<int32_t> delta;
    bool shifted = false;
    bool v_trans = true;             // V stored [n_seq * n_rows, n_embd_v] for the mul_mat attention path
    std::vector<ggml_tensor *> k;    // [n_embd_k_gqa, n_seq * n_rows]
    std::vector<ggml_tensor *> v;    // [n_seq * n_rows, n_embd_v_gqa] if v_trans, else like k
    // llama.cpp rotates what a quantized cache holds (llama-kv-cache.cpp's attn_rot_k/v): Q and K by
    // an orthonormal Walsh-Hadamard matrix of n_rot_k (the largest power of 2 from 64 dividing the
    // head), V and the attention's output by one of 64, so that quantization error spreads over a
    // head's dimensions. Per block, the matrix on its device; nullptr where not rotated.
    std::vector<ggml_tensor *> k_rot, v_rot;
    ggml_context * ctx = nullptr;
    std::vector<ggml_backend_buffer_t> buffers;

    // type_k, type_v: llama.cpp's cache types; check_types refuses the others, a quantized V
    // without flash attention (transposed V is read a column at a time) and a block that does not
    // divide the head dimension, with llama.cpp's messages.
    kv_cache(const model & m, int n_rows, int n_seq, bool v_trans, ggml_type type_k, ggml_type type_v);
    ~kv_cache();
    kv_cache(const kv_cache &) = delete;
    kv_cache & operator=(const kv_cache &) = delete;

    int64_t row(int seq, int pos) const { return (int64_t) seq * n_rows + pos; }
    // Bytes of n elements of a K (V) row: views of a quantized cache are in whole blocks.
    size_t k_bytes(int64_t n) const { return ggml_row_size(type_k, n); }
    size_t v_bytes(int64_t n) const { return ggml_row_size(type_v, n); }
    size_t total_bytes(bool v_side) const;
    void clear();
    void set_rot();
    void fill(float value);
};

void check_kv_types(const model & m, int type_k, int type_v, bool flash_attn);

} // namespace pr
