/* ds4_attn.cuh: DeepSeek V4 attention on the GPU (launcher only): each
 * token's heads over its keys (the window rows, then the compressed rows its
 * layer reads: the indexer's top-k for CSA, all visible for HCA), K = V,
 * with a per-head sink logit in the softmax's denominator:
 *   out[h] = sum_j e^(s_j - m) k_j / (sum_j e^(s_j - m) + e^(sink[h] - m)),
 *   s_j = q[h] . k_j * scale.
 * CPU reference: kernels/cpu/ds4_ops.h fg_ds4_attn_tile + fg_ds4_attn_finish
 * (what engine/model/deepseek4/forward.c calls). Keys are read decoded to f32
 * through a per-token list of row indices.
 */
#ifndef FG_CUDA_DS4_ATTN_CUH
#define FG_CUDA_DS4_ATTN_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CUDA_DS4_ATTN_MAX_DIM 1024  /* D (V4: 512): the query in shared memory, 8 accumulators a thread */
#define FG_CUDA_DS4_ATTN_MAX_HEADS 1024

typedef struct fg_cuda_ds4_attn_params {
    float *out;            /* [n_tok][H][D] */
    const float *q;        /* [n_tok][H][D] */
    const float *keys;     /* [*][D] key (= value) rows */
    const int32_t *kidx;   /* [n_tok][kstride] rows of keys, in softmax order */
    const int32_t *n_keys; /* [n_tok] 0 .. kstride (0: the sink alone, out = 0) */
    const float *sinks;    /* [H] */
    int64_t kstride;       /* 1 .. 2^24 */
    int n_tok;             /* 1 .. 2^20 */
    int H;                 /* 1 .. FG_CUDA_DS4_ATTN_MAX_HEADS */
    int D;                 /* 1 .. FG_CUDA_DS4_ATTN_MAX_DIM */
    float scale;           /* 1 / sqrt(D) in V4 */
} fg_cuda_ds4_attn_params;

/* FG_CUDA_BAD_SHAPE, FG_CUDA_BAD_POINTER (NULL or not 4-byte aligned),
 * FG_CUDA_BAD_ARCH, or FG_CUDA_OK. */
fg_cuda_status fg_cuda_ds4_attn_check(const fg_cuda_ds4_attn_params *p, int sm);
/* Checks, then one 128-thread block per (token, head). */
fg_cuda_status fg_cuda_ds4_attn(const fg_cuda_ds4_attn_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
