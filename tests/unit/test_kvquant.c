/* test_kvquant.c: the latent KV row formats of kernels/cpu/kvquant.h.
 * Sizes and names; exact byte layouts of hand-computed INT8, FP8 and FP4 rows;
 * round-trip error bounds that follow from each format on random rows with
 * outliers; zero rows and zero blocks; the FP4 scale rule (the smallest E4M3
 * value that keeps every element within +-6).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/fg_test.h"


/* u: f32 unit roundoff; the bounds below add a few u for the division by the
 * scale and the multiplication on the way back. */
#define U 0x1p-24

static void test_sizes_names(void)
{
    CHECK(fg_kv_bytes(FG_KV_F32, 512) == 2048);
    CHECK(fg_kv_bytes(FG_KV_F16, 512) == 1024);
    CHECK(fg_kv_bytes(FG_KV_INT8, 512) == 516);
    CHECK(fg_kv_bytes(FG_KV_FP8, 512) == 516);
    CHECK(fg_kv_bytes(FG_KV_FP4, 512) == 288);
    CHECK(fg_kv_bytes(FG_KV_FP4, 64) == 36);
    CHECK(fg_kv_bytes(FG_KV_FP4, 16) == 9);
    CHECK(fg_kv_bytes(FG_KV_FP4, 24) == 0);
    CHECK(fg_kv_bytes(FG_KV_INT8, 1) == 5);
    for (int f = 0; f < FG_KV__COUNT; f++) {
        CHECK(fg_kv_bytes((fg_kv_format)f, 0) == 0);
        CHECK(fg_kv_bytes((fg_kv_format)f, -16) == 0);
        const char *name = fg_kv_format_name((fg_kv_format)f);
        CHECK(name != NULL && fg_kv_format_parse(name) == f);
    }
    CHECK(fg_kv_bytes(FG_KV__COUNT, 16) == 0);
    CHECK(fg_kv_format_name(FG_KV__COUNT) == NULL);
    CHECK(fg_kv_format_name((fg_kv_format)-1) == NULL);
    CHECK(strcmp(fg_kv_format_name(FG_KV_FP4), "fp4") == 0);
    CHECK(fg_kv_format_parse("FP4") == -1);
    CHECK(fg_kv_format_parse("int4") == -1);
    CHECK(fg_kv_format_parse("") == -1);
    CHECK(fg_kv_format_parse(NULL) == -1);
}

static void test_layouts(void)
{
    /* INT8: scale 254/127 = 2; q = round(x / 2), halves away from zero */
    {
        const float x[4] = {254.0f, -127.0f, 1.0f, 3.0f};
        uint8_t b[8];
        fg_kv_quantize(FG_KV_INT8, x, 4, b);
        const uint8_t expect[8] = {0x00, 0x00, 0x00, 0x40, 0x7f, 0xc0, 0x01, 0x02};
        CHECK(memcmp(b, expect, 8) == 0);
    }
    /* FP8: scale 448/448 = 1; 448 -> 0x7e, -1 -> 0xb8, 0.5 -> 0x30, 2^-9 -> 0x01 */
    {
        const float x[4] = {448.0f, -1.0f, 0.5f, 1.0f / 512.0f};
        uint8_t b[8];
        fg_kv_quantize(FG_KV_FP8, x, 4, b);
        const uint8_t expect[8] = {0x00, 0x00, 0x80, 0x3f, 0x7e, 0xb8, 0x30, 0x01};
        CHECK(memcmp(b, expect, 8) == 0);
    }
    /* FP4, worked by hand. Block 0: amax 7, 7/6 = 1.1667 lies between the E4M3
     * values 1.125 and 1.25; rounded up: 1.25 (code 0x3a; 7/1.125 = 6.2 would
     * saturate). x/1.25 and its nearest E2M1:
     *    7    5.6  -> 6   (7)     -7   -5.6 -> -6  (f)
     *    0    0    -> 0   (0)     0.1  0.08 -> 0   (0)
     *    .625 0.5  -> .5  (1)     .75  0.6  -> .5  (1)
     *    1.3  1.04 -> 1   (2)     1.25 1    -> 1   (2)
     *    2.5  2    -> 2   (4)     -3   -2.4 -> -2  (c)
     *    3.75 3    -> 3   (5)     4.4  3.52 -> 4   (6)
     *    5    4    -> 4   (6)     -6.25 -5  -> -4  (e)  tie 4|6: even code 6
     *    6    4.8  -> 4   (6)     -0.3 -0.24 -> -0 (8)
     * Element 2j in the low nibble of byte j. Block 1 is all zero: scale 0. */
    {
        float x[32] = {7.0f, -7.0f, 0.0f,  0.1f,  0.625f, 0.75f,  1.3f,  1.25f,
                       2.5f, -3.0f, 3.75f, 4.4f,  5.0f,   -6.25f, 6.0f,  -0.3f};
        uint8_t b[18];
        memset(b, 0xaa, sizeof b);
        fg_kv_quantize(FG_KV_FP4, x, 32, b);
        const uint8_t expect[18] = {0xf7, 0x00, 0x11, 0x22, 0xc4, 0x65, 0xe6, 0x86, 0, 0, 0, 0, 0, 0, 0, 0,
                                    0x3a, 0x00};
        CHECK(memcmp(b, expect, 18) == 0);
        for (int i = 0; i < 18; i++)
            CHECK_MSG(b[i] == expect[i], "fp4 byte %d: %02x, expected %02x", i, b[i], expect[i]);
        float y[32];
        fg_kv_dequantize(FG_KV_FP4, b, 32, y);
        const float ey[16] = {7.5f, -7.5f, 0.0f, 0.0f, 0.625f, 0.625f, 1.25f, 1.25f,
                              2.5f, -2.5f, 3.75f, 5.0f, 5.0f,  -5.0f,  5.0f,  -0.0f};
        for (int i = 0; i < 16; i++)
            CHECK_MSG(y[i] == ey[i], "fp4 y[%d] = %g, expected %g", i, y[i], ey[i]);
        for (int i = 16; i < 32; i++)
            CHECK(y[i] == 0.0f);
    }
}

/* Half the gap between E2M1 neighbours around v (v in units of the scale). */
static double e2m1_half_gap(double v)
{
    v = fabs(v);
    return v <= 2.0 ? 0.25 : v <= 4.0 ? 0.5 : 1.0;
}

static void check_roundtrip(fg_kv_format f, const float *x, int n)
{
    const size_t nbytes = fg_kv_bytes(f, n);
    uint8_t *b = malloc(nbytes + 1);
    b[nbytes] = 0x5c; /* canary: nothing past fg_kv_bytes is written */
    float *y = malloc((size_t)n * sizeof *y);
    fg_kv_quantize(f, x, n, b);
    fg_kv_dequantize(f, b, n, y);
    CHECK(b[nbytes] == 0x5c);
    float amax = 0.0f;
    for (int i = 0; i < n; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    int bad = 0;
    switch (f) {
    case FG_KV_F32:
        bad += memcmp(x, y, (size_t)n * 4) != 0;
        break;
    case FG_KV_F16:
        for (int i = 0; i < n; i++) {
            bad += y[i] != fg_f16_to_f32(fg_f32_to_f16(x[i]));
            /* half an f16 ulp: 2^-11 relative in the normal range, 2^-25 absolute below */
            bad += fabs((double)y[i] - x[i]) > fmax(fabs(x[i]) * 0x1p-11, 0x1p-25);
        }
        break;
    case FG_KV_INT8: {
        float s;
        memcpy(&s, b, 4);
        bad += s != amax / 127.0f;
        /* q = round(x / s): at most half a step, plus the roundings of x / s and s * q */
        for (int i = 0; i < n; i++)
            bad += fabs((double)y[i] - x[i]) > 0.5 * s + 4 * U * (fabs(x[i]) + s);
        break;
    }
    case FG_KV_FP8: {
        float s;
        memcpy(&s, b, 4);
        bad += s != amax / 448.0f;
        /* E4M3, 3 mantissa bits: half an ulp is <= 2^-4 relative for |x/s| >= 2^-6
         * (normal), and 2^-10 absolute (half of 2^-9) below */
        for (int i = 0; i < n; i++) {
            const double bound = fmax(fabs(x[i]) * 0x1p-4, 0x1p-10 * s) + 4 * U * (fabs(x[i]) + s);
            if (fabs((double)y[i] - x[i]) > bound && bad++ < 3)
                fprintf(stderr, "fp8 x %g y %g s %g\n", x[i], y[i], s);
        }
        break;
    }
    case FG_KV_FP4: {
        const uint8_t *scales = b + n / 2;
        for (int k = 0; k < n / 16; k++) {
            float bmax = 0.0f;
            for (int j = 0; j < 16; j++)
                bmax = fmaxf(bmax, fabsf(x[16 * k + j]));
            const uint8_t sc = scales[k];
            const float s = fg_e4m3_to_f32(sc);
            if (bmax == 0.0f) {
                bad += sc != 0;
                for (int j = 0; j < 16; j++)
                    bad += y[16 * k + j] != 0.0f;
                continue;
            }
            bad += !(sc >= 1 && sc <= 0x7e);
            if (bmax > 6.0f * 448.0f) {
                /* beyond the format (6 x the largest E4M3): scale 448, saturation at +-2688 */
                bad += sc != 0x7e;
            } else {
                /* the scale: at least amax/6 (nothing saturates), and the smallest such E4M3 value */
                bad += bmax / s > 6.0f;
                bad += sc > 1 && bmax / fg_e4m3_to_f32((uint8_t)(sc - 1)) <= 6.0f;
                /* and so it is amax/6 rounded to E4M3, or the next value up */
                const uint8_t rne = fg_f32_to_e4m3(bmax / 6.0f);
                bad += sc != rne && sc != rne + 1;
            }
            /* each element within half a gap of the E2M1 grid, in units of s */
            for (int j = 0; j < 16; j++) {
                if (fabsf(x[16 * k + j]) > 6.0f * 448.0f) {
                    bad += y[16 * k + j] != copysignf(6.0f * 448.0f, x[16 * k + j]);
                    continue;
                }
                const double v = x[16 * k + j] / (double)s;
                const double bound = e2m1_half_gap(v) * s * (1 + 8 * U);
                if (fabs((double)y[16 * k + j] - x[16 * k + j]) > bound && bad++ < 3)
                    fprintf(stderr, "fp4 x %g y %g s %g\n", x[16 * k + j], y[16 * k + j], s);
            }
        }
        break;
    }
    default:
        break;
    }
    CHECK_MSG(bad == 0, "%s n=%d: %d round-trip violations", fg_kv_format_name(f), n, bad);
    free(b);
    free(y);
}

static void test_roundtrip(void)
{
    const int ns[] = {16, 64, 512, 576};
    for (int f = 0; f < FG_KV__COUNT; f++)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (int rep = 0; rep < 20; rep++) {
                const int n = ns[a];
                float *x = malloc((size_t)n * sizeof *x);
                /* magnitudes from 1e-4 to 1e2, some blocks tiny, an outlier now and then */
                const float mag = powf(10.0f, (float)(rep % 7) - 4.0f);
                for (int i = 0; i < n; i++) {
                    x[i] = rng_f() * mag * (1.0f + (float)((i / 16) % 4));
                    if (rng_u32() % 97 == 0)
                        x[i] *= 50.0f;
                    if ((i / 16) % 9 == 8)
                        x[i] *= 1e-3f;
                }
                check_roundtrip((fg_kv_format)f, x, n);
                free(x);
            }
}

static void test_zeros_and_extremes(void)
{
    float z[64] = {0}, y[64];
    uint8_t b[600];
    for (int f = 0; f < FG_KV__COUNT; f++) {
        memset(b, 0xff, sizeof b);
        fg_kv_quantize((fg_kv_format)f, z, 64, b);
        for (int i = 0; i < 64; i++)
            y[i] = 1.0f;
        fg_kv_dequantize((fg_kv_format)f, b, 64, y);
        int nz = 0;
        for (int i = 0; i < 64; i++)
            nz += y[i] != 0.0f;
        CHECK_MSG(nz == 0, "%s: zero row does not come back as zeros", fg_kv_format_name((fg_kv_format)f));
        if (f == FG_KV_INT8 || f == FG_KV_FP8) {
            float s;
            memcpy(&s, b, 4);
            CHECK(s == 0.0f);
        }
        if (f == FG_KV_FP4)
            for (int k = 0; k < 4; k++)
                CHECK(b[32 + k] == 0);
    }
    /* FP4 blocks beyond E4M3's range (amax > 6 * 448) take scale 448 and saturate at 6 * 448;
     * blocks below the smallest subnormal take 2^-9 */
    float x[32];
    for (int i = 0; i < 16; i++)
        x[i] = (i & 1 ? -1.0f : 1.0f) * 1e4f * (float)(i + 1);
    for (int i = 16; i < 32; i++)
        x[i] = 1e-6f * (float)(i - 15);
    fg_kv_quantize(FG_KV_FP4, x, 32, b);
    CHECK(b[16] == 0x7e && b[17] == 0x01);
    fg_kv_dequantize(FG_KV_FP4, b, 32, y);
    CHECK(y[15] == -2688.0f && y[14] == 2688.0f);
    for (int i = 16; i < 32; i++)
        CHECK(y[i] == 0.0f); /* 1.6e-5 / 2^-9 < 0.25: rounds to 0 */
    /* NaN and inf never make the conversions undefined; finite neighbours survive */
    float w[16];
    for (int i = 0; i < 16; i++)
        w[i] = (float)i;
    w[3] = NAN;
    for (int f = FG_KV_INT8; f < FG_KV__COUNT; f++) {
        fg_kv_quantize((fg_kv_format)f, w, 16, b);
        fg_kv_dequantize((fg_kv_format)f, b, 16, y);
        CHECK(fabsf(y[15] - 15.0f) <= 1.0f);
    }
}

/* Every format's bytes are the same on every ISA (the AVX-512 FP4 encoder
 * against the reference): rows whose values sit on and around every E2M1
 * rounding midpoint of their block's scale, random rows of many magnitudes,
 * and NaN, infinities, -0, f32 subnormals, values past the largest scale, an
 * all-zero and an all-NaN block. */
static void test_isa_bytes(void)
{
    if (!fg_isa_supported(FG_ISA_AVX512)) {
        fprintf(stderr, "test_kvquant: avx512 not supported here, skipped\n");
        return;
    }
    enum { N = 256, ROWS = 400 };
    static const float mids[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    float x[N];
    uint8_t ref[N * 4 + 64], vec[N * 4 + 64];
    int bad = 0;
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < N; i++) {
            if (r < 100) { /* block max 6: scale 1 exactly; the rest on or next to a midpoint */
                const float m = mids[(i + r) % 7];
                const int step = (i / 7 + r) % 3 - 1; /* just below, on, just above the midpoint */
                x[i] = step == 0 ? m : nextafterf(m, step < 0 ? 0.0f : 10.0f);
                if (i % 16 == 0)
                    x[i] = 6.0f;
                if ((i + r) % 5 == 0)
                    x[i] = -x[i];
            } else {
                x[i] = rng_f() * powf(10.0f, (float)((r + i / 16) % 12) - 6.0f);
            }
        }
        if (r % 10 == 3) {
            x[1] = NAN;
            x[4] = -NAN; /* E2M1 has no NaN: +0, whatever its sign */
            x[2] = INFINITY;
            x[19] = -INFINITY;
            x[3] = -0.0f;
            x[40] = 1e-40f;
            x[41] = -1e-40f;
            x[70] = 5000.0f;
            for (int i = 96; i < 112; i++)
                x[i] = 0.0f;
            for (int i = 112; i < 128; i++)
                x[i] = NAN;
        }
        for (int f = 0; f < FG_KV__COUNT; f++) {
            const size_t nb = fg_kv_bytes((fg_kv_format)f, N);
            memset(ref, 0xa5, sizeof ref);
            memset(vec, 0x5a, sizeof vec);
            fg_kv_quantize_isa(FG_ISA_SCALAR, (fg_kv_format)f, x, N, ref);
            fg_kv_quantize_isa(FG_ISA_AVX512, (fg_kv_format)f, x, N, vec);
            bad += memcmp(ref, vec, nb) != 0;
        }
    }
    CHECK_MSG(bad == 0, "kv quantization: %d rows differ between the reference and avx512", bad);
}

/* FP8 rows decode to scale * fg_e4m3_to_f32(code) bit for bit (the AVX-512
 * decoder where the CPU has it): every code, NaN and subnormal codes among
 * them, at scales that keep, underflow and overflow the products, for every
 * row length around the vector width (tails). */
static void test_fp8_decode_bits(void)
{
    const float scales[] = {1.0f, 0.37f, 1e-40f, 3e38f, -2.5f};
    uint8_t row[4 + 256];
    float y[256];
    int bad = 0;
    for (size_t si = 0; si < sizeof scales / sizeof *scales; si++)
        for (int n = 1; n <= 256; n += n < 40 ? 1 : 27) {
            memcpy(row, &scales[si], 4);
            for (int i = 0; i < n; i++)
                row[4 + i] = (uint8_t)((i * 37 + n) & 255);
            fg_kv_dequantize(FG_KV_FP8, row, n, y);
            for (int i = 0; i < n; i++)
                bad += fg_test_bits(y[i]) != fg_test_bits(scales[si] * fg_e4m3_to_f32(row[4 + i]));
        }
    for (int c = 0; c < 256; c++) { /* every code at every lane position */
        const float one = 1.0f;
        memcpy(row, &one, 4);
        for (int i = 0; i < 16; i++)
            row[4 + i] = (uint8_t)(c + i);
        fg_kv_dequantize(FG_KV_FP8, row, 16, y);
        for (int i = 0; i < 16; i++)
            bad += fg_test_bits(y[i]) != fg_test_bits(fg_e4m3_to_f32((uint8_t)(c + i)));
    }
    CHECK_MSG(bad == 0, "fp8 decode: %d values differ from scale * fg_e4m3_to_f32", bad);
}

/* FP4 rows decode to scale_k * fg_e2m1_to_f32(code) bit for bit (the
 * AVX-512 decoder where the CPU has it): every code at every nibble of every
 * block, every scale byte (NaN and subnormal scales among them), rows of 1
 * to 20 blocks (more than one vector of scales). */
static void test_fp4_decode_bits(void)
{
    uint8_t row[320 / 2 + 320 / 16];
    float y[320];
    int bad = 0;
    for (int n = 16; n <= 320; n += 16)
        for (int r = 0; r < 32; r++) {
            const uint8_t *codes = row, *scales = row + n / 2;
            for (int i = 0; i < n / 2; i++)
                row[i] = (uint8_t)(i * 29 + r * 7 + n);
            for (int k = 0; k < n / 16; k++)
                row[n / 2 + k] = (uint8_t)(k * 61 + r * 8 + n);
            fg_kv_dequantize(FG_KV_FP4, row, n, y);
            for (int i = 0; i < n; i++) {
                const uint8_t c = (uint8_t)(i & 1 ? codes[i / 2] >> 4 : codes[i / 2] & 15);
                bad += fg_test_bits(y[i]) != fg_test_bits(fg_e4m3_to_f32(scales[i / 16]) * fg_e2m1_to_f32(c));
            }
        }
    CHECK_MSG(bad == 0, "fp4 decode: %d values differ from scale * fg_e2m1_to_f32", bad);
}

int main(void)
{
    rng_seed(0xd1b54a32d192ed03ull);
    test_sizes_names();
    test_layouts();
    test_roundtrip();
    test_zeros_and_extremes();
    test_isa_bytes();
    test_fp8_decode_bits();
    test_fp4_decode_bits();
    return TEST_DONE("test_kvquant");
}
