/* ep_ranks.c: one node's expert-parallel ranks (see ep_ranks.h).
 *
 * Hand-off: the caller splits the batch per local rank, bumps a generation
 * number under the lock and wakes the rank threads; local rank 0's share
 * runs on the caller; the caller waits until every other rank has reported
 * done. The ranks meet each other (and other nodes' ranks) only inside the
 * collectives: the agreement all-gather of a round and the MoE exchanges.
 */
#include "engine/ep/ep_ranks.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ep/ep_transport.h"
#include "engine/ep/moe_ep.h"
#include "kernels/cpu/pool.h"

typedef struct rank {
    struct fg_ep_ranks *owner;
    int id;
    fg_pool_t *pool;          /* NULL: one thread */
    fg_arch_forward_t *fwd;   /* cpu: this rank's forward pass (the architecture's) */
    fg_backend_t *be;         /* cuda: this rank's backend on device id (fwd NULL) */
    fg_ep_transport_t *t;
    fg_moe_ep_t *ep;
    pthread_t thread;
    bool started;
    /* this step's share */
    int32_t *tok;             /* [max_tokens] */
    fg_fwd_seq *seqs;         /* [max_tokens] */
    int n_seqs, n_tok;
    int64_t *gathered;        /* [job ranks] the round's all-gather */
    fg_ep_round round;        /* what this rank's round decided */
    fg_err err;
    fg_diag diag;
} rank;

/* A round's all-gathered value per rank: token count, plus this bit when the rank's node leaves. */
#define LEAVE_BIT ((int64_t)1 << 40)

struct fg_ep_ranks {
    const fg_arch *arch;
    int n, max_tokens, threads_per_rank;
    int job_ranks, first_rank; /* the whole job's ranks; global id of local rank 0 */
    fg_ep_shard_t *shard;
    fg_ep_inproc_group_t *group;  /* owned; NULL when shared or NCCL */
    fg_kv_store_t *kv;        /* cuda: the host store */
    uint32_t *kv_versions;    /* cuda: [store pages] shared by the ranks' backends; NULL on the cpu */
    rank *ranks;              /* [n] the local ranks */
    bool in_round;            /* [set before a hand-off] this step starts with an agreement round */
    bool leave;               /* [set before a hand-off] the round announces that this node leaves */
    pthread_mutex_t mu;
    pthread_cond_t go_cv, done_cv;
    uint64_t gen;             /* [mu] step number */
    int pending;              /* [mu] ranks 1..n-1 still running this step */
    bool stop;                /* [mu] */
};

/* NCCL: every rank must be inside ncclCommInitRank at once, so each joins from its own thread. */
typedef struct nccl_join {
    fg_ep_nccl_options o;
    fg_ep_transport_t *t;
    fg_err err;
    fg_diag diag;
} nccl_join;

static void *nccl_join_main(void *arg)
{
    nccl_join *j = arg;
    j->err = fg_ep_nccl_transport_create(&j->o, &j->t, &j->diag);
    return NULL;
}

static fg_err nccl_transports(fg_ep_ranks_t *r, const fg_arch_model *m, const uint8_t *id, int64_t recv_capacity,
                              fg_diag *diag)
{
    /* The largest all-to-all: the receive capacity's rows of 1 + d floats. */
    const size_t cap = fg_moe_ep_exchange_bytes(m, r->job_ranks, r->max_tokens, recv_capacity);
    nccl_join *j = calloc((size_t)r->n, sizeof *j);
    pthread_t *th = calloc((size_t)r->n, sizeof *th);
    bool *started = calloc((size_t)r->n, sizeof *started);
    fg_err err = FG_OK;
    if (!j || !th || !started)
        err = fg_diag_set(diag, FG_ERR_NOMEM, "expert-parallel ranks: out of memory");
    for (int i = 0; err == FG_OK && i < r->n; i++) {
        j[i].o = (fg_ep_nccl_options){.n_ranks = r->job_ranks, .rank = r->first_rank + i, .device = i, .id = id,
                                      .max_bytes = cap};
        started[i] = pthread_create(&th[i], NULL, nccl_join_main, &j[i]) == 0;
        if (!started[i])
            err = fg_diag_set(diag, FG_ERR_NOMEM, "cannot start the NCCL join thread of rank %d", i);
    }
    /* A failed start leaves the others blocked in ncclCommInitRank: NCCL's own timeout ends them. */
    for (int i = 0; j && th && started && i < r->n; i++) {
        if (!started[i])
            continue;
        pthread_join(th[i], NULL);
        r->ranks[i].t = j[i].t;
        if (err == FG_OK && j[i].err != FG_OK)
            err = fg_diag_set(diag, j[i].err, "rank %d: %s", r->first_rank + i, j[i].diag.msg);
    }
    free(j);
    free(th);
    free(started);
    return err;
}

/* The agreement: every rank of the job sees the same gathered values, so
 * every rank decides the same. */
static fg_err agree(rank *k)
{
    const fg_ep_ranks_t *r = k->owner;
    k->round = (fg_ep_round){.left_node = -1};
    fg_err err = fg_ep_allgather_i64(k->t, k->n_tok | (r->leave ? LEAVE_BIT : 0), k->gathered, &k->diag);
    if (err != FG_OK)
        return err;
    for (int p = 0; p < r->job_ranks; p++) {
        if ((k->gathered[p] & LEAVE_BIT) && k->round.left_node < 0)
            k->round.left_node = p / r->n;
        k->round.job_tokens += k->gathered[p] & (LEAVE_BIT - 1);
    }
    k->round.stepped = k->round.left_node < 0 && k->round.job_tokens > 0;
    return FG_OK;
}

static void run_rank(rank *k)
{
    if (k->owner->in_round && ((k->err = agree(k)) != FG_OK || !k->round.stepped))
        return;
    k->err = k->fwd ? k->owner->arch->forward_run(k->fwd, k->tok, k->seqs, k->n_seqs, &k->diag)
                    : fg_backend_run(k->be, k->tok, k->seqs, k->n_seqs, &k->diag);
}

static void *rank_main(void *arg)
{
    rank *k = arg;
    fg_ep_ranks_t *r = k->owner;
    uint64_t seen = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && r->gen == seen)
            pthread_cond_wait(&r->go_cv, &r->mu);
        if (r->stop)
            break;
        seen = r->gen;
        pthread_mutex_unlock(&r->mu);
        run_rank(k);
        pthread_mutex_lock(&r->mu);
        if (--r->pending == 0)
            pthread_cond_signal(&r->done_cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

fg_err fg_ep_ranks_create(const fg_arch_model *m, const fg_kv_geometry *geo, const fg_ep_ranks_options *o,
                          fg_ep_ranks_t **out, fg_diag *diag)
{
    *out = NULL;
    if (!m->arch->forward_set_ep || !m->arch->layer_experts || m->n_expert < 1)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "expert parallelism needs routed experts; this %s model has none (set topology.ranks "
                           "to 1)",
                           m->arch->name);
    if (o->n_ranks < 1 || o->n_ranks > FG_EP_MAX_RANKS || o->max_tokens < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert-parallel ranks: %d ranks (1 to %d), %d tokens per step",
                           o->n_ranks, FG_EP_MAX_RANKS, o->max_tokens);
    const int n_local = o->n_local ? o->n_local : o->n_ranks;
    if (n_local < 1 || o->n_ranks % n_local != 0 || o->first_rank < 0 || o->first_rank % n_local != 0 ||
        o->first_rank >= o->n_ranks)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "expert-parallel ranks: %d local ranks from rank %d is not one node of %d ranks", n_local,
                           o->first_rank, o->n_ranks);
    if (n_local < o->n_ranks && !o->group && !o->nccl_id)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "expert-parallel ranks: %d of %d ranks here, but no shared group or NCCL id to reach "
                           "the rest",
                           n_local, o->n_ranks);
    if (o->group && o->nccl_id)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert-parallel ranks: a shared group and an NCCL id both given");
    if ((o->backend != FG_BACKEND_CPU && o->backend != FG_BACKEND_CUDA) || (o->backend == FG_BACKEND_CUDA && !o->kv))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert-parallel ranks: backend %d (cuda needs the KV store)",
                           (int)o->backend);
    fg_ep_shard_t *shard;
    fg_ep_shard_options so = {.n_expert = m->n_expert, .n_ranks = o->n_ranks,
                              .experts_per_rank = o->experts_per_rank, .redundant = o->redundant,
                              .placement = o->placement, .hot_list = o->hot_experts};
    fg_err err = fg_ep_shard_create(&so, &shard, diag);
    if (err)
        return err;
    fg_ep_ranks_t *r = calloc(1, sizeof *r);
    if (!r) {
        fg_ep_shard_destroy(shard);
        return fg_diag_set(diag, FG_ERR_NOMEM, "expert-parallel ranks: out of memory");
    }
    r->arch = m->arch;
    r->n = n_local;
    r->job_ranks = o->n_ranks;
    r->first_rank = o->first_rank;
    r->max_tokens = o->max_tokens;
    r->shard = shard;
    r->kv = o->kv;
    r->threads_per_rank = o->n_threads / n_local > 1 ? o->n_threads / n_local : 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->go_cv, NULL);
    pthread_cond_init(&r->done_cv, NULL);
    r->ranks = calloc((size_t)r->n, sizeof *r->ranks);
    if (!r->ranks) {
        fg_ep_ranks_destroy(r);
        return fg_diag_set(diag, FG_ERR_NOMEM, "expert-parallel ranks: out of memory");
    }
    if (o->backend == FG_BACKEND_CUDA &&
        !(r->kv_versions = calloc(fg_kv_store_pages_total(o->kv) + 1, sizeof *r->kv_versions))) {
        fg_ep_ranks_destroy(r);
        return fg_diag_set(diag, FG_ERR_NOMEM, "expert-parallel ranks: out of memory");
    }
    if ((err = o->nccl_id ? nccl_transports(r, m, o->nccl_id, o->recv_capacity_rows, diag)
               : o->group ? FG_OK
                          : fg_ep_inproc_group_create(r->n, &r->group, diag))) {
        fg_ep_ranks_destroy(r);
        return err;
    }
    for (int i = 0; i < r->n; i++) {
        rank *k = &r->ranks[i];
        k->owner = r;
        k->id = i;
        if (r->threads_per_rank > 1 && !(k->pool = fg_pool_create(r->threads_per_rank))) {
            fg_ep_ranks_destroy(r);
            return fg_diag_set(diag, FG_ERR_NOMEM, "cannot start %d worker threads for rank %d", r->threads_per_rank,
                               i);
        }
        k->tok = malloc((size_t)r->max_tokens * sizeof *k->tok);
        k->seqs = malloc((size_t)r->max_tokens * sizeof *k->seqs);
        k->gathered = malloc((size_t)r->job_ranks * sizeof *k->gathered);
        if (!k->tok || !k->seqs || !k->gathered) {
            fg_ep_ranks_destroy(r);
            return fg_diag_set(diag, FG_ERR_NOMEM, "expert-parallel ranks: out of memory");
        }
        if ((!o->nccl_id && (err = fg_ep_inproc_transport_create(o->group ? o->group : r->group, r->first_rank + i,
                                                                  &k->t, diag))) ||
            (err = fg_moe_ep_create(m, shard, k->t, r->max_tokens, o->recv_capacity_rows, k->pool, o->isa,
                                    &k->ep, diag))) {
            fg_ep_ranks_destroy(r);
            return err;
        }
        if (o->backend == FG_BACKEND_CUDA) {
            fg_backend_options bo = {.kind = FG_BACKEND_CUDA, .model = m, .geo = geo, .kv = o->kv,
                                     .max_tokens = r->max_tokens, .pool = k->pool, .isa = o->isa,
                                     .expert_tokens = o->expert_tokens, .ep = k->ep,
                                     .kv_versions = r->kv_versions, .device = i};
            fg_diag bd;
            if ((err = fg_backend_open(&bo, &k->be, &bd))) {
                fg_diag_set(diag, err, "rank %d (CUDA device %d): %s", r->first_rank + i, i, bd.msg);
                fg_ep_ranks_destroy(r);
                return err;
            }
            continue;
        }
        if ((err = m->arch->forward_create(m, geo, r->max_tokens, k->pool, o->isa, &k->fwd, diag))) {
            fg_ep_ranks_destroy(r);
            return err;
        }
        m->arch->forward_set_ep(k->fwd, k->ep);
        if (m->arch->forward_count_experts)
            m->arch->forward_count_experts(k->fwd, o->expert_tokens);
    }
    for (int i = 1; i < r->n; i++) {
        if (pthread_create(&r->ranks[i].thread, NULL, rank_main, &r->ranks[i]) != 0) {
            fg_ep_ranks_destroy(r);
            return fg_diag_set(diag, FG_ERR_NOMEM, "cannot start the thread of rank %d", i);
        }
        r->ranks[i].started = true;
    }
    *out = r;
    return FG_OK;
}

void fg_ep_ranks_destroy(fg_ep_ranks_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->go_cv);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; r->ranks && i < r->n; i++) {
        rank *k = &r->ranks[i];
        if (k->started)
            pthread_join(k->thread, NULL);
        if (k->fwd)
            r->arch->forward_destroy(k->fwd);
        fg_backend_close(k->be); /* before its exchange: it detaches its compute from it */
        fg_moe_ep_destroy(k->ep);
        fg_ep_transport_destroy(k->t);
        fg_pool_destroy(k->pool);
        free(k->tok);
        free(k->seqs);
        free(k->gathered);
    }
    fg_ep_inproc_group_destroy(r->group);
    fg_ep_shard_destroy(r->shard);
    free(r->kv_versions);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->go_cv);
    pthread_cond_destroy(&r->done_cv);
    free(r->ranks);
    free(r);
}

void fg_ep_ranks_page_changed(fg_ep_ranks_t *r, const uint8_t *page)
{
    if (r->kv_versions)
        (void)fg_backend_kv_page_changed(r->kv, r->kv_versions, page);
}

int fg_ep_ranks_count(const fg_ep_ranks_t *r) { return r->n; }
int fg_ep_ranks_threads(const fg_ep_ranks_t *r) { return r->threads_per_rank; }
bool fg_ep_ranks_multinode(const fg_ep_ranks_t *r) { return r->n < r->job_ranks; }
void fg_ep_ranks_exchange_stats(const fg_ep_ranks_t *r, fg_moe_ep_stats *st)
{
    fg_moe_ep_get_stats(r->ranks[0].ep, st);
}

/* Checks a step's batch; everything first: once the ranks start, they must all finish. */
static fg_err check_batch(const fg_ep_ranks_t *r, const fg_fwd_seq *seqs, const int *seq_rank, int n_seqs,
                          fg_diag *diag)
{
    int total = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (seq_rank[i] < 0 || seq_rank[i] >= r->n)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "sequence %d names rank %d of %d", i, seq_rank[i], r->n);
        if (seqs[i].n_tokens < 1 || seqs[i].n_tokens > r->max_tokens - total)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "batch exceeds %d tokens", r->max_tokens);
        total += seqs[i].n_tokens;
    }
    return FG_OK;
}

/* Splits the batch over the local ranks, runs every local rank (rank 0 here)
 * and waits for them all. */
static void hand_off(fg_ep_ranks_t *r, const int32_t *tokens, const fg_fwd_seq *seqs, const int *seq_rank,
                     int n_seqs)
{
    for (int i = 0; i < r->n; i++)
        r->ranks[i].n_seqs = r->ranks[i].n_tok = 0;
    for (int i = 0, at = 0; i < n_seqs; i++) {
        rank *k = &r->ranks[seq_rank[i]];
        memcpy(k->tok + k->n_tok, tokens + at, (size_t)seqs[i].n_tokens * sizeof *tokens);
        k->seqs[k->n_seqs++] = seqs[i];
        k->n_tok += seqs[i].n_tokens;
        at += seqs[i].n_tokens;
    }
    pthread_mutex_lock(&r->mu);
    r->pending = r->n - 1;
    r->gen++;
    pthread_cond_broadcast(&r->go_cv);
    pthread_mutex_unlock(&r->mu);
    run_rank(&r->ranks[0]);
    pthread_mutex_lock(&r->mu);
    while (r->pending > 0)
        pthread_cond_wait(&r->done_cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static fg_err rank_errors(const fg_ep_ranks_t *r, fg_diag *diag)
{
    /* The forwards advanced copies of the sequences; their kv pointers are the caller's, so nothing to copy back. */
    for (int i = 0; i < r->n; i++)
        if (r->ranks[i].err != FG_OK)
            return fg_diag_set(diag, r->ranks[i].err, "rank %d: %s", r->first_rank + i, r->ranks[i].diag.msg);
    return FG_OK;
}

fg_err fg_ep_ranks_run(fg_ep_ranks_t *r, const int32_t *tokens, const fg_fwd_seq *seqs, const int *seq_rank,
                       int n_seqs, fg_diag *diag)
{
    if (r->n < r->job_ranks)
        return fg_diag_set(diag, FG_ERR_STATE, "ranks %d..%d of %d: a step over several nodes needs a round",
                           r->first_rank, r->first_rank + r->n - 1, r->job_ranks);
    fg_err err = check_batch(r, seqs, seq_rank, n_seqs, diag);
    if (err != FG_OK)
        return err;
    r->in_round = false;
    hand_off(r, tokens, seqs, seq_rank, n_seqs);
    return rank_errors(r, diag);
}

fg_err fg_ep_ranks_round(fg_ep_ranks_t *r, const int32_t *tokens, const fg_fwd_seq *seqs, const int *seq_rank,
                         int n_seqs, bool leave, fg_ep_round *out, fg_diag *diag)
{
    /* A batch this node cannot run still takes part in the round, with no
     * tokens: the peers must complete their round and step. */
    fg_diag bad;
    const fg_err bad_err = check_batch(r, seqs, seq_rank, n_seqs, &bad);
    r->in_round = true;
    r->leave = leave;
    hand_off(r, tokens, seqs, seq_rank, bad_err == FG_OK ? n_seqs : 0);
    *out = r->ranks[0].round;
    const fg_err err = rank_errors(r, diag);
    if (err == FG_OK && bad_err != FG_OK)
        return fg_diag_set(diag, bad_err, "%s", bad.msg);
    return err;
}
