#include "split.h"
#include "gguf_meta.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <unordered_set>

namespace pr {

static const char * const KEY_NO = "split.no";
static const char * const KEY_COUNT = "split.count";
static const char * const KEY_TENSORS = "split.tensors.count";

// A uint16 key as llama.cpp reads split.no and split.count (gguf_get_val_u16, which asserts on
// another type: llama-model-loader reads a shard's split.no so); -1 when absent.
static int u16_key(const gguf_context * g, const char * key, const std::string & path) {
    const int64_t id = gguf_find_key(g, key);
    if (id < 0) return -1;
    const gguf_type t = gguf_get_kv_type(g, id);
    if (t != GGUF_TYPE_UINT16) fail(PR_ERR_MODEL, "'%s': %s is a %s, not a u16", path.c_str(), key, gguf_type_name(t));
    return gguf_get_val_u16(g, id);
}

// llama_split_path's name of shard i (from 0) of n.
static std::string shard_name(const std::string & prefix, int i, int n) {
    char tail[40];
    snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", i + 1, n);
    return prefix + tail;
}

std::unique_ptr<weight_file> open_model_file(const char * path) {
    std::unique_ptr<weight_file> f = open_weight_file(path);
    const std::string first = path;
    const int n = u16_key(f->gguf, KEY_COUNT, first);
    if (n <= 1) return f;   // llama.cpp reads no split.count, or 0 or 1, as one file
    const int no = u16_key(f->gguf, KEY_NO, first);
    if (no < 0) fail(PR_ERR_MODEL, "'%s' has split.count %d but no split.no", path, n);
    // llama.cpp's rule too: a split model is loaded by its first shard, which has the metadata.
    if (no != 0) {
        const std::string own = shard_name("", no, n);
        const bool named = first.size() > own.size() && first.compare(first.size() - own.size(), own.size(), own) == 0;
        fail(PR_ERR_MODEL, "'%s' is shard %d of %d of a split model: load the first shard, '%s'", path, no + 1, n,
             shard_name(named ? first.substr(0, first.size() - own.size()) : "PREFIX", 0, n).c_str());
    }
    const std::string tail = shard_name("", 0, n);
    if (first.size() <= tail.size() || first.compare(first.size() - tail.size(), tail.size(), tail) != 0) {
        fail(PR_ERR_MODEL, "'%s' is the first of %d shards but its name does not end in '%s' (the other shards are found by name)",
             path, n, tail.c_str());
    }
    const std::string prefix = first.substr(0, first.size() - tail.size());

    std::unordered_set<std::string> names;   // each tensor once over all shards, as llama.cpp requires
    auto count = [&](const weight_file & w) {
        for (int64_t i = 0; i < gguf_get_n_tensors(w.gguf); i++) {
            if (!names.insert(gguf_get_tensor_name(w.gguf, i)).second) {
                fail(PR_ERR_MODEL, "split model '%s': tensor '%s' of '%s' is in an earlier shard too", path,
                     gguf_get_tensor_name(w.gguf, i), w.path.c_str());
            }
        }
    };
    count(*f);
    for (int i = 1; i < n; i++) {
        const std::string p = shard_name(prefix, i, n);
        struct stat st;
        if (stat(p.c_str(), &st) != 0) {
            fail(PR_ERR_IO, "split model '%s': shard %d of %d, '%s', is missing (%s)", path, i + 1, n, p.c_str(), strerror(errno));
        }
        std::unique_ptr<weight_file> s;
        try {
            s = open_weight_file(p.c_str());
        } catch (const error & e) {
            fail(e.status, "split model '%s': shard %d of %d: %s", path, i + 1, n, e.what());
        }
        const int sno = u16_key(s->gguf, KEY_NO, p);
        if (sno < 0) fail(PR_ERR_MODEL, "split model '%s': shard %d of %d, '%s', has no split.no", path, i + 1, n, p.c_str());
        if (sno != i) {
            fail(PR_ERR_MODEL, "split model '%s': '%s' should be shard %d of %d but is shard %d (split.no %d): renamed out of order?",
                 path, p.c_str(), i + 1, n, sno + 1, sno);
        }
        const int sn = u16_key(s->gguf, KEY_COUNT, p);
        if (sn >= 0 && sn != n) {
            fail(PR_ERR_MODEL, "split model '%s': shard %d of %d, '%s', has split.count %d", path, i + 1, n, p.c_str(), sn);
        }
        count(*s);
        f->shards.push_back(std::move(s));
    }
    if (gguf_find_key(f->gguf, KEY_TENSORS) < 0) fail(PR_ERR_MODEL, "split model '%s' has no %s", path, KEY_TENSORS);
    const int64_t want = meta_int(f->gguf, KEY_TENSORS, -1, 0, INT_MAX);
    if (want != (int64_t) names.size()) {
        fail(PR_ERR_MODEL, "split model '%s': %s is %lld but its %d shards hold %zu tensors", path, KEY_TENSORS, (long long) want, n,
             names.size());
    }
    return f;
}

} // namespace pr
