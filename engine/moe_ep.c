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

    int *slot_dst;            /* [T * K] destination rank of each (token, k) slot */
    int *slot_pos;            /* [T * K] its row in send_rows (and in back) */
    int64_t *send_count;      /* [R] rows to each rank */
    int64_t *recv_count;      /* [R] rows from each rank */
    size_t *send_bytes;       /* [R] */
    size_t *recv_bytes;       /* [R] */
    int *offs;                /* [R] running offsets while packing */
    float *send_rows;         /* [T * K][rec] */
    float *recv_rows;         /* [R * T * K][rec] */
    float *out_rows;          /* [R * T * K][d] results, in receive order */
    float *back_rows;         /* [T * K][d] results of our own slots, in send order */
    int *grp_count;           /* [slots + 1] received rows per local expert slot */
    int *grp_rows;            /* [R * T * K] received row indices grouped by slot */
    float *xe;                /* [R * T][d] one expert's gathered rows */
    float *ff_gate, *ff_up;   /* [R * T][F] */
    float *ye;                /* [R * T][d] */
    void *mm_scratch;
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

fg_err fg_moe_ep_create(const fg_model *m, const fg_ep_shard_t *shard, fg_ep_transport_t *t, int max_tokens,
                        fg_pool_t *pool, fg_isa isa, fg_moe_ep_t **out, fg_diag *diag)
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

    const size_t TK = (size_t)ep->T * ep->K, R = (size_t)ep->R, d = (size_t)ep->d, fl = sizeof(float);
    int failed = 0;
    ep->slot_dst = alloc64(TK * sizeof(int), &failed);
    ep->slot_pos = alloc64(TK * sizeof(int), &failed);
    ep->send_count = alloc64(R * sizeof(int64_t), &failed);
    ep->recv_count = alloc64(R * sizeof(int64_t), &failed);
    ep->send_bytes = alloc64(R * sizeof(size_t), &failed);
    ep->recv_bytes = alloc64(R * sizeof(size_t), &failed);
    ep->offs = alloc64(R * sizeof(int), &failed);
    ep->send_rows = alloc64(TK * ep->rec * fl, &failed);
    ep->recv_rows = alloc64(R * TK * ep->rec * fl, &failed);
    ep->out_rows = alloc64(R * TK * d * fl, &failed);
    ep->back_rows = alloc64(TK * d * fl, &failed);
    ep->grp_count = alloc64(((size_t)fg_ep_shard_slots(shard) + 1) * sizeof(int), &failed);
    ep->grp_rows = alloc64(R * TK * sizeof(int), &failed);
    /* A token picks an expert at most once, so one expert gets at most R * T rows. */
    const size_t RT = R * (size_t)ep->T;
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
        return fg_diag_set(diag, FG_ERR_NOMEM, "expert parallelism: cannot allocate buffers for %d tokens x %d ranks",
                           max_tokens, ep->R);
    }
    *out = ep;
    return FG_OK;
}

void fg_moe_ep_destroy(fg_moe_ep_t *ep)
{
    if (!ep)
        return;
    void *bufs[] = {ep->slot_dst, ep->slot_pos, ep->send_count, ep->recv_count, ep->send_bytes, ep->recv_bytes,
                    ep->offs, ep->send_rows, ep->recv_rows, ep->out_rows, ep->back_rows, ep->grp_count,
                    ep->grp_rows, ep->xe, ep->ff_gate, ep->ff_up, ep->ye, ep->mm_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    free(ep);
}

static void matmul(fg_moe_ep_t *ep, const fg_weight *w, int64_t mat, const float *x, int n, float *y)
{
    const uint8_t *data = (const uint8_t *)w->data + (size_t)mat * w->mat_bytes;
    /* Cannot fail: types and shapes were validated at model load. */
    (void)fg_matmul(ep->pool, ep->isa, w->type, data, w->n_in, w->n_out, x, n, y, ep->mm_scratch);
}

/* Packs this rank's slots per destination rank. Returns the number of slots. */
static int pack(fg_moe_ep_t *ep, int n, const int *ids, const float *xn)
{
    const int K = ep->K, R = ep->R, d = ep->d;
    memset(ep->send_count, 0, (size_t)R * sizeof *ep->send_count);
    for (int i = 0; i < n * K; i++) {
        ep->slot_dst[i] = fg_ep_shard_pick(ep->shard, ids[i], ep->rank, (unsigned)(i / K));
        ep->send_count[ep->slot_dst[i]]++;
    }
    for (int p = 0, at = 0; p < R; p++) {
        ep->offs[p] = at;
        at += (int)ep->send_count[p];
    }
    for (int i = 0; i < n * K; i++) {
        const int pos = ep->offs[ep->slot_dst[i]]++;
        float *row = ep->send_rows + (size_t)pos * ep->rec;
        const int32_t id = ids[i];
        memcpy(row, &id, sizeof id); /* the id's bits ride in the row's first float */
        memcpy(row + 1, xn + (size_t)(i / K) * d, (size_t)d * sizeof(float));
        ep->slot_pos[i] = pos;
    }
    return n * K;
}

/* Runs every held expert over the rows received for it; results land in
 * out_rows at the rows' receive positions. */
static fg_err compute(fg_moe_ep_t *ep, const fg_layer *ly, int rows, fg_diag *diag)
{
    const int slots = fg_ep_shard_slots(ep->shard), d = ep->d;
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
            fg_silu_mul_isa(ep->isa, ep->ff_gate + (size_t)j * ep->F, ep->ff_up + (size_t)j * ep->F, ep->F);
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
     * reported (later ones go to a scratch message). */
    const int R = ep->R;
    fg_err err = FG_OK;
    fg_diag later;
    if (n < 0 || n > ep->T) {
        keep(&err, fg_diag_set(msg(err, diag, &later), FG_ERR_INVALID_ARG,
                               "expert parallelism: %d tokens, at most %d per rank", n, ep->T));
        n = 0; /* still serve the peers */
    }
    pack(ep, n, ids, xn);
    fg_err ce = fg_ep_alltoall_counts(ep->t, ep->send_count, ep->recv_count, msg(err, diag, &later));
    keep(&err, ce);
    int64_t rows = 0;
    for (int p = 0; p < R; p++) {
        if (ce != FG_OK)
            ep->recv_count[p] = 0; /* unknown: receive nothing */
        rows += ep->recv_count[p];
    }
    if (rows > (int64_t)R * ep->T * ep->K) {
        /* A peer made with a larger max_tokens: receive nothing rather than overrun; the transport reports the
         * size mismatch to both sides. */
        keep(&err, fg_diag_set(msg(err, diag, &later), FG_ERR_INVALID_ARG,
                               "rank %d would receive %lld rows, room for %lld: every rank needs the same max tokens",
                               ep->rank, (long long)rows, (long long)R * ep->T * ep->K));
        for (int p = 0; p < R; p++)
            ep->recv_count[p] = 0;
        rows = 0;
    }
    for (int p = 0; p < R; p++) {
        ep->send_bytes[p] = (size_t)ep->send_count[p] * ep->rec * sizeof(float);
        ep->recv_bytes[p] = (size_t)ep->recv_count[p] * ep->rec * sizeof(float);
    }
    fg_err pe =
        fg_ep_alltoallv(ep->t, ep->send_rows, ep->send_bytes, ep->recv_rows, ep->recv_bytes, msg(err, diag, &later));
    keep(&err, pe);
    if (pe != FG_OK) { /* what arrived is not to be trusted: compute nothing, send nothing back */
        for (int p = 0; p < R; p++)
            ep->recv_count[p] = 0;
        rows = 0;
    }
    keep(&err, compute(ep, ly, (int)rows, msg(err, diag, &later)));
    /* Results go back the way the rows came: the counts swap roles. */
    for (int p = 0; p < R; p++) {
        ep->recv_bytes[p] = (size_t)ep->recv_count[p] * ep->d * sizeof(float);
        ep->send_bytes[p] = (size_t)ep->send_count[p] * ep->d * sizeof(float);
    }
    keep(&err,
         fg_ep_alltoallv(ep->t, ep->out_rows, ep->recv_bytes, ep->back_rows, ep->send_bytes, msg(err, diag, &later)));
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
