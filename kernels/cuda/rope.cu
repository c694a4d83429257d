/* rope.cu: one thread per rotated pair; angles in double as engine/model/rope.c
 * computes them, so positions in the hundreds of thousands keep their phase. */
#include "kernels/cuda/rope.cuh"

#include "kernels/cuda/common.cuh"

__global__ void rope_kernel(fg_cuda_rope_params p)
{
    const int half = p.n_dims / 2;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t total = (int64_t)p.n_tok * p.n_vec * half;
    if (idx >= total)
        return;
    const int i = (int)(idx % half);
    const int64_t tv = idx / half;
    const int v = (int)(tv % p.n_vec), t = (int)(tv / p.n_vec);
    float *x = p.x + t * p.tok_stride + (int64_t)v * p.vec_stride;
    const double a = (double)p.pos[t] * p.inv_freq[i];
    const float c = (float)cos(a) * p.mscale, s = (float)sin(a) * p.mscale;
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x0 * s + x1 * c;
}

extern "C" fg_cuda_status fg_cuda_rope(const fg_cuda_rope_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_rope_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    const int64_t total = (int64_t)p->n_tok * p->n_vec * (p->n_dims / 2);
    const int threads = 256;
    const int64_t blocks = (total + threads - 1) / threads;
    if (blocks > 0x7fffffff)
        return FG_CUDA_BAD_SHAPE;
    rope_kernel<<<(unsigned)blocks, threads, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
