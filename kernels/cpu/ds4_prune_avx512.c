/* ds4_prune_avx512.c: fg_ds4_prune_scores with VNNI: 16 rows per vector
 * (lane j: row j's two int16 values of a pair of channels), one vpdpwssd per
 * head, pair and 16 rows; the four vectors of a tile's 64 rows share one
 * broadcast of the query's pair. The integer dots are exact and the rest is
 * the scalar loop's fused multiply-adds per lane, so the bits are the same.
 * Compiled with AVX-512 flags; ds4_prune.c calls in after checking. */
#include <immintrin.h>

#include "kernels/cpu/ds4_dots_isa.h"
#include "kernels/cpu/ds4_ops.h"

#define T FG_DS4_PRUNE_TILE

void fg_ds4_prune_scores_avx512(const int32_t *qp, const float *alpha, const float *w, int Hi, int Di,
                                const int32_t *pk, const float *ps, int n, float *pre)
{
    const int G = Di / 2, NB = Di / 16;
    const __m512 zero = _mm512_setzero_ps();
    __m512 s0 = zero, s1 = zero, s2 = zero, s3 = zero;
    for (int h = 0; h < Hi; h++) {
        const int32_t *qh = qp + (size_t)h * G;
        __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
        for (int b = 0; b < NB; b++) {
            __m512i d0 = _mm512_setzero_si512(), d1 = d0, d2 = d0, d3 = d0;
            const int32_t *p = pk + (size_t)8 * b * T;
            for (int g = 0; g < 8; g++, p += T) {
                const __m512i q = _mm512_set1_epi32(qh[8 * b + g]);
                d0 = _mm512_dpwssd_epi32(d0, _mm512_loadu_si512(p), q);
                d1 = _mm512_dpwssd_epi32(d1, _mm512_loadu_si512(p + 16), q);
                d2 = _mm512_dpwssd_epi32(d2, _mm512_loadu_si512(p + 32), q);
                d3 = _mm512_dpwssd_epi32(d3, _mm512_loadu_si512(p + 48), q);
            }
            const float *sc = ps + (size_t)b * T;
            a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_loadu_ps(sc), a0);
            a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_loadu_ps(sc + 16), a1);
            a2 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d2), _mm512_loadu_ps(sc + 32), a2);
            a3 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d3), _mm512_loadu_ps(sc + 48), a3);
        }
        const __m512 al = _mm512_set1_ps(alpha[h]), wh = _mm512_set1_ps(w[h]);
#define HEAD(v)                                                                                               \
    do {                                                                                                      \
        const __m512 p = _mm512_mul_ps(a##v, al);                                                             \
        s##v = _mm512_mask_mov_ps(s##v, _mm512_cmp_ps_mask(p, zero, _CMP_GT_OQ), _mm512_fmadd_ps(wh, p, s##v)); \
    } while (0)
        HEAD(0);
        HEAD(1);
        HEAD(2);
        HEAD(3);
#undef HEAD
    }
    const __m512 s[4] = {s0, s1, s2, s3};
    for (int v = 0; v < 4 && 16 * v < n; v++) {
        const int m = n - 16 * v;
        _mm512_mask_storeu_ps(pre + 16 * v, m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1), s[v]);
    }
}

void fg_ds4_prune_pack_avx512(const uint8_t *const *keys, int n, int Di, int32_t *pk, float *ps, float *k1,
                              const fg_ds4_prune_tables *t)
{
    const int G = Di / 2, NB = Di / 16;
    const __m512i tlo = _mm512_loadu_si512(t->lo), thi = _mm512_loadu_si512(t->hi), m15 = _mm512_set1_epi32(15);
    /* 16 pairs of every row in row order through the tables, then transposed into pk */
    int32_t rows[T * 16];
    for (int g = 0; g < G; g += 16) {
        const int ng = G - g < 16 ? G - g : 16; /* 8 in the last group when Di % 32 */
        const __mmask16 mg = (__mmask16)((1u << ng) - 1);
        for (int j = 0; j < T; j++) {
            __m512i x = _mm512_setzero_si512();
            if (j < n)
                x = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mg, keys[j] + g));
            const __m512i lo = _mm512_permutexvar_epi32(_mm512_and_si512(x, m15), tlo);
            const __m512i hi = _mm512_permutexvar_epi32(_mm512_srli_epi32(x, 4), thi);
            _mm512_mask_storeu_epi32(rows + ng * j, mg, _mm512_or_si512(lo, hi));
        }
        fg_ds4_transpose_avx512((const float *)(const void *)rows, T, ng, (float *)(void *)(pk + (size_t)g * T), T);
    }
    for (int b = 0; b < NB; b++)
        for (int j = 0; j < T; j++)
            ps[(size_t)b * T + j] = j < n ? t->e4m3[keys[j][G + b]] : 0;
    const __m512i ones = _mm512_set1_epi16(1);
    for (int v = 0; v < T; v += 16) {
        __m512 sum = _mm512_setzero_ps();
        for (int b = 0; b < NB; b++) {
            __m512i bs = _mm512_setzero_si512();
            for (int g = 8 * b; g < 8 * b + 8; g++)
                bs = _mm512_add_epi32(bs, _mm512_madd_epi16(_mm512_abs_epi16(_mm512_loadu_si512(pk + (size_t)g * T + v)), ones));
            sum = _mm512_add_ps(sum, _mm512_mul_ps(_mm512_cvtepi32_ps(bs), _mm512_loadu_ps(ps + (size_t)b * T + v)));
        }
        _mm512_storeu_ps(k1 + v, _mm512_mul_ps(sum, _mm512_set1_ps(0.5f * FG_DS4_PRUNE_K1_UP)));
    }
}

int fg_ds4_prune_mark_avx512(const float *pre, const float *k1, const float *ab, int n, int k, uint64_t *mask,
                             float *lo, float *tmp)
{
    const __m512 a0 = _mm512_set1_ps(ab[0]), a1 = _mm512_set1_ps(ab[1]);
    for (int r = 0; r < n; r += 16) {
        const __mmask16 m = n - r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - r)) - 1);
        const __m512 b = _mm512_add_ps(_mm512_mul_ps(a0, _mm512_maskz_loadu_ps(m, k1 + r)), a1);
        _mm512_mask_storeu_ps(lo + r, m, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, pre + r), b));
    }
    const __m512 fl = _mm512_set1_ps(fg_ds4_kth(lo, n, k, tmp));
    int count = 0;
    for (int r0 = 0; r0 < n; r0 += 64) {
        uint64_t word = 0;
        for (int r = r0; r < r0 + 64 && r < n; r += 16) {
            const __mmask16 m = n - r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - r)) - 1);
            const __m512 b = _mm512_add_ps(_mm512_mul_ps(a0, _mm512_maskz_loadu_ps(m, k1 + r)), a1);
            const __m512 hi = _mm512_add_ps(_mm512_maskz_loadu_ps(m, pre + r), b);
            word |= (uint64_t)_mm512_mask_cmp_ps_mask(m, hi, fl, _CMP_NLT_UQ) << (r - r0); /* a NaN is kept */
        }
        mask[r0 / 64] = word;
        count += __builtin_popcountll(word);
    }
    return count;
}

void fg_ds4_index_score_rows_avx512(const float *qt, const float *w, int Hi, int Di, const float *keys, const int *idx,
                                    int m, float *dots, float *out)
{
    for (int c0 = 0; c0 < m; c0 += 4) {
        const float *k0 = keys + (size_t)idx[c0] * Di;
        const float *k1 = keys + (size_t)idx[c0 + 1 < m ? c0 + 1 : c0] * Di;
        const float *k2 = keys + (size_t)idx[c0 + 2 < m ? c0 + 2 : c0] * Di;
        const float *k3 = keys + (size_t)idx[c0 + 3 < m ? c0 + 3 : c0] * Di;
        if (Hi <= 8) { /* half vectors: two per cycle here, against one of the full */
            const __mmask8 hm = (__mmask8)((1u << Hi) - 1);
            __m256 d0 = _mm256_setzero_ps(), d1 = d0, d2 = d0, d3 = d0;
            for (int i = 0; i < Di; i++) {
                const __m256 q = _mm256_maskz_loadu_ps(hm, qt + (size_t)i * Hi);
                d0 = _mm256_add_ps(d0, _mm256_mul_ps(q, _mm256_set1_ps(k0[i])));
                d1 = _mm256_add_ps(d1, _mm256_mul_ps(q, _mm256_set1_ps(k1[i])));
                d2 = _mm256_add_ps(d2, _mm256_mul_ps(q, _mm256_set1_ps(k2[i])));
                d3 = _mm256_add_ps(d3, _mm256_mul_ps(q, _mm256_set1_ps(k3[i])));
            }
            _mm256_mask_storeu_ps(dots, hm, d0);
            _mm256_mask_storeu_ps(dots + Hi, hm, d1);
            _mm256_mask_storeu_ps(dots + 2 * Hi, hm, d2);
            _mm256_mask_storeu_ps(dots + 3 * Hi, hm, d3);
        }
        for (int h0 = 0; h0 < Hi && Hi > 8; h0 += 16) {
            const __mmask16 hm = Hi - h0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (Hi - h0)) - 1);
            __m512 d0 = _mm512_setzero_ps(), d1 = d0, d2 = d0, d3 = d0;
            for (int i = 0; i < Di; i++) {
                const __m512 q = _mm512_maskz_loadu_ps(hm, qt + (size_t)i * Hi + h0);
                d0 = _mm512_add_ps(d0, _mm512_mul_ps(q, _mm512_set1_ps(k0[i])));
                d1 = _mm512_add_ps(d1, _mm512_mul_ps(q, _mm512_set1_ps(k1[i])));
                d2 = _mm512_add_ps(d2, _mm512_mul_ps(q, _mm512_set1_ps(k2[i])));
                d3 = _mm512_add_ps(d3, _mm512_mul_ps(q, _mm512_set1_ps(k3[i])));
            }
            _mm512_mask_storeu_ps(dots + h0, hm, d0);
            _mm512_mask_storeu_ps(dots + Hi + h0, hm, d1);
            _mm512_mask_storeu_ps(dots + 2 * Hi + h0, hm, d2);
            _mm512_mask_storeu_ps(dots + 3 * Hi + h0, hm, d3);
        }
        for (int r = 0; r < 4 && c0 + r < m; r++) {
            double s = 0; /* as fg_ds4_index_score */
            for (int h = 0; h < Hi; h++) {
                const float d = dots[(size_t)r * Hi + h];
                if (d > 0)
                    s += (double)d * w[h];
            }
            out[c0 + r] = (float)s;
        }
    }
}
