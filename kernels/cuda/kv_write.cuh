/* kv_write.cuh: stores new rows of the paged latent KV cache on the GPU
 * (launcher only), in the formats of kernels/cpu/kvquant.h, bit for bit as
 * fg_kv_quantize writes them (the conversions are integer-exact ports).
 *
 * For token t the source row is [latent: kv_lora][rope key: n_rope] f32; the
 * destination is rows[t] + layer_offset: latent segment then, latent_bytes
 * further, the rope segment (layout: kernels/cpu/mla_attn.h).
 */
#ifndef FG_CUDA_KV_WRITE_CUH
#define FG_CUDA_KV_WRITE_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_cuda_kv_write_params {
    int format;              /* fg_kv_format */
    const float *src;        /* [n_tok][src_stride]: latent then rope key (device) */
    int64_t src_stride;      /* floats, >= kv_lora + n_rope */
    int kv_lora;             /* 1 .. 4096; FP4: multiple of 16 */
    int n_rope;              /* 1 .. 4096; FP4: multiple of 16 */
    size_t latent_bytes;     /* fg_kv_bytes(format, kv_lora) */
    uint8_t *const *rows;    /* [n_tok] device address of each token's row in layer 0 */
    size_t layer_offset;     /* bytes added to each row address (this layer) */
    int n_tok;
} fg_cuda_kv_write_params;

/* FG_CUDA_BAD_TYPE (format), FG_CUDA_BAD_SHAPE (widths, latent_bytes that does
 * not match the format), FG_CUDA_BAD_POINTER, FG_CUDA_BAD_ARCH, FG_CUDA_OK. */
fg_cuda_status fg_cuda_kv_write_check(const fg_cuda_kv_write_params *p, int sm);
/* Checks, then launches one warp per token and segment. */
fg_cuda_status fg_cuda_kv_write(const fg_cuda_kv_write_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
