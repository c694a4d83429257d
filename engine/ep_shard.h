/* ep_shard.h: which rank holds which expert (expert parallelism).
 *
 * n_expert experts are split over n_ranks ranks, n_expert / n_ranks each,
 * either contiguously (rank r owns [r*E/R, (r+1)*E/R)) or strided (rank r
 * owns the experts e with e % R == r). Optionally each rank also holds
 * redundant / n_ranks replicas of hot experts it does not own: rank r takes
 * the hottest experts (in the given order) that it does not own, so the
 * hottest experts end up on many ranks and their load spreads out.
 *
 * A token's expert is computed on its home rank when the home rank holds it,
 * else on one holder picked by a fixed rule (holders[salt % n_holders], the
 * salt being the token's index), so a run is reproducible.
 *
 * Owns: its tables. Thread safety: immutable after create; any thread.
 */
#ifndef FG_EP_SHARD_H
#define FG_EP_SHARD_H

#include "config/fg_error.h"

typedef struct fg_ep_shard fg_ep_shard_t;

typedef enum fg_ep_placement { FG_EP_CONTIGUOUS = 0, FG_EP_STRIDED = 1 } fg_ep_placement;

typedef struct fg_ep_shard_options {
    int n_expert;             /* routed experts of the model */
    int n_ranks;
    int experts_per_rank;     /* expert slots per rank, replicas included; 0: derived */
    int redundant;            /* replica slots over all ranks, a multiple of n_ranks */
    fg_ep_placement placement;
    const int *hot;           /* [n_expert] a permutation, hottest first; NULL: id order */
} fg_ep_shard_options;

/* Errors: FG_ERR_CONFIG naming the topology key at fault: ranks that do not
 * divide the experts, a redundant count that is not a multiple of the ranks
 * or more replicas per rank than experts a rank does not own, an
 * experts_per_rank that differs from experts / ranks + replicas per rank;
 * FG_ERR_INVALID_ARG (hot not a permutation), FG_ERR_NOMEM. */
fg_err fg_ep_shard_create(const fg_ep_shard_options *o, fg_ep_shard_t **out, fg_diag *diag);
void fg_ep_shard_destroy(fg_ep_shard_t *s);

int fg_ep_shard_ranks(const fg_ep_shard_t *s);
int fg_ep_shard_experts(const fg_ep_shard_t *s);
/* Expert slots per rank, replicas included. */
int fg_ep_shard_slots(const fg_ep_shard_t *s);

/* The experts rank holds, [fg_ep_shard_slots] owned ones first, ascending. */
const int *fg_ep_shard_rank_experts(const fg_ep_shard_t *s, int rank);
/* Slot of expert on rank, or -1 when rank does not hold it. */
int fg_ep_shard_slot(const fg_ep_shard_t *s, int rank, int expert);
/* Ranks holding expert (the owner first); *n gets their number. */
const int *fg_ep_shard_holders(const fg_ep_shard_t *s, int expert, int *n);
/* The rank that computes expert for a token whose home is home_rank. */
int fg_ep_shard_pick(const fg_ep_shard_t *s, int expert, int home_rank, unsigned salt);

#endif
