/* forward.h: the deepseek4 forward pass on the CPU: every token of every
 * sequence of a batch as one batch through each matrix (each matrix read once
 * per run), the cache writes and attention token by token on each token's own
 * sequence. A sequence appears at most once in a batch.
 *
 * Per layer (x: 4 hyper-connection streams [4][E] per token):
 *   y   = hc_pre(x)  ->  rmsnorm * attn_norm
 *   q   = rope(headnorm(q_b · (rmsnorm(q_a · y) * q_a_norm)))   [H][D]
 *   kv  = rope(rmsnorm(kv · y) * kv_a_norm)                     [D], K = V
 *   ratio != 0: the compressor's entry (k, gate + ape) joins the open
 *   block; a closed block pools (per-channel softmax) into a compressed row;
 *   r = 4 also the indexer's keys and its top-k over the visible rows
 *   o   = softmax(q·keys / sqrt(D), sink) · keys, inverse rope, grouped
 *         output LoRA (out_a per group, out_b)
 *   x   = hc_post(o);  y = hc_pre(x) -> ffn_norm;  MoE + shared expert;  hc_post
 * then the output hc head, output_norm, output; the MTP block runs after the
 * trunk on (embed(token), h of the previous position).
 *
 * fg_fwd_seq.absorbed is deepseek2's and ignored here: deepseek4 has one
 * form, so a token's result never depends on how its input was cut.
 *
 * Lifetimes: weights are the model's, except on AVX-512 the Q8_0 matrices,
 * read as P16 panel copies packed at create (forward.c: a token's results
 * the same bits in any chunk or batch); scratch for max_tokens
 * tokens is sized at create; a run allocates nothing; the per-sequence cache
 * is the sequence's pages and state (cache.h).
 * Thread safety: one caller at a time; the pool's workers run inside a call.
 */
#ifndef FG_DS4_FORWARD_H
#define FG_DS4_FORWARD_H

#include "config/fg_error.h"
#include "engine/model/arch.h"
#include "engine/model/deepseek4/model.h"

typedef struct fg_ds4_forward fg_ds4_forward_t;

/* Errors: FG_ERR_INVALID_ARG (max_tokens < 1, a geometry not this model's),
 * FG_ERR_MODEL_HPARAM (RoPE), FG_ERR_KV_FORMAT, FG_ERR_NOMEM. */
fg_err fg_ds4_forward_create(const fg_ds4_model *m, const fg_kv_geometry *geo, int max_tokens, fg_pool_t *pool,
                             fg_isa isa, fg_ds4_forward_t **out, fg_diag *diag);
void fg_ds4_forward_destroy(fg_ds4_forward_t *f);

/* The MTP block's draft logits: from now on every run also writes, for each
 * sequence's requested logits rows, the MTP block's logits into
 * mtp[row][n_vocab] (rows counted over the whole batch in order); NULL
 * stops. Without an MTP block nothing is written. */
void fg_ds4_forward_set_mtp_out(fg_ds4_forward_t *f, float *mtp);

void fg_ds4_forward_count_experts(fg_ds4_forward_t *f, _Atomic uint64_t *sink);

/* Expert parallelism: from now on the routed experts of every layer (the
 * trunk's, then the MTP block's) run through ep: the router (hashed or not)
 * runs here, the chosen ids, weights and normalised inputs go to the ranks
 * holding the experts, the weighted results come back summed in ascending id
 * order, as here; the shared expert stays here. NULL switches back. With ep
 * set a run is collective (engine/model/arch.h, forward_set_ep); an exchange
 * error leaves the sequences where they were and their state refused by
 * later runs (FG_ERR_STATE). ep must outlive its use. */
void fg_ds4_forward_set_ep(fg_ds4_forward_t *f, fg_moe_ep_t *ep);

/* The SwiGLU of deepseek4's experts, in place: gate clamped to at most c,
 * up to [-c, c] (c <= 1e-6: no clamp), then silu(gate) * up with the scalar
 * SiLU whatever isa is (what the routed and the shared experts run, on one
 * rank or many). */
void fg_ds4_swiglu(fg_isa isa, float *gate, float *up, int n, float c);

/* Errors (nothing written): FG_ERR_INVALID_ARG (too many tokens, missing
 * pages, bad n_logits), FG_ERR_TOKEN_ID, FG_ERR_STATE (a sequence whose
 * state does not match its length: truncated or rewound, which the
 * deepseek4 cache cannot undo); with expert parallelism also the exchange's
 * (see fg_ds4_forward_set_ep). */
fg_err fg_ds4_forward_run(fg_ds4_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);

/* Drafts with the MTP block (engine/model/arch.h, forward_draft): for each
 * sequence (n_tokens 1, n_logits 1) its logits get the MTP block's
 * prediction after tokens[i] at position kv->n_tokens, from the trunk's h of
 * the last cached position (the state's) and embed(tokens[i]): the bits the
 * MTP output of a run of tokens[i] alone would have (fg_ds4_forward_set_mtp_out).
 * A call before the next fg_ds4_forward_run chains: position one further,
 * from the MTP block's own h of the call before; a run ends every chain.
 *
 * The sequences are only read, never written (caches, state, n_tokens, and
 * no pages needed past n_tokens): the MTP block's only cache is its window
 * ring (its compress ratio is 0, model.c), so a chain works on a copy of the
 * sequence's ring (window x row bytes, copied when the chain begins) and
 * writes its rows there; the next run computes what it would have without
 * drafts. Up to max_tokens sequences draft between two runs.
 * Errors (nothing written): FG_ERR_UNSUPPORTED (no MTP block; expert
 * parallelism: a draft is no collective step), FG_ERR_INVALID_ARG (shape,
 * a sequence twice, more sequences drafting than max_tokens),
 * FG_ERR_TOKEN_ID, FG_ERR_STATE, FG_ERR_CONTEXT_FULL. */
fg_err fg_ds4_forward_draft(fg_ds4_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs,
                            fg_diag *diag);

#endif
