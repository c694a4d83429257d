/* test_quants.c: the legacy, K-quant and IQ weight types of kernels/cpu/quants.h.
 *
 * Format: the lattice types' tables have the definition's structure; the
 * reference dequantization of hand-built blocks equals the values
 * tests/reference/quant_vectors.py computed from the definitions
 * (tests/unit/data/quant_vectors.h), bit for bit; the products' decoded form
 * gives the dequantization's values on random blocks, within each type's
 * range of v; the fast kernels' AVX2 decoders write fg_quant_decode's bytes;
 * validation of scales (IQ1_M's spread one included) and
 * row lengths.
 *
 * Products (matmul.h): the scalar reference against a float64 dot of the
 * dequantized weights with the dequantized Q8_0 activations, and every fast
 * ISA this CPU has against the scalar reference, on every pool, both under
 * bounds derived from the arithmetic; a token's outputs the same bits alone
 * and in any batch; fg_matmul_many and fg_matmul_q8_rows with these types
 * beside Q8_0; error returns.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/iq_grids.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/quants.h"
#include "tests/unit/data/quant_vectors.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_matmul.h"
#include "tests/unit/quant_decode_avx2.h"

#define GUARD FG_TEST_GUARD
#define F32_UNIT 0x1p-24

static const int types[] = {FG_WTYPE_Q4_0, FG_WTYPE_Q4_1, FG_WTYPE_Q5_0, FG_WTYPE_Q5_1, FG_WTYPE_Q2_K,
                            FG_WTYPE_Q3_K, FG_WTYPE_Q4_K, FG_WTYPE_Q5_K, FG_WTYPE_Q6_K, FG_WTYPE_IQ4_NL,
                            FG_WTYPE_IQ4_XS, FG_WTYPE_IQ2_XXS, FG_WTYPE_IQ2_XS, FG_WTYPE_IQ2_S, FG_WTYPE_IQ3_XXS,
                            FG_WTYPE_IQ3_S, FG_WTYPE_IQ1_S, FG_WTYPE_IQ1_M};
#define N_TYPES ((int)(sizeof types / sizeof types[0]))

static double worst_bound[3]; /* [0]: scalar vs float64, [1 + k]: fast_isas[k] vs scalar */

static const char *tname(int t)
{
    for (size_t i = 0; i < sizeof quant_vectors / sizeof quant_vectors[0]; i++)
        if (quant_vectors[i].type == t)
            return quant_vectors[i].name;
    return "?";
}

/* Byte offsets of each type's F16 fields, as ggml-common.h places them; -1:
 * IQ1_M's scale, the top nibbles of its four u16 scale words at byte 48. */
static int f16_offsets(int t, int off[2])
{
    switch (t) {
    case FG_WTYPE_Q4_0: case FG_WTYPE_Q5_0: case FG_WTYPE_IQ4_NL: case FG_WTYPE_IQ4_XS: off[0] = 0; return 1;
    case FG_WTYPE_IQ2_XXS: case FG_WTYPE_IQ2_XS: case FG_WTYPE_IQ2_S: case FG_WTYPE_IQ3_XXS:
    case FG_WTYPE_IQ3_S: case FG_WTYPE_IQ1_S: off[0] = 0; return 1;
    case FG_WTYPE_Q4_1: case FG_WTYPE_Q5_1: case FG_WTYPE_Q4_K: case FG_WTYPE_Q5_K: off[0] = 0; off[1] = 2; return 2;
    case FG_WTYPE_Q2_K: off[0] = 80; off[1] = 82; return 2;
    case FG_WTYPE_Q3_K: off[0] = 108; return 1;
    case FG_WTYPE_Q6_K: off[0] = 208; return 1;
    case FG_WTYPE_IQ1_M: off[0] = -1; return 1;
    }
    return 0;
}

static void put_f16(uint8_t *blk, int off, uint16_t h)
{
    if (off >= 0) {
        memcpy(blk + off, &h, 2);
        return;
    }
    for (int k = 0; k < 4; k++)
        blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 15) | ((h >> (4 * k)) & 15) << 4);
}

/* n_rows rows of n_in random blocks: random bytes, F16 fields random finite values of about 2^-6. */
static uint8_t *make_weights(int t, int64_t n_in, int64_t n_rows)
{
    int elems, bytes, off[2];
    fg_wtype_block(t, &elems, &bytes);
    const int nf = f16_offsets(t, off);
    const int64_t nb = n_in / elems * n_rows;
    uint8_t *w = malloc((size_t)(nb * bytes) + 1);
    for (int64_t i = 0; i < nb * bytes; i++)
        w[i] = (uint8_t)rng_u32();
    for (int64_t b = 0; b < nb; b++)
        for (int k = 0; k < nf; k++) {
            put_f16(w + b * bytes, off[k], fg_f32_to_f16(rng_f() * 0.03f));
        }
    return w;
}

/* ---- the format ---- */

static void test_vectors(void)
{
    CHECK(sizeof quant_vectors / sizeof quant_vectors[0] == N_TYPES);
    for (size_t i = 0; i < sizeof quant_vectors / sizeof quant_vectors[0]; i++) {
        const quant_vector *qv = &quant_vectors[i];
        int elems, bytes;
        CHECK_MSG(fg_wtype_block(qv->type, &elems, &bytes) && elems == qv->elems && bytes == qv->bytes, "%s", qv->name);
        CHECK_MSG(fg_wtype_row_bytes(qv->type, qv->elems) == (size_t)qv->bytes, "%s", qv->name);
        for (int b = 0; b < 2; b++) {
            float y[256];
            CHECK(fg_wtype_dequantize_row(qv->type, qv->block[b], y, qv->elems) == 0);
            int bad = 0;
            for (int j = 0; j < qv->elems; j++)
                if (fg_test_bits(y[j]) != qv->values[b][j] && bad++ < 4)
                    fprintf(stderr, "  %s block %d value %d: %a, want bits %08x\n", qv->name, b, j, y[j],
                            qv->values[b][j]);
            CHECK_MSG(bad == 0, "%s block %d: %d values differ from the definition", qv->name, b, bad);
        }
    }
}

/* The lattice tables' structure as the definition states it: the sign table
 * is the 7 bits with an even-parity eighth; every grid's entries are distinct
 * and made of its few levels (a corrupted entry breaks one or the other). */
static int grid_ok(const void *tab, int n, int width, const int *levels, int n_levels)
{
    int bad = 0;
    for (int e = 0; e < n; e++) {
        uint64_t g = width == 8 ? ((const uint64_t *)tab)[e] : ((const uint32_t *)tab)[e];
        for (int j = 0; j < width; j++) {
            const int b = width == 8 && n == 2048 ? (int8_t)(g >> (8 * j)) : (int)((g >> (8 * j)) & 255);
            int hit = 0;
            for (int k = 0; k < n_levels; k++)
                hit |= b == levels[k];
            bad += !hit;
        }
        for (int f = 0; f < e; f++)
            bad += width == 8 ? ((const uint64_t *)tab)[f] == ((const uint64_t *)tab)[e]
                              : ((const uint32_t *)tab)[f] == ((const uint32_t *)tab)[e];
    }
    return bad == 0;
}

static void test_grids(void)
{
    for (int k = 0; k < 128; k++)
        CHECK_MSG(fg_iq_ksigns[k] == (k | (__builtin_popcount((unsigned)k) & 1) << 7), "ksigns %d", k);
    static const int l2[] = {8, 25, 43}, l3xxs[] = {4, 12, 20, 28, 36, 44, 52, 62},
                     l3s[] = {1, 3, 5, 7, 9, 11, 13, 15}, l1[] = {-1, 0, 1};
    CHECK(grid_ok(fg_iq2xxs_grid, 256, 8, l2, 3));
    CHECK(grid_ok(fg_iq2xs_grid, 512, 8, l2, 3));
    CHECK(grid_ok(fg_iq2s_grid, 1024, 8, l2, 3));
    CHECK(grid_ok(fg_iq3xxs_grid, 256, 4, l3xxs, 8));
    CHECK(grid_ok(fg_iq3s_grid, 512, 4, l3s, 8));
    CHECK(grid_ok(fg_iq1s_grid, 2048, 8, l1, 3));
}

/* The range of a type's decoded values v (quants.h). */
static void v_range(int t, int *lo, int *hi)
{
    switch (t) {
    case FG_WTYPE_IQ4_NL: case FG_WTYPE_IQ4_XS: *lo = -127; *hi = 113; return;
    case FG_WTYPE_IQ2_XXS: case FG_WTYPE_IQ2_XS: case FG_WTYPE_IQ2_S: *lo = -43; *hi = 43; return;
    case FG_WTYPE_IQ3_XXS: *lo = -62; *hi = 62; return;
    case FG_WTYPE_IQ3_S: *lo = -15; *hi = 15; return;
    case FG_WTYPE_IQ1_S: case FG_WTYPE_IQ1_M: *lo = -9; *hi = 9; return;
    }
    *lo = -32;
    *hi = 31;
}

/* s * v + m of the decoded form equals the dequantized value (== : the two
 * may differ only in the sign of a zero), v within the type's range. */
static void test_decode(void)
{
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int t = types[ti];
        int elems, bytes;
        fg_wtype_block(t, &elems, &bytes);
        enum { NB = 40 };
        uint8_t *w = make_weights(t, (int64_t)elems * NB, 1);
        float y[256], s[16], m[16];
        int8_t v[256];
        int bad = 0, range = 0, lo, hi;
        v_range(t, &lo, &hi);
        for (int b = 0; b < NB; b++) {
            CHECK(fg_wtype_dequantize_row(t, w + b * bytes, y, elems) == 0);
            CHECK(fg_quant_decode(t, w + b * bytes, 1, v, s, m) == 0);
            for (int i = 0; i < elems; i++) {
                const float r = s[i / 16] * (float)v[i] + m[i / 16];
                bad += !(r == y[i]);
                range += v[i] < lo || v[i] > hi;
                if (!fg_quant_has_min(t))
                    bad += m[i / 16] != 0.0f;
            }
        }
        CHECK_MSG(bad == 0 && range == 0, "%s: %d decoded values differ from the dequantization, %d out of range",
                  tname(t), bad, range);
        free(w);
    }
    CHECK(fg_quant_decode(FG_WTYPE_Q8_0, NULL, 0, NULL, NULL, NULL) == -1);
    CHECK(!fg_quant_decodes(FG_WTYPE_MXFP4) && !fg_quant_decodes(FG_WTYPE_F32) && !fg_quant_decodes(15));
}

/* The types whose decoded scale (or minimum) is an F16 field itself: the
 * scalar widening keeps a signalling NaN, F16C's quiets it, so only there may
 * two NaNs differ in that bit. Everywhere else a product of the field comes
 * first, which quiets it alike. */
static int scale_is_raw_f16(int t)
{
    return t == FG_WTYPE_Q4_0 || t == FG_WTYPE_Q4_1 || t == FG_WTYPE_Q5_0 || t == FG_WTYPE_Q5_1 ||
           t == FG_WTYPE_IQ4_NL;
}

/* Every type's AVX2 decoder against fg_quant_decode, byte for byte (values,
 * scales, minima), on random bytes everywhere (over 2001 blocks every grid
 * index and sign pattern occurs), the F16 fields random too (subnormals,
 * infinities, NaNs: validation rejects the last two, the decoders still read
 * them alike), a few set to the extremes; odd block counts, and nothing
 * written past the last block. */
static void test_decode_avx2(void)
{
    if (!fg_isa_supported(FG_ISA_AVX2)) {
        printf("test_quants: no AVX2 here, its decoders not compared\n");
        return;
    }
    static const uint16_t extremes[] = {0x7c00 /* inf */, 0xfc00, 0x7d01 /* signalling NaN */, 0xfe00,
                                        0x0001 /* smallest subnormal */, 0x83ff, 0x7bff /* largest */, 0x0000};
    static const int counts[] = {1, 3, 2001};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int t = types[ti];
        int elems, bytes, off[2];
        fg_wtype_block(t, &elems, &bytes);
        const int nf = f16_offsets(t, off);
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            const int n = counts[ci];
            uint8_t *w = malloc((size_t)n * (size_t)bytes);
            for (size_t i = 0; i < (size_t)n * (size_t)bytes; i++)
                w[i] = (uint8_t)rng_u32();
            for (int b = 0; b < n; b++)
                for (int k = 0; k < nf; k++)
                    put_f16(w + (size_t)b * (size_t)bytes, off[k],
                            b < (int)(sizeof extremes / sizeof extremes[0]) ? extremes[(b + k) % 8]
                                                                         : (uint16_t)rng_u32());
            const size_t nv = (size_t)n * (size_t)elems + 64, ns = (size_t)n * (size_t)elems / 16 + 16;
            int8_t *v[2];
            float *s[2], *m[2];
            for (int k = 0; k < 2; k++) {
                v[k] = malloc(nv);
                s[k] = malloc(ns * sizeof(float));
                m[k] = malloc(ns * sizeof(float));
                memset(v[k], 0xa5, nv); /* the tails past n blocks must keep it */
                memset(s[k], 0xa5, ns * sizeof(float));
                memset(m[k], 0xa5, ns * sizeof(float));
            }
            CHECK(fg_quant_decode(t, w, n, v[0], s[0], m[0]) == 0);
            CHECK_MSG(fg_test_qd_decode(t, w, n, v[1], s[1], m[1]), "%s: no AVX2 decoder", tname(t));
            int vbad = 0, sbad = 0;
            for (size_t i = 0; i < nv; i++)
                if (v[0][i] != v[1][i] && vbad++ < 4)
                    fprintf(stderr, "  %s %d blocks: value %zu: %d, AVX2 %d\n", tname(t), n, i, v[0][i], v[1][i]);
            for (size_t i = 0; i < 2 * ns; i++) {
                const float a = i < ns ? s[0][i] : m[0][i - ns], c = i < ns ? s[1][i] : m[1][i - ns];
                if (fg_test_bits(a) != fg_test_bits(c) && !(scale_is_raw_f16(t) && isnan(a) && isnan(c)) &&
                    sbad++ < 4)
                    fprintf(stderr, "  %s %d blocks: %s %zu: %a, AVX2 %a\n", tname(t), n, i < ns ? "s" : "m",
                            i % ns, a, c);
            }
            CHECK_MSG(vbad == 0 && sbad == 0, "%s, %d blocks: AVX2 decoder differs in %d values, %d scales/minima",
                      tname(t), n, vbad, sbad);
            for (int k = 0; k < 2; k++) {
                free(v[k]);
                free(s[k]);
                free(m[k]);
            }
            free(w);
        }
    }
    int8_t v[32];
    float s[2], m[2];
    const uint8_t blk[34] = {0};
    CHECK(!fg_test_qd_decode(FG_WTYPE_Q8_0, blk, 1, v, s, m) && !fg_test_qd_decode(FG_WTYPE_MXFP4, blk, 1, v, s, m));
}

static void test_validate(void)
{
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int t = types[ti];
        int elems, bytes, off[2];
        fg_wtype_block(t, &elems, &bytes);
        const int nf = f16_offsets(t, off);
        const int64_t n_in = elems * 3, rows = 4;
        uint8_t *w = make_weights(t, n_in, rows);
        int64_t r, b;
        CHECK_MSG(fg_wtype_validate_rows(t, w, n_in, rows, &r, &b) == 0 && r == -1 && b == -1, "%s", tname(t));
        for (int k = 0; k < nf; k++) {
            const uint16_t bad[2] = {0x7c00 /* inf */, 0xfe00 /* NaN */};
            for (int q = 0; q < 2; q++) {
                uint8_t *blk = w + (2 * 3 + 1) * bytes; /* row 2, block 1 */
                uint8_t keep[256];
                memcpy(keep, blk, (size_t)bytes);
                put_f16(blk, off[k], bad[q]);
                CHECK_MSG(fg_wtype_validate_rows(t, w, n_in, rows, &r, &b) == -1 && r == 2 && b == 1,
                          "%s field %d value %04x: %lld %lld", tname(t), k, bad[q], (long long)r, (long long)b);
                CHECK(fg_wtype_validate_rows(t, w, n_in, 2, NULL, NULL) == 0); /* rows 0, 1 only */
                memcpy(blk, keep, (size_t)bytes);
            }
        }
        /* a row that is not a whole number of blocks */
        CHECK(fg_wtype_row_bytes(t, n_in + 16) == 0);
        CHECK(fg_wtype_validate_rows(t, w, n_in + 16, rows, &r, &b) == -1 && r == -1 && b == -1);
        if (elems == 256)
            CHECK(fg_wtype_row_bytes(t, 32 * 9) == 0);
        CHECK(fg_wtype_validate_rows(t, NULL, n_in, 1, &r, &b) == -1);
        CHECK(fg_wtype_validate_rows(t, w, n_in, -1, &r, &b) == -1);
        free(w);
    }
}

/* ---- products ---- */

static double gamma_n(double h)
{
    return h * F32_UNIT / (1.0 - h * F32_UNIT);
}

/* Per output: S = sum over 32-groups g of |d_x(g)| * sum over halves h of
 * (|s| sum |v q| + |m| sum |q|), the magnitudes of the terms both sides sum,
 * and E = the float64 dot of the dequantized weights with the dequantized
 * activations (q * d_x, exact in float64).
 *
 * The reference: per group (s0 I0 + s1 I1 + m0 X0 + m1 X1) * d_x (exact
 * integers; a product, three additions, a product), the groups added in
 * order: every term passes through at most ng + 5 roundings (ng groups), so
 * |y_ref - exact| <= gamma(ng + 5) S; the dequantized weights are s v + m
 * rounded once, so |E - exact| <= gamma(1) S.
 * The fast kernels: s * d_x, one multiply-add of each integer lane into one
 * of 4 (2) accumulators (ng steps at most), the minima apart, then combining
 * accumulators (3), the lane reduction (4), one addition per chunk of 64
 * groups: at most ng + 10 + ng / 64 roundings.
 * Checked: |y_ref - E| <= 1.01 (gamma(ng + 5) + gamma(1)) S and
 * |y_fast - y_ref| <= 1.01 (gamma(ng + 5) + gamma(ng + 10 + ng / 64)) S. */
static void bounds(int t, const uint8_t *w, int64_t n_in, int64_t n_out, const float *x, int64_t n_tok, double *S,
                   double *E)
{
    int elems, bytes;
    fg_wtype_block(t, &elems, &bytes);
    const int64_t ng = n_in / 32;
    fg_block_q8_0 *xq = malloc((size_t)ng * sizeof *xq);
    float *wd = malloc((size_t)n_in * sizeof *wd);
    int8_t *v = malloc((size_t)n_in);
    float *s = malloc((size_t)(n_in / 16) * sizeof *s), *m = malloc((size_t)(n_in / 16) * sizeof *m);
    for (int64_t o = 0; o < n_out; o++) {
        const uint8_t *row = w + (size_t)o * fg_wtype_row_bytes(t, n_in);
        CHECK(fg_wtype_dequantize_row(t, row, wd, n_in) == 0);
        CHECK(fg_quant_decode(t, row, (int)(n_in / elems), v, s, m) == 0);
        for (int64_t tk = 0; tk < n_tok; tk++) {
            fg_quantize_row_q8_0(x + tk * n_in, xq, n_in);
            double sm = 0, e = 0;
            for (int64_t g = 0; g < ng; g++) {
                const double dx = fg_f16_to_f32(xq[g].d);
                for (int h = 0; h < 2; h++) {
                    double iv = 0, iq = 0;
                    for (int i = 16 * h; i < 16 * h + 16; i++) {
                        iv += fabs((double)v[g * 32 + i] * xq[g].qs[i]);
                        iq += abs(xq[g].qs[i]);
                        e += (double)wd[g * 32 + i] * (xq[g].qs[i] * dx);
                    }
                    sm += fabs(dx) * (fabs(s[2 * g + h]) * iv + fabs(m[2 * g + h]) * iq);
                }
            }
            S[tk * n_out + o] = sm;
            E[tk * n_out + o] = e;
        }
    }
    free(xq);
    free(wd);
    free(v);
    free(s);
    free(m);
}

static void check_case(int t, int64_t n_in, int64_t n_out, int64_t n_tok)
{
    uint8_t *w = make_weights(t, n_in, n_out);
    float *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = rng_f() * (1.0f + (float)((i / 32) % 5));
    void *scratch = fg_test_alloc_scratch(t, n_in, n_tok);
    const int64_t ny = n_out * n_tok, ng = n_in / 32;
    float *yref = fg_test_alloc_guarded(ny), *y = fg_test_alloc_guarded(ny);
    double *S = malloc((size_t)ny * sizeof *S), *E = malloc((size_t)ny * sizeof *E);
    bounds(t, w, n_in, n_out, x, n_tok, S, E);
    const double g_ref = 1.01 * (gamma_n((double)ng + 5) + gamma_n(1));
    const double g_fast = 1.01 * (gamma_n((double)ng + 5) + gamma_n((double)ng + 10 + (double)(ng / 64)));

    CHECK(fg_matmul(NULL, FG_ISA_SCALAR, t, w, n_in, n_out, x, n_tok, yref + GUARD, scratch) == 0);
    double over = 0;
    for (int64_t i = 0; i < ny; i++)
        over = fmax(over, fabs((double)yref[GUARD + i] - E[i]) / (g_ref * S[i] + 1e-300));
    worst_bound[0] = fmax(worst_bound[0], over);
    CHECK_MSG(over <= 1.0 && fg_test_guards_intact(yref, ny), "%s scalar %lldx%lld tok %lld: %.3g times the bound",
              tname(t), (long long)n_out, (long long)n_in, (long long)n_tok, over);
    CHECK(fg_matmul(pools[3], FG_ISA_SCALAR, t, w, n_in, n_out, x, n_tok, y + GUARD, scratch) == 0);
    CHECK_MSG(memcmp(y + GUARD, yref + GUARD, (size_t)ny * sizeof *y) == 0, "%s scalar on 3 threads differs", tname(t));

    for (int k = 0; k < n_fast; k++)
        for (int p = 1; p <= 3; p += 2) {
            CHECK(fg_matmul(pools[p], fast_isas[k], t, w, n_in, n_out, x, n_tok, y + GUARD, scratch) == 0);
            double ov = 0;
            int nonfinite = 0;
            for (int64_t i = 0; i < ny; i++) {
                nonfinite += !isfinite(y[GUARD + i]);
                ov = fmax(ov, fabs((double)y[GUARD + i] - yref[GUARD + i]) / (g_fast * S[i] + 1e-300));
            }
            worst_bound[1 + k] = fmax(worst_bound[1 + k], ov);
            CHECK_MSG(nonfinite == 0 && ov <= 1.0 && fg_test_guards_intact(y, ny),
                      "%s %s pool %d %lldx%lld tok %lld: %.3g times the derived bound (%d non-finite)", tname(t),
                      fg_isa_name(fast_isas[k]), p, (long long)n_out, (long long)n_in, (long long)n_tok, ov,
                      nonfinite);
        }
    free(S);
    free(E);
    free(yref);
    free(y);
    free(scratch);
    free(x);
    free(w);
}

static void test_shapes(void)
{
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int t = types[ti];
        int elems, bytes;
        fg_wtype_block(t, &elems, &bytes);
        /* one block; an odd number of groups; a chunk boundary (64 groups) crossed */
        const int64_t ins[3] = {elems, elems == 32 ? 96 : 768, elems == 32 ? 32 * 131 : 256 * 9};
        const int64_t outs[3] = {1, 19, 32}, toks[3] = {1, 3, 13};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                check_case(t, ins[a], outs[b], toks[(a + b) % 3]);
    }
}

static void test_batch_invariance(void)
{
    const int64_t batches[] = {2, 5, 8, 17};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int t = types[ti];
        const int64_t ni = 256 * 9, no = 21;
        uint8_t *w = make_weights(t, ni, no);
        for (size_t bi = 0; bi < sizeof batches / sizeof *batches; bi++) {
            const int64_t nt = batches[bi];
            float *xb = malloc((size_t)(ni * nt) * sizeof *xb), *yb = malloc((size_t)(no * nt) * sizeof *yb);
            float *y1 = malloc((size_t)no * sizeof *y1);
            for (int64_t i = 0; i < ni * nt; i++)
                xb[i] = rng_f() * 4.0f;
            void *sb = fg_test_alloc_scratch(t, ni, nt), *s1 = fg_test_alloc_scratch(t, ni, 1);
            for (int k = -1; k < n_fast; k++) {
                const fg_isa isa = k < 0 ? FG_ISA_SCALAR : fast_isas[k];
                const int differ = fg_test_batch_differs(pools[2], isa, t, w, ni, no, xb, nt, yb, sb, y1, s1);
                CHECK_MSG(differ == 0, "%s %s batch %lld: %d tokens alone differ from the batch", tname(t),
                          fg_isa_name(isa), (long long)nt, differ);
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

/* Two quant types and Q8_0 in one fg_matmul_many, and through
 * fg_matmul_q8_rows: each the bits of fg_matmul alone (on the gathered rows). */
static void test_many(void)
{
    enum { N_IN = 512, N_OPS = 3, MAX_TOK = 11 };
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int tq[N_OPS] = {types[ti], FG_WTYPE_Q8_0, types[(ti + 4) % N_TYPES]};
        const int64_t outs[N_OPS] = {24, 16, 9};
        uint8_t *w[N_OPS];
        for (int i = 0; i < N_OPS; i++) {
            if (tq[i] != FG_WTYPE_Q8_0) {
                w[i] = make_weights(tq[i], N_IN, outs[i]);
                continue;
            }
            w[i] = malloc(fg_wtype_row_bytes(FG_WTYPE_Q8_0, N_IN) * (size_t)outs[i]);
            for (int64_t b = 0; b < outs[i] * N_IN / 32; b++) {
                fg_block_q8_0 blk;
                blk.d = fg_f32_to_f16(0.01f);
                for (int j = 0; j < 32; j++)
                    blk.qs[j] = (int8_t)(rng_u32() % 255 - 127);
                memcpy(w[i] + b * 34, &blk.d, 2);
                memcpy(w[i] + b * 34 + 2, blk.qs, 32);
            }
        }
        const size_t sbytes = fg_matmul_scratch_bytes(tq[0], N_IN, MAX_TOK);
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
        void *rows_buf = aligned_alloc(64, (fg_q8_rows_bytes(N_IN, MAX_TOK) + 63) / 64 * 64);
        int bad = 0;
        for (int k = -1; k < n_fast; k++) {
            const fg_isa isa = k < 0 ? FG_ISA_SCALAR : fast_isas[k];
            CHECK(fg_q8_rows_quantize(pools[2], isa, x, N_IN, MAX_TOK, rows_buf) == 0);
            const int64_t n_tok = 7;
            fg_matmul_op ops[N_OPS];
            for (int i = 0; i < N_OPS; i++) {
                CHECK(fg_matmul(pools[2], isa, tq[i], w[i], N_IN, outs[i], x, n_tok, alone[i], scratch) == 0);
                ops[i] = (fg_matmul_op){.wtype = tq[i], .w = w[i], .n_out = outs[i], .y = many[i]};
            }
            CHECK(fg_matmul_many(pools[2], isa, ops, N_OPS, N_IN, x, n_tok, scratch) == 0);
            for (int i = 0; i < N_OPS; i++)
                bad += memcmp(many[i], alone[i], (size_t)(outs[i] * n_tok) * sizeof(float)) != 0;
            int rows[MAX_TOK];
            for (int64_t tk = 0; tk < n_tok; tk++) {
                rows[tk] = (int)((tk * 5 + 2) % MAX_TOK);
                memcpy(xg + tk * N_IN, x + (int64_t)rows[tk] * N_IN, N_IN * sizeof *xg);
            }
            for (int i = 0; i < N_OPS; i++)
                ops[i].y = alone[i];
            CHECK(fg_matmul_many(NULL, isa, ops, N_OPS, N_IN, xg, n_tok, scratch) == 0);
            for (int i = 0; i < N_OPS; i++)
                ops[i].y = many[i];
            CHECK(fg_matmul_q8_rows(pools[3], isa, ops, N_OPS, N_IN, rows_buf, MAX_TOK, rows, n_tok, scratch) == 0);
            for (int i = 0; i < N_OPS; i++)
                bad += memcmp(many[i], alone[i], (size_t)(outs[i] * n_tok) * sizeof(float)) != 0;
        }
        CHECK_MSG(bad == 0, "%s: fg_matmul_many / fg_matmul_q8_rows differ in %d products", tname(tq[0]), bad);
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
}

static void test_errors(void)
{
    uint8_t w[4 * 210] = {0};
    float x[512] = {0}, y[4];
    void *scratch = fg_test_alloc_scratch(FG_WTYPE_Q4_K, 512, 1);
    CHECK(fg_wtype_row_bytes(FG_WTYPE_Q4_K, 256 + 32) == 0);
    CHECK(fg_matmul_scratch_bytes(FG_WTYPE_Q4_K, 512, 1) > 0);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_Q4_K, w, 256 + 32, 1, x, 1, y, scratch) == -1);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_Q4_0, w, 48, 1, x, 1, y, scratch) == -1);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_Q6_K, w, 256, 1, x, 1, y, NULL) == -1); /* no scratch */
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, 15 /* q8_K */, w, 256, 1, x, 1, y, scratch) == -1);
    CHECK(fg_matmul(NULL, FG_ISA_AUTO, FG_WTYPE_Q6_K, w, 256, 1, x, 1, y, scratch) == 0 && y[0] == 0.0f);
    free(scratch);
}

int main(void)
{
    rng_seed(0x51ed27c1a3b5f9e7ull);
    fg_test_matmul_setup("test_quants");
    test_grids();
    test_vectors();
    test_decode();
    test_decode_avx2();
    test_validate();
    test_errors();
    test_shapes();
    test_batch_invariance();
    test_many();
    printf("test_quants: scalar vs float64 dequantized dot: max error / derived bound %.3g\n", worst_bound[0]);
    for (int k = 0; k < n_fast; k++)
        printf("test_quants: %-6s vs scalar: max error / derived bound %.3g\n", fg_isa_name(fast_isas[k]),
               worst_bound[1 + k]);
    fg_test_matmul_teardown();
    return TEST_DONE("test_quants");
}
