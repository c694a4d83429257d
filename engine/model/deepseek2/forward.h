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
 * Owns: scratch buffers for up to max_tokens tokens, sized at create, and f32
 * copies of every layer's k_b (transposed) and v_b for the decompressed form;
 * a run allocates nothing.
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

/* Errors: FG_ERR_INVALID_ARG (max_tokens < 1), FG_ERR_MODEL_HPARAM, FG_ERR_NOMEM. */
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

#endif
