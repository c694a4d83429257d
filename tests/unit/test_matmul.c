/* test_matmul.c: every fast ISA this CPU supports against the scalar reference
 * of kernels/cpu/matmul.h, for every weight type, over many shapes, with pools
 * of 1, 2 and 3 threads.
 *
 * Per case: normalised error max|y_fast - y_ref| / (max|y_ref| + tiny) under a
 * per-type tolerance (see TOL_*); no NaN/Inf in any output for finite inputs
 * (y is pre-filled with NaN, so an output never written shows up here too);
 * canary floats before and after y untouched. The scalar reference run on a
 * pool must equal the single-threaded one bit for bit. Separately: Q8_0
 * activation quantization bit-exact across ISAs (one-hot weights read the
 * quantized values back exactly), NaN propagation for float weights, error
 * returns. BF16 on a CPU with avx512_bf16 (vdpbf16ps, x rounded to BF16) has
 * its own checks (the BF16 notes below), its rounding checked bit for bit and
 * its batch invariance checked (test_bf16_native).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_matmul.h"

/* Tolerances on max|y_fast - y_ref| / max|y_ref|.
 *
 * F32, F16, BF16: the same f32 products (F16/BF16 widen exactly), summed in
 * another order and with fused multiply-adds. With the random signs used here
 * each side's rounding error behaves like a random walk, ~sqrt(n) * 2^-24 times
 * the size of the partial sums, i.e. ~1e-6 of |y| at n = 4096; the worst
 * observed is 8e-6, in a 1-output case where max|y_ref| happens to be small
 * through cancellation (0.4 against a typical 10). 5e-5 leaves 6x over that,
 * while a single wrong term (~|y| / (3 sqrt(n)) >= 5e-3 of |y|) or x rounded
 * to f16 on the way (~1.6e-4) still fails.
 *
 * Q8_0: both sides compute the same exact integer block dots (int32, no
 * rounding) and the same f32 block scales d_w * d_x; only the f32 sum over the
 * n/32 blocks (and the fast kernels' split of each block into 8 lanes) rounds
 * differently: a few ulps of |y| (worst observed 7e-7). A quantized activation
 * off by one moves y by ~1/(127 sqrt(n)) of |y| (> 1e-4 at n = 4096), so 1e-5
 * still separates "exact up to summation order" from "quantized differently";
 * test_q8_quant_exact checks the quantization bit for bit anyway. */
#define TOL_FLOAT 5e-5
#define TOL_Q8_0 1e-5

/* BF16 by vdpbf16ps (fg_matmul_bf16_native): x is rounded to BF16 first, so
 * the fast path is not within TOL_FLOAT of the reference. Two checks instead:
 *
 * 1. Against the scalar reference, a bound derived from the rounding, per
 *    output. BF16 keeps 8 significant bits, so rounding to nearest moves each
 *    x_i by at most 2^-8 |x_i|; the BF16 x BF16 products are exact in f32
 *    (8 x 8 bits of significand); then both sides' f32 sums of n terms are
 *    each within about n * 2^-24 * sum|terms| of exact (the classical worst
 *    case, far above the typical random walk). So
 *      |y_fast - y_ref| <= (2^-8 + 2 * n * 2^-24 * (1 + 2^-8)) * sum_i |w_i x_i|,
 *    checked with a factor 1.01 for the rounding of the bound itself. It
 *    cannot fail for a correct kernel; a wrong or missing term of a short row
 *    (n up to ~100, most cases here) breaks it. Observed: up to ~0.6 of it.
 * 2. Against the exact product with the BF16-rounded x (in double, x rounded
 *    by fg_f32_to_bf16), the normalised error under TOL_FLOAT: what remains
 *    is only f32 summation order, as for the other float types. This one
 *    catches a wrong term at any n, and a rounding other than nearest-even
 *    (truncation moves y by ~1e-3 of |y|). */
#define BF16_UNIT 0x1p-8
#define F32_UNIT 0x1p-24

#define GUARD FG_TEST_GUARD


static const int wtypes[4] = {FG_WTYPE_F32, FG_WTYPE_F16, FG_WTYPE_BF16, FG_WTYPE_Q8_0};
static const char *wtype_name(int t)
{
    switch (t) {
    case FG_WTYPE_F32:
        return "f32";
    case FG_WTYPE_F16:
        return "f16";
    case FG_WTYPE_BF16:
        return "bf16";
    case FG_WTYPE_Q8_0:
        return "q8_0";
    }
    return "?";
}

static double worst[4][2];  /* observed max normalised error per type and ISA */
static double worst_bf16_bound; /* native BF16: observed max of error / derived bound */

/* Random weights of one type: floats in [-1, 1) or Q8_0 blocks with every
 * int8 value possible (-128 included, which ggml's quantizer never makes but a
 * file can hold) and varied scales. */
static void *make_weights(int wtype, int64_t n_in, int64_t n_out, size_t *bytes)
{
    const size_t rb = fg_wtype_row_bytes(wtype, n_in);
    *bytes = rb * (size_t)n_out;
    uint8_t *w = malloc(*bytes + 1);
    for (int64_t o = 0; o < n_out; o++) {
        uint8_t *row = w + rb * (size_t)o;
        for (int64_t i = 0; i < n_in; i++) {
            const float f = rng_f();
            if (wtype == FG_WTYPE_F32) {
                memcpy(row + 4 * i, &f, 4);
            } else if (wtype == FG_WTYPE_F16) {
                const uint16_t h = fg_f32_to_f16(f);
                memcpy(row + 2 * i, &h, 2);
            } else if (wtype == FG_WTYPE_BF16) {
                const uint16_t h = fg_f32_to_bf16(f);
                memcpy(row + 2 * i, &h, 2);
            }
        }
        if (wtype == FG_WTYPE_Q8_0) {
            fg_block_q8_0 *b = (fg_block_q8_0 *)row;
            for (int64_t k = 0; k < n_in / 32; k++) {
                b[k].d = fg_f32_to_f16(0.001f + 0.02f * (rng_f() + 1.0f));
                for (int j = 0; j < 32; j++)
                    b[k].qs[j] = (int8_t)(rng_u32() & 0xff);
            }
        }
    }
    return w;
}

static int type_index(int wtype)
{
    for (int i = 0; i < 4; i++)
        if (wtypes[i] == wtype)
            return i;
    return 0;
}

/* One shape, one type: reference once, then every fast ISA on every pool. */
static void check_case(int wtype, int64_t n_in, int64_t n_out, int64_t n_tok, int misalign)
{
    size_t wbytes;
    uint8_t *wbuf = make_weights(wtype, n_in, n_out, &wbytes);
    const size_t shift = misalign && wtype != FG_WTYPE_Q8_0 ? 1 : 0; /* one element off 64-byte alignment */
    uint8_t *wmem = malloc(wbytes + 8);
    memcpy(wmem + shift * (wtype == FG_WTYPE_F32 ? 4 : 2), wbuf, wbytes);
    const void *w = wmem + shift * (wtype == FG_WTYPE_F32 ? 4 : 2);
    free(wbuf);

    float *xmem = malloc((size_t)(n_in * n_tok + 1) * sizeof(float));
    float *x = xmem + (misalign ? 1 : 0);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = rng_f() * (1.0f + (float)((i / 32) % 5)); /* block magnitudes vary */

    void *scratch = fg_test_alloc_scratch(wtype, n_in, n_tok);
    const int64_t ny = n_out * n_tok;
    float *yref = fg_test_alloc_guarded(ny), *y = fg_test_alloc_guarded(ny), *yt = malloc((size_t)n_out * sizeof *yt);

    int rc = fg_matmul(NULL, FG_ISA_SCALAR, wtype, w, n_in, n_out, x, n_tok, yref + GUARD, scratch);
    CHECK(rc == 0);
    double ymax = 0.0;
    int bad_ref = 0;
    for (int64_t i = 0; i < ny; i++) {
        bad_ref += !isfinite(yref[GUARD + i]);
        ymax = fmax(ymax, fabs(yref[GUARD + i]));
    }
    CHECK_MSG(bad_ref == 0, "%s %lldx%lld tok %lld: scalar output not finite", wtype_name(wtype), (long long)n_out,
              (long long)n_in, (long long)n_tok);
    CHECK(fg_test_guards_intact(yref, ny));

    /* threading must not change the reference's arithmetic */
    rc = fg_matmul(pools[3], FG_ISA_SCALAR, wtype, w, n_in, n_out, x, n_tok, y + GUARD, scratch);
    CHECK(rc == 0 && memcmp(y + GUARD, yref + GUARD, (size_t)ny * sizeof *y) == 0);
    CHECK(fg_test_guards_intact(y, ny));

    const double tol = wtype == FG_WTYPE_Q8_0 ? TOL_Q8_0 : TOL_FLOAT;
    /* BF16 native: per output, sum|w x| for the derived bound (check 1 above)
     * and the exact product with x rounded to BF16 (check 2) */
    double *bound = NULL, *ybf = NULL, ybf_max = 0.0;
    if (wtype == FG_WTYPE_BF16) {
        bound = malloc((size_t)ny * sizeof *bound);
        ybf = malloc((size_t)ny * sizeof *ybf);
        const uint16_t *wb = w;
        const double per_term = BF16_UNIT + 2.0 * (double)n_in * F32_UNIT * (1.0 + BF16_UNIT);
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t o = 0; o < n_out; o++) {
                double sabs = 0.0, yb = 0.0;
                for (int64_t i = 0; i < n_in; i++) {
                    const double wi = fg_bf16_to_f32(wb[o * n_in + i]), xi = x[t * n_in + i];
                    sabs += fabs(wi * xi);
                    yb += wi * (double)fg_bf16_to_f32(fg_f32_to_bf16(x[t * n_in + i]));
                }
                bound[t * n_out + o] = 1.01 * per_term * sabs;
                ybf[t * n_out + o] = yb;
                ybf_max = fmax(ybf_max, fabs(yb));
            }
    }
    for (int k = 0; k < n_fast; k++) {
        const int bf16_native = wtype == FG_WTYPE_BF16 && fg_matmul_bf16_native(fast_isas[k]);
        for (int p = 1; p <= 3; p++) {
            const uint32_t c = FG_TEST_CANARY;
            for (int64_t i = 0; i < ny; i++)
                memcpy(&y[GUARD + i], &c, 4);
            rc = fg_matmul(pools[p], fast_isas[k], wtype, w, n_in, n_out, x, n_tok, y + GUARD, scratch);
            CHECK(rc == 0);
            double err = 0.0, over = 0.0;
            int nonfinite = 0;
            for (int64_t i = 0; i < ny; i++) {
                if (!isfinite(y[GUARD + i]))
                    nonfinite++;
                else if (bf16_native) {
                    err = fmax(err, fabs((double)y[GUARD + i] - ybf[i]));
                    over = fmax(over, fabs((double)y[GUARD + i] - (double)yref[GUARD + i]) / (bound[i] + 1e-300));
                }
                else
                    err = fmax(err, fabs((double)y[GUARD + i] - (double)yref[GUARD + i]));
            }
            err /= (bf16_native ? ybf_max : ymax) + 1e-30;
            double *wst = &worst[type_index(wtype)][k];
            if (err > *wst) {
                *wst = err;
                if (getenv("FG_TEST_VERBOSE"))
                    fprintf(stderr, "  worst so far %s %s %lldx%lld tok %lld: %.3g (max|y| %.3g)\n",
                            fg_isa_name(fast_isas[k]), wtype_name(wtype), (long long)n_out, (long long)n_in,
                            (long long)n_tok, err, ymax);
            }
            if (bf16_native && over > worst_bf16_bound)
                worst_bf16_bound = over;
            CHECK_MSG(nonfinite == 0, "%s %s pool %d %lldx%lld tok %lld: %d outputs not finite",
                      fg_isa_name(fast_isas[k]), wtype_name(wtype), p, (long long)n_out, (long long)n_in,
                      (long long)n_tok, nonfinite);
            CHECK_MSG(err <= tol, "%s %s%s pool %d %lldx%lld tok %lld: normalised error %.3g > %.3g",
                      fg_isa_name(fast_isas[k]), wtype_name(wtype), bf16_native ? " (vs x rounded to bf16)" : "", p,
                      (long long)n_out, (long long)n_in, (long long)n_tok, err, tol);
            CHECK_MSG(over <= 1.0, "%s bf16 pool %d %lldx%lld tok %lld: error %.3g times the BF16 rounding bound",
                      fg_isa_name(fast_isas[k]), p, (long long)n_out, (long long)n_in, (long long)n_tok, over);
            CHECK_MSG(fg_test_guards_intact(y, ny), "%s %s pool %d %lldx%lld tok %lld: guard overwritten",
                      fg_isa_name(fast_isas[k]), wtype_name(wtype), p, (long long)n_out, (long long)n_in,
                      (long long)n_tok);
        }
        if (wtype != FG_WTYPE_Q8_0 && n_tok > 1) /* float types: each token alone gives its row of the batch */
            for (int64_t t = 0; t < n_tok; t++) {
                CHECK(fg_matmul(NULL, fast_isas[k], wtype, w, n_in, n_out, x + t * n_in, 1, yt, scratch) == 0);
                CHECK_MSG(memcmp(yt, y + GUARD + t * n_out, (size_t)n_out * sizeof *y) == 0,
                          "%s %s %lldx%lld: token %lld alone differs from its row in a batch of %lld",
                          fg_isa_name(fast_isas[k]), wtype_name(wtype), (long long)n_out, (long long)n_in,
                          (long long)t, (long long)n_tok);
            }
    }
    free(bound);
    free(ybf);
    free(yref);
    free(y);
    free(yt);
    free(scratch);
    free(xmem);
    free(wmem);
}

static void test_shapes(void)
{
    int c = 0;
    for (int ti = 0; ti < 4; ti++) {
        const int wt = wtypes[ti];
        /* every multiple of 32 up to 4096, 7 rows (a 4-row tile and 3 single rows) */
        for (int64_t n_in = 32; n_in <= 4096; n_in += 32)
            check_case(wt, n_in, 7, n_in % 96 == 0 ? 2 : 1, (c++) & 1);
        /* batch sizes: tiles of 4 (and 2) tokens plus remainders */
        const int64_t ins[3] = {32, 320, 1024}, outs[3] = {1, 7, 33};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                for (int64_t t = 1; t <= 17; t++)
                    check_case(wt, ins[a], outs[b], t, (c++) & 1);
                check_case(wt, ins[a], outs[b], 64, (c++) & 1);
            }
        /* row counts around the tile (4) and the thread grain (16) */
        const int64_t rows[] = {1, 2, 3, 4, 5, 8, 15, 16, 17, 31, 32, 33, 48, 64, 100};
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            check_case(wt, 256, rows[r], 1, (c++) & 1);
            check_case(wt, 256, rows[r], 5, (c++) & 1);
        }
        /* larger */
        check_case(wt, 4096, 64, 17, 0);
        check_case(wt, 2816, 33, 64, 1);
        check_case(wt, 1024, 256, 3, 0);
        /* float types take any n_in: vector tails */
        if (wt != FG_WTYPE_Q8_0) {
            const int64_t odd[] = {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000};
            for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
                for (int64_t t = 1; t <= 5; t += 4)
                    check_case(wt, odd[i], 9, t, (c++) & 1);
        }
    }
}

/* Q8_0 quantization of x, bit for bit: W's row o is one-hot at column o with
 * q = 1 and d = 1, so y[t][o] = d_x(block) * q_x[t][o] exactly on every path. */
static void test_q8_quant_exact(void)
{
    const int64_t n_in = 256, n_out = 256, n_tok = 9;
    const int64_t nb = n_in / 32;
    fg_block_q8_0 *w = calloc((size_t)(n_out * nb), sizeof *w);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t b = 0; b < nb; b++)
            w[o * nb + b].d = fg_f32_to_f16(1.0f);
        w[o * nb + o / 32].qs[o % 32] = 1;
    }
    float *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = rng_f() * 3.0f;
    /* token 0: amax 127 so d = 1 and every x.5 is an exact tie (away from zero) */
    for (int64_t i = 0; i < n_in; i++)
        x[i] = (float)((i % 64) - 32) + 0.5f;
    for (int64_t b = 0; b < nb; b++)
        x[b * 32] = 127.0f;
    /* token 1: ties at other scales: amax 25.4 -> d = 0.2, 1/d = 5 */
    for (int64_t i = 0; i < n_in; i++)
        x[n_in + i] = ((float)(i % 11) - 5.0f) * 0.1f;
    for (int64_t b = 0; b < nb; b++)
        x[n_in + b * 32 + 31] = 25.4f;
    /* token 2: a zero block, a block so small 1/d overflows, NaN and inf elements */
    for (int64_t i = 0; i < 32; i++)
        x[2 * n_in + i] = 0.0f;
    for (int64_t i = 32; i < 64; i++)
        x[2 * n_in + i] = (float)(i - 40) * 1e-39f;
    x[2 * n_in + 70] = NAN;
    x[2 * n_in + 100] = INFINITY;
    x[2 * n_in + 101] = -INFINITY;
    /* token 3: huge values: d overflows f16 */
    for (int64_t i = 0; i < 32; i++)
        x[3 * n_in + i] = 1e7f * (float)(i + 1);

    void *scratch = fg_test_alloc_scratch(FG_WTYPE_Q8_0, n_in, n_tok);
    float *yref = malloc((size_t)(n_out * n_tok) * sizeof *yref), *y = malloc((size_t)(n_out * n_tok) * sizeof *y);
    CHECK(fg_matmul(NULL, FG_ISA_SCALAR, FG_WTYPE_Q8_0, w, n_in, n_out, x, n_tok, yref, scratch) == 0);
    /* spot-check the reference itself: token 0 holds the rounded halves */
    CHECK(yref[1] == -31.0f && yref[33] == 2.0f && yref[32] == 127.0f && yref[31] == -1.0f);
    for (int k = 0; k < n_fast; k++) {
        CHECK(fg_matmul(pools[2], fast_isas[k], FG_WTYPE_Q8_0, w, n_in, n_out, x, n_tok, y, scratch) == 0);
        int bad = 0;
        for (int64_t i = 0; i < n_out * n_tok; i++) {
            /* exact, except that where d_x overflowed f16 (token 3) any non-finite result goes:
             * the reference's inf * q against the fast paths' inf * 0 lanes */
            const int same = (!isfinite(y[i]) && !isfinite(yref[i])) || y[i] == yref[i];
            if (!same && bad++ < 5)
                fprintf(stderr, "  %s: y[%lld][%lld] = %.9g, reference %.9g\n", fg_isa_name(fast_isas[k]),
                        (long long)(i / n_out), (long long)(i % n_out), y[i], yref[i]);
        }
        CHECK_MSG(bad == 0, "%s: %d quantized activations differ from fg_quantize_row_q8_0", fg_isa_name(fast_isas[k]),
                  bad);
    }
    free(yref);
    free(y);
    free(scratch);
    free(x);
    free(w);
}

/* Q8_0 packed in 16-row panels (FG_WTYPE_Q8_0_P16): the scalar reference
 * over the packed matrix equals the one over the original bit for bit (the
 * packing loses nothing), and every fast ISA on every pool is within TOL_Q8_0
 * of it, for 1 .. 13 tokens (the experts' sizes, one and two token groups) and
 * larger batches, with multi-threaded results equal to single-threaded ones.
 * Each token alone equals its row of the batch bit for bit (batch invariance).
 * The activation quantization is checked bit for bit through one-hot rows as
 * in test_q8_quant_exact, at token counts below the unpacked panels' 8. */
static void check_p16_case(int64_t n_in, int64_t n_out, int64_t n_tok)
{
    size_t bytes;
    void *w = make_weights(FG_WTYPE_Q8_0, n_in, n_out, &bytes);
    const size_t pb = fg_matmul_q8_p16_bytes(n_in, n_out);
    CHECK(pb == bytes);
    void *wp = aligned_alloc(64, (pb + 63) / 64 * 64);
    CHECK(fg_matmul_pack_q8_p16(w, n_in, n_out, wp) == 0);
    float *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = rng_f();
    void *scratch = fg_test_alloc_scratch(FG_WTYPE_Q8_0_P16, n_in, n_tok);
    const int64_t ny = n_out * n_tok;
    float *yref = fg_test_alloc_guarded(ny), *yp = fg_test_alloc_guarded(ny), *y = fg_test_alloc_guarded(ny), *y1 = fg_test_alloc_guarded(ny);
    CHECK(fg_matmul(NULL, FG_ISA_SCALAR, FG_WTYPE_Q8_0, w, n_in, n_out, x, n_tok, yref + GUARD, scratch) == 0);
    CHECK(fg_matmul(NULL, FG_ISA_SCALAR, FG_WTYPE_Q8_0_P16, wp, n_in, n_out, x, n_tok, yp + GUARD, scratch) == 0);
    CHECK_MSG(memcmp(yref, yp, (size_t)(ny + 2 * GUARD) * sizeof *y) == 0,
              "p16 scalar %lldx%lld tok %lld differs from Q8_0 scalar", (long long)n_out, (long long)n_in,
              (long long)n_tok);
    double ymax = 0;
    for (int64_t i = 0; i < ny; i++)
        ymax = fmax(ymax, fabs(yref[GUARD + i]));
    for (int k = 0; k < n_fast; k++) {
        for (int p = 0; p < 4; p++) {
            CHECK(fg_matmul(pools[p], fast_isas[k], FG_WTYPE_Q8_0_P16, wp, n_in, n_out, x, n_tok, y + GUARD,
                            scratch) == 0);
            double err = 0;
            int finite = 1;
            for (int64_t i = 0; i < ny; i++) {
                finite &= isfinite(y[GUARD + i]) != 0;
                err = fmax(err, fabs((double)y[GUARD + i] - yref[GUARD + i]));
            }
            err /= ymax + 1e-30;
            CHECK_MSG(finite && fg_test_guards_intact(y, ny), "p16 %s pool %d %lldx%lld tok %lld: non-finite or guard",
                      fg_isa_name(fast_isas[k]), p, (long long)n_out, (long long)n_in, (long long)n_tok);
            CHECK_MSG(err <= TOL_Q8_0, "p16 %s pool %d %lldx%lld tok %lld: normalised error %.3g",
                      fg_isa_name(fast_isas[k]), p, (long long)n_out, (long long)n_in, (long long)n_tok, err);
            if (p == 0) {
                memcpy(y1, y, (size_t)(ny + 2 * GUARD) * sizeof *y);
                /* each token alone gives its row of the batch bit for bit: a token's
                 * products do not depend on the batch it runs in */
                float *yt = malloc((size_t)n_out * sizeof *yt);
                void *sc1 = fg_test_alloc_scratch(FG_WTYPE_Q8_0_P16, n_in, 1);
                for (int64_t t = 0; t < n_tok; t++) {
                    CHECK(fg_matmul(NULL, fast_isas[k], FG_WTYPE_Q8_0_P16, wp, n_in, n_out, x + t * n_in, 1, yt,
                                    sc1) == 0);
                    CHECK_MSG(memcmp(yt, y + GUARD + t * n_out, (size_t)n_out * sizeof *yt) == 0,
                              "p16 %s %lldx%lld: token %lld alone differs from its row in a batch of %lld",
                              fg_isa_name(fast_isas[k]), (long long)n_out, (long long)n_in, (long long)t,
                              (long long)n_tok);
                }
                free(sc1);
                free(yt);
            }
            else
                CHECK_MSG(memcmp(y1, y, (size_t)(ny + 2 * GUARD) * sizeof *y) == 0,
                          "p16 %s pool %d differs from one thread", fg_isa_name(fast_isas[k]), p);
        }
    }
    free(yref);
    free(yp);
    free(y);
    free(y1);
    free(scratch);
    free(x);
    free(wp);
    free(w);
}

static void test_q8_p16(void)
{
    const int64_t shapes[][2] = {{32, 16}, {64, 48}, {96, 32}, {256, 1024}, {1024, 256}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int64_t t = 1; t <= 13; t++)
            check_p16_case(shapes[s][0], shapes[s][1], t);
    check_p16_case(256, 64, 64);
    check_p16_case(1024, 256, 37);

    /* quantization bit for bit through one-hot rows (see test_q8_quant_exact) */
    const int64_t n_in = 64, n_out = 64, nb = n_in / 32;
    fg_block_q8_0 *w = calloc((size_t)(n_out * nb), sizeof *w);
    for (int64_t o = 0; o < n_out; o++) {
        for (int64_t b = 0; b < nb; b++)
            w[o * nb + b].d = fg_f32_to_f16(1.0f);
        w[o * nb + o / 32].qs[o % 32] = 1;
    }
    void *wp = aligned_alloc(64, fg_matmul_q8_p16_bytes(n_in, n_out));
    CHECK(fg_matmul_pack_q8_p16(w, n_in, n_out, wp) == 0);
    for (int64_t n_tok = 1; n_tok <= 5; n_tok += 2) {
        float *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
        for (int64_t i = 0; i < n_in * n_tok; i++)
            x[i] = rng_f() * 3.0f;
        x[5] = 0.5f; /* a tie */
        x[6] = 127.0f;
        void *scratch = fg_test_alloc_scratch(FG_WTYPE_Q8_0_P16, n_in, n_tok);
        float *yref = malloc((size_t)(n_out * n_tok) * sizeof *yref), *y = malloc((size_t)(n_out * n_tok) * sizeof *y);
        CHECK(fg_matmul(NULL, FG_ISA_SCALAR, FG_WTYPE_Q8_0, w, n_in, n_out, x, n_tok, yref, scratch) == 0);
        for (int k = 0; k < n_fast; k++) {
            CHECK(fg_matmul(pools[2], fast_isas[k], FG_WTYPE_Q8_0_P16, wp, n_in, n_out, x, n_tok, y, scratch) == 0);
            CHECK_MSG(memcmp(y, yref, (size_t)(n_out * n_tok) * sizeof *y) == 0,
                      "p16 %s: quantized activations differ at %lld tokens", fg_isa_name(fast_isas[k]),
                      (long long)n_tok);
        }
        free(yref);
        free(y);
        free(scratch);
        free(x);
    }
    free(wp);
    free(w);

    /* shapes that cannot be packed */
    CHECK(fg_matmul_q8_p16_bytes(64, 8) == 0);
    CHECK(fg_matmul_q8_p16_bytes(48, 16) == 0);
    float xx[64] = {0}, yy[24];
    void *sc = fg_test_alloc_scratch(FG_WTYPE_Q8_0_P16, 64, 1);
    uint8_t wq[24 * 68] = {0}, wq_packed[24 * 68];
    CHECK(fg_matmul_pack_q8_p16(wq, 64, 24, wq_packed) == -1);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_Q8_0_P16, wq, 64, 24, xx, 1, yy, sc) == -1); /* n_out not x16 */
    free(sc);
}

/* fg_matmul_many: several weights over the same x, each op's y bit-identical
 * to fg_matmul of that weight alone, for every ISA, pool and batch size (the
 * shared quantization must hold what every op's kernel reads: tiles, panels,
 * the packed layout). A mix of Q8_0, packed Q8_0 and F32; off AVX-512 the
 * packed op runs on the reference while the others do not. */
static void test_many(void)
{
    enum { N_IN = 96, N_OPS = 4, MAX_TOK = 64 };
    const int types[N_OPS] = {FG_WTYPE_Q8_0, FG_WTYPE_Q8_0_P16, FG_WTYPE_F32, FG_WTYPE_Q8_0};
    const int64_t outs[N_OPS] = {48, 32, 20, 16};
    void *w[N_OPS];
    for (int i = 0; i < N_OPS; i++) {
        size_t bytes;
        w[i] = make_weights(types[i] == FG_WTYPE_Q8_0_P16 ? FG_WTYPE_Q8_0 : types[i], N_IN, outs[i], &bytes);
        if (types[i] == FG_WTYPE_Q8_0_P16) {
            void *packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
            CHECK(fg_matmul_pack_q8_p16(w[i], N_IN, outs[i], packed) == 0);
            free(w[i]);
            w[i] = packed;
        }
    }
    float *x = malloc((size_t)N_IN * MAX_TOK * sizeof *x);
    for (int i = 0; i < N_IN * MAX_TOK; i++)
        x[i] = rng_f() * 2.0f;
    void *scratch = fg_test_alloc_scratch(FG_WTYPE_Q8_0, N_IN, MAX_TOK);
    const size_t scratch_bytes = fg_matmul_scratch_bytes(FG_WTYPE_Q8_0, N_IN, MAX_TOK);
    float *alone[N_OPS], *many[N_OPS];
    for (int i = 0; i < N_OPS; i++) {
        alone[i] = malloc((size_t)outs[i] * MAX_TOK * sizeof(float));
        many[i] = malloc((size_t)outs[i] * MAX_TOK * sizeof(float));
    }
    const int64_t toks[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 64};
    int bad = 0;
    for (int k = -1; k < n_fast; k++) {
        const fg_isa isa = k < 0 ? FG_ISA_SCALAR : fast_isas[k];
        for (size_t ti = 0; ti < sizeof toks / sizeof *toks; ti++)
            for (int p = 0; p < 4; p += 2) { /* no pool, 2 threads */
                const int64_t n_tok = toks[ti];
                fg_matmul_op ops[N_OPS];
                for (int i = 0; i < N_OPS; i++) {
                    CHECK(fg_matmul(pools[p], isa, types[i], w[i], N_IN, outs[i], x, n_tok, alone[i], scratch) == 0);
                    for (int64_t j = 0; j < outs[i] * n_tok; j++)
                        many[i][j] = NAN;
                    ops[i] = (fg_matmul_op){.wtype = types[i], .w = w[i], .n_out = outs[i], .y = many[i]};
                }
                memset(scratch, 0x5a, scratch_bytes); /* nothing left from the calls alone */
                CHECK(fg_matmul_many(pools[p], isa, ops, N_OPS, N_IN, x, n_tok, scratch) == 0);
                for (int i = 0; i < N_OPS; i++)
                    bad += memcmp(many[i], alone[i], (size_t)(outs[i] * n_tok) * sizeof(float)) != 0;
                /* two of the ops (one op is what fg_matmul itself runs) */
                for (int i = 1; i < 3; i++)
                    for (int64_t j = 0; j < outs[i] * n_tok; j++)
                        many[i][j] = NAN;
                memset(scratch, 0x5a, scratch_bytes);
                CHECK(fg_matmul_many(pools[p], isa, ops + 1, 2, N_IN, x, n_tok, scratch) == 0);
                for (int i = 1; i < 3; i++)
                    bad += memcmp(many[i], alone[i], (size_t)(outs[i] * n_tok) * sizeof(float)) != 0;
            }
    }
    CHECK_MSG(bad == 0, "fg_matmul_many differs from fg_matmul alone in %d products", bad);

    /* fg_matmul_q8_rows: x quantized once (by each ISA), then products over
     * scattered rows of it equal fg_matmul_many over those rows of x gathered */
    const size_t rows_bytes = fg_q8_rows_bytes(N_IN, MAX_TOK);
    void *rows_buf = aligned_alloc(64, (rows_bytes + 63) / 64 * 64);
    float *xg = malloc((size_t)N_IN * MAX_TOK * sizeof *xg);
    int rows[MAX_TOK];
    const fg_matmul_op q8_ops_src[3] = {{.wtype = types[0], .w = w[0], .n_out = outs[0]},
                                        {.wtype = types[1], .w = w[1], .n_out = outs[1]},
                                        {.wtype = types[3], .w = w[3], .n_out = outs[3]}};
    const int q8_idx[3] = {0, 1, 3};
    for (int kq = -1; kq < n_fast; kq++) {
        const fg_isa qisa = kq < 0 ? FG_ISA_SCALAR : fast_isas[kq];
        memset(rows_buf, 0x5a, rows_bytes);
        CHECK(fg_q8_rows_quantize(pools[2], qisa, x, N_IN, MAX_TOK, rows_buf) == 0);
        for (int k = -1; k < n_fast; k++) {
            const fg_isa isa = k < 0 ? FG_ISA_SCALAR : fast_isas[k];
            for (size_t ti = 0; ti < sizeof toks / sizeof *toks; ti++) {
                const int64_t n_tok = toks[ti];
                for (int64_t t = 0; t < n_tok; t++) {
                    rows[t] = (int)((t * 37 + 11) % MAX_TOK); /* scattered, repeats allowed */
                    memcpy(xg + t * N_IN, x + (int64_t)rows[t] * N_IN, N_IN * sizeof *xg);
                }
                fg_matmul_op ops[3];
                for (int i = 0; i < 3; i++) {
                    ops[i] = q8_ops_src[i];
                    ops[i].y = alone[q8_idx[i]];
                }
                CHECK(fg_matmul_many(NULL, isa, ops, 3, N_IN, xg, n_tok, scratch) == 0);
                for (int i = 0; i < 3; i++) {
                    ops[i].y = many[q8_idx[i]];
                    for (int64_t j = 0; j < outs[q8_idx[i]] * n_tok; j++)
                        many[q8_idx[i]][j] = NAN;
                }
                memset(scratch, 0x5a, scratch_bytes);
                CHECK(fg_matmul_q8_rows(pools[2], isa, ops, 3, N_IN, rows_buf, MAX_TOK, rows, n_tok, scratch) == 0);
                for (int i = 0; i < 3; i++)
                    bad += memcmp(many[q8_idx[i]], alone[q8_idx[i]],
                                  (size_t)(outs[q8_idx[i]] * n_tok) * sizeof(float)) != 0;
            }
        }
    }
    CHECK_MSG(bad == 0, "fg_matmul_q8_rows differs from fg_matmul_many on the gathered rows in %d products", bad);
    {
        fg_matmul_op ops[2] = {q8_ops_src[0], {.wtype = FG_WTYPE_F32, .w = w[2], .n_out = outs[2]}};
        ops[0].y = many[0];
        ops[1].y = many[2];
        rows[0] = 0;
        CHECK(fg_matmul_q8_rows(NULL, FG_ISA_AUTO, ops, 2, N_IN, rows_buf, MAX_TOK, rows, 1, scratch) == -1); /* f32 */
        rows[0] = MAX_TOK;
        CHECK(fg_matmul_q8_rows(NULL, FG_ISA_AUTO, ops, 1, N_IN, rows_buf, MAX_TOK, rows, 1, scratch) == -1);
        rows[0] = -1;
        CHECK(fg_matmul_q8_rows(NULL, FG_ISA_AUTO, ops, 1, N_IN, rows_buf, MAX_TOK, rows, 1, scratch) == -1);
        CHECK(fg_q8_rows_quantize(NULL, FG_ISA_AUTO, x, 48, 2, rows_buf) == -1); /* n_in not x32 */
        CHECK(fg_q8_rows_bytes(N_IN, 0) == 0);
    }
    free(rows_buf);
    free(xg);

    /* errors: no op, too many, one invalid op (nothing is written) */
    fg_matmul_op ops[FG_MATMUL_MAX_OPS + 1];
    for (int i = 0; i <= FG_MATMUL_MAX_OPS; i++)
        ops[i] = (fg_matmul_op){.wtype = FG_WTYPE_Q8_0, .w = w[0], .n_out = outs[0], .y = many[0]};
    CHECK(fg_matmul_many(NULL, FG_ISA_AUTO, ops, 0, N_IN, x, 1, scratch) == -1);
    CHECK(fg_matmul_many(NULL, FG_ISA_AUTO, ops, FG_MATMUL_MAX_OPS + 1, N_IN, x, 1, scratch) == -1);
    for (int64_t j = 0; j < outs[0]; j++)
        many[0][j] = NAN;
    ops[1] = (fg_matmul_op){.wtype = FG_WTYPE_Q8_0_P16, .w = w[1], .n_out = 24, .y = many[1]}; /* not x16 */
    CHECK(fg_matmul_many(NULL, FG_ISA_AUTO, ops, 2, N_IN, x, 1, scratch) == -1);
    ops[1] = (fg_matmul_op){.wtype = FG_WTYPE_Q8_0, .w = w[0], .n_out = outs[0], .y = NULL};
    CHECK(fg_matmul_many(NULL, FG_ISA_AUTO, ops, 2, N_IN, x, 1, scratch) == -1);
    bad = 0;
    for (int64_t j = 0; j < outs[0]; j++)
        bad += !isnan(many[0][j]);
    CHECK_MSG(bad == 0, "a failed fg_matmul_many wrote %d outputs", bad);

    for (int i = 0; i < N_OPS; i++) {
        free(w[i]);
        free(alone[i]);
        free(many[i]);
    }
    free(scratch);
    free(x);
}

/* A NaN in x propagates to that token's outputs for float weights; the other
 * tokens are unaffected. Inf likewise gives non-finite outputs. */
static void test_nan_propagation(void)
{
    const int64_t n_out = 7, n_tok = 3;
    const int64_t ins[2] = {64, 100};
    for (int ti = 0; ti < 3; ti++)
        for (int a = 0; a < 2; a++) {
            const int64_t n_in = ins[a];
            size_t wb;
            void *w = make_weights(wtypes[ti], n_in, n_out, &wb);
            float *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
            for (int64_t i = 0; i < n_in * n_tok; i++)
                x[i] = rng_f();
            x[n_in + n_in - 1] = NAN;  /* token 1, last element: in the tail for n_in = 100 */
            x[2 * n_in + 3] = INFINITY; /* token 2 */
            float y[21];
            void *scratch = fg_test_alloc_scratch(wtypes[ti], n_in, n_tok); /* BF16: x rounded to BF16 */
            for (int k = -1; k < n_fast; k++) {
                const fg_isa isa = k < 0 ? FG_ISA_SCALAR : fast_isas[k];
                CHECK(fg_matmul(pools[2], isa, wtypes[ti], w, n_in, n_out, x, n_tok, y, scratch) == 0);
                for (int64_t o = 0; o < n_out; o++) {
                    CHECK_MSG(isfinite(y[o]), "%s %s: token 0 not finite", fg_isa_name(isa), wtype_name(wtypes[ti]));
                    CHECK_MSG(isnan(y[n_out + o]), "%s %s: NaN did not propagate", fg_isa_name(isa),
                              wtype_name(wtypes[ti]));
                    CHECK_MSG(!isfinite(y[2 * n_out + o]), "%s %s: inf did not propagate", fg_isa_name(isa),
                              wtype_name(wtypes[ti]));
                }
            }
            free(scratch);
            free(x);
            free(w);
        }
}

/* Native BF16 (vdpbf16ps), where the CPU has it:
 * - x is rounded to BF16 round-to-nearest-even once, bit for bit as
 *   fg_f32_to_bf16: one-hot weight rows (1.0 at column o) read each rounded
 *   activation back exactly, over values with every low-half pattern, exact
 *   ties both ways, and the largest finite values that stay finite. Denormal
 *   activations come back as 0 (the instructions treat them as zero; matmul.h).
 * - each token alone gives its row of a batch bit for bit, for batch sizes
 *   that cover every tile shape, on 1 to 3 threads;
 * - a NULL scratch is an error (BF16 asks for scratch on every ISA). */
static void test_bf16_native(void)
{
    int native = -1;
    for (int k = 0; k < n_fast; k++)
        if (fg_matmul_bf16_native(fast_isas[k]))
            native = k;
    CHECK(!fg_matmul_bf16_native(FG_ISA_SCALAR) && !fg_matmul_bf16_native(FG_ISA_AVX2));
    if (native < 0) {
        fprintf(stderr, "test_matmul: no avx512_bf16 (or FG_NO_AVX512_BF16 set): native BF16 checks skipped\n");
        return;
    }
    const fg_isa isa = fast_isas[native];

    /* rounding, bit for bit */
    const int64_t n_in = 96, n_out = 96, n_tok = 3;
    uint16_t *w = calloc((size_t)(n_in * n_out), sizeof *w);
    for (int64_t o = 0; o < n_out; o++)
        w[o * n_in + o] = fg_f32_to_bf16(1.0f);
    float *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
    for (int64_t i = 0; i < n_in * n_tok; i++) {
        const uint32_t bits = (rng_u32() & 0x807fffffu) | ((uint32_t)(100 + rng_u32() % 56) << 23);
        memcpy(&x[i], &bits, 4);
    }
    /* ties to even both ways, just below and above a tie, the largest finite
     * values that stay finite, signed zeros; no infinity: it would make every
     * output of its token NaN through the zero weights (0 * inf) */
    const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f80ffffu, 0x3f807fffu, 0x7f7f7fffu,
                                0xff7f7fffu, 0x00000000u, 0x80000000u, 0x3f800001u, 0x3f808001u};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        memcpy(&x[i], &special[i], 4);
    const uint32_t denormal = 0x00400000u;
    memcpy(&x[n_in + 7], &denormal, 4);
    void *scratch = fg_test_alloc_scratch(FG_WTYPE_BF16, n_in, n_tok);
    float *y = malloc((size_t)(n_out * n_tok) * sizeof *y);
    CHECK(fg_matmul(pools[2], isa, FG_WTYPE_BF16, w, n_in, n_out, x, n_tok, y, scratch) == 0);
    int bad = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t o = 0; o < n_out; o++) {
            const float xv = x[t * n_in + o];
            const float want = (fabsf(xv) < 0x1p-126f) ? 0.0f : fg_bf16_to_f32(fg_f32_to_bf16(xv));
            const float got = y[t * n_out + o];
            if (!(got == want || (isnan(got) && isnan(want))) && bad++ < 5)
                fprintf(stderr, "  bf16 rounding: x %.9g (0x%04x) gives %.9g, want %.9g\n", xv,
                        (unsigned)fg_f32_to_bf16(xv), got, want);
        }
    CHECK_MSG(bad == 0, "%d activations not rounded to BF16 as fg_f32_to_bf16 does", bad);
    CHECK(fg_matmul(NULL, isa, FG_WTYPE_BF16, w, n_in, n_out, x, n_tok, y, NULL) == -1);
    free(y);
    free(scratch);
    free(x);
    free(w);

    /* batch invariance */
    const int64_t shapes[][2] = {{1024, 64}, {100, 33}, {31, 7}};
    const int64_t batches[] = {2, 3, 4, 5, 7, 8, 13, 17, 64};
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
        const int64_t ni = shapes[sh][0], no = shapes[sh][1];
        size_t bytes;
        void *wr = make_weights(FG_WTYPE_BF16, ni, no, &bytes);
        for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
            const int64_t nt = batches[bi];
            float *xb = malloc((size_t)(ni * nt) * sizeof *xb), *yb = malloc((size_t)(no * nt) * sizeof *yb);
            float *y1 = malloc((size_t)no * sizeof *y1);
            for (int64_t i = 0; i < ni * nt; i++)
                xb[i] = rng_f() * 4.0f;
            void *sb = fg_test_alloc_scratch(FG_WTYPE_BF16, ni, nt), *s1 = fg_test_alloc_scratch(FG_WTYPE_BF16, ni, 1);
            for (int p = 1; p <= 3; p++) {
                const int differ =
                    fg_test_batch_differs(pools[p], isa, FG_WTYPE_BF16, wr, ni, no, xb, nt, yb, sb, y1, s1);
                CHECK_MSG(differ == 0,
                          "bf16 %lldx%lld pool %d: %d of %lld tokens alone differ from their row in the batch",
                          (long long)no, (long long)ni, p, differ, (long long)nt);
            }
            free(sb);
            free(s1);
            free(xb);
            free(yb);
            free(y1);
        }
        free(wr);
    }
}

static void test_errors(void)
{
    float x[64] = {0}, y[4 + 2 * GUARD];
    const uint32_t c = FG_TEST_CANARY;
    for (int i = 0; i < 4 + 2 * GUARD; i++)
        memcpy(&y[i], &c, 4);
    float w[64 * 4] = {0};
    fg_block_q8_0 wq[8];
    memset(wq, 0, sizeof wq);
    void *scratch = fg_test_alloc_scratch(FG_WTYPE_Q8_0, 64, 1);
    float *yy = y + GUARD;

    CHECK(fg_matmul(NULL, FG_ISA_AUTO, 2, w, 64, 4, x, 1, yy, NULL) == -1);  /* Q4_1: not ours */
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, 99, w, 64, 4, x, 1, yy, NULL) == -1); /* unknown */
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, -1, w, 64, 4, x, 1, yy, NULL) == -1);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_Q8_0, wq, 48, 4, x, 1, yy, scratch) == -1); /* not x32 */
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_Q8_0, wq, 31, 4, x, 1, yy, scratch) == -1);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_Q8_0, wq, 64, 4, x, 1, yy, NULL) == -1); /* no scratch */
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_F32, w, 0, 4, x, 1, yy, NULL) == -1);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_F32, w, -32, 4, x, 1, yy, NULL) == -1);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_F32, w, 64, -1, x, 1, yy, NULL) == -1);
    CHECK(fg_matmul(NULL, (fg_isa)42, FG_WTYPE_F32, w, 64, 4, x, 1, yy, NULL) == -1);
    for (int i = 0; i < 4 + 2 * GUARD; i++) {
        uint32_t v;
        memcpy(&v, &y[i], 4);
        CHECK_MSG(v == FG_TEST_CANARY, "a failed call wrote y[%d]", i - GUARD);
    }
    /* empty products are no-ops */
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_F32, w, 64, 0, x, 1, yy, NULL) == 0);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_F32, w, 64, 4, x, 0, yy, NULL) == 0);

    CHECK(fg_wtype_row_bytes(FG_WTYPE_F32, 64) == 256);
    CHECK(fg_wtype_row_bytes(FG_WTYPE_F16, 64) == 128);
    CHECK(fg_wtype_row_bytes(FG_WTYPE_BF16, 64) == 128);
    CHECK(fg_wtype_row_bytes(FG_WTYPE_Q8_0, 64) == 68);
    CHECK(fg_wtype_row_bytes(FG_WTYPE_Q8_0, 40) == 0);
    CHECK(fg_wtype_row_bytes(15, 256) == 0); /* q8_K: an activation type, no product here */
    CHECK(fg_matmul_scratch_bytes(FG_WTYPE_F32, 64, 4) == 0);
    CHECK(fg_matmul_scratch_bytes(FG_WTYPE_Q8_0, 64, 4) >= 4 * 2 * sizeof(fg_block_q8_0));
    CHECK(fg_matmul_scratch_bytes(FG_WTYPE_Q8_0, 48, 4) == 0);
    CHECK(fg_isa_supported(FG_ISA_SCALAR) && fg_isa_supported(FG_ISA_AUTO));
    CHECK(fg_isa_supported(fg_isa_best()));
    CHECK(strcmp(fg_isa_name(FG_ISA_AVX512), "avx512") == 0);
    free(scratch);
}

/* fg_matmul_many with BF16 ops: those on fg_matmul_bf16_native share one
 * rounding of x; a call that mixes them with Q8_0 ops (both use the start of
 * scratch) runs the ops one by one. Every y bit-identical to fg_matmul alone,
 * with scratch the largest need of the ops' types. */
static void test_many_bf16(void)
{
    enum { N_OPS = 4, MAX_TOK = 19 };
    const int sets[3][N_OPS] = {{FG_WTYPE_BF16, FG_WTYPE_BF16, FG_WTYPE_F16, FG_WTYPE_BF16},
                                {FG_WTYPE_BF16, FG_WTYPE_Q8_0, FG_WTYPE_BF16, FG_WTYPE_F32},
                                {FG_WTYPE_Q8_0, FG_WTYPE_BF16, FG_WTYPE_Q8_0, FG_WTYPE_BF16}};
    const int64_t ins[3] = {72, 96, 64}; /* 72: the rounded rows' padding past n_in */
    const int64_t outs[N_OPS] = {40, 16, 24, 8};
    const int64_t toks[] = {1, 2, 5, 19};
    int bad = 0;
    for (int si = 0; si < 3; si++) {
        const int64_t n_in = ins[si];
        void *w[N_OPS];
        float *alone[N_OPS], *many[N_OPS];
        size_t scratch_bytes = 0, bytes;
        for (int i = 0; i < N_OPS; i++) {
            w[i] = make_weights(sets[si][i], n_in, outs[i], &bytes);
            alone[i] = malloc((size_t)outs[i] * MAX_TOK * sizeof(float));
            many[i] = malloc((size_t)outs[i] * MAX_TOK * sizeof(float));
            const size_t b = fg_matmul_scratch_bytes(sets[si][i], n_in, MAX_TOK);
            scratch_bytes = b > scratch_bytes ? b : scratch_bytes;
        }
        void *scratch = aligned_alloc(64, (scratch_bytes + 63) / 64 * 64);
        float *x = malloc((size_t)n_in * MAX_TOK * sizeof *x);
        for (int64_t i = 0; i < n_in * MAX_TOK; i++)
            x[i] = rng_f() * 2.0f;
        for (int k = -1; k < n_fast; k++) {
            const fg_isa isa = k < 0 ? FG_ISA_SCALAR : fast_isas[k];
            for (size_t ti = 0; ti < sizeof toks / sizeof *toks; ti++)
                for (int p = 0; p < 4; p += 2) {
                    const int64_t n_tok = toks[ti];
                    fg_matmul_op ops[N_OPS];
                    for (int i = 0; i < N_OPS; i++) {
                        CHECK(fg_matmul(pools[p], isa, sets[si][i], w[i], n_in, outs[i], x, n_tok, alone[i],
                                        scratch) == 0);
                        for (int64_t j = 0; j < outs[i] * n_tok; j++)
                            many[i][j] = NAN;
                        ops[i] = (fg_matmul_op){.wtype = sets[si][i], .w = w[i], .n_out = outs[i], .y = many[i]};
                    }
                    memset(scratch, 0x5a, scratch_bytes);
                    CHECK(fg_matmul_many(pools[p], isa, ops, N_OPS, n_in, x, n_tok, scratch) == 0);
                    for (int i = 0; i < N_OPS; i++)
                        bad += memcmp(many[i], alone[i], (size_t)(outs[i] * n_tok) * sizeof(float)) != 0;
                    /* no scratch where an op needs it: refused */
                    CHECK(fg_matmul_many(pools[p], isa, ops, N_OPS, n_in, x, n_tok, NULL) == -1);
                }
        }
        for (int i = 0; i < N_OPS; i++) {
            free(w[i]);
            free(alone[i]);
            free(many[i]);
        }
        free(scratch);
        free(x);
    }
    CHECK_MSG(bad == 0, "fg_matmul_many with BF16 ops differs from fg_matmul alone in %d products", bad);
    printf("fg_matmul_many with BF16 ops (BF16 native: %s): bit-identical to fg_matmul alone\n",
           fg_matmul_bf16_native(FG_ISA_AVX512) ? "yes" : "no");
}

int main(void)
{
    rng_seed(0x2545f4914f6cdd1dull);
    fg_test_matmul_setup("test_matmul");
    fprintf(stderr, "test_matmul: best ISA %s\n", fg_isa_name(fg_isa_best()));

    test_errors();
    test_q8_quant_exact();
    test_nan_propagation();
    test_bf16_native();
    test_shapes();
    test_q8_p16();
    test_many();
    test_many_bf16();

    for (int ti = 0; ti < 4; ti++)
        for (int k = 0; k < n_fast; k++)
            fprintf(stderr, "test_matmul: %-4s %-6s max normalised error %.3g\n", wtype_name(wtypes[ti]),
                    fg_isa_name(fast_isas[k]), worst[ti][k]);
    for (int k = 0; k < n_fast; k++)
        if (fg_matmul_bf16_native(fast_isas[k]))
            fprintf(stderr,
                    "test_matmul: bf16 %-6s is vdpbf16ps: error vs the reference up to %.3g of the BF16 bound\n",
                    fg_isa_name(fast_isas[k]), worst_bf16_bound);
    fg_test_matmul_teardown();
    return TEST_DONE("test_matmul");
}
