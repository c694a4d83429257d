/* matmul.cu: one warp per output row and tile of FG_MM_TILE tokens; 4 warps
 * per block; grid (output rows / 4, token tiles, matrices). Each weight row is
 * streamed once per token tile, so a decode batch of up to 8 tokens reads the
 * weights once (memory-bound, as decode is). */
#include "kernels/cuda/matmul.cuh"

#include "kernels/cuda/dot.cuh"

#define MM_WARPS 4

__global__ void matmul_kernel(fg_cuda_matmul_params p, size_t row_bytes)
{
    const int o = blockIdx.x * MM_WARPS + threadIdx.x / 32;
    if (o >= p.n_out)
        return;
    const int m = blockIdx.z, t0 = blockIdx.y * FG_MM_TILE;
    const int n_t = min(FG_MM_TILE, p.n_tok - t0);
    const uint8_t *w = (const uint8_t *)p.w + (size_t)m * p.w_mat_bytes + (size_t)o * row_bytes;
    const float *x0 = p.x + m * p.x_mat_stride + (int64_t)t0 * p.x_stride;
    const fg_block_q8_0 *q0 = NULL;
    if (fg_d_reads_q8(p.wtype))
        q0 = (const fg_block_q8_0 *)p.q8_scratch + ((size_t)m * p.n_tok + t0) * (p.n_in / FG_Q8_0_BLOCK);
    float acc[FG_MM_TILE];
    fg_d_warp_dot(p.wtype, w, p.n_in, x0, p.x_stride, q0, n_t, acc);
    if (threadIdx.x % 32 == 0)
        for (int t = 0; t < n_t; t++)
            p.y[m * p.y_mat_stride + (int64_t)(t0 + t) * p.y_stride + o] = acc[t];
}

extern "C" fg_cuda_status fg_cuda_matmul(const fg_cuda_matmul_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_matmul_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    cudaStream_t stream = fg_cuda_stream(l);
    if (fg_d_reads_q8(p->wtype)) {
        st = fg_quantize_rows_q8_0(p->x, p->x_stride, p->x_mat_stride, p->n_tok, p->n_mat, p->n_in, p->q8_scratch,
                                   stream);
        if (st != FG_CUDA_OK)
            return st;
    }
    dim3 grid((unsigned)((p->n_out + MM_WARPS - 1) / MM_WARPS), (unsigned)((p->n_tok + FG_MM_TILE - 1) / FG_MM_TILE),
              (unsigned)p->n_mat);
    matmul_kernel<<<grid, MM_WARPS * 32, 0, stream>>>(*p, fg_wtype_row_bytes(p->wtype, p->n_in));
    return fg_cuda_check_launch();
}
