/* matmul_quant_avx512.c: AVX-512 + VNNI products of the types of quants.h
 * (matmul.h's formula for them). Compiled for AVX-512 F/BW/VL/DQ/VNNI; called
 * only after the CPU check.
 *
 * As matmul_quant_avx2.c, two groups per ZMM: per row a chunk of QCHUNK
 * groups decoded once (matmul_quant_decode.h: fg_quant_decode's bits) into magnitudes |v|, sign
 * masks and the scales and minima per half group; a pair's four scales,
 * times their groups' d_x, are spread over the 16 lanes by one permute, in
 * the order of the token's 64 contiguous int8. Per pair: q negated under v's sign mask, one vpdpbusd of
 * the magnitudes (|v| <= 127, exact int32 sums of 4): lanes 0-3, 4-7, 8-11,
 * 12-15 the four halves' I; for the types with a minimum one vpdpbusd of ones
 * gives X. acc += I * (s * d_x), accm += X * (m * d_x), two accumulators by
 * pair index mod 2; an odd last group pairs with zeros (its scales 0). Each
 * chunk's sum reduced to one float and the chunks' added in order: a token's
 * result does not depend on its batch.
 */
#include <immintrin.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/matmul_quant_decode.h"
#include "kernels/cpu/quants.h"

#define QCHUNK 64 /* groups (even): 2 KB of values, 8 K-quant blocks */

typedef struct q_chunk_avx512 {
    int8_t v[QCHUNK][32] __attribute__((aligned(64)));
    int8_t av[QCHUNK][32] __attribute__((aligned(64)));
    __mmask64 neg[QCHUNK / 2];
    float s[2 * QCHUNK + 4] __attribute__((aligned(64))); /* per half group; 0 past the chunk's groups */
    float m[2 * QCHUNK + 4] __attribute__((aligned(64)));
} q_chunk_avx512;

static void q_decode(int wtype, const uint8_t *blocks, int n_blocks, int groups, q_chunk_avx512 *c)
{
    if (!qd_decode(wtype, blocks, n_blocks, &c->v[0][0], c->s, c->m))
        (void)fg_quant_decode(wtype, blocks, n_blocks, &c->v[0][0], c->s, c->m);
    if (groups & 1) { /* the odd last group's partner: nothing */
        _mm256_store_si256((__m256i *)c->v[groups], _mm256_setzero_si256());
        c->s[2 * groups] = c->s[2 * groups + 1] = c->m[2 * groups] = c->m[2 * groups + 1] = 0.0f;
    }
    for (int g = 0; g < groups; g += 2) {
        const __m512i v = _mm512_load_si512((const void *)c->v[g]);
        _mm512_store_si512((void *)c->av[g], _mm512_abs_epi8(v));
        c->neg[g / 2] = _mm512_movepi8_mask(v);
    }
}

/* [a0 x4, a1 x4, b0 x4, b1 x4] of a pair's four half-group factors f (s or m)
 * times their groups' d_x: each product rounded once, as s * d_x. */
static inline __m512 pair_lanes(const float *f, __m128 dd)
{
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_mul_ps(_mm_load_ps(f), dd)));
}

/* One token against the chunk's groups; xs, xd at its first group. */
static float q_chunk_dot(const q_chunk_avx512 *c, int groups, int has_min, const int8_t *xs, const float *xd)
{
    const __m512i ones8 = _mm512_set1_epi8(1);
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    __m512 accm[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int g = 0; g < groups; g += 2) {
        const int k = (g / 2) & 1;
        const __m512i q = _mm512_load_si512((const void *)(xs + 32 * g));
        const __m512i sq = _mm512_mask_sub_epi8(q, c->neg[g / 2], _mm512_setzero_si512(), q);
        const __m512i i32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512((const void *)c->av[g]), sq);
        /* [d_x(g), d_x(g), d_x(g+1), d_x(g+1)]; an odd last group's partner 0 */
        const __m128 d2 = g + 1 < groups ? _mm_castpd_ps(_mm_load_sd((const double *)(xd + g))) : _mm_load_ss(xd + g);
        const __m128 dd = _mm_unpacklo_ps(d2, d2);
        acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i32), pair_lanes(c->s + 2 * g, dd), acc[k]);
        if (has_min) {
            const __m512i x32 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones8, q);
            accm[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x32), pair_lanes(c->m + 2 * g, dd), accm[k]);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(accm[0], accm[1])));
}

void fg_matmul_rows_quant_avx512(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    int elems, bytes;
    fg_wtype_block(a->wtype, &elems, &bytes);
    const int gpb = elems / 32;
    const int64_t nblk = a->n_in / elems, bpc = QCHUNK / gpb;
    const int has_min = fg_quant_has_min(a->wtype);
    q_chunk_avx512 c;
    for (int64_t o = o_begin; o < o_end; o++) {
        const uint8_t *wr = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
        for (int64_t b0 = 0; b0 < nblk; b0 += bpc) {
            const int nb = nblk - b0 < bpc ? (int)(nblk - b0) : (int)bpc;
            const int groups = nb * gpb;
            q_decode(a->wtype, wr + (size_t)b0 * (size_t)bytes, nb, groups, &c);
            const int64_t g0 = b0 * gpb;
            for (int64_t t = 0; t < a->n_tok; t++) {
                const float s = q_chunk_dot(&c, groups, has_min, a->xq.qs + t * a->xq.qs_stride + g0 * 32,
                                            a->xq.d + t * a->xq.d_stride + g0);
                float *y = &a->y[t * a->n_out + o];
                *y = b0 == 0 ? s : *y + s;
            }
        }
    }
}
