/* kvquant_avx512.c: AVX-512 parts of the FP4 row quantization (kvquant_isa.h).
 * Compiled with AVX-512 flags; kvquant.c calls in only after checking the CPU.
 *
 * E2M1 encoding without the integer rounding routine: the magnitudes are
 * {0, 0.5, 1, 1.5, 2, 3, 4, 6}, so the nearest one (ties to the even code)
 * is the count of the midpoints a value passes, a tie passing the midpoint
 * only where the upper neighbour's code is even: > 0.25, >= 0.75, > 1.25,
 * >= 1.75, > 2.5, >= 3.5, > 5. Everything from 6 up (infinity too) counts all
 * seven: code 7, the saturation of fg_f32_to_e2m1. NaN passes none and loses
 * its sign (E2M1 has no NaN: +0); -0 and negatives that round to 0 keep it.
 */
#include <immintrin.h>

#include "kernels/cpu/kvquant_isa.h"

float fg_kv_amax16_avx512(const float *x)
{
    const __m512 a = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), _mm512_loadu_ps(x));
    /* maxps returns its second operand when either is NaN: a NaN lane gives 0 */
    return _mm512_reduce_max_ps(_mm512_max_ps(a, _mm512_setzero_ps()));
}

void fg_kv_fp4_codes16_avx512(const float *x, float s, uint8_t *out)
{
    const __m512 v = _mm512_div_ps(_mm512_loadu_ps(x), _mm512_set1_ps(s)); /* the reference's division */
    const __m512 a = _mm512_andnot_ps(_mm512_set1_ps(-0.0f), v);
    const __m512i one = _mm512_set1_epi32(1);
    __m512i code = _mm512_setzero_si512();
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.25f), _CMP_GT_OQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.75f), _CMP_GE_OQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.25f), _CMP_GT_OQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.75f), _CMP_GE_OQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.5f), _CMP_GT_OQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, _mm512_set1_ps(3.5f), _CMP_GE_OQ), code, one);
    code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(a, _mm512_set1_ps(5.0f), _CMP_GT_OQ), code, one);
    /* the sign bit (code 8) for every lane but NaN */
    const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(v)) & _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    code = _mm512_mask_or_epi32(code, neg, code, _mm512_set1_epi32(8));
    /* 16 codes -> 16 bytes -> 8 bytes, element 2j in the low nibble of byte j */
    const __m128i b = _mm512_cvtepi32_epi8(code);
    const __m128i pairs = _mm_or_si128(_mm_and_si128(b, _mm_set1_epi16(0x000f)),
                                       _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi16(0x00f0)));
    _mm_storel_epi64((__m128i *)out, _mm_packus_epi16(pairs, _mm_setzero_si128()));
}

/* E4M3 to f32 by its fields: exponent e != 0 rebiased (e + 120) with the
 * mantissa on top, e = 0 the subnormal m * 2^-9 (exact), code 0x7f a quiet
 * NaN; the sign bit on top of all three, as fg_e4m3_to_f32. */
static inline __m512 e4m3_16(__m128i b)
{
    const __m512i v = _mm512_cvtepu8_epi32(b);
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(v, 3), _mm512_set1_epi32(15));
    const __m512i m = _mm512_and_si512(v, _mm512_set1_epi32(7));
    __m512i mag = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 23),
                                  _mm512_slli_epi32(m, 20));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(1.0f / 512.0f));
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), _mm512_castps_si512(sub));
    const __m512i low = _mm512_and_si512(v, _mm512_set1_epi32(0x7f));
    mag = _mm512_mask_mov_epi32(mag, _mm512_cmpeq_epi32_mask(low, _mm512_set1_epi32(0x7f)),
                                _mm512_set1_epi32(0x7fc00000));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(mag, sign));
}

void fg_kv_fp8_dequant_avx512(const uint8_t *codes, float scale, int n, float *y)
{
    const __m512 s = _mm512_set1_ps(scale);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(s, e4m3_16(_mm_loadu_si128((const __m128i *)(const void *)(codes + i)))));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(s, e4m3_16(_mm_maskz_loadu_epi8(m, codes + i))));
    }
}

void fg_kv_fp4_dequant_avx512(const uint8_t *in, int n, float *y)
{
    /* the E2M1 values by code, as kvquant.c's table */
    const __m512 e2m1 = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                       -2.0f, -3.0f, -4.0f, -6.0f);
    const uint8_t *scales = in + n / 2;
    for (int k0 = 0; k0 < n / 16; k0 += 16) {
        const int nb = n / 16 - k0 < 16 ? n / 16 - k0 : 16;
        float s[16];
        _mm512_storeu_ps(s, e4m3_16(_mm_maskz_loadu_epi8((__mmask16)((1u << nb) - 1), scales + k0)));
        for (int k = 0; k < nb; k++) {
            /* byte j: element 2j low nibble, 2j + 1 high */
            const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(in + 8 * (k0 + k)));
            const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(15));
            const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
            const __m512i code = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
            _mm512_storeu_ps(y + 16 * (k0 + k), _mm512_mul_ps(_mm512_set1_ps(s[k]), _mm512_permutexvar_ps(code, e2m1)));
        }
    }
}
