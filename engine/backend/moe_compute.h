/* moe_compute.h: where an expert-parallel rank computes the routed experts
 * it holds — the step of engine/ep/moe_ep.h between receiving the dispatched
 * rows and sending the results back, behind one small interface so that a
 * rank computes on the CPU (this module's implementation, the reference) or
 * on its GPU (engine/backend/cuda/moe_compute_cuda.c, made by the CUDA backend).
 *
 * One call per exchange round: the rows this rank received, grouped by its
 * expert slots, in; one d-wide result per row out, at the row's receive
 * position. Each slot's expert computes
 *   y = down(act(gate(x), up(x)))
 * over its rows, act being the architecture's (engine/model/arch.h,
 * fg_arch_experts: deepseek2's silu(gate) * up, deepseek4's clamped one);
 * rows of no slot (a peer that places experts differently) are not in any
 * group and the caller fills their results.
 *
 * Thread safety: an implementation belongs to one rank's thread.
 */
#ifndef FG_MOE_COMPUTE_H
#define FG_MOE_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/model/arch.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"

/* One round's rows (host memory). Row j's d inputs are x + j * x_stride;
 * its result goes to y + j * d. The grouped positions seg[s] .. seg[s + 1]
 * hold slot s's rows, row[p] being the received row at grouped position p
 * (in receive order within a slot). */
typedef struct fg_moe_rows {
    int n_rows;            /* rows received, >= 0 */
    const float *x;        /* [n_rows][x_stride] floats, d used */
    size_t x_stride;       /* floats, >= d */
    int n_slots;           /* this rank's expert slots */
    const int *expert;     /* [n_slots] expert id of each slot */
    const int *seg;        /* [n_slots + 1] grouped positions of each slot; seg[n_slots] rows are grouped */
    const int *row;        /* [seg[n_slots]] received row of each grouped position */
    float *y;              /* [n_rows][d] results; rows outside every group are left alone */
} fg_moe_rows;

typedef struct fg_moe_compute fg_moe_compute;
struct fg_moe_compute {
    /* Runs each slot's expert of layer il (the il-th layer of the model's
     * forward pass, one with routed experts) over its rows. Returns FG_OK, or
     * an error with diag set (FG_ERR_IO: the device failed;
     * FG_ERR_INVALID_ARG: shapes beyond what it was made for, a layer
     * without routed experts). */
    fg_err (*run)(fg_moe_compute *c, int il, const fg_moe_rows *r, fg_diag *diag);
};

/* The grouped rows laid out by ascending expert id, the order of the grouped
 * GPU kernels (kernels/cuda/moe_experts.cuh: a segment per expert id):
 * seg[e] .. seg[e + 1] are expert e's sorted positions (empty for experts
 * without a slot) and slot_row[p] the received row at sorted position p.
 * slot_of: [n_expert] scratch. Returns the rows laid out (seg[n_expert]),
 * or -1 with diag set (FG_ERR_INVALID_ARG: a slot's expert out of range or
 * held twice, a row out of range, more than max_rows rows). */
int fg_moe_rows_by_expert(const fg_moe_rows *r, int n_expert, int max_rows, int *slot_of, int *seg, int *slot_row,
                          fg_diag *diag);

/* The CPU implementation: the matrix kernels of kernels/cpu over the model's
 * (memory-mapped) expert weights (the architecture's layer_experts), one
 * expert's rows at a time.
 * max_rows: rows one expert can get in a round (the buffers are sized for
 * it; more is FG_ERR_INVALID_ARG at run). pool may be NULL (one thread).
 * Errors: FG_ERR_INVALID_ARG (max_rows < 1, an architecture without
 * layer_experts), FG_ERR_NOMEM. */
fg_err fg_moe_compute_cpu_create(const fg_arch_model *m, int64_t max_rows, fg_pool_t *pool, fg_isa isa,
                                 fg_moe_compute **out, fg_diag *diag);
void fg_moe_compute_cpu_destroy(fg_moe_compute *c);

#endif
