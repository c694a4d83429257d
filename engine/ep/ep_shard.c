/* ep_shard.c: expert placement over ranks (see ep_shard.h). */
#include "engine/ep/ep_shard.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct fg_ep_shard {
    int n_expert, n_ranks, slots; /* slots: of the fullest rank */
    int *rank_experts;   /* [n_ranks][slots] */
    int *rank_slots;     /* [n_ranks] slots used */
    int *rank_owned;     /* [n_ranks] owned experts */
    int *slot_of;        /* [n_ranks][n_expert] slot or -1 */
    int *holders;        /* [n_expert][n_ranks] owner first; n_holders[e] used */
    int *n_holders;      /* [n_expert] */
};

/* Experts rank r owns: E / R, one more for the first E % R ranks. */
static int owned_count(int E, int R, int r) { return E / R + (r < E % R); }

static int owner(const fg_ep_shard_options *o, int e)
{
    const int E = o->n_expert, R = o->n_ranks;
    if (o->placement == FG_EP_STRIDED)
        return e % R;
    const int q = E / R, big = E % R; /* ranks [0, big) own q + 1 */
    return e < big * (q + 1) ? e / (q + 1) : big + (e - big * (q + 1)) / q;
}

static fg_err check(const fg_ep_shard_options *o, int *slots, fg_diag *diag)
{
    const int E = o->n_expert, R = o->n_ranks, red = o->redundant;
    if (E < 1)
        return fg_diag_set(diag, FG_ERR_CONFIG, "expert parallelism needs a MoE model (it has no routed experts)");
    if (R < 1)
        return fg_diag_set(diag, FG_ERR_CONFIG, "topology.ranks must be at least 1 (got %d)", R);
    if (R > E)
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.ranks (%d) is more than the model's %d experts: every rank must own at least one",
                           R, E);
    if (red < 0)
        return fg_diag_set(diag, FG_ERR_CONFIG, "topology.redundant_experts must be >= 0 (got %d)", red);
    if (red > 0 && (E + red) % R != 0) {
        const int over = (E + red) % R, lower = red - over > 0 ? red - over : 0;
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.redundant_experts (%d) must even the ranks out: %d experts + %d replicas over %d "
                           "ranks (topology.ranks) leave %d over; use %d%s or %d",
                           red, E, red, R, over, lower, lower == 0 ? " (no replicas)" : "", red + R - over);
    }
    const int s = red > 0 ? (E + red) / R : (E + R - 1) / R, min_own = E / R;
    if (s > E)
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.redundant_experts (%d) is more than the ranks can hold: up to %d replicas per "
                           "rank, but a rank can replicate only the %d experts it does not own",
                           red, s - min_own, E - min_own);
    if (o->experts_per_rank != 0 && o->experts_per_rank != s)
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.experts_per_rank (%d) does not match topology.ranks (%d): %d experts over %d "
                           "ranks plus %d replicas (topology.redundant_experts) make %d slots on the fullest rank",
                           o->experts_per_rank, R, E, R, red, s);
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
    *slots = s;
    return FG_OK;
}

fg_err fg_ep_shard_parse_hot(const char *list, int n_expert, int *hot, fg_diag *diag)
{
    bool *seen = calloc((size_t)(n_expert > 0 ? n_expert : 1), sizeof *seen);
    if (!seen)
        return fg_diag_set(diag, FG_ERR_NOMEM, "ep shard: out of memory");
    int n = 0;
    fg_err err = FG_OK;
    for (const char *p = list ? list : ""; *p && err == FG_OK;) {
        while (*p == ' ')
            p++;
        char *end;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= n_expert) {
            err = fg_diag_set(diag, FG_ERR_CONFIG,
                              "topology.hot_experts: entry %d ('%.16s') is not an expert id of this model (0 to %d)",
                              n + 1, p, n_expert - 1);
            break;
        }
        if (seen[v]) {
            err = fg_diag_set(diag, FG_ERR_CONFIG, "topology.hot_experts: expert %ld is listed twice", v);
            break;
        }
        seen[v] = true;
        hot[n++] = (int)v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == ',')
            p++;
        else if (*p)
            err = fg_diag_set(diag, FG_ERR_CONFIG,
                              "topology.hot_experts: expected ',' after entry %d, found '%c' (a list like \"5,0,9\")",
                              n, *p);
    }
    for (int e = 0; e < n_expert && err == FG_OK; e++) /* the ones not listed, in id order */
        if (!seen[e])
            hot[n++] = e;
    free(seen);
    return err;
}

static void hold(fg_ep_shard_t *s, int r, int e)
{
    const int at = s->rank_slots[r]++;
    s->rank_experts[(size_t)r * s->slots + at] = e;
    s->slot_of[(size_t)r * s->n_expert + e] = at;
    s->holders[(size_t)e * s->n_ranks + s->n_holders[e]++] = r;
}

/* One replica per expert in heat order, cycling, each on the rank with the
 * most free slots that lacks it. A rank with a free slot lacks some expert
 * (it holds fewer than slots <= E), so every pass over E experts places at
 * least one replica until all are placed. */
static void place_replicas(fg_ep_shard_t *s, const fg_ep_shard_options *o)
{
    const int E = s->n_expert, R = s->n_ranks;
    int left = 0;
    for (int r = 0; r < R; r++)
        left += s->slots - s->rank_slots[r];
    for (int i = 0, misses = 0; left > 0 && misses < E; i++) {
        const int e = o->hot ? o->hot[i % E] : i % E, own = s->holders[(size_t)e * R];
        int best = -1, best_free = 0;
        for (int j = 1; j < R; j++) {
            const int r = (own + j) % R, fr = s->slots - s->rank_slots[r];
            if (fr > best_free && s->slot_of[(size_t)r * E + e] < 0) {
                best = r;
                best_free = fr;
            }
        }
        if (best < 0) {
            misses++;
            continue;
        }
        misses = 0;
        hold(s, best, e);
        left--;
    }
}

fg_err fg_ep_shard_create(const fg_ep_shard_options *opt, fg_ep_shard_t **out, fg_diag *diag)
{
    *out = NULL;
    fg_ep_shard_options copy = *opt;
    const fg_ep_shard_options *o = &copy;
    int *parsed = NULL;
    if (!opt->hot && opt->hot_list && *opt->hot_list && opt->n_expert > 0) {
        if (!(parsed = malloc((size_t)opt->n_expert * sizeof *parsed)))
            return fg_diag_set(diag, FG_ERR_NOMEM, "ep shard: out of memory");
        fg_err pe = fg_ep_shard_parse_hot(opt->hot_list, opt->n_expert, parsed, diag);
        if (pe) {
            free(parsed);
            return pe;
        }
        copy.hot = parsed;
    }
    int slots = 0;
    fg_err err = check(o, &slots, diag);
    if (err) {
        free(parsed);
        return err;
    }
    const int E = o->n_expert, R = o->n_ranks;
    fg_ep_shard_t *s = calloc(1, sizeof *s);
    if (!s) {
        free(parsed);
        return fg_diag_set(diag, FG_ERR_NOMEM, "ep shard: out of memory");
    }
    s->n_expert = E;
    s->n_ranks = R;
    s->slots = slots;
    s->rank_experts = malloc((size_t)R * (size_t)slots * sizeof(int));
    s->rank_slots = calloc((size_t)R, sizeof(int));
    s->rank_owned = calloc((size_t)R, sizeof(int));
    s->slot_of = malloc((size_t)R * (size_t)E * sizeof(int));
    s->holders = malloc((size_t)E * (size_t)R * sizeof(int));
    s->n_holders = calloc((size_t)E, sizeof(int));
    if (!s->rank_experts || !s->rank_slots || !s->rank_owned || !s->slot_of || !s->holders || !s->n_holders) {
        free(parsed);
        fg_ep_shard_destroy(s);
        return fg_diag_set(diag, FG_ERR_NOMEM, "ep shard: out of memory");
    }
    for (size_t i = 0; i < (size_t)R * (size_t)E; i++)
        s->slot_of[i] = -1;
    /* Owned experts first (ascending), so every expert's first holder is its owner. */
    for (int e = 0; e < E; e++)
        hold(s, owner(o, e), e);
    for (int r = 0; r < R; r++)
        s->rank_owned[r] = s->rank_slots[r];
    if (o->redundant > 0)
        place_replicas(s, o);
    free(parsed);
    copy.hot = NULL;
    for (int r = 0; r < R; r++) /* the rules above guarantee these; a slip here would misroute tokens */
        if (s->rank_owned[r] != owned_count(E, R, r) || (o->redundant > 0 && s->rank_slots[r] != slots)) {
            fg_ep_shard_destroy(s);
            return fg_diag_set(diag, FG_ERR_CONFIG, "ep shard: rank %d holds %d slots (%d owned), want %d", r,
                               s->rank_slots[r], s->rank_owned[r], slots);
        }
    *out = s;
    return FG_OK;
}

void fg_ep_shard_destroy(fg_ep_shard_t *s)
{
    if (!s)
        return;
    free(s->rank_experts);
    free(s->rank_slots);
    free(s->rank_owned);
    free(s->slot_of);
    free(s->holders);
    free(s->n_holders);
    free(s);
}

int fg_ep_shard_ranks(const fg_ep_shard_t *s) { return s->n_ranks; }
int fg_ep_shard_experts(const fg_ep_shard_t *s) { return s->n_expert; }
int fg_ep_shard_slots(const fg_ep_shard_t *s) { return s->slots; }
int fg_ep_shard_rank_slots(const fg_ep_shard_t *s, int rank) { return s->rank_slots[rank]; }
int fg_ep_shard_rank_owned(const fg_ep_shard_t *s, int rank) { return s->rank_owned[rank]; }

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
