/* vecops.cu: element-wise kernels (one thread per element) and the embedding
 * row lookup (one block per token). */
#include "kernels/cuda/vecops.cuh"

#include "kernels/cuda/dot.cuh"

__global__ void silu_mul_kernel(fg_cuda_silu_mul_params p)
{
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)p.n_rows * p.n)
        return;
    const int64_t r = idx / p.n, i = idx % p.n;
    float *g = p.g + r * p.stride + i;
    const float v = *g;
    *g = v / (1.0f + expf(-v)) * p.u[r * p.stride + i];
}

extern "C" fg_cuda_status fg_cuda_silu_mul(const fg_cuda_silu_mul_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_silu_mul_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    const int64_t blocks = ((int64_t)p->n_rows * p->n + 255) / 256;
    if (blocks > 0x7fffffff)
        return FG_CUDA_BAD_SHAPE;
    silu_mul_kernel<<<(unsigned)blocks, 256, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}

__global__ void add_kernel(fg_cuda_add_params p)
{
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < p.n)
        p.x[idx] += p.y[idx];
}

extern "C" fg_cuda_status fg_cuda_add(const fg_cuda_add_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_add_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    const int64_t blocks = (p->n + 255) / 256;
    if (blocks > 0x7fffffff)
        return FG_CUDA_BAD_SHAPE;
    add_kernel<<<(unsigned)blocks, 256, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}

__global__ void get_rows_kernel(fg_cuda_get_rows_params p, size_t row_bytes)
{
    const int t = blockIdx.x;
    const int32_t id = p.ids[t];
    float *out = p.out + (int64_t)t * p.n;
    const bool valid = id >= 0 && id < p.n_rows;
    const uint8_t *w = (const uint8_t *)p.w + (valid ? (size_t)id * row_bytes : 0);
    for (int i = threadIdx.x; i < p.n; i += blockDim.x) {
        float v = 0.0f;
        if (valid) {
            switch (p.wtype) {
            case FG_WTYPE_F32:
                v = ((const float *)w)[i];
                break;
            case FG_WTYPE_F16:
                v = fg_d_f16_to_f32(((const uint16_t *)w)[i]);
                break;
            case FG_WTYPE_BF16:
                v = fg_d_bf16_to_f32(((const uint16_t *)w)[i]);
                break;
            default: {
                const uint8_t *b = w + (size_t)(i / FG_Q8_0_BLOCK) * sizeof(fg_block_q8_0);
                v = fg_d_f16_to_f32((uint16_t)(b[0] | b[1] << 8)) * (float)(int8_t)b[2 + i % FG_Q8_0_BLOCK];
                break;
            }
            }
        }
        out[i] = v;
    }
}

extern "C" fg_cuda_status fg_cuda_get_rows(const fg_cuda_get_rows_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_get_rows_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    get_rows_kernel<<<p->n_tok, 256, 0, fg_cuda_stream(l)>>>(*p, fg_wtype_row_bytes(p->wtype, p->n));
    return fg_cuda_check_launch();
}
