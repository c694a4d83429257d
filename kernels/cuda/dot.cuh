/* dot.cuh: device helpers shared by the matrix-product ops (matmul.cu,
 * moe_experts.cu, vecops.cu): Q8_0 activation quantization as
 * fg_quantize_row_q8_0 does it (for Q8_0 and MXFP4 weights), and one warp's
 * products of a weight row with a tile of activation rows. Device code only. */
#ifndef FG_CUDA_DOT_CUH
#define FG_CUDA_DOT_CUH

extern "C" { /* plain C headers without their own linkage guards */
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"
}
#include "kernels/cuda/convert.cuh"

#define FG_MM_TILE 8 /* activation rows per warp pass: each weight element is loaded once for them */

/* Weight types whose products read the activations quantized to Q8_0 (kernels/cpu/matmul.h). */
static __host__ __device__ __forceinline__ bool fg_d_reads_q8(int wtype)
{
    return wtype == FG_WTYPE_Q8_0 || wtype == FG_WTYPE_MXFP4;
}

/* ggml's doubled E2M1 values: code -> 2 * e2m1, integers in [-12, 12]. */
static __device__ __forceinline__ int8_t fg_d_mxfp4_value2(uint8_t code)
{
    const int8_t mags[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    return (code & 8) ? (int8_t)-mags[code & 7] : mags[code & 7];
}

/* One Q8_0 block of 32 floats: d = amax / 127 as f16, q = round(x / d) (numeric.c). */
static __device__ void fg_d_quantize_block_q8_0(const float *x, fg_block_q8_0 *y)
{
    float amax = 0.0f;
    for (int j = 0; j < FG_Q8_0_BLOCK; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y->d = fg_d_f32_to_f16(d);
    for (int j = 0; j < FG_Q8_0_BLOCK; j++)
        y->qs[j] = fg_d_round_i8(x[j] * id);
}

/* Quantizes activation rows, one thread per block: row t of matrix m (x + m * x_mat_stride
 * + t * x_stride, nb blocks) into y + (m * n_tok + t) * nb; total = n_mat * n_tok * nb. */
static __global__ void fg_quantize_rows_q8_0_kernel(const float *x, int64_t x_stride, int64_t x_mat_stride,
                                                    int n_tok, int nb, fg_block_q8_0 *y, int64_t total)
{
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= total)
        return;
    const int b = (int)(idx % nb);
    const int64_t row = idx / nb;
    const int t = (int)(row % n_tok), m = (int)(row / n_tok);
    fg_d_quantize_block_q8_0(x + m * x_mat_stride + t * x_stride + (int64_t)b * FG_Q8_0_BLOCK, y + idx);
}

static inline fg_cuda_status fg_quantize_rows_q8_0(const float *x, int64_t x_stride, int64_t x_mat_stride,
                                                   int n_tok, int n_mat, int n_in, void *y, cudaStream_t st)
{
    const int nb = n_in / FG_Q8_0_BLOCK;
    const int64_t total = (int64_t)n_mat * n_tok * nb;
    const int64_t blocks = (total + 255) / 256;
    if (blocks > 0x7fffffff)
        return FG_CUDA_BAD_SHAPE;
    fg_quantize_rows_q8_0_kernel<<<(unsigned)blocks, 256, 0, st>>>(x, x_stride, x_mat_stride, n_tok, nb,
                                                                    (fg_block_q8_0 *)y, total);
    return fg_cuda_check_launch();
}

/* Weight row `w` (n_in elements of wtype) times rows x_t, t < n_t (<= FG_MM_TILE),
 * summed over the warp: lane 0 gets acc[t]. x rows are f32 (x0 + t * x_stride), or
 * for Q8_0 and MXFP4 the quantized rows q0 + t * nb. Per 32-block an integer dot of
 * the block's int8 weights (Q8_0: as stored; MXFP4: the doubled E2M1 values, low
 * nibbles the first 16, high the last 16) with the activation's int8, scaled by
 * d_w * d_x (MXFP4: d_w = 2^(e - 128)), as the CPU's scalar reference. */
static __device__ __forceinline__ void fg_d_warp_dot(int wtype, const uint8_t *w, int n_in, const float *x0,
                                                     int64_t x_stride, const fg_block_q8_0 *q0, int n_t,
                                                     float acc[FG_MM_TILE])
{
    const int lane = threadIdx.x % 32;
    for (int t = 0; t < FG_MM_TILE; t++)
        acc[t] = 0.0f;
    if (fg_d_reads_q8(wtype)) {
        const int nb = n_in / FG_Q8_0_BLOCK;
        for (int b = lane; b < nb; b += 32) {
            int8_t wq[FG_Q8_0_BLOCK];
            float dw;
            if (wtype == FG_WTYPE_Q8_0) {
                const uint8_t *wb = w + (size_t)b * sizeof(fg_block_q8_0);
                dw = fg_d_f16_to_f32((uint16_t)(wb[0] | wb[1] << 8));
                for (int j = 0; j < FG_Q8_0_BLOCK; j++)
                    wq[j] = (int8_t)wb[2 + j];
            } else {
                const uint8_t *wb = w + (size_t)b * sizeof(fg_block_mxfp4); /* e, then 16 bytes of codes */
                dw = fg_d_mxfp4_half_scale(wb[0]);
                for (int j = 0; j < FG_MXFP4_BLOCK / 2; j++) {
                    wq[j] = fg_d_mxfp4_value2(wb[1 + j] & 15);
                    wq[j + FG_MXFP4_BLOCK / 2] = fg_d_mxfp4_value2(wb[1 + j] >> 4);
                }
            }
            for (int t = 0; t < n_t; t++) {
                const fg_block_q8_0 *xb = q0 + (size_t)t * nb + b;
                int32_t isum = 0;
                for (int j = 0; j < FG_Q8_0_BLOCK; j++)
                    isum += (int32_t)wq[j] * (int32_t)xb->qs[j];
                acc[t] += (float)isum * (dw * fg_d_f16_to_f32(xb->d));
            }
        }
    } else {
        for (int i = lane; i < n_in; i += 32) {
            float wv;
            if (wtype == FG_WTYPE_F32)
                wv = ((const float *)w)[i];
            else if (wtype == FG_WTYPE_F16)
                wv = fg_d_f16_to_f32(((const uint16_t *)w)[i]);
            else
                wv = fg_d_bf16_to_f32(((const uint16_t *)w)[i]);
            for (int t = 0; t < n_t; t++)
                acc[t] += wv * x0[t * x_stride + i];
        }
    }
    for (int t = 0; t < n_t; t++)
        acc[t] = fg_warp_sum(acc[t]);
}

#endif
