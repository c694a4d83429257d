/* ds4_ops.h: the per-row math DeepSeek V4 (deepseek4) adds to the forward
 * pass, as plain scalar C: compressor pooling (CSA, HCA), the indexer's
 * scores and top-k, attention with a sink, hyper-connection mixing (mHC).
 * engine/model/deepseek4/forward.c calls exactly these, so they are both the
 * CPU path and the reference the CUDA kernels (kernels/cuda/ds4_*.cu) are
 * checked against by the GPU self-check. Cache access stays in the forward:
 * these take rows already decoded to f32.
 *
 * Thread safety: pure functions on caller-owned memory.
 */
#ifndef FG_DS4_OPS_H
#define FG_DS4_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FG_DS4_OPS_HC 4      /* hyper-connection streams */
#define FG_DS4_OPS_HC_MIX 24 /* pre[4], post[4], comb[4][4] (comb[d][s] at 8 + 4d + s) */

/* ---- compressor pooling ---- */

/* CSA's pooled row of a closed block (before its RMSNorm and RoPE): per
 * channel ch < width a softmax over the block's r entries (their last width
 * channels) and the previous block's (their first width), weighting k:
 * cur, prev: [r][2][2 width] (k | score); prev NULL for block 0 (its half
 * counts as -inf). Sums in double. row: [width]. */
void fg_ds4_pool_csa(int r, int width, const float *cur, const float *prev, float *row);

/* HCA's online softmax: folds one token (k, g: [D]; ape: the position
 * embedding of its slot, [D]) into st = [3][D] (running max, sum of
 * exp(score - max), weighted k) at slot (position mod 128); slot 0 starts
 * the block. In f32 with expf, in position order. */
void fg_ds4_hca_fold(float *st, const float *k, const float *g, const float *ape, int slot, int D);

/* The pooled row of a closed HCA block: row[ch] = acc[ch] / sum[ch]. */
void fg_ds4_hca_row(const float *st, int D, float *row);

/* ---- dot products ---- */

/* out[x ldo + y] = sum_i a[x lda + i] * bt[i ldb + y] for x < na, y < nb,
 * i < D: rows of a against the columns of bt (keys stored transposed), each
 * sum in f32 in channel order from 0, a multiply then an add, exactly the
 * plain loop whatever the ISA (AVX-512 when the CPU has it). */
void fg_ds4_dots(const float *a, int na, int lda, const float *bt, int ldb, int nb, int D, float *out, int ldo);

/* xt[d ldt + k] = x[k D + d] for k < n, d < D: rows laid out as fg_ds4_dots
 * reads its columns (AVX-512 by 16 x 16 blocks where the CPU has it). */
void fg_ds4_transpose(const float *x, int n, int D, float *xt, int ldt);

/* ---- indexer ---- */

/* One compressed row's index score for one query:
 * sum_h w[h] * relu(q[h] . k), dots in f32 (in channel order), the sum over
 * heads in double. q: [Hi][Di], w: [Hi], k: [Di]. */
float fg_ds4_index_score(const float *q, const float *w, const float *k, int Hi, int Di);

/* The same score of one query for n rows at once, bit for bit: the keys
 * transposed, kt[i ldk + j] (j < n), through fg_ds4_dots. dots: [Hi][n]
 * scratch; out: [n]. */
void fg_ds4_index_scores(const float *q, const float *w, const float *kt, int ldk, int n, int Hi, int Di,
                         float *dots, float *out);

/* The k highest of s[0..n) into out in ascending index order, ties to the
 * lower index (NaN is never higher than anything); all n when k >= n.
 * Returns the count written. */
int fg_ds4_top_k(const float *s, int n, int k, int *out);

/* The same rows, by a radix selection of the k-th score (tmp: [n] scratch) instead
 * of insertion: linear in n, for top-512 over many rows. */
int fg_ds4_top_k_tmp(const float *s, int n, int k, int *out, float *tmp);

/* The k-th highest of s[0..n) (the lowest when k >= n; -inf when n < 1, k < 1
 * or a NaN is among them), by fg_ds4_top_k_tmp's selection (tmp: [n] scratch). */
float fg_ds4_kth(const float *s, int n, int k, float *tmp);

/* ---- the indexer's pruned scoring (docs/engine.md, "The indexer's pruned scoring") ----
 * Every row is pre-scored from its FP4 key as stored (E2M1 codes, one E4M3
 * scale per 16 channels) against int16 codes of the query; a pre-score is
 * within ab[0] k1 + ab[1] of the exact score (fg_ds4_index_score's bits), so
 * a row whose pre-score plus that is below the k-th highest pre-score minus
 * it cannot be in the exact top-k, ties included. */

#define FG_DS4_PRUNE_TILE 64      /* rows per packed key tile */
#define FG_DS4_PRUNE_MAX_DIM 1024 /* Di and Hi up to which the bound's rounding term holds */
#define FG_DS4_PRUNE_K1_UP (1.0f + 0x1p-14f) /* k1: its f32 sum over the Di / 16 blocks times this bounds the l1 norm */

/* A query's int16 codes as pairs qp [Hi][Di / 2] (low half channel 2g, high
 * half 2g + 1), its steps alpha [Hi] (head h's q ~ 2 alpha[h] code) and its
 * rows' bound coefficients ab [2]. Returns false (score this query exactly)
 * for Di % 16, Di or Hi over 1024, a non-finite q or w, or a non-zero
 * max |q[h]| or |w[h]| outside [2^-40, 2^40]. */
bool fg_ds4_prune_query(const float *q, const float *w, int Hi, int Di, int32_t *qp, float *alpha, float *ab);

/* n <= FG_DS4_PRUNE_TILE FP4 keys (kvquant.h's layout, Di channels) into the
 * pre-scores' layout: pk [Di / 2][FG_DS4_PRUNE_TILE] pairs of 2 x E2M1 values
 * as int16 (in [-12, 12]), ps [Di / 16][FG_DS4_PRUNE_TILE] block scales,
 * rows past n zero; k1[j] >= the key's l1 norm (the same bits on every ISA). */
void fg_ds4_prune_pack(const uint8_t *const *keys, int n, int Di, int32_t *pk, float *ps, float *k1);

/* pre[j] for j < n: per head the blocks' integer dots (exact), each through
 * a fused multiply-add by its scale in block order, times alpha[h]; then
 * over the heads in order, s = fma(w[h], p, s) for p > 0. The same bits on
 * every ISA (VNNI vpdpwssd where the CPU has it). */
void fg_ds4_prune_scores(const int32_t *qp, const float *alpha, const float *w, int Hi, int Di, const int32_t *pk,
                         const float *ps, int n, float *pre);

/* The rows of n that may be in the exact top-k (1 <= k < n) as bits of mask
 * [(n + 63) / 64] (row r: bit r % 64 of word r / 64); returns their count,
 * at least k. lo, tmp: [n] scratch. */
int fg_ds4_prune_mark(const float *pre, const float *k1, const float *ab, int n, int k, uint64_t *mask, float *lo,
                      float *tmp);

/* out[c] = fg_ds4_index_score(q, w, keys + idx[c] Di, Hi, Di) for c < m, bit
 * for bit, from the query transposed (qt [Di][Hi]) so that the heads are
 * the vector's lanes: for scattered rows. dots: [4 Hi] scratch. */
void fg_ds4_index_score_rows(const float *qt, const float *w, int Hi, int Di, const float *keys, const int *idx, int m,
                             float *dots, float *out);

/* ---- attention with a sink ---- */

#define FG_DS4_ATTN_TILE 64 /* keys per step of the online softmax (the forward's tile) */

/* One head, one tile of n <= FG_DS4_ATTN_TILE keys (K = V, [n][D]) into the
 * running (max m, sum l, acc [D]) of softmax(q k * scale); lg: [n] scratch.
 * Start with m = -inf, l = 0, acc = 0. */
void fg_ds4_attn_tile(const float *q, const float *keys, int n, int D, float scale, float *m, float *l,
                      float *acc, float *lg);

/* acc[i] += p[k] * rows[k D + i] for k < n in order, each channel's sum in
 * that sequence (the bits of n axpy calls), rows: [n][D]; AVX-512 keeps
 * acc in registers over the rows. */
void fg_ds4_acc_rows(float *acc, const float *p, const float *rows, int n, int D);

/* fg_ds4_attn_tile's update from the tile's logits already computed
 * (lg[k] = (q . key k) * scale, as fg_ds4_attn_tile writes them). */
void fg_ds4_attn_update(const float *lg, const float *keys, int n, int D, float *m, float *l, float *acc);

/* out[D] = acc / (l + exp(sink)) at the common maximum: the sink is one more
 * logit in the denominator with no value. */
void fg_ds4_attn_finish(float m, float l, const float *acc, float sink, int D, float *out);

/* ---- hyper-connections (mHC) ---- */

/* The 24 mixing numbers of one token from its projection mix[24]:
 * pre = sigmoid(mix * scale[0] + base) + eps, post = 2 sigmoid(mix * scale[1]
 * + base), comb = Sinkhorn(mix * scale[2] + base) over iters iterations
 * (softmax over d + eps, rows; then columns, rows), all in double. */
void fg_ds4_hc_weights(const float *mix, const float *scale, const float *base, double eps, int iters, float *w);

/* y[E] = sum_h pre[h] x[h][E] (w: the weights above, x: [4][E]). */
void fg_ds4_hc_pre(const float *w, const float *x, int E, float *y);

/* out[d][E] = post[d] * o + sum_s comb[d][s] x[s] (x, out: [4][E], o: [E]). */
void fg_ds4_hc_post(const float *w, const float *o, const float *x, int E, float *out);

#endif
