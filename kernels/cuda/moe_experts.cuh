/* moe_experts.cuh: grouped expert products on the GPU (launcher only): one
 * launch computes, for every expert e and each of its routed slots s (sorted
 * by expert: kernels/cuda/moe_route.cuh fg_cuda_moe_group),
 *   y[s][o] = sum_i W_e[o][i] * x[row(s)][i]
 * with the per-type semantics of kernels/cuda/matmul.cuh; each expert's
 * matrix is read once per tile of its slots, and experts without slots cost
 * nothing but an early exit.
 *
 * fg_cuda_moe_combine then adds each token's k expert outputs, weighted, to
 * its residual row in slot order (deterministic: no atomics):
 *   x[t] += sum_j weight[t][j] * y[slot_pos[t * k + j]]
 * These are the local expert FFN steps; expert-parallel dispatch and combine
 * across ranks wrap around them (issue 8, part 3).
 */
#ifndef FG_CUDA_MOE_EXPERTS_CUH
#define FG_CUDA_MOE_EXPERTS_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_cuda_moe_experts_params {
    int wtype;             /* FG_WTYPE_* as fg_cuda_matmul */
    const void *w;         /* expert e: [n_out][row bytes] at w + e * w_mat_bytes (device) */
    size_t w_mat_bytes;
    int n_in, n_out;       /* n_in multiple of 32 for Q8_0 and MXFP4 */
    int n_expert;          /* 1 .. 65535 */
    const int *seg;        /* [n_expert + 1] sorted-slot ranges (device) */
    int n_slots;           /* sorted slots in all, >= 1 */
    const int *slot_row;   /* [n_slots] input row of each sorted slot, or NULL: row = sorted position (device) */
    const float *x;        /* [n_rows][x_stride] input rows (device) */
    int64_t x_stride;      /* floats, >= n_in */
    int n_rows;            /* input rows, >= 1 */
    float *y;              /* [n_slots][y_stride] output per sorted slot (device) */
    int64_t y_stride;      /* floats, >= n_out */
    void *q8_scratch;      /* Q8_0, MXFP4: fg_cuda_matmul_scratch_bytes(wtype, n_in, n_rows, 1) */
} fg_cuda_moe_experts_params;

fg_cuda_status fg_cuda_moe_experts_check(const fg_cuda_moe_experts_params *p, int sm);
fg_cuda_status fg_cuda_moe_experts(const fg_cuda_moe_experts_params *p, const fg_cuda_launch *l);

typedef struct fg_cuda_moe_combine_params {
    float *x;              /* [n_tok][d] residual rows, updated (device) */
    const float *y;        /* [n_tok * k][d] expert outputs in sorted order (device) */
    const float *weights;  /* [n_tok][k] (device) */
    const int *slot_pos;   /* [n_tok * k] sorted position of each slot (device) */
    int n_tok, n_used, d;
} fg_cuda_moe_combine_params;

fg_cuda_status fg_cuda_moe_combine_check(const fg_cuda_moe_combine_params *p, int sm);
fg_cuda_status fg_cuda_moe_combine(const fg_cuda_moe_combine_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
