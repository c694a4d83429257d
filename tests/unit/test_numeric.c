/* test_numeric.c: the conversions of kernels/cpu/numeric.h against ground
 * truth built independently: closed-form decoders, exhaustive round trips of
 * every code, every rounding midpoint between neighbouring codes (ties to even)
 * and its two f32 neighbours, brute-force nearest-value search for the 8- and
 * 4-bit formats, the compiler's own _Float16 conversion where it has one,
 * saturation and NaN handling, and the Q8_0 block quantizer.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/numeric.h"
#include "tests/unit/fg_test.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}


/* ---- F16 ---- */

static double f16_formula(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

static void test_f16(void)
{
    int bad_decode = 0, bad_trip = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = fg_f16_to_f32((uint16_t)h);
        const int e = (h >> 10) & 31;
        if (e == 31) {
            if ((h & 1023) == 0)
                bad_decode += !(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0));
            else
                bad_decode += !isnan(f);
        } else {
            bad_decode += (double)f != f16_formula((uint16_t)h) || (signbit(f) != 0) != ((h & 0x8000) != 0);
        }
        /* every code, NaN payloads included, survives f16 -> f32 -> f16 */
        bad_trip += fg_f32_to_f16(f) != h;
    }
    CHECK_MSG(bad_decode == 0, "%d f16 codes decode wrongly", bad_decode);
    CHECK_MSG(bad_trip == 0, "%d f16 codes do not round-trip", bad_trip);

    /* every midpoint between neighbouring finite codes, both signs: ties to even,
     * and the f32 neighbours of each midpoint go to the nearer code */
    int bad_mid = 0;
    for (uint16_t h = 0; h < 0x7bff; h++) {
        const float a = fg_f16_to_f32(h), b = fg_f16_to_f32((uint16_t)(h + 1));
        const float mid = a + (b - a) / 2; /* exact: 12 significant bits */
        const uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
        for (int s = 0; s < 2; s++) {
            const float sg = s ? -1.0f : 1.0f;
            const uint16_t sb = s ? 0x8000 : 0;
            bad_mid += fg_f32_to_f16(sg * mid) != (even | sb);
            bad_mid += fg_f32_to_f16(sg * nextafterf(mid, 0.0f)) != (h | sb);
            bad_mid += fg_f32_to_f16(sg * nextafterf(mid, INFINITY)) != ((h + 1) | sb);
        }
    }
    CHECK_MSG(bad_mid == 0, "%d f16 midpoint roundings wrong", bad_mid);

    /* overflow and underflow edges */
    CHECK(fg_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(fg_f32_to_f16(nextafterf(65520.0f, 0.0f)) == 0x7bff);
    CHECK(fg_f32_to_f16(65520.0f) == 0x7c00); /* tie between 65504 and 2^16: even is inf */
    CHECK(fg_f32_to_f16(1e9f) == 0x7c00);
    CHECK(fg_f32_to_f16(-1e9f) == 0xfc00);
    CHECK(fg_f32_to_f16(INFINITY) == 0x7c00);
    CHECK(fg_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(fg_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000); /* tie between 0 and 2^-24 */
    CHECK(fg_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(fg_f32_to_f16(ldexpf(3.0f, -26)) == 0x0001);
    CHECK(fg_f32_to_f16(1e-30f) == 0x0000);
    CHECK(fg_f32_to_f16(-1e-30f) == 0x8000);
    CHECK(fg_f32_to_f16(-0.0f) == 0x8000);
    CHECK(fg_f32_to_f16(from_bits(0x00000001u)) == 0x0000); /* f32 subnormal */

    /* NaN stays NaN (quiet or not, with or without high payload bits) */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0xff800001u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        const uint16_t h = fg_f32_to_f16(from_bits(nans[i]));
        CHECK_MSG((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0, "NaN %08x -> %04x", nans[i], h);
        CHECK(((h & 0x8000) != 0) == ((nans[i] >> 31) != 0));
    }

#ifdef __FLT16_MAX__
    /* the compiler's _Float16 conversion (IEEE, round to nearest even) on
     * random f32 bit patterns near and inside the f16 range */
    int bad_rand = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = rng_u32();
        u = (u & 0x807fffffu) | ((uint32_t)(100 + (u >> 23) % 45) << 23); /* exponents 2^-27 .. 2^17 */
        const float f = from_bits(u);
        const _Float16 g = (_Float16)f;
        uint16_t gb;
        memcpy(&gb, &g, 2);
        bad_rand += fg_f32_to_f16(f) != gb;
    }
    CHECK_MSG(bad_rand == 0, "%d random f32 -> f16 differ from _Float16", bad_rand);
#endif
}

/* ---- BF16 ---- */

static void test_bf16(void)
{
    int bad_trip = 0, bad_decode = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = fg_bf16_to_f32((uint16_t)h);
        bad_decode += fg_test_bits(f) != h << 16;
        bad_trip += fg_f32_to_bf16(f) != h;
    }
    CHECK_MSG(bad_decode == 0, "%d bf16 decodes wrong", bad_decode);
    CHECK_MSG(bad_trip == 0, "%d bf16 codes do not round-trip", bad_trip);

    int bad_mid = 0;
    for (uint16_t h = 0; h < 0x7f7f; h++) {
        const float a = fg_bf16_to_f32(h), b = fg_bf16_to_f32((uint16_t)(h + 1));
        const float mid = a + (b - a) / 2; /* exact (9 significant bits), and a + b could overflow */
        const uint16_t even = (h & 1) ? (uint16_t)(h + 1) : h;
        for (int s = 0; s < 2; s++) {
            const float sg = s ? -1.0f : 1.0f;
            const uint16_t sb = s ? 0x8000 : 0;
            bad_mid += fg_f32_to_bf16(sg * mid) != (even | sb);
            bad_mid += fg_f32_to_bf16(sg * nextafterf(mid, 0.0f)) != (h | sb);
            bad_mid += fg_f32_to_bf16(sg * nextafterf(mid, INFINITY)) != ((h + 1) | sb);
        }
    }
    CHECK_MSG(bad_mid == 0, "%d bf16 midpoint roundings wrong", bad_mid);

    CHECK(fg_f32_to_bf16(3.4028235e38f) == 0x7f80);          /* FLT_MAX rounds up to inf (IEEE overflow) */
    CHECK(fg_f32_to_bf16(INFINITY) == 0x7f80);
    CHECK(fg_f32_to_bf16(-INFINITY) == 0xff80);
    CHECK(fg_f32_to_bf16(1.0f) == 0x3f80);
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        const uint16_t h = fg_f32_to_bf16(from_bits(nans[i]));
        CHECK_MSG((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0, "NaN %08x -> %04x", nans[i], h);
        CHECK(((h & 0x8000) != 0) == ((nans[i] >> 31) != 0));
    }
}

/* ---- brute-force nearest for the small formats ---- */

/* Nearest code among the non-NaN codes of a table (ties to the even code),
 * saturating to +-max beyond the largest value. */
static int nearest_code(const float *vals, int ncodes, const int *is_nan, float f)
{
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < ncodes; c++) {
        if (is_nan[c])
            continue;
        if (signbit(vals[c]) != signbit(f))
            continue; /* same sign only: zero keeps its sign */
        const double d = fabs((double)f - (double)vals[c]);
        if (d < bd || (d == bd && (c & 1) == 0 && (best & 1) == 1)) {
            bd = d;
            best = c;
        }
    }
    return best;
}

static double e4m3_formula(uint8_t v)
{
    int e = (v >> 3) & 15, m = v & 7;
    double r = e ? ldexp(8 + m, e - 10) : ldexp(m, -9);
    return (v & 0x80) ? -r : r;
}

static void test_e4m3(void)
{
    float vals[256];
    int is_nan[256];
    int bad = 0;
    for (int v = 0; v < 256; v++) {
        vals[v] = fg_e4m3_to_f32((uint8_t)v);
        is_nan[v] = (v & 0x7f) == 0x7f;
        if (is_nan[v]) {
            CHECK_MSG(isnan(vals[v]), "e4m3 %02x should be NaN", v);
            continue;
        }
        bad += (double)vals[v] != e4m3_formula((uint8_t)v) || (signbit(vals[v]) != 0) != ((v & 0x80) != 0);
        bad += fg_f32_to_e4m3(vals[v]) != v; /* round trip, -0 included */
    }
    CHECK_MSG(bad == 0, "%d e4m3 codes decode or round-trip wrongly", bad);
    CHECK(fg_e4m3_to_f32(0x7e) == 448.0f);
    CHECK(fg_e4m3_to_f32(0x01) == 1.0f / 512.0f);
    CHECK(fg_e4m3_to_f32(0x08) == 1.0f / 64.0f);

    /* midpoints and their neighbours, against the brute-force nearest */
    int bad_mid = 0;
    for (int v = 0; v < 0x7e; v++) {
        const float a = vals[v], b = vals[v + 1];
        const float mid = a + (b - a) / 2;
        const float probes[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int p = 0; p < 3; p++)
            for (int s = 0; s < 2; s++) {
                const float f = s ? -probes[p] : probes[p];
                bad_mid += fg_f32_to_e4m3(f) != nearest_code(vals, 256, is_nan, f);
            }
        bad_mid += fg_f32_to_e4m3(mid) != ((v & 1) ? v + 1 : v); /* the tie itself: even code */
    }
    CHECK_MSG(bad_mid == 0, "%d e4m3 midpoint roundings wrong", bad_mid);

    int bad_rand = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rng_u32();
        u = (u & 0x807fffffu) | ((uint32_t)(112 + (u >> 23) % 24) << 23); /* 2^-15 .. 2^8 */
        const float f = from_bits(u);
        bad_rand += fg_f32_to_e4m3(f) != nearest_code(vals, 256, is_nan, f);
    }
    CHECK_MSG(bad_rand == 0, "%d random e4m3 encodings differ from nearest", bad_rand);

    /* saturation, not infinity or NaN */
    CHECK(fg_f32_to_e4m3(448.0f) == 0x7e);
    CHECK(fg_f32_to_e4m3(464.0f) == 0x7e);
    CHECK(fg_f32_to_e4m3(480.0f) == 0x7e);
    CHECK(fg_f32_to_e4m3(1e30f) == 0x7e);
    CHECK(fg_f32_to_e4m3(INFINITY) == 0x7e);
    CHECK(fg_f32_to_e4m3(-INFINITY) == 0xfe);
    CHECK(fg_f32_to_e4m3(-1000.0f) == 0xfe);
    CHECK(fg_f32_to_e4m3(1.0f / 1024.0f) == 0x00); /* tie between 0 and 2^-9 */
    CHECK(fg_f32_to_e4m3(nextafterf(1.0f / 1024.0f, 1.0f)) == 0x01);
    CHECK(fg_f32_to_e4m3(NAN) == 0x7f);
    CHECK(isnan(fg_e4m3_to_f32(fg_f32_to_e4m3(-NAN))));
}

static void test_e2m1(void)
{
    static const float expect[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    float vals[16];
    int is_nan[16] = {0};
    for (int c = 0; c < 16; c++) {
        vals[c] = fg_e2m1_to_f32((uint8_t)c);
        CHECK_MSG(fg_test_bits(vals[c]) == fg_test_bits(expect[c]), "e2m1 %x -> %g", c, vals[c]);
        CHECK_MSG(fg_f32_to_e2m1(vals[c]) == c, "e2m1 %x does not round-trip", c);
    }
    CHECK(fg_e2m1_to_f32(0xf7) == 6.0f); /* only the low 4 bits count */

    /* ties: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4 */
    const float ties[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    const uint8_t tie_codes[7] = {0, 2, 2, 4, 4, 6, 6};
    for (int i = 0; i < 7; i++) {
        CHECK_MSG(fg_f32_to_e2m1(ties[i]) == tie_codes[i], "tie %g", ties[i]);
        CHECK_MSG(fg_f32_to_e2m1(-ties[i]) == (tie_codes[i] | 8), "tie %g", -ties[i]);
        CHECK(fg_f32_to_e2m1(nextafterf(ties[i], 0.0f)) == nearest_code(vals, 16, is_nan, nextafterf(ties[i], 0.0f)));
        CHECK(fg_f32_to_e2m1(nextafterf(ties[i], 99.0f)) == nearest_code(vals, 16, is_nan, nextafterf(ties[i], 99.0f)));
    }
    int bad_rand = 0;
    for (int i = 0; i < 100000; i++) {
        const float f = ((float)(rng_u32() % 2000001) - 1000000.0f) * 7e-6f; /* [-7, 7] */
        bad_rand += fg_f32_to_e2m1(f) != nearest_code(vals, 16, is_nan, f);
    }
    CHECK_MSG(bad_rand == 0, "%d random e2m1 encodings differ from nearest", bad_rand);
    CHECK(fg_f32_to_e2m1(6.5f) == 7);
    CHECK(fg_f32_to_e2m1(100.0f) == 7);
    CHECK(fg_f32_to_e2m1(INFINITY) == 7);
    CHECK(fg_f32_to_e2m1(-INFINITY) == 15);
    CHECK(fg_f32_to_e2m1(NAN) == 0); /* no NaN in E2M1: encodes as +0 */
    CHECK(fg_f32_to_e2m1(0.2f) == 0);
    CHECK(fg_f32_to_e2m1(-0.2f) == 8);
}

/* ---- Q8_0 ---- */

static void test_q8_0(void)
{
    CHECK(sizeof(fg_block_q8_0) == 34);

    /* amax 127 gives d = 1 exactly, so x * id is x: check the rounding of halves (away from zero) */
    float x[64];
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i - 16) + 0.5f; /* -15.5 .. 15.5 */
    x[0] = 127.0f;
    x[1] = -2.5f;
    x[2] = 2.5f;
    x[3] = 0.49999997f;
    for (int i = 32; i < 64; i++)
        x[i] = 0.0f; /* a zero block */
    fg_block_q8_0 y[2];
    fg_quantize_row_q8_0(x, y, 64);
    CHECK(y[0].d == fg_f32_to_f16(1.0f));
    CHECK(y[0].qs[0] == 127);
    CHECK(y[0].qs[1] == -3);
    CHECK(y[0].qs[2] == 3);
    CHECK(y[0].qs[3] == 0);
    for (int i = 4; i < 32; i++)
        CHECK_MSG(y[0].qs[i] == (int)roundf(x[i]), "q[%d] = %d for %g", i, y[0].qs[i], x[i]);
    CHECK(y[1].d == 0);
    for (int i = 0; i < 32; i++)
        CHECK(y[1].qs[i] == 0);

    /* ggml's arithmetic on random data: d = amax/127 stored as f16, q = roundf(x * (1/d)) */
    float r[32 * 16], back[32 * 16];
    fg_block_q8_0 yb[16];
    for (int i = 0; i < 32 * 16; i++)
        r[i] = ((float)(rng_u32() % 200001) - 100000.0f) * 1e-4f * (float)(1 + i / 32);
    fg_quantize_row_q8_0(r, yb, 32 * 16);
    fg_dequantize_row_q8_0(yb, back, 32 * 16);
    int bad = 0;
    for (int b = 0; b < 16; b++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(r[b * 32 + j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        bad += yb[b].d != fg_f32_to_f16(d);
        for (int j = 0; j < 32; j++) {
            bad += yb[b].qs[j] != (int8_t)roundf(r[b * 32 + j] * id);
            bad += back[b * 32 + j] != fg_f16_to_f32(yb[b].d) * (float)yb[b].qs[j];
            /* reconstruction within half a step plus the f16 rounding of d */
            bad += fabsf(back[b * 32 + j] - r[b * 32 + j]) > 0.5f * d + amax * 1e-3f;
        }
    }
    CHECK_MSG(bad == 0, "%d Q8_0 mismatches", bad);

    /* non-finite input is defined (no UB under the sanitizer): NaN quantizes to 0 */
    float xn[32] = {0};
    xn[5] = NAN;
    xn[6] = 3.0f;
    fg_block_q8_0 yn;
    fg_quantize_row_q8_0(xn, &yn, 32);
    CHECK(yn.qs[5] == 0);
    CHECK(yn.qs[6] == 127);
    xn[7] = INFINITY;
    fg_quantize_row_q8_0(xn, &yn, 32);
    CHECK(yn.d == 0x7c00);
    /* a block so small that 1/d overflows: values clamp instead of overflowing int8 */
    float xs[32] = {0};
    xs[0] = 1e-38f;
    xs[1] = -5e-39f;
    fg_quantize_row_q8_0(xs, &yn, 32);
    CHECK(yn.qs[0] == 127);
    CHECK(yn.qs[2] == 0);
}

int main(void)
{
    rng_seed(0x9e3779b97f4a7c15ull);
    test_f16();
    test_bf16();
    test_e4m3();
    test_e2m1();
    test_q8_0();
    return TEST_DONE("test_numeric");
}
