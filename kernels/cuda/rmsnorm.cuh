/* rmsnorm.cuh: RMSNorm over rows on the GPU (launcher only).
 * y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w        x, y: [n_rows][n] f32, w: [n] f32 or NULL
 * The CPU reference is kernels/cpu/vecops.h fg_rmsnorm. */
#ifndef FG_CUDA_RMSNORM_CUH
#define FG_CUDA_RMSNORM_CUH

#include "kernels/cuda/common.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks shapes and pointers on the host, then launches one block per row on stream. */
fg_cuda_status fg_cuda_rmsnorm(float *y, const float *x, const float *w, int n_rows, int n, float eps,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
