#include "gguf_meta.h"

namespace pr {

static bool int_value(const gguf_context * g, int64_t id, int64_t & v) {
    switch (gguf_get_kv_type(g, id)) {
        case GGUF_TYPE_UINT8:  v = gguf_get_val_u8(g, id); return true;
        case GGUF_TYPE_INT8:   v = gguf_get_val_i8(g, id); return true;
        case GGUF_TYPE_UINT16: v = gguf_get_val_u16(g, id); return true;
        case GGUF_TYPE_INT16:  v = gguf_get_val_i16(g, id); return true;
        case GGUF_TYPE_UINT32: v = gguf_get_val_u32(g, id); return true;
        case GGUF_TYPE_INT32:  v = gguf_get_val_i32(g, id); return true;
        case GGUF_TYPE_UINT64: {
            const uint64_t u = gguf_get_val_u64(g, id);
            if (u > (uint64_t) INT64_MAX) return false;
            v = (int64_t) u;
            return true;
        }
        case GGUF_TYPE_INT64:  v = gguf_get_val_i64(g, id); return true;
        default: return false;
    }
}

int64_t meta_int(const gguf_context * g, const char * key, int64_t def, int64_t lo, int64_t hi) {
    const int64_t id = gguf_find_key(g, key);
    if (id < 0) {
        if (def < 0) fail(PR_ERR_MODEL, "metadata key '%s' is missing", key);
        return def;
    }
    int64_t v = 0;
    if (!int_value(g, id, v)) fail(PR_ERR_MODEL, "metadata key '%s' is not an integer", key);
    if (v < lo || v > hi) fail(PR_ERR_MODEL, "metadata key '%s' = %lld is out of range [%lld, %lld]", key, (long long) v, (long long) lo, (long long) hi);
    return v;
}

double meta_float(const gguf_context * g, const char * key, double def) {
    const int64_t id = gguf_find_key(g, key);
    if (id < 0) return def;
    switch (gguf_get_kv_type(g, id)) {
        case GGUF_TYPE_FLOAT32: return gguf_get_val_f32(g, id);
        case GGUF_TYPE_FLOAT64: return gguf_get_val_f64(g, id);
        default: {
            int64_t v = 0;
            if (int_value(g, id, v)) return (double) v;
            fail(PR_ERR_MODEL, "metadata key '%s' is not a number", key);
        }
    }
}

std::string meta_str(const gguf_context * g, const char * key, const char * def) {
    const int64_t id = gguf_find_key(g, key);
    if (id < 0) return def;
    if (gguf_get_kv_type(g, id) != GGUF_TYPE_STRING) fail(PR_ERR_MODEL, "metadata key '%s' is not a string", key);
    return gguf_get_val_str(g, id);
}

bool meta_text(const gguf_context * g, const char * key, std::string & out) {
    const int64_t id = gguf_find_key(g, key);
    if (id < 0) return false;
    const gguf_type t = gguf_get_kv_type(g, id);
    int64_t v = 0;
    if (t == GGUF_TYPE_STRING) out = gguf_get_val_str(g, id);
    else if (t == GGUF_TYPE_FLOAT32) out = std::to_string(gguf_get_val_f32(g, id));
    else if (t == GGUF_TYPE_FLOAT64) out = std::to_string(gguf_get_val_f64(g, id));
    else if (t == GGUF_TYPE_BOOL) out = gguf_get_val_bool(g, id) ? "true" : "false";
    else if (int_value(g, id, v)) out = std::to_string(v);
    else if (t == GGUF_TYPE_UINT64) out = std::to_string(gguf_get_val_u64(g, id));
    else return false;
    return true;
}

} // namespace pr
