/* ds4_compress.cuh: DeepSeek V4 compressor pooling on the GPU (launcher only).
 * CPU reference: kernels/cpu/ds4_ops.h fg_ds4_pool_csa, fg_ds4_hca_fold,
 * fg_ds4_hca_row (what engine/model/deepseek4/forward.c calls). The pooled
 * rows' RMSNorm and RoPE are the rmsnorm and rope ops.
 */
#ifndef FG_CUDA_DS4_COMPRESS_CUH
#define FG_CUDA_DS4_COMPRESS_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CUDA_DS4_MAX_RATIO 128    /* HCA; CSA is 4 */
#define FG_CUDA_DS4_MAX_WIDTH 4096   /* channels of a pooled row (V4: D = 512, Di = 128) */

/* CSA (ratio 4, overlapping): closed blocks, each pooled with its previous
 * block's entries. Entry layout as the CPU state: [r][2][2 width] (k | score). */
typedef struct fg_cuda_ds4_pool_csa_params {
    float *row;            /* [n_blocks][width] out */
    const float *cur;      /* [n_blocks][r][2][2 width] the closed blocks */
    const float *prev;     /* [n_blocks][r][2][2 width] their previous blocks; NULL: none has one */
    const int32_t *has_prev; /* [n_blocks] 0: block 0 of its sequence (its prev not read); NULL: all 1 */
    int n_blocks;          /* 1 .. 2^20 */
    int r;                 /* 1 .. FG_CUDA_DS4_MAX_RATIO */
    int width;             /* 1 .. FG_CUDA_DS4_MAX_WIDTH */
} fg_cuda_ds4_pool_csa_params;

/* HCA (ratio 128): per sequence, n tokens at positions pos0 .. pos0 + n - 1
 * fold into the sequence's online-softmax state in position order; each
 * token that closes a block (position % ratio == ratio - 1) writes its row. */
typedef struct fg_cuda_ds4_hca_params {
    float *state;          /* [n_seq][3][D] running max, sum, weighted k (kept between calls) */
    float *rows;           /* [*][D] out: the row of the block closed at position p goes to
                            * rows[row0[s] + (p / ratio - pos0[s] / ratio)] */
    const float *k;        /* [n_tok][D] */
    const float *g;        /* [n_tok][D] scores before ape */
    const float *ape;      /* [ratio][D] */
    const int32_t *tok0;   /* [n_seq] first token of the sequence in k, g */
    const int32_t *n_tok;  /* [n_seq] its count (0 allowed) */
    const int32_t *pos0;   /* [n_seq] position of its first token (>= 0) */
    const int32_t *row0;   /* [n_seq] */
    int n_seq;             /* 1 .. 2^16 */
    int ratio;             /* 1 .. FG_CUDA_DS4_MAX_RATIO */
    int D;                 /* 1 .. FG_CUDA_DS4_MAX_WIDTH */
} fg_cuda_ds4_hca_params;

/* FG_CUDA_BAD_SHAPE, FG_CUDA_BAD_POINTER (NULL or not 4-byte aligned),
 * FG_CUDA_BAD_ARCH, or FG_CUDA_OK. */
fg_cuda_status fg_cuda_ds4_pool_csa_check(const fg_cuda_ds4_pool_csa_params *p, int sm);
/* Checks, then one thread per (block, channel). */
fg_cuda_status fg_cuda_ds4_pool_csa(const fg_cuda_ds4_pool_csa_params *p, const fg_cuda_launch *l);

fg_cuda_status fg_cuda_ds4_hca_check(const fg_cuda_ds4_hca_params *p, int sm);
/* Checks, then one thread per (sequence, channel), tokens in order. */
fg_cuda_status fg_cuda_ds4_hca(const fg_cuda_ds4_hca_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
