/* exp_avx512.h: e^x on 16 lanes, for the AVX-512 kernels (include it only
 * from files compiled with AVX-512 flags).
 *
 * x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 split in two
 * parts, so r is exact to f32 rounding), e^r by its Taylor polynomial to
 * degree 7 (truncation below 6e-9 relative), then scaled by 2^n with
 * vscalefps, which gives inf and 0 (through the subnormals) where expf does.
 * Measured against expf over [-88, 88]: within 2 ulp.
 */
#ifndef FG_EXP_AVX512_H
#define FG_EXP_AVX512_H

#include <immintrin.h>

static inline __m512 fg_exp_avx512(__m512 x)
{
    /* beyond +-150 the result is inf or 0 anyway; the clamp keeps n finite.
     * min/max return their second operand for NaN, so NaN passes through. */
    x = _mm512_max_ps(_mm512_set1_ps(-150.0f), _mm512_min_ps(_mm512_set1_ps(150.0f), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);   /* ln2 high part: 16 bits */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);    /* ln2 - high part */
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif
