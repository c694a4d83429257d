/* ds4_hc.cuh: DeepSeek V4 hyper-connection mixing (mHC) on the GPU (launcher
 * only). Around each sublayer the 4 residual streams x [4][E] of a token
 * are mixed by 24 numbers from a projection of them (mix, the matmul op on
 * the RMS-normalised streams):
 *   pre = sigmoid(mix[0..4) scale[0] + base) + eps       y = sum_h pre[h] x[h]
 *   post = 2 sigmoid(mix[4..8) scale[1] + base)
 *   comb = Sinkhorn(mix[8..24) scale[2] + base, iters)    x'[d] = post[d] o + sum_s comb[d][s] x[s]
 * CPU reference: kernels/cpu/ds4_ops.h fg_ds4_hc_weights, fg_ds4_hc_pre,
 * fg_ds4_hc_post (what engine/model/deepseek4/forward.c calls).
 */
#ifndef FG_CUDA_DS4_HC_CUH
#define FG_CUDA_DS4_HC_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CUDA_DS4_HC_MIX 24 /* pre[4], post[4], comb[4][4] (comb[d][s] at 8 + 4d + s) */
#define FG_CUDA_DS4_HC_MAX_ITERS 1000

/* Weights of every token, then y = the pre-weighted sum of its streams. */
typedef struct fg_cuda_ds4_hc_pre_params {
    float *w;              /* [n_tok][24] out: the mixing weights (hc_post reads them) */
    float *y;              /* [n_tok][E] out */
    const float *mix;      /* [n_tok][24] */
    const float *x;        /* [n_tok][4][E] */
    const float *scale;    /* [3] */
    const float *base;     /* [24] */
    int n_tok;             /* 1 .. 2^20 */
    int E;                 /* 1 .. 2^20 */
    int iters;             /* 1 .. FG_CUDA_DS4_HC_MAX_ITERS Sinkhorn iterations */
    float eps;
} fg_cuda_ds4_hc_pre_params;

/* out[t][d] = post[d] o[t] + sum_s comb[d][s] x[t][s]. out must not alias x. */
typedef struct fg_cuda_ds4_hc_post_params {
    float *out;            /* [n_tok][4][E] */
    const float *w;        /* [n_tok][24] from hc_pre */
    const float *o;        /* [n_tok][E] the sublayer's output */
    const float *x;        /* [n_tok][4][E] */
    int n_tok;             /* 1 .. 2^20 */
    int E;                 /* 1 .. 2^20 */
} fg_cuda_ds4_hc_post_params;

/* FG_CUDA_BAD_SHAPE, FG_CUDA_BAD_POINTER (NULL, not 4-byte aligned, or out
 * = x for post), FG_CUDA_BAD_ARCH, or FG_CUDA_OK. */
fg_cuda_status fg_cuda_ds4_hc_pre_check(const fg_cuda_ds4_hc_pre_params *p, int sm);
/* Checks, then one block per token: one thread the weights (double, as the
 * CPU), all threads the sum. */
fg_cuda_status fg_cuda_ds4_hc_pre(const fg_cuda_ds4_hc_pre_params *p, const fg_cuda_launch *l);

fg_cuda_status fg_cuda_ds4_hc_post_check(const fg_cuda_ds4_hc_post_params *p, int sm);
/* Checks, then one thread per (token, channel). */
fg_cuda_status fg_cuda_ds4_hc_post(const fg_cuda_ds4_hc_post_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
