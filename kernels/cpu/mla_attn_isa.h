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

/* fg_mla_attn_part, as mla_attn.h specifies it, with AVX-512 (F/BW/VL/DQ). */
void fg_mla_attn_part_avx512(const fg_mla_attn_params *p, int t_begin, int t_end, const float *q_lat,
                             const float *q_rope, float *o, float *m, float *l, float *scratch);

/* fg_mla_attn_multi for queries [0, n_q), n_q <= FG_MLA_ATTN_MAX_QUERIES,
 * with AVX-512: unnormalised o into out_lat, m [n_q][H] and l [n_q][H]. */
void fg_mla_attn_multi_avx512(const fg_mla_attn_params *p, int n_q, const int *n_kv, const float *q_lat,
                              const float *q_rope, float *out_lat, float *m, float *l, float *scratch);

/* The same two with AVX2 + FMA + F16C (mla_attn_avx2.c). */
void fg_mla_attn_part_avx2(const fg_mla_attn_params *p, int t_begin, int t_end, const float *q_lat,
                           const float *q_rope, float *o, float *m, float *l, float *scratch);
void fg_mla_attn_multi_avx2(const fg_mla_attn_params *p, int n_q, const int *n_kv, const float *q_lat,
                            const float *q_rope, float *out_lat, float *m, float *l, float *scratch);

#endif
