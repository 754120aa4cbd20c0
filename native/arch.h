// The architectures pyriver runs, as data: what each reads from the GGUF (tensors, keys) and the
// few switches the block builder (graph.cpp) branches on. Everything else is the shared block.
#pragma once

#include "ggml.h"

#include <string>
#include <vector>

namespace pr {

struct block_weights;

enum class ffn_act { silu, gelu };                    // gated FFN: SwiGLU or GeGLU (tanh GELU)
enum class dim { one, embd, q, kv, ff, head };        // tensor extents, resolved from the hparams

struct tensor_spec {
    const char * name;                                // after "blk.N.", e.g. "attn_q.bias"
    ggml_tensor * block_weights::* member;
    dim ne0, ne1;                                     // ne1 == dim::one: a vector
    bool required;
    bool matrix;                                      // used by mul_mat (any type), else F32 only
};

struct arch_info {
    const char * name;
    int rope_type;             // GGML_ROPE_TYPE_NORMAL or _NEOX (llama_model_rope_type)
    ffn_act act;
    bool embd_scale;           // token embeddings times sqrt(n_embd) (Gemma)
    bool q_prescale;           // Q scaled before attention, softmax scale 1 (Gemma)
    bool rope_freqs;           // reads rope_freqs.weight (Llama 3.1 frequency factors)
    bool swa;                  // reads sliding_window, its layer pattern and rope base (Gemma 3)
    bool softcap;              // reads final_logit_softcapping (Gemma)
    bool output_bias;          // reads output.bias (Qwen2)
    bool q_is_embd;            // Q and attn_output are n_embd wide (llama.cpp's Qwen2 shapes)
    bool rot_is_head;          // rope.dimension_count must equal the head size
    int swa_pattern;           // default: every swa_pattern-th layer is global
    std::vector<tensor_spec> block;
};

// The architecture named in general.architecture; an unsupported one fails naming it.
const arch_info & find_arch(const std::string & name);

} // namespace pr
