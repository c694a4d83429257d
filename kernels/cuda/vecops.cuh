/* vecops.cuh: the element-wise and row steps of the forward pass on the GPU
 * (launcher only), as kernels/cpu/vecops.h and engine/model/deepseek2/model.c do them:
 *   silu_mul:  g[t][i] = silu(g[t][i]) * u[t][i]
 *   add:       x[i] += y[i]
 *   get_rows:  out[t] = f32(row ids[t] of a [n_rows][n] weight)  (embedding)
 */
#ifndef FG_CUDA_VECOPS_CUH
#define FG_CUDA_VECOPS_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_cuda_silu_mul_params {
    float *g;          /* [n_rows][stride], first n of each row (device) */
    const float *u;    /* [n_rows][stride] (device) */
    int64_t stride;    /* floats, >= n */
    int n_rows, n;
} fg_cuda_silu_mul_params;

fg_cuda_status fg_cuda_silu_mul_check(const fg_cuda_silu_mul_params *p, int sm);
fg_cuda_status fg_cuda_silu_mul(const fg_cuda_silu_mul_params *p, const fg_cuda_launch *l);

typedef struct fg_cuda_add_params {
    float *x;          /* [n] (device) */
    const float *y;    /* [n] (device) */
    int64_t n;         /* >= 1 */
} fg_cuda_add_params;

fg_cuda_status fg_cuda_add_check(const fg_cuda_add_params *p, int sm);
fg_cuda_status fg_cuda_add(const fg_cuda_add_params *p, const fg_cuda_launch *l);

typedef struct fg_cuda_get_rows_params {
    int wtype;         /* FG_WTYPE_F32, _F16, _BF16 or _Q8_0 */
    const void *w;     /* [n_rows][row bytes] (device) */
    int64_t n_rows;    /* rows of w (vocabulary) */
    int n;             /* row width; multiple of 32 for Q8_0 */
    const int32_t *ids;/* [n_tok] row ids; ids outside [0, n_rows) give zero rows (device) */
    float *out;        /* [n_tok][n] (device) */
    int n_tok;
} fg_cuda_get_rows_params;

fg_cuda_status fg_cuda_get_rows_check(const fg_cuda_get_rows_params *p, int sm);
fg_cuda_status fg_cuda_get_rows(const fg_cuda_get_rows_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
