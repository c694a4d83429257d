/* moe_ep.c: dispatch/combine of routed experts over ranks (see moe_ep.h).
 *
 * Rounds. Every rank broadcasts (an all-to-all of the same row to all) its
 * rows per (receiver, expert slot), so every rank holds the whole count
 * matrix and computes the same plan for every receiver: its slots in order,
 * each whole expert in one round while it fits the capacity, the next round
 * when it does not; an expert with more rows than the capacity alone gets
 * rounds of its own, its rows (in sender order) cut every cap rows. The
 * number of rounds is the most any receiver needs, the same on every rank.
 * Keeping an expert's rows together keeps the rows each expert product sees,
 * and their order, those of one round without a capacity (the kernels order
 * their sums by batch size, so splitting an expert would change its last
 * bits); only an expert alone over the capacity is split.
 */
#include "engine/ep/moe_ep.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/hash64.h"
#include "engine/backend/moe_compute.h"
#include "kernels/cpu/vecops.h"

#define FG_MOE_EP_MAX_K 64 /* experts per token the combine step sorts on the stack */
#define HDR_FIXED 3        /* a rank's header: max tokens, capacity, placement hash, then its [R][S] row counts */

struct fg_moe_ep {
    const fg_arch_model *m;
    const fg_ep_shard_t *shard;
    fg_ep_transport_t *t;
    fg_pool_t *pool;
    fg_isa isa;
    int rank, R, T, K, d, F, S; /* S: slots of the fullest rank */
    size_t rec;                 /* floats per dispatched row: 1 (expert id bits) + d */
    int64_t cap;                /* rows one rank receives per round: the capacity, at most the worst case R * T * K */
    int64_t max_rounds;         /* bound on any receiver's rounds: 2 * S + R * T * K / cap + 1 */
    int64_t placement_hash;     /* of every rank's expert table, so ranks with different placements notice */
    size_t hdr_len;             /* int64 per header: HDR_FIXED + R * S */

    int *slot_dst;              /* [T * K] destination rank of each (token, k) slot */
    int *slot_round;            /* [T * K] the round it goes in */
    int *slot_pos;              /* [T * K] its result's row in back_rows */
    int *order;                 /* [T * K] slot indices by (round, destination, slot) */
    int *round_start;           /* [max_rounds + 1] first entry of each round in order */
    int64_t *run;               /* [R * S] rows given a round so far, per (receiver, slot) */
    int64_t *hdr_send;          /* [R][hdr_len] this rank's header, once per peer */
    int64_t *hdr;               /* [R][hdr_len] every rank's header: counts[q][p][s] = rows q sends p for slot s */
    size_t *hdr_bytes;          /* [R] hdr_len * 8 each */
    int64_t *plan_j0;           /* [R * S] first round of receiver p's slot s; -1: no rows */
    int64_t *plan_n;            /* [R * S] rows of receiver p's slot s over all senders */
    int64_t *plan_off;          /* [R * S] rows of receiver p's slot s from ranks before this one */
    int64_t *round_send;        /* [R] rows to each rank this round */
    int64_t *round_recv;        /* [R] rows from each rank this round */
    size_t *send_bytes;         /* [R] */
    size_t *recv_bytes;         /* [R] */
    float *send_rows;           /* [T * K][rec] this round's rows, per destination */
    float *recv_rows;           /* [cap][rec] */
    float *out_rows;            /* [cap][d] results, in receive order */
    float *back_rows;           /* [T * K][d] results of our own slots, in the order they were sent */
    int *grp_count;             /* [S + 1] received rows per local expert slot */
    int *grp_rows;              /* [cap] received row indices grouped by slot */
    int *grp_seg;               /* [S + 1] grouped positions of each slot (fg_moe_rows.seg) */
    fg_moe_compute *cpu;        /* owned: the CPU expert compute, until another is set */
    fg_moe_compute *compute;    /* where the experts run: cpu, or one set by fg_moe_ep_set_compute; NULL: none */
    fg_moe_ep_stats stats;      /* since create */
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

size_t fg_moe_ep_exchange_bytes(const fg_arch_model *m, int n_ranks, int max_tokens, int64_t recv_capacity_rows)
{
    /* A round receives at most cap rows and sends at most T * K (all of its own); the results go back the same
     * rows d floats wide; the header exchange moves R headers. */
    const int64_t cap = effective_cap(n_ranks, max_tokens, m->n_expert_used, recv_capacity_rows);
    const int64_t tk = (int64_t)max_tokens * m->n_expert_used, rows = cap > tk ? cap : tk;
    const size_t hdr = (size_t)n_ranks * (HDR_FIXED + (size_t)n_ranks * (size_t)m->n_expert) * sizeof(int64_t);
    const size_t data = (size_t)rows * (1 + (size_t)m->n_embd) * sizeof(float);
    return data > hdr ? data : hdr;
}

fg_err fg_moe_ep_create(const fg_arch_model *m, const fg_ep_shard_t *shard, fg_ep_transport_t *t, int max_tokens,
                        int64_t recv_capacity_rows, fg_pool_t *pool, fg_isa isa, fg_moe_ep_t **out, fg_diag *diag)
{
    *out = NULL;
    if (!m->arch->layer_experts || m->n_expert < 1 || m->n_expert_used < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert parallelism: this %s model has no routed experts",
                           m->arch->name);
    if (max_tokens < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert parallelism: max tokens must be >= 1");
    if (fg_ep_shard_ranks(shard) != fg_ep_size(t))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert placement is for %d ranks but the transport has %d",
                           fg_ep_shard_ranks(shard), fg_ep_size(t));
    if (fg_ep_shard_experts(shard) != m->n_expert)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert placement is for %d experts but the model has %d",
                           fg_ep_shard_experts(shard), m->n_expert);
    if (m->n_expert_used > FG_MOE_EP_MAX_K)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "expert parallelism: %d experts per token, at most %d",
                           m->n_expert_used, FG_MOE_EP_MAX_K);
    if (recv_capacity_rows < 0 || (recv_capacity_rows > 0 && recv_capacity_rows < m->n_expert_used))
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.recv_capacity_rows (%lld) is too small: a rank must be able to receive one "
                           "token's %d expert rows in a round; use 0 (the worst case) or at least %d",
                           (long long)recv_capacity_rows, m->n_expert_used, m->n_expert_used);
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
    ep->K = m->n_expert_used;
    ep->d = m->n_embd;
    ep->F = m->n_ff_exp;
    ep->S = fg_ep_shard_slots(shard);
    ep->rec = 1 + (size_t)ep->d;
    ep->cap = effective_cap(ep->R, ep->T, ep->K, recv_capacity_rows);
    const int64_t TK = (int64_t)ep->T * ep->K;
    ep->max_rounds = 2 * (int64_t)ep->S + (int64_t)ep->R * TK / ep->cap + 1;
    ep->hdr_len = HDR_FIXED + (size_t)ep->R * (size_t)ep->S;

    const size_t R = (size_t)ep->R, RS = R * (size_t)ep->S, d = (size_t)ep->d, fl = sizeof(float);
    const size_t cap = (size_t)ep->cap;
    int failed = 0;
    ep->slot_dst = alloc64((size_t)TK * sizeof(int), &failed);
    ep->slot_round = alloc64((size_t)TK * sizeof(int), &failed);
    ep->slot_pos = alloc64((size_t)TK * sizeof(int), &failed);
    ep->order = alloc64((size_t)TK * sizeof(int), &failed);
    ep->round_start = alloc64(((size_t)ep->max_rounds + 1) * sizeof(int), &failed);
    ep->run = alloc64(RS * sizeof(int64_t), &failed);
    ep->hdr_send = alloc64(R * ep->hdr_len * sizeof(int64_t), &failed);
    ep->hdr = alloc64(R * ep->hdr_len * sizeof(int64_t), &failed);
    ep->hdr_bytes = alloc64(R * sizeof(size_t), &failed);
    ep->plan_j0 = alloc64(RS * sizeof(int64_t), &failed);
    ep->plan_n = alloc64(RS * sizeof(int64_t), &failed);
    ep->plan_off = alloc64(RS * sizeof(int64_t), &failed);
    ep->round_send = alloc64(R * sizeof(int64_t), &failed);
    ep->round_recv = alloc64(R * sizeof(int64_t), &failed);
    ep->send_bytes = alloc64(R * sizeof(size_t), &failed);
    ep->recv_bytes = alloc64(R * sizeof(size_t), &failed);
    ep->send_rows = alloc64((size_t)TK * ep->rec * fl, &failed);
    ep->recv_rows = alloc64(cap * ep->rec * fl, &failed);
    ep->out_rows = alloc64(cap * d * fl, &failed);
    ep->back_rows = alloc64((size_t)TK * d * fl, &failed);
    ep->grp_count = alloc64(((size_t)ep->S + 1) * sizeof(int), &failed);
    ep->grp_rows = alloc64(cap * sizeof(int), &failed);
    ep->grp_seg = alloc64(((size_t)ep->S + 1) * sizeof(int), &failed);
    /* A token picks an expert at most once, so one expert gets at most R * T rows, and at most cap in a round.
     * (A deepseek4 tid2eid row that names an expert twice could pass that; the compute then refuses the round
     * with an error rather than overrun.) */
    const size_t RT = R * (size_t)ep->T < cap ? R * (size_t)ep->T : cap;
    if (!failed) {
        fg_diag cd;
        if (fg_moe_compute_cpu_create(m, (int64_t)RT, pool, isa, &ep->cpu, &cd) != FG_OK)
            failed = 1;
        ep->compute = ep->cpu;
    }
    if (failed) {
        fg_moe_ep_destroy(ep);
        return fg_diag_set(diag, FG_ERR_NOMEM,
                           "expert parallelism: cannot allocate buffers for %d tokens x %d ranks (%lld receive rows; "
                           "topology.recv_capacity_rows bounds them)",
                           max_tokens, (int)R, (long long)cap);
    }
    for (size_t p = 0; p < R; p++)
        ep->hdr_bytes[p] = ep->hdr_len * sizeof(int64_t);
    uint64_t h = fg_hash64(&ep->S, sizeof ep->S, (uint64_t)ep->R);
    for (int r = 0; r < ep->R; r++)
        h = fg_hash64(fg_ep_shard_rank_experts(shard, r), (size_t)fg_ep_shard_rank_slots(shard, r) * sizeof(int), h);
    ep->placement_hash = (int64_t)(h >> 1); /* a non-negative int64 */
    *out = ep;
    return FG_OK;
}

void fg_moe_ep_destroy(fg_moe_ep_t *ep)
{
    if (!ep)
        return;
    void *bufs[] = {ep->slot_dst,   ep->slot_round, ep->slot_pos,   ep->order,      ep->round_start, ep->run,
                    ep->hdr_send,   ep->hdr,        ep->hdr_bytes,  ep->plan_j0,    ep->plan_n,      ep->plan_off,
                    ep->round_send, ep->round_recv, ep->send_bytes, ep->recv_bytes, ep->send_rows,   ep->recv_rows,
                    ep->out_rows,   ep->back_rows,  ep->grp_count,  ep->grp_rows,   ep->grp_seg};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    fg_moe_compute_cpu_destroy(ep->cpu);
    free(ep);
}

int64_t fg_moe_ep_capacity(const fg_moe_ep_t *ep) { return ep->cap; }
void fg_moe_ep_get_stats(const fg_moe_ep_t *ep, fg_moe_ep_stats *st) { *st = ep->stats; }
int fg_moe_ep_rank(const fg_moe_ep_t *ep) { return ep->rank; }
const fg_ep_shard_t *fg_moe_ep_shard(const fg_moe_ep_t *ep) { return ep->shard; }

void fg_moe_ep_set_compute(fg_moe_ep_t *ep, fg_moe_compute *compute)
{
    /* The CPU compute's buffers (sized like the receive side) are not needed once another takes over. */
    fg_moe_compute_cpu_destroy(ep->cpu);
    ep->cpu = NULL;
    ep->compute = compute;
}

/* Rows rank q sends rank p for p's slot s, from the gathered headers. */
static int64_t *count_at(const fg_moe_ep_t *ep, int q, int p, int s)
{
    return ep->hdr + (size_t)q * ep->hdr_len + HDR_FIXED + (size_t)p * ep->S + s;
}

/* Chooses each slot's destination and fills this rank's header: max tokens,
 * capacity, rows per (receiver, slot), once for every peer. */
static void route(fg_moe_ep_t *ep, int n, const int *ids)
{
    const int K = ep->K, R = ep->R, S = ep->S;
    int64_t *h = ep->hdr_send;
    memset(h, 0, ep->hdr_len * sizeof *h);
    h[0] = ep->T;
    h[1] = ep->cap;
    h[2] = ep->placement_hash;
    for (int i = 0; i < n * K; i++) {
        const int p = fg_ep_shard_pick(ep->shard, ids[i], ep->rank, (unsigned)(i / K));
        ep->slot_dst[i] = p;
        h[HDR_FIXED + (size_t)p * S + fg_ep_shard_slot(ep->shard, p, ids[i])]++;
    }
    for (int p = 1; p < R; p++)
        memcpy(h + (size_t)p * ep->hdr_len, h, ep->hdr_len * sizeof *h);
}

/* Checks the gathered headers: every rank made alike, every count possible.
 * Every rank sees the same headers, so every rank decides the same. */
static fg_err check_headers(const fg_moe_ep_t *ep, fg_diag *diag)
{
    for (int q = 0; q < ep->R; q++) {
        const int64_t *h = ep->hdr + (size_t)q * ep->hdr_len;
        if (h[0] != ep->T || h[1] != ep->cap)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "rank %d was made for %lld tokens and %lld receive rows, rank %d for %d and %lld: "
                               "every rank needs the same max tokens and topology.recv_capacity_rows",
                               q, (long long)h[0], (long long)h[1], ep->rank, ep->T, (long long)ep->cap);
        if (h[2] != ep->placement_hash)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "rank %d places the experts differently from rank %d: every rank needs the same "
                               "topology (ranks, placement, redundant_experts, hot_experts)",
                               q, ep->rank);
        int64_t sum = 0;
        for (int p = 0; p < ep->R; p++)
            for (int s = 0; s < ep->S; s++) {
                const int64_t c = *count_at(ep, q, p, s);
                if (c < 0 || (c > 0 && s >= fg_ep_shard_rank_slots(ep->shard, p)))
                    return fg_diag_set(diag, FG_ERR_INVALID_ARG, "rank %d sent a bad row count for rank %d", q, p);
                sum += c;
            }
        if (sum > (int64_t)ep->T * ep->K)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "rank %d sends %lld rows, at most %lld", q, (long long)sum,
                               (long long)ep->T * ep->K);
    }
    return FG_OK;
}

/* The plan of every receiver (see the top of the file); returns the rounds. */
static int64_t plan(fg_moe_ep_t *ep)
{
    int64_t rounds = 1; /* at least one exchange, even when nobody has rows: as every rank expects */
    for (int p = 0; p < ep->R; p++) {
        int64_t j = 0, used = 0;
        bool any = false;
        for (int s = 0; s < ep->S; s++) {
            const size_t at = (size_t)p * ep->S + s;
            int64_t n = 0;
            for (int q = 0; q < ep->R; q++) {
                if (q == ep->rank)
                    ep->plan_off[at] = n;
                n += *count_at(ep, q, p, s);
            }
            ep->plan_n[at] = n;
            ep->plan_j0[at] = -1;
            if (n == 0)
                continue;
            if (n > ep->cap) { /* alone over the capacity: rounds of its own, cut every cap rows */
                ep->stats.split_experts++;
                if (used > 0)
                    j++;
                ep->plan_j0[at] = j;
                const int64_t more = (n - 1) / ep->cap;
                j += more;
                used = n - more * ep->cap;
            } else {
                if (used + n > ep->cap) {
                    j++;
                    used = 0;
                }
                ep->plan_j0[at] = j;
                used += n;
            }
            any = true;
        }
        if (any && j + 1 > rounds)
            rounds = j + 1;
    }
    return rounds;
}

/* Gives each of this rank's slots its round and orders them by (round,
 * destination, slot): a counting sort by destination into slot_pos (free
 * until pack_round), then a stable one by round into order. Returns false if
 * a round is out of range (cannot happen with checked headers). */
static bool order_slots(fg_moe_ep_t *ep, int n, const int *ids, int64_t rounds)
{
    const int K = ep->K, R = ep->R, S = ep->S;
    int *by_dst = ep->slot_pos;
    memset(ep->run, 0, (size_t)R * S * sizeof *ep->run);
    memset(ep->round_start, 0, ((size_t)rounds + 1) * sizeof *ep->round_start);
    memset(ep->round_send, 0, (size_t)R * sizeof *ep->round_send);
    for (int i = 0; i < n * K; i++) {
        const int p = ep->slot_dst[i], s = fg_ep_shard_slot(ep->shard, p, ids[i]);
        const size_t at = (size_t)p * S + s;
        const int64_t x = ep->run[at]++;
        const int64_t j = ep->plan_n[at] <= ep->cap ? ep->plan_j0[at]
                                                    : ep->plan_j0[at] + (ep->plan_off[at] + x) / ep->cap;
        if (j < 0 || j >= rounds)
            return false;
        ep->slot_round[i] = (int)j;
        ep->round_start[j + 1]++;
        ep->round_send[p]++;
    }
    for (int p = 0, at = 0; p < R; p++) { /* round_send: per-destination counts, then fill cursors */
        const int c = (int)ep->round_send[p];
        ep->round_send[p] = at;
        at += c;
    }
    for (int i = 0; i < n * K; i++)
        by_dst[ep->round_send[ep->slot_dst[i]]++] = i;
    for (int64_t j = 0; j < rounds; j++)
        ep->round_start[j + 1] += ep->round_start[j];
    for (int o = 0; o < n * K; o++) { /* round_start[j] runs to round j's end while filling ... */
        const int i = by_dst[o];
        ep->order[ep->round_start[ep->slot_round[i]]++] = i;
    }
    for (int64_t j = rounds; j > 0; j--) /* ... which is round j + 1's start: step back one */
        ep->round_start[j] = ep->round_start[j - 1];
    ep->round_start[0] = 0;
    return true;
}

/* Packs round j's rows ([expert id][xn row]) per destination into send_rows,
 * counts them per destination, and notes where each slot's result will land
 * in back_rows (from base on). Returns the rows packed. */
static int64_t pack_round(fg_moe_ep_t *ep, int64_t j, int64_t base, const int *ids, const float *xn)
{
    const int K = ep->K, d = ep->d;
    memset(ep->round_send, 0, (size_t)ep->R * sizeof *ep->round_send);
    int64_t at = 0;
    for (int o = ep->round_start[j]; o < ep->round_start[j + 1]; o++, at++) {
        const int i = ep->order[o];
        float *row = ep->send_rows + (size_t)at * ep->rec;
        const int32_t id = ids[i];
        memcpy(row, &id, sizeof id); /* the id's bits ride in the row's first float */
        memcpy(row + 1, xn + (size_t)(i / K) * d, (size_t)d * sizeof(float));
        ep->slot_pos[i] = (int)(base + at);
        ep->round_send[ep->slot_dst[i]]++;
    }
    return at;
}

/* Rows this rank receives from each peer in round j (the plan, read from the
 * receiving side). Returns their sum. */
static int64_t recv_round(fg_moe_ep_t *ep, int64_t j)
{
    const int me = ep->rank;
    int64_t rows = 0;
    memset(ep->round_recv, 0, (size_t)ep->R * sizeof *ep->round_recv);
    for (int s = 0; s < ep->S; s++) {
        const size_t at = (size_t)me * ep->S + s;
        const int64_t j0 = ep->plan_j0[at];
        if (j0 < 0 || j0 > j)
            continue;
        if (ep->plan_n[at] <= ep->cap) {
            if (j0 == j)
                for (int q = 0; q < ep->R; q++)
                    ep->round_recv[q] += *count_at(ep, q, me, s);
            continue;
        }
        /* split: this round takes the slot's rows [lo, hi) in sender order */
        const int64_t lo = (j - j0) * ep->cap, hi = lo + ep->cap;
        int64_t off = 0;
        for (int q = 0; q < ep->R; q++) {
            const int64_t c = *count_at(ep, q, me, s), a = off > lo ? off : lo, b = off + c < hi ? off + c : hi;
            if (b > a)
                ep->round_recv[q] += b - a;
            off += c;
        }
    }
    for (int q = 0; q < ep->R; q++)
        rows += ep->round_recv[q];
    return rows;
}

/* Runs every held expert over the rows received for it; results land in
 * out_rows at the rows' receive positions. */
static fg_err compute(fg_moe_ep_t *ep, int il, int rows, fg_diag *diag)
{
    const int slots = fg_ep_shard_rank_slots(ep->shard, ep->rank), d = ep->d;
    const int *held = fg_ep_shard_rank_experts(ep->shard, ep->rank);
    fg_err err = FG_OK;
    memset(ep->grp_count, 0, (size_t)(slots + 1) * sizeof *ep->grp_count);
    for (int j = 0; j < rows; j++) {
        int32_t id;
        memcpy(&id, ep->recv_rows + (size_t)j * ep->rec, sizeof id);
        const int s = id >= 0 && id < ep->m->n_expert ? fg_ep_shard_slot(ep->shard, ep->rank, id) : -1;
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
        const int s = id >= 0 && id < ep->m->n_expert ? fg_ep_shard_slot(ep->shard, ep->rank, id) : -1;
        if (s >= 0)
            ep->grp_rows[ep->grp_count[s]++] = j;
    }
    /* grp_count[s] now holds the end of slot s's rows; its start is grp_count[s - 1]. */
    ep->grp_seg[0] = 0;
    for (int s = 0; s < slots; s++)
        ep->grp_seg[s + 1] = ep->grp_count[s];
    if (!ep->compute) { /* detached (its backend closed): the peers get zeros, as for a row of no slot */
        memset(ep->out_rows, 0, (size_t)rows * d * sizeof(float));
        return err != FG_OK ? err
                            : fg_diag_set(diag, FG_ERR_STATE, "rank %d: no expert compute (its backend was closed)",
                                          ep->rank);
    }
    const fg_moe_rows r = {.n_rows = rows, .x = ep->recv_rows + 1, .x_stride = ep->rec, .n_slots = slots,
                           .expert = held, .seg = ep->grp_seg, .row = ep->grp_rows, .y = ep->out_rows};
    fg_diag later; /* the first error (a row for an expert not held) keeps the caller's message */
    const fg_err ce = ep->compute->run(ep->compute, il, &r, err == FG_OK ? diag : &later);
    return err != FG_OK ? err : ce;
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

fg_err fg_moe_ep_experts(fg_moe_ep_t *ep, int il, int n, const int *ids, const float *w,
                         const float *xn, float *x, fg_diag *diag)
{
    /* Every step below runs whatever failed before it, so that the peers, which
     * cannot know, complete their exchanges too; the first error is the one
     * reported (later ones go to a scratch message). Every rank computes the
     * rounds from the same gathered headers, so all run the same exchanges. */
    const int R = ep->R;
    fg_err err = FG_OK;
    fg_diag later;
    if (n < 0 || n > ep->T) {
        keep(&err, fg_diag_set(msg(err, diag, &later), FG_ERR_INVALID_ARG,
                               "expert parallelism: %d tokens, at most %d per rank", n, ep->T));
        n = 0; /* still serve the peers */
    }
    route(ep, n, ids);
    fg_err he = fg_ep_alltoallv(ep->t, ep->hdr_send, ep->hdr_bytes, ep->hdr, ep->hdr_bytes, msg(err, diag, &later));
    keep(&err, he);
    if (he == FG_OK)
        he = check_headers(ep, msg(err, diag, &later));
    keep(&err, he);
    if (he != FG_OK) { /* counts unknown: nobody sends or receives anything, in one round */
        n = 0;
        memset(ep->hdr, 0, (size_t)R * ep->hdr_len * sizeof *ep->hdr);
    }
    const int64_t rounds = plan(ep);
    if (rounds > ep->max_rounds || !order_slots(ep, n, ids, rounds)) {
        /* Cannot happen with checked headers; if it did, the peers would disagree on nothing but our rows. */
        keep(&err, fg_diag_set(msg(err, diag, &later), FG_ERR_INVALID_ARG,
                               "rank %d: %lld exchange rounds, at most %lld", ep->rank, (long long)rounds,
                               (long long)ep->max_rounds));
        n = 0;
        memset(ep->round_start, 0, ((size_t)(rounds < ep->max_rounds ? rounds : ep->max_rounds) + 1) *
                                       sizeof *ep->round_start);
    }
    int64_t base = 0;
    for (int64_t j = 0; j < rounds; j++) {
        const int64_t sent = j < ep->max_rounds ? pack_round(ep, j, base, ids, xn) : 0;
        if (j >= ep->max_rounds)
            memset(ep->round_send, 0, (size_t)R * sizeof *ep->round_send);
        int64_t rows = recv_round(ep, j);
        if (rows > ep->cap) { /* cannot happen with checked headers: receive nothing rather than overrun */
            keep(&err, fg_diag_set(msg(err, diag, &later), FG_ERR_INVALID_ARG,
                                   "rank %d would receive %lld rows in one round, room for %lld", ep->rank,
                                   (long long)rows, (long long)ep->cap));
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
        keep(&err, compute(ep, il, (int)rows, msg(err, diag, &later)));
        /* Results go back the way the rows came: the counts swap roles. */
        for (int p = 0; p < R; p++) {
            ep->recv_bytes[p] = (size_t)ep->round_recv[p] * ep->d * sizeof(float);
            ep->send_bytes[p] = (size_t)ep->round_send[p] * ep->d * sizeof(float);
        }
        keep(&err, fg_ep_alltoallv(ep->t, ep->out_rows, ep->recv_bytes, ep->back_rows + (size_t)base * ep->d,
                                   ep->send_bytes, msg(err, diag, &later)));
        base += sent;
    }
    ep->stats.exchanges++;
    ep->stats.rounds += (uint64_t)rounds;
    if (err == FG_OK)
        combine(ep, n, ids, w, x);
    return err;
}

fg_err fg_moe_ep_idle(fg_moe_ep_t *ep, fg_diag *diag)
{
    fg_err err = FG_OK;
    for (int il = 0; il < ep->m->n_layer_run; il++) {
        fg_arch_experts ly;
        if (!ep->m->arch->layer_experts(ep->m, il, &ly))
            continue;
        fg_err e = fg_moe_ep_experts(ep, il, 0, NULL, NULL, NULL, NULL, diag);
        if (e != FG_OK && err == FG_OK)
            err = e;
    }
    return err;
}
