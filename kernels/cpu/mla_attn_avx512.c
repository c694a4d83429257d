/* mla_attn_avx512.c: the AVX-512 path of mla_attn.h (fg_mla_attn_part).
 * Compiled with AVX-512 flags; mla_attn.c calls in only after checking the CPU.
 *
 * The scalar reference updates the online softmax once per cached row: every
 * row costs H exponentials, H rescales of o and H short dot products whose
 * horizontal sums dominate. Here the cache is taken a chunk at a time (at most
 * one page, CHUNK rows, so a chunk never crosses a page):
 *   1. the chunk's rows are dequantized into scratch, [CHUNK][stride] f32,
 *      with vector decoders for every format (FP4 codes through a 16-entry
 *      vpermps table, E4M3 scales and FP8 by integer field arithmetic);
 *   2. scores s[h][j] for all heads, four rows at a time per head so that each
 *      query vector is loaded once for four rows;
 *   3. per head, one running-maximum update (and at most one rescale of o)
 *      per chunk, then the weighted sum of the chunk's latents into o, four
 *      16-float column blocks of o kept in registers across the chunk's rows.
 * Steps 2 and 3 take four heads at a time, so each row vector is loaded once
 * for four heads; per head the arithmetic is unchanged.
 * Same mathematics as the reference (an online softmax, m and l per head),
 * different rounding order: tests/unit/test_mla_attn.c holds both to the
 * same double-precision reference.
 *
 * fg_mla_attn_multi_avx512 (a prefill chunk) dequantizes each page once and
 * runs the same per-chunk update for every query that reaches into it, so
 * each query's bits equal the single-query kernel's.
 *
 * Scratch (floats, see fg_mla_attn_scratch_floats): [CHUNK][stride] rows,
 * then [H][CHUNK] scores.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/mla_attn_isa.h"
#include "kernels/cpu/numeric.h"

#define CHUNK FG_MLA_ATTN_CHUNK

/* The four-head loops below must be unrolled for their 16 accumulators to live
 * in registers; -O2 (our Release flags) does not unroll them by itself. */
#define FULL_UNROLL _Pragma("GCC unroll 4")

/* Lanes [0, n) of a 16-lane mask. */
static inline __mmask16 lanes(int n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1);
}

/* 16 E4M3 codes (in the low byte of each int32 lane) to f32, exactly as
 * fg_e4m3_to_f32: subnormals as mant * 2^-9, exp 15 with mant 7 as NaN. */
static inline __m512 e4m3_to_f32_16(__m512i c)
{
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(c, 3), _mm512_set1_epi32(0xf));
    const __m512i mant = _mm512_and_si512(c, _mm512_set1_epi32(7));
    const __m512i normal = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 23),
                                           _mm512_slli_epi32(mant, 20));
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mant), _mm512_set1_ps(1.0f / 512.0f));
    __m512i mag = _mm512_mask_mov_epi32(normal, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                        _mm512_castps_si512(sub));
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(c, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f));
    mag = _mm512_mask_mov_epi32(mag, nan, _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(_mm512_or_si512(mag, sign));
}

/* One row segment of n channels in format f into y[0 .. n). */
static void dequant(fg_kv_format f, const uint8_t *in, int n, float *y)
{
    switch (f) {
    case FG_KV_F32:
        memcpy(y, in, (size_t)n * sizeof *y);
        return;
    case FG_KV_F16:
        for (int i = 0; i < n; i += 16) {
            const __mmask16 m = lanes(n - i);
            _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, in + 2 * i)));
        }
        return;
    case FG_KV_INT8: {
        float scale;
        memcpy(&scale, in, 4);
        const __m512 s = _mm512_set1_ps(scale);
        for (int i = 0; i < n; i += 16) {
            const __mmask16 m = lanes(n - i);
            const __m512i q = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, in + 4 + i));
            _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(s, _mm512_cvtepi32_ps(q)));
        }
        return;
    }
    case FG_KV_FP8: {
        float scale;
        memcpy(&scale, in, 4);
        const __m512 s = _mm512_set1_ps(scale);
        for (int i = 0; i < n; i += 16) {
            const __mmask16 m = lanes(n - i);
            const __m512 e = e4m3_to_f32_16(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, in + 4 + i)));
            _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(s, e));
        }
        return;
    }
    case FG_KV_FP4: {
        if (n % 16)
            return;
        /* the E2M1 values of codes 0..15, as fg_e2m1_to_f32 */
        const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                                            -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
        const uint8_t *scales = in + n / 2;
        const __m128i lo4 = _mm_set1_epi8(0x0f);
        for (int k0 = 0; k0 < n / 16; k0 += 16) {
            const int nk = n / 16 - k0 < 16 ? n / 16 - k0 : 16;
            const __m512 sv = e4m3_to_f32_16(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes(nk), scales + k0)));
            for (int k = 0; k < nk; k++) {
                /* 8 bytes, element 2j in the low nibble of byte j */
                const __m128i b = _mm_loadl_epi64((const __m128i *)(in + 8 * (k0 + k)));
                const __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(b, lo4), _mm_and_si128(_mm_srli_epi16(b, 4), lo4));
                const __m512 v = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), table);
                const __m512 s = _mm512_permutexvar_ps(_mm512_set1_epi32(k), sv);
                _mm512_storeu_ps(y + 16 * (k0 + k), _mm512_mul_ps(s, v));
            }
        }
        return;
    }
    default:
        return;
    }
}

/* sum_i a[i] * b[i] over n floats, 16 lanes at a time (tail masked). */
static inline __m512 dot_acc(const float *a, const float *b, int n, __m512 acc)
{
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = lanes(n - i);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return acc;
}

/* Scores of one head against rows [0, n) of the chunk: s[j] = scale * (ql . c_j + qr . kr_j). */
static void head_scores(const float *rows, int stride, int L, int R, int n, const float *ql, const float *qr,
                        float scale, float *s)
{
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *r0 = rows + (size_t)j * stride, *r1 = r0 + stride, *r2 = r1 + stride, *r3 = r2 + stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
               a3 = _mm512_setzero_ps();
        for (int i = 0; i < L; i += 16) {
            const __mmask16 m = lanes(L - i);
            const __m512 q = _mm512_maskz_loadu_ps(m, ql + i);
            a0 = _mm512_fmadd_ps(q, _mm512_maskz_loadu_ps(m, r0 + i), a0);
            a1 = _mm512_fmadd_ps(q, _mm512_maskz_loadu_ps(m, r1 + i), a1);
            a2 = _mm512_fmadd_ps(q, _mm512_maskz_loadu_ps(m, r2 + i), a2);
            a3 = _mm512_fmadd_ps(q, _mm512_maskz_loadu_ps(m, r3 + i), a3);
        }
        for (int i = 0; i < R; i += 16) {
            const __mmask16 m = lanes(R - i);
            const __m512 q = _mm512_maskz_loadu_ps(m, qr + i);
            a0 = _mm512_fmadd_ps(q, _mm512_maskz_loadu_ps(m, r0 + L + i), a0);
            a1 = _mm512_fmadd_ps(q, _mm512_maskz_loadu_ps(m, r1 + L + i), a1);
            a2 = _mm512_fmadd_ps(q, _mm512_maskz_loadu_ps(m, r2 + L + i), a2);
            a3 = _mm512_fmadd_ps(q, _mm512_maskz_loadu_ps(m, r3 + L + i), a3);
        }
        s[j] = scale * _mm512_reduce_add_ps(a0);
        s[j + 1] = scale * _mm512_reduce_add_ps(a1);
        s[j + 2] = scale * _mm512_reduce_add_ps(a2);
        s[j + 3] = scale * _mm512_reduce_add_ps(a3);
    }
    for (; j < n; j++) {
        const float *r = rows + (size_t)j * stride;
        s[j] = scale * _mm512_reduce_add_ps(dot_acc(qr, r + L, R, dot_acc(ql, r, L, _mm512_setzero_ps())));
    }
}

/* o[0 .. L) = o * corr + sum_j p[j] * c_j over the chunk's n rows. */
static void head_accumulate(const float *rows, int stride, int L, int n, const float *p, float corr, float *o)
{
    const __m512 cv = _mm512_set1_ps(corr);
    int i = 0;
    for (; i + 64 <= L; i += 64) {
        __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(o + i), cv), a1 = _mm512_mul_ps(_mm512_loadu_ps(o + i + 16), cv),
               a2 = _mm512_mul_ps(_mm512_loadu_ps(o + i + 32), cv), a3 = _mm512_mul_ps(_mm512_loadu_ps(o + i + 48), cv);
        for (int j = 0; j < n; j++) {
            const float *r = rows + (size_t)j * stride + i;
            const __m512 pj = _mm512_set1_ps(p[j]);
            a0 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(r), a0);
            a1 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(r + 16), a1);
            a2 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(r + 32), a2);
            a3 = _mm512_fmadd_ps(pj, _mm512_loadu_ps(r + 48), a3);
        }
        _mm512_storeu_ps(o + i, a0);
        _mm512_storeu_ps(o + i + 16, a1);
        _mm512_storeu_ps(o + i + 32, a2);
        _mm512_storeu_ps(o + i + 48, a3);
    }
    for (; i < L; i += 16) {
        const __mmask16 m = lanes(L - i);
        __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, o + i), cv);
        for (int j = 0; j < n; j++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_maskz_loadu_ps(m, rows + (size_t)j * stride + i), a);
        _mm512_mask_storeu_ps(o + i, m, a);
    }
}

/* head_scores for four heads at once: each row vector loaded once for four
 * heads (16 accumulators). Every score's arithmetic is head_scores's (the same
 * fused multiply-adds in the same order, the same reduction), so the bits are
 * the same; only loads are shared. Rows past the last block of four go through
 * head_scores's own single-row path. */
static void head4_scores(const float *rows, int stride, int L, int R, int n, const float *const ql[4],
                         const float *const qr[4], float scale, float *const s[4])
{
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *r0 = rows + (size_t)j * stride, *r1 = r0 + stride, *r2 = r1 + stride, *r3 = r2 + stride;
        __m512 a[4][4];
        FULL_UNROLL
        for (int h = 0; h < 4; h++)
            FULL_UNROLL
            for (int k = 0; k < 4; k++)
                a[h][k] = _mm512_setzero_ps();
        FULL_UNROLL
        for (int seg = 0; seg < 2; seg++) { /* the latent, then the rope key */
            const int w = seg ? R : L, off = seg ? L : 0;
            for (int i = 0; i < w; i += 16) {
                const __mmask16 m = lanes(w - i);
                const __m512 x0 = _mm512_maskz_loadu_ps(m, r0 + off + i), x1 = _mm512_maskz_loadu_ps(m, r1 + off + i),
                             x2 = _mm512_maskz_loadu_ps(m, r2 + off + i), x3 = _mm512_maskz_loadu_ps(m, r3 + off + i);
                FULL_UNROLL
                for (int h = 0; h < 4; h++) {
                    const __m512 q = _mm512_maskz_loadu_ps(m, (seg ? qr[h] : ql[h]) + i);
                    a[h][0] = _mm512_fmadd_ps(q, x0, a[h][0]);
                    a[h][1] = _mm512_fmadd_ps(q, x1, a[h][1]);
                    a[h][2] = _mm512_fmadd_ps(q, x2, a[h][2]);
                    a[h][3] = _mm512_fmadd_ps(q, x3, a[h][3]);
                }
            }
        }
        FULL_UNROLL
        for (int h = 0; h < 4; h++)
            FULL_UNROLL
            for (int k = 0; k < 4; k++)
                s[h][j + k] = scale * _mm512_reduce_add_ps(a[h][k]);
    }
    for (; j < n; j++) {
        const float *r = rows + (size_t)j * stride;
        FULL_UNROLL
        for (int h = 0; h < 4; h++)
            s[h][j] = scale * _mm512_reduce_add_ps(dot_acc(qr[h], r + L, R, dot_acc(ql[h], r, L, _mm512_setzero_ps())));
    }
}

/* head_accumulate for four heads at once over 64-column blocks: each row
 * vector loaded once for four heads; per head and column the same multiply
 * and fused multiply-adds in the same order as head_accumulate. The columns
 * past the last 64-block go through head_accumulate's tail path, per head. */
static void head4_accumulate(const float *rows, int stride, int L, int n, const float *const p[4],
                             const float corr[4], float *const o[4])
{
    int i = 0;
    for (; i + 64 <= L; i += 64) {
        __m512 a[4][4];
        FULL_UNROLL
        for (int h = 0; h < 4; h++) {
            const __m512 cv = _mm512_set1_ps(corr[h]);
            FULL_UNROLL
            for (int k = 0; k < 4; k++)
                a[h][k] = _mm512_mul_ps(_mm512_loadu_ps(o[h] + i + 16 * k), cv);
        }
        for (int j = 0; j < n; j++) {
            const float *r = rows + (size_t)j * stride + i;
            const __m512 x0 = _mm512_loadu_ps(r), x1 = _mm512_loadu_ps(r + 16), x2 = _mm512_loadu_ps(r + 32),
                         x3 = _mm512_loadu_ps(r + 48);
            FULL_UNROLL
            for (int h = 0; h < 4; h++) {
                const __m512 pj = _mm512_set1_ps(p[h][j]);
                a[h][0] = _mm512_fmadd_ps(pj, x0, a[h][0]);
                a[h][1] = _mm512_fmadd_ps(pj, x1, a[h][1]);
                a[h][2] = _mm512_fmadd_ps(pj, x2, a[h][2]);
                a[h][3] = _mm512_fmadd_ps(pj, x3, a[h][3]);
            }
        }
        FULL_UNROLL
        for (int h = 0; h < 4; h++)
            FULL_UNROLL
            for (int k = 0; k < 4; k++)
                _mm512_storeu_ps(o[h] + i + 16 * k, a[h][k]);
    }
    for (; i < L; i += 16) {
        const __mmask16 m = lanes(L - i);
        FULL_UNROLL
        for (int h = 0; h < 4; h++) {
            __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, o[h] + i), _mm512_set1_ps(corr[h]));
            for (int j = 0; j < n; j++)
                a = _mm512_fmadd_ps(_mm512_set1_ps(p[h][j]), _mm512_maskz_loadu_ps(m, rows + (size_t)j * stride + i), a);
            _mm512_mask_storeu_ps(o[h] + i, m, a);
        }
    }
}

/* Dequantizes rows [first, first + n) of one page's layer into rows[n][stride]. */
static void dequant_rows(const fg_mla_attn_params *p, const uint8_t *page, int first, int n, int stride,
                         float *rows)
{
    const int L = p->kv_lora, R = p->n_rope;
    const size_t lat_bytes = fg_kv_bytes(p->format, L);
    const uint8_t *src = page + p->layer_offset + (size_t)first * p->row_bytes;
    for (int j = 0; j < n; j++, src += p->row_bytes) {
        dequant(p->format, src, L, rows + (size_t)j * stride);
        if (R > 0)
            dequant(p->format, src + lat_bytes, R, rows + (size_t)j * stride + L);
    }
}

/* One query's online-softmax update over the chunk's first n dequantized rows,
 * every head: o_all [H][L], m [H], l [H]; s is [H][CHUNK] scratch. Heads go
 * four at a time (shared row loads), each head's arithmetic unchanged. The
 * single- and the multi-query kernels both run exactly this per chunk, which
 * is what makes them bit-identical. */
static void chunk_update(const fg_mla_attn_params *p, const float *rows, int stride, int n, const float *q_lat,
                         const float *q_rope, float *o_all, float *m, float *l, float *s)
{
    const int H = p->n_head, L = p->kv_lora, R = p->n_rope;
    for (int h0 = 0; h0 < H; h0 += 4) {
        const int nh = H - h0 < 4 ? H - h0 : 4;
        float corr[4];
        float *sh[4];
        for (int k = 0; k < nh; k++)
            sh[k] = s + (size_t)(h0 + k) * CHUNK;
        if (nh == 4) {
            const float *ql[4], *qr[4];
            for (int k = 0; k < 4; k++) {
                ql[k] = q_lat + (size_t)(h0 + k) * L;
                qr[k] = q_rope + (size_t)(h0 + k) * R;
            }
            head4_scores(rows, stride, L, R, n, ql, qr, p->scale, sh);
        } else {
            for (int k = 0; k < nh; k++)
                head_scores(rows, stride, L, R, n, q_lat + (size_t)(h0 + k) * L, q_rope + (size_t)(h0 + k) * R,
                            p->scale, sh[k]);
        }
        for (int k = 0; k < nh; k++) {
            const int h = h0 + k;
            float mx = m[h];
            for (int j = 0; j < n; j++)
                mx = sh[k][j] > mx ? sh[k][j] : mx;
            /* a first chunk (m = -inf) or a new maximum rescales what came before */
            corr[k] = mx > m[h] ? (m[h] == -INFINITY ? 0.0f : expf(m[h] - mx)) : 1.0f;
            float sum = 0.0f;
            for (int j = 0; j < n; j++) {
                sh[k][j] = expf(sh[k][j] - mx);
                sum += sh[k][j];
            }
            l[h] = l[h] * corr[k] + sum;
            m[h] = mx;
        }
        if (nh == 4) {
            float *o[4];
            const float *pk[4] = {sh[0], sh[1], sh[2], sh[3]};
            for (int k = 0; k < 4; k++)
                o[k] = o_all + (size_t)(h0 + k) * L;
            head4_accumulate(rows, stride, L, n, pk, corr, o);
        } else {
            for (int k = 0; k < nh; k++)
                head_accumulate(rows, stride, L, n, sh[k], corr[k], o_all + (size_t)(h0 + k) * L);
        }
    }
}

const fg_mla_attn_kernels fg_mla_attn_kernels_avx512 = {.dequant_rows = dequant_rows, .chunk_update = chunk_update};
