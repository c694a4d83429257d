/* mla_attn.h: multi-head latent attention, absorbed form, over a paged,
 * quantized latent cache, for one query token or several of one sequence.
 *
 * Cache layout (shared with the engine's KV store): a page holds
 * FG_KV_PAGE_TOKENS tokens for every layer; inside a page, layer l's rows start
 * at l * FG_KV_PAGE_TOKENS * row_bytes and token j's row is at j * row_bytes
 * from there. A row is [latent: kv_lora channels][rope key: n_rope channels],
 * each segment stored in `format` (kernels/cpu/kvquant.h).
 *
 * For each head h (q_lat is the no-RoPE query already absorbed through k_b):
 *   s[h, t]   = scale * (q_lat[h] . c_t + q_rope[h] . kr_t)      t < n_kv
 *   p[h, :]   = softmax(s[h, :])
 *   out[h]    = sum_t p[h, t] * c_t                             (latent width)
 * The caller expands out[h] through v_b. One pass over the cache with an
 * online softmax: each row is dequantized once for all heads.
 *
 * Kernels: the scalar reference (mla_attn.c), an AVX-512 path
 * (mla_attn_avx512.c) and an AVX2 path (mla_attn_avx2.c), both by chunks of
 * rows with vector dequantization; `isa` in the params chooses. All agree to
 * float rounding (tests/unit/test_mla_attn.c holds each to a double-precision
 * reference).
 *
 * fg_mla_attn_multi runs many queries of one sequence (a prefill chunk) in
 * one pass over the cache, bit-identical per query to fg_mla_attn.
 *
 * Thread safety: pure; callers parallelise over query tokens or sessions.
 */
#ifndef FG_MLA_ATTN_H
#define FG_MLA_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/matmul.h" /* fg_isa */

#define FG_KV_PAGE_TOKENS 64

typedef struct fg_mla_attn_params {
    int n_head;                    /* H */
    int kv_lora;                   /* latent width */
    int n_rope;                    /* RoPE key width */
    float scale;                   /* softmax scale */
    fg_kv_format format;           /* storage of both row segments */
    const uint8_t *const *pages;   /* page table: token t lives in pages[t / FG_KV_PAGE_TOKENS] */
    size_t layer_offset;           /* byte offset of this layer's rows inside a page */
    size_t row_bytes;              /* fg_kv_bytes(format, kv_lora) + fg_kv_bytes(format, n_rope) */
    int n_kv;                      /* attend over tokens [0, n_kv); n_kv >= 1 */
    fg_isa isa;                    /* FG_ISA_AUTO (0): the best this CPU runs; an ISA
                                      the CPU lacks runs the scalar reference */
} fg_mla_attn_params;

/* Floats of scratch needed by one call (of either function, whatever the isa). */
size_t fg_mla_attn_scratch_floats(const fg_mla_attn_params *p);

/* Part of one attention, over cached tokens [t_begin, t_end) only, so that
 * several threads can share one long sequence (decode): writes the
 * unnormalised output o[H][kv_lora], the running maximum m[H] and the
 * denominator l[H] (l = 0 for an empty range). Scratch: fg_mla_attn_scratch_floats. */
void fg_mla_attn_part(const fg_mla_attn_params *p, int t_begin, int t_end, const float *q_lat,
                      const float *q_rope, float *o, float *m, float *l, float *scratch);

/* Every query's attention is taken in parts of this many cached rows (whole
 * pages), each part a fresh online softmax, the parts folded into the first
 * from left to right (fg_mla_attn_fold) and the result divided by its
 * denominator (fg_mla_attn_finish). fg_mla_attn and fg_mla_attn_multi both
 * do exactly that, so a caller may also compute the parts (fg_mla_attn_part
 * over [k * PART_ROWS, (k + 1) * PART_ROWS)) on several threads and fold them
 * in order: the same bits as one call, whatever the split. */
#define FG_MLA_ATTN_PART_ROWS 128

/* (o, m, l) += the part (o2, m2, l2): o [H][kv_lora], m and l [H]. */
void fg_mla_attn_fold(int n_head, int kv_lora, float *o, float *m, float *l, const float *o2, const float *m2,
                      const float *l2);
/* o[h] /= l[h]: the output of a folded state. */
void fg_mla_attn_finish(int n_head, int kv_lora, float *o, const float *l);

/* q_lat [H][kv_lora], q_rope [H][n_rope], out_lat [H][kv_lora]. */
void fg_mla_attn(const fg_mla_attn_params *p, const float *q_lat, const float *q_rope, float *out_lat,
                 float *scratch);

/* Queries that one call of fg_mla_attn_multi takes through the cache together;
 * more are taken in groups of this many. */
#define FG_MLA_ATTN_MAX_QUERIES 32

/* Several queries over one sequence's cache (a prefill chunk): query i
 * attends over tokens [0, n_kv[i]) (p->n_kv is not read; n_kv[i] <= 0 gives
 * a zero output). q_lat [n_q][H][kv_lora], q_rope [n_q][H][n_rope],
 * out_lat [n_q][H][kv_lora]. Each cached row is dequantized once per group of
 * up to FG_MLA_ATTN_MAX_QUERIES queries instead of once per query, and every
 * query's arithmetic is that of fg_mla_attn with n_kv = n_kv[i] and the same
 * isa (same blocks, same order), so its output is bit-identical to that call
 * whatever other queries share it. Scratch: fg_mla_attn_scratch_floats. */
void fg_mla_attn_multi(const fg_mla_attn_params *p, int n_q, const int *n_kv, const float *q_lat,
                       const float *q_rope, float *out_lat, float *scratch);

#endif
