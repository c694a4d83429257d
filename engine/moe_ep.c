/* moe_ep.c: dispatch/combine of routed experts over ranks (see moe_ep.h). */
#include "engine/moe_ep.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/vecops.h"

#define FG_MOE_EP_MAX_K 64 /* experts per token the combine step sorts on the stack */

struct fg_moe_ep {
    const fg_model *m;
    const fg_ep_shard_t *shard;
    fg_ep_transport_t *t;
    fg_pool_t *pool;
    fg_isa isa;
    int rank, R, T, K, d, F;
    size_t rec;               /* floats per dispatched row: 1 (expert id bits) + d */
    int64_t cap;              /* rows one rank receives per round: the capacity, at most the worst case R * T * K */
    int64_t share;            /* rows one rank sends to one peer per round: cap / R */
    int64_t send_cap;         /* rows one rank sends per round: min(T * K, R * share) */

    int *slot_dst;            /* [T * K] destination rank of each (token, k) slot */
    int *slot_pos;            /* [T * K] its result's row in back_rows */
    int *dst_slots;           /* [T * K] slot indices grouped by destination, each group in slot order */
    int *dst_start;           /* [R] first entry of each destination's group in dst_slots */
    int64_t *hdr_send;        /* [R][2] to each peer: rows for it, rounds this rank needs */
    int64_t *hdr_recv;        /* [R][2] from each peer: the same */
    size_t *hdr_bytes;        /* [R] 2 * sizeof(int64_t) each */
    int64_t *send_count;      /* [R] rows to each rank, all rounds */
    int64_t *recv_count;      /* [R] rows from each rank, all rounds */
    int64_t *round_send;      /* [R] rows to each rank this round */
    int64_t *round_recv;      /* [R] rows from each rank this round */
    size_t *send_bytes;       /* [R] */
    size_t *recv_bytes;       /* [R] */
    float *send_rows;         /* [send_cap][rec] this round's rows, per destination */
    float *recv_rows;         /* [cap][rec] */
    float *out_rows;          /* [cap][d] results, in receive order */
    float *back_rows;         /* [T * K][d] results of our own slots, in the order they were sent */
    int *grp_count;           /* [slots + 1] received rows per local expert slot */
    int *grp_rows;            /* [cap] received row indices grouped by slot */
    float *xe;                /* [min(R * T, cap)][d] one expert's gathered rows */
    float *ff_gate, *ff_up;   /* [min(R * T, cap)][F] */
    float *ye;                /* [min(R * T, cap)][d] */
    void *mm_scratch;
    uint64_t rounds_total;    /* exchanges run, over all layers and steps (read by tests through the header) */
};

static void *alloc64(size_t n, int *failed)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        *failed = 1;
        return NULL;
    }
    return p;
}

/* The effective receive capacity in rows: the worst case when cap is 0 or larger. */
static int64_t effective_cap(int n_ranks, int max_tokens, int k, int64_t cap)
{
    const int64_t worst = (int64_t)n_ranks * max_tokens * k;
    return cap > 0 && cap < worst ? cap : worst;
}

size_t fg_moe_ep_exchange_bytes(const fg_model *m, int n_ranks, int max_tokens, int64_t recv_capacity_rows)
{
    /* Every call moves at most cap rows each way: a round's dispatch sends at most R * share <= cap rows
     * and receives at most cap; its return moves the same rows d floats wide. */
    const int64_t cap = effective_cap(n_ranks, max_tokens, m->hp.n_expert_used, recv_capacity_rows);
    const size_t hdr = (size_t)n_ranks * 2 * sizeof(int64_t);
    const size_t rows = (size_t)cap * (1 + (size_t)m->hp.n_embd) * sizeof(float);
    return rows > hdr ? rows : hdr;
}

fg_err fg_moe_ep_create(const fg_model *m, const fg_ep_shard_t *shard, fg_ep_transport_t *t, int max_tokens,
                        int64_t recv_capacity_rows, fg_pool_t *pool, fg_isa isa, fg_moe_ep_t **out, fg_diag *diag)
{
    *out = NULL;
    const fg_hparams *hp = &m->hp;
    if (max_tokens < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert parallelism: max tokens must be >= 1");
    if (fg_ep_shard_ranks(shard) != fg_ep_size(t))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert placement is for %d ranks but the transport has %d",
                           fg_ep_shard_ranks(shard), fg_ep_size(t));
    if (fg_ep_shard_experts(shard) != hp->n_expert)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert placement is for %d experts but the model has %d",
                           fg_ep_shard_experts(shard), hp->n_expert);
    if (hp->n_expert_used > FG_MOE_EP_MAX_K)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "expert parallelism: %d experts per token, at most %d",
                           hp->n_expert_used, FG_MOE_EP_MAX_K);
    if (recv_capacity_rows < 0 || (recv_capacity_rows > 0 && recv_capacity_rows < fg_ep_size(t)))
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.recv_capacity_rows (%lld) is too small: in each round every one of the %d ranks "
                           "(topology.ranks) must be able to send a rank one row, so use 0 (the worst case) or at "
                           "least %d",
                           (long long)recv_capacity_rows, fg_ep_size(t), fg_ep_size(t));
    fg_moe_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep)
        return fg_diag_set(diag, FG_ERR_NOMEM, "expert parallelism: out of memory");
    ep->m = m;
    ep->shard = shard;
    ep->t = t;
    ep->pool = pool;
    ep->isa = isa;
    ep->rank = fg_ep_rank(t);
    ep->R = fg_ep_size(t);
    ep->T = max_tokens;
    ep->K = hp->n_expert_used;
    ep->d = hp->n_embd;
    ep->F = hp->n_ff_exp;
    ep->rec = 1 + (size_t)ep->d;
    ep->cap = effective_cap(ep->R, ep->T, ep->K, recv_capacity_rows);
    ep->share = ep->cap / ep->R;
    const int64_t TK = (int64_t)ep->T * ep->K;
    ep->send_cap = TK < (int64_t)ep->R * ep->share ? TK : (int64_t)ep->R * ep->share;

    const size_t R = (size_t)ep->R, d = (size_t)ep->d, fl = sizeof(float), cap = (size_t)ep->cap;
    int failed = 0;
    ep->slot_dst = alloc64((size_t)TK * sizeof(int), &failed);
    ep->slot_pos = alloc64((size_t)TK * sizeof(int), &failed);
    ep->dst_slots = alloc64((size_t)TK * sizeof(int), &failed);
    ep->dst_start = alloc64(R * sizeof(int), &failed);
    ep->hdr_send = alloc64(R * 2 * sizeof(int64_t), &failed);
    ep->hdr_recv = alloc64(R * 2 * sizeof(int64_t), &failed);
    ep->hdr_bytes = alloc64(R * sizeof(size_t), &failed);
    ep->send_count = alloc64(R * sizeof(int64_t), &failed);
    ep->recv_count = alloc64(R * sizeof(int64_t), &failed);
    ep->round_send = alloc64(R * sizeof(int64_t), &failed);
    ep->round_recv = alloc64(R * sizeof(int64_t), &failed);
    ep->send_bytes = alloc64(R * sizeof(size_t), &failed);
    ep->recv_bytes = alloc64(R * sizeof(size_t), &failed);
    ep->send_rows = alloc64((size_t)ep->send_cap * ep->rec * fl, &failed);
    ep->recv_rows = alloc64(cap * ep->rec * fl, &failed);
    ep->out_rows = alloc64(cap * d * fl, &failed);
    ep->back_rows = alloc64((size_t)TK * d * fl, &failed);
    ep->grp_count = alloc64(((size_t)fg_ep_shard_slots(shard) + 1) * sizeof(int), &failed);
    ep->grp_rows = alloc64(cap * sizeof(int), &failed);
    /* A token picks an expert at most once, so one expert gets at most R * T rows, and at most cap in a round. */
    const size_t RT = R * (size_t)ep->T < cap ? R * (size_t)ep->T : cap;
    ep->xe = alloc64(RT * d * fl, &failed);
    ep->ff_gate = alloc64(RT * (size_t)ep->F * fl, &failed);
    ep->ff_up = alloc64(RT * (size_t)ep->F * fl, &failed);
    ep->ye = alloc64(RT * d * fl, &failed);
    size_t mm = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const fg_layer *ly = &m->layers[il];
        if (!ly->is_moe)
            continue;
        const fg_weight *ws[] = {&ly->gate_exps, &ly->up_exps, &ly->down_exps};
        for (int i = 0; i < 3; i++) {
            size_t b = fg_matmul_scratch_bytes(ws[i]->type, ws[i]->n_in, (int64_t)RT);
            mm = b > mm ? b : mm;
        }
    }
    ep->mm_scratch = alloc64(mm, &failed);
    if (failed) {
        fg_moe_ep_destroy(ep);
        return fg_diag_set(diag, FG_ERR_NOMEM,
                           "expert parallelism: cannot allocate buffers for %d tokens x %d ranks (%lld receive rows; "
                           "topology.recv_capacity_rows bounds them)",
                           max_tokens, (int)R, (long long)cap);
    }
    for (size_t p = 0; p < R; p++)
        ep->hdr_bytes[p] = 2 * sizeof(int64_t);
    *out = ep;
    return FG_OK;
}

void fg_moe_ep_destroy(fg_moe_ep_t *ep)
{
    if (!ep)
        return;
    void *bufs[] = {ep->slot_dst,   ep->slot_pos,   ep->dst_slots,  ep->dst_start,  ep->hdr_send,   ep->hdr_recv,
                    ep->hdr_bytes,  ep->send_count, ep->recv_count, ep->round_send, ep->round_recv, ep->send_bytes,
                    ep->recv_bytes, ep->send_rows,  ep->recv_rows,  ep->out_rows,   ep->back_rows,  ep->grp_count,
                    ep->grp_rows,   ep->xe,         ep->ff_gate,    ep->ff_up,      ep->ye,         ep->mm_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    free(ep);
}

int64_t fg_moe_ep_capacity(const fg_moe_ep_t *ep) { return ep->cap; }
uint64_t fg_moe_ep_rounds(const fg_moe_ep_t *ep) { return ep->rounds_total; }

static void matmul(fg_moe_ep_t *ep, const fg_weight *w, int64_t mat, const float *x, int n, float *y)
{
    const uint8_t *data = (const uint8_t *)w->data + (size_t)mat * w->mat_bytes;
    /* Cannot fail: types and shapes were validated at model load. */
    (void)fg_matmul(ep->pool, ep->isa, w->type, data, w->n_in, w->n_out, x, n, y, ep->mm_scratch);
}

/* Chooses each slot's destination and groups the slots by destination (a
 * counting sort that keeps slot order). Returns the rounds this rank needs
 * to send them all, share rows per peer per round. */
static int64_t route(fg_moe_ep_t *ep, int n, const int *ids)
{
    const int K = ep->K, R = ep->R;
    memset(ep->send_count, 0, (size_t)R * sizeof *ep->send_count);
    for (int i = 0; i < n * K; i++) {
        ep->slot_dst[i] = fg_ep_shard_pick(ep->shard, ids[i], ep->rank, (unsigned)(i / K));
        ep->send_count[ep->slot_dst[i]]++;
    }
    int64_t rounds = 0;
    for (int p = 0, at = 0; p < R; p++) {
        ep->dst_start[p] = at;
        at += (int)ep->send_count[p];
        const int64_t r = (ep->send_count[p] + ep->share - 1) / ep->share;
        rounds = r > rounds ? r : rounds;
    }
    for (int p = 0; p < R; p++) /* round_send serves as each group's fill cursor here */
        ep->round_send[p] = ep->dst_start[p];
    for (int i = 0; i < n * K; i++)
        ep->dst_slots[ep->round_send[ep->slot_dst[i]]++] = i;
    return rounds;
}

/* Rows of a pair's total that go in round j: share each, the rest in the last. */
static int64_t in_round(int64_t total, int64_t share, int64_t j)
{
    const int64_t left = total - j * share;
    return left <= 0 ? 0 : left < share ? left : share;
}

/* Packs round j's rows per destination ([expert id][xn row]) into send_rows
 * and notes where each slot's result will land in back_rows (from base on).
 * Returns the rows packed. */
static int64_t pack_round(fg_moe_ep_t *ep, int64_t j, int64_t base, const int *ids, const float *xn)
{
    const int K = ep->K, d = ep->d;
    int64_t at = 0;
    for (int p = 0; p < ep->R; p++) {
        ep->round_send[p] = in_round(ep->send_count[p], ep->share, j);
        for (int64_t m = 0; m < ep->round_send[p]; m++, at++) {
            const int i = ep->dst_slots[ep->dst_start[p] + j * ep->share + m];
            float *row = ep->send_rows + (size_t)at * ep->rec;
            const int32_t id = ids[i];
            memcpy(row, &id, sizeof id); /* the id's bits ride in the row's first float */
            memcpy(row + 1, xn + (size_t)(i / K) * d, (size_t)d * sizeof(float));
            ep->slot_pos[i] = (int)(base + at);
        }
    }
    return at;
}

/* Runs every held expert over the rows received for it; results land in
 * out_rows at the rows' receive positions. */
static fg_err compute(fg_moe_ep_t *ep, const fg_layer *ly, int rows, fg_diag *diag)
{
    const int slots = fg_ep_shard_rank_slots(ep->shard, ep->rank), d = ep->d;
    const int *held = fg_ep_shard_rank_experts(ep->shard, ep->rank);
    fg_err err = FG_OK;
    memset(ep->grp_count, 0, (size_t)(slots + 1) * sizeof *ep->grp_count);
    for (int j = 0; j < rows; j++) {
        int32_t id;
        memcpy(&id, ep->recv_rows + (size_t)j * ep->rec, sizeof id);
        const int s = id >= 0 && id < ep->m->hp.n_expert ? fg_ep_shard_slot(ep->shard, ep->rank, id) : -1;
        if (s < 0) {
            /* A peer's placement differs from ours: answer zeros, report once. */
            memset(ep->out_rows + (size_t)j * d, 0, (size_t)d * sizeof(float));
            if (err == FG_OK)
                err = fg_diag_set(diag, FG_ERR_INVALID_ARG, "rank %d got a row for expert %d, which it does not hold",
                                  ep->rank, (int)id);
            continue;
        }
        ep->grp_count[s + 1]++;
    }
    for (int s = 0; s < slots; s++)
        ep->grp_count[s + 1] += ep->grp_count[s];
    for (int j = 0; j < rows; j++) {
        int32_t id;
        memcpy(&id, ep->recv_rows + (size_t)j * ep->rec, sizeof id);
        const int s = id >= 0 && id < ep->m->hp.n_expert ? fg_ep_shard_slot(ep->shard, ep->rank, id) : -1;
        if (s >= 0)
            ep->grp_rows[ep->grp_count[s]++] = j;
    }
    /* grp_count[s] now holds the end of slot s's rows; its start is grp_count[s - 1]. */
    for (int s = 0; s < slots; s++) {
        const int begin = s ? ep->grp_count[s - 1] : 0, m = ep->grp_count[s] - begin, e = held[s];
        if (m == 0)
            continue;
        for (int j = 0; j < m; j++)
            memcpy(ep->xe + (size_t)j * d, ep->recv_rows + (size_t)ep->grp_rows[begin + j] * ep->rec + 1,
                   (size_t)d * sizeof(float));
        matmul(ep, &ly->gate_exps, e, ep->xe, m, ep->ff_gate);
        matmul(ep, &ly->up_exps, e, ep->xe, m, ep->ff_up);
        for (int j = 0; j < m; j++)
            fg_silu_mul(ep->ff_gate + (size_t)j * ep->F, ep->ff_up + (size_t)j * ep->F, ep->F);
        matmul(ep, &ly->down_exps, e, ep->ff_gate, m, ep->ye);
        for (int j = 0; j < m; j++)
            memcpy(ep->out_rows + (size_t)ep->grp_rows[begin + j] * d, ep->ye + (size_t)j * d,
                   (size_t)d * sizeof(float));
    }
    return err;
}

/* x[t] += sum_k w[t][k] * result of slot (t, k), experts in ascending id order. */
static void combine(fg_moe_ep_t *ep, int n, const int *ids, const float *w, float *x)
{
    const int K = ep->K, d = ep->d;
    int order[FG_MOE_EP_MAX_K];
    for (int t = 0; t < n; t++) {
        const int *tid = ids + (size_t)t * K;
        for (int k = 0; k < K; k++) { /* insertion sort of the k slots by expert id */
            int j = k;
            while (j > 0 && tid[order[j - 1]] > tid[k]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = k;
        }
        for (int j = 0; j < K; j++) {
            const int i = t * K + order[j];
            fg_axpy(x + (size_t)t * d, w[i], ep->back_rows + (size_t)ep->slot_pos[i] * d, d);
        }
    }
}

/* Keeps the first error of a sequence of steps. */
static void keep(fg_err *first, fg_err e)
{
    if (e != FG_OK && *first == FG_OK)
        *first = e;
}

/* Where a step writes its message: the caller's diag until an error is kept, then scratch. */
static fg_diag *msg(fg_err first, fg_diag *diag, fg_diag *scratch) { return first == FG_OK ? diag : scratch; }

fg_err fg_moe_ep_experts(fg_moe_ep_t *ep, const fg_layer *ly, int n, const int *ids, const float *w,
                         const float *xn, float *x, fg_diag *diag)
{
    /* Every step below runs whatever failed before it, so that the peers, which
     * cannot know, complete their exchanges too; the first error is the one
     * reported (later ones go to a scratch message). The number of rounds is
     * the largest any rank needs, which every rank learns from the header
     * exchange (each rank hears every rank's), so all run the same exchanges. */
    const int R = ep->R;
    fg_err err = FG_OK;
    fg_diag later;
    if (n < 0 || n > ep->T) {
        keep(&err, fg_diag_set(msg(err, diag, &later), FG_ERR_INVALID_ARG,
                               "expert parallelism: %d tokens, at most %d per rank", n, ep->T));
        n = 0; /* still serve the peers */
    }
    const int64_t my_rounds = route(ep, n, ids);
    for (int p = 0; p < R; p++) {
        ep->hdr_send[2 * p] = ep->send_count[p];
        ep->hdr_send[2 * p + 1] = my_rounds;
    }
    fg_err he = fg_ep_alltoallv(ep->t, ep->hdr_send, ep->hdr_bytes, ep->hdr_recv, ep->hdr_bytes,
                                msg(err, diag, &later));
    keep(&err, he);
    int64_t rounds = 1; /* at least one exchange, even when nobody has rows: as every rank expects */
    for (int p = 0; p < R; p++) {
        ep->recv_count[p] = he == FG_OK ? ep->hdr_recv[2 * p] : 0; /* unknown: receive nothing */
        if (he == FG_OK && ep->hdr_recv[2 * p + 1] > rounds)
            rounds = ep->hdr_recv[2 * p + 1];
        if (ep->recv_count[p] < 0 || ep->recv_count[p] > (int64_t)ep->T * ep->K) {
            keep(&err, fg_diag_set(msg(err, diag, &later), FG_ERR_INVALID_ARG,
                                   "rank %d would receive %lld rows from rank %d, at most %lld: every rank needs the "
                                   "same max tokens",
                                   ep->rank, (long long)ep->recv_count[p], p, (long long)ep->T * ep->K));
            ep->recv_count[p] = 0;
        }
    }
    if (he == FG_OK && rounds > my_rounds && rounds > ((int64_t)ep->T * ep->K + ep->share - 1) / ep->share) {
        /* A peer's share differs from ours (another capacity): its rounds cannot be trusted. */
        keep(&err, fg_diag_set(msg(err, diag, &later), FG_ERR_INVALID_ARG,
                               "rank %d was asked for %lld exchange rounds: every rank needs the same max tokens and "
                               "topology.recv_capacity_rows",
                               ep->rank, (long long)rounds));
    }
    int64_t base = 0;
    for (int64_t j = 0; j < rounds; j++) {
        const int64_t sent = pack_round(ep, j, base, ids, xn);
        int64_t rows = 0;
        for (int p = 0; p < R; p++) {
            ep->round_recv[p] = in_round(ep->recv_count[p], ep->share, j);
            rows += ep->round_recv[p];
        }
        if (rows > ep->cap) {
            /* Peers made with another capacity: receive nothing rather than overrun; the transport reports the
             * size mismatch to both sides. */
            keep(&err, fg_diag_set(msg(err, diag, &later), FG_ERR_INVALID_ARG,
                                   "rank %d would receive %lld rows in one round, room for %lld: every rank needs the "
                                   "same max tokens and topology.recv_capacity_rows",
                                   ep->rank, (long long)rows, (long long)ep->cap));
            memset(ep->round_recv, 0, (size_t)R * sizeof *ep->round_recv);
            rows = 0;
        }
        for (int p = 0; p < R; p++) {
            ep->send_bytes[p] = (size_t)ep->round_send[p] * ep->rec * sizeof(float);
            ep->recv_bytes[p] = (size_t)ep->round_recv[p] * ep->rec * sizeof(float);
        }
        fg_err pe = fg_ep_alltoallv(ep->t, ep->send_rows, ep->send_bytes, ep->recv_rows, ep->recv_bytes,
                                    msg(err, diag, &later));
        keep(&err, pe);
        if (pe != FG_OK) { /* what arrived is not to be trusted: compute nothing, send nothing back */
            memset(ep->round_recv, 0, (size_t)R * sizeof *ep->round_recv);
            rows = 0;
        }
        keep(&err, compute(ep, ly, (int)rows, msg(err, diag, &later)));
        /* Results go back the way the rows came: the counts swap roles. */
        for (int p = 0; p < R; p++) {
            ep->recv_bytes[p] = (size_t)ep->round_recv[p] * ep->d * sizeof(float);
            ep->send_bytes[p] = (size_t)ep->round_send[p] * ep->d * sizeof(float);
        }
        keep(&err, fg_ep_alltoallv(ep->t, ep->out_rows, ep->recv_bytes, ep->back_rows + (size_t)base * ep->d,
                                   ep->send_bytes, msg(err, diag, &later)));
        base += sent;
    }
    ep->rounds_total += (uint64_t)rounds;
    if (err == FG_OK)
        combine(ep, n, ids, w, x);
    return err;
}

fg_err fg_moe_ep_idle(fg_moe_ep_t *ep, fg_diag *diag)
{
    fg_err err = FG_OK;
    for (int il = 0; il < ep->m->hp.n_layer; il++) {
        if (!ep->m->layers[il].is_moe)
            continue;
        fg_err e = fg_moe_ep_experts(ep, &ep->m->layers[il], 0, NULL, NULL, NULL, NULL, diag);
        if (e != FG_OK && err == FG_OK)
            err = e;
    }
    return err;
}
