/* numeric.c: the reference scalar conversions of numeric.h.
 *
 * Every narrowing conversion goes through one integer routine, round_minifloat(),
 * which rounds the magnitude of an f32 to a format with `mbits` mantissa bits and
 * exponent bias `bias`, exactly, round-to-nearest-even, subnormals included. The
 * result is the format's magnitude code (exponent field << mbits | mantissa), in
 * which a carry out of the mantissa lands in the exponent field as it should; the
 * callers then apply their own overflow rule (F16: infinity; E4M3, E2M1: saturate).
 * Integer arithmetic only, so the results never depend on the FPU rounding mode.
 */
#include "kernels/cpu/numeric.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ax: |f| as f32 bits, finite (< 0x7f800000). Returns the magnitude code of the
 * nearest value (ties to even) of a binary format with mbits mantissa bits and
 * the given exponent bias, assuming an unbounded exponent range upwards. */
static uint32_t round_minifloat(uint32_t ax, int mbits, int bias)
{
    int e = (int)(ax >> 23);
    if (e == 0)
        return 0; /* f32 subnormals are far below the smallest subnormal of any target */
    uint64_t mant = (ax & 0x7fffffu) | 0x800000u; /* 24 significant bits */
    int te = e - 127 + bias;                        /* target biased exponent */
    int shift = 23 - mbits;
    uint64_t base = 0;
    if (te >= 1)
        base = (uint64_t)(te - 1) << mbits; /* the implicit bit of mant adds the last 1 << mbits */
    else
        shift += 1 - te; /* target subnormal: fixed quantum 2^(1 - bias - mbits) */
    if (shift > 40)
        return 0;
    uint64_t q = mant >> shift;
    uint64_t rem = mant & ((1ull << shift) - 1);
    uint64_t half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return (uint32_t)(base + q);
}

float fg_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) /* inf / NaN, payload kept */
        return f32_from_bits(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return f32_from_bits(sign);
        /* subnormal: mant * 2^-24, exact in f32 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t fg_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) {
        /* NaN: keep the top payload bits; keep it a NaN if they are all zero */
        uint16_t m = (uint16_t)((ax >> 13) & 0x3ff);
        return (uint16_t)(sign | 0x7c00 | (m ? m : 0x200));
    }
    if (ax == 0x7f800000u)
        return (uint16_t)(sign | 0x7c00);
    uint32_t code = round_minifloat(ax, 10, 15);
    if (code >= 0x7c00) /* 65520 and above round to infinity, as IEEE does */
        code = 0x7c00;
    return (uint16_t)(sign | code);
}

float fg_bf16_to_f32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

uint16_t fg_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        /* NaN: truncate, but never to the infinity pattern */
        uint16_t h = (uint16_t)(x >> 16);
        return (h & 0x7f) ? h : (uint16_t)(h | 0x40);
    }
    /* round to nearest even on the low 16 bits; a carry may reach infinity (IEEE overflow) */
    uint32_t r = x + 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(r >> 16);
}

float fg_e4m3_to_f32(uint8_t v)
{
    int sign = v & 0x80;
    int exp = (v >> 3) & 0xf;
    int mant = v & 7;
    if (exp == 0xf && mant == 7)
        return sign ? -NAN : NAN;
    float mag;
    if (exp == 0)
        mag = (float)mant * (1.0f / 512.0f); /* subnormal: mant * 2^-9 */
    else
        mag = f32_from_bits((uint32_t)(exp + 120) << 23 | (uint32_t)mant << 20);
    return sign ? -mag : mag;
}

uint8_t fg_f32_to_e4m3(float f)
{
    uint32_t x = f32_bits(f);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint8_t)(sign | 0x7f);
    if (ax >= 0x43e00000u) /* |f| >= 448, infinity included: saturate */
        return (uint8_t)(sign | 0x7e);
    uint32_t code = round_minifloat(ax, 3, 7);
    if (code > 0x7e) /* (448, 464] cannot reach here, but keep NaN unreachable */
        code = 0x7e;
    return (uint8_t)(sign | code);
}

float fg_e2m1_to_f32(uint8_t code)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float m = mag[code & 7];
    return (code & 8) ? -m : m;
}

uint8_t fg_f32_to_e2m1(float f)
{
    uint32_t x = f32_bits(f);
    uint8_t sign = (uint8_t)((x >> 28) & 0x8);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return 0; /* E2M1 has no NaN: a NaN encodes as +0 */
    if (ax >= 0x40c00000u) /* |f| >= 6, infinity included: saturate */
        return (uint8_t)(sign | 7);
    uint32_t code = round_minifloat(ax, 1, 1);
    if (code > 7)
        code = 7;
    return (uint8_t)(sign | code);
}

/* x * id rounded half away from zero into [-127, 127]; NaN gives 0 (no UB on
 * any input). The vector quantizers in matmul_avx2.c/matmul_avx512.c repeat
 * exactly these steps. */
static int8_t q8_round(float v)
{
    if (v != v)
        return 0;
    if (v >= 127.0f)
        return 127;
    if (v <= -127.0f)
        return -127;
    return (int8_t)roundf(v);
}

void fg_quantize_row_q8_0(const float *x, fg_block_q8_0 *y, int64_t n)
{
    int64_t nb = n / FG_Q8_0_BLOCK;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * FG_Q8_0_BLOCK;
        float amax = 0.0f;
        for (int j = 0; j < FG_Q8_0_BLOCK; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = fg_f32_to_f16(d);
        for (int j = 0; j < FG_Q8_0_BLOCK; j++)
            y[b].qs[j] = q8_round(xb[j] * id);
    }
}

void fg_dequantize_row_q8_0(const fg_block_q8_0 *x, float *y, int64_t n)
{
    int64_t nb = n / FG_Q8_0_BLOCK;
    for (int64_t b = 0; b < nb; b++) {
        const float d = fg_f16_to_f32(x[b].d);
        for (int j = 0; j < FG_Q8_0_BLOCK; j++)
            y[b * FG_Q8_0_BLOCK + j] = d * (float)x[b].qs[j];
    }
}

/* ---- E8M0 and MXFP4 ---- */

_Static_assert(sizeof(fg_block_mxfp4) == 17, "block_mxfp4 is 17 bytes, as in a GGUF file");

float fg_e8m0_to_f32(uint8_t e)
{
    if (e == 0xff)
        return NAN;
    /* 2^(e - 127): the f32 exponent field is the same biased exponent; e = 0 is the subnormal 2^-127 */
    return e ? f32_from_bits((uint32_t)e << 23) : f32_from_bits(0x00400000u);
}

/* The E2M1 code nearest to x / s, ties toward zero (s a power of two, so the
 * division is exact). The midpoints between the magnitudes 0, 0.5, 1, 1.5, 2,
 * 3, 4, 6 decide: a magnitude is taken once t passes the midpoint below it,
 * strictly, which is ggml's first-index rule over its table (smaller
 * magnitudes first, +0 before -0). NaN passes none: +0. */
static uint8_t mxfp4_code(float x, float s)
{
    static const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    const float t = fabsf(x) / s;
    uint8_t m = 0;
    for (int i = 0; i < 7; i++)
        m += t > mid[i];
    return (uint8_t)(m && x < 0.0f ? m | 8 : m);
}

int fg_quantize_row_mxfp4(const float *x, fg_block_mxfp4 *y, int64_t n)
{
    int ret = 0;
    const int64_t nb = n / FG_MXFP4_BLOCK;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * FG_MXFP4_BLOCK;
        float amax = 0.0f;
        for (int j = 0; j < FG_MXFP4_BLOCK; j++) {
            if (!isfinite(xb[j]))
                ret = -1;
            if (fabsf(xb[j]) > amax) /* a NaN never compares greater: skipped, as in ggml */
                amax = fabsf(xb[j]);
        }
        /* ggml's expression in f32. Its log2f rounds: an amax within a few ulps
         * below a power of two gets that power's exponent, one more than its
         * own. Kept, so that our files match ggml's byte for byte. */
        const float fe = amax > 0.0f ? floorf(log2f(amax)) - 2.0f + 127.0f : 0.0f;
        const uint8_t e = fe <= 0.0f ? 0 : fe >= 254.0f ? 254 : (uint8_t)fe;
        const float s = fg_e8m0_to_f32(e);
        y[b].e = e;
        for (int j = 0; j < FG_MXFP4_BLOCK / 2; j++)
            y[b].qs[j] = (uint8_t)(mxfp4_code(xb[j], s) | mxfp4_code(xb[j + FG_MXFP4_BLOCK / 2], s) << 4);
    }
    return ret;
}

void fg_dequantize_row_mxfp4(const fg_block_mxfp4 *x, float *y, int64_t n)
{
    const int64_t nb = n / FG_MXFP4_BLOCK;
    for (int64_t b = 0; b < nb; b++) {
        const float s = fg_e8m0_to_f32(x[b].e);
        for (int j = 0; j < FG_MXFP4_BLOCK / 2; j++) {
            y[b * FG_MXFP4_BLOCK + j] = fg_e2m1_to_f32(x[b].qs[j] & 15) * s;
            y[b * FG_MXFP4_BLOCK + j + FG_MXFP4_BLOCK / 2] = fg_e2m1_to_f32(x[b].qs[j] >> 4) * s;
        }
    }
}

int fg_mxfp4_validate_rows(const void *w, int64_t n_in, int64_t n_rows, int64_t *bad_row, int64_t *bad_block)
{
    int64_t r_bad = -1, b_bad = -1;
    int ret = 0;
    if (n_in <= 0 || n_in % FG_MXFP4_BLOCK || n_rows < 0 || (!w && n_rows > 0)) {
        ret = -1;
        goto out;
    }
    const int64_t nb = n_in / FG_MXFP4_BLOCK;
    const fg_block_mxfp4 *blk = w;
    for (int64_t r = 0; r < n_rows && !ret; r++)
        for (int64_t b = 0; b < nb; b++) {
            const fg_block_mxfp4 *k = &blk[r * nb + b];
            int ok = k->e != 0xff;
            /* up to e = 252 the largest value, 6 * 2^125, is finite */
            if (ok && k->e >= 253) {
                float v[FG_MXFP4_BLOCK];
                fg_dequantize_row_mxfp4(k, v, FG_MXFP4_BLOCK);
                for (int j = 0; j < FG_MXFP4_BLOCK; j++)
                    ok &= isfinite(v[j]) != 0;
            }
            if (!ok) {
                r_bad = r;
                b_bad = b;
                ret = -1;
                break;
            }
        }
out:
    if (bad_row)
        *bad_row = r_bad;
    if (bad_block)
        *bad_block = b_bad;
    return ret;
}
