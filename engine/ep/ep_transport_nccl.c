/* ep_transport_nccl.c: the NCCL transport — one rank per GPU (built only
 * when CUDA and NCCL are found; see engine/CMakeLists.txt).
 *
 * The engine's exchange buffers are host memory today (the cpu backend), so
 * an all-to-all-v stages through device buffers: copy the send segments up,
 * one ncclGroupStart/End around an ncclSend and ncclRecv per peer with bytes
 * to move (NCCL pairs them; a zero-byte pair is skipped on both sides since
 * both know the counts), copy the receive segments down, wait on the stream.
 * A device-resident backend would pass its own device buffers and skip the
 * copies. The barrier is an all-reduce of one int, which NCCL orders on the
 * same stream.
 *
 * Never run in CI (no GPU there); the code is compiled there and its
 * bootstrap (engine/ep/ep_bootstrap.h) is tested against a real Redis.
 */
#include "engine/ep/ep_transport_impl.h"

#include <stdlib.h>
#include <string.h>

/* nccl.h declares some functions with "()" (not prototypes in C). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime.h>
#include <nccl.h>
#pragma GCC diagnostic pop

_Static_assert(sizeof(ncclUniqueId) == FG_EP_NCCL_ID_BYTES, "ncclUniqueId size");

typedef struct nccl {
    fg_ep_transport_t base;
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    size_t cap;          /* bytes of each staging buffer */
    uint8_t *d_send;     /* [cap] device */
    uint8_t *d_recv;     /* [cap] device */
    int *d_one;          /* [1] device, for the barrier */
} nccl;

int fg_ep_nccl_available(void) { return 1; }

static fg_err cuda_fail(fg_diag *diag, const char *what, cudaError_t e)
{
    return fg_diag_set(diag, FG_ERR_IO, "%s: %s", what, cudaGetErrorString(e));
}

static fg_err nccl_fail(fg_diag *diag, const char *what, ncclResult_t r)
{
    return fg_diag_set(diag, FG_ERR_IO, "%s: %s", what, ncclGetErrorString(r));
}

fg_err fg_ep_nccl_unique_id(uint8_t id[FG_EP_NCCL_ID_BYTES], fg_diag *diag)
{
    ncclUniqueId uid;
    ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess)
        return nccl_fail(diag, "ncclGetUniqueId", r);
    memcpy(id, uid.internal, FG_EP_NCCL_ID_BYTES);
    return FG_OK;
}

static fg_err nccl_alltoallv(fg_ep_transport_t *t, const void *send, const size_t *send_bytes, void *recv,
                             const size_t *recv_bytes, fg_diag *diag)
{
    nccl *c = (nccl *)t;
    const int n = t->size;
    size_t send_total = 0, recv_total = 0;
    for (int p = 0; p < n; p++) {
        send_total += send_bytes[p];
        recv_total += recv_bytes[p];
    }
    if (send_total > c->cap || recv_total > c->cap)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "all-to-all of %zu/%zu bytes exceeds the %zu-byte staging buffers",
                           send_total, recv_total, c->cap);
    cudaError_t ce;
    if (send_total && (ce = cudaMemcpyAsync(c->d_send, send, send_total, cudaMemcpyHostToDevice, c->stream)))
        return cuda_fail(diag, "cudaMemcpyAsync (send)", ce);
    ncclResult_t r = ncclGroupStart();
    size_t so = 0, ro = 0;
    for (int p = 0; p < n && r == ncclSuccess; p++) {
        if (send_bytes[p])
            r = ncclSend(c->d_send + so, send_bytes[p], ncclUint8, p, c->comm, c->stream);
        if (r == ncclSuccess && recv_bytes[p])
            r = ncclRecv(c->d_recv + ro, recv_bytes[p], ncclUint8, p, c->comm, c->stream);
        so += send_bytes[p];
        ro += recv_bytes[p];
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r != ncclSuccess || r2 != ncclSuccess)
        return nccl_fail(diag, "ncclSend/ncclRecv group", r != ncclSuccess ? r : r2);
    if (recv_total && (ce = cudaMemcpyAsync(recv, c->d_recv, recv_total, cudaMemcpyDeviceToHost, c->stream)))
        return cuda_fail(diag, "cudaMemcpyAsync (recv)", ce);
    if ((ce = cudaStreamSynchronize(c->stream)))
        return cuda_fail(diag, "cudaStreamSynchronize", ce);
    return FG_OK;
}

static fg_err nccl_barrier(fg_ep_transport_t *t, fg_diag *diag)
{
    nccl *c = (nccl *)t;
    ncclResult_t r = ncclAllReduce(c->d_one, c->d_one, 1, ncclInt32, ncclSum, c->comm, c->stream);
    if (r != ncclSuccess)
        return nccl_fail(diag, "ncclAllReduce (barrier)", r);
    cudaError_t ce = cudaStreamSynchronize(c->stream);
    return ce ? cuda_fail(diag, "cudaStreamSynchronize", ce) : FG_OK;
}

static void nccl_destroy(fg_ep_transport_t *t)
{
    nccl *c = (nccl *)t;
    cudaSetDevice(c->device);
    if (c->comm)
        ncclCommDestroy(c->comm);
    cudaFree(c->d_send);
    cudaFree(c->d_recv);
    cudaFree(c->d_one);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    fg_ep_transport_fini(t);
    free(c);
}

static const fg_ep_transport_ops nccl_ops = {
    .name = "nccl",
    .alltoallv = nccl_alltoallv,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
};

fg_err fg_ep_nccl_transport_create(const fg_ep_nccl_options *o, fg_ep_transport_t **out, fg_diag *diag)
{
    *out = NULL;
    if (o->n_ranks < 1 || o->n_ranks > FG_EP_MAX_RANKS || o->rank < 0 || o->rank >= o->n_ranks || o->device < 0 ||
        !o->id || o->max_bytes == 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "nccl transport: rank %d of %d on device %d, %zu bytes", o->rank,
                           o->n_ranks, o->device, o->max_bytes);
    nccl *c = calloc(1, sizeof *c);
    if (!c)
        return fg_diag_set(diag, FG_ERR_NOMEM, "nccl transport: out of memory");
    fg_err err = fg_ep_transport_init(&c->base, &nccl_ops, o->rank, o->n_ranks, diag);
    if (err) {
        free(c);
        return err;
    }
    c->device = o->device;
    c->cap = o->max_bytes;
    cudaError_t ce;
    if ((ce = cudaSetDevice(o->device)) || (ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) ||
        (ce = cudaMalloc((void **)&c->d_send, c->cap)) || (ce = cudaMalloc((void **)&c->d_recv, c->cap)) ||
        (ce = cudaMalloc((void **)&c->d_one, sizeof(int))) || (ce = cudaMemset(c->d_one, 0, sizeof(int)))) {
        err = cuda_fail(diag, "nccl transport: CUDA set-up", ce);
        nccl_destroy(&c->base);
        return err;
    }
    ncclUniqueId uid;
    memcpy(uid.internal, o->id, FG_EP_NCCL_ID_BYTES);
    ncclResult_t r = ncclCommInitRank(&c->comm, o->n_ranks, uid, o->rank);
    if (r != ncclSuccess) {
        c->comm = NULL;
        err = nccl_fail(diag, "ncclCommInitRank", r);
        nccl_destroy(&c->base);
        return err;
    }
    *out = &c->base;
    return FG_OK;
}
