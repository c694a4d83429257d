/* matmul_avx512.c: AVX-512 (F/BW/VL/DQ + VNNI) kernels of matmul.h.
 * Compiled with AVX-512 flags; matmul.c calls in only after checking the CPU.
 *
 * Shapes of work:
 *   - Decode and tiny batches (n_tok < 4; Q8_0: one token): memory-bound. Each thread walks its
 *     rows one after another, so its share of W is read as one sequential
 *     stream; on the development machine (Zen 4 VM) that streams at the
 *     machine's read bandwidth, where four interleaved row streams got about
 *     half of it. Four accumulators per row hide the FMA latency; the row stays
 *     in L1 for the batch's other tokens.
 *   - Batches (n_tok >= 4): compute-bound. Tiles of 4 rows x 4 tokens with 16
 *     accumulators in registers; the 4 rows are read from memory once and
 *     reused from L1 by every token tile (the batch loop is inside the row loop).
 *   - Q8_0 batches of 2 .. 12 tokens: rows, two blocks per ZMM, every token
 *     against the row while it is in registers (see "a few tokens" below);
 *     more than 12: 16-row panels repacked for vpdpbusd (see "Q8_0 panels"
 *     below), the tiles serving only the leftover rows.
 *
 * Q8_0 integer dots (exact int32 in every case):
 *   - decode: the sign trick, |w| (unsigned; 128 for -128) times q with w's
 *     sign applied (q is in [-127, 127], so the negation never overflows), by
 *     vpdpbusd from zero;
 *   - tiles: w ^ 0x80 = w + 128 as unsigned, shared by the tile's 4 tokens,
 *     against the signed q; that adds 128 * sum(q) to each 4-byte group's sum,
 *     so the accumulator starts from the precomputed -128 * sum(q) of the group
 *     (fg_q8_act.corr). Cheaper than the sign trick when a w register serves
 *     four tokens.
 *   - panels: the same w ^ 0x80 trick, the correction per block.
 *   Per block, the int32 lanes are widened to f32 and multiplied-added with
 *   the block scale d_w * d_x; a tile converts the scales of 16 blocks at once.
 *
 * BF16 weights on a CPU with avx512_bf16 go through vdpbf16ps against the
 * activations rounded to BF16 once per call (see "BF16 by vdpbf16ps" below);
 * without it they are widened to f32 and take the float path.
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
#include "kernels/cpu/simd_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Batches of at least this many tokens use the row x token tiles (and, for
 * Q8_0 from PANEL_MIN_TOKENS, the panels). */
#define TILE_MIN_TOKENS 4
/* Q8_0 batches of at least this many tokens use repacked 16-row panels. */
#define PANEL_MIN_TOKENS 8
#define PANEL_ROWS 16
#define PANEL_BLOCKS 16 /* blocks repacked at a time: 8 KB of weights and 1 KB of scales, in L1 */
/* Q8_0 batches of 2 .. FEW_MAX_TOKENS tokens use the two-blocks-per-ZMM row kernel. */
#define FEW_MAX_TOKENS 12
/* Packed products of at least this many tokens per group accumulate each
 * block in one vpdpbusd chain (the tokens' chains run side by side). */
#define P16_ONE_CHAIN_TOKENS 4

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
    /* the panels (repacked here or at load) read the activations interleaved */
    const int interleave = a->q8_panels, tiles = a->q8_corr;
    for (int64_t t = t_begin; t < t_end; t++) {
        const float *x = a->x ? a->x + t * n_in : NULL;
        int8_t *qs = a->xq.qs + t * a->xq.qs_stride;
        int32_t *corr = a->xq.corr + t * a->xq.corr_stride;
        float *d = a->xq.d + t * a->xq.d_stride;
        const int8_t *src_qs = a->src_qs ? a->src_qs + (int64_t)a->src_rows[t] * a->src_qs_stride : NULL;
        const float *src_d = a->src_qs ? a->src_d + (int64_t)a->src_rows[t] * a->src_d_stride : NULL;
        for (int64_t b = 0; b < nb; b++) {
            __m256i q;
            if (src_qs) { /* quantized earlier (fg_matmul_q8_rows) */
                q = _mm256_load_si256((const __m256i *)(src_qs + b * 32));
                d[b] = src_d[b];
            } else {
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
                q = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
            }
            _mm256_store_si256((__m256i *)(qs + b * 32), q);
            if (!tiles && !interleave)
                continue; /* only the tiles and panels use the correction */
            /* 128 * (sum of each group of 4), negated */
            const __m256i s128 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), q);
            if (tiles)
                _mm256_store_si256((__m256i *)(corr + b * 8), _mm256_sub_epi32(_mm256_setzero_si256(), s128));
            if (interleave) {
                __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s128), _mm256_extracti128_si256(s128, 1));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
                const int64_t slot = ((t / FG_Q8_PANEL_TOKENS) * nb + b) * FG_Q8_PANEL_TOKENS + t % FG_Q8_PANEL_TOKENS;
                _mm256_store_si256((__m256i *)(a->xq.pq + slot * 32), q);
                a->xq.pd[slot] = d[b];
                a->xq.pc[slot] = -_mm_cvtsi128_si32(h);
            }
        }
        for (int64_t b = nb; b < a->xq.d_stride; b++)
            d[b] = 0.0f; /* the kernels load scales 16 at a time */
        if (interleave && a->q8_pad && t == a->n_tok - 1) {
            /* the last group's tokens past n_tok: zeros (their results are never stored;
             * the packed kernel reads only the tokens there are, so it skips this) */
            for (int64_t j = a->n_tok % FG_Q8_PANEL_TOKENS; j && j < FG_Q8_PANEL_TOKENS; j++)
                for (int64_t b = 0; b < nb; b++) {
                    const int64_t slot = ((t / FG_Q8_PANEL_TOKENS) * nb + b) * FG_Q8_PANEL_TOKENS + j;
                    memset(a->xq.pq + slot * 32, 0, 32);
                    a->xq.pd[slot] = 0.0f;
                    a->xq.pc[slot] = 0;
                }
        }
    }
}

void fg_matmul_q8_needs_avx512(int wtype, int64_t n_tok, int *corr, int *panels, int *pad)
{
    *corr = n_tok >= TILE_MIN_TOKENS && wtype == FG_WTYPE_Q8_0;
    *panels = (n_tok >= PANEL_MIN_TOKENS && wtype == FG_WTYPE_Q8_0) || wtype == FG_WTYPE_Q8_0_P16;
    *pad = n_tok >= PANEL_MIN_TOKENS && wtype == FG_WTYPE_Q8_0;
}

/* ---- helpers ---- */

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

/* Rows against 2 or 3 tokens (a verify pass), each row against every token at
 * once so the tokens' chains overlap; out of line, which keeps the decode loop
 * as fast as it was (inlined here, it ran 20 % slower). */
static __attribute__((noinline)) void rows_float_few(const fg_matmul_args *a, const int wtype, int64_t o_begin,
                                                     int64_t o_end)
{
    if (a->n_tok == 2)
        for (int64_t o = o_begin; o < o_end; o++)
            tile_float(a, wtype, 1, 2, o, 0);
    else
        for (int64_t o = o_begin; o < o_end; o++)
            tile_float(a, wtype, 1, 3, o, 0);
}

/* One row against one token: the decode case, and a batch's leftover rows
 * and tokens. One accumulator over the row's 16-wide chunks in order, the
 * masked tail last, then the reduction: exactly tile_float's sum for one
 * (row, token), so a token gets the same bits alone, in a tile or beside one,
 * in any batch (speculative decoding's verify passes need it). Rows are taken
 * one after another, so a thread reads its share of W as a single sequential
 * stream, which the hardware prefetchers follow far better than four
 * interleaved row streams (measured: ~25 against ~14 GB/s); one FMA chain
 * still consumes 64 bytes per FMA latency, above a core's share of the
 * bandwidth (as the BF16 kernel below). */
ALWAYS_INLINE float row_float_1(const fg_matmul_args *a, const int wtype, int64_t o, int64_t t)
{
    const int64_t n_in = a->n_in;
    const uint8_t *wr = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
    const float *x = a->x + t * n_in;
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n_in; k += 16)
        acc = _mm512_fmadd_ps(load_w16(wtype, wr, k), _mm512_loadu_ps(x + k), acc);
    if (k < n_in) {
        const __mmask16 m = (__mmask16)((1u << (n_in - k)) - 1);
        acc = _mm512_fmadd_ps(load_w16_mask(wtype, wr, k, m), _mm512_maskz_loadu_ps(m, x + k), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

ALWAYS_INLINE void rows_float(const fg_matmul_args *a, const int wtype, int64_t o_begin, int64_t o_end)
{
    const int64_t n_tok = a->n_tok;
    if (n_tok > 1 && n_tok < TILE_MIN_TOKENS)
        return rows_float_few(a, wtype, o_begin, o_end);
    if (n_tok == 1) {
        /* decode: rows one after another */
        for (int64_t o = o_begin; o < o_end; o++)
            a->y[o] = row_float_1(a, wtype, o, 0);
        return;
    }
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
            a->y[t * a->n_out + o] = row_float_1(a, wtype, o, t);
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
            a->y[(t0 + t) * a->n_out + o + r] = hsum8(acc[r][t]);
}

/* One Q8_0 block of the decode kernel: the sign trick (|w| as unsigned, q
 * with w's sign; q is in [-127, 127] so the negation never overflows), no
 * correction term to load. */
ALWAYS_INLINE __m256 q8_block_1(const uint8_t *wr, const int8_t *xs, const float *xd, int64_t b, __m256 acc)
{
    const size_t bs = sizeof(fg_block_q8_0);
    const __m256i w = _mm256_loadu_si256((const __m256i *)(wr + b * bs + 2));
    const __m256i q = _mm256_load_si256((const __m256i *)(xs + b * 32));
    const __m256i dp = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(q, w));
    uint16_t dh;
    memcpy(&dh, wr + b * bs, 2);
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16((short)dh)), _mm256_set1_ps(xd[b]));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), d, acc);
}

/* Decode: one row against one token, four accumulators, rows one after the
 * other (a single sequential stream per thread, as for the float types). */
static float row_q8_1(const fg_matmul_args *a, int64_t o, int64_t t)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK;
    const uint8_t *wr = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
    const int8_t *xs = a->xq.qs + t * a->xq.qs_stride;
    const float *xd = a->xq.d + t * a->xq.d_stride;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
           acc3 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        acc0 = q8_block_1(wr, xs, xd, b, acc0);
        acc1 = q8_block_1(wr, xs, xd, b + 1, acc1);
        acc2 = q8_block_1(wr, xs, xd, b + 2, acc2);
        acc3 = q8_block_1(wr, xs, xd, b + 3, acc3);
    }
    for (; b < nb; b++)
        acc0 = q8_block_1(wr, xs, xd, b, acc0);
    return hsum8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

/* ---- Q8_0, a few tokens (2 .. FEW_MAX_TOKENS): the MoE experts' case ----
 *
 * Row by row like the decode kernel, but two blocks per ZMM: the row's blocks
 * b and b + 1 (32 bytes each, 34 apart) fill one register and the token's q of
 * the same two blocks is 64 contiguous bytes. The sign trick with a mask (w's
 * sign bits by vpmovb2m, q negated under it) is computed once per row pair of
 * blocks and shared by the tokens; each token then pays one vpdpbusd, one
 * widening and one multiply-add per 64 products, its scales [d_x(b) x 8,
 * d_x(b+1) x 8] built by one permute of two floats. T accumulators, one per
 * token, stay in registers across the row. */

ALWAYS_INLINE void row_q8_few(const fg_matmul_args *a, const int T, int64_t o)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK;
    const size_t bs = sizeof(fg_block_q8_0);
    const uint8_t *wr = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
    const __m512i pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc[FEW_MAX_TOKENS];
#pragma GCC unroll 16
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *blk = wr + (size_t)b * bs;
        const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(blk + 2))),
                                             _mm256_loadu_si256((const __m256i *)(blk + bs + 2)), 1);
        const __mmask64 neg = _mm512_movepi8_mask(w);
        const __m512i aw = _mm512_abs_epi8(w);
        uint16_t d0, d1;
        memcpy(&d0, blk, 2);
        memcpy(&d1, blk + bs, 2);
        const __m512 dw = _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16((short)d1), _mm_set1_epi16((short)d0)));
#pragma GCC unroll 16
        for (int t = 0; t < T; t++) {
            const __m512i q = _mm512_load_si512((const void *)(a->xq.qs + t * a->xq.qs_stride + b * 32));
            const __m512i sq = _mm512_mask_sub_epi8(q, neg, _mm512_setzero_si512(), q);
            const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sq);
            const __m128 dx2 = _mm_castpd_ps(_mm_load_sd((const double *)(a->xq.d + t * a->xq.d_stride + b)));
            const __m512 d = _mm512_mul_ps(dw, _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(dx2)));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), d, acc[t]);
        }
    }
    if (b < nb) { /* an odd last block: half a register */
#pragma GCC unroll 16
        for (int t = 0; t < T; t++) {
            const __m256 r = q8_block_1(wr, a->xq.qs + t * a->xq.qs_stride, a->xq.d + t * a->xq.d_stride, b,
                                        _mm256_setzero_ps());
            acc[t] = _mm512_add_ps(acc[t], _mm512_insertf32x8(_mm512_setzero_ps(), r, 0));
        }
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; t++)
        a->y[t * a->n_out + o] = _mm512_reduce_add_ps(acc[t]);
}

static void rows_q8_few(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    switch (a->n_tok) {
#define FEW(T)                                                                                                     \
    case T:                                                                                                        \
        for (int64_t o = o_begin; o < o_end; o++)                                                                  \
            row_q8_few(a, T, o);                                                                                   \
        return;
        FEW(2)
        FEW(3)
        FEW(4)
        FEW(5)
        FEW(6)
        FEW(7)
        FEW(8)
        FEW(9)
        FEW(10)
        FEW(11)
        FEW(12)
#undef FEW
    default:
        return;
    }
}

/* ---- Q8_0 panels (batches of >= PANEL_MIN_TOKENS) ----
 *
 * 16 rows are repacked, PANEL_BLOCKS blocks at a time, so that one ZMM holds
 * the same 4-byte group of all 16 rows (w ^ 0x80, unsigned). One vpdpbusd of
 * that register against the token's 4 bytes of q broadcast then advances all
 * 16 rows by 4 products, lane j being row j: after the block's 8 groups, lane j
 * holds row j's block dot (plus 128 * the block's sum of q, which the
 * accumulator's start value, fg_q8_act.pc, takes back). Per block and token
 * that is 8 vpdpbusd and a single widening and multiply-add for 16 rows, where
 * the tiles need one of each per row. The repacking (two 8x8 int32
 * transposes) is paid once per block and reused by every token of the batch;
 * the activations come interleaved by 8 tokens (fg_q8_act.pq) so one pointer
 * reaches the group's tokens at constant offsets. y[t][o .. o+15] holds the
 * running sums between chunks of blocks. On Zen 4 this runs at 2x the tiles
 * (131 against 62 GMAC/s per core at 64 tokens). */

typedef struct panel {
    __m512i w[PANEL_BLOCKS][8]; /* [block][group]: group g of rows 0..15, 4 bytes each, w ^ 0x80 */
    __m512 dw[PANEL_BLOCKS];    /* the 16 rows' block scales */
} panel;

/* 8 rows' 32 bytes of one block -> 8 vectors, vector g = group g of the 8 rows
 * (an 8x8 transpose of int32) */
ALWAYS_INLINE void transpose8(const __m256i v[8], __m256i out[8])
{
    const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(v[4], v[5]), t5 = _mm256_unpackhi_epi32(v[4], v[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(v[6], v[7]), t7 = _mm256_unpackhi_epi32(v[6], v[7]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    out[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    out[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    out[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    out[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    out[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    out[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    out[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    out[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

static void panel_pack(panel *p, const uint8_t *w0, size_t row_bytes, int64_t b0, int cb)
{
    const size_t bs = sizeof(fg_block_q8_0);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int i = 0; i < cb; i++) {
        const uint8_t *blk = w0 + (size_t)(b0 + i) * bs;
        __m256i v[8], lo[8], hi[8];
        uint16_t d[16];
        for (int r = 0; r < 16; r++)
            memcpy(&d[r], blk + r * row_bytes, 2);
        p->dw[i] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d));
        for (int r = 0; r < 8; r++)
            v[r] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + r * row_bytes + 2)), flip);
        transpose8(v, lo);
        for (int r = 0; r < 8; r++)
            v[r] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + (r + 8) * row_bytes + 2)), flip);
        transpose8(v, hi);
        for (int g = 0; g < 8; g++)
            p->w[i][g] = _mm512_inserti64x4(_mm512_castsi256_si512(lo[g]), hi[g], 1);
    }
}

/* 4 bytes of q, broadcast (an unaligned, aliasing-safe load) */
ALWAYS_INLINE __m512i bcast4(const int8_t *p)
{
    return _mm512_broadcastd_epi32(_mm_loadu_si32(p));
}

/* One token's block against 16 packed rows: lane r = corr + the dot of row r's
 * block (w ^ 0x80) with the token's 32 q. Integer sums, exact in any order,
 * so the one-chain and two-chain forms give the same bits. */
ALWAYS_INLINE __m512i block_dot_1chain(const __m512i wg[8], const int8_t *q, int32_t corr)
{
    __m512i acc = _mm512_set1_epi32(corr);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        acc = _mm512_dpbusd_epi32(acc, wg[g], bcast4(q + 4 * g));
    return acc;
}

/* The same in two chains of 4: half the latency, for a token or few whose
 * chains would not overlap enough. */
ALWAYS_INLINE __m512i block_dot_2chains(const __m512i wg[8], const int8_t *q, int32_t corr)
{
    __m512i acc0 = _mm512_set1_epi32(corr), acc1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        acc0 = _mm512_dpbusd_epi32(acc0, wg[g], bcast4(q + 4 * g));
        acc1 = _mm512_dpbusd_epi32(acc1, wg[g + 4], bcast4(q + 16 + 4 * g));
    }
    return _mm512_add_epi32(acc0, acc1);
}

/* Token group grp (tokens 8 grp .. 8 grp + n_valid - 1) against a packed chunk
 * of blocks [b0, b0 + cb) of rows o .. o + 15. */
static void panel_tokens(const fg_matmul_args *a, const panel *p, int64_t o, int64_t b0, int cb, int64_t grp,
                         int n_valid, int first)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK;
    const int64_t slot0 = (grp * nb + b0) * FG_Q8_PANEL_TOKENS;
    const int8_t *pq = a->xq.pq + slot0 * 32;
    const float *pd = a->xq.pd + slot0;
    const int32_t *pc = a->xq.pc + slot0;
    float *y = a->y + grp * FG_Q8_PANEL_TOKENS * a->n_out + o;
    __m512 yacc[FG_Q8_PANEL_TOKENS];
#pragma GCC unroll 8
    for (int t = 0; t < FG_Q8_PANEL_TOKENS; t++)
        yacc[t] = first || t >= n_valid ? _mm512_setzero_ps() : _mm512_loadu_ps(y + t * a->n_out);
    for (int i = 0; i < cb; i++) {
        __m512i wg[8];
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            wg[g] = _mm512_load_si512(&p->w[i][g]);
        const __m512 dw = _mm512_load_ps((const float *)&p->dw[i]);
        const int8_t *q = pq + (size_t)i * FG_Q8_PANEL_TOKENS * 32;
#pragma GCC unroll 8
        for (int t = 0; t < FG_Q8_PANEL_TOKENS; t++) {
            /* one chain of 8 vpdpbusd per token: the 8 tokens' chains overlap */
            const __m512i dot = block_dot_1chain(wg, q + 32 * t, pc[i * FG_Q8_PANEL_TOKENS + t]);
            const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(pd[i * FG_Q8_PANEL_TOKENS + t]));
            yacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, yacc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < FG_Q8_PANEL_TOKENS; t++)
        if (t < n_valid)
            _mm512_storeu_ps(y + t * a->n_out, yacc[t]);
}

static void panel_rows(const fg_matmul_args *a, int64_t o)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK, n_tok = a->n_tok;
    const uint8_t *w0 = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
    panel p;
    for (int64_t b0 = 0; b0 < nb; b0 += PANEL_BLOCKS) {
        const int cb = nb - b0 < PANEL_BLOCKS ? (int)(nb - b0) : PANEL_BLOCKS;
        panel_pack(&p, w0, a->row_bytes, b0, cb);
        for (int64_t grp = 0; grp * FG_Q8_PANEL_TOKENS < n_tok; grp++) {
            const int64_t left = n_tok - grp * FG_Q8_PANEL_TOKENS;
            panel_tokens(a, &p, o, b0, cb, grp, left < FG_Q8_PANEL_TOKENS ? (int)left : FG_Q8_PANEL_TOKENS, b0 == 0);
        }
    }
}

static void rows_q8(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    const int64_t n_tok = a->n_tok;
    /* 2 .. FEW_MAX_TOKENS tokens (the MoE experts: ~6 tokens each at 64
     * sessions): the two-blocks-per-ZMM row kernel. Measured on the expert
     * shapes (one core, 64 different experts in turn, shared machine): 1024 ->
     * 256 at 6 tokens 38 us, where the 4x4 tiles took 79 and single-token
     * rows 52; at 8 .. 12 tokens 48 .. 73 us against the panels' 65 .. 77. */
    if (n_tok > 1 && n_tok <= FEW_MAX_TOKENS) {
        rows_q8_few(a, o_begin, o_end);
        return;
    }
    if (n_tok == 1) {
        for (int64_t o = o_begin; o < o_end; o++)
            a->y[o] = row_q8_1(a, o, 0);
        return;
    }
    int64_t o = o_begin;
    if (n_tok >= PANEL_MIN_TOKENS)
        for (; o + PANEL_ROWS <= o_end; o += PANEL_ROWS)
            panel_rows(a, o);
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
            a->y[t * a->n_out + o] = row_q8_1(a, o, t);
    }
}

/* ---- Q8_0 packed at load (FG_WTYPE_Q8_0_P16, layout in matmul.h) ----
 *
 * The panel kernel above without its repacking: the weights already hold
 * each 4-byte group of 16 rows in one 64-byte line, w ^ 0x80, and the 16
 * scales of a block side by side. So any batch, 1 token included, pays 8
 * vpdpbusd and one widening and multiply-add per block and token for 16 rows,
 * where the few-token row kernel pays 16 of each. The block loop runs whole
 * inside a token group, the group's sums staying in registers; a panel (17 KB
 * at n_in = 1024) stays in L1/L2 for the next group. */

ALWAYS_INLINE void p16_tokens(const fg_matmul_args *a, const uint8_t *pw, int64_t o, int64_t grp, const int T)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK;
    const uint8_t *scales = pw + (size_t)nb * PANEL_ROWS * FG_Q8_0_BLOCK;
    const int64_t slot0 = grp * nb * FG_Q8_PANEL_TOKENS;
    const int8_t *pq = a->xq.pq + slot0 * 32;
    const float *pd = a->xq.pd + slot0;
    const int32_t *pc = a->xq.pc + slot0;
    __m512 yacc[FG_Q8_PANEL_TOKENS];
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        yacc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = pw + (size_t)b * PANEL_ROWS * FG_Q8_0_BLOCK;
        __m512i wg[8];
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++)
            wg[g] = _mm512_loadu_si512((const void *)(wb + 64 * g));
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(scales + (size_t)b * 32)));
        const int8_t *q = pq + (size_t)b * FG_Q8_PANEL_TOKENS * 32;
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            /* with 4+ tokens their chains overlap, and one chain saves an add and a zeroing */
            const int32_t corr = pc[b * FG_Q8_PANEL_TOKENS + t];
            const __m512i dot = T >= P16_ONE_CHAIN_TOKENS ? block_dot_1chain(wg, q + 32 * t, corr)
                                                          : block_dot_2chains(wg, q + 32 * t, corr);
            const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(pd[b * FG_Q8_PANEL_TOKENS + t]));
            yacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, yacc[t]);
        }
    }
    float *y = a->y + grp * FG_Q8_PANEL_TOKENS * a->n_out + o;
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        _mm512_storeu_ps(y + t * a->n_out, yacc[t]);
}

/* o_begin and o_end are multiples of 16 (fg_matmul checks n_out and hands out whole panels). */
static void rows_q8_p16(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    for (int64_t o = o_begin; o < o_end; o += PANEL_ROWS) {
        const uint8_t *pw = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
        for (int64_t grp = 0; grp * FG_Q8_PANEL_TOKENS < a->n_tok; grp++) {
            const int64_t left = a->n_tok - grp * FG_Q8_PANEL_TOKENS;
            switch (left < FG_Q8_PANEL_TOKENS ? (int)left : FG_Q8_PANEL_TOKENS) {
#define P16(T)                                                                                                     \
    case T:                                                                                                        \
        p16_tokens(a, pw, o, grp, T);                                                                           \
        break;
                P16(1)
                P16(2)
                P16(3)
                P16(4)
                P16(5)
                P16(6)
                P16(7)
                P16(8)
#undef P16
            }
        }
    }
}

/* ---- BF16 by vdpbf16ps (avx512_bf16) ----
 *
 * Numerics (matmul.h): x is rounded to BF16 once per call, round to nearest
 * even (vcvtne2ps2bf16), into scratch; the weights are used as stored. Each
 * vdpbf16ps lane adds two exact BF16 x BF16 products to an f32 accumulator.
 * Both instructions treat denormal inputs as zero and flush denormal results,
 * whatever MXCSR says: activations or weights below 2^-126 in magnitude count
 * as 0.
 *
 * Batch invariance: every (row, token) output is one accumulator over the
 * 32-element chunks of the row in order (the last chunk masked; x's padding
 * in scratch is zero), then _mm512_reduce_add_ps. The tiles below only share
 * loads between rows and tokens, so a token gets the same bits alone, in any
 * batch, in any tile position and on any thread split. One accumulator is
 * enough to keep up with memory in decode: a 6-cycle chain still consumes
 * 64 bytes of weights per ~6 cycles, above one core's share of the bandwidth. */

void fg_matmul_round_bf16_avx512(const fg_matmul_args *a, int64_t t_begin, int64_t t_end)
{
    const int64_t n_in = a->n_in;
    for (int64_t t = t_begin; t < t_end; t++) {
        const float *x = a->x + t * n_in;
        uint16_t *xb = a->xb + t * a->xb_stride;
        for (int64_t k = 0; k < a->xb_stride; k += 32) {
            const int64_t left = n_in - k;
            const __mmask16 m0 = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            const __mmask16 m1 = left >= 32 ? (__mmask16)0xffff : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
            const __m512 lo = _mm512_maskz_loadu_ps(m0, x + k), hi = _mm512_maskz_loadu_ps(m1, x + k + 16);
            _mm512_store_si512((void *)(xb + k), (__m512i)_mm512_cvtne2ps_pbh(hi, lo)); /* lo fills the low half */
        }
    }
}

ALWAYS_INLINE void tile_bf16(const fg_matmul_args *a, const int R, const int T, int64_t o, int64_t t0)
{
    const int64_t n_in = a->n_in;
    const uint16_t *wr[4];
    const uint16_t *xt[4];
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        wr[r] = (const uint16_t *)((const uint8_t *)a->w + (size_t)(o + r) * a->row_bytes);
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        xt[t] = a->xb + (t0 + t) * a->xb_stride;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= n_in; k += 32) {
        __m512i wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = _mm512_loadu_si512((const void *)(wr[r] + k));
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const __m512bh xv = (__m512bh)_mm512_load_si512((const void *)(xt[t] + k));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)wv[r], xv);
        }
    }
    if (k < n_in) {
        const __mmask32 m = (__mmask32)((1u << (n_in - k)) - 1); /* n_in - k < 32 */
        __m512i wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = _mm512_maskz_loadu_epi16(m, wr[r] + k);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const __m512bh xv = (__m512bh)_mm512_load_si512((const void *)(xt[t] + k));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)wv[r], xv);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            a->y[(t0 + t) * a->n_out + o + r] = _mm512_reduce_add_ps(acc[r][t]);
}

/* Decode and tiny batches: rows one after another (one sequential stream per
 * thread), each against every token while it is in registers and L1. Batches:
 * tiles of 4 rows x 4 tokens. The same per-output arithmetic either way. */
static void rows_bf16_dp(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    const int64_t n_tok = a->n_tok;
    if (n_tok < TILE_MIN_TOKENS) {
        for (int64_t o = o_begin; o < o_end; o++) {
            if (n_tok == 1)
                tile_bf16(a, 1, 1, o, 0);
            else if (n_tok == 2)
                tile_bf16(a, 1, 2, o, 0);
            else
                tile_bf16(a, 1, 3, o, 0);
        }
        return;
    }
    int64_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) {
        int64_t t = 0;
        for (; t + 4 <= n_tok; t += 4)
            tile_bf16(a, 4, 4, o, t);
        for (; t < n_tok; t++)
            tile_bf16(a, 4, 1, o, t);
    }
    for (; o < o_end; o++) {
        int64_t t = 0;
        for (; t + 4 <= n_tok; t += 4)
            tile_bf16(a, 1, 4, o, t);
        for (; t < n_tok; t++)
            tile_bf16(a, 1, 1, o, t);
    }
}

/* ---- MXFP4 ----
 *
 * Two blocks per ZMM: the 16 code bytes of each block are broadcast into two
 * 128-bit lanes, the second of the two shifted right by 4, masked to nibbles,
 * and vpshufb looks up the doubled E2M1 values (2 * e2m1, integers in
 * [-12, 12]) in a 16-entry table in every lane, so the register holds blocks b
 * and b + 1 in element order: the layout of the token's 64 contiguous int8 of
 * x. Then the few-token Q8_0 kernel's steps: q negated under the values' sign
 * mask, one vpdpbusd of the magnitudes (exact int32), the widening and one
 * multiply-add with [d(b) x 8, d(b+1) x 8], where d = 2^(e - 128) * d_x is
 * formed as the reference forms it (16 blocks' at once). An odd last block
 * pairs with zeros (its partner's scale is 0, and so are the activations'
 * scales past n_in / 32).
 *
 * Per (row, token): two accumulators by pair index mod 2 over a chunk of
 * FG_MXFP4_CHUNK_BLOCKS blocks, reduced to one float, the chunks' floats added
 * in order. A chunk is decoded once per row into a buffer (in L1) that every
 * token of the batch then reads, so a token's arithmetic, and its result, do
 * not depend on its batch. */

typedef struct mx_pair {
    __m512i aw;    /* magnitudes of the pair's 64 values */
    __mmask64 neg; /* which are negative */
} mx_pair;

ALWAYS_INLINE mx_pair mx_pair_decode(const uint8_t *k0, int two)
{
    /* 2 * fg_e2m1_to_f32(code) for codes 0..15, in each 128-bit lane */
    const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    const __m128i q0 = _mm_loadu_si128((const __m128i *)(k0 + 1));
    const __m128i q1 = two ? _mm_loadu_si128((const __m128i *)(k0 + sizeof(fg_block_mxfp4) + 1)) : _mm_setzero_si128();
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(q0)),
                                   _mm256_broadcastsi128_si256(q1), 1);
    v = _mm512_mask_srli_epi16(v, (__mmask32)0xff00ff00u, v, 4); /* lanes 1 and 3: the high nibbles */
    const __m512i w = _mm512_shuffle_epi8(tab, _mm512_and_si512(v, _mm512_set1_epi8(0x0f)));
    mx_pair p;
    p.aw = _mm512_abs_epi8(w);
    p.neg = _mm512_movepi8_mask(w);
    return p;
}

/* acc + the pair's products with the token's 64 int8 q; d16: the scales of
 * the 16 blocks of the pair's group, of which this pair takes lanes 2i, 2i + 1. */
ALWAYS_INLINE __m512 mx_pair_dot(mx_pair w, const int8_t *q, __m512 d16, const int i, __m512 acc)
{
    const __m512i idx = _mm512_setr_epi32(2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i + 1,
                                          2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1);
    const __m512i qv = _mm512_load_si512((const void *)q);
    const __m512i sq = _mm512_mask_sub_epi8(qv, w.neg, _mm512_setzero_si512(), qv);
    const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.aw, sq);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_permutexvar_ps(idx, d16), acc);
}

/* fg_mxfp4_half_scale of the scale bytes of the blocks from k in the lanes of
 * m, 0 in the others. The bytes sit 17 apart: a gather of 4 bytes at each (the
 * scale and the first codes, inside the block), keeping the low one. */
ALWAYS_INLINE __m512 mx_scales16(const uint8_t *k, __mmask16 m)
{
    const __m512i off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)sizeof(fg_block_mxfp4)));
    const __m512i e = _mm512_and_si512(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, off, k, 1),
                                       _mm512_set1_epi32(0xff));
    /* e >= 2: the biased exponent e - 1; e = 1, 0: the subnormals 2^-127, 2^-128; 0xFF: NaN */
    __m512i b = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    b = _mm512_mask_mov_epi32(b, _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2)),
                              _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e));
    b = _mm512_mask_mov_epi32(b, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xff)), _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(_mm512_maskz_mov_epi32(m, b));
}

typedef struct mx_chunk_avx512 {
    __m512i aw[FG_MXFP4_CHUNK_BLOCKS / 2];
    __mmask64 neg[FG_MXFP4_CHUNK_BLOCKS / 2];
    float dw[FG_MXFP4_CHUNK_BLOCKS] __attribute__((aligned(64))); /* 2^(e - 128); 0 past the chunk's blocks */
} mx_chunk_avx512;
_Static_assert(FG_MXFP4_CHUNK_BLOCKS % 16 == 0, "chunks of whole 16-block scale groups");

/* One token against the cb decoded blocks of c; xs, xd: the token's q and
 * scales of the chunk's first block. Groups of 16 blocks: their 16 scales
 * d = 2^(e - 128) * d_x in one multiply, each pair then taking its two by a
 * permute. */
static float mx_chunk_dot(const mx_chunk_avx512 *c, int cb, const int8_t *xs, const float *xd)
{
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int g = 0; g < cb; g += 16) {
        const int gb = cb - g < 16 ? cb - g : 16;
        const __mmask16 m = (__mmask16)(gb == 16 ? 0xffffu : (1u << gb) - 1);
        const __m512 d16 = _mm512_mul_ps(_mm512_load_ps(c->dw + g), _mm512_maskz_loadu_ps(m, xd + g));
        const int8_t *q = xs + g * 32;
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            if (2 * i >= gb)
                break;
            const mx_pair pr = {c->aw[g / 2 + i], c->neg[g / 2 + i]};
            if (i & 1)
                acc1 = mx_pair_dot(pr, q + 64 * i, d16, i, acc1);
            else
                acc0 = mx_pair_dot(pr, q + 64 * i, d16, i, acc0);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

static void rows_mxfp4(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    const int64_t nb = a->n_in / FG_MXFP4_BLOCK;
    const size_t bs = sizeof(fg_block_mxfp4);
    mx_chunk_avx512 c;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t *wr = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
        for (int64_t b0 = 0; b0 < nb; b0 += FG_MXFP4_CHUNK_BLOCKS) {
            const int cb = nb - b0 < FG_MXFP4_CHUNK_BLOCKS ? (int)(nb - b0) : FG_MXFP4_CHUNK_BLOCKS;
            const uint8_t *wc = wr + (size_t)b0 * bs;
            for (int i = 0; i < cb; i += 2) {
                const mx_pair pr = mx_pair_decode(wc + (size_t)i * bs, i + 1 < cb);
                c.aw[i / 2] = pr.aw;
                c.neg[i / 2] = pr.neg;
            }
            for (int g = 0; g < cb; g += 16) {
                const int gb = cb - g < 16 ? cb - g : 16;
                const __mmask16 m = (__mmask16)(gb == 16 ? 0xffffu : (1u << gb) - 1);
                _mm512_store_ps(c.dw + g, mx_scales16(wc + (size_t)g * bs, m));
            }
            for (int64_t t = 0; t < a->n_tok; t++) {
                const int8_t *xs = a->xq.qs + t * a->xq.qs_stride + b0 * 32;
                const float *xd = a->xq.d + t * a->xq.d_stride + b0;
                const float s = mx_chunk_dot(&c, cb, xs, xd);
                float *y = &a->y[t * a->n_out + o];
                *y = b0 == 0 ? s : *y + s;
            }
        }
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
        if (a->bf16_native)
            rows_bf16_dp(a, o_begin, o_end);
        else
            rows_bf16(a, o_begin, o_end);
        break;
    case FG_WTYPE_Q8_0:
        rows_q8(a, o_begin, o_end);
        break;
    case FG_WTYPE_Q8_0_P16:
        rows_q8_p16(a, o_begin, o_end);
        break;
    case FG_WTYPE_MXFP4:
        rows_mxfp4(a, o_begin, o_end);
        break;
    default: /* the types of quants.h (fg_matmul validated the type) */
        fg_matmul_rows_quant_avx512(a, o_begin, o_end);
        break;
    }
}
