/* pyriver C API: the product surface of the native library (testing and benchmark knobs are in
 * pyriver_debug.h).
 *
 * Every function that can fail returns a pr_status (0 = PR_OK), or NULL for a pointer, and leaves
 * a readable message in pr_last_error() (per thread). Objects are opaque. Positions are token
 * positions in the context.
 *
 * Text out: a function that fills a buffer takes (buf, buf_size, needed). *needed (when not
 * NULL) receives the bytes the text takes with its NUL; buf NULL and buf_size 0 only ask for
 * that size; a buffer that is too small is PR_ERR_INVALID_ARG and is left untouched.
 *
 * The region between the CDEF markers is parsed by cffi: no preprocessor lines inside it.
 */
#ifndef PYRIVER_H
#define PYRIVER_H

#include <stddef.h>
#include <stdint.h>

#ifdef _WIN32
#define PR_API __declspec(dllexport)
#else
#define PR_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* llama.cpp's enum llama_rope_scaling_type */
#define PR_ROPE_SCALING_UNSPECIFIED -1
#define PR_ROPE_SCALING_NONE 0
#define PR_ROPE_SCALING_LINEAR 1
#define PR_ROPE_SCALING_YARN 2
#define PR_ROPE_SCALING_LONGROPE 3

/* CDEF BEGIN */
typedef enum {
    PR_OK = 0,
    PR_ERR_INVALID_ARG = 1,   /* a bad argument from the caller */
    PR_ERR_IO = 2,            /* file missing, unreadable, not a GGUF, truncated */
    PR_ERR_MODEL = 3,         /* unsupported architecture, bad metadata, bad tensor */
    PR_ERR_CONTEXT_FULL = 4,  /* the tokens do not fit in n_ctx */
    PR_ERR_BACKEND = 5,       /* ggml could not allocate or compute */
    PR_ERR_INTERNAL = 6
} pr_status;

typedef struct pr_model pr_model;
typedef struct pr_context pr_context;

/* Progress of a long call (a model's load, a river's build): done of total steps; nonzero cancels. */
typedef int32_t (*pr_progress_fn)(int32_t done, int32_t total, void * user);

typedef struct {
    int32_t n_gpu_layers;     /* the last blocks placed on devices (the head counts as one more, as in
                                 llama.cpp); -1 = all and the head */
    int32_t use_mmap;         /* CPU weights are mapped from the file, not copied */
    int32_t split_mode;       /* 0: one device, main_gpu; 1: blocks split over all devices (llama.cpp's layer split) */
    int32_t main_gpu;         /* with split_mode 0: the index of the device in the device list */
    float   tensor_split[16]; /* share of the offloaded blocks per device; all 0: by free memory, as llama.cpp */
    const char * rpc_servers; /* "host:port,...": ggml RPC servers, first in the device list; NULL: none */
    int32_t rpc_timeout_ms;   /* a call that waits longer on its RPC servers fails; 0: no limit */
    float   rope_freq_base;   /* RoPE base of the non-sliding-window layers; 0: the file's (llama.cpp's context param) */
    float   rope_freq_scale;  /* RoPE frequency scale of those layers; 0: the file's */
    int32_t batch_layout;     /* 1: the CPU matrices ggml repacks for its single-token kernels are also
                                 read in the file's own layout by prompt steps of more than 16 rows
                                 (pr_context_set_wide_prompt_rows) and any step of more than 64,
                                 where ggml's tiled kernel for K-quants is faster (verify steps of up to
                                 64 rows keep the repacked one; needs use_mmap: the file's pages stay
                                 resident); 0: one layout, as llama.cpp */
    /* ---- RoPE scaling, llama_context_params' fields of the same names (long context) ---- */
    int32_t rope_scaling_type;  /* PR_ROPE_SCALING_*: UNSPECIFIED (-1) the file's rope.scaling.type */
    float   yarn_ext_factor;    /* < 0: 1 when the scaling is YaRN, else 0 */
    float   yarn_attn_factor;   /* < 0: 1; replaced by YaRN's own when yarn_ext_factor != 0 (as llama.cpp) */
    float   yarn_beta_fast;     /* < 0: the file's (Mistral 3's rope.scaling.yarn_beta_fast), else 32 */
    float   yarn_beta_slow;     /* < 0: the file's, else 1 */
    int32_t yarn_orig_ctx;      /* 0: the file's rope.scaling.original_context_length, else n_ctx_train */
    /* Called as the weights are placed, a tensor a step; nonzero cancels the load (PR_ERR_INVALID_ARG
       "model load cancelled", nothing kept), as llama_model_params' progress_callback returning false. NULL: none */
    pr_progress_fn progress;
    void * progress_user;
} pr_model_params;

typedef struct {
    char    arch[32];
    char    name[128];
    int32_t n_layer;
    int32_t n_embd;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t n_embd_head;
    int32_t n_ff;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int64_t n_params;
    int64_t n_bytes;          /* bytes of all weight tensors */
    int32_t ftype_hint;       /* ggml type of most block weights */
    int32_t n_wide;           /* matrices also read in the file's layout (batch_layout); 0 when off */
} pr_model_info;

typedef struct {
    int32_t n_ctx;            /* KV cache length in tokens */
    int32_t n_batch;          /* largest number of tokens one graph computes */
    int32_t n_threads;        /* threads for single-token decode */
    int32_t n_threads_batch;  /* threads for prompt batches */
    int32_t flash_attn;       /* 1: ggml_flash_attn_ext; 0: mul_mat + soft_max (llama.cpp's default) */
    int32_t batch_invariant;  /* 1: a token's logits do not depend on the step it is computed in (how a
                                 prompt is split, prefix reuse, batching), at a cost in prompt speed;
                                 0 or -1 (the default): llama.cpp's kernels for multi-token steps, the
                                 same bits as llama.cpp for the same steps. 1 with flash_attn is refused */
    int32_t n_seq_max;        /* sequences the cache holds (0..n_seq_max-1), n_ctx tokens each; the
                                 single-sequence calls work on sequence 0 */
    int32_t type_k;           /* ggml type of the K cache: llama.cpp's cache types (f32, f16 (the default),
                                 bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1); a quantized type needs
                                 head dimensions that are multiples of its block */
    int32_t type_v;           /* of the V cache, the same types; a quantized V needs flash_attn (llama.cpp's rule) */
} pr_context_params;

PR_API const char * pr_last_error(void);
PR_API const char * pr_version(void);

PR_API pr_model_params pr_model_default_params(void);
PR_API pr_status pr_model_load(const char * path, const pr_model_params * params, pr_model ** out);
PR_API void      pr_model_free(pr_model * model);
/* Checks a GGUF that llama.cpp will load (the llama.cpp engine, the tokenizer), where llama.cpp
   would abort on it: the header and metadata parse, every tensor lies inside the file, and the
   tokenizer is one llama.cpp's vocabulary loader takes (an array of distinct strings). */
PR_API pr_status pr_gguf_check(const char * path);
/* A metadata value of a GGUF file as text, read without loading the model (pr_model_meta's form). */
PR_API pr_status pr_gguf_meta(const char * path, const char * key, char * buf, size_t buf_size, size_t * needed);
/* The tensor names of a GGUF file (this file only, not its other shards), one a line. */
PR_API pr_status pr_gguf_tensor_names(const char * path, char * buf, size_t buf_size, size_t * needed);
PR_API pr_status pr_model_get_info(const pr_model * model, pr_model_info * out);
/* A metadata value of the GGUF as text (strings, numbers); PR_ERR_INVALID_ARG when absent. */
PR_API pr_status pr_model_meta(const pr_model * model, const char * key, char * buf, size_t buf_size, size_t * needed);
/* ggml devices this process has, one line each: "name\tdescription\ttype". */
PR_API pr_status pr_devices(char * buf, size_t buf_size, size_t * needed);
/* Device of each block and of the head (n_layer + 1 names, one a line). */
PR_API pr_status pr_model_devices(const pr_model * model, char * buf, size_t buf_size, size_t * needed);

/* ---- RPC (ggml-rpc) --------------------------------------------------------------------------
 * Connects to "host:port,..." and registers the servers' devices in ggml's device list, as
 * llama.cpp's --rpc does, so that llama.cpp models of this process use them too. */
PR_API pr_status pr_rpc_register(const char * servers, int32_t timeout_ms);
/* Serves this process's devices (GPUs, else the CPU) at "host:port"; returns only on failure. */
PR_API pr_status pr_rpc_start_server(const char * endpoint, int32_t n_threads, const char * cache_dir);

PR_API pr_context_params pr_context_default_params(void);
PR_API pr_status pr_context_new(pr_model * model, const pr_context_params * params, pr_context ** out);
PR_API void      pr_context_free(pr_context * ctx);
/* 1 when the context's steps are batch-invariant (see batch_invariant), else 0. */
PR_API int32_t   pr_context_batch_invariant(const pr_context * ctx);
/* Switches batch invariance for the steps that follow (on: 1, off: 0). The server's drafters turn it on
 * for the steps that verify drafts, so that a drafted token's logits are a one-token step's bits. 1 with
 * flash_attn is refused. */
PR_API pr_status pr_context_set_batch_invariant(pr_context * ctx, int32_t on);
/* With batch_layout, prompt steps of more than n rows read the file's layout (16 until set; steps of
 * more than 64 rows always do). Where ggml's tiled kernel overtakes the repacked one depends on the CPU
 * (from 17 rows on a Zen 4, from 25 to 33 on a Zen 3): pyriver.widerows measures it once per machine. */
PR_API pr_status pr_context_set_wide_prompt_rows(pr_context * ctx, int32_t n);
/* Verify steps (prompt PR_VERIFY) of n to 63 tokens attend through flash attention's tiled kernel
 * (the query heads of a KV head as rows of one product, padded to 64 rows); 0 (until set): never.
 * Only with flash attention, an F16 or F32 cache and not batch-invariant; other bits than a step of
 * per-row attention. Where it pays depends on the model and CPU: pyriver.costcurve measures it. */
PR_API pr_status pr_context_set_verify_tile_rows(pr_context * ctx, int32_t n);
/* Asked between the graphs of a call that runs several (a prompt longer than n_batch, pr_embed's):
 * nonzero stops the call there (PR_ERR_INVALID_ARG "aborted"), the tokens of the graphs that ran
 * left in the cache. llama_set_abort_callback's role, asked between graphs only: a call of one graph
 * never calls it. NULL (the default): none. */
typedef int32_t (*pr_abort_fn)(void * user);
PR_API pr_status pr_context_set_abort_callback(pr_context * ctx, pr_abort_fn fn, void * user);
/* Bytes of the context's K and V cache tensors, all blocks and sequences (what llama.cpp's
 * "K (type): MiB, V (type): MiB" counts). */
PR_API pr_status pr_context_kv_bytes(const pr_context * ctx, int64_t * k_bytes, int64_t * v_bytes);

/* A prompt flag's value for a verify step: a prompt (full depth) whose every row checks a draft. */
#define PR_VERIFY 2

/* Appends n tokens at the end of the cache and runs them. With logits_all, logits of every token
 * are kept (pr_logits index 0..n-1); otherwise only the last token's (index 0). Whether the tokens
 * are a prompt (full depth) or a decode step (token-level exits) is the context's rule: see
 * context::decode. prompt PR_VERIFY: a prompt that verifies drafts (pr_context_set_verify_tile_rows). */
PR_API pr_status pr_decode(pr_context * ctx, const int32_t * tokens, int32_t n, int32_t logits_all, int32_t prompt);
/* Logits of output row i of the last pr_decode: n_vocab floats, valid until the next decode;
 * NULL (with a message) for a row that is not there. */
PR_API const float * pr_logits(pr_context * ctx, int32_t i);
PR_API int32_t   pr_n_outputs(const pr_context * ctx);
/* Embeddings: appends n tokens at the end of the cache and runs them as a prompt at full depth,
 * whatever the exit rule (no exits, not even prefill_exit), with llama.cpp's kernels for many tokens
 * (also in a batch-invariant context), keeping every token's hidden state after the final norm
 * (llama.cpp's "result_norm", its embeddings before pooling). The head is not computed: pr_logits
 * has no rows afterwards. */
PR_API pr_status pr_embed(pr_context * ctx, const int32_t * tokens, int32_t n);
/* The hidden state of token i of the last pr_embed: n_embd floats, valid until the next decode,
 * embed or cache change; NULL (with a message) for a row that is not there. */
PR_API const float * pr_embeddings(pr_context * ctx, int32_t i);

PR_API int32_t   pr_kv_pos(const pr_context * ctx);        /* tokens in the cache */
PR_API int32_t   pr_n_ctx(const pr_context * ctx);
PR_API pr_status pr_kv_truncate(pr_context * ctx, int32_t n_keep); /* keep the first n_keep */
PR_API pr_status pr_kv_clear(pr_context * ctx);
/* The KV cache of sequence seq as bytes (pyriver.Llama.save_state / load_state: sequence 0; the
 * server's prompt cache: a slot's): a header naming the model, n_ctx, the KV types and the token
 * count, then the cached rows. pr_state_set refuses (and leaves the cache as it was) a state of
 * another model, context size or layout, or corrupt bytes; the state of one sequence loads into any. */
PR_API pr_status pr_state_size(const pr_context * ctx, int32_t seq, size_t * size);
PR_API pr_status pr_state_get(pr_context * ctx, int32_t seq, uint8_t * buf, size_t buf_size, size_t * written);
PR_API pr_status pr_state_set(pr_context * ctx, int32_t seq, const uint8_t * buf, size_t size);

/* ---- Several sequences in one step ----------------------------------------------------------
 * n tokens of any sequences: token i belongs to sequence seq[i] at position pos[i], which must be
 * the next free position of that sequence (its cached count plus its earlier tokens in this call).
 * logits[i] != 0 keeps token i's logits: pr_logits rows 0.. in batch order of those tokens.
 * prompt[i] != 0 marks a prompt token (full depth unless prefill_exit), PR_VERIFY a verify step's
 * (a sequence's tokens all PR_VERIFY: pr_context_set_verify_tile_rows); a sequence with exactly one
 * token that is not a prompt token is a decode step and may exit (under batch_rule). Nothing is
 * computed when any token is invalid. pr_exit_layers then gives each token's exit block. */
PR_API pr_status pr_decode_batch(pr_context * ctx, const int32_t * tokens, const int32_t * seq, const int32_t * pos,
                                 const int32_t * logits, const int32_t * prompt, int32_t n);
PR_API int32_t   pr_n_seq_max(const pr_context * ctx);
PR_API int32_t   pr_seq_pos(const pr_context * ctx, int32_t seq);                    /* tokens of seq cached; -1: bad seq */
PR_API pr_status pr_seq_truncate(pr_context * ctx, int32_t seq, int32_t n_keep);     /* keep its first n_keep */
/* Removes positions [p0, p1) of seq: its rows after them move down by p1 - p0, their keys rotated
 * to the new positions with the model's RoPE (YaRN included; a quantized K through F32 and its
 * Hadamard rotation, as llama.cpp's K-shift), River's blocks' rows with the backbone's. What
 * llama.cpp's llama_memory_seq_rm(seq, p0, p1) + llama_memory_seq_add(seq, p1, -1, p0 - p1) do:
 * the context shift and --cache-reuse. A bad seq or range is PR_ERR_INVALID_ARG, nothing changed. */
PR_API pr_status pr_seq_drop(pr_context * ctx, int32_t seq, int32_t p0, int32_t p1);

/* ---- River ---------------------------------------------------------------------------------
 * A river is a requantized copy of every block's matrices, kept in a sidecar GGUF bound to its
 * backbone by the backbone file's sha256 and size. */
/* Writes the sidecar for river_type (a ggml type name: "q4_0", "q8_0", ...). Tensors whose rows do
 * not fit the type fall back to the nearest type that fits (pr_river_report lists them). A river
 * type that is not cheaper than the backbone's is refused unless force. head_type (NULL or "":
 * none) adds a copy of the LM head at that type, used for the logits of tokens that exit. keep_attn
 * leaves the attention's matrices out: the river uses the backbone's (declared in the sidecar). */
PR_API pr_status pr_river_build(pr_model * model, const char * river_type, const char * head_type, int32_t keep_attn, int32_t force,
                                const char * backbone_sha256, const char * out_path, int32_t n_threads,
                                pr_progress_fn progress, void * user);
/* The fallbacks of the model's last pr_river_build, one line a tensor ("" when none). */
PR_API pr_status pr_river_report(const pr_model * model, char * buf, size_t buf_size, size_t * needed);
/* Binds a sidecar as the model's river (once per model). */
PR_API pr_status pr_river_attach(pr_model * model, const char * path, const char * backbone_sha256, int32_t use_mmap);

typedef struct {
    float   exit_threshold;   /* tau: exit when cos(block input, block output) >= tau; > 1 never */
    int32_t min_exit_layer;   /* first block whose similarity is checked */
    int32_t prefill_exit;     /* prompts exit too, at the first block where all tokens reach tau */
    int32_t batch_rule;       /* how a pr_decode_batch step over several sequences exits: 0 split (each
                                 sequence leaves at its own block, the river runs beside the backbone in
                                 the same graphs), 1 minimum (the whole step leaves at the first block
                                 where every sequence reaches tau), 2 all (each keeps the backbone until
                                 every sequence has reached tau once, then all leave there) */
    int32_t exit_rule;        /* how a decode step finds its exit block: 0 checked (a graph every few blocks,
                                 each similarity read back before the next), 1 predicted (the block is
                                 forecast from the sequence's recent exits: backbone, river and head in one
                                 graph; a forecast that is too early costs fidelity), 2 guarded (one check at
                                 the forecast: the checked path's exits, fewer graphs when the forecast is
                                 at or past the exit). Forecasts: docs/river.md, Predicted exits */
} pr_exit_params;

PR_API pr_exit_params pr_exit_default_params(void);
/* The exit rule from now on (the knobs of pyriver_debug.h at their defaults). */
PR_API pr_status pr_context_set_exit(pr_context * ctx, const pr_exit_params * params);
/* Exit block of each token of the last pr_decode (n_layer-1: full depth): copies at most n_max
 * into out and returns how many there are. */
PR_API int32_t   pr_exit_layers(const pr_context * ctx, int32_t * out, int32_t n_max);
/* Forecast exit block of each token of the last pr_decode under exit_rule 1 or 2 (-1: none, a prompt
 * token or the checked rule), as pr_exit_layers. */
PR_API int32_t   pr_exit_forecasts(const pr_context * ctx, int32_t * out, int32_t n_max);
/* CDEF END */

#ifdef __cplusplus
}
#endif

#endif /* PYRIVER_H */
