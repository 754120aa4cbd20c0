// Which device holds each block (its weights, its river block and its KV cache) and the head,
// chosen as llama.cpp chooses, so that the same n_gpu_layers, split and servers give the same
// placement (and so the same numbers) as llama.cpp.
#pragma once

#include "error.h"

#include "ggml-backend.h"

#include <vector>

namespace pr {

// A device of a ggml RPC server (its device type says GPU, but every graph is a network round trip).
bool is_rpc(ggml_backend_dev_t d);

struct placement {
    ggml_backend_dev_t cpu = nullptr;
    std::vector<ggml_backend_dev_t> layer;   // n_layer entries
    ggml_backend_dev_t output = nullptr;
};

// The devices a model may use, in llama.cpp's order: the RPC devices given, then the local GPUs,
// then integrated GPUs when there is no discrete one. split_mode 0 keeps only main_gpu.
std::vector<ggml_backend_dev_t> model_devices(const std::vector<ggml_backend_dev_t> & rpc_devs, int split_mode, int main_gpu);

// The last n_gpu_layers of the n_layer blocks plus the head (-1: all) go to devs, split in
// proportion to tensor_split (all zero: to each device's free memory).
placement place_layers(int n_layer, int n_gpu_layers, const std::vector<ggml_backend_dev_t> & devs, const float * tensor_split);

// The arithmetic of place_layers: for each block and then the head, the index of its device in
// shares (one share per device), or -1 for the CPU.
std::vector<int> split_layers(int n_layer, int n_gpu_layers, std::vector<float> shares);

} // namespace pr
