/* matmul_quant_decode_iq.h: internal to matmul_quant_decode.h. AVX2 decoders
 * of the lattice IQ types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S,
 * IQ1_M) into quants.h's decoded form, bit for bit what fg_quant_decode
 * writes.
 *
 * Per sub-block of 32 values: the 4 grid entries (8 of 4 values for IQ3) are
 * loaded by index into one vector (scalar loads and inserts: a vpgatherdd was
 * slower on Zen 2, docs/benchmarks.md), the 32 sign bits spread to a
 * byte mask by a shuffle and a compare, and each byte negated where its mask
 * is set, (g ^ mask) - mask: the scalar decoder's ~g + 1 per byte. IQ1's
 * 8g +- 1 is sign(8, g) plus the shift's +-1. The scales are formed by the
 * scalar decoder's f32 operations in its order (F16C's conversion quiets a
 * signalling NaN, which the first product does in the scalar code too).
 * Included by matmul_quant_decode.h after the helpers it shares (qd_f16,
 * qd_u16, qd_u32, qd_bits32).
 */
#ifndef FG_MATMUL_QUANT_DECODE_IQ_H
#define FG_MATMUL_QUANT_DECODE_IQ_H

#include "kernels/cpu/iq_grids.h"

/* The 32 magnitudes g of a sub-block under its 32 sign bits (bit 8l + j:
 * entry l's value j), stored at v. */
static inline void qd_signed_store(__m256i g, uint32_t signs, int8_t *v)
{
    const __m256i neg = qd_bits32(signs);
    _mm256_storeu_si256((__m256i *)v, _mm256_sub_epi8(_mm256_xor_si256(g, neg), neg));
}

/* The 4 sign bytes of a u32 holding 4 x 7 sign bits (and a scale above them). */
static inline uint32_t qd_ksigns4(uint32_t aux)
{
    return (uint32_t)fg_iq_ksigns[aux & 127] | (uint32_t)fg_iq_ksigns[(aux >> 7) & 127] << 8 |
           (uint32_t)fg_iq_ksigns[(aux >> 14) & 127] << 16 | (uint32_t)fg_iq_ksigns[(aux >> 21) & 127] << 24;
}

/* Entries i0..i3 of an 8-value grid, entry l in 64-bit lane l. */
static inline __m256i qd_grid4(const uint64_t *grid, int i0, int i1, int i2, int i3)
{
    return _mm256_set_epi64x((long long)grid[i3], (long long)grid[i2], (long long)grid[i1], (long long)grid[i0]);
}

/* The sub-block's 32 IQ1 values 8g +- 1: delta holds the +-1 of each byte. */
static inline void qd_iq1_store(__m256i g, __m256i delta, int8_t *v)
{
    _mm256_storeu_si256((__m256i *)v, _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), delta));
}

static inline void qd_zero16(float *m)
{
    _mm256_storeu_ps(m, _mm256_setzero_ps());
    _mm256_storeu_ps(m + 8, _mm256_setzero_ps());
}

static inline void qd_iq2_xxs(const uint8_t *b, int n_blocks, int8_t *v, float *s, float *m)
{
    for (int i = 0; i < n_blocks; i++, b += 66, v += 256, s += 16, m += 16) {
        const float d = qd_f16(b);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = b + 2 + 8 * ib;
            const uint32_t aux = qd_u32(q + 4);
            qd_signed_store(qd_grid4(fg_iq2xxs_grid, q[0], q[1], q[2], q[3]), qd_ksigns4(aux), v + 32 * ib);
            s[2 * ib] = s[2 * ib + 1] = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        }
        qd_zero16(m);
    }
}

/* IQ2_XS and IQ2_S: two 4-bit scales per sub-block. */
static inline void qd_iq2_scales(const uint8_t *scales, float d, float *s)
{
    for (int ib = 0; ib < 8; ib++) {
        s[2 * ib] = d * (0.5f + (float)(scales[ib] & 15)) * 0.25f;
        s[2 * ib + 1] = d * (0.5f + (float)(scales[ib] >> 4)) * 0.25f;
    }
}

static inline void qd_iq2_xs(const uint8_t *b, int n_blocks, int8_t *v, float *s, float *m)
{
    for (int i = 0; i < n_blocks; i++, b += 74, v += 256, s += 16, m += 16) {
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = b + 2 + 8 * ib; /* 4 u16: 9 bits index, 7 sign bits */
            const uint16_t q0 = qd_u16(q), q1 = qd_u16(q + 2), q2 = qd_u16(q + 4), q3 = qd_u16(q + 6);
            const uint32_t signs = (uint32_t)fg_iq_ksigns[q0 >> 9] | (uint32_t)fg_iq_ksigns[q1 >> 9] << 8 |
                                   (uint32_t)fg_iq_ksigns[q2 >> 9] << 16 | (uint32_t)fg_iq_ksigns[q3 >> 9] << 24;
            qd_signed_store(qd_grid4(fg_iq2xs_grid, q0 & 511, q1 & 511, q2 & 511, q3 & 511), signs, v + 32 * ib);
        }
        qd_iq2_scales(b + 66, qd_f16(b), s);
        qd_zero16(m);
    }
}

static inline void qd_iq2_s(const uint8_t *b, int n_blocks, int8_t *v, float *s, float *m)
{
    for (int i = 0; i < n_blocks; i++, b += 82, v += 256, s += 16, m += 16) {
        const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66;
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = qs + 4 * ib;
            const int h = qh[ib]; /* 2 index bits per entry */
            qd_signed_store(qd_grid4(fg_iq2s_grid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300),
                                     q[2] | (h << 4 & 0x300), q[3] | (h << 2 & 0x300)),
                            qd_u32(signs + 4 * ib), v + 32 * ib);
        }
        qd_iq2_scales(b + 74, qd_f16(b), s);
        qd_zero16(m);
    }
}

static inline void qd_iq3_xxs(const uint8_t *b, int n_blocks, int8_t *v, float *s, float *m)
{
    const uint32_t *grid = fg_iq3xxs_grid;
    for (int i = 0; i < n_blocks; i++, b += 98, v += 256, s += 16, m += 16) {
        const float d = qd_f16(b);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = b + 2 + 8 * ib;
            const uint32_t aux = qd_u32(b + 66 + 4 * ib);
            const __m256i g = _mm256_setr_epi32((int)grid[q[0]], (int)grid[q[1]], (int)grid[q[2]], (int)grid[q[3]],
                                                (int)grid[q[4]], (int)grid[q[5]], (int)grid[q[6]], (int)grid[q[7]]);
            qd_signed_store(g, qd_ksigns4(aux), v + 32 * ib);
            s[2 * ib] = s[2 * ib + 1] = d * (0.5f + (float)(aux >> 28)) * 0.5f;
        }
        qd_zero16(m);
    }
}

static inline void qd_iq3_s(const uint8_t *b, int n_blocks, int8_t *v, float *s, float *m)
{
    const uint32_t *grid = fg_iq3s_grid;
    for (int i = 0; i < n_blocks; i++, b += 110, v += 256, s += 16, m += 16) {
        const float d = qd_f16(b);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = b + 2 + 8 * ib;
            const int h = b[66 + ib]; /* bit k: the ninth bit of index k */
            const __m256i g = _mm256_setr_epi32(
                (int)grid[q[0] | (h << 8 & 256)], (int)grid[q[1] | (h << 7 & 256)], (int)grid[q[2] | (h << 6 & 256)],
                (int)grid[q[3] | (h << 5 & 256)], (int)grid[q[4] | (h << 4 & 256)], (int)grid[q[5] | (h << 3 & 256)],
                (int)grid[q[6] | (h << 2 & 256)], (int)grid[q[7] | (h << 1 & 256)]);
            qd_signed_store(g, qd_u32(b + 74 + 4 * ib), v + 32 * ib);
            s[2 * ib] = s[2 * ib + 1] = d * (float)(1 + 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 15));
        }
        qd_zero16(m);
    }
}

static inline void qd_iq1_s(const uint8_t *b, int n_blocks, int8_t *v, float *s, float *m)
{
    for (int i = 0; i < n_blocks; i++, b += 50, v += 256, s += 16, m += 16) {
        const float d = qd_f16(b);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = b + 2 + 4 * ib;
            const int qh = qd_u16(b + 34 + 2 * ib); /* 4 x 3 index bits, a 3-bit scale, the shift's sign */
            const __m256i g = qd_grid4(fg_iq1s_grid, q[0] | (qh << 8 & 0x700), q[1] | (qh << 5 & 0x700),
                                       q[2] | (qh << 2 & 0x700), q[3] | (qh >> 1 & 0x700));
            qd_iq1_store(g, _mm256_set1_epi8(qh >> 15 ? -1 : 1), v + 32 * ib);
            s[2 * ib] = s[2 * ib + 1] = d * (float)(2 * ((qh >> 12) & 7) + 1) * 0.125f;
        }
        qd_zero16(m);
    }
}

static inline void qd_iq1_m(const uint8_t *b, int n_blocks, int8_t *v, float *s, float *m)
{
    const long long up = 0x0101010101010101ll, down = -1ll; /* +1, -1 in every byte */
    for (int i = 0; i < n_blocks; i++, b += 56, v += 256, s += 16, m += 16) {
        const uint16_t w[4] = {qd_u16(b + 48), qd_u16(b + 50), qd_u16(b + 52), qd_u16(b + 54)};
        const uint16_t dh = (uint16_t)(w[0] >> 12 | (w[1] >> 12) << 4 | (w[2] >> 12) << 8 | (w[3] >> 12) << 12);
        const float d = _cvtsh_ss(dh);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = b + 4 * ib;
            const int h = qd_u16(b + 32 + 2 * ib); /* nibble l: 3 index bits and the shift's sign of entry l */
            const __m256i g = qd_grid4(fg_iq1s_grid, q[0] | (h << 8 & 0x700), q[1] | (h << 4 & 0x700),
                                       q[2] | (h & 0x700), q[3] | (h >> 4 & 0x700));
            const __m256i delta = _mm256_set_epi64x(h & 0x8000 ? down : up, h & 0x800 ? down : up,
                                                    h & 0x80 ? down : up, h & 0x8 ? down : up);
            qd_iq1_store(g, delta, v + 32 * ib);
            for (int k = 0; k < 2; k++)
                s[2 * ib + k] = d * (float)(2 * ((w[ib / 2] >> (6 * (ib % 2) + 3 * k)) & 7) + 1) * 0.125f;
        }
        qd_zero16(m);
    }
}

/* Decodes n_blocks blocks of a lattice IQ type as fg_quant_decode; returns 0
 * (nothing written) for any other type. Out of line: inlined into the kernels'
 * row loops, it changed their code for the other types too and slowed the
 * K-quants (docs/benchmarks.md); one call per chunk of blocks costs nothing. */
static __attribute__((noinline)) int qd_decode_iq(int wtype, const uint8_t *b, int n_blocks, int8_t *v, float *s,
                                                   float *m)
{
    switch (wtype) {
    case FG_WTYPE_IQ2_XXS: qd_iq2_xxs(b, n_blocks, v, s, m); return 1;
    case FG_WTYPE_IQ2_XS: qd_iq2_xs(b, n_blocks, v, s, m); return 1;
    case FG_WTYPE_IQ2_S: qd_iq2_s(b, n_blocks, v, s, m); return 1;
    case FG_WTYPE_IQ3_XXS: qd_iq3_xxs(b, n_blocks, v, s, m); return 1;
    case FG_WTYPE_IQ3_S: qd_iq3_s(b, n_blocks, v, s, m); return 1;
    case FG_WTYPE_IQ1_S: qd_iq1_s(b, n_blocks, v, s, m); return 1;
    case FG_WTYPE_IQ1_M: qd_iq1_m(b, n_blocks, v, s, m); return 1;
    }
    return 0;
}

#endif
