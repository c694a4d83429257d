/* kvquant_isa.h: internal to kvquant*.c. The ISA-specific parts of FP4 row
 * quantization and FP8 and FP4 row decoding; kvquant.c keeps the block scale choice
 * and dispatches.
 */
#ifndef FG_KVQUANT_ISA_H
#define FG_KVQUANT_ISA_H

#include <stdint.h>

/* max |x[j]| over 16 floats, NaN skipped (as fmaxf). */
float fg_kv_amax16_avx512(const float *x);

/* The 16 E2M1 codes of x[j] / s (s > 0), two per byte as the FP4 layout
 * stores them, into out[0 .. 8): bit for bit fg_f32_to_e2m1(x[j] / s). */
void fg_kv_fp4_codes16_avx512(const float *x, float s, uint8_t *out);

/* y[i] = scale * fg_e4m3_to_f32(codes[i]) for i < n, bit for bit (NaN codes
 * as fg_e4m3_to_f32 writes them). */
void fg_kv_fp8_dequant_avx512(const uint8_t *codes, float scale, int n, float *y);

/* One FP4 row of n channels (n % 16 == 0) decoded: y[16 k + j] = scale_k *
 * e2m1(code j of block k), bit for bit kvquant.c's loop. */
void fg_kv_fp4_dequant_avx512(const uint8_t *in, int n, float *y);

#endif
