/* test_matmul_amx.c: the AMX kernels of kernels/cpu/matmul_amx.c (batched
 * Q8_0 and packed Q8_0 products) against the scalar reference, on every
 * shape class: token tails (tiles of 16 tokens and the rest), block tails
 * (an odd count of 32-blocks, and plain Q8_0's chunks of 16 blocks and the
 * rest) and row tails (plain Q8_0 rows past the last 16-row panel, which the
 * AVX-512 tiles compute), with pools of 1, 2 and 3 threads.
 *
 * Bits, not only tolerances (matmul.h): the AMX kernels apply the block
 * scales in the AVX-512 panel kernels' order, so
 *   - a packed product's token row equals the token computed alone (1 token:
 *     the AVX-512 kernel) bit for bit, at every batch size;
 *   - a plain Q8_0 product of 13+ tokens (AMX panels) equals, for the rows in
 *     whole panels, the packed product of the same rows bit for bit;
 *   - every pool gives the bits of one thread.
 * Without AMX (CPU, kernel permission, or FG_AMX not 1) the test says so and
 * runs the checks on the AVX-512 kernels, whose bits the AMX ones must give;
 * test_matmul_amx_emu runs them on emulated tiles. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_matmul.h"

#ifndef AMX_TEST_NAME
#define AMX_TEST_NAME "test_matmul_amx"
#endif
#ifndef AMX_TEST_MAIN
#define AMX_TEST_MAIN main
#endif

/* As test_matmul's TOL_Q8_0: the same exact integer block dots and scales,
 * only the f32 sum over blocks rounds in another order. */
#define TOL_Q8 1e-5
#define GUARD FG_TEST_GUARD

/* Random Q8_0 rows: every int8 value, -128 included; scales ~[2^-9, 2^-7]. */
static fg_block_q8_0 *q8_weights(int64_t n_in, int64_t n_out)
{
    const int64_t nb = n_in / FG_Q8_0_BLOCK;
    fg_block_q8_0 *w = malloc((size_t)(nb * n_out) * sizeof *w);
    for (int64_t i = 0; i < nb * n_out; i++) {
        w[i].d = fg_f32_to_f16(0x1p-8f * (1.5f + rng_f()));
        for (int k = 0; k < FG_Q8_0_BLOCK; k++)
            w[i].qs[k] = (int8_t)(rng_u32() & 0xff);
    }
    return w;
}

static double max_abs(const float *y, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(y[i]));
    return m;
}

/* fast against ref (both n floats past GUARD): normalised error, finite, guards. */
static int close_to(const float *fast, const float *ref, int64_t n)
{
    double err = 0;
    int finite = 1;
    for (int64_t i = 0; i < n; i++) {
        finite &= isfinite(fast[GUARD + i]) != 0;
        err = fmax(err, fabs((double)fast[GUARD + i] - ref[GUARD + i]));
    }
    return finite && fg_test_guards_intact((float *)fast, n) && err / (max_abs(ref + GUARD, n) + 1e-30) <= TOL_Q8;
}

static void check_case(int64_t n_in, int64_t n_out, int64_t n_tok)
{
    fg_block_q8_0 *w = q8_weights(n_in, n_out);
    float *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = rng_f();
    const int64_t ny = n_out * n_tok, n_pan = n_out / 16 * 16;
    void *sc = fg_test_alloc_scratch(FG_WTYPE_Q8_0, n_in, n_tok), *sc1 = fg_test_alloc_scratch(FG_WTYPE_Q8_0, n_in, 1);
    float *yref = fg_test_alloc_guarded(ny), *y = fg_test_alloc_guarded(ny), *y0 = fg_test_alloc_guarded(ny);
    CHECK(fg_matmul(NULL, FG_ISA_SCALAR, FG_WTYPE_Q8_0, w, n_in, n_out, x, n_tok, yref + GUARD, sc) == 0);

    /* plain Q8_0: tolerance, and every pool the bits of one thread */
    for (int p = 0; p < 4; p++) {
        CHECK(fg_matmul(pools[p], FG_ISA_AVX512, FG_WTYPE_Q8_0, w, n_in, n_out, x, n_tok, y + GUARD, sc) == 0);
        CHECK_MSG(close_to(y, yref, ny), "q8_0 pool %d %lldx%lld tok %lld: off the reference, non-finite or guard", p,
                  (long long)n_out, (long long)n_in, (long long)n_tok);
        if (p == 0)
            memcpy(y0, y, (size_t)(ny + 2 * GUARD) * sizeof *y);
        else
            CHECK_MSG(memcmp(y0, y, (size_t)(ny + 2 * GUARD) * sizeof *y) == 0,
                      "q8_0 pool %d %lldx%lld tok %lld differs from one thread", p, (long long)n_out, (long long)n_in,
                      (long long)n_tok);
    }

    /* packed: the whole panels of the same rows */
    if (n_pan > 0) {
        const int64_t npy = n_pan * n_tok;
        void *wp = aligned_alloc(64, (fg_matmul_q8_p16_bytes(n_in, n_pan) + 63) / 64 * 64);
        CHECK(fg_matmul_pack_q8_p16(w, n_in, n_pan, wp) == 0);
        float *yp = fg_test_alloc_guarded(npy), *ypref = fg_test_alloc_guarded(npy), *yt = malloc((size_t)n_pan * sizeof *yt);
        CHECK(fg_matmul(NULL, FG_ISA_SCALAR, FG_WTYPE_Q8_0, w, n_in, n_pan, x, n_tok, ypref + GUARD, sc) == 0);
        for (int p = 0; p < 4; p++) {
            CHECK(fg_matmul(pools[p], FG_ISA_AVX512, FG_WTYPE_Q8_0_P16, wp, n_in, n_pan, x, n_tok, yp + GUARD, sc) == 0);
            CHECK_MSG(close_to(yp, ypref, npy), "p16 pool %d %lldx%lld tok %lld: off the reference, non-finite or guard",
                      p, (long long)n_pan, (long long)n_in, (long long)n_tok);
            for (int64_t t = 0; t < n_tok; t++) {
                if (p == 0) { /* each token alone: the AVX-512 packed kernel */
                    CHECK(fg_matmul(NULL, FG_ISA_AVX512, FG_WTYPE_Q8_0_P16, wp, n_in, n_pan, x + t * n_in, 1, yt, sc1) == 0);
                    CHECK_MSG(memcmp(yt, yp + GUARD + t * n_pan, (size_t)n_pan * sizeof *yt) == 0,
                              "p16 %lldx%lld: token %lld alone differs from its row in a batch of %lld",
                              (long long)n_pan, (long long)n_in, (long long)t, (long long)n_tok);
                }
                /* plain Q8_0 on panels (13+ tokens) gives the packed kernel's bits */
                if (n_tok >= 13)
                    CHECK_MSG(memcmp(y0 + GUARD + t * n_out, yp + GUARD + t * n_pan, (size_t)n_pan * sizeof *yt) == 0,
                              "q8_0 %lldx%lld tok %lld: token %lld's panel rows differ from the packed product's",
                              (long long)n_out, (long long)n_in, (long long)n_tok, (long long)t);
            }
        }
        free(yt);
        free(yp);
        free(ypref);
        free(wp);
    }
    free(yref);
    free(y);
    free(y0);
    free(sc);
    free(sc1);
    free(x);
    free(w);
}

/* fg_matmul_many and fg_matmul_q8_rows reach the tiles with the shared
 * quantization: each op's y the bits of fg_matmul on that weight alone. */
static void check_many(int64_t n_in, int64_t n_tok)
{
    const int64_t n_a = 48, n_b = 64;
    fg_block_q8_0 *wa = q8_weights(n_in, n_a), *wb = q8_weights(n_in, n_b);
    void *wbp = aligned_alloc(64, fg_matmul_q8_p16_bytes(n_in, n_b));
    CHECK(fg_matmul_pack_q8_p16(wb, n_in, n_b, wbp) == 0);
    float *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = rng_f();
    void *sc = fg_test_alloc_scratch(FG_WTYPE_Q8_0, n_in, n_tok);
    float *ya = malloc((size_t)(n_a * n_tok) * sizeof *ya), *yb = malloc((size_t)(n_b * n_tok) * sizeof *yb);
    float *ya1 = malloc((size_t)(n_a * n_tok) * sizeof *ya), *yb1 = malloc((size_t)(n_b * n_tok) * sizeof *yb);
    CHECK(fg_matmul(pools[2], FG_ISA_AVX512, FG_WTYPE_Q8_0, wa, n_in, n_a, x, n_tok, ya1, sc) == 0);
    CHECK(fg_matmul(pools[2], FG_ISA_AVX512, FG_WTYPE_Q8_0_P16, wbp, n_in, n_b, x, n_tok, yb1, sc) == 0);
    const fg_matmul_op ops[2] = {{FG_WTYPE_Q8_0, wa, n_a, ya}, {FG_WTYPE_Q8_0_P16, wbp, n_b, yb}};
    CHECK(fg_matmul_many(pools[2], FG_ISA_AVX512, ops, 2, n_in, x, n_tok, sc) == 0);
    CHECK_MSG(memcmp(ya, ya1, (size_t)(n_a * n_tok) * sizeof *ya) == 0 &&
                  memcmp(yb, yb1, (size_t)(n_b * n_tok) * sizeof *yb) == 0,
              "many at %lld tokens differs from the products alone", (long long)n_tok);
    /* the same through activations quantized once, rows in reverse */
    void *rb = aligned_alloc(64, (fg_q8_rows_bytes(n_in, n_tok) + 63) / 64 * 64);
    int *rows = malloc((size_t)n_tok * sizeof *rows);
    float *xr = malloc((size_t)(n_in * n_tok) * sizeof *xr);
    for (int64_t t = 0; t < n_tok; t++) {
        rows[t] = (int)(n_tok - 1 - t);
        memcpy(xr + rows[t] * n_in, x + t * n_in, (size_t)n_in * sizeof *x);
    }
    CHECK(fg_q8_rows_quantize(pools[2], FG_ISA_AVX512, xr, n_in, n_tok, rb) == 0);
    CHECK(fg_matmul_q8_rows(pools[2], FG_ISA_AVX512, ops, 2, n_in, rb, n_tok, rows, n_tok, sc) == 0);
    CHECK_MSG(memcmp(ya, ya1, (size_t)(n_a * n_tok) * sizeof *ya) == 0 &&
                  memcmp(yb, yb1, (size_t)(n_b * n_tok) * sizeof *yb) == 0,
              "q8_rows at %lld tokens differs from the products alone", (long long)n_tok);
    free(xr);
    free(rows);
    free(rb);
    free(ya);
    free(yb);
    free(ya1);
    free(yb1);
    free(sc);
    free(x);
    free(wbp);
    free(wa);
    free(wb);
}

int AMX_TEST_MAIN(void);
int AMX_TEST_MAIN(void)
{
    if (!fg_isa_supported(FG_ISA_AVX512)) {
        fprintf(stderr, "%s: skipped: this CPU has no AVX-512 (VNNI)\n", AMX_TEST_NAME);
        return 77;
    }
    if (!fg_matmul_amx(FG_ISA_AVX512)) /* the same bits must hold there: the AMX kernels reproduce them */
        fprintf(stderr, "%s: AMX skipped: no AMX tiles here (no amx_tile/amx_int8, the kernel refused the tile "
                "state, or FG_AMX is not 1); the checks run on the AVX-512 kernels, and test_matmul_amx_emu runs "
                "them on emulated tiles\n", AMX_TEST_NAME);
    fg_test_matmul_setup(AMX_TEST_NAME);
    rng_seed(21);
    /* n_in: 1 block, 3 (odd), 17 (a chunk of 16 and one), 32 (two chunks);
     * n_out: one panel, three, 40 (two panels and 8 rows for the AVX-512 tiles), 256;
     * n_tok: below both thresholds, at the packed one (8), at the plain one (13),
     * one tile, a tile and 1, two tiles less 1, two and 1, four */
    const int64_t n_ins[] = {32, 96, 544, 1024}, n_outs[] = {16, 48, 40, 256},
                  n_toks[] = {1, 7, 8, 13, 16, 17, 31, 33, 64};
    for (size_t i = 0; i < sizeof n_ins / sizeof *n_ins; i++)
        for (size_t o = 0; o < sizeof n_outs / sizeof *n_outs; o++)
            for (size_t t = 0; t < sizeof n_toks / sizeof *n_toks; t++)
                check_case(n_ins[i], n_outs[o], n_toks[t]);
    check_many(544, 8);
    check_many(544, 40);
    fg_test_matmul_teardown();
    return TEST_DONE(AMX_TEST_NAME);
}
