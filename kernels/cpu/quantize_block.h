/* quantize_block.h: what the quantizer files share, internal to
 * kernels/cpu/quantize.c and the lattice quantizers (quantize_iq*.c): ggml's rounding,
 * the F16 store and the importance weights, each in ggml's order of float
 * operations (all quantize*.c files are compiled with -ffp-contract=off, quantize.h). */
#ifndef FG_QUANTIZE_BLOCK_H
#define FG_QUANTIZE_BLOCK_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/numeric.h"

/* One block of x to b; qw the block's importance weights or NULL, row_sigma2
 * the row's mean square (the legacy types' weights use it). */
typedef void (*fg_quant_block_fn)(const float *x, uint8_t *b, const float *qw, float row_sigma2);

/* Round to nearest, ties to even, for |f| < 2^22: adding 1.5 * 2^23 leaves
 * the integer in the low mantissa bits (ggml's nearest_int, bit for bit). */
static inline int nearest_int(float f)
{
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline void put_f16(uint8_t *p, float f)
{
    uint16_t h = fg_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* The weights of the importance-weighted searches: the column's importance
 * times the value's size against the block's spread, sqrt(sigma2 + x^2). */
static inline void imatrix_weights(const float *x, const float *qw, float sigma2, int n, float *w)
{
    for (int i = 0; i < n; i++)
        w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]);
}

static inline float sum_squares(const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return s;
}

#endif
