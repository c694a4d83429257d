/* ds4_dots.c: the dot products of V4's attention and indexer (ds4_ops.h),
 * plain C, and the dispatch to the AVX-512 version (ds4_dots_isa.h). Both
 * keep each dot's own order (f32, channel by channel, a multiply then an
 * add), so a score is the same bits whichever path or batch computes it. */
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
