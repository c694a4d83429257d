/* ep_transport.c: the transport-independent half of engine/ep/ep_transport.h —
 * dispatch to the implementation, and the count exchange built on the
 * all-to-all-v. The NCCL entry points live here as "unsupported" when the
 * build has no NCCL (ep_transport_nccl.c is compiled only with it).
 */
#include "engine/ep/ep_transport_impl.h"

#include <stdlib.h>

fg_err fg_ep_transport_init(fg_ep_transport_t *t, const fg_ep_transport_ops *ops, int rank, int size, fg_diag *diag)
{
    t->ops = ops;
    t->rank = rank;
    t->size = size;
    t->count_bytes = malloc(2 * (size_t)size * sizeof *t->count_bytes);
    t->gather_send = malloc((size_t)size * sizeof *t->gather_send);
    if (!t->count_bytes || !t->gather_send)
        return fg_diag_set(diag, FG_ERR_NOMEM, "ep transport: out of memory");
    for (int p = 0; p < 2 * size; p++)
        t->count_bytes[p] = sizeof(int64_t);
    return FG_OK;
}

void fg_ep_transport_fini(fg_ep_transport_t *t)
{
    free(t->count_bytes);
    free(t->gather_send);
}

int fg_ep_rank(const fg_ep_transport_t *t) { return t->rank; }
int fg_ep_size(const fg_ep_transport_t *t) { return t->size; }
const char *fg_ep_transport_name(const fg_ep_transport_t *t) { return t->ops->name; }

fg_err fg_ep_alltoallv(fg_ep_transport_t *t, const void *send, const size_t *send_bytes, void *recv,
                       const size_t *recv_bytes, fg_diag *diag)
{
    return t->ops->alltoallv(t, send, send_bytes, recv, recv_bytes, diag);
}

fg_err fg_ep_alltoall_counts(fg_ep_transport_t *t, const int64_t *send, int64_t *recv, fg_diag *diag)
{
    /* One int64 to and from every peer: fixed sizes, so no count exchange of its own. */
    return t->ops->alltoallv(t, send, t->count_bytes, recv, t->count_bytes + t->size, diag);
}

fg_err fg_ep_allgather_i64(fg_ep_transport_t *t, int64_t value, int64_t *recv, fg_diag *diag)
{
    /* The same value to every peer is an all-to-all of counts: no second
     * operation for the transports to implement. */
    for (int p = 0; p < t->size; p++)
        t->gather_send[p] = value;
    return fg_ep_alltoall_counts(t, t->gather_send, recv, diag);
}

fg_err fg_ep_barrier(fg_ep_transport_t *t, fg_diag *diag) { return t->ops->barrier(t, diag); }

void fg_ep_transport_destroy(fg_ep_transport_t *t)
{
    if (t)
        t->ops->destroy(t);
}

#ifndef FG_HAVE_NCCL
int fg_ep_nccl_available(void) { return 0; }

fg_err fg_ep_nccl_unique_id(uint8_t id[FG_EP_NCCL_ID_BYTES], fg_diag *diag)
{
    (void)id;
    return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "this build has no NCCL transport (CUDA and NCCL were not found)");
}

fg_err fg_ep_nccl_transport_create(const fg_ep_nccl_options *o, fg_ep_transport_t **out, fg_diag *diag)
{
    (void)o;
    *out = NULL;
    return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "this build has no NCCL transport (CUDA and NCCL were not found)");
}
#endif
