/* arch.h: the interface every architecture implements, so the rest of the
 * engine (open/close, the KV store, the prefix cache, the tiers, the
 * scheduler, the backends) works with a model without knowing its layers.
 *
 * An architecture provides four things:
 *   - hyperparameters and tensor binding from a GGUF (load/free): pointers
 *     into the file's mapping, every key and tensor checked, errors naming
 *     the key or tensor at fault; what the engine needs to know of the
 *     result is in fg_arch_model (vocabulary, context, experts, weight bytes);
 *   - the description of its cache (cache): what a page holds (rows of
 *     row_bytes for each layer and each of its FG_KV_PAGE_TOKENS tokens),
 *     bytes per token, and what a sequence holds besides pages;
 *   - the forward pass over one batch of tokens from many sequences, on the
 *     CPU (forward_*): the reference that the CPU backend runs;
 *   - for expert parallelism (engine/ep/), the routed experts of each layer
 *     (layer_experts) and a forward pass that hands them to an exchange
 *     (forward_set_ep), so the ranks compute any architecture's experts;
 *   - for speculative decoding, drafts from the model's MTP block
 *     (forward_draft), where it has one.
 *
 * Architectures: deepseek2 (engine/model/deepseek2/), deepseek4
 * (engine/model/deepseek4/). The CUDA backend reaches into deepseek2's own
 * model (fg_deepseek2_of) and answers FG_ERR_UNSUPPORTED for other
 * architectures.
 *
 * Thread safety: an fg_arch is immutable; a loaded model is immutable and
 * read from any thread; a forward pass belongs to one caller at a time.
 */
#ifndef FG_ARCH_H
#define FG_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/kv/kv_store.h"
#include "engine/model/gguf.h"
#include "engine/model/weight.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"

typedef struct fg_arch fg_arch;
typedef struct fg_moe_ep fg_moe_ep_t;             /* engine/ep/moe_ep.h */
typedef struct fg_arch_forward fg_arch_forward_t; /* an architecture's CPU forward pass (opaque) */

/* The part of a loaded model every architecture fills; each architecture's
 * model struct holds it as its first member. */
typedef struct fg_arch_model {
    const fg_arch *arch;
    int n_vocab;
    int n_ctx_train;               /* context_length */
    int n_layer;
    int n_embd;                    /* embedding_length */
    int n_expert;                  /* routed experts per MoE layer; 0: none */
    int n_expert_used;             /* K: routed experts per token */
    int n_ff_exp;                  /* F: a routed expert's hidden width */
    int n_layer_run;               /* layers one forward pass runs, in order: n_layer, plus deepseek4's MTP block */
    uint64_t weight_bytes_total;   /* all tensors */
    uint64_t weight_bytes_active;  /* read per token */
    char identity[17];             /* 64-bit hash (hex) of the metadata and tensor directory, for cache files */
    bool weights_file_mapped;      /* the weights are a private file mapping: unused pages may be dropped */
} fg_arch_model;

/* One sequence's share of a batch; its tokens are contiguous in the batch. */
typedef struct fg_fwd_seq {
    fg_kv_seq *kv;      /* pages must exist for kv->n_tokens + n_tokens rows */
    int n_tokens;       /* tokens of this sequence in the batch (>= 1) */
    int n_logits;       /* 0, 1 (the last token) or n_tokens (every token) */
    float *logits;      /* [n_logits][n_vocab] */
    bool absorbed;      /* attention in the absorbed form (decode tokens, and inputs shorter than
                           FG_SHORT_INPUT, engine.h); false: the decompressed form (mha_attn.h). The engine sets it
                           by what the tokens are (a sample fed back, an input of some length), never by
                           how a batch was cut, so a token's result does not depend on its chunk or its
                           neighbours. */
} fg_fwd_seq;

/* The routed experts of one layer, as an expert-parallel rank computes them
 * for the rows sent to it: y = down_e(act(gate_e(x), up_e(x))) for expert e.
 * The weights are the model's (memory-mapped, never packed copies). */
typedef struct fg_arch_experts {
    const fg_weight *gate, *up; /* n_expert matrices E -> F */
    const fg_weight *down;      /* n_expert matrices F -> E */
    float clamp;                /* handed to act (deepseek4's SwiGLU clamp; 0: none) */
    /* gate[i] = act(gate[i], up[i]) for i < n, in place (up may be
     * clobbered): the same function the architecture's own forward pass
     * runs, so a rank's results are those of one rank alone. */
    void (*act)(fg_isa isa, float *gate, float *up, int n, float clamp);
} fg_arch_experts;

struct fg_arch {
    const char *name; /* general.architecture */
    /* Binds g's tensors (g must outlive the model). Errors: FG_ERR_MODEL_ARCH,
     * FG_ERR_MODEL_HPARAM, FG_ERR_MODEL_TENSOR, FG_ERR_MODEL_SHAPE,
     * FG_ERR_MODEL_TYPE, FG_ERR_NOMEM. */
    fg_err (*load)(const fg_gguf_t *g, fg_arch_model **out, fg_diag *diag);
    void (*free)(fg_arch_model *m);
    /* The most compact cache format this model's widths allow. */
    fg_kv_format (*cache_default)(const fg_arch_model *m);
    /* The cache layout for format. Errors: FG_ERR_KV_FORMAT (the format cannot
     * store this model's widths). */
    fg_err (*cache)(const fg_arch_model *m, fg_kv_format format, fg_kv_geometry *geo, fg_diag *diag);
    /* The CPU forward pass: its packed weight copies and scratch for up to
     * max_tokens tokens, sized here. Errors: FG_ERR_INVALID_ARG, FG_ERR_MODEL_HPARAM, FG_ERR_NOMEM. */
    fg_err (*forward_create)(const fg_arch_model *m, const fg_kv_geometry *geo, int max_tokens, fg_pool_t *pool,
                             fg_isa isa, fg_arch_forward_t **out, fg_diag *diag);
    void (*forward_destroy)(fg_arch_forward_t *f);
    /* One batch: writes each token's cache rows at kv->n_tokens.., advances
     * kv->n_tokens, fills the requested logits. Errors (nothing written):
     * FG_ERR_INVALID_ARG, FG_ERR_TOKEN_ID; with expert parallelism also the
     * exchange's. */
    fg_err (*forward_run)(fg_arch_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);
    /* Routed experts through ep (NULL: here); NULL when the architecture has no experts.
     * With ep set a run is collective: every rank of ep's group runs once per
     * step (n_seqs 0 on a rank without tokens, a rejected batch still taking
     * part), exchanging once per layer with experts, in layer order. */
    void (*forward_set_ep)(fg_arch_forward_t *f, fg_moe_ep_t *ep);
    /* The routed experts of the il-th layer a forward pass runs (0 ..
     * n_layer_run - 1): fills out and returns true; false for a layer without
     * routed experts. NULL when the architecture has no experts. */
    bool (*layer_experts)(const fg_arch_model *m, int il, fg_arch_experts *out);
    /* Adds routed picks per expert id to sink[n_expert] (NULL: stop); NULL without experts. */
    void (*forward_count_experts)(fg_arch_forward_t *f, _Atomic uint64_t *sink);
    /* Drafts with the model's MTP block (speculative decoding): for each
     * sequence (seqs[i].n_tokens == 1, n_logits == 1), tokens[i] is the token
     * that follows its cache (sampled, not yet run); logits get the MTP
     * block's prediction of the token after it, from the trunk's hidden state
     * of the last cached position and embed(tokens[i]). A second call before
     * the next forward_run chains: it drafts one further, from the MTP
     * block's own hidden state of the call before. The sequences' caches and
     * n_tokens are as they were (what the next forward_run computes is what
     * it would have computed without drafts). NULL where the architecture
     * never drafts; FG_ERR_UNSUPPORTED for a model without an MTP block
     * (deepseek4: also under expert parallelism). Errors also: those of forward_run,
     * FG_ERR_STATE (a sequence's hidden state of its last position is not
     * kept, or it changed length between chained drafts). */
    fg_err (*forward_draft)(fg_arch_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs,
                            fg_diag *diag);
};

/* The architecture a GGUF names in general.architecture, or NULL. */
const fg_arch *fg_arch_find(const char *name, size_t len);

/* Loads g with the architecture it names. Errors: FG_ERR_MODEL_ARCH (missing,
 * or one this engine does not have: the message names it and the known
 * ones), and those of the architecture's load. */
fg_err fg_arch_load(const fg_gguf_t *g, fg_arch_model **out, fg_diag *diag);

/* Frees a model from fg_arch_load (NULL is fine). */
void fg_arch_free(fg_arch_model *m);

/* For an architecture's load: sets m->arch, the identity (a hash of g's
 * header and size, so cache files know their model) and weights_file_mapped. */
void fg_arch_model_init(fg_arch_model *m, const fg_arch *a, const fg_gguf_t *g);

#endif
