/* vecops.c: the per-row vector operations of vecops.h, plain C, and the
 * dispatch to the ISA-specific versions (vecops_isa.h).
 * At -O2 the compiler vectorises none of these loops (unknown counts and
 * aliasing); the hot ones have AVX-512 versions.
 */
#include "kernels/cpu/vecops.h"

#include <math.h>

#include "kernels/cpu/vecops_isa.h"

void fg_rmsnorm(float *y, const float *x, const float *w, int n, float eps)
{
    /* the sum of squares in double, as ggml does: rows are thousands long */
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    const float scale = (float)(1.0 / sqrt(ss / (n > 0 ? n : 1) + (double)eps));
    if (w) {
        for (int i = 0; i < n; i++)
            y[i] = x[i] * scale * w[i];
    } else {
        for (int i = 0; i < n; i++)
            y[i] = x[i] * scale;
    }
}

void fg_softmax(float *x, int n)
{
    if (n <= 0)
        return;
    float max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

void fg_silu_mul(float *gate, const float *up, int n)
{
    for (int i = 0; i < n; i++) {
        const float g = gate[i];
        /* g / (1 + e^-g): for very negative g the denominator is +inf and the result -0 */
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void fg_silu_mul_isa(fg_isa isa, float *gate, const float *up, int n)
{
    if (isa == FG_ISA_AUTO)
        isa = fg_isa_best();
    if (isa == FG_ISA_AVX512 && fg_isa_supported(FG_ISA_AVX512))
        fg_silu_mul_avx512(gate, up, n);
    else
        fg_silu_mul(gate, up, n);
}

void fg_rmsnorm_isa(fg_isa isa, float *y, const float *x, const float *w, int n, float eps)
{
    if (isa == FG_ISA_AUTO)
        isa = fg_isa_best();
    if (isa == FG_ISA_AVX512 && fg_isa_supported(FG_ISA_AVX512))
        fg_rmsnorm_avx512(y, x, w, n, eps);
    else
        fg_rmsnorm(y, x, w, n, eps);
}

void fg_axpy(float *y, float a, const float *x, int n)
{
    if (fg_isa_best() == FG_ISA_AVX512) {
        fg_axpy_avx512(y, a, x, n);
        return;
    }
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

int fg_argmax(const float *x, int n)
{
    if (n <= 0)
        return -1;
    /* NaN never wins; if every value is NaN the first index is returned */
    int best = 0;
    float bv = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] > bv || (bv != bv && x[i] == x[i])) {
            bv = x[i];
            best = i;
        }
    }
    return best;
}
