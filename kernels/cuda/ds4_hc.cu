/* ds4_hc.cu: V4 hyper-connection mixing. The 24 weights of a token are a
 * few hundred double operations (the Sinkhorn normalisation of a 4 x 4
 * matrix), done by one thread exactly in the CPU's order so the f32 weights
 * agree to the last bit or one ulp; the streams' sums are elementwise. */
#include "kernels/cuda/ds4_hc.cuh"

#include "kernels/cuda/common.cuh"

#define HC_THREADS 256

static __device__ double hc_sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

static __device__ void hc_weights(const float *m, const float *scale, const float *base, double eps, int iters,
                                  float *w)
{
    double c[4][4]; /* c[d][s] */
    for (int h = 0; h < 4; h++) {
        w[h] = (float)(hc_sigm((double)m[h] * scale[0] + base[h]) + eps);
        w[4 + h] = (float)(2.0 * hc_sigm((double)m[4 + h] * scale[1] + base[4 + h]));
    }
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++)
            c[d][s] = (double)m[8 + d + 4 * s] * scale[2] + base[8 + d + 4 * s];
    for (int s = 0; s < 4; s++) { /* softmax over d, + eps */
        double mx = c[0][s], sum = 0;
        for (int d = 1; d < 4; d++)
            mx = c[d][s] > mx ? c[d][s] : mx;
        for (int d = 0; d < 4; d++)
            sum += (c[d][s] = exp(c[d][s] - mx));
        for (int d = 0; d < 4; d++)
            c[d][s] = c[d][s] / sum + eps;
    }
    for (int it = 0; it < iters; it++) { /* rows; from the second iteration columns first */
        if (it > 0)
            for (int s = 0; s < 4; s++) {
                double sum = 0;
                for (int d = 0; d < 4; d++)
                    sum += c[d][s];
                for (int d = 0; d < 4; d++)
                    c[d][s] /= sum + eps;
            }
        for (int d = 0; d < 4; d++) {
            double sum = 0;
            for (int s = 0; s < 4; s++)
                sum += c[d][s];
            for (int s = 0; s < 4; s++)
                c[d][s] /= sum + eps;
        }
    }
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++)
            w[8 + 4 * d + s] = (float)c[d][s];
}

__global__ void ds4_hc_pre_kernel(fg_cuda_ds4_hc_pre_params p)
{
    __shared__ float w[FG_CUDA_DS4_HC_MIX];
    const int t = blockIdx.x, E = p.E;
    if (threadIdx.x == 0) {
        hc_weights(p.mix + (size_t)t * FG_CUDA_DS4_HC_MIX, p.scale, p.base, (double)p.eps, p.iters, w);
        for (int i = 0; i < FG_CUDA_DS4_HC_MIX; i++)
            p.w[(size_t)t * FG_CUDA_DS4_HC_MIX + i] = w[i];
    }
    __syncthreads();
    const float *x = p.x + (size_t)t * 4 * E;
    for (int i = threadIdx.x; i < E; i += HC_THREADS)
        p.y[(size_t)t * E + i] = w[0] * x[i] + w[1] * x[E + i] + w[2] * x[2 * E + i] + w[3] * x[3 * E + i];
}

__global__ void ds4_hc_post_kernel(fg_cuda_ds4_hc_post_params p)
{
    const int t = blockIdx.x, i = blockIdx.y * HC_THREADS + threadIdx.x, E = p.E;
    if (i >= E)
        return;
    const float *w = p.w + (size_t)t * FG_CUDA_DS4_HC_MIX, *x = p.x + (size_t)t * 4 * E;
    const float o = p.o[(size_t)t * E + i];
    for (int d = 0; d < 4; d++) {
        const float *c = w + 8 + 4 * d;
        p.out[((size_t)t * 4 + d) * E + i] =
            w[4 + d] * o + c[0] * x[i] + c[1] * x[E + i] + c[2] * x[2 * E + i] + c[3] * x[3 * E + i];
    }
}

extern "C" fg_cuda_status fg_cuda_ds4_hc_pre(const fg_cuda_ds4_hc_pre_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_ds4_hc_pre_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    ds4_hc_pre_kernel<<<p->n_tok, HC_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}

extern "C" fg_cuda_status fg_cuda_ds4_hc_post(const fg_cuda_ds4_hc_post_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_ds4_hc_post_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    dim3 grid(p->n_tok, (p->E + HC_THREADS - 1) / HC_THREADS);
    ds4_hc_post_kernel<<<grid, HC_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
