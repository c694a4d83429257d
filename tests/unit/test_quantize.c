/* test_quantize.c: kernels/cpu/quantize.h against ggml's algorithms and
 * against itself.
 *   vectors     the bytes of every type for the fixed inputs of
 *               data/quantize_vectors.h (written by tests/reference/
 *               quantize_vectors.py, numpy, no code shared with the C)
 *   round trip  quantize -> dequantize -> quantize. Where the math makes
 *               that a fixed point (see below) the bytes must be equal; for
 *               the searching types the second pass must not lose accuracy
 *               and a third pass must change nothing the second did not
 *               (measured, printed)
 *   errors      types it does not write, bad lengths, NaN and infinity
 */
#include <math.h>

#include "fg_test.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quants.h"

#include "data/quantize_vectors.h"

static float input_at(int i)
{
    float f;
    memcpy(&f, &quantize_inputs[i], 4);
    return f;
}

static void test_vectors(void)
{
    static float x[QV_ROWS * QV_COLS];
    for (int i = 0; i < QV_ROWS * QV_COLS; i++)
        x[i] = input_at(i);
    for (size_t v = 0; v < sizeof quantize_vectors / sizeof quantize_vectors[0]; v++) {
        const quantize_vector *qv = &quantize_vectors[v];
        uint8_t *out = calloc(qv->n_bytes, 1);
        CHECK(fg_wtype_quantize_row(qv->type, x, out, QV_ROWS * QV_COLS) == 0);
        int elems, bytes;
        CHECK(fg_wtype_block(qv->type, &elems, &bytes));
        unsigned first = qv->n_bytes;
        int bad_blocks = 0;
        for (unsigned i = 0; i < qv->n_bytes; i += (unsigned)bytes)
            if (memcmp(out + i, qv->bytes + i, (size_t)bytes) != 0) {
                bad_blocks++;
                if (first == qv->n_bytes)
                    for (unsigned k = i; k < i + (unsigned)bytes; k++)
                        if (out[k] != qv->bytes[k]) {
                            first = k;
                            break;
                        }
            }
        CHECK_MSG(bad_blocks == 0, "%s: %d of %u blocks differ from ggml's, first at byte %u (got %u, want %u)",
                  qv->name, bad_blocks, qv->n_bytes / (unsigned)bytes, first, first < qv->n_bytes ? out[first] : 0,
                  first < qv->n_bytes ? qv->bytes[first] : 0);
        fprintf(stderr, "  %-7s %u blocks byte-identical to the numpy reference: %s\n", qv->name,
                qv->n_bytes / (unsigned)bytes, bad_blocks ? "NO" : "yes");
        free(out);
    }
}

/* Types whose quantization of its own dequantized values is the same block,
 * by the math: the scale comes from the block's extreme values, which
 * dequantize to the F16 scale times an extreme code (Q8_0: 127, Q4_0: -8,
 * Q5_0: -16, Q4_1/Q5_1: the minimum and 15 or 31 steps above it), so the new
 * f32 scale is the stored F16 one within a few f32 ulps (it rounds back to
 * the same F16), and every other value is its code times that scale, which
 * rounds back to the code; MXFP4's values are levels times a power of two.
 * The K and IQ4 types search scales over a grid and refit them in f32 and
 * F16, so a second pass may choose a neighbouring scale: not a fixed point by
 * construction (measured below: the third pass equals the second). */
static int exact_fixed_point(int t)
{
    return t == FG_WTYPE_Q8_0 || t == FG_WTYPE_Q4_0 || t == FG_WTYPE_Q4_1 || t == FG_WTYPE_Q5_0 ||
           t == FG_WTYPE_Q5_1 || t == FG_WTYPE_MXFP4;
}

static double rms_diff(const float *a, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

static void test_round_trip(void)
{
    static const int types[] = {FG_WTYPE_Q8_0, FG_WTYPE_Q4_0, FG_WTYPE_Q4_1, FG_WTYPE_Q5_0,
                                FG_WTYPE_Q5_1, FG_WTYPE_Q2_K, FG_WTYPE_Q3_K, FG_WTYPE_Q4_K,
                                FG_WTYPE_Q5_K, FG_WTYPE_Q6_K, FG_WTYPE_IQ4_NL, FG_WTYPE_IQ4_XS,
                                FG_WTYPE_MXFP4};
    static const char *const names[] = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k",
                                        "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4"};
    enum { N = 64 * 256 };
    static float x[N], y1[N], y2[N], y3[N];
    rng_seed(7);
    for (int i = 0; i < N; i++)
        x[i] = rng_f() + 0.5f * rng_f() * rng_f() * rng_f(); /* a heavier tail than uniform */
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const int t = types[k];
        int elems, bytes;
        CHECK(fg_wtype_block(t, &elems, &bytes));
        const size_t nb = (size_t)(N / elems) * (size_t)bytes;
        uint8_t *q1 = malloc(nb), *q2 = malloc(nb), *q3 = malloc(nb);
        CHECK(fg_wtype_quantize_row(t, x, q1, N) == 0);
        CHECK(fg_wtype_dequantize_row(t, q1, y1, N) == 0);
        CHECK(fg_wtype_quantize_row(t, y1, q2, N) == 0);
        CHECK(fg_wtype_dequantize_row(t, q2, y2, N) == 0);
        CHECK(fg_wtype_quantize_row(t, y2, q3, N) == 0);
        CHECK(fg_wtype_dequantize_row(t, q3, y3, N) == 0);
        int same12 = 0, same23 = 0;
        for (size_t b = 0; b < nb; b += (size_t)bytes) {
            same12 += memcmp(q1 + b, q2 + b, (size_t)bytes) == 0;
            same23 += memcmp(q2 + b, q3 + b, (size_t)bytes) == 0;
        }
        const int blocks = N / elems;
        const double e1 = rms_diff(x, y1, N), e2 = rms_diff(x, y2, N), drift = rms_diff(y1, y2, N);
        fprintf(stderr,
                "  %-7s requantized blocks equal: %5.1f%% (pass 2), %5.1f%% (pass 3); rms error %.3g, after two "
                "passes %.3g\n",
                names[k],
                100.0 * same12 / blocks, 100.0 * same23 / blocks, e1, e2);
        if (exact_fixed_point(t)) {
            CHECK_MSG(same12 == blocks, "type %d: %d of %d blocks change when requantized", t, blocks - same12,
                      blocks);
        } else {
            /* measured on this input: the second quantization is a fixed point */
            CHECK_MSG(same23 == blocks, "type %d: %d of %d blocks change on a third pass", t, blocks - same23,
                      blocks);
            /* a second pass moves values by less than the first pass's error, and does not compound */
            CHECK_MSG(drift <= e1, "type %d: requantizing moves values by %g rms, more than the first error %g", t,
                      drift, e1);
            CHECK_MSG(e2 <= 1.5 * e1, "type %d: error after two passes %g vs %g after one", t, e2, e1);
        }
        free(q1);
        free(q2);
        free(q3);
    }
}

static void test_errors(void)
{
    float x[256] = {0}, y[256];
    uint8_t out[1024];
    CHECK(!fg_wtype_quantizes(FG_WTYPE_Q8_0_P16));
    CHECK(!fg_wtype_quantizes(34)); /* tq1_0: not written */
    CHECK(fg_wtype_quantize_row(34, x, out, 256) == -1);
    /* ggml's IQ2_XXS and IQ2_XS quantizers need importance weights; IQ2_S does not */
    static float ones[256];
    for (int i = 0; i < 256; i++)
        ones[i] = 1;
    CHECK(fg_wtype_requires_imatrix(FG_WTYPE_IQ2_XXS) && fg_wtype_requires_imatrix(FG_WTYPE_IQ2_XS));
    CHECK(!fg_wtype_requires_imatrix(FG_WTYPE_IQ2_S) && !fg_wtype_requires_imatrix(FG_WTYPE_IQ3_XXS));
    CHECK(fg_wtype_quantize_row(FG_WTYPE_IQ2_XXS, x, out, 256) == -1);
    CHECK(fg_wtype_quantize_row(FG_WTYPE_IQ2_XS, x, out, 256) == -1);
    CHECK(fg_wtype_quantize_row(FG_WTYPE_Q4_K, x, out, 128) == -1); /* not a whole block */
    CHECK(fg_wtype_quantize_row(FG_WTYPE_Q4_0, x, out, 0) == -1);
    x[3] = NAN;
    CHECK(fg_wtype_quantize_row(FG_WTYPE_Q8_0, x, out, 32) == -1);
    x[3] = INFINITY;
    CHECK(fg_wtype_quantize_row(FG_WTYPE_F16, x, out, 32) == -1);
    x[3] = 0;
    /* an all-zero block: every type writes a block that dequantizes to zeros */
    static const int all[] = {FG_WTYPE_Q4_0, FG_WTYPE_Q4_1, FG_WTYPE_Q5_0, FG_WTYPE_Q5_1, FG_WTYPE_Q8_0,
                              FG_WTYPE_Q2_K, FG_WTYPE_Q3_K, FG_WTYPE_Q4_K, FG_WTYPE_Q5_K, FG_WTYPE_Q6_K,
                              FG_WTYPE_IQ4_NL, FG_WTYPE_IQ4_XS, FG_WTYPE_MXFP4, FG_WTYPE_IQ3_XXS, FG_WTYPE_IQ3_S,
                              FG_WTYPE_IQ2_XXS, FG_WTYPE_IQ2_XS, FG_WTYPE_IQ2_S};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        CHECK(fg_wtype_quantize_row_imatrix(all[k], x, out, 256, fg_wtype_requires_imatrix(all[k]) ? ones : NULL) == 0);
        CHECK(fg_wtype_dequantize_row(all[k], out, y, 256) == 0);
        int nonzero = 0;
        for (int i = 0; i < 256; i++)
            nonzero += y[i] != 0.0f;
        CHECK_MSG(nonzero == 0, "type %d: zeros dequantize to %d nonzero values", all[k], nonzero);
    }
}

int main(void)
{
    test_vectors();
    test_round_trip();
    test_errors();
    return TEST_DONE("test_quantize");
}
