/* mla_attn.cuh: multi-head latent attention, absorbed form, for a batch of
 * query tokens over the paged, quantized latent cache on the GPU (launcher
 * only). Semantics of kernels/cpu/mla_attn.h for each token t and head h:
 *   s[j]   = scale * (q_lat[t][h] . c_j + q_rope[t][h] . kr_j)     j < n_kv[t]
 *   out[t][h] = sum_j softmax(s)[j] * c_j                          [kv_lora]
 * with c_j, kr_j dequantized from the token's sequence's pages (F32, F16,
 * INT8, FP8 E4M3 with per-row scale, FP4 E2M1 with E4M3 scales per 16).
 * One pass with an online softmax per (token, head) block.
 */
#ifndef FG_CUDA_MLA_ATTN_CUH
#define FG_CUDA_MLA_ATTN_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CUDA_MLA_MAX_LATENT 1024 /* kv_lora limit: 8 channels per thread of 128 */
#define FG_CUDA_MLA_MAX_ROPE 256
#define FG_CUDA_MLA_MAX_HEADS 1024

typedef struct fg_cuda_mla_attn_params {
    int n_tok;                     /* query tokens, >= 1 */
    int n_head;                    /* H */
    int kv_lora;                   /* L, 1 .. FG_CUDA_MLA_MAX_LATENT */
    int n_rope;                    /* R, 1 .. FG_CUDA_MLA_MAX_ROPE */
    float scale;                   /* softmax scale */
    int format;                    /* fg_kv_format of both segments */
    size_t latent_bytes;           /* fg_kv_bytes(format, L) */
    size_t row_bytes;              /* bytes between rows, >= latent + rope bytes */
    size_t layer_offset;           /* this layer's rows inside a page */
    const uint8_t *const *pages;   /* device page addresses of every sequence, concatenated (device) */
    const int *tok_page0;          /* [n_tok] index in pages of the token's sequence's first page (device) */
    const int *tok_n_kv;           /* [n_tok] cached rows the token attends over, >= 1 (device) */
    const float *q_lat;            /* [n_tok][H][L] (device) */
    const float *q_rope;           /* head h of token t at q_rope + t * rope_tok_stride + h * rope_head_stride */
    int64_t rope_tok_stride, rope_head_stride; /* floats */
    float *out;                    /* [n_tok][H][L] (device) */
} fg_cuda_mla_attn_params;

/* FG_CUDA_BAD_TYPE (format), FG_CUDA_BAD_SHAPE (widths over the limits, FP4
 * widths not multiples of 16, latent_bytes or row_bytes inconsistent with the
 * format), FG_CUDA_BAD_POINTER, FG_CUDA_BAD_ARCH, or FG_CUDA_OK. The n_kv of
 * each token lives on the device: the caller guarantees the pages hold them. */
fg_cuda_status fg_cuda_mla_attn_check(const fg_cuda_mla_attn_params *p, int sm);
/* Checks, then launches one 128-thread block per (token, head). */
fg_cuda_status fg_cuda_mla_attn(const fg_cuda_mla_attn_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
