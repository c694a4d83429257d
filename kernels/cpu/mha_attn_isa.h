/* mha_attn_isa.h: internal to mha_attn*.c. The interface between the
 * dispatcher and reference (mha_attn.c) and the AVX-512 kernels, and the
 * tile layout both share. Nothing outside kernels/cpu/mha_attn*.c includes this.
 */
#ifndef FG_MHA_ATTN_ISA_H
#define FG_MHA_ATTN_ISA_H

#include "kernels/cpu/mha_attn.h"

#define FG_MHA_PAGE FG_KV_PAGE_TOKENS /* rows of a tile */

/* The tile's parts (see fg_mha_tile_floats). */
static inline float *fg_mha_tile_k(const fg_mha_attn_params *p, float *tile, int h)
{
    return tile + (size_t)h * p->n_nope * FG_MHA_PAGE; /* [n_nope][PAGE] */
}
static inline float *fg_mha_tile_kr(const fg_mha_attn_params *p, float *tile)
{
    return tile + (size_t)p->n_head * p->n_nope * FG_MHA_PAGE; /* [R][PAGE] */
}
static inline float *fg_mha_tile_v(const fg_mha_attn_params *p, float *tile)
{
    return fg_mha_tile_kr(p, tile) + (size_t)p->n_rope * FG_MHA_PAGE; /* [PAGE][H * n_v] */
}

/* The cached row's bytes (token t of this layer). */
static inline const uint8_t *fg_mha_row(const fg_mha_attn_params *p, int t)
{
    return p->pages[t / FG_MHA_PAGE] + p->layer_offset + (size_t)(t % FG_MHA_PAGE) * p->row_bytes;
}

void fg_mha_decompress_avx512(const fg_mha_attn_params *p, int page, int n_rows, float *tile, float *scratch);
/* n_q <= FG_MHA_GROUP queries; n[i]: query i's rows in this page, 0 .. PAGE. */
void fg_mha_attend_avx512(const fg_mha_attn_params *p, const float *tile, int page, int h, int n_q, const int *n,
                          const float *const *q_nope, const float *const *q_rope, float *const *o, float *const *m,
                          float *const *l, float *scratch);

#endif
