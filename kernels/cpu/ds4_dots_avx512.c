/* ds4_dots_avx512.c: fg_ds4_dots with 16 columns of bt per vector, four rows
 * of a by four vectors at a time (sixteen independent sums), then pairs. Every lane is one
 * dot in its channel order, a multiply then an add (no fused multiply-add:
 * ISO C mode contracts nothing), so the bits are the plain loop's.
 * Compiled with AVX-512 flags; ds4_dots.c calls in only after checking. */
#include <immintrin.h>

#include "kernels/cpu/ds4_dots_isa.h"

#define COLS 64 /* columns of bt per block: four vectors */

static inline __mmask16 lanes(int n) { return n >= 16 ? (__mmask16)0xFFFF : n > 0 ? (__mmask16)((1u << n) - 1) : 0; }

void fg_ds4_dots_avx512(const float *a, int na, int lda, const float *bt, int ldb, int nb, int D, float *out,
                        int ldo)
{
    for (int y0 = 0; y0 < nb; y0 += COLS) {
        const int ny = nb - y0;
        const __mmask16 m0 = lanes(ny), m1 = lanes(ny - 16), m2 = lanes(ny - 32), m3 = lanes(ny - 48);
        int x = 0;
        for (; x + 4 <= na; x += 4) {
            const float *a0 = a + (size_t)x * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
            __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
            __m512 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
            __m512 c20 = c00, c21 = c00, c22 = c00, c23 = c00;
            __m512 c30 = c00, c31 = c00, c32 = c00, c33 = c00;
            const float *b = bt + y0;
            for (int i = 0; i < D; i++, b += ldb) {
                const __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
                const __m512 b2 = _mm512_maskz_loadu_ps(m2, b + 32), b3 = _mm512_maskz_loadu_ps(m3, b + 48);
                __m512 p = _mm512_set1_ps(a0[i]);
                c00 = _mm512_add_ps(c00, _mm512_mul_ps(p, b0));
                c01 = _mm512_add_ps(c01, _mm512_mul_ps(p, b1));
                c02 = _mm512_add_ps(c02, _mm512_mul_ps(p, b2));
                c03 = _mm512_add_ps(c03, _mm512_mul_ps(p, b3));
                p = _mm512_set1_ps(a1[i]);
                c10 = _mm512_add_ps(c10, _mm512_mul_ps(p, b0));
                c11 = _mm512_add_ps(c11, _mm512_mul_ps(p, b1));
                c12 = _mm512_add_ps(c12, _mm512_mul_ps(p, b2));
                c13 = _mm512_add_ps(c13, _mm512_mul_ps(p, b3));
                p = _mm512_set1_ps(a2[i]);
                c20 = _mm512_add_ps(c20, _mm512_mul_ps(p, b0));
                c21 = _mm512_add_ps(c21, _mm512_mul_ps(p, b1));
                c22 = _mm512_add_ps(c22, _mm512_mul_ps(p, b2));
                c23 = _mm512_add_ps(c23, _mm512_mul_ps(p, b3));
                p = _mm512_set1_ps(a3[i]);
                c30 = _mm512_add_ps(c30, _mm512_mul_ps(p, b0));
                c31 = _mm512_add_ps(c31, _mm512_mul_ps(p, b1));
                c32 = _mm512_add_ps(c32, _mm512_mul_ps(p, b2));
                c33 = _mm512_add_ps(c33, _mm512_mul_ps(p, b3));
            }
            float *o0 = out + (size_t)x * ldo + y0, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
            _mm512_mask_storeu_ps(o0, m0, c00);
            _mm512_mask_storeu_ps(o0 + 16, m1, c01);
            _mm512_mask_storeu_ps(o0 + 32, m2, c02);
            _mm512_mask_storeu_ps(o0 + 48, m3, c03);
            _mm512_mask_storeu_ps(o1, m0, c10);
            _mm512_mask_storeu_ps(o1 + 16, m1, c11);
            _mm512_mask_storeu_ps(o1 + 32, m2, c12);
            _mm512_mask_storeu_ps(o1 + 48, m3, c13);
            _mm512_mask_storeu_ps(o2, m0, c20);
            _mm512_mask_storeu_ps(o2 + 16, m1, c21);
            _mm512_mask_storeu_ps(o2 + 32, m2, c22);
            _mm512_mask_storeu_ps(o2 + 48, m3, c23);
            _mm512_mask_storeu_ps(o3, m0, c30);
            _mm512_mask_storeu_ps(o3 + 16, m1, c31);
            _mm512_mask_storeu_ps(o3 + 32, m2, c32);
            _mm512_mask_storeu_ps(o3 + 48, m3, c33);
        }
        for (; x + 2 <= na; x += 2) {
            const float *a0 = a + (size_t)x * lda, *a1 = a0 + lda;
            __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
            __m512 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
            const float *b = bt + y0;
            for (int i = 0; i < D; i++, b += ldb) {
                const __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
                const __m512 b2 = _mm512_maskz_loadu_ps(m2, b + 32), b3 = _mm512_maskz_loadu_ps(m3, b + 48);
                const __m512 p = _mm512_set1_ps(a0[i]), q = _mm512_set1_ps(a1[i]);
                c00 = _mm512_add_ps(c00, _mm512_mul_ps(p, b0));
                c01 = _mm512_add_ps(c01, _mm512_mul_ps(p, b1));
                c02 = _mm512_add_ps(c02, _mm512_mul_ps(p, b2));
                c03 = _mm512_add_ps(c03, _mm512_mul_ps(p, b3));
                c10 = _mm512_add_ps(c10, _mm512_mul_ps(q, b0));
                c11 = _mm512_add_ps(c11, _mm512_mul_ps(q, b1));
                c12 = _mm512_add_ps(c12, _mm512_mul_ps(q, b2));
                c13 = _mm512_add_ps(c13, _mm512_mul_ps(q, b3));
            }
            float *o0 = out + (size_t)x * ldo + y0, *o1 = o0 + ldo;
            _mm512_mask_storeu_ps(o0, m0, c00);
            _mm512_mask_storeu_ps(o0 + 16, m1, c01);
            _mm512_mask_storeu_ps(o0 + 32, m2, c02);
            _mm512_mask_storeu_ps(o0 + 48, m3, c03);
            _mm512_mask_storeu_ps(o1, m0, c10);
            _mm512_mask_storeu_ps(o1 + 16, m1, c11);
            _mm512_mask_storeu_ps(o1 + 32, m2, c12);
            _mm512_mask_storeu_ps(o1 + 48, m3, c13);
        }
        if (x < na) {
            const float *a0 = a + (size_t)x * lda;
            __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
            const float *b = bt + y0;
            for (int i = 0; i < D; i++, b += ldb) {
                const __m512 p = _mm512_set1_ps(a0[i]);
                c0 = _mm512_add_ps(c0, _mm512_mul_ps(p, _mm512_maskz_loadu_ps(m0, b)));
                c1 = _mm512_add_ps(c1, _mm512_mul_ps(p, _mm512_maskz_loadu_ps(m1, b + 16)));
                c2 = _mm512_add_ps(c2, _mm512_mul_ps(p, _mm512_maskz_loadu_ps(m2, b + 32)));
                c3 = _mm512_add_ps(c3, _mm512_mul_ps(p, _mm512_maskz_loadu_ps(m3, b + 48)));
            }
            float *o0 = out + (size_t)x * ldo + y0;
            _mm512_mask_storeu_ps(o0, m0, c0);
            _mm512_mask_storeu_ps(o0 + 16, m1, c1);
            _mm512_mask_storeu_ps(o0 + 32, m2, c2);
            _mm512_mask_storeu_ps(o0 + 48, m3, c3);
        }
    }
}

void fg_ds4_head_sum_avx512(const float *dots, const float *w, int n, int Hi, float *out)
{
    /* eight rows per vector of doubles; a head whose dot is not > 0 (NaN included) leaves the lane's sum
     * alone, as the scalar loop skips it */
    for (int j = 0; j < n; j += 8) {
        const __mmask8 m = n - j >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - j)) - 1);
        __m512d s = _mm512_setzero_pd();
        for (int h = 0; h < Hi; h++) {
            const __m512d d = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, dots + (size_t)h * n + j));
            const __mmask8 pos = _mm512_cmp_pd_mask(d, _mm512_setzero_pd(), _CMP_GT_OQ);
            s = _mm512_mask_add_pd(s, pos, s, _mm512_mul_pd(d, _mm512_set1_pd((double)w[h])));
        }
        _mm256_mask_storeu_ps(out + j, m, _mm512_cvtpd_ps(s));
    }
}
