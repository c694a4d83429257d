/* rmsnorm.cu: one block per row; a block-wide sum of squares, then the scale. */
#include "kernels/cuda/rmsnorm.cuh"

#include "kernels/cuda/common.cuh"

#define RMSNORM_THREADS 256

__global__ void rmsnorm_kernel(fg_cuda_rmsnorm_params p)
{
    __shared__ float red[32];
    const float *xr = p.x + (size_t)blockIdx.x * p.x_stride;
    float *yr = p.y + (size_t)blockIdx.x * p.y_stride;
    float s = 0.0f;
    for (int i = threadIdx.x; i < p.n; i += blockDim.x)
        s += xr[i] * xr[i];
    s = fg_block_sum(s, red);
    const float scale = 1.0f / sqrtf(s / (float)p.n + p.eps);
    for (int i = threadIdx.x; i < p.n; i += blockDim.x)
        yr[i] = xr[i] * scale * (p.w ? p.w[i] : 1.0f);
}

extern "C" fg_cuda_status fg_cuda_rmsnorm(const fg_cuda_rmsnorm_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_rmsnorm_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    rmsnorm_kernel<<<p->n_rows, RMSNORM_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
