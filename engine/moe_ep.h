/* moe_ep.h: the routed experts of one MoE layer under expert parallelism —
 * dispatch each token to the ranks that hold its chosen experts, compute
 * there, combine back on the token's home rank.
 *
 * Per MoE layer, on every rank at once (the router has already run on the
 * token's home rank, giving k expert ids and weights per token):
 *  1. each (token, expert) slot goes to the rank fg_ep_shard_pick() names;
 *     the slots are packed per destination rank: [expert id][xn row of d];
 *  2. all-to-all of the per-peer slot counts, then of the packed rows;
 *  3. each rank groups the rows it received by expert and runs each expert's
 *     SwiGLU once over its rows (the existing matrix kernels);
 *  4. all-to-all of the d-wide results back, in the order they came;
 *  5. the home rank adds w_k * result into x, each token's experts in
 *     ascending id order (the order the single-rank loop adds them in).
 *
 * Owns: every buffer of the exchange, sized at create for max_tokens tokens
 * per rank (a rank may receive up to n_ranks * max_tokens * k rows), so a
 * layer allocates nothing.
 * Thread safety: one per rank, called by that rank's thread; collective
 * (see engine/ep_transport.h).
 */
#ifndef FG_MOE_EP_H
#define FG_MOE_EP_H

#include "config/fg_error.h"
#include "engine/ep_shard.h"
#include "engine/ep_transport.h"
#include "engine/model.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"

typedef struct fg_moe_ep fg_moe_ep_t;

/* The model, shard and transport must outlive the object; the shard's rank
 * count must equal the transport's size, and every rank of the group must
 * be made with the same shard options and max_tokens. pool may be NULL (single thread).
 * Errors: FG_ERR_INVALID_ARG (max_tokens < 1, shard and transport disagree,
 * the shard's expert count is not the model's), FG_ERR_UNSUPPORTED (more
 * than 64 experts per token), FG_ERR_NOMEM. */
fg_err fg_moe_ep_create(const fg_model *m, const fg_ep_shard_t *shard, fg_ep_transport_t *t, int max_tokens,
                        fg_pool_t *pool, fg_isa isa, fg_moe_ep_t **out, fg_diag *diag);
void fg_moe_ep_destroy(fg_moe_ep_t *ep);

/* Adds the routed experts' weighted outputs of this rank's n tokens into x.
 * ids and w: [n][k] from the router; xn: [n][d] the normalised inputs;
 * x: [n][d]. n may be 0 (the rank still serves its peers).
 * Collective: every rank calls it for the same layer.
 * Errors: FG_ERR_INVALID_ARG (n > max_tokens: sends nothing; a row for an
 * expert this rank does not hold), FG_ERR_IO (transport). */
fg_err fg_moe_ep_experts(fg_moe_ep_t *ep, const fg_layer *ly, int n, const int *ids, const float *w,
                         const float *xn, float *x, fg_diag *diag);

/* Takes part in every MoE layer's exchange with no tokens of its own: what a
 * rank with an empty or rejected batch does so that its peers complete.
 * Errors: as fg_moe_ep_experts. */
fg_err fg_moe_ep_idle(fg_moe_ep_t *ep, fg_diag *diag);

#endif
