// A context: one KV cache, a ggml scheduler over the model's devices, the current graph, logits.
#pragma once

#include "graph.h"

#include <memory>

namespace pr {

struct context {
    model * m = nullptr;
    pr_context_params params{};
    std::unique_ptr<kv_cache> kv;
    std::vector<ggml_backend_t> backends;  // non-CPU first, CPU last (the scheduler's rule)
    ggml_backend_t cpu = nullptr;
    ggml_backend_set_n_threads_t set_n_threads = nullptr;
    ggml_backend_sched_t sched = nullptr;
    std::unique_ptr<built_graph> graph;    // the graph the scheduler currently holds allocated
    block_path backbone;

    std::vector<float> logits;             // n_outputs x n_vocab
    int n_outputs = 0;

    context(model * m, const pr_context_params & p);
    ~context();

    void decode(const int32_t * tokens, int n, bool logits_all);
    void truncate(int n_keep);

private:
    void run(const int32_t * tokens, int n, int n_out);
    built_graph & graph_for(const graph_shape & s, const block_path & path);
    void set_inputs(const built_graph & g, const int32_t * tokens, int n, int pos0);
};

} // namespace pr
