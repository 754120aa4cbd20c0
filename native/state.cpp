// A saved KV cache of one sequence: what pyriver.Llama.save_state puts in llama_cpp's LlamaState
// (sequence 0), and what the server's prompt cache keeps of a slot's prompt (any sequence).
// Layout: a fixed header that names what the rows fit (model shape and size, n_ctx, KV types and
// layout, token count), then per block the K rows of the cached tokens and their V values. A
// state is checked against the context before anything is written, so a refused one leaves the
// cache as it was.
#include "context.h"

#include <cstring>

namespace pr {

namespace {

constexpr char MAGIC[8] = {'P', 'R', 'K', 'V', 'S', 'T', '0', '1'};

struct state_header {
    char magic[8];
    int32_t n_layer, n_embd, n_vocab, n_head_kv, n_embd_head;
    int64_t n_params, n_bytes;
    int32_t n_ctx, type_k, type_v, v_trans;
    int64_t k_ne0, v_ne0, v_ne1;
    int32_t n_tokens, n_rows;   // n_ctx as asked; n_rows: the cache's rows (n_ctx padded)
};

state_header header_of(const context & c, int seq) {
    state_header h{};
    std::memcpy(h.magic, MAGIC, sizeof MAGIC);
    const hparams & hp = c.m->hp;
    h.n_layer = hp.n_layer; h.n_embd = hp.n_embd; h.n_vocab = hp.n_vocab;
    h.n_head_kv = hp.n_head_kv; h.n_embd_head = hp.n_embd_head;
    h.n_params = c.m->n_params; h.n_bytes = c.m->n_bytes;
    h.n_ctx = c.params.n_ctx;
    h.n_rows = c.kv->n_rows;
    h.type_k = c.kv->k[0]->type; h.type_v = c.kv->v[0]->type; h.v_trans = c.kv->v_trans ? 1 : 0;
    h.k_ne0 = c.kv->k[0]->ne[0]; h.v_ne0 = c.kv->v[0]->ne[0]; h.v_ne1 = c.kv->v[0]->ne[1];
    h.n_tokens = c.kv->used[seq];
    return h;
}

// Bytes of one block's K and V for n tokens.
size_t block_bytes(const context & c, int n) {
    const ggml_tensor * k = c.kv->k[0];
    const ggml_tensor * v = c.kv->v[0];
    size_t kb = (size_t) n * k->nb[1];
    size_t vb = c.kv->v_trans ? (size_t) v->ne[1] * n * ggml_type_size(v->type) : (size_t) n * v->nb[1];
    return kb + vb;
}

// Copies the first n rows of sequence seq's K and V of each block to (get) or from (set) buf.
void copy_rows(context & c, int seq, int n, uint8_t * buf, bool get) {
    auto io = [&](ggml_tensor * t, size_t off, size_t size) {
        if (get) ggml_backend_tensor_get(t, buf, off, size);
        else ggml_backend_tensor_set(t, buf, off, size);
        buf += size;
    };
    for (size_t il = 0; il < c.kv->k.size(); il++) {
        ggml_tensor * k = c.kv->k[il];
        ggml_tensor * v = c.kv->v[il];
        if (n == 0) continue;
        const int64_t r0 = c.kv->row(seq, 0);
        io(k, (size_t) r0 * k->nb[1], (size_t) n * k->nb[1]);
        if (c.kv->v_trans) {   // V is [rows, n_embd_v]: the sequence's first n of each of its rows
            const size_t ts = ggml_type_size(v->type);
            for (int64_t j = 0; j < v->ne[1]; j++) io(v, (size_t) j * v->nb[1] + (size_t) r0 * ts, (size_t) n * ts);
        } else {
            io(v, (size_t) r0 * v->nb[1], (size_t) n * v->nb[1]);
        }
    }
}

} // namespace

static void check_seq(const context & c, int seq) {
    if (seq < 0 || seq >= c.kv->n_seq) fail(PR_ERR_INVALID_ARG, "sequence %d is outside 0..%d", seq, c.kv->n_seq - 1);
}

size_t state_size(const context & c, int seq) {
    check_seq(c, seq);
    return sizeof(state_header) + c.kv->k.size() * block_bytes(c, c.kv->used[seq]);
}

size_t state_get(context & c, int seq, uint8_t * buf, size_t size) {
    const size_t need = state_size(c, seq);
    if (size < need) fail(PR_ERR_INVALID_ARG, "the state buffer holds %zu bytes, %zu are needed", size, need);
    c.apply_shift();   // the rows as they are read: rotated
    state_header h = header_of(c, seq);
    std::memcpy(buf, &h, sizeof h);
    copy_rows(c, seq, h.n_tokens, buf + sizeof h, true);
    return need;
}

void state_set(context & c, int seq, const uint8_t * buf, size_t size) {
    check_seq(c, seq);
    if (size < sizeof(state_header)) fail(PR_ERR_INVALID_ARG, "not a pyriver state: %zu bytes", size);
    state_header h;
    std::memcpy(&h, buf, sizeof h);
    if (std::memcmp(h.magic, MAGIC, sizeof MAGIC) != 0) fail(PR_ERR_INVALID_ARG, "not a pyriver state (bad magic)");
    state_header mine = header_of(c, seq);
    if (h.n_layer != mine.n_layer || h.n_embd != mine.n_embd || h.n_vocab != mine.n_vocab ||
        h.n_head_kv != mine.n_head_kv || h.n_embd_head != mine.n_embd_head || h.n_params != mine.n_params ||
        h.n_bytes != mine.n_bytes)
        fail(PR_ERR_INVALID_ARG, "the state is of another model (%d blocks, %lld weight bytes; this one: %d, %lld)",
             h.n_layer, (long long) h.n_bytes, mine.n_layer, (long long) mine.n_bytes);
    if (h.n_ctx != mine.n_ctx || h.n_rows != mine.n_rows) fail(PR_ERR_INVALID_ARG, "the state is of a context of n_ctx %d; this one has %d", h.n_ctx, mine.n_ctx);
    if (h.type_k != mine.type_k || h.type_v != mine.type_v || h.v_trans != mine.v_trans || h.k_ne0 != mine.k_ne0 ||
        h.v_ne0 != mine.v_ne0 || h.v_ne1 != mine.v_ne1)
        fail(PR_ERR_INVALID_ARG, "the state's KV cache layout (types %d/%d, v_trans %d) differs from this context's (%d/%d, %d)",
             h.type_k, h.type_v, h.v_trans, mine.type_k, mine.type_v, mine.v_trans);
    if (h.n_tokens < 0 || h.n_tokens > mine.n_ctx || h.n_tokens > mine.n_rows) fail(PR_ERR_INVALID_ARG, "the state holds %d tokens, outside [0, %d]", h.n_tokens, mine.n_ctx);
    const size_t need = sizeof h + c.kv->k.size() * block_bytes(c, h.n_tokens);
    if (size != need) fail(PR_ERR_INVALID_ARG, "the state has %zu bytes; %d tokens need %zu", size, h.n_tokens, need);
    c.apply_shift();   // no delta left for the rows it writes
    copy_rows(c, seq, h.n_tokens, const_cast<uint8_t *>(buf) + sizeof h, false);   // set only reads buf
    c.truncate(seq, 0);
    c.kv->used[seq] = h.n_tokens;
    c.prev_exit = -1;
}

} // namespace pr
