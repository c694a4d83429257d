/* numeric.h: scalar conversions between float and the storage formats
 * (F16, BF16, FP8 E4M3, FP4 E2M1) and the Q8_0 block layout.
 * Pure functions; safe from any thread. These are the reference conversions:
 * every vectorised path must agree with them bit for bit.
 */
#ifndef FG_NUMERIC_H
#define FG_NUMERIC_H

#include <stdint.h>

#define FG_Q8_0_BLOCK 32
/* ggml's block_q8_0: 32 int8 values and one F16 scale (34 bytes). */
typedef struct fg_block_q8_0 {
    uint16_t d;                 /* F16 scale */
    int8_t qs[FG_Q8_0_BLOCK];   /* value = d * qs[i] */
} fg_block_q8_0;

float fg_f16_to_f32(uint16_t h);
uint16_t fg_f32_to_f16(float f);        /* round to nearest even, saturates to inf like IEEE */
float fg_bf16_to_f32(uint16_t h);
uint16_t fg_f32_to_bf16(float f);       /* round to nearest even; NaN stays NaN */

/* OCP FP8 E4M3 (no infinities, 0x7f/0xff NaN, max 448). Encoding saturates to
 * +-448 and rounds to nearest even. */
float fg_e4m3_to_f32(uint8_t v);
uint8_t fg_f32_to_e4m3(float f);

/* FP4 E2M1 code (low 4 bits): values {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign.
 * Encoding saturates to +-6 and rounds to nearest (ties to even code). */
float fg_e2m1_to_f32(uint8_t code);
uint8_t fg_f32_to_e2m1(float f);

/* Quantizes n floats (n % 32 == 0) to Q8_0 blocks as ggml does:
 * d = amax / 127, q = round(x / d). */
void fg_quantize_row_q8_0(const float *x, fg_block_q8_0 *y, int64_t n);
void fg_dequantize_row_q8_0(const fg_block_q8_0 *x, float *y, int64_t n);

#endif
