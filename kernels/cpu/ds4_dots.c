/* ds4_dots.c: the dot products of V4's attention and indexer (ds4_ops.h)
 * and the transpose that lays keys out for them, plain C, and the dispatch
 * to the AVX-512 versions (ds4_dots_isa.h). Both keep each dot's own order
 * (f32, channel by channel, a multiply then an add), so a score is the same
 * bits whichever path or batch computes it. */
#include "kernels/cpu/ds4_dots_isa.h"
#include "kernels/cpu/ds4_ops.h"
#include "kernels/cpu/matmul.h"

void fg_ds4_dots(const float *a, int na, int lda, const float *bt, int ldb, int nb, int D, float *out, int ldo)
{
    if (fg_isa_best() == FG_ISA_AVX512) {
        fg_ds4_dots_avx512(a, na, lda, bt, ldb, nb, D, out, ldo);
        return;
    }
    for (int x = 0; x < na; x++) {
        float *o = out + (size_t)x * ldo;
        for (int y = 0; y < nb; y++)
            o[y] = 0;
        for (int i = 0; i < D; i++) {
            const float ai = a[(size_t)x * lda + i];
            const float *b = bt + (size_t)i * ldb;
            for (int y = 0; y < nb; y++)
                o[y] += ai * b[y];
        }
    }
}

void fg_ds4_transpose(const float *x, int n, int D, float *xt, int ldt)
{
    if (fg_isa_best() == FG_ISA_AVX512) {
        fg_ds4_transpose_avx512(x, n, D, xt, ldt);
        return;
    }
    /* by blocks of 16 rows: each line of xt written whole while the rows stay in L1 */
    for (int k0 = 0; k0 < n; k0 += 16) {
        const int nk = n - k0 < 16 ? n - k0 : 16;
        const float *xb = x + (size_t)k0 * D;
        for (int d = 0; d < D; d++) {
            float *o = xt + (size_t)d * ldt + k0;
            for (int k = 0; k < nk; k++)
                o[k] = xb[(size_t)k * D + d];
        }
    }
}
