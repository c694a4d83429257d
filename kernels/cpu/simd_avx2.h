/* simd_avx2.h: 8-lane helpers shared by the AVX2 kernels (include it only
 * from files compiled with -mavx2 -mfma): masks and loads for ragged tails,
 * and the one horizontal sum whose order the kernels' bits rely on.
 */
#ifndef FG_SIMD_AVX2_H
#define FG_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* Lanes [0, n) of an 8-lane maskload mask (n >= 8: all, n <= 0: none). */
static inline __m256i lanes8(int n)
{
    static const int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(ones_then_zeros + 8 - (n >= 8 ? 8 : n <= 0 ? 0 : n)));
}

/* 8 floats from p, lanes past n zero and not read. */
static inline __m256 load8(const float *p, int n)
{
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(n));
}

/* Horizontal sum of 8 lanes, always in this order (halves, then pairs): the
 * tree GCC's _mm512_reduce_add_ps takes over the sum of a 16-lane
 * register's halves, so a kernel can match its AVX-512 sibling's bits. */
static inline float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
