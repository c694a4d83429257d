/* mla_attn_isa.h: internal to mla_attn*.c. The interface between the
 * dispatcher and reference (mla_attn.c) and the ISA-specific kernels
 * (mla_attn_avx2.c, mla_attn_avx512.c).
 * Nothing outside kernels/cpu/mla_attn*.c includes this.
 */
#ifndef FG_MLA_ATTN_ISA_H
#define FG_MLA_ATTN_ISA_H

#include "kernels/cpu/mla_attn.h"

/* Cached rows the fast kernels dequantize and score at a time (at most a page). */
#define FG_MLA_ATTN_CHUNK 64

/* Floats between consecutive dequantized rows in the fast kernels' scratch:
 * latent then rope key, rounded up to a 64-byte multiple. */
static inline int fg_mla_attn_row_stride(const fg_mla_attn_params *p)
{
    return (p->kv_lora + p->n_rope + 15) & ~15;
}

/* What an ISA file supplies; mla_attn.c walks the cache with them (one
 * walk for every ISA, so a query's chunks are the same alone and in a group).
 * dequant_rows: rows [first, first + n) of one page (never crossing it) into
 *   rows [n][stride] f32, exactly fg_kv_dequantize's values.
 * chunk_update: the online-softmax update of every head's (o, m, l) [H][L],
 *   [H], [H] with those n rows; s is [H][FG_MLA_ATTN_CHUNK] scratch. */
typedef struct fg_mla_attn_kernels {
    void (*dequant_rows)(const fg_mla_attn_params *p, const uint8_t *page, int first, int n, int stride,
                         float *rows);
    void (*chunk_update)(const fg_mla_attn_params *p, const float *rows, int stride, int n, const float *q_lat,
                         const float *q_rope, float *o, float *m, float *l, float *s);
} fg_mla_attn_kernels;

extern const fg_mla_attn_kernels fg_mla_attn_kernels_avx512; /* AVX-512 F/BW/VL/DQ (mla_attn_avx512.c) */
extern const fg_mla_attn_kernels fg_mla_attn_kernels_avx2;   /* AVX2 + FMA + F16C (mla_attn_avx2.c) */

#endif
