/* ep_transport_inproc.c: the in-process transport — ranks are threads.
 *
 * An all-to-all-v is two barrier phases: each rank publishes where its send
 * buffer and counts are, waits until all have, copies its segment out of
 * every peer's buffer into its own receive buffer, and waits again so no
 * peer reuses its send buffer while someone still reads it. The copies run
 * on the receiving thread, so they proceed in parallel across ranks.
 */
#include "engine/ep/ep_transport_impl.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    const uint8_t *send;
    const size_t *send_bytes; /* [n] */
} slot;

struct fg_ep_inproc_group {
    int n;
    pthread_barrier_t barrier;
    slot *slots;      /* [n] written by rank r between the phases' barriers only */
    bool *taken;      /* [n] a transport exists for the rank */
    pthread_mutex_t mu; /* guards taken */
};

typedef struct inproc {
    fg_ep_transport_t base;
    fg_ep_inproc_group_t *g;
} inproc;

fg_err fg_ep_inproc_group_create(int n_ranks, fg_ep_inproc_group_t **out, fg_diag *diag)
{
    *out = NULL;
    if (n_ranks < 1 || n_ranks > FG_EP_MAX_RANKS)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "in-process group: %d ranks (1 to %d)", n_ranks,
                           FG_EP_MAX_RANKS);
    fg_ep_inproc_group_t *g = calloc(1, sizeof *g);
    if (!g)
        return fg_diag_set(diag, FG_ERR_NOMEM, "in-process group: out of memory");
    g->n = n_ranks;
    g->slots = calloc((size_t)n_ranks, sizeof *g->slots);
    g->taken = calloc((size_t)n_ranks, sizeof *g->taken);
    if (!g->slots || !g->taken || pthread_barrier_init(&g->barrier, NULL, (unsigned)n_ranks) != 0) {
        free(g->slots);
        free(g->taken);
        free(g);
        return fg_diag_set(diag, FG_ERR_NOMEM, "in-process group: out of memory");
    }
    pthread_mutex_init(&g->mu, NULL);
    *out = g;
    return FG_OK;
}

void fg_ep_inproc_group_destroy(fg_ep_inproc_group_t *g)
{
    if (!g)
        return;
    pthread_barrier_destroy(&g->barrier);
    pthread_mutex_destroy(&g->mu);
    free(g->slots);
    free(g->taken);
    free(g);
}

static fg_err inproc_alltoallv(fg_ep_transport_t *t, const void *send, const size_t *send_bytes, void *recv,
                               const size_t *recv_bytes, fg_diag *diag)
{
    fg_ep_inproc_group_t *g = ((inproc *)t)->g;
    const int r = t->rank, n = g->n;
    g->slots[r] = (slot){.send = send, .send_bytes = send_bytes};
    pthread_barrier_wait(&g->barrier);
    fg_err err = FG_OK;
    size_t at = 0;
    for (int p = 0; p < n; p++) {
        const slot *s = &g->slots[p];
        size_t off = 0;
        for (int q = 0; q < r; q++)
            off += s->send_bytes[q];
        const size_t len = s->send_bytes[r];
        if (len != recv_bytes[p]) {
            /* Keep going to the second barrier: the peers must not wait for us. */
            if (err == FG_OK)
                err = fg_diag_set(diag, FG_ERR_INVALID_ARG,
                                  "all-to-all: rank %d sends %zu bytes to rank %d, which expects %zu", p, len, r,
                                  recv_bytes[p]);
        } else if (len) {
            memcpy((uint8_t *)recv + at, s->send + off, len);
        }
        at += recv_bytes[p];
    }
    pthread_barrier_wait(&g->barrier);
    return err;
}

static fg_err inproc_barrier(fg_ep_transport_t *t, fg_diag *diag)
{
    (void)diag;
    pthread_barrier_wait(&((inproc *)t)->g->barrier);
    return FG_OK;
}

static void inproc_destroy(fg_ep_transport_t *t)
{
    inproc *ip = (inproc *)t;
    pthread_mutex_lock(&ip->g->mu);
    ip->g->taken[t->rank] = false;
    pthread_mutex_unlock(&ip->g->mu);
    fg_ep_transport_fini(t);
    free(ip);
}

static const fg_ep_transport_ops inproc_ops = {
    .name = "inproc",
    .alltoallv = inproc_alltoallv,
    .barrier = inproc_barrier,
    .destroy = inproc_destroy,
};

fg_err fg_ep_inproc_transport_create(fg_ep_inproc_group_t *g, int rank, fg_ep_transport_t **out, fg_diag *diag)
{
    *out = NULL;
    if (rank < 0 || rank >= g->n)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "in-process transport: rank %d outside [0, %d)", rank, g->n);
    inproc *ip = calloc(1, sizeof *ip);
    if (!ip)
        return fg_diag_set(diag, FG_ERR_NOMEM, "in-process transport: out of memory");
    fg_err err = fg_ep_transport_init(&ip->base, &inproc_ops, rank, g->n, diag);
    if (err) {
        free(ip);
        return err;
    }
    ip->g = g;
    pthread_mutex_lock(&g->mu);
    const bool dup = g->taken[rank];
    g->taken[rank] = true;
    pthread_mutex_unlock(&g->mu);
    if (dup) {
        fg_ep_transport_fini(&ip->base);
        free(ip);
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "in-process transport: rank %d already has a transport", rank);
    }
    *out = &ip->base;
    return FG_OK;
}
