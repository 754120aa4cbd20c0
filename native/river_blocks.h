// An attached river as the model holds it (model::river): its sidecar and its blocks. river.h
// builds and attaches one.
#pragma once

#include "block_weights.h"
#include "weights.h"

#include "ggml.h"

#include <memory>
#include <vector>

namespace pr {

struct river_blocks {
    std::unique_ptr<weight_file> file;
    std::vector<block_weights> blocks;
    // A low-bit copy of the LM head for tokens that left the backbone (null: they use the
    // backbone's head). Full-depth tokens always use the backbone's.
    ggml_tensor * output = nullptr;
};

} // namespace pr
