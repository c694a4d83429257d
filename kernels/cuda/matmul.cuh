/* matmul.cuh: batched products of weight matrices with activation rows on the
 * GPU (launcher only); the semantics of kernels/cpu/matmul.h per weight type:
 *
 *   y[m][t][o] = sum_i W_m[o][i] * x[m][t][i]     m < n_mat, t < n_tok, o < n_out
 *
 * F32, F16, BF16: the weight widened to f32 exactly, f32 products and sums.
 * Q8_0: every activation row is first quantized to Q8_0 blocks exactly as
 * fg_quantize_row_q8_0 does (into q8_scratch), then per block an integer dot
 * scaled by d_w * d_x.
 * MXFP4 (V4's routed experts): the same Q8_0 activations; per 32-block the
 * integer dot of the doubled E2M1 values with them, scaled by 2^(e - 128) * d_x
 * (ggml's mxfp4 x q8_0 dot, the CPU's reference). Sums run in another order
 * than the CPU's, so results agree within a normalised error, not bit for bit.
 *
 * n_mat > 1 runs one product per matrix of a stack in one launch: per-head
 * projections (k_b, v_b) read and write column blocks of wider rows through
 * the strides, so no gather or scatter copies are needed.
 */
#ifndef FG_CUDA_MATMUL_CUH
#define FG_CUDA_MATMUL_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_cuda_matmul_params {
    int wtype;               /* FG_WTYPE_F32, _F16, _BF16, _Q8_0 or _MXFP4 (kernels/cpu/matmul.h) */
    const void *w;           /* matrix m: [n_out][row bytes] at w + m * w_mat_bytes (device) */
    size_t w_mat_bytes;      /* >= n_out * row bytes when n_mat > 1 */
    int n_in;                /* multiple of 32 for Q8_0 and MXFP4 */
    int n_out;
    int n_tok;
    int n_mat;               /* 1 .. 65535 */
    const float *x;          /* row t of matrix m: x + m * x_mat_stride + t * x_stride */
    int64_t x_stride, x_mat_stride;   /* floats */
    float *y;                /* row t of matrix m: y + m * y_mat_stride + t * y_stride */
    int64_t y_stride, y_mat_stride;   /* floats */
    void *q8_scratch;        /* Q8_0 and MXFP4: fg_cuda_matmul_scratch_bytes(), 4-byte aligned */
} fg_cuda_matmul_params;

/* Bytes of q8_scratch for n_mat * n_tok rows of n_in (0 for other types). */
size_t fg_cuda_matmul_scratch_bytes(int wtype, int n_in, int n_tok, int n_mat);

/* FG_CUDA_BAD_TYPE (wtype), FG_CUDA_BAD_SHAPE (dimensions, Q8_0/MXFP4 n_in % 32,
 * strides shorter than a row), FG_CUDA_BAD_POINTER (NULL, misaligned for the
 * type, missing scratch), FG_CUDA_BAD_ARCH, or FG_CUDA_OK. */
fg_cuda_status fg_cuda_matmul_check(const fg_cuda_matmul_params *p, int sm);
/* Checks, then (Q8_0, MXFP4) quantizes the activations and launches one warp per
 * output row and tile of tokens: each weight row is read once per tile. */
fg_cuda_status fg_cuda_matmul(const fg_cuda_matmul_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
