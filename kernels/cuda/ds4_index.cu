/* ds4_index.cu: V4 indexer scores and top-k.
 *  - scores: the token's query [Hi][Di] in shared memory; a warp per row,
 *    lanes split Di, a warp sum per head, the relu'd head terms summed in
 *    double by lane 0 in head order (as the CPU);
 *  - top-k: a row is selected when fewer than k rows beat it under (score
 *    desc, row asc), the CPU's order; counting stops at k. Then one pass in
 *    row order compacts the selected rows with warp ballots, so the output
 *    is ascending like the CPU's. A correctness-first kernel: a radix
 *    select would be O(n) (docs/gpu.md). */
#include "kernels/cuda/ds4_index.cuh"

#include "kernels/cuda/common.cuh"

#define IDX_THREADS 128
#define IDX_ROWS 32 /* rows per block */
#define TOPK_THREADS 256

__global__ void ds4_index_score_kernel(fg_cuda_ds4_index_score_params p)
{
    __shared__ float q[FG_CUDA_DS4_IDX_MAX_QK];
    const int t = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int Hi = p.Hi, Di = p.Di, n = min(p.n_rows[t], p.max_rows);
    const int r0 = blockIdx.y * IDX_ROWS;
    if (r0 >= n)
        return; /* the whole block: no barrier follows for it */
    for (int i = tid; i < Hi * Di; i += IDX_THREADS)
        q[i] = p.q[(size_t)t * Hi * Di + i];
    __syncthreads();
    const float *w = p.w + (size_t)t * Hi;
    for (int r = r0 + warp; r < min(n, r0 + IDX_ROWS); r += IDX_THREADS / 32) {
        const float *k = p.keys + ((size_t)p.key0[t] + r) * Di;
        double s = 0;
        for (int h = 0; h < Hi; h++) {
            float d = 0;
            for (int i = lane; i < Di; i += 32)
                d += q[h * Di + i] * k[i];
            d = fg_warp_sum(d);
            if (d > 0)
                s += (double)d * w[h];
        }
        if (lane == 0)
            p.scores[(size_t)t * p.stride + r] = (float)s;
    }
}

/* 1 when row j (score sj) comes before row i (score si) in the selection order. */
static __device__ __forceinline__ int beats(float sj, int j, float si, int i)
{
    return sj > si || (sj == si && j < i);
}

__global__ void ds4_topk_kernel(fg_cuda_ds4_topk_params p)
{
    __shared__ int warp_count[TOPK_THREADS / 32];
    __shared__ int base;
    const int t = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int n = (int)min((int64_t)p.n_rows[t], p.stride), k = p.k; /* a bad count reads no further than the row */
    const float *s = p.scores + (size_t)t * p.stride;
    int32_t *out = p.sel + (size_t)t * k;
    if (tid == 0) {
        base = 0;
        p.n_sel[t] = min(n, k);
    }
    __syncthreads();
    for (int c0 = 0; c0 < n; c0 += TOPK_THREADS) {
        const int i = c0 + tid;
        int chosen = 0;
        if (i < n) {
            if (k >= n) {
                chosen = 1;
            } else {
                const float si = s[i];
                int rank = 0;
                for (int j = 0; j < n && rank < k; j++)
                    rank += beats(s[j], j, si, i);
                chosen = rank < k;
            }
        }
        const unsigned ballot = __ballot_sync(0xffffffffu, chosen);
        if (lane == 0)
            warp_count[warp] = __popc(ballot);
        __syncthreads();
        int before = base;
        for (int wi = 0; wi < warp; wi++)
            before += warp_count[wi];
        if (chosen)
            out[before + __popc(ballot & ((1u << lane) - 1u))] = i;
        __syncthreads();
        if (tid == 0)
            for (int wi = 0; wi < TOPK_THREADS / 32; wi++)
                base += warp_count[wi];
        __syncthreads();
    }
}

extern "C" fg_cuda_status fg_cuda_ds4_index_score(const fg_cuda_ds4_index_score_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_ds4_index_score_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    dim3 grid(p->n_tok, (p->max_rows + IDX_ROWS - 1) / IDX_ROWS);
    ds4_index_score_kernel<<<grid, IDX_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}

extern "C" fg_cuda_status fg_cuda_ds4_topk(const fg_cuda_ds4_topk_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_ds4_topk_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    ds4_topk_kernel<<<p->n_tok, TOPK_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
