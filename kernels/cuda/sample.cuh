/* sample.cuh: choosing next tokens from logits on the GPU (launcher only),
 * one row per sequence, with the rules of engine/serve/sampler.h:
 *  - temperature 0: argmax, lowest id on ties, NaN skipped;
 *  - otherwise: the top_k best logits (1 .. FG_CUDA_SAMPLE_MAX_K; top_k "off"
 *    or larger is not done here, the caller samples on the host), softmax at
 *    the temperature, top-p and min-p cuts, then one draw with the row's
 *    uniform number u in [0, 1) that the host took from the sequence's RNG.
 */
#ifndef FG_CUDA_SAMPLE_CUH
#define FG_CUDA_SAMPLE_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CUDA_SAMPLE_MAX_K 256

typedef struct fg_cuda_sample_row {
    float temperature;   /* >= 0 */
    int top_k;           /* 1 .. FG_CUDA_SAMPLE_MAX_K when temperature > 0 */
    float top_p;         /* (0, 1] */
    float min_p;         /* [0, 1) */
    double u;            /* uniform draw in [0, 1) */
} fg_cuda_sample_row;

typedef struct fg_cuda_sample_params {
    const float *logits;             /* [n_rows][stride] (device) */
    int64_t stride;                  /* floats, >= n_vocab */
    int n_rows;
    int n_vocab;
    const fg_cuda_sample_row *rows;  /* [n_rows] (device) */
    int max_top_k;                   /* the largest top_k of the non-greedy rows (host-known), 0 if all greedy */
    int32_t *out;                    /* [n_rows] chosen ids (device) */
} fg_cuda_sample_params;

/* FG_CUDA_BAD_SHAPE also when max_top_k is outside [0, FG_CUDA_SAMPLE_MAX_K]. */
fg_cuda_status fg_cuda_sample_check(const fg_cuda_sample_params *p, int sm);
/* Checks, then launches one block per row. Rows whose top_k is outside
 * [1, max_top_k] are clamped into it (never read out of bounds). */
fg_cuda_status fg_cuda_sample(const fg_cuda_sample_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
