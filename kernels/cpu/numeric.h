/* numeric.h: scalar conversions between float and the storage formats
 * (F16, BF16, FP8 E4M3, FP4 E2M1, E8M0) and the Q8_0 and MXFP4 block layouts.
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

/* E8M0, the scale of the OCP microscaling formats: 2^(e - 127), no sign, no
 * mantissa; e = 0xFF is NaN. */
float fg_e8m0_to_f32(uint8_t e);

#define FG_MXFP4_BLOCK 32
/* ggml's block_mxfp4 (type 39), OCP MXFP4: 32 E2M1 values sharing one E8M0
 * scale, 17 bytes:
 *   e      scale byte, E8M0: the block's values are multiplied by 2^(e - 127)
 *   qs[j]  E2M1 codes (fg_e2m1_to_f32); the low nibble is value j, the high
 *          nibble value j + 16 (j < 16)
 * so value i = fg_e2m1_to_f32(code i) * fg_e8m0_to_f32(e). ggml writes the
 * same numbers as 2 * E2M1 (integers in [-12, 12]) times 2^(e - 128). */
typedef struct fg_block_mxfp4 {
    uint8_t e;
    uint8_t qs[FG_MXFP4_BLOCK / 2];
} fg_block_mxfp4;

/* Quantizes n floats (n % 32 == 0) to MXFP4 blocks, byte for byte as ggml's
 * quantize_row_mxfp4_ref (with the same log2f): per block e = floor(log2f(amax))
 * - 2 + 127, clamped to [0, 254] (below 2^-125 and for infinities, where
 * ggml's conversion is undefined), then each value to the nearest E2M1 value
 * of x / 2^(e - 127), ties toward zero, saturating at 6, zero as +0 (so NaN
 * as +0). Returns 0, or -1 if x holds a NaN or an infinity (the blocks are
 * still written, but a file must not be made of them). */
int fg_quantize_row_mxfp4(const float *x, fg_block_mxfp4 *y, int64_t n);
/* n values of n / 32 blocks, from the definition above (code 8 gives -0.0,
 * e = 0xFF NaN; ggml gives +0.0 and 2^127 there). */
void fg_dequantize_row_mxfp4(const fg_block_mxfp4 *x, float *y, int64_t n);
/* Checks an MXFP4 matrix [n_rows][n_in] (n_in % 32 == 0) for blocks that do
 * not stand for finite numbers: a scale byte 0xFF (E8M0 NaN), or a scale so
 * large that one of the block's values overflows f32 (e >= 253 with large
 * codes). A loader calls this once per tensor and refuses the file, naming
 * the tensor, rather than compute NaNs and infinities. Returns 0 if every
 * block is valid; -1 otherwise, with *bad_row and *bad_block (either may be
 * NULL) the first bad block's row and block index in its row, or both -1 if
 * the shape itself is invalid (n_in not a positive multiple of 32, n_rows < 0,
 * w NULL with rows to check). */
int fg_mxfp4_validate_rows(const void *w, int64_t n_in, int64_t n_rows, int64_t *bad_row, int64_t *bad_block);

/* Quantizes n floats (n % 32 == 0) to Q8_0 blocks as ggml does:
 * d = amax / 127, q = round(x / d). */
void fg_quantize_row_q8_0(const float *x, fg_block_q8_0 *y, int64_t n);
void fg_dequantize_row_q8_0(const fg_block_q8_0 *x, float *y, int64_t n);

#endif
