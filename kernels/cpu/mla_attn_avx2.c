/* mla_attn_avx2.c: the AVX2 path of mla_attn.h (fg_mla_attn_part and the
 * multi-query group). Compiled with -mavx2 -mfma -mf16c; mla_attn.c calls in
 * only when the params' isa resolves to AVX2 and the CPU has it.
 *
 * The plan of mla_attn_avx512.c on 8-lane registers (16 of them, so the
 * blockings are smaller): the cache is taken a chunk at a time (at most one
 * page, CHUNK rows, never crossing a page):
 *   1. the chunk's rows are dequantized into scratch, [CHUNK][stride] f32, by
 *      vector decoders giving exactly fg_kv_dequantize's values (FP4 codes
 *      through an 8-entry vpermps table of magnitudes plus the code's sign
 *      bit, E4M3 scales and FP8 by integer field arithmetic, INT8 and F16 by
 *      widening); ragged tails of INT8/FP8/F16 segments go element by element
 *      through the same single multiply as the reference;
 *   2. scores s[h][j] = scale * (q_lat[h] . c_j + q_rope[h] . kr_j), four heads
 *      by two rows at a time (8 accumulators), each score one 8-lane
 *      accumulator over the latent then the rope key, summed in a fixed order;
 *   3. per head one running-maximum update (at most one rescale of o) per
 *      chunk, then o = o * corr + sum_j p_j * c_j column by column in row
 *      order, four heads by 16 columns at a time.
 * The arithmetic of one score and one output element does not depend on the
 * blocking (a head alone goes through the same per-score and per-column
 * sequences), so results depend only on the chunk boundaries.
 *
 * fg_mla_attn_multi_avx2 dequantizes each page once for up to
 * FG_MLA_ATTN_MAX_QUERIES queries and runs chunk_update per query over the
 * same chunks fg_mla_attn_part_avx2 takes for t_begin = 0 (whole pages, the
 * last one cut at the query's n_kv), so each query's bits equal the
 * single-query call's, as mla_attn.h promises.
 *
 * Scratch (floats, see fg_mla_attn_scratch_floats): [CHUNK][stride] rows,
 * then [H][CHUNK] scores.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/mla_attn_isa.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/simd_avx2.h"

#define CHUNK FG_MLA_ATTN_CHUNK
#define FULL_UNROLL _Pragma("GCC unroll 4")

/* 8 E4M3 codes (low byte of each int32 lane) to f32, exactly fg_e4m3_to_f32:
 * subnormals as mant * 2^-9, exponent 15 with mantissa 7 as NaN. */
static inline __m256 e4m3_to_f32_8(__m256i c)
{
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    const __m256i e = _mm256_and_si256(_mm256_srli_epi32(c, 3), _mm256_set1_epi32(0xf));
    const __m256i mant = _mm256_and_si256(c, _mm256_set1_epi32(7));
    const __m256i normal = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(120)), 23),
                                           _mm256_slli_epi32(mant, 20));
    const __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(mant), _mm256_set1_ps(1.0f / 512.0f)));
    __m256i mag = _mm256_blendv_epi8(normal, sub, _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    const __m256i nan = _mm256_cmpeq_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(0x7f));
    mag = _mm256_blendv_epi8(mag, _mm256_set1_epi32(0x7fc00000), nan);
    return _mm256_castsi256_ps(_mm256_or_si256(mag, sign));
}

/* One row segment of n channels in format f into y[0 .. n). */
static void dequant(fg_kv_format f, const uint8_t *in, int n, float *y)
{
    switch (f) {
    case FG_KV_F32:
        memcpy(y, in, (size_t)n * sizeof *y);
        return;
    case FG_KV_F16: {
        int i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + 2 * i))));
        for (; i < n; i++) {
            uint16_t h;
            memcpy(&h, in + 2 * i, 2);
            y[i] = fg_f16_to_f32(h);
        }
        return;
    }
    case FG_KV_INT8: {
        float scale;
        memcpy(&scale, in, 4);
        const __m256 s = _mm256_set1_ps(scale);
        const int8_t *q = (const int8_t *)(in + 4);
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
            _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_cvtepi32_ps(v)));
        }
        for (; i < n; i++)
            y[i] = scale * (float)q[i];
        return;
    }
    case FG_KV_FP8: {
        float scale;
        memcpy(&scale, in, 4);
        const __m256 s = _mm256_set1_ps(scale);
        int i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(in + 4 + i)));
            _mm256_storeu_ps(y + i, _mm256_mul_ps(s, e4m3_to_f32_8(c)));
        }
        for (; i < n; i++)
            y[i] = scale * fg_e4m3_to_f32(in[4 + i]);
        return;
    }
    case FG_KV_FP4: {
        if (n % 16)
            return;
        /* E2M1 magnitudes of codes 0..7; bit 3 of a code is its sign (code 8 is -0) */
        const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
        const __m128i lo4 = _mm_set1_epi8(0x0f);
        const __m256i seven = _mm256_set1_epi32(7), eight = _mm256_set1_epi32(8);
        const uint8_t *scales = in + n / 2;
        float sv[8];
        for (int k0 = 0; k0 < n / 16; k0 += 8) {
            const int nk = n / 16 - k0 < 8 ? n / 16 - k0 : 8;
            uint8_t sc[8] = {0};
            memcpy(sc, scales + k0, (size_t)nk);
            _mm256_storeu_ps(sv, e4m3_to_f32_8(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc))));
            for (int k = 0; k < nk; k++) {
                /* 8 bytes, element 2j in the low nibble of byte j */
                const __m128i b = _mm_loadl_epi64((const __m128i *)(in + 8 * (k0 + k)));
                const __m128i codes =
                    _mm_unpacklo_epi8(_mm_and_si128(b, lo4), _mm_and_si128(_mm_srli_epi16(b, 4), lo4));
                const __m256 s = _mm256_set1_ps(sv[k]);
                FULL_UNROLL
                for (int half = 0; half < 2; half++) {
                    const __m256i c = _mm256_cvtepu8_epi32(half ? _mm_srli_si128(codes, 8) : codes);
                    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, eight), 28);
                    const __m256 v = _mm256_or_ps(_mm256_permutevar8x32_ps(mag, _mm256_and_si256(c, seven)),
                                                  _mm256_castsi256_ps(sign));
                    _mm256_storeu_ps(y + 16 * (k0 + k) + 8 * half, _mm256_mul_ps(s, v));
                }
            }
        }
        return;
    }
    default:
        return;
    }
}

/* Dequantizes rows [first, first + n) of one page's layer into rows[n][stride]. */
static void dequant_rows(const fg_mla_attn_params *p, const uint8_t *page, int first, int n, int stride, float *rows)
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

/* Scores of NH heads (1 or 4) against NR rows (1 or 2) starting at rows r0:
 * each score one accumulator over the latent then the rope key, 8 lanes at a
 * time, masked tails, then hsum8 and the scale. Every score's arithmetic is
 * the same whatever NH and NR: they only share loads. */
static inline __attribute__((always_inline)) void scores_block(const float *r0, int stride, int L, int R,
                                                                const float *const ql[], const float *const qr[],
                                                                const int NH, const int NR, float scale,
                                                                float *const s[], int j)
{
    __m256 a[4][2];
    FULL_UNROLL
    for (int h = 0; h < NH; h++)
        FULL_UNROLL
        for (int k = 0; k < NR; k++)
            a[h][k] = _mm256_setzero_ps();
    FULL_UNROLL
    for (int seg = 0; seg < 2; seg++) { /* the latent, then the rope key */
        const int w = seg ? R : L, off = seg ? L : 0;
        for (int i = 0; i < w; i += 8) {
            __m256 x[2];
            FULL_UNROLL
            for (int k = 0; k < NR; k++)
                x[k] = load8(r0 + (size_t)k * stride + off + i, w - i);
            FULL_UNROLL
            for (int h = 0; h < NH; h++) {
                const __m256 q = load8((seg ? qr[h] : ql[h]) + i, w - i);
                FULL_UNROLL
                for (int k = 0; k < NR; k++)
                    a[h][k] = _mm256_fmadd_ps(q, x[k], a[h][k]);
            }
        }
    }
    FULL_UNROLL
    for (int h = 0; h < NH; h++)
        FULL_UNROLL
        for (int k = 0; k < NR; k++)
            s[h][j + k] = scale * hsum8(a[h][k]);
}

/* Scores of NH heads against the chunk's n rows. */
static inline __attribute__((always_inline)) void heads_scores(const float *rows, int stride, int L, int R, int n,
                                                                const float *const ql[], const float *const qr[],
                                                                const int NH, float scale, float *const s[])
{
    int j = 0;
    for (; j + 2 <= n; j += 2)
        scores_block(rows + (size_t)j * stride, stride, L, R, ql, qr, NH, 2, scale, s, j);
    if (j < n)
        scores_block(rows + (size_t)j * stride, stride, L, R, ql, qr, NH, 1, scale, s, j);
}

/* o[h][0 .. L) = o * corr[h] + sum_j p[h][j] * c_j for NH heads over the
 * chunk's n rows: per element one multiply, then fused multiply-adds in row
 * order; 16 columns (two registers) per head at a time, an 8-column masked
 * tail. */
static inline __attribute__((always_inline)) void heads_accumulate(const float *rows, int stride, int L, int n,
                                                                    const float *const p[], const float corr[],
                                                                    const int NH, float *const o[])
{
    int i = 0;
    for (; i + 16 <= L; i += 16) {
        __m256 a[4][2];
        FULL_UNROLL
        for (int h = 0; h < NH; h++) {
            const __m256 cv = _mm256_set1_ps(corr[h]);
            a[h][0] = _mm256_mul_ps(_mm256_loadu_ps(o[h] + i), cv);
            a[h][1] = _mm256_mul_ps(_mm256_loadu_ps(o[h] + i + 8), cv);
        }
        for (int j = 0; j < n; j++) {
            const float *r = rows + (size_t)j * stride + i;
            const __m256 x0 = _mm256_loadu_ps(r), x1 = _mm256_loadu_ps(r + 8);
            FULL_UNROLL
            for (int h = 0; h < NH; h++) {
                const __m256 pj = _mm256_broadcast_ss(p[h] + j);
                a[h][0] = _mm256_fmadd_ps(pj, x0, a[h][0]);
                a[h][1] = _mm256_fmadd_ps(pj, x1, a[h][1]);
            }
        }
        FULL_UNROLL
        for (int h = 0; h < NH; h++) {
            _mm256_storeu_ps(o[h] + i, a[h][0]);
            _mm256_storeu_ps(o[h] + i + 8, a[h][1]);
        }
    }
    for (; i < L; i += 8) {
        const __m256i m = lanes8(L - i);
        __m256 a[4];
        FULL_UNROLL
        for (int h = 0; h < NH; h++)
            a[h] = _mm256_mul_ps(_mm256_maskload_ps(o[h] + i, m), _mm256_set1_ps(corr[h]));
        for (int j = 0; j < n; j++) {
            const __m256 x = _mm256_maskload_ps(rows + (size_t)j * stride + i, m);
            FULL_UNROLL
            for (int h = 0; h < NH; h++)
                a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(p[h] + j), x, a[h]);
        }
        FULL_UNROLL
        for (int h = 0; h < NH; h++)
            _mm256_maskstore_ps(o[h] + i, m, a[h]);
    }
}

/* One query's online-softmax update over the chunk's first n dequantized rows,
 * every head: o_all [H][L], m [H], l [H]; s is [H][CHUNK] scratch. The single-
 * and the multi-query kernels both run exactly this per chunk. The softmax
 * bookkeeping is mla_attn_avx512.c's, line for line. */
static void chunk_update(const fg_mla_attn_params *p, const float *rows, int stride, int n, const float *q_lat,
                         const float *q_rope, float *o_all, float *m, float *l, float *s)
{
    const int H = p->n_head, L = p->kv_lora, R = p->n_rope;
    for (int h0 = 0; h0 < H; h0 += 4) {
        const int nh = H - h0 < 4 ? H - h0 : 4;
        float corr[4];
        float *sh[4];
        const float *ql[4], *qr[4], *pk[4];
        float *o[4];
        for (int k = 0; k < nh; k++) {
            sh[k] = s + (size_t)(h0 + k) * CHUNK;
            pk[k] = sh[k];
            ql[k] = q_lat + (size_t)(h0 + k) * L;
            qr[k] = q_rope + (size_t)(h0 + k) * R;
            o[k] = o_all + (size_t)(h0 + k) * L;
        }
        if (nh == 4)
            heads_scores(rows, stride, L, R, n, ql, qr, 4, p->scale, sh);
        else
            for (int k = 0; k < nh; k++)
                heads_scores(rows, stride, L, R, n, ql + k, qr + k, 1, p->scale, sh + k);
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
        if (nh == 4)
            heads_accumulate(rows, stride, L, n, pk, corr, 4, o);
        else
            for (int k = 0; k < nh; k++)
                heads_accumulate(rows, stride, L, n, pk + k, corr + k, 1, o + k);
    }
}

const fg_mla_attn_kernels fg_mla_attn_kernels_avx2 = {.dequant_rows = dequant_rows, .chunk_update = chunk_update};
