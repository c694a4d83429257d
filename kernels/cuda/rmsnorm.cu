/* rmsnorm.cu: one block per row; a block-wide sum of squares, then the scale. */
#include "kernels/cuda/rmsnorm.cuh"

#include <stdint.h>

#define RMSNORM_THREADS 256

__global__ void rmsnorm_kernel(float *y, const float *x, const float *w, int n, float eps)
{
    __shared__ float partial[RMSNORM_THREADS / 32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += xr[i] * xr[i];
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, off);
    if (threadIdx.x % 32 == 0)
        partial[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, off);
        if (threadIdx.x == 0)
            partial[0] = s;
    }
    __syncthreads();
    const float scale = rsqrtf(partial[0] / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = xr[i] * scale * (w ? w[i] : 1.0f);
}

extern "C" fg_cuda_status fg_cuda_rmsnorm(float *y, const float *x, const float *w, int n_rows, int n, float eps,
                                          cudaStream_t stream)
{
    if (n_rows <= 0 || n <= 0 || n_rows > (1 << 30))
        return FG_CUDA_BAD_SHAPE;
    if (!y || !x || ((uintptr_t)y | (uintptr_t)x) % sizeof(float))
        return FG_CUDA_BAD_POINTER;
    rmsnorm_kernel<<<n_rows, RMSNORM_THREADS, 0, stream>>>(y, x, w, n, eps);
    return fg_cuda_check_launch();
}
