// What a step costs a GPU, counted on whatever computes it (pr_counters, pyriver_debug.h): host
// synchronizations, device-to-host bytes and where they land, and graph changes by ggml-cuda's own
// rule for reusing a captured CUDA graph.
#include "context.h"

#include <cstring>

namespace pr {

void context::settle() const {
    if (!pending) return;
    ggml_backend_sched_synchronize(pending);
    pending = nullptr;
    counts.syncs++;
}

// A read while a graph is in flight is queued on the stream of the backend that holds the tensor
// (ggml_backend_tensor_get_async, as llama.cpp reads its logits); settle() then waits once for the
// graph and all the reads queued after it (ggml_backend_sched_synchronize): one synchronization
// however many results a step reads. A read with nothing in flight is ggml_backend_tensor_get, a
// blocking copy: on a GPU a synchronization of its own (ggml-cuda's buffer get_tensor copies and
// then waits for cudaStreamPerThread). Every read counts as a device's, whatever holds the tensor
// here, as when all of the graph is on one GPU; its bytes count as pinned where they land in the
// output buffer (pinned memory on a GPU: the device's host buffer type).
void context::fetch(ggml_tensor * t, void * dst, size_t offset, size_t size) const {
    if (size == 0) return;
    ggml_backend_t b = pending ? ggml_backend_sched_get_tensor_backend(pending, t) : nullptr;
    if (b) {
        ggml_backend_tensor_get_async(b, t, dst, offset, size);
    } else {
        settle();
        ggml_backend_tensor_get(t, dst, offset, size);
        counts.syncs++;
    }
    counts.reads++;
    counts.host_bytes += (int64_t) size;
    const char * base = outbuf ? (const char *) ggml_backend_buffer_get_base(outbuf) : nullptr;
    const char * d = (const char *) dst;
    if (base && d >= base && d + size <= base + ggml_backend_buffer_get_size(outbuf)) counts.host_bytes_pinned += (int64_t) size;
}

void context::read(ggml_tensor * t, void * dst, size_t offset, size_t size) const {
    fetch(t, dst, offset, size);
    settle();
}

// ggml-cuda's rule (ggml/src/ggml-cuda/ggml-cuda.cu of llama.cpp as llama-cpp-python 0.3.36 pins it):
// ggml_backend_cuda_graph_compute keeps one CUDA graph per key, the graph's first node
// (ggml_cuda_graph_get_key), and ggml_cuda_graph_update_required finds it changed when its node
// count differs or when any node differs in its whole ggml_tensor (type, buffer, ne, nb, op,
// op_params, flags, src pointers, view_src, view_offs, data, name, extra: one memcmp) or in the
// data pointer, ne or nb of any of its sources. A changed graph is run without a CUDA graph and its
// warm-up starts again; the next unchanged run captures it (warmup_complete), later unchanged runs
// replay it. Counted here: graph_changes (runs ggml_cuda_graph_update_required finds changed) and
// graph_captures (runs that would capture). Not mirrored: ggml_cuda_graph_check_compability (a
// MUL_MAT_ID whose fallback synchronizes disables graphs: MoE models), the eviction of graphs unused
// for 10 s, and the scheduler's split of a graph between devices: the whole graph is taken as one
// CUDA graph (on a GPU its CPU part, the token embedding rows, is a split of its own).
void context::note_graph(ggml_cgraph * gf) {
    const int n = ggml_graph_n_nodes(gf);
    counts.graphs++;
    counts.nodes += n;
    if (!compare_graphs || n == 0) return;
    cuda_graph_record & graph = cuda_graphs[ggml_graph_node(gf, 0)];
    bool res = false;
    if ((int) graph.node_props.size() != n) {
        res = true;
        graph.node_props.resize(n);
    }
    for (int i = 0; i < n; i++) {
        cuda_graph_record::node_properties prop;
        std::memset(&prop, 0, sizeof prop);
        const ggml_tensor * node = ggml_graph_node(gf, i);
        std::memcpy(&prop.node, node, sizeof(ggml_tensor));
        for (int j = 0; j < GGML_MAX_SRC; ++j) {
            if (node->src[j]) {
                prop.node_src_data_ptrs[j] = node->src[j]->data;
                std::memcpy(prop.node_src_ne[j], node->src[j]->ne, sizeof(prop.node_src_ne[j]));
                std::memcpy(prop.node_src_nb[j], node->src[j]->nb, sizeof(prop.node_src_nb[j]));
            }
        }
        if (res || std::memcmp(&graph.node_props[i], &prop, sizeof(prop)) != 0) {
            graph.node_props[i] = prop;
            res = true;
        }
    }
    if (res) {
        counts.graph_changes++;
        graph.warmup_complete = false;
    } else if (!graph.warmup_complete) {
        graph.warmup_complete = true;
        counts.graph_captures++;
    }
}

} // namespace pr
