/* ep_transport.h: the collective operations expert parallelism needs between
 * ranks — an all-to-all-v of bytes (with a count exchange and an all-gather
 * built on it) and a barrier — behind one interface, with
 * two implementations:
 *
 *  - in-process: ranks are threads of this process; a group holds shared
 *    slots and a barrier, and each rank copies its share straight out of its
 *    peers' send buffers. Always built; what CI runs.
 *  - NCCL: one rank per GPU, ncclSend/ncclRecv pairs inside one group call.
 *    Built only when CUDA and NCCL are found (FG_HAVE_NCCL); elsewhere its
 *    constructor answers FG_ERR_UNSUPPORTED. Ranks find each other through an
 *    ncclUniqueId exchanged with engine/ep/ep_bootstrap.h.
 *
 * Collective contract: every rank of a group calls the same collectives in
 * the same order (a rank with nothing to send still calls, with zero
 * counts). A rank that stops calling leaves its peers waiting, so callers
 * keep their error paths collective (see engine/ep/moe_ep.h).
 *
 * Owns: a transport owns its implementation's state (staging buffers,
 * communicator); an in-process group owns the shared slots and barrier and
 * must outlive its transports.
 * Thread safety: one transport per rank, used by that rank's thread only.
 */
#ifndef FG_EP_TRANSPORT_H
#define FG_EP_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

typedef struct fg_ep_transport fg_ep_transport_t;
typedef struct fg_ep_inproc_group fg_ep_inproc_group_t;

/* Rank of this end, in [0, size). */
int fg_ep_rank(const fg_ep_transport_t *t);
/* Ranks in the group. */
int fg_ep_size(const fg_ep_transport_t *t);
/* "inproc" or "nccl". */
const char *fg_ep_transport_name(const fg_ep_transport_t *t);

/* All-to-all-v of bytes. send holds size segments back to back in rank
 * order, segment p of send_bytes[p] bytes going to rank p; recv receives
 * size segments in rank order, segment p of recv_bytes[p] bytes from rank p
 * (the receiver knows them: exchange counts first with fg_ep_alltoall_counts).
 * Segments to and from this rank itself are copied too.
 * Errors: FG_ERR_INVALID_ARG (recv_bytes[p] differs from what rank p sends;
 * every rank still completes the call), FG_ERR_IO (the NCCL transport: a
 * CUDA or NCCL call failed). */
fg_err fg_ep_alltoallv(fg_ep_transport_t *t, const void *send, const size_t *send_bytes, void *recv,
                       const size_t *recv_bytes, fg_diag *diag);

/* All-to-all of one count per peer: recv[p] = what rank p put in send[this rank].
 * send and recv are [size]. Errors: as fg_ep_alltoallv. */
fg_err fg_ep_alltoall_counts(fg_ep_transport_t *t, const int64_t *send, int64_t *recv, fg_diag *diag);

/* All-gather of one value per rank: recv[p] = the value rank p passed.
 * recv is [size]. Built on the count all-to-all (8 bytes to every peer), so
 * both transports have it; what the multi-node step agreement uses
 * (engine/ep/ep_ranks.h). Errors: as fg_ep_alltoallv. */
fg_err fg_ep_allgather_i64(fg_ep_transport_t *t, int64_t value, int64_t *recv, fg_diag *diag);

/* Returns when every rank of the group has entered it. Errors: FG_ERR_IO (NCCL). */
fg_err fg_ep_barrier(fg_ep_transport_t *t, fg_diag *diag);

void fg_ep_transport_destroy(fg_ep_transport_t *t);

/* ---- in-process transport ---- */

/* A group of n_ranks in-process ranks. Errors: FG_ERR_INVALID_ARG
 * (n_ranks < 1 or > FG_EP_MAX_RANKS), FG_ERR_NOMEM. */
#define FG_EP_MAX_RANKS 1024
fg_err fg_ep_inproc_group_create(int n_ranks, fg_ep_inproc_group_t **out, fg_diag *diag);
/* Frees the group; every transport made from it must be destroyed first. */
void fg_ep_inproc_group_destroy(fg_ep_inproc_group_t *g);
/* The end of rank `rank` (each rank once). Errors: FG_ERR_INVALID_ARG (rank
 * out of range or already taken), FG_ERR_NOMEM. */
fg_err fg_ep_inproc_transport_create(fg_ep_inproc_group_t *g, int rank, fg_ep_transport_t **out, fg_diag *diag);

/* ---- NCCL transport ---- */

#define FG_EP_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */

/* True when this build has the NCCL transport. */
int fg_ep_nccl_available(void);

/* Fills id with a fresh ncclUniqueId (rank 0 does this, then publishes it).
 * Errors: FG_ERR_UNSUPPORTED (no NCCL in this build), FG_ERR_IO. */
fg_err fg_ep_nccl_unique_id(uint8_t id[FG_EP_NCCL_ID_BYTES], fg_diag *diag);

typedef struct fg_ep_nccl_options {
    int n_ranks;          /* all ranks of the job, over every node */
    int rank;             /* this end's global rank */
    int device;           /* CUDA device index on this node */
    const uint8_t *id;    /* [FG_EP_NCCL_ID_BYTES] the job's ncclUniqueId */
    size_t max_bytes;     /* largest send (and receive) total of one call; staging buffers of this size */
} fg_ep_nccl_options;

/* Joins the NCCL communicator (blocks until every rank has joined).
 * Errors: FG_ERR_UNSUPPORTED (no NCCL in this build), FG_ERR_INVALID_ARG,
 * FG_ERR_IO (CUDA or NCCL failure, message names the call), FG_ERR_NOMEM. */
fg_err fg_ep_nccl_transport_create(const fg_ep_nccl_options *o, fg_ep_transport_t **out, fg_diag *diag);

#endif
