/* quants.c: the block types of quants.h: sizes, the reference
 * dequantization (written out from the definitions, one function per type,
 * never optimised), validation, and the decoder of the products.
 *
 * The decoder is a second reading of the same definitions, into (v, s, m);
 * test_quants proves it gives the dequantization's bits, value by value. */
#include "kernels/cpu/quants.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/iq_grids.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"

#define QK 256 /* values per K-quant block */

static const struct {
    int id, elems, bytes;
} block_types[] = {
    {FG_WTYPE_Q4_0, 32, 18}, {FG_WTYPE_Q4_1, 32, 20}, {FG_WTYPE_Q5_0, 32, 22}, {FG_WTYPE_Q5_1, 32, 24},
    {FG_WTYPE_Q8_0, 32, 34}, {FG_WTYPE_Q2_K, QK, 84}, {FG_WTYPE_Q3_K, QK, 110}, {FG_WTYPE_Q4_K, QK, 144},
    {FG_WTYPE_Q5_K, QK, 176}, {FG_WTYPE_Q6_K, QK, 210}, {FG_WTYPE_MXFP4, 32, 17}, {FG_WTYPE_IQ4_NL, 32, 18},
    {FG_WTYPE_IQ4_XS, QK, 136}, {FG_WTYPE_IQ2_XXS, QK, 66}, {FG_WTYPE_IQ2_XS, QK, 74},
    {FG_WTYPE_IQ2_S, QK, 82}, {FG_WTYPE_IQ3_XXS, QK, 98}, {FG_WTYPE_IQ3_S, QK, 110},
    {FG_WTYPE_IQ1_S, QK, 50}, {FG_WTYPE_IQ1_M, QK, 56},
};

int fg_wtype_block(int wtype, int *elems, int *bytes)
{
    for (size_t i = 0; i < sizeof block_types / sizeof block_types[0]; i++)
        if (block_types[i].id == wtype) {
            *elems = block_types[i].elems;
            *bytes = block_types[i].bytes;
            return 1;
        }
    *elems = *bytes = 0;
    return 0;
}

static float f16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return fg_f16_to_f32(h);
}

/* ---- reference dequantization, one block of each type into y ---- */

static void deq_q4_0(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 15) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void deq_q4_1(const uint8_t *b, float *y)
{
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 15) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

static uint32_t u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint32_t qh = u32_at(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        const int lo = (int)((qs[j] & 15) | ((qh >> j) & 1) << 4);
        const int hi = (int)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)(lo - 16) * d;
        y[j + 16] = (float)(hi - 16) * d;
    }
}

static void deq_q5_1(const uint8_t *b, float *y)
{
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint32_t qh = u32_at(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        const int lo = (int)((qs[j] & 15) | ((qh >> j) & 1) << 4);
        const int hi = (int)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        y[j] = (float)lo * d + m;
        y[j + 16] = (float)hi * d + m;
    }
}

static void deq_q2_k(const uint8_t *b, float *y)
{
    const uint8_t *scales = b, *qs = b + 16;
    const float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                const int s = 8 * h + 2 * j + l / 16;
                const float dl = d * (float)(scales[s] & 15), ml = dmin * (float)(scales[s] >> 4);
                const int q = (qs[32 * h + l] >> (2 * j)) & 3;
                y[128 * h + 32 * j + l] = dl * (float)q - ml;
            }
}

/* The 6-bit scale s of a Q3_K block's 12 scale bytes. */
static int q3_k_scale(const uint8_t *sc, int s)
{
    const int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
    const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return lo | hi << 4;
}

static void deq_q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hmask = b, *qs = b + 32, *scales = b + 96;
    const float d = f16_at(b + 108);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                const int s = 8 * h + 2 * j + l / 16;
                const float dl = d * (float)(q3_k_scale(scales, s) - 32);
                const int q = ((qs[32 * h + l] >> (2 * j)) & 3) - ((hmask[l] >> (4 * h + j)) & 1 ? 0 : 4);
                y[128 * h + 32 * j + l] = dl * (float)q;
            }
}

/* The 6-bit scale and minimum of sub-block s of a Q4_K / Q5_K block. */
static void k4_scale_min(const uint8_t *sc, int s, int *scale, int *min)
{
    if (s < 4) {
        *scale = sc[s] & 63;
        *min = sc[s + 4] & 63;
    } else {
        *scale = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
        *min = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
    }
}

static void deq_q4_k(const uint8_t *b, float *y)
{
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qs = b + 16;
    for (int p = 0; p < 4; p++)
        for (int k = 0; k < 2; k++) {
            int sc, mn;
            k4_scale_min(scales, 2 * p + k, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            for (int l = 0; l < 32; l++) {
                const int q = k ? qs[32 * p + l] >> 4 : qs[32 * p + l] & 15;
                y[64 * p + 32 * k + l] = d1 * (float)q - m1;
            }
        }
}

static void deq_q5_k(const uint8_t *b, float *y)
{
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
    for (int p = 0; p < 4; p++)
        for (int k = 0; k < 2; k++) {
            int sc, mn;
            k4_scale_min(scales, 2 * p + k, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            for (int l = 0; l < 32; l++) {
                const int q = (k ? qs[32 * p + l] >> 4 : qs[32 * p + l] & 15) + ((qh[l] >> (2 * p + k)) & 1 ? 16 : 0);
                y[64 * p + 32 * k + l] = d1 * (float)q - m1;
            }
        }
}

static void deq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    const float d = f16_at(b + 208);
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lq = ql[64 * h + l + 32 * (c & 1)];
                const int q = ((c < 2 ? lq & 15 : lq >> 4) | ((qh[32 * h + l] >> (2 * c)) & 3) << 4) - 32;
                const int s = 8 * h + 2 * c + l / 16;
                y[128 * h + 32 * c + l] = d * (float)scales[s] * (float)q;
            }
}

static const int8_t iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void deq_iq4_nl(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)iq4_levels[qs[j] & 15];
        y[j + 16] = d * (float)iq4_levels[qs[j] >> 4];
    }
}

/* The 6-bit scale of sub-block sb of an IQ4_XS block. */
static int iq4_xs_scale(const uint8_t *b, int sb)
{
    const int hi = (int)((b[2] | b[3] << 8) >> (2 * sb)) & 3;
    return ((b[4 + sb / 2] >> (4 * (sb % 2))) & 15) | hi << 4;
}

static void deq_iq4_xs(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 8;
    for (int sb = 0; sb < 8; sb++) {
        const float dl = d * (float)(iq4_xs_scale(b, sb) - 32);
        for (int j = 0; j < 16; j++) {
            y[32 * sb + j] = dl * (float)iq4_levels[qs[16 * sb + j] & 15];
            y[32 * sb + 16 + j] = dl * (float)iq4_levels[qs[16 * sb + j] >> 4];
        }
    }
}

/* The lattice IQ types: 8 values at a time are one grid entry (value j its
 * byte j) with 8 sign bits, times a sub-block scale. */
static void grid_values(uint64_t g, unsigned signs, float dl, float *y)
{
    for (int j = 0; j < 8; j++)
        y[j] = dl * (float)((g >> (8 * j)) & 255) * ((signs >> j) & 1 ? -1.0f : 1.0f);
}

static void deq_iq2_xxs(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib; /* 4 grid indices, then 4 x 7 sign bits and a 4-bit scale */
        const uint32_t aux = u32_at(q + 4);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        for (int l = 0; l < 4; l++)
            grid_values(fg_iq2xxs_grid[q[l]], fg_iq_ksigns[(aux >> (7 * l)) & 127], db, y + 32 * ib + 8 * l);
    }
}

static uint16_t u16_at(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static void deq_iq2_xs(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2, *scales = b + 66; /* qs: 32 u16, 9 bits grid index and 7 sign bits */
    for (int ib = 0; ib < 8; ib++) {
        const float db[2] = {d * (0.5f + (float)(scales[ib] & 15)) * 0.25f,
                             d * (0.5f + (float)(scales[ib] >> 4)) * 0.25f};
        for (int l = 0; l < 4; l++) {
            const uint16_t q = u16_at(qs + 2 * (4 * ib + l));
            grid_values(fg_iq2xs_grid[q & 511], fg_iq_ksigns[q >> 9], db[l / 2], y + 32 * ib + 8 * l);
        }
    }
}

static void deq_iq2_s(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *scales = b + 74;
    for (int ib = 0; ib < 8; ib++) {
        const float db[2] = {d * (0.5f + (float)(scales[ib] & 15)) * 0.25f,
                             d * (0.5f + (float)(scales[ib] >> 4)) * 0.25f};
        for (int l = 0; l < 4; l++) {
            const int idx = qs[4 * ib + l] | ((qh[ib] << (8 - 2 * l)) & 0x300); /* 10 bits: 8 in qs, 2 in qh */
            grid_values(fg_iq2s_grid[idx], signs[4 * ib + l], db[l / 2], y + 32 * ib + 8 * l);
        }
    }
}

/* Two 4-value entries of an IQ3 grid as one 8-value entry. */
static uint64_t grid_pair(const uint32_t *grid, int i0, int i1)
{
    return (uint64_t)grid[i0] | (uint64_t)grid[i1] << 32;
}

static void deq_iq3_xxs(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2, *scales_signs = b + 66; /* 8 u32: 4 x 7 sign bits and a 4-bit scale */
    for (int ib = 0; ib < 8; ib++) {
        const uint32_t aux = u32_at(scales_signs + 4 * ib);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
        for (int l = 0; l < 4; l++) {
            const uint8_t *q = qs + 8 * ib + 2 * l;
            grid_values(grid_pair(fg_iq3xxs_grid, q[0], q[1]), fg_iq_ksigns[(aux >> (7 * l)) & 127], db,
                        y + 32 * ib + 8 * l);
        }
    }
}

/* Entry l (< 4) of sub-block ib's two-entry pairs of an IQ3_S block: 9-bit
 * indices, 8 bits in qs and the ninth in bit 2l (2l + 1) of qh[ib]. */
static uint64_t iq3_s_entry(const uint8_t *b, int ib, int l)
{
    const uint8_t *q = b + 2 + 8 * ib + 2 * l, qh = b[66 + ib];
    return grid_pair(fg_iq3s_grid, q[0] | ((qh << (8 - 2 * l)) & 256), q[1] | ((qh << (7 - 2 * l)) & 256));
}

/* The odd scale 1 + 2 * (4-bit code) of sub-block ib of an IQ3_S block. */
static int iq3_s_scale(const uint8_t *b, int ib)
{
    return 1 + 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 15);
}

static void deq_iq3_s(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint8_t *signs = b + 74;
    for (int ib = 0; ib < 8; ib++) {
        const float db = d * (float)iq3_s_scale(b, ib);
        for (int l = 0; l < 4; l++)
            grid_values(iq3_s_entry(b, ib, l), signs[4 * ib + l], db, y + 32 * ib + 8 * l);
    }
}

/* IQ1: 8 values are one entry of the ternary grid (int8 in {-1, 0, 1}) plus a
 * shift of +-FG_IQ1S_DELTA, times an odd sub-block scale. */
static void grid1_values(uint64_t g, float delta, float dl, float *y)
{
    for (int j = 0; j < 8; j++)
        y[j] = dl * ((float)(int8_t)(uint8_t)(g >> (8 * j)) + delta);
}

static void deq_iq1_s(const uint8_t *b, float *y)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int ib = 0; ib < 8; ib++) {
        /* qh: 4 x 3 high index bits, a 3-bit scale, the shift's sign */
        const uint16_t qh = u16_at(b + 34 + 2 * ib);
        const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -FG_IQ1S_DELTA : FG_IQ1S_DELTA;
        for (int l = 0; l < 4; l++)
            grid1_values(fg_iq1s_grid[qs[4 * ib + l] | ((qh >> (3 * l)) & 7) << 8], delta, dl, y + 32 * ib + 8 * l);
    }
}

/* IQ1_M's F16 super-block scale: the top 4 bits of its four u16 scale words,
 * lowest first. */
static uint16_t iq1_m_scale(const uint8_t *b)
{
    const uint8_t *sc = b + 48;
    return (uint16_t)(sc[1] >> 4 | (sc[3] >> 4) << 4 | (sc[5] >> 4) << 8 | (sc[7] >> 4) << 12);
}

/* The odd scale of half k (< 2) of IQ1_M sub-block ib: 3 bits of its u16 scale word. */
static int iq1_m_sub_scale(const uint8_t *b, int ib, int k)
{
    return 2 * ((u16_at(b + 48 + 2 * (ib / 2)) >> (6 * (ib % 2) + 3 * k)) & 7) + 1;
}

/* Entry l (< 4) of IQ1_M sub-block ib: 8 index bits in qs, 3 more and the
 * shift's sign in a nibble of qh (low nibble for even l). */
static int iq1_m_entry(const uint8_t *b, int ib, int l, int *neg)
{
    const int h = (b[32 + 2 * ib + l / 2] >> (4 * (l % 2))) & 15;
    *neg = h >> 3;
    return b[4 * ib + l] | (h & 7) << 8;
}

static void deq_iq1_m(const uint8_t *b, float *y)
{
    const float d = fg_f16_to_f32(iq1_m_scale(b));
    for (int ib = 0; ib < 8; ib++) {
        const float dl[2] = {d * (float)iq1_m_sub_scale(b, ib, 0), d * (float)iq1_m_sub_scale(b, ib, 1)};
        for (int l = 0; l < 4; l++) {
            int neg;
            const int idx = iq1_m_entry(b, ib, l, &neg);
            grid1_values(fg_iq1s_grid[idx], neg ? -FG_IQ1S_DELTA : FG_IQ1S_DELTA, dl[l / 2], y + 32 * ib + 8 * l);
        }
    }
}

int fg_wtype_dequantize_row(int wtype, const void *row, float *y, int64_t n)
{
    if (fg_wtype_row_bytes(wtype, n) == 0 || !row || !y)
        return -1;
    const uint8_t *p = row;
    void (*deq)(const uint8_t *, float *) = NULL;
    switch (wtype) {
    case FG_WTYPE_F32:
        memcpy(y, p, (size_t)n * sizeof(float));
        return 0;
    case FG_WTYPE_F16:
    case FG_WTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            y[i] = wtype == FG_WTYPE_F16 ? fg_f16_to_f32(h) : fg_bf16_to_f32(h);
        }
        return 0;
    case FG_WTYPE_Q8_0:
        fg_dequantize_row_q8_0(row, y, n);
        return 0;
    case FG_WTYPE_MXFP4:
        fg_dequantize_row_mxfp4(row, y, n);
        return 0;
    case FG_WTYPE_Q4_0: deq = deq_q4_0; break;
    case FG_WTYPE_Q4_1: deq = deq_q4_1; break;
    case FG_WTYPE_Q5_0: deq = deq_q5_0; break;
    case FG_WTYPE_Q5_1: deq = deq_q5_1; break;
    case FG_WTYPE_Q2_K: deq = deq_q2_k; break;
    case FG_WTYPE_Q3_K: deq = deq_q3_k; break;
    case FG_WTYPE_Q4_K: deq = deq_q4_k; break;
    case FG_WTYPE_Q5_K: deq = deq_q5_k; break;
    case FG_WTYPE_Q6_K: deq = deq_q6_k; break;
    case FG_WTYPE_IQ4_NL: deq = deq_iq4_nl; break;
    case FG_WTYPE_IQ4_XS: deq = deq_iq4_xs; break;
    case FG_WTYPE_IQ2_XXS: deq = deq_iq2_xxs; break;
    case FG_WTYPE_IQ2_XS: deq = deq_iq2_xs; break;
    case FG_WTYPE_IQ2_S: deq = deq_iq2_s; break;
    case FG_WTYPE_IQ3_XXS: deq = deq_iq3_xxs; break;
    case FG_WTYPE_IQ3_S: deq = deq_iq3_s; break;
    case FG_WTYPE_IQ1_S: deq = deq_iq1_s; break;
    case FG_WTYPE_IQ1_M: deq = deq_iq1_m; break;
    default:
        return -1;
    }
    int elems, bytes;
    fg_wtype_block(wtype, &elems, &bytes);
    for (int64_t b = 0; b < n / elems; b++)
        deq(p + (size_t)b * (size_t)bytes, y + b * elems);
    return 0;
}

/* ---- validation ---- */

/* Byte offsets of a block type's F16 fields (scales and minimums); -1 ends
 * (IQ1_M's scale is spread over its scale words: checked apart). */
static const int *f16_fields(int wtype)
{
    static const int none[] = {-1}, at0[] = {0, -1}, at01[] = {0, 2, -1}, at80[] = {80, 82, -1}, at108[] = {108, -1},
                     at208[] = {208, -1};
    switch (wtype) {
    case FG_WTYPE_Q4_0:
    case FG_WTYPE_Q5_0:
    case FG_WTYPE_Q8_0:
    case FG_WTYPE_IQ4_NL:
    case FG_WTYPE_IQ4_XS:
    case FG_WTYPE_IQ2_XXS:
    case FG_WTYPE_IQ2_XS:
    case FG_WTYPE_IQ2_S:
    case FG_WTYPE_IQ3_XXS:
    case FG_WTYPE_IQ3_S:
    case FG_WTYPE_IQ1_S:
        return at0;
    case FG_WTYPE_Q4_1:
    case FG_WTYPE_Q5_1:
    case FG_WTYPE_Q4_K:
    case FG_WTYPE_Q5_K:
        return at01;
    case FG_WTYPE_Q2_K:
        return at80;
    case FG_WTYPE_Q3_K:
        return at108;
    case FG_WTYPE_Q6_K:
        return at208;
    case FG_WTYPE_IQ1_M:
        return none;
    }
    return NULL;
}

static int scales_finite(int wtype, const int *fields, const uint8_t *blk)
{
    if (wtype == FG_WTYPE_IQ1_M && !isfinite(fg_f16_to_f32(iq1_m_scale(blk))))
        return 0;
    for (const int *f = fields; *f >= 0; f++)
        if (!isfinite(f16_at(blk + *f)))
            return 0;
    return 1;
}

int fg_wtype_validate_rows(int wtype, const void *w, int64_t n_in, int64_t n_rows, int64_t *bad_row,
                           int64_t *bad_block)
{
    int64_t r_bad = -1, b_bad = -1;
    int ret = 0;
    const size_t row_bytes = fg_wtype_row_bytes(wtype, n_in);
    const int *fields = f16_fields(wtype);
    int elems, bytes;
    if (row_bytes == 0 || n_rows < 0 || (!w && n_rows > 0)) {
        ret = -1;
    } else if (wtype == FG_WTYPE_MXFP4) {
        return fg_mxfp4_validate_rows(w, n_in, n_rows, bad_row, bad_block);
    } else if (fields && fg_wtype_block(wtype, &elems, &bytes)) {
        const int64_t nb = n_in / elems;
        for (int64_t r = 0; r < n_rows && !ret; r++)
            for (int64_t b = 0; b < nb && !ret; b++) {
                const uint8_t *blk = (const uint8_t *)w + (size_t)r * row_bytes + (size_t)b * (size_t)bytes;
                if (!scales_finite(wtype, fields, blk)) {
                    r_bad = r;
                    b_bad = b;
                    ret = -1;
                }
            }
    }
    if (bad_row)
        *bad_row = r_bad;
    if (bad_block)
        *bad_block = b_bad;
    return ret;
}

/* ---- the decoded form (quants.h) ----
 *
 * Each decoder reads one block into its groups: v [block_elems][..] as a flat
 * array (value i of the block at v[i]), s and m [block_elems / 16] (one per
 * half group, in order). The scales are formed as the dequantization forms
 * them, so s * v + m reproduces its bits. */

static void dec_q4_0(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        v[j] = (int8_t)((qs[j] & 15) - 8);
        v[j + 16] = (int8_t)((qs[j] >> 4) - 8);
    }
    s[0] = s[1] = f16_at(b);
    m[0] = m[1] = 0.0f;
}

static void dec_q4_1(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        v[j] = (int8_t)(qs[j] & 15);
        v[j + 16] = (int8_t)(qs[j] >> 4);
    }
    s[0] = s[1] = f16_at(b);
    m[0] = m[1] = f16_at(b + 2);
}

static void dec_q5(const uint8_t *qh4, const uint8_t *qs, int off, int8_t *v)
{
    const uint32_t qh = u32_at(qh4);
    for (int j = 0; j < 16; j++) {
        v[j] = (int8_t)((int)((qs[j] & 15) | ((qh >> j) & 1) << 4) - off);
        v[j + 16] = (int8_t)((int)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - off);
    }
}

static void dec_q5_0(const uint8_t *b, int8_t *v, float *s, float *m)
{
    dec_q5(b + 2, b + 6, 16, v);
    s[0] = s[1] = f16_at(b);
    m[0] = m[1] = 0.0f;
}

static void dec_q5_1(const uint8_t *b, int8_t *v, float *s, float *m)
{
    dec_q5(b + 4, b + 8, 0, v);
    s[0] = s[1] = f16_at(b);
    m[0] = m[1] = f16_at(b + 2);
}

/* K-quants: half group k (16 values) of the block is index k of s and m,
 * the sub-block of 16 values k (Q2_K, Q3_K, Q6_K) or of 32 values k / 2. */
static void dec_q2_k(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const uint8_t *scales = b, *qs = b + 16;
    const float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                v[128 * h + 32 * j + l] = (int8_t)((qs[32 * h + l] >> (2 * j)) & 3);
    for (int k = 0; k < 16; k++) {
        /* value 16k's sub-block: h = k / 8, j = (k % 8) / 2, l / 16 = k % 2, so s = k */
        s[k] = d * (float)(scales[k] & 15);
        m[k] = -(dmin * (float)(scales[k] >> 4));
    }
}

static void dec_q3_k(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const uint8_t *hmask = b, *qs = b + 32, *scales = b + 96;
    const float d = f16_at(b + 108);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                v[128 * h + 32 * j + l] =
                    (int8_t)(((qs[32 * h + l] >> (2 * j)) & 3) - ((hmask[l] >> (4 * h + j)) & 1 ? 0 : 4));
    for (int k = 0; k < 16; k++) {
        s[k] = d * (float)(q3_k_scale(scales, k) - 32);
        m[k] = 0.0f;
    }
}

static void dec_q45_k(const uint8_t *b, int five, int8_t *v, float *s, float *m)
{
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *qs = five ? b + 48 : b + 16;
    for (int p = 0; p < 4; p++)
        for (int k = 0; k < 2; k++)
            for (int l = 0; l < 32; l++) {
                int q = k ? qs[32 * p + l] >> 4 : qs[32 * p + l] & 15;
                if (five && (qh[l] >> (2 * p + k)) & 1)
                    q += 16;
                v[64 * p + 32 * k + l] = (int8_t)q;
            }
    for (int sb = 0; sb < 8; sb++) {
        int sc, mn;
        k4_scale_min(scales, sb, &sc, &mn);
        s[2 * sb] = s[2 * sb + 1] = d * (float)sc;
        m[2 * sb] = m[2 * sb + 1] = -(dmin * (float)mn);
    }
}

static void dec_q4_k(const uint8_t *b, int8_t *v, float *s, float *m) { dec_q45_k(b, 0, v, s, m); }
static void dec_q5_k(const uint8_t *b, int8_t *v, float *s, float *m) { dec_q45_k(b, 1, v, s, m); }

static void dec_q6_k(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = (const int8_t *)(b + 192);
    const float d = f16_at(b + 208);
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lq = ql[64 * h + l + 32 * (c & 1)];
                v[128 * h + 32 * c + l] =
                    (int8_t)(((c < 2 ? lq & 15 : lq >> 4) | ((qh[32 * h + l] >> (2 * c)) & 3) << 4) - 32);
            }
    for (int k = 0; k < 16; k++) {
        s[k] = d * (float)scales[k];
        m[k] = 0.0f;
    }
}

static void dec_iq4_nl(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        v[j] = iq4_levels[qs[j] & 15];
        v[j + 16] = iq4_levels[qs[j] >> 4];
    }
    s[0] = s[1] = f16_at(b);
    m[0] = m[1] = 0.0f;
}

static void dec_iq4_xs(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 8;
    for (int sb = 0; sb < 8; sb++) {
        for (int j = 0; j < 16; j++) {
            v[32 * sb + j] = iq4_levels[qs[16 * sb + j] & 15];
            v[32 * sb + 16 + j] = iq4_levels[qs[16 * sb + j] >> 4];
        }
        s[2 * sb] = s[2 * sb + 1] = d * (float)(iq4_xs_scale(b, sb) - 32);
        m[2 * sb] = m[2 * sb + 1] = 0.0f;
    }
}

/* The lattice IQ types: a grid entry's 8 magnitudes under their sign bits,
 * as bytes of one word: sign bit j spread to 0xff in byte j (m), then each
 * byte negated where m is set as ~a + 1, which carries into no other byte
 * because no IQ2 or IQ3 grid magnitude is 0 (test_grids). */
static void grid_signed(uint64_t g, unsigned signs, int8_t *v)
{
    const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full, ones = 0x0101010101010101ull;
    const uint64_t bit = ((uint64_t)(signs & 255) * ones) & 0x8040201008040201ull; /* byte j: bit j alone */
    const uint64_t m = ((((bit & lo7) + lo7) | bit) >> 7 & ones) * 255;            /* byte j: 0xff where set */
    const uint64_t r = (g ^ m) + (m & ones);
    memcpy(v, &r, 8); /* little-endian: byte j is value j */
}

static void dec_iq2_xxs(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t aux = u32_at(q + 4);
        for (int l = 0; l < 4; l++)
            grid_signed(fg_iq2xxs_grid[q[l]], fg_iq_ksigns[(aux >> (7 * l)) & 127], v + 32 * ib + 8 * l);
        s[2 * ib] = s[2 * ib + 1] = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        m[2 * ib] = m[2 * ib + 1] = 0.0f;
    }
}

static void dec_iq2_xs(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2, *scales = b + 66;
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) {
            const uint16_t q = u16_at(qs + 2 * (4 * ib + l));
            grid_signed(fg_iq2xs_grid[q & 511], fg_iq_ksigns[q >> 9], v + 32 * ib + 8 * l);
        }
        s[2 * ib] = d * (0.5f + (float)(scales[ib] & 15)) * 0.25f;
        s[2 * ib + 1] = d * (0.5f + (float)(scales[ib] >> 4)) * 0.25f;
        m[2 * ib] = m[2 * ib + 1] = 0.0f;
    }
}

static void dec_iq2_s(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *scales = b + 74;
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++)
            grid_signed(fg_iq2s_grid[qs[4 * ib + l] | ((qh[ib] << (8 - 2 * l)) & 0x300)], signs[4 * ib + l],
                        v + 32 * ib + 8 * l);
        s[2 * ib] = d * (0.5f + (float)(scales[ib] & 15)) * 0.25f;
        s[2 * ib + 1] = d * (0.5f + (float)(scales[ib] >> 4)) * 0.25f;
        m[2 * ib] = m[2 * ib + 1] = 0.0f;
    }
}

static void dec_iq3_xxs(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2, *scales_signs = b + 66;
    for (int ib = 0; ib < 8; ib++) {
        const uint32_t aux = u32_at(scales_signs + 4 * ib);
        for (int l = 0; l < 4; l++) {
            const uint8_t *q = qs + 8 * ib + 2 * l;
            grid_signed(grid_pair(fg_iq3xxs_grid, q[0], q[1]), fg_iq_ksigns[(aux >> (7 * l)) & 127],
                        v + 32 * ib + 8 * l);
        }
        s[2 * ib] = s[2 * ib + 1] = d * (0.5f + (float)(aux >> 28)) * 0.5f;
        m[2 * ib] = m[2 * ib + 1] = 0.0f;
    }
}

static void dec_iq3_s(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const float d = f16_at(b);
    const uint8_t *signs = b + 74;
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++)
            grid_signed(iq3_s_entry(b, ib, l), signs[4 * ib + l], v + 32 * ib + 8 * l);
        s[2 * ib] = s[2 * ib + 1] = d * (float)iq3_s_scale(b, ib);
        m[2 * ib] = m[2 * ib + 1] = 0.0f;
    }
}

/* IQ1: value g + delta (delta = +-1/8) as the integer 8g +- 1 under the scale
 * dl / 8: dl is an f16 times an odd integer below 16, so dl / 8 is exact and
 * (dl / 8) * (8g +- 1) rounds the same real number dl * (g + delta) does. */
static void grid1_signed(uint64_t g, int neg, int8_t *v)
{
    /* bytes g in {0xff, 0, 1}; (x << 3) & f8 is 8x per byte (the bits shifted
     * into the next byte are masked off); 8g + 1 = 8g | 1, and 8g - 1 = ~(8(-g))
     * with -g flipping bits 1-7 of the nonzero bytes (those with bit 0 set) */
    const uint64_t ones = 0x0101010101010101ull, f8 = 0xf8f8f8f8f8f8f8f8ull;
    const uint64_t up = ((g << 3) & f8) | ones, down = ~(((g ^ (g & ones) * 0xfe) << 3) & f8);
    const uint64_t r = up ^ ((up ^ down) & (0 - (uint64_t)(neg != 0))); /* no branch: IQ1_M's signs are per 8 */
    memcpy(v, &r, 8);
}

static void dec_iq1_s(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t qh = u16_at(b + 34 + 2 * ib);
        for (int l = 0; l < 4; l++)
            grid1_signed(fg_iq1s_grid[qs[4 * ib + l] | ((qh >> (3 * l)) & 7) << 8], qh >> 15, v + 32 * ib + 8 * l);
        s[2 * ib] = s[2 * ib + 1] = d * (float)(2 * ((qh >> 12) & 7) + 1) * 0.125f;
        m[2 * ib] = m[2 * ib + 1] = 0.0f;
    }
}

static void dec_iq1_m(const uint8_t *b, int8_t *v, float *s, float *m)
{
    const float d = fg_f16_to_f32(iq1_m_scale(b));
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) {
            int neg;
            const int idx = iq1_m_entry(b, ib, l, &neg);
            grid1_signed(fg_iq1s_grid[idx], neg, v + 32 * ib + 8 * l);
        }
        for (int k = 0; k < 2; k++) {
            s[2 * ib + k] = d * (float)iq1_m_sub_scale(b, ib, k) * 0.125f;
            m[2 * ib + k] = 0.0f;
        }
    }
}

typedef void (*decoder)(const uint8_t *, int8_t *, float *, float *);

static decoder decoder_of(int wtype)
{
    switch (wtype) {
    case FG_WTYPE_Q4_0: return dec_q4_0;
    case FG_WTYPE_Q4_1: return dec_q4_1;
    case FG_WTYPE_Q5_0: return dec_q5_0;
    case FG_WTYPE_Q5_1: return dec_q5_1;
    case FG_WTYPE_Q2_K: return dec_q2_k;
    case FG_WTYPE_Q3_K: return dec_q3_k;
    case FG_WTYPE_Q4_K: return dec_q4_k;
    case FG_WTYPE_Q5_K: return dec_q5_k;
    case FG_WTYPE_Q6_K: return dec_q6_k;
    case FG_WTYPE_IQ4_NL: return dec_iq4_nl;
    case FG_WTYPE_IQ4_XS: return dec_iq4_xs;
    case FG_WTYPE_IQ2_XXS: return dec_iq2_xxs;
    case FG_WTYPE_IQ2_XS: return dec_iq2_xs;
    case FG_WTYPE_IQ2_S: return dec_iq2_s;
    case FG_WTYPE_IQ3_XXS: return dec_iq3_xxs;
    case FG_WTYPE_IQ3_S: return dec_iq3_s;
    case FG_WTYPE_IQ1_S: return dec_iq1_s;
    case FG_WTYPE_IQ1_M: return dec_iq1_m;
    }
    return NULL;
}

int fg_quant_decodes(int wtype) { return decoder_of(wtype) != NULL; }

int fg_quant_has_min(int wtype)
{
    return wtype == FG_WTYPE_Q4_1 || wtype == FG_WTYPE_Q5_1 || wtype == FG_WTYPE_Q2_K || wtype == FG_WTYPE_Q4_K ||
           wtype == FG_WTYPE_Q5_K;
}

int fg_quant_decode(int wtype, const void *blocks, int n_blocks, int8_t *v, float *s, float *m)
{
    const decoder dec = decoder_of(wtype);
    int elems, bytes;
    if (!dec || !fg_wtype_block(wtype, &elems, &bytes))
        return -1;
    for (int b = 0; b < n_blocks; b++)
        dec((const uint8_t *)blocks + (size_t)b * (size_t)bytes, v + (size_t)b * (size_t)elems,
            s + (size_t)b * (size_t)(elems / 16), m + (size_t)b * (size_t)(elems / 16));
    return 0;
}
