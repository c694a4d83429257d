/* ds4_dots_isa.h: internal to ds4_dots*.c. The AVX-512 version of
 * fg_ds4_dots (ds4_ops.h), bit for bit the plain C loop.
 */
#ifndef FG_DS4_DOTS_ISA_H
#define FG_DS4_DOTS_ISA_H

void fg_ds4_dots_avx512(const float *a, int na, int lda, const float *bt, int ldb, int nb, int D, float *out,
                        int ldo);

#endif
