/* common.cuh: what every CUDA op's .cu file shares: the CUDA runtime, the
 * host-side status codes (launch_check.h), a checked launch helper, the
 * stream of a launch context, and warp/block reductions. Device code only
 * beyond this point; included by .cu files, never by C. */
#ifndef FG_CUDA_COMMON_CUH
#define FG_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/launch_check.h"

static inline fg_cuda_status fg_cuda_check_launch(void)
{
    return cudaGetLastError() == cudaSuccess ? FG_CUDA_OK : FG_CUDA_LAUNCH_FAILED;
}

static inline cudaStream_t fg_cuda_stream(const fg_cuda_launch *l)
{
    return l ? (cudaStream_t)l->stream : (cudaStream_t)0;
}

static __device__ __forceinline__ float fg_warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

static __device__ __forceinline__ float fg_warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* Sum over the block; every thread gets the result. shared: [32] floats.
 * blockDim.x must be a multiple of 32. */
static __device__ __forceinline__ float fg_block_sum(float v, float *shared)
{
    v = fg_warp_sum(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
    __syncthreads(); /* shared may still be read from a previous call */
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < n_warps ? shared[lane] : 0.0f;
    return fg_warp_sum(v);
}

static __device__ __forceinline__ float fg_block_max(float v, float *shared)
{
    v = fg_warp_max(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = lane < n_warps ? shared[lane] : -INFINITY;
    return fg_warp_max(v);
}

#endif
