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

/* The largest of v[0..n-1] (ggml's MAX loop from v[0]). */
static inline float max_of(const float *v, int n)
{
    float max = v[0];
    for (int i = 1; i < n; i++)
        max = max > v[i] ? max : v[i];
    return max;
}

/* |x| of 8 values to xval; bit i of the result set where x[i] < 0. */
static inline uint8_t abs_signs8(const float *x, float *xval)
{
    uint8_t s = 0;
    for (int i = 0; i < 8; i++) {
        xval[i] = x[i] >= 0 ? x[i] : -x[i];
        if (x[i] < 0)
            s |= (uint8_t)(1 << i);
    }
    return s;
}

/* abs_signs8 for the types that store 7 signs per 8 values (the eighth from
 * parity: IQ2_XXS, IQ2_XS, IQ3_XXS): an odd count flips the value of least
 * w x^2 (the first such), negating its xval; the 7 low signs returned. */
static inline uint8_t even_signs8(const float *x, const float *w, float *xval)
{
    uint8_t s = abs_signs8(x, xval);
    if (__builtin_popcount(s) % 2) {
        int imin = 0;
        float min = w[0] * x[0] * x[0];
        for (int i = 1; i < 8; i++) {
            float ax = w[i] * x[i] * x[i];
            if (ax < min) {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= (uint8_t)(1 << imin);
    }
    return s & 127;
}

/* ggml's make_qp_quants (quantize.c): non-negative codes in [0, nmax] for x
 * weighted by qw; the scale returned. */
float fg_quant_make_qp(int n, int nmax, const float *x, uint8_t *L, const float *qw);

static inline float sum_squares(const float *x, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return s;
}

#endif
