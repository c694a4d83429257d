/* rope.cuh: rotary position embedding on the GPU (launcher only), in place.
 * For token t and vector v, pairs (x[2i], x[2i+1]) of the first n_dims
 * channels rotate by a = pos[t] * inv_freq[i] (computed in double, as
 * engine/model/rope.c does), with cos/sin scaled by mscale. The host computes
 * inv_freq (YaRN blending included) with fg_rope_init and uploads it.
 */
#ifndef FG_CUDA_ROPE_CUH
#define FG_CUDA_ROPE_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CUDA_ROPE_MAX_DIMS 512

typedef struct fg_cuda_rope_params {
    float *x;               /* vector v of token t at x + t * tok_stride + v * vec_stride */
    int64_t tok_stride;     /* floats */
    int64_t vec_stride;     /* floats; >= n_dims when n_vec > 1 */
    int n_tok;              /* >= 1 */
    int n_vec;              /* vectors per token (heads), >= 1 */
    int n_dims;             /* even, 2 .. FG_CUDA_ROPE_MAX_DIMS */
    const int *pos;         /* [n_tok] positions >= 0 (device) */
    const double *inv_freq; /* [n_dims / 2] (device) */
    float mscale;
} fg_cuda_rope_params;

fg_cuda_status fg_cuda_rope_check(const fg_cuda_rope_params *p, int sm);
/* Checks, then launches one thread per pair. */
fg_cuda_status fg_cuda_rope(const fg_cuda_rope_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
