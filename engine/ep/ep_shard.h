/* ep_shard.h: which rank holds which expert (expert parallelism).
 *
 * n_expert experts are owned by n_ranks ranks, either contiguously (blocks
 * of neighbouring ids; when the ranks do not divide the experts, the first
 * E % R ranks own E / R + 1 and the others E / R) or strided (rank r owns
 * the experts e with e % R == r, which gives the same counts). So 256
 * experts on 72 ranks: ranks 0-39 own 4, ranks 40-71 own 3.
 *
 * Optionally `redundant` replica slots hold copies of hot experts. They
 * must even every rank out to the same number of slots, (E + redundant) / R:
 * a rank owning fewer takes more replicas (256 on 72 with 32 replicas: the
 * 32 ranks owning 3 take one each, every rank holds 4). Replicas go to the
 * experts in the given heat order, one each, hottest first (cycling when
 * there are more replicas than experts), each on the rank with the most
 * free slots that does not hold it yet (ties: the first after the owner).
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
    int n_ranks;              /* at most n_expert: every rank owns at least one */
    int experts_per_rank;     /* expert slots of the fullest rank, replicas included; 0: derived */
    int redundant;            /* replica slots over all ranks; when > 0, n_expert + redundant a multiple of n_ranks */
    fg_ep_placement placement;
    const int *hot;           /* [n_expert] a permutation, hottest first; NULL: id order */
    /* Or the order as text (topology.hot_experts): expert ids separated by
     * commas, hottest first, each at most once; the ones not listed follow
     * in id order. Used when hot is NULL; NULL or "": id order. */
    const char *hot_list;
} fg_ep_shard_options;

/* Errors: FG_ERR_CONFIG naming the topology key at fault and the numbers:
 * more ranks than experts, replicas that do not even the ranks out
 * ((experts + redundant) % ranks != 0) or more replicas on a rank than
 * experts it does not own, an experts_per_rank that differs from the
 * fullest rank's slots, a bad hot_list; FG_ERR_INVALID_ARG (hot not a
 * permutation),
 * FG_ERR_NOMEM. */
fg_err fg_ep_shard_create(const fg_ep_shard_options *o, fg_ep_shard_t **out, fg_diag *diag);

/* Parses a hot_list into hot[n_expert] (a permutation, see above).
 * Errors: FG_ERR_CONFIG naming topology.hot_experts (not a number, outside
 * 0..n_expert-1, listed twice). */
fg_err fg_ep_shard_parse_hot(const char *list, int n_expert, int *hot, fg_diag *diag);
void fg_ep_shard_destroy(fg_ep_shard_t *s);

int fg_ep_shard_ranks(const fg_ep_shard_t *s);
int fg_ep_shard_experts(const fg_ep_shard_t *s);
/* Expert slots of the fullest rank, replicas included (every rank's, when
 * replicas even them out or the ranks divide the experts). */
int fg_ep_shard_slots(const fg_ep_shard_t *s);
/* Expert slots of rank: its owned experts plus its replicas. */
int fg_ep_shard_rank_slots(const fg_ep_shard_t *s, int rank);
/* Experts rank owns (not counting replicas). */
int fg_ep_shard_rank_owned(const fg_ep_shard_t *s, int rank);

/* The experts rank holds, [fg_ep_shard_rank_slots]: owned ones first,
 * ascending, then its replicas. */
const int *fg_ep_shard_rank_experts(const fg_ep_shard_t *s, int rank);
/* Slot of expert on rank, or -1 when rank does not hold it. */
int fg_ep_shard_slot(const fg_ep_shard_t *s, int rank, int expert);
/* Ranks holding expert (the owner first); *n gets their number. */
const int *fg_ep_shard_holders(const fg_ep_shard_t *s, int expert, int *n);
/* The rank that computes expert for a token whose home is home_rank. */
int fg_ep_shard_pick(const fg_ep_shard_t *s, int expert, int home_rank, unsigned salt);

#endif
