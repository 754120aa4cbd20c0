// A GGUF file of weights, opened and checked (header, tensor data inside the file), mapped
// read-only, and its tensors placed on devices. The model and the river sidecar are both this.
#pragma once

#include "error.h"

#include "ggml.h"
#include "ggml-backend.h"
#include "gguf.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace pr {

struct weight_file {
    std::string path;
    size_t size = 0;
    gguf_context * gguf = nullptr;       // the metadata (a split model's first shard's)
    ggml_context * meta = nullptr;       // tensor descriptors (no data of their own)
    void * mapping = nullptr;            // the whole file, read-only
    // A split model's other shards, in order (split.h): tensors only, each in its own mapping.
    std::vector<std::unique_ptr<weight_file>> shards;
    std::vector<ggml_backend_buffer_t> buffers;
    ggml_context * copies = nullptr;     // second descriptors of file tensors (see duplicate, join)
    std::map<std::string, std::string> copy_of;
    std::map<std::string, std::vector<const ggml_tensor *>> parts_of;   // joined tensor -> its parts
    std::map<std::string, bool> absorbed;   // parts whose only copy is their joined tensor's
    // batch_layout: a repacked matrix -> the same matrix bound in the mapping (a joined one -> itself:
    // its parts are bound there instead), for products of many rows (see place_weights).
    std::map<const ggml_tensor *, ggml_tensor *> wide;
    ggml_context * wide_ctx = nullptr;   // the descriptors of those second bindings

    ~weight_file();
    ggml_tensor * tensor(const std::string & name) const;   // any shard's; nullptr when absent
    // This file, then its shards.
    std::vector<const weight_file *> files() const;
    // The file's bytes of tensor t in the mapping of the shard that holds it (a copy: its source's).
    const uint8_t * data(const ggml_tensor * t) const;
    // The shard holding tensor name (a copy: its source), or nullptr.
    const weight_file * holder(const std::string & name) const;
    size_t total_size() const;           // bytes of every shard
    int64_t n_tensors() const;           // tensors of every shard
    // A second tensor with the data of tensor src, placed on its own device by place_weights
    // (llama.cpp's duplicated tied head: the embedding stays on the CPU, the head's copy goes
    // with the head).
    ggml_tensor * duplicate(const ggml_tensor * src, const std::string & name);
    // A tensor holding the data of parts one after the other (their rows stacked: same type and
    // row length), placed on the parts' device by place_weights. With absorb the parts get no
    // memory of their own (they stay descriptors: their bytes are still read from the file).
    ggml_tensor * join(const std::vector<const ggml_tensor *> & parts, const std::string & name, bool absorb);
    // Takes join(name) back: the parts keep their own memory, the joined tensor gets none.
    void unjoin(const std::string & name);
  private:
    ggml_context * copies_ctx();
};

// Opens, parses and checks that every tensor lies inside the file. Throws PR_ERR_IO. One file: a
// model that may be split opens with open_model_file (split.h).
std::unique_ptr<weight_file> open_weight_file(const char * path);

bool usable_type(ggml_type t);

// One buffer of buft holding the given tensors, each bound at its aligned place (data not set).
ggml_backend_buffer_t alloc_tensors(ggml_backend_buffer_type_t buft, const std::vector<ggml_tensor *> & tensors,
                                    const char * what);

// Whether the CPU computes mul_mat with w by the kernel it uses for each of parts (stacking rows
// must not move a matrix into or out of ggml's repacked layout: the sums would change order).
bool same_cpu_kernel(ggml_backend_dev_t cpu, ggml_tensor * w, const std::vector<const ggml_tensor *> & parts);
// The CPU backend's extra buffer types (CPU_REPACK, AMX...: layouts of their own), null-terminated;
// nullptr where it has none.
ggml_backend_buffer_type_t * cpu_extra_bufts(ggml_backend_dev_t cpu);
// ggml's CPU_REPACK buffer type, if this CPU backend has one.
ggml_backend_buffer_type_t cpu_repack_buft(ggml_backend_dev_t cpu);

// Binds each tensor to memory on the device dev_of(t) returns: the CPU reads the mapping in
// place (use_mmap) or a copy; other devices get an uploaded copy. CPU tensors for which
// repack(t) holds and that ggml's CPU_REPACK buffer type takes (Q4_0, IQ4_NL, Q8_0, K-quants, by
// shape and CPU features) are copied into it instead, as llama.cpp does: its matmuls are faster.
// With wide (and use_mmap), such a matrix of a type ggml's tiled kernel takes is also bound in the
// mapping (f.wide), since that kernel beats the repacked GEMM on many rows. step(done, total) is
// called after each tensor is bound (it may throw: a cancelled load).
void place_weights(weight_file & f, const std::function<ggml_backend_dev_t(const ggml_tensor *)> & dev_of,
                   ggml_backend_dev_t cpu, bool use_mmap,
                   const std::function<bool(const ggml_tensor *)> & repack = nullptr, bool wide = false,
                   const std::function<void(int, int)> & step = nullptr);

} // namespace pr
