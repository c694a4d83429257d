/* engine.h: flashgate's inference engine, the one header other modules use.
 *
 * An engine owns a model (GGUF, memory-mapped), its tokenizer, the paged KV
 * store, a worker pool and the forward pass. A session is one conversation's
 * sequence: its KV pages and length. Many sessions share one engine.
 *
 * This version evaluates synchronously: fg_session_eval() runs the session's
 * new tokens through the model on the calling thread (using the pool) and
 * returns logits. The batching issue adds the engine's own step thread, which
 * batches every session's work into one forward pass per step.
 *
 * Thread safety: fg_engine_open/close from one thread. fg_session_eval calls on
 * one engine must not overlap (one forward pass at a time).
 */
#ifndef FG_ENGINE_H
#define FG_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/tokenizer.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/matmul.h"

typedef struct fg_engine fg_engine_t;
typedef struct fg_session fg_session_t;

typedef struct fg_engine_options {
    const char *model_path;
    int kv_format;           /* fg_kv_format, or -1: FP4 when the widths allow it, else F16 */
    size_t kv_budget_bytes;  /* KV page pool size; default 1 GiB */
    int max_batch_tokens;    /* tokens per forward pass; default 256 */
    int n_threads;           /* 0: one per online CPU */
    int max_context;         /* per session; 0: the model's context_length */
    fg_isa isa;              /* FG_ISA_AUTO unless testing a kernel path */
} fg_engine_options;

void fg_engine_options_default(fg_engine_options *o);

/* Errors: FG_ERR_IO and FG_ERR_GGUF_* (file), FG_ERR_MODEL_* (contents),
 * FG_ERR_TOKENIZER, FG_ERR_KV_FORMAT, FG_ERR_INVALID_ARG (options), FG_ERR_NOMEM. */
fg_err fg_engine_open(const fg_engine_options *o, fg_engine_t **out, fg_diag *diag);
void fg_engine_close(fg_engine_t *e);

typedef struct fg_engine_info {
    int n_vocab;
    int n_ctx;                   /* max tokens per session */
    int n_layer;
    int n_embd;
    fg_kv_format kv_format;
    size_t kv_bytes_per_token;   /* latent + RoPE key over all layers, as stored */
    size_t kv_pages_total;
    uint64_t weight_bytes_total;
    uint64_t weight_bytes_active; /* weight bytes read per decoded token */
    int n_threads;
    fg_isa isa;
    const char *model_identity;   /* hash of the GGUF header */
} fg_engine_info;

void fg_engine_get_info(const fg_engine_t *e, fg_engine_info *info);
const fg_tokenizer_t *fg_engine_tokenizer(const fg_engine_t *e);

/* Errors: FG_ERR_NOMEM. */
fg_err fg_session_create(fg_engine_t *e, fg_session_t **out);
/* Releases the session's pages. */
void fg_session_free(fg_session_t *s);
/* Tokens in the session's cache. */
int fg_session_length(const fg_session_t *s);

/* Appends n tokens: runs them through the model (in chunks of max_batch_tokens)
 * and stores their KV. logits: NULL, or [vocab] for the last token, or
 * [n][vocab] when logits_all. On error the session is unchanged.
 * Errors: FG_ERR_CONTEXT_FULL, FG_ERR_KV_FULL, FG_ERR_TOKEN_ID, FG_ERR_INVALID_ARG. */
fg_err fg_session_eval(fg_session_t *s, const int32_t *tokens, int n, float *logits, bool logits_all,
                       fg_diag *diag);

#endif
