/* moe_compute_cuda.c: an expert-parallel rank's routed experts on its GPU
 * (engine/backend/moe_compute.h). Per exchange round:
 *   1. on the host, the grouped rows are laid out by ascending expert id —
 *      the order the grouped kernels want (fg_cuda_moe_group's: a segment
 *      per expert id, experts without rows empty);
 *   2. the received rows (with the id float before each, skipped through
 *      the stride), the segments and each sorted slot's row go up;
 *   3. gate and up products over the slots' rows, silu_mul, the down
 *      product, all grouped (one launch each for every held expert);
 *   4. the results come down in sorted order and land at their receive rows.
 * One stream (the backend's) and one wait per round. Simple staging: the
 * exchange itself runs on host buffers (engine/ep/moe_ep.c); docs/gpu.md says
 * what keeping the rows on the device would change.
 *
 * Device memory, sized at create for the exchange's receive capacity cap
 * (rows of 1 + d floats): the rows, gate/up [cap][n_ff_exp], results
 * [cap][d], Q8_0 activation scratch; pinned host: results [cap][d], ints
 * [n_expert + 1 + cap].
 */
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cuda/backend_cuda_internal.h"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/moe_experts.cuh"
#include "kernels/cuda/vecops.cuh"

typedef struct cuda_compute {
    fg_moe_compute base;    /* first */
    cuda_backend *c;
    int d, Fe, E;
    int64_t cap;            /* rows per round */
    size_t x_floats;        /* floats of d_x: cap rows of 1 + d */
    float *d_x;             /* [cap][1 + d] the received rows */
    int *d_ints;            /* [E + 1] segments per expert id, then [cap] row of each sorted slot */
    float *d_gate, *d_up;   /* [cap][Fe] */
    float *d_out;           /* [cap][d] results in sorted order */
    void *d_q8;
    int *h_ints;            /* pinned, as d_ints */
    float *h_out;           /* pinned [cap][d] */
    int *slot_of;           /* [E] this round's slot of each expert id, -1: none */
} cuda_compute;

/* Steps 1 to 4 of the header; on error the results are not written. */
static fg_err run_round(cuda_compute *k, int il, const fg_moe_rows *r, int *n_sorted, fg_diag *diag)
{
    cuda_backend *c = k->c;
    const int d = k->d, E = k->E, Fe = k->Fe;
    *n_sorted = 0;
    if (il < 0 || il >= c->m->hp.n_layer || !c->layers[il].is_moe)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "cuda experts: not a MoE layer of this backend's model");
    const fg_dlayer *dl = &c->layers[il];
    if (r->n_rows < 0 || r->n_rows > k->cap || r->x_stride < (size_t)d ||
        (r->n_rows > 0 && (size_t)(r->n_rows - 1) * r->x_stride + (size_t)d > k->x_floats))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "cuda experts: %d rows %zu floats apart, room for %lld of %d",
                           r->n_rows, r->x_stride, (long long)k->cap, d + 1);

    /* 1: segments by expert id; slot_row[p]: the received row of sorted slot p */
    int *seg = k->h_ints, *slot_row = k->h_ints + E + 1;
    const int p = fg_moe_rows_by_expert(r, E, (int)k->cap, k->slot_of, seg, slot_row, diag);
    if (p < 0)
        return FG_ERR_INVALID_ARG;
    if (p == 0)
        return FG_OK;

    /* 2: up */
    cudaStream_t st = c->stream;
    fg_err e;
    const size_t x_bytes = ((size_t)(r->n_rows - 1) * r->x_stride + (size_t)d) * sizeof(float);
    if ((e = fg_cuda_rt(cudaMemcpyAsync(k->d_x, r->x, x_bytes, cudaMemcpyHostToDevice, st), "upload expert rows",
                        diag)) ||
        (e = fg_cuda_rt(cudaMemcpyAsync(k->d_ints, k->h_ints, (size_t)(E + 1 + p) * sizeof(int),
                                        cudaMemcpyHostToDevice, st), "upload expert segments", diag)))
        return e;

    /* 3: the grouped SwiGLU */
    const int *d_seg = k->d_ints, *d_slot_row = k->d_ints + E + 1;
    const fg_dweight *w_in[2] = {&dl->gate_exps, &dl->up_exps};
    float *h[2] = {k->d_gate, k->d_up};
    for (int i = 0; i < 2; i++) {
        fg_cuda_moe_experts_params ep = {.wtype = w_in[i]->type, .w = w_in[i]->d, .w_mat_bytes = w_in[i]->mat_bytes,
                                         .n_in = d, .n_out = Fe, .n_expert = E, .seg = d_seg, .n_slots = p,
                                         .slot_row = d_slot_row, .x = k->d_x, .x_stride = (int64_t)r->x_stride,
                                         .n_rows = r->n_rows, .y = h[i], .y_stride = Fe, .q8_scratch = k->d_q8};
        TRY(fg_cuda_moe_experts(&ep, &c->launch), i ? "ep up_exps" : "ep gate_exps");
    }
    fg_cuda_silu_mul_params sm = {.g = k->d_gate, .u = k->d_up, .stride = Fe, .n_rows = p, .n = Fe};
    TRY(fg_cuda_silu_mul(&sm, &c->launch), "ep experts silu_mul");
    fg_cuda_moe_experts_params dp = {.wtype = dl->down_exps.type, .w = dl->down_exps.d,
                                     .w_mat_bytes = dl->down_exps.mat_bytes, .n_in = Fe, .n_out = d, .n_expert = E,
                                     .seg = d_seg, .n_slots = p, .slot_row = NULL, .x = k->d_gate, .x_stride = Fe,
                                     .n_rows = p, .y = k->d_out, .y_stride = d, .q8_scratch = k->d_q8};
    TRY(fg_cuda_moe_experts(&dp, &c->launch), "ep down_exps");

    /* 4: down, then to the receive rows */
    if ((e = fg_cuda_rt(cudaMemcpyAsync(k->h_out, k->d_out, (size_t)p * d * sizeof(float), cudaMemcpyDeviceToHost,
                                        st), "download expert results", diag)) ||
        (e = fg_cuda_rt(cudaStreamSynchronize(st), "expert products", diag)))
        return e;
    for (int j = 0; j < p; j++)
        memcpy(r->y + (size_t)slot_row[j] * d, k->h_out + (size_t)j * d, (size_t)d * sizeof(float));
    *n_sorted = p;
    return FG_OK;
}

static fg_err cuda_run(fg_moe_compute *base, int il, const fg_moe_rows *r, fg_diag *diag)
{
    cuda_compute *k = (cuda_compute *)base;
    int done = 0;
    const fg_err e = run_round(k, il, r, &done, diag);
    if (e != FG_OK) {
        /* The peers get zeros for their rows rather than whatever the buffer held; the error is this rank's. */
        cudaGetLastError();
        for (int s = 0; s < r->n_slots; s++)
            for (int q = r->seg[s]; q < r->seg[s + 1]; q++)
                if (r->row[q] >= 0 && r->row[q] < r->n_rows)
                    memset(r->y + (size_t)r->row[q] * k->d, 0, (size_t)k->d * sizeof(float));
    }
    return e;
}

void fg_cuda_moe_compute_destroy(fg_moe_compute *base)
{
    if (!base)
        return;
    cuda_compute *k = (cuda_compute *)base;
    cudaFree(k->d_x);
    cudaFree(k->d_ints);
    cudaFree(k->d_gate);
    cudaFree(k->d_up);
    cudaFree(k->d_out);
    cudaFree(k->d_q8);
    if (k->h_ints)
        cudaFreeHost(k->h_ints);
    if (k->h_out)
        cudaFreeHost(k->h_out);
    free(k->slot_of);
    free(k);
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

fg_err fg_cuda_moe_compute_create(cuda_backend *c, const fg_moe_ep_t *ep, fg_moe_compute **out, fg_diag *diag)
{
    *out = NULL;
    const fg_hparams *hp = &c->m->hp;
    cuda_compute *k = calloc(1, sizeof *k);
    if (!k)
        return fg_diag_set(diag, FG_ERR_NOMEM, "backend cuda: out of memory");
    k->base.run = cuda_run;
    k->c = c;
    k->d = hp->n_embd;
    k->Fe = hp->n_ff_exp > 0 ? hp->n_ff_exp : 1;
    k->E = hp->n_expert > 0 ? hp->n_expert : 1;
    k->cap = fg_moe_ep_capacity(ep);
    k->x_floats = (size_t)k->cap * (1 + (size_t)k->d);
    const size_t cap = (size_t)k->cap, fl = sizeof(float);
    size_t q8 = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const fg_dlayer *dl = &c->layers[il];
        if (!dl->is_moe)
            continue;
        q8 = max_sz(q8, fg_cuda_matmul_scratch_bytes(dl->gate_exps.type, k->d, (int)cap, 1));
        q8 = max_sz(q8, fg_cuda_matmul_scratch_bytes(dl->up_exps.type, k->d, (int)cap, 1));
        q8 = max_sz(q8, fg_cuda_matmul_scratch_bytes(dl->down_exps.type, k->Fe, (int)cap, 1));
    }
    k->slot_of = malloc((size_t)k->E * sizeof *k->slot_of);
    const size_t ints = ((size_t)k->E + 1 + cap) * sizeof(int);
    if (!k->slot_of || k->cap > (1 << 30) ||
        cudaMalloc((void **)&k->d_x, k->x_floats * fl) != cudaSuccess ||
        cudaMalloc((void **)&k->d_ints, ints) != cudaSuccess ||
        cudaMalloc((void **)&k->d_gate, cap * (size_t)k->Fe * fl) != cudaSuccess ||
        cudaMalloc((void **)&k->d_up, cap * (size_t)k->Fe * fl) != cudaSuccess ||
        cudaMalloc((void **)&k->d_out, cap * (size_t)k->d * fl) != cudaSuccess ||
        cudaMalloc(&k->d_q8, q8 ? q8 : 256) != cudaSuccess ||
        cudaMallocHost((void **)&k->h_ints, ints) != cudaSuccess ||
        cudaMallocHost((void **)&k->h_out, cap * (size_t)k->d * fl) != cudaSuccess) {
        cudaGetLastError();
        fg_cuda_moe_compute_destroy(&k->base);
        return fg_diag_set(diag, FG_ERR_NOMEM,
                           "backend cuda: cannot allocate the expert exchange buffers for %lld rows; lower "
                           "topology.recv_capacity_rows or model.max_batch_tokens",
                           (long long)cap);
    }
    *out = &k->base;
    return FG_OK;
}
