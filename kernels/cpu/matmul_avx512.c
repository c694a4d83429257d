/* matmul_avx512.c: AVX-512 (F/BW/VL/DQ + VNNI) kernels of matmul.h.
 * Compiled with AVX-512 flags; matmul.c calls in only after checking the CPU.
 *
 * Tiling: a kernel computes a tile of R output rows x T tokens with R*T
 * accumulators in registers. Tokens are the inner loop: the R weight rows of a
 * tile are streamed from memory once and reused from L1 for every token, and for
 * decode (T = 1) R = 4 rows keep four prefetch streams in flight.
 *
 * Q8_0: the weight bytes w are flipped to unsigned (w ^ 0x80 = w + 128) so that
 * vpdpbusd (u8 x s8) can take them against the signed activations q. That adds
 * 128 * sum(q) to each 4-byte group's sum; the accumulator starts from the
 * precomputed -128 * sum(q) of the same group (fg_q8_act.corr), so every lane is
 * the exact integer dot of its 4 pairs, for all w in [-128, 127] and q in
 * [-127, 127]. Per block, the 8 lanes are widened to f32 and multiplied-added
 * with the block scale d_w * d_x; the scales of 16 blocks are converted at once.
 *
 * The activation quantizer repeats fg_quantize_row_q8_0's arithmetic step for
 * step (same divisions, round half away from zero, NaN -> 0, clamp to 127), so
 * its output is bit-identical to the reference.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/numeric.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* ---- activation quantization ---- */

/* q8_round of fg_quantize_row_q8_0 on 16 lanes: returns int32 lanes. */
ALWAYS_INLINE __m512i q8_round16(__m512 v)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 r0 = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_sub_ps(v, r0); /* exact below 2^23 */
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, frac), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 away = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(sign, v));
    __m512 r = _mm512_mask_add_ps(r0, up, r0, away);
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    const __mmask16 ord = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    r = _mm512_maskz_mov_ps(ord, r);
    return _mm512_cvttps_epi32(r);
}

void fg_matmul_quant_q8_avx512(const fg_matmul_args *a, int64_t t_begin, int64_t t_end)
{
    const int64_t n_in = a->n_in, nb = n_in / FG_Q8_0_BLOCK;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t t = t_begin; t < t_end; t++) {
        const float *x = a->x + t * n_in;
        int8_t *qs = a->xq.qs + t * a->xq.qs_stride;
        int32_t *corr = a->xq.corr + t * a->xq.corr_stride;
        float *d = a->xq.d + t * a->xq.d_stride;
        for (int64_t b = 0; b < nb; b++) {
            const __m512 v0 = _mm512_loadu_ps(x + b * 32);
            const __m512 v1 = _mm512_loadu_ps(x + b * 32 + 16);
            /* max(|v|, acc): a NaN lane yields acc, as fmaxf ignores NaN */
            __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_setzero_ps());
            m = _mm512_max_ps(_mm512_andnot_ps(sign, v1), m);
            const float amax = _mm512_reduce_max_ps(m);
            const float dd = amax / 127.0f;
            const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
            d[b] = _cvtsh_ss(_cvtss_sh(dd, _MM_FROUND_TO_NEAREST_INT));
            const __m512 vid = _mm512_set1_ps(id);
            const __m128i q0 = _mm512_cvtepi32_epi8(q8_round16(_mm512_mul_ps(v0, vid)));
            const __m128i q1 = _mm512_cvtepi32_epi8(q8_round16(_mm512_mul_ps(v1, vid)));
            const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
            _mm256_store_si256((__m256i *)(qs + b * 32), q);
            /* 128 * (sum of each group of 4), negated */
            const __m256i s128 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), q);
            _mm256_store_si256((__m256i *)(corr + b * 8), _mm256_sub_epi32(_mm256_setzero_si256(), s128));
        }
        for (int64_t b = nb; b < a->xq.d_stride; b++)
            d[b] = 0.0f; /* the kernels load scales 16 at a time */
    }
}

/* ---- helpers ---- */

ALWAYS_INLINE float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 weights of a float-like row starting at element k, widened to f32. */
ALWAYS_INLINE __m512 load_w16(int wtype, const uint8_t *row, int64_t k)
{
    switch (wtype) {
    case FG_WTYPE_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * k)));
    case FG_WTYPE_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * k))), 16));
    default:
        return _mm512_loadu_ps((const float *)(row + 4 * k));
    }
}

/* The same for the first lanes of mask m; the other lanes are 0 and their memory is not read. */
ALWAYS_INLINE __m512 load_w16_mask(int wtype, const uint8_t *row, int64_t k, __mmask16 m)
{
    switch (wtype) {
    case FG_WTYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * k));
    case FG_WTYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + 2 * k)), 16));
    default:
        return _mm512_maskz_loadu_ps(m, row + 4 * k);
    }
}

/* ---- float-like weights: F32, F16, BF16 ---- */

ALWAYS_INLINE void tile_float(const fg_matmul_args *a, const int wtype, const int R, const int T, int64_t o,
                              int64_t t0)
{
    const int64_t n_in = a->n_in;
    const uint8_t *wr[4];
    const float *xt[4];
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        wr[r] = (const uint8_t *)a->w + (size_t)(o + r) * a->row_bytes;
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        xt[t] = a->x + (t0 + t) * n_in;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();

    int64_t k = 0;
    for (; k + 16 <= n_in; k += 16) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = load_w16(wtype, wr[r], k);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_loadu_ps(xt[t] + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (k < n_in) {
        const __mmask16 m = (__mmask16)((1u << (n_in - k)) - 1);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = load_w16_mask(wtype, wr[r], k, m);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, xt[t] + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            a->y[(t0 + t) * a->n_out + o + r] = _mm512_reduce_add_ps(acc[r][t]);
}

ALWAYS_INLINE void rows_float(const fg_matmul_args *a, const int wtype, int64_t o_begin, int64_t o_end)
{
    const int64_t n_tok = a->n_tok;
    int64_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) {
        int64_t t = 0;
        for (; t + 4 <= n_tok; t += 4)
            tile_float(a, wtype, 4, 4, o, t);
        for (; t < n_tok; t++)
            tile_float(a, wtype, 4, 1, o, t);
    }
    for (; o < o_end; o++) {
        int64_t t = 0;
        for (; t + 4 <= n_tok; t += 4)
            tile_float(a, wtype, 1, 4, o, t);
        for (; t < n_tok; t++)
            tile_float(a, wtype, 1, 1, o, t);
    }
}

/* ---- Q8_0 ---- */

ALWAYS_INLINE void tile_q8(const fg_matmul_args *a, const int R, const int T, int64_t o, int64_t t0)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK;
    const size_t bs = sizeof(fg_block_q8_0);
    const uint8_t *wr[4];
    const int8_t *xs[4];
    const int32_t *xc[4];
    const float *xd[4];
    __m256 acc[4][4];
    float s[4][4][16] __attribute__((aligned(64))); /* d_w * d_x of 16 blocks, per row and token */
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    const __m512i boff = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)bs));
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        wr[r] = (const uint8_t *)a->w + (size_t)(o + r) * a->row_bytes;
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        xs[t] = a->xq.qs + (t0 + t) * a->xq.qs_stride;
        xc[t] = a->xq.corr + (t0 + t) * a->xq.corr_stride;
        xd[t] = a->xq.d + (t0 + t) * a->xq.d_stride;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();

    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
        const int cb = nb - b0 < 16 ? (int)(nb - b0) : 16;
        const __mmask16 km = (__mmask16)(cb == 16 ? 0xffffu : (1u << cb) - 1);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            /* the 16 F16 scales sit 34 bytes apart: gather 4 bytes at each (the
             * scale and the first two quants, inside the block), keep the low half */
            const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), km, boff, wr[r] + b0 * bs, 1);
            const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
#pragma GCC unroll 4
            for (int t = 0; t < T; t++)
                _mm512_store_ps(s[r][t], _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(km, xd[t] + b0)));
        }
        for (int i = 0; i < cb; i++) {
            const int64_t b = b0 + i;
            __m256i wu[4];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                wu[r] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(wr[r] + b * bs + 2)), flip);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                const __m256i xv = _mm256_load_si256((const __m256i *)(xs[t] + b * 32));
                const __m256i cv = _mm256_load_si256((const __m256i *)(xc[t] + b * 8));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const __m256i dp = _mm256_dpbusd_epi32(cv, wu[r], xv);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), _mm256_set1_ps(s[r][t][i]), acc[r][t]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            a->y[(t0 + t) * a->n_out + o + r] = hsum256(acc[r][t]);
}

static void rows_q8(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    const int64_t n_tok = a->n_tok;
    int64_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) {
        int64_t t = 0;
        for (; t + 4 <= n_tok; t += 4)
            tile_q8(a, 4, 4, o, t);
        for (; t < n_tok; t++)
            tile_q8(a, 4, 1, o, t);
    }
    for (; o < o_end; o++) {
        int64_t t = 0;
        for (; t + 4 <= n_tok; t += 4)
            tile_q8(a, 1, 4, o, t);
        for (; t < n_tok; t++)
            tile_q8(a, 1, 1, o, t);
    }
}

static void rows_f32(const fg_matmul_args *a, int64_t ob, int64_t oe)
{
    rows_float(a, FG_WTYPE_F32, ob, oe);
}

static void rows_f16(const fg_matmul_args *a, int64_t ob, int64_t oe)
{
    rows_float(a, FG_WTYPE_F16, ob, oe);
}

static void rows_bf16(const fg_matmul_args *a, int64_t ob, int64_t oe)
{
    rows_float(a, FG_WTYPE_BF16, ob, oe);
}

void fg_matmul_rows_avx512(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    switch (a->wtype) {
    case FG_WTYPE_F32:
        rows_f32(a, o_begin, o_end);
        break;
    case FG_WTYPE_F16:
        rows_f16(a, o_begin, o_end);
        break;
    case FG_WTYPE_BF16:
        rows_bf16(a, o_begin, o_end);
        break;
    case FG_WTYPE_Q8_0:
        rows_q8(a, o_begin, o_end);
        break;
    }
}
