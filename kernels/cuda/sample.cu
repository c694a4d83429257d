/* sample.cu: one 256-thread block per row.
 *  - greedy: a block argmax (largest logit, lowest id on ties, NaN skipped);
 *  - top-k: k block-argmax passes, each taking the best candidate ordered
 *    after the previous one (logit descending, id ascending), so no exclusion
 *    list is needed and the candidates come out sorted; then thread 0 applies
 *    the temperature, top-p, min-p and the draw exactly as engine/serve/sampler.c. */
#include "kernels/cuda/sample.cuh"

#include "kernels/cuda/common.cuh"

#define SAMPLE_THREADS 256

/* (v, i) comes before (bv, bi): a larger logit, or the same logit and a lower id. */
static __device__ __forceinline__ bool before(float v, int i, float bv, int bi)
{
    return bi < 0 || v > bv || (v == bv && i < bi);
}

/* The best (v, i) of the row ordered strictly after (pv, pi) (pi < 0: no bound). */
static __device__ void block_best_after(const float *x, int n, float pv, int pi, float *out_v, int *out_i)
{
    __shared__ float sv[SAMPLE_THREADS];
    __shared__ int si[SAMPLE_THREADS];
    float bv = -INFINITY;
    int bi = -1;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = x[i];
        if (v != v)
            continue;
        if (pi >= 0 && !(v < pv || (v == pv && i > pi)))
            continue;
        if (before(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const float ov = sv[threadIdx.x + s];
            const int oi = si[threadIdx.x + s];
            if (oi >= 0 && before(ov, oi, sv[threadIdx.x], si[threadIdx.x])) {
                sv[threadIdx.x] = ov;
                si[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    *out_v = sv[0];
    *out_i = si[0];
    __syncthreads();
}

__global__ void sample_kernel(fg_cuda_sample_params p)
{
    __shared__ float cand_v[FG_CUDA_SAMPLE_MAX_K];
    __shared__ int cand_i[FG_CUDA_SAMPLE_MAX_K];
    const int r = blockIdx.x;
    const float *x = p.logits + (int64_t)r * p.stride;
    const fg_cuda_sample_row row = p.rows[r];
    if (!(row.temperature > 0.0f) || p.max_top_k < 1) {
        float v;
        int i;
        block_best_after(x, p.n_vocab, 0.0f, -1, &v, &i);
        if (threadIdx.x == 0)
            p.out[r] = i < 0 ? 0 : i;
        return;
    }
    const int k = row.top_k < 1 ? p.max_top_k : min(row.top_k, p.max_top_k);
    int n = 0;
    float pv = 0.0f;
    int pi = -1;
    for (; n < k; n++) {
        float v;
        int i;
        block_best_after(x, p.n_vocab, pv, pi, &v, &i);
        if (i < 0)
            break;
        if (threadIdx.x == 0) {
            cand_v[n] = v;
            cand_i[n] = i;
        }
        pv = v;
        pi = i;
    }
    if (threadIdx.x != 0)
        return;
    if (n == 0) {
        p.out[r] = 0;
        return;
    }
    /* engine/serve/sampler.c from here on; probabilities reuse cand_v. */
    const float inv_t = 1.0f / row.temperature, top = cand_v[0];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        cand_v[i] = expf((cand_v[i] - top) * inv_t);
        sum += cand_v[i];
    }
    if (row.top_p < 1.0f) {
        double acc = 0;
        for (int i = 0; i < n; i++) {
            acc += cand_v[i] / sum;
            if (acc >= row.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (row.min_p > 0.0f) {
        int keep = 1;
        while (keep < n && cand_v[keep] >= row.min_p * cand_v[0])
            keep++;
        n = keep;
    }
    sum = 0;
    for (int i = 0; i < n; i++)
        sum += cand_v[i];
    const double u = row.u * sum;
    double acc = 0;
    for (int i = 0; i < n; i++) {
        acc += cand_v[i];
        if (u < acc) {
            p.out[r] = cand_i[i];
            return;
        }
    }
    p.out[r] = cand_i[n - 1];
}

extern "C" fg_cuda_status fg_cuda_sample(const fg_cuda_sample_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_sample_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    sample_kernel<<<p->n_rows, SAMPLE_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
