/* ds4_attn.cu: one 128-thread block per (token, head), the token's keys in
 * tiles of 32 with an online softmax (the shape of mla_attn.cu):
 *  - scores: each warp takes 8 keys of the tile, lanes split D, a warp sum;
 *  - output: thread i owns channels i, i + 128, ... (at most 8) and adds
 *    p_j k_j after rescaling by the tile's new maximum;
 *  - the sink joins the denominator at the end, at the common maximum. */
#include "kernels/cuda/ds4_attn.cuh"

#include "kernels/cuda/common.cuh"

#define ATT_THREADS 128
#define ATT_TILE 32
#define ATT_PER_THREAD (FG_CUDA_DS4_ATTN_MAX_DIM / ATT_THREADS)

__global__ void ds4_attn_kernel(fg_cuda_ds4_attn_params p)
{
    __shared__ float q[FG_CUDA_DS4_ATTN_MAX_DIM];
    __shared__ float score[ATT_TILE];
    __shared__ int rows[ATT_TILE];
    __shared__ float red[32];
    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int D = p.D, n = (int)min((int64_t)p.n_keys[t], p.kstride); /* never past the token's list */
    const size_t qo = ((size_t)t * p.H + h) * D;
    for (int i = tid; i < D; i += ATT_THREADS)
        q[i] = p.q[qo + i];
    const int32_t *kidx = p.kidx + (size_t)t * p.kstride;
    float acc[ATT_PER_THREAD];
    for (int k = 0; k < ATT_PER_THREAD; k++)
        acc[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 < n; j0 += ATT_TILE) {
        const int nj = min(ATT_TILE, n - j0);
        __syncthreads(); /* q loaded; the previous tile's rows and scores read */
        if (tid < nj)
            rows[tid] = kidx[j0 + tid];
        __syncthreads();
        for (int jj = warp; jj < nj; jj += ATT_THREADS / 32) {
            const float *k = p.keys + (size_t)rows[jj] * D;
            float s = 0.0f;
            for (int i = lane; i < D; i += 32)
                s += q[i] * k[i];
            s = fg_warp_sum(s);
            if (lane == 0)
                score[jj] = s * p.scale;
        }
        __syncthreads();
        const float mx = fmaxf(m, fg_block_max(tid < nj ? score[tid] : -INFINITY, red));
        const float corr = expf(m - mx);
        l *= corr;
        for (int k = 0; k < ATT_PER_THREAD; k++)
            acc[k] *= corr;
        for (int jj = 0; jj < nj; jj++) {
            const float e = expf(score[jj] - mx);
            l += e;
            const float *k = p.keys + (size_t)rows[jj] * D;
            for (int c = 0; c < ATT_PER_THREAD && tid + c * ATT_THREADS < D; c++)
                acc[c] += e * k[tid + c * ATT_THREADS];
        }
        m = mx;
    }
    const float sink = p.sinks[h], mx = fmaxf(m, sink);
    const float corr = expf(m - mx), inv = 1.0f / (l * corr + expf(sink - mx));
    for (int c = 0; c < ATT_PER_THREAD && tid + c * ATT_THREADS < D; c++)
        p.out[qo + tid + c * ATT_THREADS] = acc[c] * corr * inv;
}

extern "C" fg_cuda_status fg_cuda_ds4_attn(const fg_cuda_ds4_attn_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_ds4_attn_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    dim3 grid(p->n_tok, p->H);
    ds4_attn_kernel<<<grid, ATT_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
