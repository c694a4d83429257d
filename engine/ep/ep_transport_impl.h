/* ep_transport_impl.h: what an expert-parallel transport implementation
 * provides behind engine/ep/ep_transport.h. Internal to engine/ (the in-process
 * and NCCL implementations and the dispatching functions in ep_transport.c).
 */
#ifndef FG_EP_TRANSPORT_IMPL_H
#define FG_EP_TRANSPORT_IMPL_H

#include "engine/ep/ep_transport.h"

typedef struct fg_ep_transport_ops {
    const char *name;
    fg_err (*alltoallv)(fg_ep_transport_t *t, const void *send, const size_t *send_bytes, void *recv,
                        const size_t *recv_bytes, fg_diag *diag);
    fg_err (*barrier)(fg_ep_transport_t *t, fg_diag *diag);
    void (*destroy)(fg_ep_transport_t *t);
} fg_ep_transport_ops;

/* Implementations embed this as their first member. */
struct fg_ep_transport {
    const fg_ep_transport_ops *ops;
    int rank, size;
    size_t *count_bytes;  /* [2 * size] fg_ep_alltoall_counts' segment sizes */
    int64_t *gather_send; /* [size] fg_ep_allgather_i64's send buffer: the value once per peer */
};

/* Sets the common part; allocates count_bytes and gather_send. Errors: FG_ERR_NOMEM. */
fg_err fg_ep_transport_init(fg_ep_transport_t *t, const fg_ep_transport_ops *ops, int rank, int size, fg_diag *diag);
/* Frees the common part (not t itself). */
void fg_ep_transport_fini(fg_ep_transport_t *t);

#endif
