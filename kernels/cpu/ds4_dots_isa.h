/* ds4_dots_isa.h: internal to ds4_dots*.c, ds4_index.c, ds4_attn.c and
 * ds4_prune*.c. The AVX-512 versions of fg_ds4_dots, of fg_ds4_index_scores'
 * sum over heads, of fg_ds4_acc_rows, of fg_ds4_transpose and of the pruned
 * scoring's kernels (ds4_ops.h), bit for bit the plain C loops.
 */
#ifndef FG_DS4_DOTS_ISA_H
#define FG_DS4_DOTS_ISA_H

#include <stdint.h>

void fg_ds4_dots_avx512(const float *a, int na, int lda, const float *bt, int ldb, int nb, int D, float *out,
                        int ldo);

/* out[j] = (float) sum_h (dots[h n + j] > 0 ? (double)dots[h n + j] * w[h] : skipped), heads in order. */
void fg_ds4_head_sum_avx512(const float *dots, const float *w, int n, int Hi, float *out);

/* fg_ds4_acc_rows. */
void fg_ds4_acc_rows_avx512(float *acc, const float *p, const float *rows, int n, int D);

/* fg_ds4_transpose, by 16 x 16 blocks in registers. */
void fg_ds4_transpose_avx512(const float *x, int n, int D, float *xt, int ld);

/* fg_ds4_prune_scores with VNNI, 16 rows per vector, the scalar loop's bits. */
void fg_ds4_prune_scores_avx512(const int32_t *qp, const float *alpha, const float *w, int Hi, int Di,
                                const int32_t *pk, const float *ps, int n, float *pre);

/* ds4_prune.c's tables: a code's 2 x E2M1 value as the low and the high int16 of a pair, E4M3 values. */
typedef struct fg_ds4_prune_tables {
    int32_t lo[16], hi[16];
    float e4m3[256];
} fg_ds4_prune_tables;

/* fg_ds4_prune_pack, fg_ds4_prune_mark, fg_ds4_index_score_rows: the plain loops' bits. */
void fg_ds4_prune_pack_avx512(const uint8_t *const *keys, int n, int Di, int32_t *pk, float *ps, float *k1,
                              const fg_ds4_prune_tables *t);
int fg_ds4_prune_mark_avx512(const float *pre, const float *k1, const float *ab, int n, int k, uint64_t *mask,
                             float *lo, float *tmp);
void fg_ds4_index_score_rows_avx512(const float *qt, const float *w, int Hi, int Di, const float *keys, const int *idx,
                                    int m, float *dots, float *out);

#endif
