/* matmul_quant_decode.h: internal to matmul_quant_avx2.c and
 * matmul_quant_avx512.c (both compiled with AVX2 and F16C). AVX2 decoders of
 * every type fg_quant_decode decodes (the lattice IQ types in
 * matmul_quant_decode_iq.h) into quants.h's decoded form, bit for bit what
 * fg_quant_decode writes (the values are integers; the scales are formed by
 * the same f32 products), so the products' results do not depend on which
 * decoder ran (test_quants' products check it, on both ISAs, for every type;
 * test_decode_avx2 compares the decoded bytes with fg_quant_decode's).
 */
#ifndef FG_MATMUL_QUANT_DECODE_H
#define FG_MATMUL_QUANT_DECODE_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quants.h"

static inline float qd_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* 32 nibbles of 16 bytes: low nibbles are values 0..15, high ones 16..31. */
static inline __m256i qd_nibbles16(const uint8_t *q)
{
    const __m128i b = _mm_loadu_si128((const __m128i *)q), m4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
}

static inline uint32_t qd_u32(const uint8_t *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    return u;
}

static inline uint16_t qd_u16(const uint8_t *p)
{
    uint16_t u;
    memcpy(&u, p, 2);
    return u;
}

/* Byte j of the result is 0xff where bit j of u is set, else 0. */
static inline __m256i qd_bits32(uint32_t u)
{
    const __m256i idx = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i by = _mm256_shuffle_epi8(_mm256_set1_epi32((int)u), idx);
    return _mm256_cmpeq_epi8(_mm256_and_si256(by, bit), bit);
}

/* The fifth bits of Q5_0 / Q5_1 (a little-endian u32 at qh) as 16 in byte j where bit j is set. */
static inline __m256i qd_bit5(const uint8_t *qh)
{
    return _mm256_and_si256(qd_bits32(qd_u32(qh)), _mm256_set1_epi8(16));
}

/* The IQ4 levels of 32 codes (qd_nibbles16's order). */
static inline __m256i qd_iq4(const uint8_t *q)
{
    const __m256i levels = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
    return _mm256_shuffle_epi8(levels, qd_nibbles16(q));
}

/* The 6-bit scale and minimum pairs of a Q4_K / Q5_K block (quants.h). */
static inline void qd_k4_scales(const uint8_t *b, float *s, float *m)
{
    const float d = qd_f16(b), dmin = qd_f16(b + 2);
    const uint8_t *sc = b + 4;
    for (int j = 0; j < 8; j++) {
        int scale, min;
        if (j < 4) {
            scale = sc[j] & 63;
            min = sc[j + 4] & 63;
        } else {
            scale = (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
            min = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
        }
        s[2 * j] = s[2 * j + 1] = d * (float)scale;
        m[2 * j] = m[2 * j + 1] = -(dmin * (float)min);
    }
}

#include "kernels/cpu/matmul_quant_decode_iq.h" /* the lattice IQ types, on the helpers above */

/* Decodes n_blocks blocks of wtype from b into v, s, m as fg_quant_decode;
 * returns 0 if this type has no decoder here (nothing written). */
static inline int qd_decode(int wtype, const uint8_t *b, int n_blocks, int8_t *v, float *s, float *m)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    switch (wtype) {
    case FG_WTYPE_Q4_0:
        for (int i = 0; i < n_blocks; i++, b += 18, v += 32, s += 2, m += 2) {
            _mm256_storeu_si256((__m256i *)v, _mm256_sub_epi8(qd_nibbles16(b + 2), _mm256_set1_epi8(8)));
            s[0] = s[1] = qd_f16(b);
            m[0] = m[1] = 0.0f;
        }
        return 1;
    case FG_WTYPE_Q4_1:
        for (int i = 0; i < n_blocks; i++, b += 20, v += 32, s += 2, m += 2) {
            _mm256_storeu_si256((__m256i *)v, qd_nibbles16(b + 4));
            s[0] = s[1] = qd_f16(b);
            m[0] = m[1] = qd_f16(b + 2);
        }
        return 1;
    case FG_WTYPE_Q5_0:
        for (int i = 0; i < n_blocks; i++, b += 22, v += 32, s += 2, m += 2) {
            const __m256i q = _mm256_or_si256(qd_nibbles16(b + 6), qd_bit5(b + 2));
            _mm256_storeu_si256((__m256i *)v, _mm256_sub_epi8(q, _mm256_set1_epi8(16)));
            s[0] = s[1] = qd_f16(b);
            m[0] = m[1] = 0.0f;
        }
        return 1;
    case FG_WTYPE_Q5_1:
        for (int i = 0; i < n_blocks; i++, b += 24, v += 32, s += 2, m += 2) {
            _mm256_storeu_si256((__m256i *)v, _mm256_or_si256(qd_nibbles16(b + 8), qd_bit5(b + 4)));
            s[0] = s[1] = qd_f16(b);
            m[0] = m[1] = qd_f16(b + 2);
        }
        return 1;
    case FG_WTYPE_IQ4_NL:
        for (int i = 0; i < n_blocks; i++, b += 18, v += 32, s += 2, m += 2) {
            _mm256_storeu_si256((__m256i *)v, qd_iq4(b + 2));
            s[0] = s[1] = qd_f16(b);
            m[0] = m[1] = 0.0f;
        }
        return 1;
    case FG_WTYPE_IQ4_XS:
        for (int i = 0; i < n_blocks; i++, b += 136, v += 256, s += 16, m += 16) {
            const float d = qd_f16(b);
            const int sh = b[2] | b[3] << 8;
            for (int sb = 0; sb < 8; sb++) {
                _mm256_storeu_si256((__m256i *)(v + 32 * sb), qd_iq4(b + 8 + 16 * sb));
                const int ls = ((b[4 + sb / 2] >> (4 * (sb % 2))) & 15) | ((sh >> (2 * sb)) & 3) << 4;
                s[2 * sb] = s[2 * sb + 1] = d * (float)(ls - 32);
                m[2 * sb] = m[2 * sb + 1] = 0.0f;
            }
        }
        return 1;
    case FG_WTYPE_Q2_K:
        for (int i = 0; i < n_blocks; i++, b += 84, v += 256, s += 16, m += 16) {
            for (int h = 0; h < 2; h++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * h));
                for (int j = 0; j < 4; j++)
                    _mm256_storeu_si256((__m256i *)(v + 128 * h + 32 * j),
                                        _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3)));
            }
            const float d = qd_f16(b + 80), dmin = qd_f16(b + 82);
            for (int k = 0; k < 16; k++) {
                s[k] = d * (float)(b[k] & 15);
                m[k] = -(dmin * (float)(b[k] >> 4));
            }
        }
        return 1;
    case FG_WTYPE_Q3_K:
        for (int i = 0; i < n_blocks; i++, b += 110, v += 256, s += 16, m += 16) {
            const __m256i hm = _mm256_loadu_si256((const __m256i *)b);
            for (int h = 0; h < 2; h++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(b + 32 + 32 * h));
                for (int j = 0; j < 4; j++) {
                    const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + j)));
                    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3));
                    _mm256_storeu_si256((__m256i *)(v + 128 * h + 32 * j),
                                        _mm256_sub_epi8(low, _mm256_andnot_si256(set, _mm256_set1_epi8(4))));
                }
            }
            const float d = qd_f16(b + 108);
            const uint8_t *sc = b + 96;
            for (int k = 0; k < 16; k++) {
                const int lo = k < 8 ? sc[k] & 15 : sc[k - 8] >> 4;
                const int hi = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
                s[k] = d * (float)((lo | hi << 4) - 32);
                m[k] = 0.0f;
            }
        }
        return 1;
    case FG_WTYPE_Q4_K:
    case FG_WTYPE_Q5_K: {
        const int five = wtype == FG_WTYPE_Q5_K, bytes = five ? 176 : 144;
        for (int i = 0; i < n_blocks; i++, b += bytes, v += 256, s += 16, m += 16) {
            const uint8_t *qs = b + (five ? 48 : 16);
            const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
            for (int p = 0; p < 4; p++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (five) {
                    const __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * p))), b1 = _mm256_set1_epi8((char)(2 << (2 * p)));
                    const __m256i sixteen = _mm256_set1_epi8(16);
                    lo = _mm256_add_epi8(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), sixteen));
                    hi = _mm256_add_epi8(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), sixteen));
                }
                _mm256_storeu_si256((__m256i *)(v + 64 * p), lo);
                _mm256_storeu_si256((__m256i *)(v + 64 * p + 32), hi);
            }
            qd_k4_scales(b, s, m);
        }
        return 1;
    }
    case FG_WTYPE_Q6_K:
        for (int i = 0; i < n_blocks; i++, b += 210, v += 256, s += 16, m += 16) {
            const __m256i three = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
            for (int h = 0; h < 2; h++) {
                const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
                const __m256i lows[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                                         _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
                for (int c = 0; c < 4; c++) {
                    const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), three);
                    const __m256i q = _mm256_or_si256(lows[c], _mm256_slli_epi16(top, 4)); /* top < 4: no carry */
                    _mm256_storeu_si256((__m256i *)(v + 128 * h + 32 * c), _mm256_sub_epi8(q, off));
                }
            }
            const float d = qd_f16(b + 208);
            const int8_t *sc = (const int8_t *)(b + 192);
            for (int k = 0; k < 16; k++) {
                s[k] = d * (float)sc[k];
                m[k] = 0.0f;
            }
        }
        return 1;
    }
    return qd_decode_iq(wtype, b, n_blocks, v, s, m);
}

#endif
