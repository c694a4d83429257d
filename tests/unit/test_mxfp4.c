/* test_mxfp4.c: the MXFP4 weight type (ggml type 39) of kernels/cpu.
 *
 * Format (numeric.h), against values written out here from the definition:
 * E8M0 for every byte, a hand-built block's 32 values, the reference
 * quantizer's bytes for two blocks ggml itself quantized and for worked examples (ties, saturation, the exponent ggml's
 * log2f gives just below a power of two, the smallest scales) and, on many
 * random and adversarial blocks, against ggml's rule computed here
 * independently (exhaustive nearest-value search over the 16 codes, first
 * index on ties); round-trip error bounds; the validation a loader calls.
 *
 * Products (matmul.h): every fast ISA this CPU has, on every pool, against the
 * scalar reference, under a bound derived from the arithmetic and a normalised
 * tolerance; bit-exact products where only one term is non-zero (the scale of
 * every E8M0 byte, every code in every position); a token's outputs the same
 * bits alone and in any batch; fg_matmul_many and fg_matmul_q8_rows with MXFP4
 * ops; error returns.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_matmul.h"

#define GUARD FG_TEST_GUARD
#define F32_UNIT 0x1p-24

/* Normalised tolerance, max|y_fast - y_ref| / max|y_ref|: as TOL_Q8_0 in
 * test_matmul.c, for the same reason. Both sides compute the same exact
 * integer block dots and the same f32 block scales; only the f32 summation
 * differs (order, fused multiply-adds, the fast kernels' split of a block into
 * lanes), a few ulps of |y|. A wrong code moves y by at least one unit of one
 * block, ~1/(12 * 127 * sqrt(n)) of |y| (> 1e-5 up to n = 4096 and far above
 * the summation noise beyond). */
#define TOL_MXFP4 1e-5

static double worst_norm[2], worst_bound[2];

/* ---- the format ---- */

static void test_e8m0(void)
{
    int bad = 0;
    for (int e = 0; e < 255; e++)
        bad += fg_e8m0_to_f32((uint8_t)e) != ldexpf(1.0f, e - 127);
    CHECK_MSG(bad == 0, "%d E8M0 bytes are not 2^(e - 127)", bad);
    CHECK(isnan(fg_e8m0_to_f32(0xff)));
    CHECK(fg_e8m0_to_f32(0) == 0x1p-127f && fg_e8m0_to_f32(127) == 1.0f && fg_e8m0_to_f32(254) == 0x1p127f);
}

/* A hand-built block, its values written out from the definition:
 * value i = e2m1(code i) * 2^(e - 127), code i the low nibble of qs[i] for
 * i < 16, the high nibble of qs[i - 16] above. */
static void test_dequant_vector(void)
{
    fg_block_mxfp4 blk[2];
    /* block 0: e = 126 (scale 1/2); qs[j] = j | (15 - j) << 4, so the first
     * 16 values are codes 0..15 and the last 16 codes 15..0 */
    blk[0].e = 126;
    const uint8_t qs0[16] = {0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87,
                             0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f};
    memcpy(blk[0].qs, qs0, 16);
    /* block 1: e = 0 (scale 2^-127, subnormal values): code 1 first, code 7
     * last, code 13 (-3) at 5 */
    memset(&blk[1], 0, sizeof blk[1]);
    blk[1].qs[0] = 0x01;
    blk[1].qs[15] = 0x70;
    blk[1].qs[5] = 0x0d;
    const float want[64] = {
        0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.5f, 2.0f, 3.0f, -0.0f, -0.25f, -0.5f, -0.75f, -1.0f, -1.5f, -2.0f, -3.0f,
        -3.0f, -2.0f, -1.5f, -1.0f, -0.75f, -0.5f, -0.25f, -0.0f, 3.0f, 2.0f, 1.5f, 1.0f, 0.75f, 0.5f, 0.25f, 0.0f,
        0x1p-128f, 0, 0, 0, 0, -0x1.8p-126f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x1.8p-125f};
    float got[64];
    fg_dequantize_row_mxfp4(blk, got, 64);
    int bad = 0;
    for (int i = 0; i < 64; i++)
        if (fg_test_bits(got[i]) != fg_test_bits(want[i]) && bad++ < 5) /* bits: -0.0 for code 8 and 15 - 7 */
            fprintf(stderr, "  value %d: %a, want %a\n", i, got[i], want[i]);
    CHECK_MSG(bad == 0, "%d dequantized values differ from the definition", bad);
    blk[0].e = 0xff;
    fg_dequantize_row_mxfp4(blk, got, 32);
    CHECK(isnan(got[0]) && isnan(got[31])); /* E8M0 NaN */
}

/* The reference quantizer on worked examples, bytes written out by hand. */
typedef struct worked {
    const char *what;
    float x[32];
    int ret;
    uint8_t e;
    uint8_t qs[16];
} worked;

static void test_quant_worked(void)
{
    static const worked cases[] = {
        /* amax 1: e = floor(log2 1) - 2 + 127 = 125, scale 1/4, so t = 4x; the
         * midpoints between E2M1 magnitudes are exact ties, all toward zero */
        {"ties",
         {1.0f, 0.875f /* t 3.5: 3 */, 0x1.c00002p-1f /* just above: 4 */, 0.0625f /* t 0.25: 0 */,
          0x1.000002p-4f /* just above: 0.5 */, -0.0625f /* a tie at zero: +0 */, -0.0703125f /* -0.5 */,
          0.3125f /* t 1.25: 1 */, -1.0f, 0.625f /* t 2.5: 2 */, 0.75f, -0.4375f /* t -1.75: -1.5 */,
          0.1875f /* t 0.75: 0.5 */, -0.0f, 0.5f, 0.0f,
          0.125f, -0.125f, 0.25f, -0.9f /* t -3.6: -4 */, 0.45f /* t 1.8: 2 */},
         0, 125, {0x16, 0x95, 0x26, 0xe0, 0x41, 0x00, 0x09, 0x02, 0x0e, 0x04, 0x05, 0x0b, 0x01, 0x00, 0x04, 0x00}},
        /* amax one ulp below 2^21: log2 is 21 - 8.6e-8 and f32 holds nothing
         * between 21 - 1.9e-6 and 21, so ggml's log2f gives 21.0 and e = 146,
         * not the 145 of the true floor (which would saturate this value to 6) */
        {"log2f rounds up",
         {0x1.fffffep+20f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -0x1p+18f},
         0, 146, {0x06, 0x90}},
        /* amax 2^-125, the smallest for which ggml's e is defined: e = 0, scale 2^-127 */
        {"smallest scale",
         {0x1p-126f, 0x1p-125f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -0x1p-127f},
         0, 0, {0xa4, 0x06}},
        /* amax below 2^-125 (ggml converts a negative number to uint8_t there,
         * undefined): clamped to e = 0; t = 0.75 is a tie, to 0.5 */
        {"below the smallest scale", {0x1.8p-128f}, 0, 0, {0x01}},
        {"zeros", {0}, 0, 0, {0}},
        /* amax 1.9: e = 125 again, and above 6 * 1/4 every value saturates */
        {"saturation",
         {1.9f /* t 7.6: 6 */, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1.25f /* t 5: a tie, 4 */,
          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1.3f /* t -5.2: -6 */},
         0, 125, {0x07, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf6}},
        /* near the top of f32: floor(log2 3e38) = 127, e = 252 */
        {"largest", {3e38f}, 0, 252, {0x07}},
        /* NaN: skipped for amax (0.5: e = 124) and encoded as +0, as ggml; but reported */
        {"NaN", {0.5f, 0, 0, NAN}, -1, 124, {0x06}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        fg_block_mxfp4 b;
        memset(&b, 0x5a, sizeof b);
        const int ret = fg_quantize_row_mxfp4(cases[c].x, &b, 32);
        CHECK_MSG(ret == cases[c].ret, "%s: returned %d", cases[c].what, ret);
        CHECK_MSG(b.e == cases[c].e, "%s: e = %u, want %u", cases[c].what, b.e, cases[c].e);
        for (int j = 0; j < 16; j++)
            CHECK_MSG(b.qs[j] == cases[c].qs[j], "%s: qs[%d] = 0x%02x, want 0x%02x", cases[c].what, j, b.qs[j],
                      cases[c].qs[j]);
    }
    /* the log2f premise of the second case on this libm */
    CHECK_MSG(log2f(0x1.fffffep+20f) == 21.0f, "log2f(0x1.fffffep+20) = %a", log2f(0x1.fffffep+20f));
    float inf_block[32] = {1.0f, INFINITY};
    fg_block_mxfp4 b;
    CHECK(fg_quantize_row_mxfp4(inf_block, &b, 32) == -1);
}

/* Two blocks quantized by ggml's own quantize_row_mxfp4_ref, inputs and bytes
 * as published in huggingface/candle, candle-core/tests/mxfp4_tests.rs (the
 * inputs are printed with 9 digits: exact f32). */
static void test_quant_ggml_golden(void)
{
    static const float in[2][32] = {
        {-0.835388184f, -0.960388184f, -1.0680542f, -0.445983887f, -1.15429688f, -1.93328857f, -1.16522217f,
         -0.382568359f, -0.77532959f, -0.570251465f, -1.63549805f, -0.967651367f, -0.876098633f, -1.50268555f,
         -0.160827637f, -1.77832031f, -0.683288574f, -1.34307861f, -1.62945557f, -0.65802002f, -0.162536621f,
         -1.73706055f, -1.17883301f, -0.301757812f, -1.18078613f, -1.93463135f, -0.867736816f, -0.392028809f,
         -1.70367432f, -0.194030762f, -1.03997803f, -1.09802246f},
        {0.194091797f, -0.401489258f, -0.336669922f, 0.383911133f, 0.985534668f, -0.794616699f, 0.955200195f,
         0.940307617f, -0.512634277f, -0.33392334f, -0.315612793f, 0.548034668f, 0.80847168f, 0.579223633f,
         -0.954284668f, -0.98034668f, -0.134216309f, 0.443725586f, 0.168823242f, -0.544677734f, -0.984619141f,
         0.12713623f, -0.690002441f, 0.810180664f, 0.102355957f, -0.107421875f, 0.931091309f, 0.11529541f,
         0.615844727f, -0.0777587891f, -0.147155762f, -0.212036133f}};
    static const uint8_t out[2][17] = {
        {0x7d, 0xdd, 0xfe, 0xfe, 0xdc, 0x9e, 0xff, 0xee, 0xab, 0xed, 0xfc, 0xdf, 0xbe, 0xfe, 0xaf, 0xe9, 0xef},
        {0x7c, 0xa3, 0x6d, 0x3d, 0xe5, 0xf7, 0x2f, 0xf7, 0x77, 0x2e, 0xad, 0x7d, 0x26, 0x67, 0x96, 0xaf, 0xbf}};
    for (int i = 0; i < 2; i++) {
        fg_block_mxfp4 b;
        CHECK(fg_quantize_row_mxfp4(in[i], &b, 32) == 0);
        CHECK_MSG(memcmp(&b, out[i], 17) == 0, "golden block %d differs from ggml's bytes", i);
    }
}

/* ggml's rule, computed here from its definition: e from amax as in
 * quantize_row_mxfp4_ref, then for each value the code whose doubled E2M1
 * value times 2^(e - 128) is nearest in f32 arithmetic, the first code on
 * ties, searched over all 16 codes. Defined for amax >= 2^-125 and finite x. */
static void ggml_rule(const float *x, uint8_t *e_out, uint8_t qs[16])
{
    static const int8_t doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j]))
            amax = fabsf(x[j]);
    const uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
    const float d = ldexpf(1.0f, e - 128);
    uint8_t code[32];
    for (int j = 0; j < 32; j++) {
        int best = 0;
        for (int i = 1; i < 16; i++)
            if (fabsf(doubled[i] * d - x[j]) < fabsf(doubled[best] * d - x[j]))
                best = i;
        code[j] = (uint8_t)best;
    }
    *e_out = e;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(code[j] | code[j + 16] << 4);
}

static void test_quant_vs_rule(void)
{
    static const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 6.0f, 7.0f};
    int bad = 0, n = 0;
    float x[32];
    for (int it = 0; it < 60000; it++) {
        const int k = (int)(rng_u32() % 200) - 100; /* block magnitude 2^k */
        const int kind = it % 4;
        for (int j = 0; j < 32; j++) {
            float v = ldexpf(rng_f(), k);
            if (kind == 1 || kind == 2) {
                /* exact midpoints of the grid of the block's scale and their f32 neighbours */
                const float m = mids[rng_u32() % (sizeof mids / sizeof *mids)] * ldexpf(1.0f, k - 3);
                const uint32_t r = rng_u32() % 3;
                v = r == 0 ? m : r == 1 ? nextafterf(m, 0.0f) : nextafterf(m, INFINITY);
                if (rng_u32() & 1)
                    v = -v;
            }
            x[j] = v;
        }
        if (kind == 2)
            x[rng_u32() % 32] = ldexpf(1.0f, k); /* amax exactly 2^k: the grid's own scale */
        if (kind == 3) {
            /* amax a few ulps below a power of two, where log2f may round up */
            const uint32_t u = fg_test_bits(ldexpf(1.0f, k)) - 1 - rng_u32() % 16;
            memcpy(&x[rng_u32() % 32], &u, 4);
            x[0] = -fabsf(x[0]);
        }
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        if (amax < 0x1p-125f)
            continue; /* ggml's rule is undefined there (worked examples above) */
        fg_block_mxfp4 b;
        uint8_t e, qs[16];
        CHECK(fg_quantize_row_mxfp4(x, &b, 32) == 0);
        ggml_rule(x, &e, qs);
        n++;
        if ((b.e != e || memcmp(b.qs, qs, 16) != 0) && bad++ < 5)
            fprintf(stderr, "  block %d (2^%d, kind %d): e %u vs %u\n", it, k, kind, b.e, e);
    }
    CHECK_MSG(bad == 0, "%d of %d blocks differ from ggml's rule", bad, n);
}

/* Round trip: with s = 2^(e - 127) the block's scale, a value in [s, 6s] comes
 * back within a quarter of itself (E2M1 keeps one mantissa bit: half a gap
 * is a quarter of the binade's bottom), one below s within s/4 (the gap there
 * is s/2), one above 6s (amax < 8s) as +-6s exactly. Also reports the
 * measured errors (docs/engine.md). */
static void test_round_trip(void)
{
    enum { N = 32 * 4096 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    fg_block_mxfp4 *b = malloc((N / 32) * sizeof *b);
    for (int dist = 0; dist < 2; dist++) {
        for (int i = 0; i < N; i++) {
            if (dist == 0)
                x[i] = rng_f() * 0.05f;
            else { /* normal, Box-Muller */
                const double u1 = (rng_u32() + 1.0) / 4294967297.0, u2 = rng_u32() / 4294967296.0;
                x[i] = (float)(0.02 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
            }
        }
        CHECK(fg_quantize_row_mxfp4(x, b, N) == 0);
        fg_dequantize_row_mxfp4(b, y, N);
        int bad = 0;
        double se = 0, sx = 0, worst_rel = 0, worst_amax = 0;
        for (int i = 0; i < N; i++) {
            const double s = fg_e8m0_to_f32(b[i / 32].e), ax = fabs(x[i]), err = fabs((double)y[i] - x[i]);
            double amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmax(amax, fabs(x[i / 32 * 32 + j]));
            int ok;
            if (ax > 6 * s)
                ok = fabs(y[i]) == 6 * s && (y[i] < 0) == (x[i] < 0) && ax < 8 * s;
            else if (ax >= s)
                ok = err <= ax / 4;
            else
                ok = err <= s / 4;
            if (!ok && bad++ < 5)
                fprintf(stderr, "  %a -> %a (scale %a)\n", x[i], y[i], s);
            se += err * err;
            sx += (double)x[i] * x[i];
            if (ax >= s && ax <= 6 * s)
                worst_rel = fmax(worst_rel, err / ax);
            worst_amax = fmax(worst_amax, err / amax);
        }
        CHECK_MSG(bad == 0, "%d values outside the round-trip bound", bad);
        printf("test_mxfp4: round trip (%s): rms error %.3f of rms(x); worst %.3f of |x| in [s, 6s], %.3f of the "
               "block's amax\n",
               dist ? "normal" : "uniform", sqrt(se / sx), worst_rel, worst_amax);
    }
    free(x);
    free(y);
    free(b);
}

static void test_validate(void)
{
    enum { N_IN = 96, ROWS = 4, NB = N_IN / 32 };
    fg_block_mxfp4 w[ROWS * NB];
    memset(w, 0x77, sizeof w); /* codes 7 (6) everywhere */
    for (int i = 0; i < ROWS * NB; i++)
        w[i].e = 252; /* 6 * 2^125: finite */
    int64_t r = 7, k = 7;
    CHECK(fg_mxfp4_validate_rows(w, N_IN, ROWS, &r, &k) == 0 && r == -1 && k == -1);
    w[2 * NB + 1].e = 0xff; /* E8M0 NaN */
    CHECK(fg_mxfp4_validate_rows(w, N_IN, ROWS, &r, &k) == -1 && r == 2 && k == 1);
    CHECK(fg_mxfp4_validate_rows(w, N_IN, 2, &r, &k) == 0); /* rows 0 and 1 only */
    w[2 * NB + 1].e = 252;
    /* e = 254: 1.5 * 2^127 is finite, 2 * 2^127 is not */
    w[NB + 2].e = 254;
    memset(w[NB + 2].qs, 0x33, 16);
    CHECK(fg_mxfp4_validate_rows(w, N_IN, ROWS, &r, &k) == 0);
    w[NB + 2].qs[9] = 0xc3; /* code 12: -2 */
    CHECK(fg_mxfp4_validate_rows(w, N_IN, ROWS, &r, &k) == -1 && r == 1 && k == 2);
    /* e = 253: 3 * 2^126 is finite, 4 * 2^126 is not */
    w[NB + 2].e = 253;
    memset(w[NB + 2].qs, 0xd5, 16);
    CHECK(fg_mxfp4_validate_rows(w, N_IN, ROWS, &r, &k) == 0);
    w[NB + 2].qs[0] = 0x06;
    CHECK(fg_mxfp4_validate_rows(w, N_IN, ROWS, NULL, &k) == -1 && k == 2);
    /* shapes */
    CHECK(fg_mxfp4_validate_rows(w, 48, ROWS, &r, &k) == -1 && r == -1 && k == -1);
    CHECK(fg_mxfp4_validate_rows(w, 0, ROWS, &r, &k) == -1);
    CHECK(fg_mxfp4_validate_rows(w, N_IN, -1, &r, &k) == -1);
    CHECK(fg_mxfp4_validate_rows(NULL, N_IN, 1, &r, &k) == -1);
    CHECK(fg_mxfp4_validate_rows(NULL, N_IN, 0, &r, &k) == 0);
}

/* ---- products ---- */

/* Random MXFP4 weights: every code byte possible (-0 included), scales around 1. */
static fg_block_mxfp4 *make_weights(int64_t n_in, int64_t n_out)
{
    const int64_t nb = n_in / 32;
    fg_block_mxfp4 *w = malloc((size_t)(nb * n_out) * sizeof *w + 1);
    for (int64_t i = 0; i < nb * n_out; i++) {
        w[i].e = (uint8_t)(118 + rng_u32() % 12);
        for (int j = 0; j < 16; j++)
            w[i].qs[j] = (uint8_t)rng_u32();
    }
    return w;
}

/* The derived bound, per output. With c_b = 2^(e_b - 128) * d_x(b) (the same
 * f32 on every path) and the exact integer lanes of each block, both sides
 * sum the terms (lane or block integer) * c_b in f32: a sum whose every term
 * passes through at most h roundings is within gamma(h) = h u / (1 - h u)
 * (u = 2^-24) of the exact sum, times the sum of the terms' magnitudes, which
 * is at most S = sum_b c_b sum_j |2 e2m1_j| |q_j|. The reference's terms pass
 * through a product and nb - 1 additions; the fast kernels' through at most
 * nb multiply-adds in one accumulator, the combining of 4 accumulators and a
 * 16-lane reduction (6), and one addition per chunk of 128 blocks. So
 *   |y_fast - y_ref| <= (gamma(nb + 1) + gamma(nb + 8 + nb / 128)) * S,
 * checked with a factor 1.01. It cannot fail for a correct kernel; for rows
 * of a few blocks it also catches a single wrong code. */
static double gamma_n(double h)
{
    return h * F32_UNIT / (1.0 - h * F32_UNIT);
}

static void bounds(const fg_block_mxfp4 *w, int64_t n_in, int64_t n_out, const float *x, int64_t n_tok, double *bound)
{
    const int64_t nb = n_in / 32;
    fg_block_q8_0 *xq = malloc((size_t)nb * sizeof *xq);
    const double g = gamma_n((double)nb + 1) + gamma_n((double)nb + 8 + (double)(nb / 128));
    for (int64_t t = 0; t < n_tok; t++) {
        fg_quantize_row_q8_0(x + t * n_in, xq, n_in);
        for (int64_t o = 0; o < n_out; o++) {
            double s = 0;
            for (int64_t b = 0; b < nb; b++) {
                const fg_block_mxfp4 *k = &w[o * nb + b];
                const float c = ldexpf(1.0f, k->e - 128) * fg_f16_to_f32(xq[b].d);
                double m = 0;
                for (int j = 0; j < 32; j++) {
                    const int code = j < 16 ? k->qs[j] & 15 : k->qs[j - 16] >> 4;
                    m += fabs(2.0 * fg_e2m1_to_f32((uint8_t)code)) * abs(xq[b].qs[j]);
                }
                s += (double)c * m;
            }
            bound[t * n_out + o] = 1.01 * g * s;
        }
    }
    free(xq);
}

static void check_case(int64_t n_in, int64_t n_out, int64_t n_tok, int misalign)
{
    fg_block_mxfp4 *wbuf = make_weights(n_in, n_out);
    const size_t wbytes = fg_wtype_row_bytes(FG_WTYPE_MXFP4, n_in) * (size_t)n_out;
    CHECK(wbytes == (size_t)(n_in / 32 * n_out) * 17);
    uint8_t *wmem = malloc(wbytes + 1);
    const void *w = wmem + (misalign ? 1 : 0); /* blocks are 17 bytes: no alignment to rely on anyway */
    memcpy(wmem + (misalign ? 1 : 0), wbuf, wbytes);
    float *xmem = malloc((size_t)(n_in * n_tok + 1) * sizeof(float));
    float *x = xmem + (misalign ? 1 : 0);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = rng_f() * (1.0f + (float)((i / 32) % 5));
    void *scratch = fg_test_alloc_scratch(FG_WTYPE_MXFP4, n_in, n_tok);
    const int64_t ny = n_out * n_tok;
    float *yref = fg_test_alloc_guarded(ny), *y = fg_test_alloc_guarded(ny);
    double *bound = malloc((size_t)ny * sizeof *bound);
    bounds(wbuf, n_in, n_out, x, n_tok, bound);

    CHECK(fg_matmul(NULL, FG_ISA_SCALAR, FG_WTYPE_MXFP4, w, n_in, n_out, x, n_tok, yref + GUARD, scratch) == 0);
    double ymax = 0;
    int bad_ref = 0;
    for (int64_t i = 0; i < ny; i++) {
        bad_ref += !isfinite(yref[GUARD + i]);
        ymax = fmax(ymax, fabs(yref[GUARD + i]));
    }
    CHECK_MSG(bad_ref == 0 && fg_test_guards_intact(yref, ny), "scalar %lldx%lld tok %lld: output not finite or guard",
              (long long)n_out, (long long)n_in, (long long)n_tok);
    CHECK(fg_matmul(pools[3], FG_ISA_SCALAR, FG_WTYPE_MXFP4, w, n_in, n_out, x, n_tok, y + GUARD, scratch) == 0);
    CHECK_MSG(memcmp(y + GUARD, yref + GUARD, (size_t)ny * sizeof *y) == 0, "scalar on 3 threads differs");

    for (int k = 0; k < n_fast; k++)
        for (int p = 1; p <= 3; p++) {
            const uint32_t c = FG_TEST_CANARY;
            for (int64_t i = 0; i < ny; i++)
                memcpy(&y[GUARD + i], &c, 4);
            CHECK(fg_matmul(pools[p], fast_isas[k], FG_WTYPE_MXFP4, w, n_in, n_out, x, n_tok, y + GUARD, scratch) ==
                  0);
            double err = 0, over = 0;
            int nonfinite = 0;
            for (int64_t i = 0; i < ny; i++) {
                const double d = fabs((double)y[GUARD + i] - yref[GUARD + i]);
                nonfinite += !isfinite(y[GUARD + i]);
                err = fmax(err, d);
                over = fmax(over, d / (bound[i] + 1e-300));
            }
            err /= ymax + 1e-30;
            worst_norm[k] = fmax(worst_norm[k], err);
            worst_bound[k] = fmax(worst_bound[k], over);
            CHECK_MSG(nonfinite == 0 && fg_test_guards_intact(y, ny), "%s pool %d %lldx%lld tok %lld: non-finite or guard",
                      fg_isa_name(fast_isas[k]), p, (long long)n_out, (long long)n_in, (long long)n_tok);
            CHECK_MSG(err <= TOL_MXFP4, "%s pool %d %lldx%lld tok %lld: normalised error %.3g",
                      fg_isa_name(fast_isas[k]), p, (long long)n_out, (long long)n_in, (long long)n_tok, err);
            CHECK_MSG(over <= 1.0, "%s pool %d %lldx%lld tok %lld: error %.3g times the derived bound",
                      fg_isa_name(fast_isas[k]), p, (long long)n_out, (long long)n_in, (long long)n_tok, over);
        }
    free(bound);
    free(yref);
    free(y);
    free(scratch);
    free(xmem);
    free(wmem);
    free(wbuf);
}

static void test_shapes(void)
{
    int c = 0;
    /* every block count up to 130 (odd and even, one chunk and two), 7 rows */
    for (int64_t n_in = 32; n_in <= 32 * 130; n_in += 32)
        check_case(n_in, 7, n_in % 96 == 0 ? 2 : 1, (c++) & 1);
    /* batch sizes */
    const int64_t ins[3] = {32, 352, 1024}, outs[3] = {1, 7, 33};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            for (int64_t t = 1; t <= 17; t++)
                check_case(ins[a], outs[b], t, (c++) & 1);
            check_case(ins[a], outs[b], 64, (c++) & 1);
        }
    /* rows around the thread grain (16) */
    const int64_t rows[] = {1, 2, 3, 15, 16, 17, 31, 33, 48, 100};
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        check_case(256, rows[r], 1, (c++) & 1);
        check_case(256, rows[r], 5, (c++) & 1);
    }
    /* several chunks and a tail */
    check_case(32 * 300 + 32 * 3, 20, 3, 0);
    check_case(4096, 64, 17, 1);
    check_case(2048, 256, 6, 0);
}

/* Products with one non-zero term are exact on every path, so they pin the
 * decoders bit for bit: (a) the scale of every E8M0 byte (row e has scale byte
 * e and code 2, value 1, at column 0: y = 2 * 127 * 2^(e - 128) for x = 127 at
 * column 0, NaN for e = 0xFF); (b) every code in every position, nibble order
 * included (row o holds code o % 16 at column o, token t is one-hot at column
 * t: y[t][o] = (t == o) * 2 e2m1(o % 16) * 127 * 2^(e - 128) * d_x). */
static void test_exact_terms(void)
{
    {
        const int64_t n_in = 64, n_out = 256;
        fg_block_mxfp4 *w = calloc((size_t)(n_out * 2), sizeof *w);
        for (int64_t o = 0; o < n_out; o++) {
            w[o * 2].e = (uint8_t)o;
            w[o * 2].qs[0] = 0x02;
            w[o * 2 + 1].e = 127; /* codes 0: adds 0 */
        }
        float x[64] = {127.0f};
        float y[256], yref[256];
        void *scratch = fg_test_alloc_scratch(FG_WTYPE_MXFP4, n_in, 1);
        CHECK(fg_matmul(NULL, FG_ISA_SCALAR, FG_WTYPE_MXFP4, w, n_in, n_out, x, 1, yref, scratch) == 0);
        int bad = 0;
        for (int o = 0; o < 255; o++)
            bad += yref[o] != 254.0f * ldexpf(1.0f, o - 128); /* inf from o = 249 on, as f32 overflows */
        bad += !isnan(yref[255]);
        CHECK_MSG(bad == 0, "reference: %d scales differ from 2^(e - 128)", bad);
        for (int k = 0; k < n_fast; k++) {
            CHECK(fg_matmul(pools[2], fast_isas[k], FG_WTYPE_MXFP4, w, n_in, n_out, x, 1, y, scratch) == 0);
            bad = 0;
            for (int o = 0; o < 256; o++)
                bad += !(y[o] == yref[o] || (isnan(y[o]) && isnan(yref[o])));
            CHECK_MSG(bad == 0, "%s: %d scales differ from the reference", fg_isa_name(fast_isas[k]), bad);
        }
        free(scratch);
        free(w);
    }
    {
        const int64_t n_in = 96, n_out = 96, n_tok = 96, nb = 3;
        fg_block_mxfp4 *w = calloc((size_t)(n_out * nb), sizeof *w);
        for (int64_t o = 0; o < n_out; o++) {
            for (int64_t b = 0; b < nb; b++)
                w[o * nb + b].e = (uint8_t)(120 + o % 9);
            const int64_t b = o / 32, j = o % 32;
            w[o * nb + b].qs[j % 16] = (uint8_t)(j < 16 ? o % 16 : (o % 16) << 4);
        }
        float *x = calloc((size_t)(n_in * n_tok), sizeof *x);
        for (int64_t t = 0; t < n_tok; t++)
            x[t * n_in + t] = 0.75f; /* d_x = 0.75 / 127 in f16, q = 127 */
        float *y = malloc((size_t)(n_out * n_tok) * sizeof *y), *yref = malloc((size_t)(n_out * n_tok) * sizeof *y);
        void *scratch = fg_test_alloc_scratch(FG_WTYPE_MXFP4, n_in, n_tok);
        CHECK(fg_matmul(NULL, FG_ISA_SCALAR, FG_WTYPE_MXFP4, w, n_in, n_out, x, n_tok, yref, scratch) == 0);
        const float dx = fg_f16_to_f32(fg_f32_to_f16(0.75f / 127.0f));
        int bad = 0;
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t o = 0; o < n_out; o++) {
                const float c = ldexpf(1.0f, (int)(120 + o % 9) - 128) * dx;
                const float want = t == o ? (float)(2.0 * fg_e2m1_to_f32((uint8_t)(o % 16)) * 127.0) * c : 0.0f;
                bad += yref[t * n_out + o] != want;
            }
        CHECK_MSG(bad == 0, "reference: %d one-hot products differ from the definition", bad);
        for (int k = 0; k < n_fast; k++) {
            CHECK(fg_matmul(pools[3], fast_isas[k], FG_WTYPE_MXFP4, w, n_in, n_out, x, n_tok, y, scratch) == 0);
            bad = 0;
            for (int64_t i = 0; i < n_out * n_tok; i++)
                bad += y[i] != yref[i];
            CHECK_MSG(bad == 0, "%s: %d one-hot products differ from the reference", fg_isa_name(fast_isas[k]), bad);
        }
        free(scratch);
        free(y);
        free(yref);
        free(x);
        free(w);
    }
}

/* A token's outputs are the same bits alone and in any batch, on any pool,
 * on every ISA (the reference included). */
static void test_batch_invariance(void)
{
    const int64_t shapes[][2] = {{1024, 64}, {96, 33}, {32 * 131, 17}};
    const int64_t batches[] = {2, 3, 4, 5, 7, 8, 13, 17, 64};
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
        const int64_t ni = shapes[sh][0], no = shapes[sh][1];
        fg_block_mxfp4 *w = make_weights(ni, no);
        for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
            const int64_t nt = batches[bi];
            float *xb = malloc((size_t)(ni * nt) * sizeof *xb), *yb = malloc((size_t)(no * nt) * sizeof *yb);
            float *y1 = malloc((size_t)no * sizeof *y1);
            for (int64_t i = 0; i < ni * nt; i++)
                xb[i] = rng_f() * 4.0f;
            void *sb = fg_test_alloc_scratch(FG_WTYPE_MXFP4, ni, nt);
            void *s1 = fg_test_alloc_scratch(FG_WTYPE_MXFP4, ni, 1);
            for (int k = -1; k < n_fast; k++) {
                const fg_isa isa = k < 0 ? FG_ISA_SCALAR : fast_isas[k];
                for (int p = 1; p <= 3; p += 2) {
                    const int differ =
                        fg_test_batch_differs(pools[p], isa, FG_WTYPE_MXFP4, w, ni, no, xb, nt, yb, sb, y1, s1);
                    CHECK_MSG(differ == 0, "%s %lldx%lld pool %d: %d of %lld tokens alone differ from the batch",
                              fg_isa_name(isa), (long long)no, (long long)ni, p, differ, (long long)nt);
                }
            }
            free(sb);
            free(s1);
            free(xb);
            free(yb);
            free(y1);
        }
        free(w);
    }
}

/* fg_matmul_many with MXFP4 among Q8_0, F32 and BF16 ops: each y the bits of
 * fg_matmul alone; fg_matmul_q8_rows over activations quantized once: the
 * bits of fg_matmul_many on the gathered rows. */
static void test_many(void)
{
    enum { N_IN = 160, N_OPS = 4, MAX_TOK = 19 };
    const int types[N_OPS] = {FG_WTYPE_MXFP4, FG_WTYPE_Q8_0, FG_WTYPE_MXFP4, FG_WTYPE_F32};
    const int64_t outs[N_OPS] = {48, 32, 20, 16};
    void *w[N_OPS];
    for (int i = 0; i < N_OPS; i++) {
        const size_t rb = fg_wtype_row_bytes(types[i], N_IN);
        if (types[i] == FG_WTYPE_MXFP4) {
            w[i] = make_weights(N_IN, outs[i]);
            continue;
        }
        uint8_t *m = malloc(rb * (size_t)outs[i]);
        for (size_t k = 0; k < rb * (size_t)outs[i]; k++)
            m[k] = (uint8_t)rng_u32();
        if (types[i] == FG_WTYPE_Q8_0)
            for (int64_t r = 0; r < outs[i] * N_IN / 32; r++) {
                const uint16_t d = fg_f32_to_f16(0.01f);
                memcpy(m + r * 34, &d, 2);
            }
        else
            for (int64_t k = 0; k < outs[i] * N_IN; k++)
                ((float *)m)[k] = rng_f();
        w[i] = m;
    }
    const size_t sbytes = fg_matmul_scratch_bytes(FG_WTYPE_MXFP4, N_IN, MAX_TOK);
    CHECK(sbytes == fg_matmul_scratch_bytes(FG_WTYPE_Q8_0, N_IN, MAX_TOK));
    void *scratch = aligned_alloc(64, (sbytes + 63) / 64 * 64);
    float *x = malloc((size_t)N_IN * MAX_TOK * sizeof *x), *xg = malloc((size_t)N_IN * MAX_TOK * sizeof *xg);
    for (int i = 0; i < N_IN * MAX_TOK; i++)
        x[i] = rng_f() * 2.0f;
    float *alone[N_OPS], *many[N_OPS];
    for (int i = 0; i < N_OPS; i++) {
        alone[i] = malloc((size_t)outs[i] * MAX_TOK * sizeof(float));
        many[i] = malloc((size_t)outs[i] * MAX_TOK * sizeof(float));
    }
    const size_t rows_bytes = fg_q8_rows_bytes(N_IN, MAX_TOK);
    void *rows_buf = aligned_alloc(64, (rows_bytes + 63) / 64 * 64);
    const int64_t toks[] = {1, 2, 5, 8, 19};
    int bad = 0;
    for (int k = -1; k < n_fast; k++) {
        const fg_isa isa = k < 0 ? FG_ISA_SCALAR : fast_isas[k];
        CHECK(fg_q8_rows_quantize(pools[2], isa, x, N_IN, MAX_TOK, rows_buf) == 0);
        for (size_t ti = 0; ti < sizeof toks / sizeof *toks; ti++)
            for (int p = 0; p < 4; p += 2) {
                const int64_t n_tok = toks[ti];
                fg_matmul_op ops[N_OPS];
                for (int i = 0; i < N_OPS; i++) {
                    CHECK(fg_matmul(pools[p], isa, types[i], w[i], N_IN, outs[i], x, n_tok, alone[i], scratch) == 0);
                    for (int64_t j = 0; j < outs[i] * n_tok; j++)
                        many[i][j] = NAN;
                    ops[i] = (fg_matmul_op){.wtype = types[i], .w = w[i], .n_out = outs[i], .y = many[i]};
                }
                memset(scratch, 0x5a, sbytes);
                CHECK(fg_matmul_many(pools[p], isa, ops, N_OPS, N_IN, x, n_tok, scratch) == 0);
                for (int i = 0; i < N_OPS; i++)
                    bad += memcmp(many[i], alone[i], (size_t)(outs[i] * n_tok) * sizeof(float)) != 0;

                /* the quantized rows, scattered: ops 0..2 (MXFP4, Q8_0, MXFP4) */
                int rows[MAX_TOK];
                for (int64_t t = 0; t < n_tok; t++) {
                    rows[t] = (int)((t * 7 + 3) % MAX_TOK);
                    memcpy(xg + t * N_IN, x + (int64_t)rows[t] * N_IN, N_IN * sizeof *xg);
                }
                for (int i = 0; i < 3; i++)
                    ops[i].y = alone[i];
                CHECK(fg_matmul_many(NULL, isa, ops, 3, N_IN, xg, n_tok, scratch) == 0);
                for (int i = 0; i < 3; i++) {
                    ops[i].y = many[i];
                    for (int64_t j = 0; j < outs[i] * n_tok; j++)
                        many[i][j] = NAN;
                }
                memset(scratch, 0x5a, sbytes);
                CHECK(fg_matmul_q8_rows(pools[p], isa, ops, 3, N_IN, rows_buf, MAX_TOK, rows, n_tok, scratch) == 0);
                for (int i = 0; i < 3; i++)
                    bad += memcmp(many[i], alone[i], (size_t)(outs[i] * n_tok) * sizeof(float)) != 0;
            }
    }
    CHECK_MSG(bad == 0, "fg_matmul_many / fg_matmul_q8_rows with MXFP4 ops differ in %d products", bad);

    /* MXFP4 beside BF16 (both want the start of scratch): run one by one, same bits */
    {
        const int64_t n_tok = 5;
        uint16_t *wb = malloc((size_t)(N_IN * 8) * sizeof *wb);
        for (int i = 0; i < N_IN * 8; i++)
            wb[i] = fg_f32_to_bf16(rng_f());
        float yb_alone[8 * 5], yb_many[8 * 5];
        size_t sb = fg_matmul_scratch_bytes(FG_WTYPE_BF16, N_IN, n_tok);
        sb = sb > sbytes ? sb : sbytes;
        void *s2 = aligned_alloc(64, (sb + 63) / 64 * 64);
        for (int k = -1; k < n_fast; k++) {
            const fg_isa isa = k < 0 ? FG_ISA_SCALAR : fast_isas[k];
            CHECK(fg_matmul(NULL, isa, FG_WTYPE_MXFP4, w[0], N_IN, outs[0], x, n_tok, alone[0], s2) == 0);
            CHECK(fg_matmul(NULL, isa, FG_WTYPE_BF16, wb, N_IN, 8, x, n_tok, yb_alone, s2) == 0);
            const fg_matmul_op ops[2] = {{.wtype = FG_WTYPE_MXFP4, .w = w[0], .n_out = outs[0], .y = many[0]},
                                         {.wtype = FG_WTYPE_BF16, .w = wb, .n_out = 8, .y = yb_many}};
            CHECK(fg_matmul_many(pools[2], isa, ops, 2, N_IN, x, n_tok, s2) == 0);
            CHECK(memcmp(many[0], alone[0], (size_t)(outs[0] * n_tok) * sizeof(float)) == 0);
            CHECK(memcmp(yb_many, yb_alone, sizeof yb_many) == 0);
        }
        free(s2);
        free(wb);
    }
    for (int i = 0; i < N_OPS; i++) {
        free(w[i]);
        free(alone[i]);
        free(many[i]);
    }
    free(rows_buf);
    free(scratch);
    free(x);
    free(xg);
}

static void test_errors(void)
{
    fg_block_mxfp4 w[8];
    memset(w, 0, sizeof w);
    float x[64] = {0}, y[4];
    void *scratch = fg_test_alloc_scratch(FG_WTYPE_MXFP4, 64, 1);
    CHECK(fg_wtype_row_bytes(FG_WTYPE_MXFP4, 64) == 34);
    CHECK(fg_wtype_row_bytes(FG_WTYPE_MXFP4, 48) == 0);
    CHECK(fg_matmul_scratch_bytes(FG_WTYPE_MXFP4, 48, 1) == 0);
    CHECK(fg_matmul_scratch_bytes(FG_WTYPE_MXFP4, 64, 1) > 0);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_MXFP4, w, 48, 4, x, 1, y, scratch) == -1); /* not x32 */
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_MXFP4, w, 64, 4, x, 1, y, NULL) == -1);    /* no scratch */
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_MXFP4, w, 64, 4, x, 1, y, scratch) == 0);
    CHECK(y[0] == 0.0f && y[3] == 0.0f);
    /* an unvalidated NaN scale gives NaN on every path: the reason loaders refuse it */
    w[2].e = 0xff;
    w[2].qs[0] = 0x01;
    x[0] = 1.0f;
    for (int k = -1; k < n_fast; k++) {
        CHECK(fg_matmul(NULL, k < 0 ? FG_ISA_SCALAR : fast_isas[k], FG_WTYPE_MXFP4, w, 64, 4, x, 1, y, scratch) == 0);
        CHECK(!isnan(y[0]) && isnan(y[1]));
    }
    free(scratch);
}

int main(void)
{
    rng_seed(0x9e3779b97f4a7c15ull);
    fg_test_matmul_setup("test_mxfp4");

    test_e8m0();
    test_dequant_vector();
    test_quant_worked();
    test_quant_ggml_golden();
    test_quant_vs_rule();
    test_round_trip();
    test_validate();
    test_errors();
    test_exact_terms();
    test_shapes();
    test_batch_invariance();
    test_many();

    for (int k = 0; k < n_fast; k++)
        printf("test_mxfp4: %-6s max normalised error %.3g, max error / derived bound %.3g\n",
               fg_isa_name(fast_isas[k]), worst_norm[k], worst_bound[k]);
    fg_test_matmul_teardown();
    return TEST_DONE("test_mxfp4");
}
