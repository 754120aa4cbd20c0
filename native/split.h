// A model split in shards as llama.cpp's gguf-split writes it (PREFIX-00001-of-00003.gguf ...: the
// first shard holds the metadata, every shard some tensors and the keys split.no, split.count,
// split.tensors.count), opened as one weight_file: what llama.cpp's loader reads, checked so that
// nothing reaches an assert in llama.cpp's loader either (pr_gguf_check).
#pragma once

#include "weights.h"

#include <memory>

namespace pr {

// The file at path and, when it is the first shard of a split model, every other shard (found by
// name, as llama.cpp finds them), each checked: present, a GGUF whose tensors lie inside it,
// split.no its place, split.count the first's; no tensor twice; split.tensors.count tensors in all.
// A file that is not split opens as open_weight_file opens it. Throws PR_ERR_IO / PR_ERR_MODEL
// naming the shard.
std::unique_ptr<weight_file> open_model_file(const char * path);

} // namespace pr
