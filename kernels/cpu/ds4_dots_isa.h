/* ds4_dots_isa.h: internal to ds4_dots*.c, ds4_index.c and ds4_attn.c. The
 * AVX-512 versions of fg_ds4_dots, of fg_ds4_index_scores' sum over heads,
 * of fg_ds4_acc_rows and of fg_ds4_transpose (ds4_ops.h), bit for bit the plain C loops.
 */
#ifndef FG_DS4_DOTS_ISA_H
#define FG_DS4_DOTS_ISA_H

void fg_ds4_dots_avx512(const float *a, int na, int lda, const float *bt, int ldb, int nb, int D, float *out,
                        int ldo);

/* out[j] = (float) sum_h (dots[h n + j] > 0 ? (double)dots[h n + j] * w[h] : skipped), heads in order. */
void fg_ds4_head_sum_avx512(const float *dots, const float *w, int n, int Hi, float *out);

/* fg_ds4_acc_rows. */
void fg_ds4_acc_rows_avx512(float *acc, const float *p, const float *rows, int n, int D);

/* fg_ds4_transpose, by 16 x 16 blocks in registers. */
void fg_ds4_transpose_avx512(const float *x, int n, int D, float *xt, int ld);

#endif
