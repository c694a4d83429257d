/* mla_attn.cu: one 128-thread block per (query token, head), walking the
 * token's cache in tiles of 32 rows with an online softmax:
 *  - scores: each warp takes 8 rows of the tile; lanes split the latent and
 *    rope channels of a row, a warp sum gives the score;
 *  - output: thread i owns latent channels i, i + 128, ... (at most 8), and
 *    adds p_j * c_j for the tile's rows after rescaling by the new maximum.
 * Rows are dequantized on the fly (kernels/cuda/convert.cuh). Reading a row
 * once per head costs H reads of the cache per token; the heads of one token
 * run close together, so those reads mostly hit L2. */
#include "kernels/cuda/mla_attn.cuh"

extern "C" {
#include "kernels/cpu/mla_attn.h"
}
#include "kernels/cuda/convert.cuh"

#define ATT_THREADS 128
#define ATT_TILE 32
#define ATT_PER_THREAD (FG_CUDA_MLA_MAX_LATENT / ATT_THREADS)

__global__ void mla_attn_kernel(fg_cuda_mla_attn_params p)
{
    __shared__ float q_lat[FG_CUDA_MLA_MAX_LATENT];
    __shared__ float q_rope[FG_CUDA_MLA_MAX_ROPE];
    __shared__ float score[ATT_TILE];
    __shared__ float red[32];
    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int L = p.kv_lora, R = p.n_rope;
    for (int i = tid; i < L; i += ATT_THREADS)
        q_lat[i] = p.q_lat[((int64_t)t * p.n_head + h) * L + i];
    for (int i = tid; i < R; i += ATT_THREADS)
        q_rope[i] = p.q_rope[t * p.rope_tok_stride + (int64_t)h * p.rope_head_stride + i];
    __syncthreads();

    const int n_kv = p.tok_n_kv[t];
    const uint8_t *const *pages = p.pages + p.tok_page0[t];
    float acc[ATT_PER_THREAD];
    for (int k = 0; k < ATT_PER_THREAD; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (int j0 = 0; j0 < n_kv; j0 += ATT_TILE) {
        const int n_j = min(ATT_TILE, n_kv - j0);
        for (int jj = warp; jj < n_j; jj += ATT_THREADS / 32) {
            const int j = j0 + jj;
            const uint8_t *row = pages[j / FG_KV_PAGE_TOKENS] + p.layer_offset +
                                 (size_t)(j % FG_KV_PAGE_TOKENS) * p.row_bytes;
            const float sl = fg_d_kv_scale(p.format, row);
            const float sr = fg_d_kv_scale(p.format, row + p.latent_bytes);
            float s = 0.0f;
            for (int i = lane; i < L; i += 32)
                s += q_lat[i] * fg_d_kv_load(p.format, row, L, i, sl);
            for (int i = lane; i < R; i += 32)
                s += q_rope[i] * fg_d_kv_load(p.format, row + p.latent_bytes, R, i, sr);
            s = fg_warp_sum(s);
            if (lane == 0)
                score[jj] = s * p.scale;
        }
        __syncthreads();
        const float tile_max = fg_block_max(tid < n_j ? score[tid] : -INFINITY, red);
        const float m_new = fmaxf(m, tile_max);
        const float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
        float tile_sum = 0.0f;
        for (int k = 0; k < ATT_PER_THREAD; k++)
            acc[k] *= corr;
        for (int jj = 0; jj < n_j; jj++) {
            const float pj = expf(score[jj] - m_new);
            tile_sum += pj;
            const int j = j0 + jj;
            const uint8_t *row = pages[j / FG_KV_PAGE_TOKENS] + p.layer_offset +
                                 (size_t)(j % FG_KV_PAGE_TOKENS) * p.row_bytes;
            const float sl = fg_d_kv_scale(p.format, row);
            for (int k = 0; k < ATT_PER_THREAD; k++) {
                const int c = tid + k * ATT_THREADS;
                if (c < L)
                    acc[k] += pj * fg_d_kv_load(p.format, row, L, c, sl);
            }
        }
        l = l * corr + tile_sum;
        m = m_new;
        __syncthreads(); /* score[] is rewritten by the next tile */
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float *out = p.out + ((int64_t)t * p.n_head + h) * L;
    for (int k = 0; k < ATT_PER_THREAD; k++) {
        const int c = tid + k * ATT_THREADS;
        if (c < L)
            out[c] = acc[k] * inv;
    }
}

extern "C" fg_cuda_status fg_cuda_mla_attn(const fg_cuda_mla_attn_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_mla_attn_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    dim3 grid((unsigned)p->n_tok, (unsigned)p->n_head);
    mla_attn_kernel<<<grid, ATT_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
