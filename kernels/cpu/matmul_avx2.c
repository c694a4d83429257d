/* matmul_avx2.c: AVX2 + FMA + F16C kernels of matmul.h.
 * Compiled with -mavx2 -mfma -mf16c; matmul.c calls in only after checking the CPU.
 *
 * Same plan as matmul_avx512.c with the 16 YMM registers in mind. Decode and
 * tiny batches (n_tok < 4) go row by row, one sequential stream per thread,
 * four accumulators per row. Float batches use tiles of 4 rows x 2 tokens;
 * Q8_0 goes row by row for every batch, the row staying in L1 while the token
 * loop passes over it again.
 *
 * Q8_0 without VNNI, ggml's way: |w| (unsigned, 128 for -128) times q with the
 * sign of w applied (q is in [-127, 127], so the negation never overflows),
 * vpmaddubsw into 16-bit pairs (at most 2 * 128 * 127 = 32512: no saturation),
 * vpmaddwd by ones into 8 exact int32 lanes, then per block the f32 multiply-add
 * with d_w * d_x. MXFP4 takes the same steps on its decoded values (below).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/simd_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* ---- activation quantization (bit-identical to fg_quantize_row_q8_0) ---- */

/* q8_round of numeric.c on 8 lanes, int32 result */
ALWAYS_INLINE __m256i q8_round8(__m256 v)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 r0 = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_sub_ps(v, r0);
    const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, frac), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 away = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(sign, v));
    __m256 r = _mm256_add_ps(r0, _mm256_and_ps(up, away));
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    return _mm256_cvttps_epi32(r);
}

void fg_matmul_quant_q8_avx2(const fg_matmul_args *a, int64_t t_begin, int64_t t_end)
{
    const int64_t n_in = a->n_in, nb = n_in / FG_Q8_0_BLOCK;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t t = t_begin; t < t_end; t++) {
        int8_t *qs = a->xq.qs + t * a->xq.qs_stride;
        float *d = a->xq.d + t * a->xq.d_stride;
        if (a->src_qs) { /* quantized earlier (fg_matmul_q8_rows) */
            memcpy(qs, a->src_qs + (int64_t)a->src_rows[t] * a->src_qs_stride, (size_t)nb * 32);
            memcpy(d, a->src_d + (int64_t)a->src_rows[t] * a->src_d_stride, (size_t)nb * sizeof *d);
            for (int64_t b = nb; b < a->xq.d_stride; b++)
                d[b] = 0.0f;
            continue;
        }
        const float *x = a->x + t * n_in;
        for (int64_t b = 0; b < nb; b++) {
            __m256 v[4];
            __m256 m = _mm256_setzero_ps();
            for (int j = 0; j < 4; j++) {
                v[j] = _mm256_loadu_ps(x + b * 32 + 8 * j);
                m = _mm256_max_ps(_mm256_andnot_ps(sign, v[j]), m); /* NaN lanes keep m, like fmaxf */
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float amax = _mm_cvtss_f32(m4);
            const float dd = amax / 127.0f;
            const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
            d[b] = _cvtsh_ss(_cvtss_sh(dd, _MM_FROUND_TO_NEAREST_INT));
            const __m256 vid = _mm256_set1_ps(id);
            __m256i i0 = q8_round8(_mm256_mul_ps(v[0], vid));
            __m256i i1 = q8_round8(_mm256_mul_ps(v[1], vid));
            __m256i i2 = q8_round8(_mm256_mul_ps(v[2], vid));
            __m256i i3 = q8_round8(_mm256_mul_ps(v[3], vid));
            /* packs work per 128-bit lane; the permute restores element order */
            const __m256i p01 = _mm256_packs_epi32(i0, i1);
            const __m256i p23 = _mm256_packs_epi32(i2, i3);
            const __m256i p = _mm256_packs_epi16(p01, p23);
            const __m256i q = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_store_si256((__m256i *)(qs + b * 32), q);
        }
        for (int64_t b = nb; b < a->xq.d_stride; b++)
            d[b] = 0.0f; /* the kernels load scales 8 at a time */
    }
}

/* ---- helpers ---- */

ALWAYS_INLINE __m256 load_w8(int wtype, const uint8_t *row, int64_t k)
{
    switch (wtype) {
    case FG_WTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k)));
    case FG_WTYPE_BF16:
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * k))), 16));
    default:
        return _mm256_loadu_ps((const float *)(row + 4 * k));
    }
}

ALWAYS_INLINE float load_w1(int wtype, const uint8_t *row, int64_t k)
{
    uint16_t h;
    float f;
    switch (wtype) {
    case FG_WTYPE_F16:
        memcpy(&h, row + 2 * k, 2);
        return _cvtsh_ss(h);
    case FG_WTYPE_BF16:
        memcpy(&h, row + 2 * k, 2);
        return fg_bf16_to_f32(h);
    default:
        memcpy(&f, row + 4 * k, 4);
        return f;
    }
}

/* ---- float-like weights ---- */

/* One (row, token)'s accumulator reduced, then the elements past its last
 * 8-wide chunk added in order: the one ending of tile_float and row_float_1. */
ALWAYS_INLINE float float_sum(__m256 acc, const int wtype, const uint8_t *wr, const float *x, int64_t k, int64_t n_in)
{
    float sum = hsum8(acc);
    for (; k < n_in; k++)
        sum += load_w1(wtype, wr, k) * x[k];
    return sum;
}

ALWAYS_INLINE void tile_float(const fg_matmul_args *a, const int wtype, const int R, const int T, int64_t o,
                              int64_t t0)
{
    const int64_t n_in = a->n_in;
    const uint8_t *wr[4];
    const float *xt[2];
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        wr[r] = (const uint8_t *)a->w + (size_t)(o + r) * a->row_bytes;
#pragma GCC unroll 2
    for (int t = 0; t < T; t++)
        xt[t] = a->x + (t0 + t) * n_in;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int t = 0; t < T; t++)
            acc[r][t] = _mm256_setzero_ps();

    int64_t k = 0;
    for (; k + 8 <= n_in; k += 8) {
        __m256 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            wv[r] = load_w8(wtype, wr[r], k);
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) {
            const __m256 xv = _mm256_loadu_ps(xt[t] + k);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            a->y[(t0 + t) * a->n_out + o + r] = float_sum(acc[r][t], wtype, wr[r], xt[t], k, n_in);
}

/* One row against one token: the decode case, and a batch's leftover rows
 * and tokens. One accumulator over the row's 8-wide chunks in order, then
 * float_sum: exactly tile_float's sum for one (row, token), so a token gets
 * the same bits alone, in a tile or beside one, in any batch (speculative
 * decoding's verify passes need it). Rows one after another make each
 * thread's share of W a single sequential stream, which the hardware
 * prefetchers follow far better than interleaved rows; one FMA chain still
 * consumes 32 bytes of F32 weights per FMA latency, above a core's share of
 * the bandwidth. */
ALWAYS_INLINE float row_float_1(const fg_matmul_args *a, const int wtype, int64_t o, int64_t t)
{
    const int64_t n_in = a->n_in;
    const uint8_t *wr = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
    const float *x = a->x + t * n_in;
    __m256 acc = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n_in; k += 8)
        acc = _mm256_fmadd_ps(load_w8(wtype, wr, k), _mm256_loadu_ps(x + k), acc);
    return float_sum(acc, wtype, wr, x, k, n_in);
}

ALWAYS_INLINE void rows_float(const fg_matmul_args *a, const int wtype, int64_t o_begin, int64_t o_end)
{
    const int64_t n_tok = a->n_tok;
    if (n_tok < 4) {
        /* decode and tiny batches (a verify pass): rows one after another, each
         * against two tokens at once, so their chains run side by side */
        for (int64_t o = o_begin; o < o_end; o++) {
            int64_t t = 0;
            for (; t + 2 <= n_tok; t += 2)
                tile_float(a, wtype, 1, 2, o, t);
            if (t < n_tok)
                a->y[t * a->n_out + o] = row_float_1(a, wtype, o, t);
        }
        return;
    }
    int64_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) {
        int64_t t = 0;
        for (; t + 2 <= n_tok; t += 2)
            tile_float(a, wtype, 4, 2, o, t);
        for (; t < n_tok; t++)
            tile_float(a, wtype, 4, 1, o, t);
    }
    for (; o < o_end; o++)
        for (int64_t t = 0; t < n_tok; t++)
            a->y[t * a->n_out + o] = row_float_1(a, wtype, o, t);
}

/* ---- Q8_0 ---- */

/* One Q8_0 block against one token, the sign trick (see the top of the file). */
ALWAYS_INLINE __m256 q8_block_1(const uint8_t *wr, const int8_t *xs, const float *xd, int64_t b, __m256 acc)
{
    const size_t bs = sizeof(fg_block_q8_0);
    const __m256i w = _mm256_loadu_si256((const __m256i *)(wr + b * bs + 2));
    const __m256i q = _mm256_load_si256((const __m256i *)(xs + b * 32));
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(q, w));
    const __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    uint16_t dh;
    memcpy(&dh, wr + b * bs, 2);
    const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_set1_epi16((short)dh)), _mm256_set1_ps(xd[b]));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), d, acc);
}

/* One row against one token, four accumulators. */
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

/* Row by row for every batch size: a row stays in L1 while the token loop
 * passes over it again. (A 4-row x 1-token tile measured slower here: it
 * gains nothing from sharing the activations, and its block scales went
 * through memory.) */
static void rows_q8(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    for (int64_t o = o_begin; o < o_end; o++)
        for (int64_t t = 0; t < a->n_tok; t++)
            a->y[t * a->n_out + o] = row_q8_1(a, o, t);
}

/* ---- MXFP4 ----
 *
 * Per row, a chunk of blocks (FG_MXFP4_CHUNK_BLOCKS) is decoded once into the
 * int8 values ggml computes with, 2 * E2M1 in [-12, 12], by vpshufb of the
 * nibbles in a 16-entry table (low nibbles: the block's values 0..15, high
 * nibbles 16..31), with their magnitudes beside them; then every token runs
 * the Q8_0 decode kernel's steps against the chunk: the sign trick,
 * vpmaddubsw pairs (at most 2 * 12 * 127, no saturation), vpmaddwd into exact
 * int32 lanes, and the block scale 2^(e - 128) * d_x as the reference forms
 * it (8 blocks' at once), four accumulators by block index mod 4. The per-token arithmetic is the
 * same whatever the batch. */

typedef struct mx_chunk_avx2 {
    __m256i w[FG_MXFP4_CHUNK_BLOCKS];  /* block i's 32 values */
    __m256i aw[FG_MXFP4_CHUNK_BLOCKS]; /* their magnitudes */
    float dw[FG_MXFP4_CHUNK_BLOCKS] __attribute__((aligned(32))); /* 2^(e - 128); 0 past the chunk's blocks */
} mx_chunk_avx2;
_Static_assert(FG_MXFP4_CHUNK_BLOCKS % 8 == 0, "chunks of whole 8-block scale groups");

static void mx_decode(const uint8_t *blk, int cb, mx_chunk_avx2 *c)
{
    /* 2 * fg_e2m1_to_f32(code) for codes 0..15 */
    const __m128i tab = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int i = 0; i < cb; i++) {
        const uint8_t *k = blk + (size_t)i * sizeof(fg_block_mxfp4);
        const __m128i qs = _mm_loadu_si128((const __m128i *)(k + 1));
        const __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(qs, m4));
        const __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(qs, 4), m4));
        const __m256i w = _mm256_set_m128i(hi, lo);
        _mm256_store_si256(&c->w[i], w);
        _mm256_store_si256(&c->aw[i], _mm256_abs_epi8(w));
        c->dw[i] = fg_mxfp4_half_scale(k[0]);
    }
    for (int i = cb; i % 8; i++)
        c->dw[i] = 0.0f;
}

/* acc + block i's products with the token's q; d8: the scales of the block's
 * group of 8, of which it takes lane k. */
ALWAYS_INLINE __m256 mx_block(const mx_chunk_avx2 *c, const int8_t *xs, int i, __m256 d8, const int k, __m256 acc)
{
    const __m256i w = _mm256_load_si256(&c->w[i]);
    const __m256i q = _mm256_load_si256((const __m256i *)(xs + i * 32));
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_load_si256(&c->aw[i]), _mm256_sign_epi8(q, w));
    const __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), _mm256_permutevar8x32_ps(d8, _mm256_set1_epi32(k)), acc);
}

/* One token against a decoded chunk; xs and xd at the chunk's first block.
 * Groups of 8 blocks: their scales d = 2^(e - 128) * d_x in one multiply (the
 * activations' scales past n_in / 32 are 0), each block then taking its own
 * by a permute. */
static float mx_chunk_dot(const mx_chunk_avx2 *c, int cb, const int8_t *xs, const float *xd)
{
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int g = 0; g < cb; g += 8) {
        const __m256 d8 = _mm256_mul_ps(_mm256_load_ps(c->dw + g), _mm256_loadu_ps(xd + g));
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            if (g + k >= cb)
                break;
            acc[k & 3] = mx_block(c, xs, g + k, d8, k, acc[k & 3]);
        }
    }
    return hsum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

static void rows_mxfp4(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    const int64_t nb = a->n_in / FG_MXFP4_BLOCK;
    mx_chunk_avx2 c;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t *wr = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
        for (int64_t b0 = 0; b0 < nb; b0 += FG_MXFP4_CHUNK_BLOCKS) {
            const int cb = nb - b0 < FG_MXFP4_CHUNK_BLOCKS ? (int)(nb - b0) : FG_MXFP4_CHUNK_BLOCKS;
            mx_decode(wr + (size_t)b0 * sizeof(fg_block_mxfp4), cb, &c);
            for (int64_t t = 0; t < a->n_tok; t++) {
                const float s = mx_chunk_dot(&c, cb, a->xq.qs + t * a->xq.qs_stride + b0 * 32,
                                             a->xq.d + t * a->xq.d_stride + b0);
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

void fg_matmul_rows_avx2(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
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
    case FG_WTYPE_MXFP4:
        rows_mxfp4(a, o_begin, o_end);
        break;
    default: /* the types of quants.h (fg_matmul validated the type) */
        fg_matmul_rows_quant_avx2(a, o_begin, o_end);
        break;
    }
}
