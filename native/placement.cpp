#include "placement.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pr {

bool is_rpc(ggml_backend_dev_t d) {
    return strcmp(ggml_backend_reg_name(ggml_backend_dev_backend_reg(d)), "RPC") == 0;
}

std::vector<ggml_backend_dev_t> model_devices(const std::vector<ggml_backend_dev_t> & rpc_devs, int split_mode, int main_gpu) {
    if (split_mode != 0 && split_mode != 1) fail(PR_ERR_INVALID_ARG, "split_mode %d is not supported (0: none, 1: layer)", split_mode);
    std::vector<ggml_backend_dev_t> gpus, igpus;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        const auto t = ggml_backend_dev_type(d);
        // RPC devices in ggml's list were registered for llama.cpp; a model uses its own rpc_servers.
        if (t == GGML_BACKEND_DEVICE_TYPE_GPU && !is_rpc(d)) gpus.push_back(d);
        if (t == GGML_BACKEND_DEVICE_TYPE_IGPU) igpus.push_back(d);
    }
    std::vector<ggml_backend_dev_t> devs = rpc_devs;
    devs.insert(devs.end(), gpus.begin(), gpus.end());
    if (gpus.empty()) devs.insert(devs.end(), igpus.begin(), igpus.end());
    if (split_mode == 0 && !devs.empty()) {
        if (main_gpu < 0) return {};
        if (main_gpu >= (int) devs.size()) fail(PR_ERR_INVALID_ARG, "main_gpu %d is out of range: %zu devices", main_gpu, devs.size());
        return {devs[main_gpu]};
    }
    return devs;
}

placement place_layers(int n_layer, int n_gpu_layers, const std::vector<ggml_backend_dev_t> & devs, const float * tensor_split) {
    placement p;
    p.cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!p.cpu) fail(PR_ERR_BACKEND, "ggml has no CPU device");
    const int n = (int) devs.size();
    // Shares past the device count are ignored, as llama.cpp does.
    for (int i = 0; tensor_split && i < 16; i++) {
        if (!(tensor_split[i] >= 0.0f) || !std::isfinite(tensor_split[i])) fail(PR_ERR_INVALID_ARG, "tensor_split[%d] must be a finite number >= 0", i);
    }
    bool all_zero = true;
    for (int i = 0; tensor_split && i < n; i++) all_zero = all_zero && tensor_split[i] == 0.0f;
    std::vector<float> shares(n);
    for (int i = 0; i < n; i++) {
        if (!all_zero) {
            shares[i] = tensor_split[i];
            continue;
        }
        size_t free = 0, total = 0;
        ggml_backend_dev_memory(devs[i], &free, &total);
        if (free == 0 && total == 0) ggml_backend_dev_memory(p.cpu, &free, &total);
        shares[i] = (float) free;
    }
    const std::vector<int> where = split_layers(n_layer, n_gpu_layers, shares);
    auto dev_of = [&](int il) { return where[il] < 0 ? p.cpu : devs.at(where[il]); };
    for (int il = 0; il < n_layer; il++) p.layer.push_back(dev_of(il));
    p.output = dev_of(n_layer);
    return p;
}

std::vector<int> split_layers(int n_layer, int n_gpu_layers, std::vector<float> shares) {
    const int n = (int) shares.size();
    // Split points as llama.cpp computes them (floats, cumulative, normalized).
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        sum += shares[i];
        shares[i] = sum;
    }
    for (int i = 0; i < n; i++) shares[i] /= sum;

    const int n_gpu = n_gpu_layers < 0 ? n_layer + 1 : n_gpu_layers;
    const int start = std::max(n_layer + 1 - n_gpu, 0);
    const int act = n == 0 ? 0 : std::min(n_gpu, n_layer + 1);
    std::vector<int> out;
    for (int il = 0; il <= n_layer; il++) {
        if (il < start || il - start >= act) {
            out.push_back(-1);
            continue;
        }
        const int k = (int) (std::upper_bound(shares.begin(), shares.end(), float(il - start) / act) - shares.begin());
        out.push_back(std::min(k, n - 1));
    }
    return out;
}

} // namespace pr
