// Typed reads of GGUF metadata that never assert: a key of the wrong type is a model error.
#pragma once

#include "error.h"
#include "gguf.h"

#include <string>

namespace pr {

// Missing key: returns def (def < 0 for an integer means the key is required).
int64_t meta_int(const gguf_context * g, const char * key, int64_t def, int64_t lo, int64_t hi);
double meta_float(const gguf_context * g, const char * key, double def);
std::string meta_str(const gguf_context * g, const char * key, const char * def);
// Any scalar or string value as text; false when absent or an array.
bool meta_text(const gguf_context * g, const char * key, std::string & out);

} // namespace pr
