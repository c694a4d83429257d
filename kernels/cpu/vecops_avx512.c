/* vecops_avx512.c: AVX-512 versions of vecops.h operations (vecops_isa.h).
 * Compiled with AVX-512 flags; vecops.c calls in only after checking the CPU.
 * (The plain C loops of vecops.c stay scalar: -O2 vectorises no loop whose
 * count or aliasing is unknown.)
 *
 * SiLU's exp is exp_simd.h's: silu(g) * up within 3e-7 relative of the
 * scalar reference (test_vecops checks 1e-6, NaN and infinities apart).
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/exp_simd.h"
#include "kernels/cpu/vecops_isa.h"

/* g / (1 + e^-g) * up, the reference's operations in its order */
static inline __m512 silu_mul16(__m512 g, __m512 u)
{
    const __m512 e = fg_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

void fg_silu_mul_avx512(float *gate, const float *up, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(gate + i, silu_mul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        _mm512_mask_storeu_ps(gate + i, m, silu_mul16(g, u));
    }
}

void fg_axpy_avx512(float *y, float a, const float *x, int n)
{
    const __m512 va = _mm512_set1_ps(a);
    int i = 0;
    /* a multiply then an add, as the scalar loop: the same bits */
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(va, _mm512_loadu_ps(x + i))));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i),
                                                      _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + i))));
    }
}

void fg_rmsnorm_avx512(float *y, const float *x, const float *w, int n, float eps)
{
    /* the sum of squares in double as the reference, in two 8-lane partial sums */
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i)), b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        s0 = _mm512_fmadd_pd(a, a, s0);
        s1 = _mm512_fmadd_pd(b, b, s1);
    }
    for (; i + 8 <= n; i += 8) {
        const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        s0 = _mm512_fmadd_pd(a, a, s0);
    }
    if (i < n) {
        const __mmask8 m = (__mmask8)((1u << (n - i)) - 1);
        const __m512d a = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x + i));
        s1 = _mm512_fmadd_pd(a, a, s1);
    }
    const double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    const float scale = (float)(1.0 / sqrt(ss / (n > 0 ? n : 1) + (double)eps));
    const __m512 vs = _mm512_set1_ps(scale);
    /* x * scale * w, in the reference's order: the same bits for the same scale */
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
        if (w)
            v = _mm512_mul_ps(v, _mm512_loadu_ps(w + i));
        _mm512_storeu_ps(y + i, v);
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        if (w)
            v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}
