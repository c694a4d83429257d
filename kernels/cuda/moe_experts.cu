/* moe_experts.cu: grouped expert products, grid (experts, output rows / 4):
 * each warp takes one output row of its block's expert and walks that
 * expert's sorted slots in tiles of FG_MM_TILE, so the expert's row is read
 * once per tile. Blocks of experts without slots exit at once. The combine
 * is one block per token, summing its k outputs in slot order. */
#include "kernels/cuda/moe_experts.cuh"

#include "kernels/cuda/dot.cuh"

#define EXP_WARPS 4

__global__ void moe_experts_kernel(fg_cuda_moe_experts_params p, size_t row_bytes)
{
    const int e = blockIdx.x, o = blockIdx.y * EXP_WARPS + threadIdx.x / 32;
    const int begin = p.seg[e], end = p.seg[e + 1];
    if (begin >= end || o >= p.n_out)
        return;
    const uint8_t *w = (const uint8_t *)p.w + (size_t)e * p.w_mat_bytes + (size_t)o * row_bytes;
    const int nb = p.n_in / FG_Q8_0_BLOCK;
    for (int s0 = begin; s0 < end; s0 += FG_MM_TILE) {
        const int n_t = min(FG_MM_TILE, end - s0);
        float acc[FG_MM_TILE];
        /* Slots of a tile read scattered input rows: gather their dots one row at a time
         * unless the rows are the sorted positions themselves (contiguous). */
        if (!p.slot_row) {
            const fg_block_q8_0 *q0 = fg_d_reads_q8(p.wtype) ? (const fg_block_q8_0 *)p.q8_scratch + (size_t)s0 * nb : NULL;
            fg_d_warp_dot(p.wtype, w, p.n_in, p.x + (int64_t)s0 * p.x_stride, p.x_stride, q0, n_t, acc);
            if (threadIdx.x % 32 == 0)
                for (int t = 0; t < n_t; t++)
                    p.y[(int64_t)(s0 + t) * p.y_stride + o] = acc[t];
        } else {
            for (int t = 0; t < n_t; t++) {
                const int r = p.slot_row[s0 + t];
                const fg_block_q8_0 *q0 = fg_d_reads_q8(p.wtype) ? (const fg_block_q8_0 *)p.q8_scratch + (size_t)r * nb : NULL;
                float one[FG_MM_TILE];
                fg_d_warp_dot(p.wtype, w, p.n_in, p.x + (int64_t)r * p.x_stride, p.x_stride, q0, 1, one);
                acc[t] = one[0];
            }
            if (threadIdx.x % 32 == 0)
                for (int t = 0; t < n_t; t++)
                    p.y[(int64_t)(s0 + t) * p.y_stride + o] = acc[t];
        }
    }
}

extern "C" fg_cuda_status fg_cuda_moe_experts(const fg_cuda_moe_experts_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_moe_experts_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    cudaStream_t stream = fg_cuda_stream(l);
    if (fg_d_reads_q8(p->wtype)) {
        st = fg_quantize_rows_q8_0(p->x, p->x_stride, 0, p->n_rows, 1, p->n_in, p->q8_scratch, stream);
        if (st != FG_CUDA_OK)
            return st;
    }
    const unsigned row_blocks = (unsigned)((p->n_out + EXP_WARPS - 1) / EXP_WARPS);
    if (row_blocks > 65535)
        return FG_CUDA_BAD_SHAPE;
    dim3 grid((unsigned)p->n_expert, row_blocks);
    moe_experts_kernel<<<grid, EXP_WARPS * 32, 0, stream>>>(*p, fg_wtype_row_bytes(p->wtype, p->n_in));
    return fg_cuda_check_launch();
}

__global__ void moe_combine_kernel(fg_cuda_moe_combine_params p)
{
    const int t = blockIdx.x;
    float *x = p.x + (int64_t)t * p.d;
    for (int i = threadIdx.x; i < p.d; i += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < p.n_used; j++) {
            const int pos = p.slot_pos[t * p.n_used + j];
            if (pos >= 0)
                acc += p.weights[t * p.n_used + j] * p.y[(int64_t)pos * p.d + i];
        }
        x[i] += acc;
    }
}

extern "C" fg_cuda_status fg_cuda_moe_combine(const fg_cuda_moe_combine_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_moe_combine_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    moe_combine_kernel<<<p->n_tok, 256, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
