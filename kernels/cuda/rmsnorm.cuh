/* rmsnorm.cuh: RMSNorm over rows on the GPU (launcher only).
 * y[r][:n] = x[r][:n] / sqrt(mean(x[r][:n]^2) + eps) * w
 * The CPU reference is kernels/cpu/vecops.h fg_rmsnorm. y may equal x (in place).
 */
#ifndef FG_CUDA_RMSNORM_CUH
#define FG_CUDA_RMSNORM_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_cuda_rmsnorm_params {
    float *y;          /* [n_rows][y_stride], first n of each row written */
    const float *x;    /* [n_rows][x_stride] */
    const float *w;    /* [n] or NULL (no weight) */
    int64_t y_stride;  /* floats between rows; >= n */
    int64_t x_stride;
    int n_rows;        /* 1 .. 2^30 */
    int n;             /* 1 .. 2^20 */
    float eps;
} fg_cuda_rmsnorm_params;

/* FG_CUDA_BAD_SHAPE, FG_CUDA_BAD_POINTER (NULL or not 4-byte aligned),
 * FG_CUDA_BAD_ARCH, or FG_CUDA_OK. */
fg_cuda_status fg_cuda_rmsnorm_check(const fg_cuda_rmsnorm_params *p, int sm);
/* Checks, then launches one block per row. */
fg_cuda_status fg_cuda_rmsnorm(const fg_cuda_rmsnorm_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
