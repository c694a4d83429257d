/* ds4_dots_avx512.c: fg_ds4_dots with 16 columns of bt per vector, four rows
 * of a by four vectors at a time (sixteen independent sums in registers),
 * then pairs, then one. Every lane is one dot in its channel order, a
 * multiply then an add (no fused multiply-add: ISO C mode contracts
 * nothing), so the bits are the plain loop's. Compiled with AVX-512 flags;
 * ds4_dots.c calls in only after checking. */
#include <immintrin.h>

#include "kernels/cpu/ds4_dots_isa.h"

#define COLS 64 /* columns of bt per block: four vectors */

static inline __mmask16 lanes(int n) { return n >= 16 ? (__mmask16)0xFFFF : n > 0 ? (__mmask16)((1u << n) - 1) : 0; }

/* Row r's four sums (cR0 .. cR3) take a[r][i] times the four column vectors. */
#define MAC4(r)                                                                                               \
    do {                                                                                                      \
        const __m512 p = _mm512_set1_ps(a##r[i]);                                                            \
        c##r##0 = _mm512_add_ps(c##r##0, _mm512_mul_ps(p, b0));                                               \
        c##r##1 = _mm512_add_ps(c##r##1, _mm512_mul_ps(p, b1));                                               \
        c##r##2 = _mm512_add_ps(c##r##2, _mm512_mul_ps(p, b2));                                               \
        c##r##3 = _mm512_add_ps(c##r##3, _mm512_mul_ps(p, b3));                                               \
    } while (0)
#define ZERO4(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0
#define STORE4(r)                                                                                             \
    do {                                                                                                      \
        float *o = out + (size_t)(x + r) * ldo + y0;                                                          \
        _mm512_mask_storeu_ps(o, m0, c##r##0);                                                                \
        _mm512_mask_storeu_ps(o + 16, m1, c##r##1);                                                           \
        _mm512_mask_storeu_ps(o + 32, m2, c##r##2);                                                           \
        _mm512_mask_storeu_ps(o + 48, m3, c##r##3);                                                           \
    } while (0)
/* the four column vectors of row i of bt */
#define LOAD4()                                                                                               \
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);                   \
    const __m512 b2 = _mm512_maskz_loadu_ps(m2, b + 32), b3 = _mm512_maskz_loadu_ps(m3, b + 48)

void fg_ds4_dots_avx512(const float *a, int na, int lda, const float *bt, int ldb, int nb, int D, float *out,
                        int ldo)
{
    for (int y0 = 0; y0 < nb; y0 += COLS) {
        const int ny = nb - y0;
        const __mmask16 m0 = lanes(ny), m1 = lanes(ny - 16), m2 = lanes(ny - 32), m3 = lanes(ny - 48);
        int x = 0;
        for (; x + 4 <= na; x += 4) {
            const float *a0 = a + (size_t)x * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
            ZERO4(0);
            ZERO4(1);
            ZERO4(2);
            ZERO4(3);
            const float *b = bt + y0;
            for (int i = 0; i < D; i++, b += ldb) {
                LOAD4();
                MAC4(0);
                MAC4(1);
                MAC4(2);
                MAC4(3);
            }
            STORE4(0);
            STORE4(1);
            STORE4(2);
            STORE4(3);
        }
        for (; x + 2 <= na; x += 2) {
            const float *a0 = a + (size_t)x * lda, *a1 = a0 + lda;
            ZERO4(0);
            ZERO4(1);
            const float *b = bt + y0;
            for (int i = 0; i < D; i++, b += ldb) {
                LOAD4();
                MAC4(0);
                MAC4(1);
            }
            STORE4(0);
            STORE4(1);
        }
        if (x < na) {
            const float *a0 = a + (size_t)x * lda;
            ZERO4(0);
            const float *b = bt + y0;
            for (int i = 0; i < D; i++, b += ldb) {
                LOAD4();
                MAC4(0);
            }
            STORE4(0);
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

void fg_ds4_acc_rows_avx512(float *acc, const float *p, const float *rows, int n, int D)
{
    /* 64 channels at a time held over all the rows, a multiply then an add per row as fg_axpy */
    for (int d0 = 0; d0 < D; d0 += COLS) {
        const __mmask16 m0 = lanes(D - d0), m1 = lanes(D - d0 - 16), m2 = lanes(D - d0 - 32), m3 = lanes(D - d0 - 48);
        float *o = acc + d0;
        __m512 c0 = _mm512_maskz_loadu_ps(m0, o), c1 = _mm512_maskz_loadu_ps(m1, o + 16);
        __m512 c2 = _mm512_maskz_loadu_ps(m2, o + 32), c3 = _mm512_maskz_loadu_ps(m3, o + 48);
        const float *r = rows + d0;
        for (int k = 0; k < n; k++, r += D) {
            const __m512 pk = _mm512_set1_ps(p[k]);
            c0 = _mm512_add_ps(c0, _mm512_mul_ps(pk, _mm512_maskz_loadu_ps(m0, r)));
            c1 = _mm512_add_ps(c1, _mm512_mul_ps(pk, _mm512_maskz_loadu_ps(m1, r + 16)));
            c2 = _mm512_add_ps(c2, _mm512_mul_ps(pk, _mm512_maskz_loadu_ps(m2, r + 32)));
            c3 = _mm512_add_ps(c3, _mm512_mul_ps(pk, _mm512_maskz_loadu_ps(m3, r + 48)));
        }
        _mm512_mask_storeu_ps(o, m0, c0);
        _mm512_mask_storeu_ps(o + 16, m1, c1);
        _mm512_mask_storeu_ps(o + 32, m2, c2);
        _mm512_mask_storeu_ps(o + 48, m3, c3);
    }
}

/* r[0..16) (rows) transposed in registers: pairs, quads, then 128-bit lanes twice */
static inline void transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
        t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
    }
}

void fg_ds4_transpose_avx512(const float *x, int n, int D, float *xt, int ld)
{
    for (int k0 = 0; k0 < n; k0 += 16) {
        const int nk = n - k0 < 16 ? n - k0 : 16;
        const __mmask16 mk = lanes(nk);
        for (int d0 = 0; d0 < D; d0 += 16) {
            const int nd = D - d0 < 16 ? D - d0 : 16;
            const __mmask16 md = lanes(nd);
            __m512 r[16];
            for (int k = 0; k < 16; k++)
                r[k] = k < nk ? _mm512_maskz_loadu_ps(md, x + (size_t)(k0 + k) * D + d0) : _mm512_setzero_ps();
            transpose16(r);
            for (int d = 0; d < nd; d++)
                _mm512_mask_storeu_ps(xt + (size_t)(d0 + d) * ld + k0, mk, r[d]);
        }
    }
}
