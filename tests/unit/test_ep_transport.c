/* The in-process transport: 4 ranks as threads exchange segments of
 * different sizes (zero included, and to themselves) through the all-to-all-v
 * and the count all-to-all, over several rounds with the buffers reused;
 * every byte arrives where the contract says. A receiver that expects the
 * wrong size gets FG_ERR_INVALID_ARG and its peers still complete (no hang);
 * bad arguments are refused. */
#include <pthread.h>
#include <string.h>

#include "engine/ep/ep_transport.h"
#include "tests/unit/fg_test.h"

#define R 4
#define ROUNDS 20

/* Bytes rank `from` sends rank `to` in round k (0 for some pairs). */
static size_t amount(int from, int to, int k) { return (size_t)((from * 7 + to * 3 + k) % 5) * 3; }
static uint8_t byte_of(int from, int to, int k, size_t i) { return (uint8_t)(from * 61 + to * 17 + k * 5 + (int)i); }

typedef struct rank {
    fg_ep_transport_t *t;
    int errors;
    fg_err mismatch_err;
} rank;

static void *rank_main(void *arg)
{
    rank *me = arg;
    const int r = fg_ep_rank(me->t);
    uint8_t send[R * 16], recv[R * 16];
    size_t sb[R], rb[R];
    for (int k = 0; k < ROUNDS; k++) {
        /* Counts first, as the MoE exchange does. */
        int64_t sc[R], rc[R];
        for (int p = 0; p < R; p++)
            sc[p] = (int64_t)amount(r, p, k);
        fg_diag d;
        if (fg_ep_alltoall_counts(me->t, sc, rc, &d) != FG_OK)
            me->errors++;
        size_t at = 0;
        for (int p = 0; p < R; p++) {
            sb[p] = amount(r, p, k);
            rb[p] = (size_t)rc[p];
            if (rb[p] != amount(p, r, k))
                me->errors++;
            for (size_t i = 0; i < sb[p]; i++)
                send[at + i] = byte_of(r, p, k, i);
            at += sb[p];
        }
        memset(recv, 0, sizeof recv);
        if (fg_ep_alltoallv(me->t, send, sb, recv, rb, &d) != FG_OK)
            me->errors++;
        at = 0;
        for (int p = 0; p < R; p++) {
            for (size_t i = 0; i < rb[p]; i++)
                if (recv[at + i] != byte_of(p, r, k, i))
                    me->errors++;
            at += rb[p];
        }
    }
    /* Rank 2 expects one byte too many from rank 1. */
    for (int p = 0; p < R; p++) {
        sb[p] = 2;
        rb[p] = r == 2 && p == 1 ? 3 : 2;
    }
    fg_diag d;
    me->mismatch_err = fg_ep_alltoallv(me->t, send, sb, recv, rb, &d);
    if (fg_ep_barrier(me->t, &d) != FG_OK)
        me->errors++;
    return NULL;
}

int main(void)
{
    fg_ep_inproc_group_t *g;
    fg_diag d = {{0}};
    CHECK(fg_ep_inproc_group_create(R, &g, &d) == FG_OK);
    rank ranks[R] = {{0}};
    for (int r = 0; r < R; r++) {
        CHECK(fg_ep_inproc_transport_create(g, r, &ranks[r].t, &d) == FG_OK);
        CHECK(fg_ep_rank(ranks[r].t) == r && fg_ep_size(ranks[r].t) == R);
        CHECK(strcmp(fg_ep_transport_name(ranks[r].t), "inproc") == 0);
    }
    fg_ep_transport_t *dup;
    CHECK(fg_ep_inproc_transport_create(g, 1, &dup, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "already"));
    CHECK(fg_ep_inproc_transport_create(g, R, &dup, &d) == FG_ERR_INVALID_ARG);

    pthread_t th[R];
    for (int r = 0; r < R; r++)
        CHECK(pthread_create(&th[r], NULL, rank_main, &ranks[r]) == 0);
    for (int r = 0; r < R; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < R; r++) {
        CHECK_MSG(ranks[r].errors == 0, "rank %d: %d errors", r, ranks[r].errors);
        CHECK(ranks[r].mismatch_err == (r == 2 ? FG_ERR_INVALID_ARG : FG_OK));
        fg_ep_transport_destroy(ranks[r].t);
    }
    fg_ep_inproc_group_destroy(g);

    fg_ep_inproc_group_t *bad;
    CHECK(fg_ep_inproc_group_create(0, &bad, &d) == FG_ERR_INVALID_ARG);
    CHECK(fg_ep_inproc_group_create(FG_EP_MAX_RANKS + 1, &bad, &d) == FG_ERR_INVALID_ARG);
    /* Without NCCL in the build the NCCL transport says so; with it, bad options are refused before any GPU call. */
    fg_ep_transport_t *t;
    fg_ep_nccl_options no = {.n_ranks = 2, .rank = 5, .device = 0, .id = NULL, .max_bytes = 0};
    fg_err e = fg_ep_nccl_transport_create(&no, &t, &d);
    CHECK(e == (fg_ep_nccl_available() ? FG_ERR_INVALID_ARG : FG_ERR_UNSUPPORTED));
    return TEST_DONE("test_ep_transport");
}
