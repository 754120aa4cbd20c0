// The River: for every backbone block a block of the same structure whose matrices are the
// backbone's requantized to a cheaper type, and whose norms are the backbone's own. Built once
// into a sidecar GGUF, then mapped like the model.
#pragma once

#include "model.h"
#include "river_blocks.h"

namespace pr {

using progress_fn = int32_t (*)(int32_t done, int32_t total, void * user);

// Requantizes every block matrix of m to river_type and writes the sidecar to out_path; with a
// head_type (non-empty), also the LM head, as the exited tokens' head. keep_attn leaves the
// attention's matrices out (the river uses the backbone's, declared in the sidecar's metadata).
// report receives one line per tensor whose type differs from the request (fallbacks).
void build_river(const model & m, const char * river_type, const char * head_type, bool keep_attn, bool force,
                 const char * backbone_sha256, const char * out_path, int n_threads, progress_fn progress, void * user,
                 std::string & report);

// Opens a sidecar, checks that it belongs to m (sha256, size, shapes), and binds it as m.river;
// the matrices it declares kept are the backbone's tensors.
void attach_river(model & m, const char * path, const char * backbone_sha256, bool use_mmap);

} // namespace pr
