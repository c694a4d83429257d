/* mha_attn.h: multi-head latent attention in the decompressed ("MHA") form,
 * for prompt tokens: the cached latent rows are expanded through k_b and v_b
 * into per-head keys and values, and each query attends over those.
 *
 * The absorbed form (mla_attn.h) costs H * (2 * kv_lora + n_rope) multiply-
 * adds per (query, cached row); this form costs H * (n_nope + n_rope + n_v)
 * per pair plus H * kv_lora * (n_nope + n_v) per cached row to decompress,
 * shared by every query of a prompt chunk that reads the row. For chunks of
 * many queries it does fewer operations, and the decompression is a dense
 * product.
 *
 * Work goes a cache page (FG_KV_PAGE_TOKENS rows) at a time, per head, so
 * that threads can take heads and share nothing:
 *   fg_mha_load_page:  page -> page tile (the latent transposed, rows in
 *                      the fastest index, and the rope keys likewise);
 *   fg_mha_decompress: page tile -> head tile (head h's keys and values);
 *   fg_mha_attend:     several queries' online-softmax states for head h
 *                      updated by the page's rows that each query reaches
 *                      (the vector kernels take FG_MHA_GROUP queries per
 *                      pass over the head tile, so each vector load feeds
 *                      several queries; per query the arithmetic is that of
 *                      a lone query).
 * A head tile's bits depend only on the page's rows (each element is one
 * fused multiply-add chain over the latent, whichever rows share the page),
 * and a query's arithmetic depends only on its own n_kv and the tiles (pages
 * in order, one softmax update per page), so a query's output is
 * bit-identical however a prompt is chunked or batched, and whichever thread
 * did the work.
 *
 * For head h and cached row t (c_t latent, kr_t rope key):
 *   k_t[h][j] = sum_l wk[h][j][l] c_t[l]        j < n_nope
 *   v_t[h][j] = sum_l wv[l][h * n_v + j] c_t[l] j < n_v
 *   s = scale * (q_nope[h] . k_t[h] + q_rope[h] . kr_t)
 *   out[h] = sum_t softmax(s)_t v_t[h]                         (n_v wide)
 *
 * Kernels: the scalar reference (mha_attn.c), AVX-512 (mha_attn_avx512.c)
 * and AVX2 (mha_attn_avx2.c, the AVX-512 kernel's operations on 8 lanes, so
 * the same bits); `isa` chooses, as in mla_attn.h. They agree with the
 * reference to float rounding (tests/unit/test_mha_attn.c).
 *
 * Thread safety: pure; each thread uses its own tiles and scratch.
 */
#ifndef FG_MHA_ATTN_H
#define FG_MHA_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/matmul.h" /* fg_isa */
#include "kernels/cpu/mla_attn.h" /* FG_KV_PAGE_TOKENS */

typedef struct fg_mha_attn_params {
    int n_head;                    /* H */
    int kv_lora;                   /* latent width L */
    int n_rope;                    /* RoPE key width R */
    int n_nope;                    /* no-RoPE key width per head */
    int n_v;                       /* value width per head */
    float scale;                   /* softmax scale */
    fg_kv_format format;           /* storage of both row segments */
    const uint8_t *const *pages;   /* page table: token t lives in pages[t / FG_KV_PAGE_TOKENS] */
    size_t layer_offset;           /* byte offset of this layer's rows inside a page */
    size_t row_bytes;              /* fg_kv_bytes(format, kv_lora) + fg_kv_bytes(format, n_rope) */
    const float *wk;               /* [H][n_nope][L] k_b of every head, f32 */
    const float *wv;               /* [L][H * n_v] v_b transposed, f32 */
    fg_isa isa;                    /* FG_ISA_AUTO: the best this CPU runs; else as mla_attn.h */
} fg_mha_attn_params;

/* Floats of a page tile: latent [L][PAGE], rope keys [R][PAGE]. */
size_t fg_mha_page_tile_floats(const fg_mha_attn_params *p);
/* Floats of a head tile: keys [n_nope][PAGE], values [PAGE][n_v]. */
size_t fg_mha_head_tile_floats(const fg_mha_attn_params *p);
/* Floats of scratch for fg_mha_load_page and fg_mha_attend. */
size_t fg_mha_scratch_floats(const fg_mha_attn_params *p);

/* Dequantizes rows [page * PAGE, page * PAGE + n_rows) (1 <= n_rows <= PAGE)
 * into the page tile; the tile's rows past n_rows are zeros. */
void fg_mha_load_page(const fg_mha_attn_params *p, int page, int n_rows, float *page_tile, float *scratch);

/* Head h's keys and values of the page tile's first n_rows rows into the
 * head tile (rows past n_rows: unspecified). */
void fg_mha_decompress(const fg_mha_attn_params *p, const float *page_tile, int n_rows, int h, float *head_tile);

/* Queries that the vector kernels take through a tile together. */
#define FG_MHA_GROUP 4

/* Updates the states of n_q queries for head h by the rows of page `page`
 * (n_rows valid rows; page_tile for its rope keys, head_tile for h's keys
 * and values) that each attends to: query i reads rows t < n_kv[i]. Page 0
 * initialises (m, l, o); later pages must come in order. A query that
 * reaches no row of the page is left unchanged. Per query: q_nope[i]
 * [n_nope], q_rope[i] [R] (roped), o[i] [n_v] unnormalised output, *m[i]
 * running maximum, *l[i] running denominator. Each query's bits are those
 * of a call with that query alone. */
void fg_mha_attend(const fg_mha_attn_params *p, const float *page_tile, const float *head_tile, int page, int n_rows,
                   int h, int n_q, const int *n_kv, const float *const *q_nope, const float *const *q_rope,
                   float *const *o, float *const *m, float *const *l, float *scratch);

/* The final division: o [n_v] /= l. */
void fg_mha_finish(int n_v, float *o, float l);

#endif
