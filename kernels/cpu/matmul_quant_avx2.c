/* matmul_quant_avx2.c: AVX2 products of the types of quants.h (matmul.h's
 * formula for them). Compiled with -mavx2 -mfma -mf16c; called only after the
 * CPU check.
 *
 * Per row, a chunk of QCHUNK 32-value groups is decoded once (the AVX2
 * decoders of matmul_quant_decode.h: fg_quant_decode's bits) into int8
 * values, their magnitudes, and the scales and minima per half group; then
 * every token of the batch runs against the chunk, which stays in L1. Per group:
 * vpmaddubsw of |v| with q carrying v's sign (|v| <= 127, |q| <= 127: pairs of at
 * most 2 * 127 * 127 = 32258, no saturation), vpmaddwd by ones: 8 exact int32 lanes,
 * lanes 0-3 the first half's sum, 4-7 the second's; for the types with a
 * minimum, the same steps on ones against q give the sums X. Then
 * acc += I * (s * d_x) and, apart, accm += X * (m * d_x) (the group's two
 * products spread over the lanes by one permute), four accumulators by
 * group index mod 4. Each chunk's sum is reduced to one float and the chunks'
 * added in order, so a token's result does not depend on its batch.
 */
#include <immintrin.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/matmul_quant_decode.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/simd_avx2.h"

#define QCHUNK 64 /* groups: 2 KB of values, 8 K-quant blocks */

typedef struct q_chunk_avx2 {
    int8_t v[QCHUNK][32] __attribute__((aligned(32)));
    int8_t av[QCHUNK][32] __attribute__((aligned(32)));
    float s[2 * QCHUNK] __attribute__((aligned(32))); /* per half group */
    float m[2 * QCHUNK] __attribute__((aligned(32)));
} q_chunk_avx2;

static void q_decode(int wtype, const uint8_t *blocks, int n_blocks, int groups, q_chunk_avx2 *c)
{
    if (!qd_decode(wtype, blocks, n_blocks, &c->v[0][0], c->s, c->m))
        (void)fg_quant_decode(wtype, blocks, n_blocks, &c->v[0][0], c->s, c->m);
    for (int g = 0; g < groups; g++)
        _mm256_store_si256((__m256i *)c->av[g], _mm256_abs_epi8(_mm256_load_si256((const __m256i *)c->v[g])));
}

/* [f0 x4, f1 x4]: a group's two half-group factors (s or m) times its d_x, each product rounded once. */
static inline __m256 group_lanes(const float *f, __m128 dx)
{
    const __m128 p = _mm_mul_ps(_mm_castpd_ps(_mm_load_sd((const double *)f)), dx);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(p), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

/* One token against the chunk's groups; xs, xd at its first group. */
static float q_chunk_dot(const q_chunk_avx2 *c, int groups, int has_min, const int8_t *xs, const float *xd)
{
    const __m256i ones16 = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 accm[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int g = 0; g < groups; g++) {
        const __m256i q = _mm256_load_si256((const __m256i *)(xs + 32 * g));
        const __m256i v = _mm256_load_si256((const __m256i *)c->v[g]);
        const __m256i av = _mm256_load_si256((const __m256i *)c->av[g]);
        const __m256i i32 = _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(q, v)), ones16);
        const __m128 dx = _mm_set1_ps(xd[g]);
        acc[g & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), group_lanes(c->s + 2 * g, dx), acc[g & 3]);
        if (has_min) {
            const __m256i x32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
            accm[g & 3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(x32), group_lanes(c->m + 2 * g, dx), accm[g & 3]);
        }
    }
    const __m256 a = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    const __m256 am = _mm256_add_ps(_mm256_add_ps(accm[0], accm[1]), _mm256_add_ps(accm[2], accm[3]));
    return hsum8(_mm256_add_ps(a, am));
}

void fg_matmul_rows_quant_avx2(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    int elems, bytes;
    fg_wtype_block(a->wtype, &elems, &bytes);
    const int gpb = elems / 32;                  /* groups per block */
    const int64_t nblk = a->n_in / elems, bpc = QCHUNK / gpb; /* blocks per chunk */
    const int has_min = fg_quant_has_min(a->wtype);
    q_chunk_avx2 c;
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
