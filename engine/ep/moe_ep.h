/* moe_ep.h: the routed experts of one MoE layer under expert parallelism —
 * dispatch each token to the ranks that hold its chosen experts, compute
 * there, combine back on the token's home rank. Any architecture with routed
 * experts (engine/model/arch.h: layer_experts names each layer's experts
 * and their activation): deepseek2, and deepseek4 with its hash-routed
 * layers (the router, hashed or not, runs on the home rank; only its ids and
 * weights travel).
 *
 * Per MoE layer, on every rank at once (the router has already run on the
 * token's home rank, giving k expert ids and weights per token):
 *  1. each (token, expert) slot goes to the rank fg_ep_shard_pick() names;
 *  2. a header exchange: to every peer, the rows for it and the rounds this
 *     rank needs; so every rank knows what it receives and the most rounds
 *     any rank needs, and all run that many;
 *  3. per round: each rank sends every peer at most share = capacity / ranks
 *     of its rows for that peer ([expert id][xn row of d]), so no receiver
 *     gets more than its capacity; each rank groups the rows it received by
 *     expert slot and runs each expert's SwiGLU once over them through its
 *     expert compute (engine/backend/moe_compute.h: the CPU matrix kernels, or the
 *     rank's GPU); the d-wide results go back the way they came;
 *  4. the home rank adds w_k * result into x, each token's experts in
 *     ascending id order (the order the single-rank loop adds them in), after
 *     the last round, so the rounds do not change the sums' order.
 * With no capacity (0) the receive side is sized for the worst case, every
 * token of every rank choosing this rank: n_ranks * max_tokens * k rows,
 * and every layer runs one round.
 *
 * Owns: every buffer of the exchange, sized at create (receive side: the
 * capacity in rows of d + 1 floats, and d floats for the results), so a
 * layer allocates nothing.
 * Thread safety: one per rank, called by that rank's thread; collective
 * (see engine/ep/ep_transport.h).
 */
#ifndef FG_MOE_EP_H
#define FG_MOE_EP_H

#include "config/fg_error.h"
#include "engine/backend/moe_compute.h"
#include "engine/ep/ep_shard.h"
#include "engine/ep/ep_transport.h"
#include "engine/model/arch.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"

typedef struct fg_moe_ep fg_moe_ep_t;

/* The model, shard and transport must outlive the object; the shard's rank
 * count must equal the transport's size, and every rank of the group must
 * be made with the same shard options, max_tokens and recv_capacity_rows.
 * recv_capacity_rows: rows one rank receives per round (0: the worst case,
 * n_ranks * max_tokens * k; larger values are cut to it). pool may be NULL
 * (single thread).
 * Errors: FG_ERR_INVALID_ARG (max_tokens < 1, shard and transport disagree,
 * the shard's expert count is not the model's, a model without routed
 * experts), FG_ERR_CONFIG
 * (recv_capacity_rows negative or below the rank count, naming
 * topology.recv_capacity_rows), FG_ERR_UNSUPPORTED (more than 64 experts
 * per token), FG_ERR_NOMEM. */
fg_err fg_moe_ep_create(const fg_arch_model *m, const fg_ep_shard_t *shard, fg_ep_transport_t *t, int max_tokens,
                        int64_t recv_capacity_rows, fg_pool_t *pool, fg_isa isa, fg_moe_ep_t **out, fg_diag *diag);
void fg_moe_ep_destroy(fg_moe_ep_t *ep);

/* Adds the routed experts' weighted outputs of this rank's n tokens into x.
 * il: the layer (the il-th of the forward pass, one with routed experts);
 * ids and w: [n][k] from the router; xn: [n][d] the normalised inputs;
 * x: [n][d]. n may be 0 (the rank still serves its peers).
 * Collective: every rank calls it for the same layer.
 * Errors: FG_ERR_INVALID_ARG (n > max_tokens: sends nothing; a row for an
 * expert this rank does not hold; a layer without routed experts),
 * FG_ERR_IO (transport). */
fg_err fg_moe_ep_experts(fg_moe_ep_t *ep, int il, int n, const int *ids, const float *w,
                         const float *xn, float *x, fg_diag *diag);

/* Takes part in every MoE layer's exchange (those of n_layer_run, in order)
 * with no tokens of its own: what a rank with an empty or rejected batch
 * does so that its peers complete.
 * Errors: as fg_moe_ep_experts. */
fg_err fg_moe_ep_idle(fg_moe_ep_t *ep, fg_diag *diag);

/* Rows this rank receives per round (the capacity, or the worst case). */
int64_t fg_moe_ep_capacity(const fg_moe_ep_t *ep);
/* This rank's id in the group, and the placement it was made with. */
int fg_moe_ep_rank(const fg_moe_ep_t *ep);
const fg_ep_shard_t *fg_moe_ep_shard(const fg_moe_ep_t *ep);

/* Makes compute run this rank's experts from now on (engine/backend/moe_compute.h;
 * the CUDA backend sets its GPU compute when opened for a rank). The CPU
 * compute made at create is freed, so the first set is final; compute is not
 * owned and must outlive its use, and NULL detaches it (what a closing
 * backend does): later layers then fail with FG_ERR_STATE, still taking part
 * in the exchange. Rows one expert gets in a round are at most
 * min(n_ranks * max_tokens, capacity); a round's rows at most the capacity,
 * (1 + d) floats apart. Call between layers only. */
void fg_moe_ep_set_compute(fg_moe_ep_t *ep, fg_moe_compute *compute);
typedef struct fg_moe_ep_stats {
    uint64_t exchanges;      /* MoE layer exchanges (calls of fg_moe_ep_experts) */
    uint64_t rounds;         /* rounds they ran: one each unless the capacity split some */
    uint64_t split_experts;  /* (receiver, expert) pairs with more rows than the capacity, cut over rounds (any
                              * receiver's, counted on every rank); their products see other batch sizes, so
                              * their results may differ in the last bits (Q8_0: see docs/parallel.md) */
} fg_moe_ep_stats;
/* Counters since create; the same on every rank of a group. */
void fg_moe_ep_get_stats(const fg_moe_ep_t *ep, fg_moe_ep_stats *st);

/* Bytes the largest single all-to-all of such a group moves to or from one
 * rank (a transport's staging size): the capacity's rows of d + 1 floats. */
size_t fg_moe_ep_exchange_bytes(const fg_arch_model *m, int n_ranks, int max_tokens, int64_t recv_capacity_rows);

#endif
