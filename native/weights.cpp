#include "weights.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace pr {

weight_file::~weight_file() {
    for (auto b : buffers) ggml_backend_buffer_free(b);
    if (wide_ctx) ggml_free(wide_ctx);
    if (copies) ggml_free(copies);
    if (meta) ggml_free(meta);
    if (gguf) gguf_free(gguf);
    if (mapping) munmap(mapping, size);
}

std::vector<const weight_file *> weight_file::files() const {
    std::vector<const weight_file *> out{this};
    for (const auto & s : shards) out.push_back(s.get());
    return out;
}

const weight_file * weight_file::holder(const std::string & name) const {
    auto it = copy_of.find(name);
    const char * n = it == copy_of.end() ? name.c_str() : it->second.c_str();
    for (const weight_file * f : files()) {
        if (gguf_find_tensor(f->gguf, n) >= 0) return f;
    }
    return nullptr;
}

const uint8_t * weight_file::data(const ggml_tensor * t) const {
    auto it = copy_of.find(ggml_get_name(t));
    const char * n = it == copy_of.end() ? ggml_get_name(t) : it->second.c_str();
    const weight_file * f = holder(n);
    if (!f || !f->mapping) fail(PR_ERR_INTERNAL, "tensor '%s' has no bytes in the file", n);
    return (const uint8_t *) f->mapping + gguf_get_data_offset(f->gguf) + gguf_get_tensor_offset(f->gguf, gguf_find_tensor(f->gguf, n));
}

size_t weight_file::total_size() const {
    size_t n = 0;
    for (const weight_file * f : files()) n += f->size;
    return n;
}

int64_t weight_file::n_tensors() const {
    int64_t n = 0;
    for (const weight_file * f : files()) n += gguf_get_n_tensors(f->gguf);
    return n;
}

// Room for a second descriptor of every file tensor and more (duplicate and join add to it).
ggml_context * weight_file::copies_ctx() {
    if (!copies) {
        ggml_init_params ip = {ggml_tensor_overhead() * (4 + 2 * (size_t) n_tensors()), nullptr, true};
        copies = ggml_init(ip);
        if (!copies) fail(PR_ERR_BACKEND, "cannot create a tensor context");
    }
    return copies;
}

ggml_tensor * weight_file::duplicate(const ggml_tensor * src, const std::string & name) {
    copies_ctx();
    ggml_tensor * t = ggml_dup_tensor(copies, src);
    ggml_set_name(t, name.c_str());
    copy_of[name] = ggml_get_name(src);
    return t;
}

ggml_tensor * weight_file::join(const std::vector<const ggml_tensor *> & parts, const std::string & name, bool absorb) {
    copies_ctx();
    const ggml_tensor * a = parts.at(0);
    const int last = ggml_n_dims(a) - 1;
    int64_t ne[GGML_MAX_DIMS] = {a->ne[0], a->ne[1], a->ne[2], a->ne[3]};
    ne[last] = 0;
    for (const ggml_tensor * p : parts) {
        for (int d = 0; d < last; d++) {
            if (p->ne[d] != a->ne[d] || p->type != a->type || ggml_n_dims(p) != last + 1) fail(PR_ERR_INTERNAL, "cannot join '%s'", name.c_str());
        }
        ne[last] += p->ne[last];
    }
    ggml_tensor * t = ggml_new_tensor(copies, a->type, last + 1, ne);
    ggml_set_name(t, name.c_str());
    parts_of[name] = parts;
    if (absorb) {
        for (const ggml_tensor * p : parts) absorbed[ggml_get_name(p)] = true;
    }
    return t;
}

void weight_file::unjoin(const std::string & name) {
    auto it = parts_of.find(name);
    if (it == parts_of.end()) return;
    for (const ggml_tensor * p : it->second) absorbed.erase(ggml_get_name(p));
    parts_of.erase(it);
}

ggml_tensor * weight_file::tensor(const std::string & name) const {
    for (const weight_file * f : files()) {
        if (gguf_find_tensor(f->gguf, name.c_str()) >= 0) return ggml_get_tensor(f->meta, name.c_str());
    }
    return nullptr;
}

bool usable_type(ggml_type t) {
    if ((int) t < 0 || (int) t >= GGML_TYPE_COUNT) return false;
    const ggml_type_traits * tr = ggml_get_type_traits(t);
    return tr && tr->blck_size > 0 && tr->type_size > 0 && tr->type_name && (t == GGML_TYPE_F32 || tr->to_float);
}

std::unique_ptr<weight_file> open_weight_file(const char * path) {
    if (!path || !*path) fail(PR_ERR_INVALID_ARG, "empty file path");
    const int fd = open(path, O_RDONLY);
    if (fd < 0) fail(PR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct fd_guard { int fd; ~fd_guard() { close(fd); } } guard{fd};
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) fail(PR_ERR_IO, "'%s' is not a regular file", path);
    char magic[4] = {0};
    if (st.st_size < 8 || pread(fd, magic, 4, 0) != 4 || memcmp(magic, "GGUF", 4) != 0) {
        fail(PR_ERR_IO, "'%s' is not a GGUF file", path);
    }
    std::unique_ptr<weight_file> f(new weight_file());
    f->path = path;
    f->size = (size_t) st.st_size;
    gguf_init_params gp = {/*no_alloc =*/ true, /*ctx =*/ &f->meta};
    f->gguf = gguf_init_from_file(path, gp);
    if (!f->gguf) fail(PR_ERR_IO, "'%s' is not a readable GGUF file (corrupt or truncated header)", path);

    const size_t data = gguf_get_data_offset(f->gguf);
    for (int64_t i = 0; i < gguf_get_n_tensors(f->gguf); i++) {
        const size_t off = gguf_get_tensor_offset(f->gguf, i);
        const size_t sz = gguf_get_tensor_size(f->gguf, i);
        if (data > f->size || off > f->size - data || sz > f->size - data - off) {
            fail(PR_ERR_IO, "'%s' is truncated: tensor '%s' ends past the end of the file (%zu bytes)", path,
                 gguf_get_tensor_name(f->gguf, i), f->size);
        }
    }
    void * p = mmap(nullptr, f->size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) fail(PR_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    f->mapping = p;
    return f;
}

ggml_backend_buffer_type_t * cpu_extra_bufts(ggml_backend_dev_t cpu) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    auto get = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    return get ? get(cpu) : nullptr;
}

ggml_backend_buffer_type_t cpu_repack_buft(ggml_backend_dev_t cpu) {
    for (ggml_backend_buffer_type_t * b = cpu_extra_bufts(cpu); b && *b; ++b) {
        if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
    }
    return nullptr;
}

// Whether the CPU backend computes mul_mat(w, x) with w in buft: asked the way llama.cpp asks,
// with a dummy buffer of that type under w.
static bool buft_takes_matmul(ggml_backend_dev_t cpu, ggml_backend_buffer_type_t buft, ggml_tensor * w) {
    if (ggml_n_dims(w) != 2) return false;
    ggml_init_params ip = {ggml_tensor_overhead() * 4, nullptr, true};
    ggml_context * ctx = ggml_init(ip);
    if (!ctx) return false;
    ggml_backend_buffer_t dummy = ggml_backend_buft_alloc_buffer(buft, 0);
    ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w->ne[0], 512);
    ggml_tensor * op = ggml_mul_mat(ctx, w, x);
    ggml_backend_buffer_t saved = w->buffer;
    w->buffer = dummy;
    const bool ok = dummy && ggml_backend_dev_supports_op(cpu, op);
    w->buffer = saved;
    if (dummy) ggml_backend_buffer_free(dummy);
    ggml_free(ctx);
    return ok;
}

bool same_cpu_kernel(ggml_backend_dev_t cpu, ggml_tensor * w, const std::vector<const ggml_tensor *> & parts) {
    ggml_backend_buffer_type_t repack = cpu_repack_buft(cpu);
    if (!repack) return true;
    const bool joined = buft_takes_matmul(cpu, repack, w);
    for (const ggml_tensor * p : parts) {
        if (buft_takes_matmul(cpu, repack, const_cast<ggml_tensor *>(p)) != joined) return false;
    }
    return true;
}

// Memory a device can still give: MemAvailable for host memory (what Linux can hand out without
// swapping or the OOM killer), the device's own report otherwise; 0 when unknown.
static size_t available_bytes(ggml_backend_buffer_type_t buft) {
    ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
    if (!dev || ggml_backend_buft_is_host(buft)) {
        FILE * f = fopen("/proc/meminfo", "r");
        if (!f) return 0;
        char line[256];
        unsigned long long kib = 0;
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
        }
        fclose(f);
        return (size_t) kib * 1024;
    }
    size_t free_b = 0, total_b = 0;
    ggml_backend_dev_memory(dev, &free_b, &total_b);
    return free_b;
}

ggml_backend_buffer_t alloc_tensors(ggml_backend_buffer_type_t buft, const std::vector<ggml_tensor *> & tensors,
                                    const char * what) {
    const size_t align = ggml_backend_buft_get_alignment(buft);
    size_t total = align;
    for (ggml_tensor * t : tensors) total += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, t), align);
    // Refuse before allocating: a huge n_ctx would otherwise take the machine's memory (Linux
    // overcommits, so the allocation itself may succeed and the OOM killer comes later).
    const size_t avail = available_bytes(buft);
    if (avail > 0 && total > avail) {
        fail(PR_ERR_BACKEND, "%s needs %.2f GiB in %s but only %.2f GiB is available", what,
             total / 1073741824.0, ggml_backend_buft_name(buft), avail / 1073741824.0);
    }
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(buft, total);
    if (!buf) fail(PR_ERR_BACKEND, "cannot allocate %zu bytes of %s in %s", total, what, ggml_backend_buft_name(buft));
    uint8_t * cursor = (uint8_t *) GGML_PAD((uintptr_t) ggml_backend_buffer_get_base(buf), align);
    for (ggml_tensor * t : tensors) {
        if (ggml_backend_tensor_alloc(buf, t, cursor) != GGML_STATUS_SUCCESS) {
            ggml_backend_buffer_free(buf);
            fail(PR_ERR_BACKEND, "cannot bind '%s'", ggml_get_name(t));
        }
        cursor += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, t), align);
    }
    return buf;
}

// ggml's tiled kernel for products of 8 or more rows with src0 in its own layout (ggml-cpu/tiled):
// the types it takes (K-quants and i-quants), and whether this CPU backend has it (built for x86
// with AVX2 or AVX-512; elsewhere those products go through the dot-product loop, slower than a
// repacked GEMM).
static bool tiled_type(ggml_type t) {
    switch (t) {
        case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
        case GGML_TYPE_IQ4_XS: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ2_S:
        case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: return true;
        default: return false;
    }
}

static bool tiled_cpu(ggml_backend_dev_t cpu) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    auto features = (ggml_backend_get_features_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features");
    for (ggml_backend_feature * f = features ? features(reg) : nullptr; f && f->name; ++f) {
        if (strcmp(f->name, "AVX2") == 0 || strcmp(f->name, "AVX512") == 0) return true;
    }
    return false;
}

void place_weights(weight_file & f, const std::function<ggml_backend_dev_t(const ggml_tensor *)> & dev_of,
                   ggml_backend_dev_t cpu, bool use_mmap, const std::function<bool(const ggml_tensor *)> & repack,
                   bool wide, const std::function<void(int, int)> & step) {
    // Group tensors by buffer type; nullptr stands for "the mapping itself" (of each shard).
    ggml_backend_buffer_type_t repack_buft = repack ? cpu_repack_buft(cpu) : nullptr;
    std::map<ggml_backend_buffer_type_t, std::vector<ggml_tensor *>> per_buft;
    std::vector<ggml_tensor *> all;
    std::vector<ggml_context *> ctxs;
    for (const weight_file * s : f.files()) ctxs.push_back(s->meta);
    ctxs.push_back(f.copies);
    for (ggml_context * c : ctxs) {
        for (ggml_tensor * t = c ? ggml_get_first_tensor(c) : nullptr; t; t = ggml_get_next_tensor(c, t)) {
            const std::string name = ggml_get_name(t);
            // A copy is a duplicate or a join; a join taken back (unjoin) stays in the context, unused.
            const bool live = c != f.copies || f.copy_of.count(name) || f.parts_of.count(name);
            if (live && !f.absorbed.count(name)) all.push_back(t);
        }
    }
    std::vector<ggml_tensor *> wide_of;   // repacked matrices also bound in the mapping
    wide = wide && use_mmap && repack_buft && tiled_cpu(cpu);   // the backend's features, asked once
    for (ggml_tensor * t : all) {
        ggml_backend_dev_t d = dev_of(t);
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(d);
        const bool joined = f.parts_of.count(ggml_get_name(t)) > 0;   // no one place in the file to map
        if (d == cpu && repack_buft && repack(t) && buft_takes_matmul(cpu, repack_buft, t)) {
            buft = repack_buft;
            if (wide && tiled_type(t->type)) wide_of.push_back(t);
        } else if (d == cpu && use_mmap && !joined) {
            buft = nullptr;
        }
        per_buft[buft].push_back(t);
    }
    // The second binding costs no copy: the tensor (a joined one's parts, which were descriptors)
    // reads the mapping, whose pages then stay resident beside the repacked copy.
    if (!wide_of.empty()) {
        ggml_init_params ip = {ggml_tensor_overhead() * wide_of.size(), nullptr, true};
        f.wide_ctx = ggml_init(ip);
        if (!f.wide_ctx) fail(PR_ERR_BACKEND, "cannot create a tensor context");
    }
    for (ggml_tensor * t : wide_of) {
        auto joined = f.parts_of.find(ggml_get_name(t));
        if (joined != f.parts_of.end()) {
            for (const ggml_tensor * p : joined->second) {
                if (f.absorbed.count(ggml_get_name(p))) per_buft[nullptr].push_back(const_cast<ggml_tensor *>(p));
            }
            f.wide[t] = t;
        } else {
            ggml_tensor * w = ggml_dup_tensor(f.wide_ctx, t);
            ggml_set_name(w, ggml_get_name(t));   // the name finds its bytes (holder, data)
            per_buft[nullptr].push_back(w);
            f.wide[t] = w;
        }
    }
    // The copy is what computes now: let the mapped pages go (they stay in the page cache, not in
    // this process), as llama.cpp unmaps the fragments it copied.
    auto release = [&](const ggml_tensor * t) {
        const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
        const uintptr_t a = GGML_PAD((uintptr_t) f.data(t), page);
        const uintptr_t b = ((uintptr_t) f.data(t) + ggml_nbytes(t)) & ~(page - 1);
        if (b > a) madvise((void *) a, b - a, MADV_DONTNEED);
    };
    int total = 0, done = 0;
    for (const auto & kv : per_buft) total += (int) kv.second.size();
    auto bound = [&] { if (step) step(++done, total); };

    for (auto & kv : per_buft) {
        if (kv.first == nullptr) {
            // One buffer over each shard's whole mapping; tensors point into their shard's.
            std::map<const weight_file *, ggml_backend_buffer_t> over;
            for (ggml_tensor * t : kv.second) {
                const weight_file * s = f.holder(ggml_get_name(t));
                if (!s) fail(PR_ERR_INTERNAL, "tensor '%s' is in no file", ggml_get_name(t));
                ggml_backend_buffer_t & buf = over[s];
                if (!buf) {
                    buf = ggml_backend_cpu_buffer_from_ptr(s->mapping, s->size);
                    if (!buf) fail(PR_ERR_BACKEND, "cannot wrap the mapping of '%s'", s->path.c_str());
                    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
                    f.buffers.push_back(buf);
                }
                if (ggml_backend_tensor_alloc(buf, t, (void *) f.data(t)) != GGML_STATUS_SUCCESS) {
                    fail(PR_ERR_BACKEND, "cannot bind '%s'", ggml_get_name(t));
                }
                bound();
            }
            continue;
        }
        ggml_backend_buffer_t buf = alloc_tensors(kv.first, kv.second, "weights");
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        f.buffers.push_back(buf);
        for (ggml_tensor * t : kv.second) {
            auto joined = f.parts_of.find(ggml_get_name(t));
            const bool mapped_too = f.wide.count(t) > 0;
            if (joined == f.parts_of.end()) {
                ggml_backend_tensor_set(t, f.data(t), 0, ggml_nbytes(t));
                if (!mapped_too) release(t);
                bound();
                continue;
            }
            // Set at once: a repacked buffer takes a tensor's data only whole.
            std::vector<uint8_t> bytes;
            bytes.reserve(ggml_nbytes(t));
            for (const ggml_tensor * p : joined->second) bytes.insert(bytes.end(), f.data(p), f.data(p) + ggml_nbytes(p));
            ggml_backend_tensor_set(t, bytes.data(), 0, bytes.size());
            for (const ggml_tensor * p : joined->second) {
                if (f.absorbed.count(ggml_get_name(p)) && !mapped_too) release(p);
            }
            bound();
        }
    }
}

} // namespace pr
