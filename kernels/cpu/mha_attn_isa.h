/* mha_attn_isa.h: internal to mha_attn*.c. The interface between the
 * dispatcher and reference (mha_attn.c) and the AVX2 and AVX-512 kernels,
 * and the tile layouts they all share. Nothing outside kernels/cpu/mha_attn*.c includes this.
 */
#ifndef FG_MHA_ATTN_ISA_H
#define FG_MHA_ATTN_ISA_H

#include "kernels/cpu/mha_attn.h"

#define FG_MHA_PAGE FG_KV_PAGE_TOKENS /* rows of a tile */

/* Page tile: latent [L][PAGE], then rope keys [R][PAGE]. */
static inline const float *fg_mha_page_kr(const fg_mha_attn_params *p, const float *page_tile)
{
    return page_tile + (size_t)p->kv_lora * FG_MHA_PAGE;
}
/* Head tile: keys [n_nope][PAGE], then values [PAGE][n_v]. */
static inline size_t fg_mha_head_v_offset(const fg_mha_attn_params *p)
{
    return (size_t)p->n_nope * FG_MHA_PAGE;
}

/* The cached row's bytes (token t of this layer). */
static inline const uint8_t *fg_mha_row(const fg_mha_attn_params *p, int t)
{
    return p->pages[t / FG_MHA_PAGE] + p->layer_offset + (size_t)(t % FG_MHA_PAGE) * p->row_bytes;
}

void fg_mha_decompress_avx512(const fg_mha_attn_params *p, const float *page_tile, int n_rows, int h,
                              float *head_tile);
/* n_q <= FG_MHA_GROUP queries; n[i]: query i's rows in this page, 1 .. PAGE. */
void fg_mha_attend_avx512(const fg_mha_attn_params *p, const float *page_tile, const float *head_tile, int page,
                          int h, int n_q, const int *n, const float *const *q_nope, const float *const *q_rope,
                          float *const *o, float *const *m, float *const *l, float *scratch);
/* The same two on AVX2 + FMA (mha_attn_avx2.c), the same bits. */
void fg_mha_decompress_avx2(const fg_mha_attn_params *p, const float *page_tile, int n_rows, int h,
                            float *head_tile);
void fg_mha_attend_avx2(const fg_mha_attn_params *p, const float *page_tile, const float *head_tile, int page, int h,
                        int n_q, const int *n, const float *const *q_nope, const float *const *q_rope,
                        float *const *o, float *const *m, float *const *l, float *scratch);

#endif
