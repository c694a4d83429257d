/* ep_shard.c: expert placement over ranks (see ep_shard.h). */
#include "engine/ep_shard.h"

#include <stdbool.h>
#include <stdlib.h>

struct fg_ep_shard {
    int n_expert, n_ranks, slots;
    int *rank_experts;   /* [n_ranks][slots] */
    int *slot_of;        /* [n_ranks][n_expert] slot or -1 */
    int *holders;        /* [n_expert][n_ranks] owner first; n_holders[e] used */
    int *n_holders;      /* [n_expert] */
};

static int owner(const fg_ep_shard_options *o, int e)
{
    const int per = o->n_expert / o->n_ranks;
    return o->placement == FG_EP_STRIDED ? e % o->n_ranks : e / per;
}

fg_err fg_ep_shard_create(const fg_ep_shard_options *o, fg_ep_shard_t **out, fg_diag *diag)
{
    *out = NULL;
    const int E = o->n_expert, R = o->n_ranks;
    if (E < 1)
        return fg_diag_set(diag, FG_ERR_CONFIG, "expert parallelism needs a MoE model (it has no routed experts)");
    if (R < 1)
        return fg_diag_set(diag, FG_ERR_CONFIG, "topology.ranks must be at least 1 (got %d)", R);
    if (E % R != 0)
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.ranks (%d) does not divide the model's %d experts: every rank must own as many", R,
                           E);
    if (o->redundant < 0 || o->redundant % R != 0)
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.redundant_experts (%d) must be a multiple of topology.ranks (%d): each rank holds "
                           "as many replicas",
                           o->redundant, R);
    const int own = E / R, rep = o->redundant / R;
    if (rep > E - own)
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.redundant_experts (%d) is more than the ranks can hold: %d replicas per rank, but "
                           "a rank can replicate only the %d experts it does not own",
                           o->redundant, rep, E - own);
    if (o->experts_per_rank != 0 && o->experts_per_rank != own + rep)
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.experts_per_rank (%d) does not match topology.ranks (%d): %d experts over %d "
                           "ranks plus %d replicas per rank make %d",
                           o->experts_per_rank, R, E, R, rep, own + rep);
    if (o->hot) {
        bool *seen = calloc((size_t)E, sizeof *seen);
        if (!seen)
            return fg_diag_set(diag, FG_ERR_NOMEM, "ep shard: out of memory");
        bool ok = true;
        for (int i = 0; i < E && ok; i++) {
            ok = o->hot[i] >= 0 && o->hot[i] < E && !seen[o->hot[i]];
            if (ok)
                seen[o->hot[i]] = true;
        }
        free(seen);
        if (!ok)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "hot expert order is not a permutation of 0..%d", E - 1);
    }

    fg_ep_shard_t *s = calloc(1, sizeof *s);
    if (!s)
        return fg_diag_set(diag, FG_ERR_NOMEM, "ep shard: out of memory");
    s->n_expert = E;
    s->n_ranks = R;
    s->slots = own + rep;
    s->rank_experts = malloc((size_t)R * (size_t)s->slots * sizeof(int));
    s->slot_of = malloc((size_t)R * (size_t)E * sizeof(int));
    s->holders = malloc((size_t)E * (size_t)R * sizeof(int));
    s->n_holders = calloc((size_t)E, sizeof(int));
    if (!s->rank_experts || !s->slot_of || !s->holders || !s->n_holders) {
        fg_ep_shard_destroy(s);
        return fg_diag_set(diag, FG_ERR_NOMEM, "ep shard: out of memory");
    }
    for (size_t i = 0; i < (size_t)R * (size_t)E; i++)
        s->slot_of[i] = -1;
    /* Owned experts first (ascending), so every expert's first holder is its owner. */
    int *fill = calloc((size_t)R, sizeof(int));
    if (!fill) {
        fg_ep_shard_destroy(s);
        return fg_diag_set(diag, FG_ERR_NOMEM, "ep shard: out of memory");
    }
    for (int e = 0; e < E; e++) {
        const int r = owner(o, e);
        s->rank_experts[(size_t)r * s->slots + fill[r]] = e;
        s->slot_of[(size_t)r * E + e] = fill[r]++;
        s->holders[(size_t)e * R + s->n_holders[e]++] = r;
    }
    /* Replicas: each rank takes the hottest experts it does not own. */
    for (int r = 0; r < R; r++)
        for (int i = 0; i < E && fill[r] < s->slots; i++) {
            const int e = o->hot ? o->hot[i] : i;
            if (s->slot_of[(size_t)r * E + e] >= 0)
                continue;
            s->rank_experts[(size_t)r * s->slots + fill[r]] = e;
            s->slot_of[(size_t)r * E + e] = fill[r]++;
            s->holders[(size_t)e * R + s->n_holders[e]++] = r;
        }
    free(fill);
    *out = s;
    return FG_OK;
}

void fg_ep_shard_destroy(fg_ep_shard_t *s)
{
    if (!s)
        return;
    free(s->rank_experts);
    free(s->slot_of);
    free(s->holders);
    free(s->n_holders);
    free(s);
}

int fg_ep_shard_ranks(const fg_ep_shard_t *s) { return s->n_ranks; }
int fg_ep_shard_experts(const fg_ep_shard_t *s) { return s->n_expert; }
int fg_ep_shard_slots(const fg_ep_shard_t *s) { return s->slots; }

const int *fg_ep_shard_rank_experts(const fg_ep_shard_t *s, int rank)
{
    return s->rank_experts + (size_t)rank * s->slots;
}

int fg_ep_shard_slot(const fg_ep_shard_t *s, int rank, int expert)
{
    return s->slot_of[(size_t)rank * s->n_expert + expert];
}

const int *fg_ep_shard_holders(const fg_ep_shard_t *s, int expert, int *n)
{
    *n = s->n_holders[expert];
    return s->holders + (size_t)expert * s->n_ranks;
}

int fg_ep_shard_pick(const fg_ep_shard_t *s, int expert, int home_rank, unsigned salt)
{
    if (s->slot_of[(size_t)home_rank * s->n_expert + expert] >= 0)
        return home_rank; /* local: no traffic */
    const int n = s->n_holders[expert];
    return s->holders[(size_t)expert * s->n_ranks + salt % (unsigned)n];
}
