/* ds4_index.cuh: the DeepSeek V4 indexer on the GPU (launcher only): each
 * query token's scores over its sequence's compressed rows, then the top-k
 * rows its CSA attention reads. CPU reference: kernels/cpu/ds4_ops.h
 * fg_ds4_index_score, fg_ds4_top_k (what engine/model/deepseek4/forward.c
 * calls). The index keys are read decoded to f32.
 */
#ifndef FG_CUDA_DS4_INDEX_CUH
#define FG_CUDA_DS4_INDEX_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CUDA_DS4_IDX_MAX_QK 8192  /* Hi * Di: the query sits in shared memory (V4: 64 x 128) */
#define FG_CUDA_DS4_IDX_MAX_DIM 1024 /* Di */
#define FG_CUDA_DS4_TOPK_MAX 2048    /* k (V4: 512) */

/* scores[t][r] = sum_h w[t][h] * relu(q[t][h] . keys[key0[t] + r]), r < n_rows[t] */
typedef struct fg_cuda_ds4_index_score_params {
    float *scores;         /* [n_tok][stride] out; entries past n_rows[t] untouched */
    const float *q;        /* [n_tok][Hi][Di] */
    const float *w;        /* [n_tok][Hi] head weights (already scaled) */
    const float *keys;     /* [*][Di] decoded index keys */
    const int32_t *key0;   /* [n_tok] first key row of the token's sequence */
    const int32_t *n_rows; /* [n_tok] rows visible to it, 0 .. max_rows */
    int64_t stride;        /* >= max_rows */
    int max_rows;          /* 1 .. 2^20 (4M tokens at ratio 4): the grid covers this many rows per token */
    int n_tok;             /* 1 .. 2^20 */
    int Hi, Di;            /* Hi * Di <= FG_CUDA_DS4_IDX_MAX_QK, Di <= FG_CUDA_DS4_IDX_MAX_DIM */
} fg_cuda_ds4_index_score_params;

/* The k best rows of each token (score descending, ties to the lower row),
 * written in ascending row order; all n_rows[t] when k >= n_rows[t]. Defined
 * for finite scores (the CPU's order for NaN is an artefact of its insertion). */
typedef struct fg_cuda_ds4_topk_params {
    int32_t *sel;          /* [n_tok][k] out */
    int32_t *n_sel;        /* [n_tok] out: min(k, n_rows[t]) */
    const float *scores;   /* [n_tok][stride] */
    const int32_t *n_rows; /* [n_tok] 0 .. stride */
    int64_t stride;        /* 1 .. 2^22 */
    int n_tok;             /* 1 .. 2^20 */
    int k;                 /* 1 .. FG_CUDA_DS4_TOPK_MAX */
} fg_cuda_ds4_topk_params;

/* FG_CUDA_BAD_SHAPE, FG_CUDA_BAD_POINTER (NULL or not 4-byte aligned),
 * FG_CUDA_BAD_ARCH, or FG_CUDA_OK. */
fg_cuda_status fg_cuda_ds4_index_score_check(const fg_cuda_ds4_index_score_params *p, int sm);
/* Checks, then blocks of 4 warps over (token, 32 rows), a warp per row. */
fg_cuda_status fg_cuda_ds4_index_score(const fg_cuda_ds4_index_score_params *p, const fg_cuda_launch *l);

fg_cuda_status fg_cuda_ds4_topk_check(const fg_cuda_ds4_topk_params *p, int sm);
/* Checks, then one block per token: each row's rank by counting, then the
 * selected rows compacted in row order. O(n^2 / threads) per token. */
fg_cuda_status fg_cuda_ds4_topk(const fg_cuda_ds4_topk_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
