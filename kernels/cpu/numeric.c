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
