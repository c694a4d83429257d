/* forward.h: the deepseek2 forward pass over one batch of tokens from one or
 * more sequences (fg_fwd_seq, engine/model/arch.h), on the CPU.
 *
 * One call is one engine step: every weight matrix is streamed once for the
 * whole batch (a matrix product over all its tokens); MoE tokens are grouped
 * by expert so each chosen expert is read once; attention runs per token over
 * its own sequence's pages, in one of two forms chosen per sequence: the
 * absorbed MLA form (decode tokens, short inputs), or the decompressed form,
 * which streams each page's rows through k_b and v_b once for all of a
 * sequence's tokens in the batch (cheaper per token for many tokens).
 *
 * The MTP block (a model with nextn_predict_layers = 1): every run also runs
 * it after the trunk, for every token, so its cache rows (the last layer slot
 * of the geometry) exist for every position. At position p its input is
 * eh_proj([enorm(embed(t_p)); hnorm(h_{p-1})]), h the trunk's final hidden
 * normed by output_norm (what the LM head reads: llama.cpp's deepseek2 MTP
 * graph, vLLM and SGLang feed that one), and its logits (through
 * shared_head_norm and the shared head) are a draft of t_{p+1}.
 *
 * Where h_{p-1} comes from (no per-sequence state, so prefix sharing and
 * session files stay as they are): the token before in the batch or, for a
 * sequence's first token in the batch, rows this forward keeps from the
 * sequence's latest run, keyed by its fg_kv_seq: the last FG_DS2_MAX_DRAFTS + 1
 * hidden rows of that run (a verify run's, so any rollback of its drafts
 * finds its last kept position), for up to max_tokens sequences (the least
 * recently run is dropped). Each kept row carries a hash of the last trunk
 * layer's cache row at its position, checked against the cache at lookup, so
 * a reused or rewritten sequence never gets another one's row. Where no row
 * is kept (the first run after a prefix share or a restore, or a sequence
 * dropped from the table) h is 0: that position's MTP row, and drafts that
 * attend over it, are worse, never wrong (drafts are verified).
 *
 * Drafts (fg_forward_draft) run the block alone for one token per sequence
 * and write nothing into the cache: their rows go to scratch copies of the
 * MTP slot's last page, read through page tables of pointers into the
 * sequence's pages, so the next run computes what it would have.
 *
 * Owns: scratch buffers for up to max_tokens tokens, sized at create, and f32
 * copies of every layer's k_b (transposed) and v_b for the decompressed form;
 * with the MTP block also the kept hidden rows ([max_tokens][MAX_DRAFTS + 1][d])
 * and the drafts' pages ([max_tokens][2] pages of one layer). A run allocates
 * nothing; a draft grows its page-table array when a sequence is longer than
 * any drafted before.
 * Thread safety: one caller at a time (the engine's step thread); the pool's
 * workers are used inside a call.
 */
#ifndef FG_FORWARD_H
#define FG_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/ep/moe_ep.h"
#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"
#include "engine/model/deepseek2/model.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"

typedef struct fg_forward fg_forward_t;

/* Chained drafts per sequence between two runs. */
#define FG_DS2_MAX_DRAFTS 7

/* Errors: FG_ERR_INVALID_ARG (max_tokens < 1, a geometry of another layer
 * count), FG_ERR_MODEL_HPARAM, FG_ERR_NOMEM. */
fg_err fg_forward_create(const fg_model *m, const fg_kv_geometry *geo, int max_tokens, fg_pool_t *pool, fg_isa isa,
                         fg_forward_t **out, fg_diag *diag);
void fg_forward_destroy(fg_forward_t *f);

int fg_forward_max_tokens(const fg_forward_t *f);

/* Expert parallelism: from now on the routed experts of every MoE layer run
 * through ep (dispatched to the ranks that hold them, combined back) instead
 * of here; NULL switches back. With ep set, a run is collective: every rank
 * of ep's group must call fg_forward_run once per step, a rank with no
 * tokens with n_seqs = 0; a rejected batch still takes part in the
 * exchanges. ep must outlive its use. Setting an ep frees this forward's
 * packed copies of the routed experts (the ranks read the model's own), so a
 * rank holds only its attention and shared-expert copies; after switching
 * back to NULL the routed experts run from the model's unpacked weights. */
void fg_forward_set_ep(fg_forward_t *f, fg_moe_ep_t *ep);

/* Counts routing: every successful run adds, per expert id, the (token,
 * expert) picks of its tokens over all MoE layers into sink[n_expert]
 * (relaxed atomic adds once per run, so sink may be shared by several
 * forwards and read by any thread); NULL stops counting. sink must outlive
 * its use. */
void fg_forward_count_experts(fg_forward_t *f, _Atomic uint64_t *sink);

/* Runs the batch: writes each token's cache rows at positions kv->n_tokens..,
 * advances kv->n_tokens, and fills the requested logits.
 * Errors (nothing is written on error): FG_ERR_INVALID_ARG (batch larger than
 * max_tokens, a sequence without pages for its rows, bad n_logits),
 * FG_ERR_TOKEN_ID (a token outside the vocabulary); with expert parallelism
 * also the exchange's errors (cache rows may then be written, but no
 * sequence advances). */
fg_err fg_forward_run(fg_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);

/* The MTP block's logits of each run: from now on every run also writes, for
 * each requested logits row, the MTP block's logits at that position into
 * mtp[row][n_vocab] (rows counted over the whole batch in order); NULL stops.
 * Without an MTP block nothing is written. mtp must outlive its use. */
void fg_forward_set_mtp_out(fg_forward_t *f, float *mtp);

/* arch.h's forward_draft: for each sequence (n_tokens 1, n_logits 1, each
 * sequence once), the MTP block at position kv->n_tokens on tokens[i] and the
 * kept trunk hidden of position kv->n_tokens - 1; a second call before the
 * next run drafts at the next position from the MTP hidden of the call before
 * (up to FG_DS2_MAX_DRAFTS chained). Its logits equal those the MTP block of
 * a run gives at that position with the same tokens (the same kernels: one
 * sequence's draft is bit for bit a one-token run's MTP row). Writes nothing
 * into the caches; needs no pages past the cache. Errors (nothing changed):
 * FG_ERR_UNSUPPORTED (no MTP block), FG_ERR_INVALID_ARG, FG_ERR_TOKEN_ID,
 * FG_ERR_STATE (a sequence whose last position's hidden is not kept: draft
 * right after the run that computed it; or one whose length changed between
 * its drafts), FG_ERR_NOMEM. Expert parallelism
 * set or not, a draft runs its experts here and is not collective. */
fg_err fg_forward_draft(fg_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);

#endif
