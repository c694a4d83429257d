/* quant_decode_avx2.h: test_quants' door to the fast kernels' AVX2 decoders
 * (quant_decode_avx2.c). */
#ifndef FG_TEST_QUANT_DECODE_AVX2_H
#define FG_TEST_QUANT_DECODE_AVX2_H

#include <stdint.h>

/* qd_decode of matmul_quant_decode.h: n_blocks blocks of wtype into v, s, m
 * as fg_quant_decode; returns 0 (nothing written) for a type it has no
 * decoder for. Only where the CPU has AVX2 and F16C. */
int fg_test_qd_decode(int wtype, const void *blocks, int n_blocks, int8_t *v, float *s, float *m);

#endif
