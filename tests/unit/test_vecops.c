/* test_vecops.c: kernels/cpu/vecops.h against double-precision formulas. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/vecops.h"
#include "tests/unit/fg_test.h"


#define N 1000

/* fg_silu_mul_isa on AVX-512 (its own exp) against the expf reference: a
 * dense sweep of gates over [-100, 100] (the exp from e^100 to e^-100, the
 * results down into the subnormals) within 1e-6 relative, infinities and NaN
 * where the reference has them, and every value's result the same alone as
 * inside a longer row (no dependence on the tail mask or position). */
static void test_silu_isa(void)
{
    if (!fg_isa_supported(FG_ISA_AVX512)) {
        fprintf(stderr, "test_vecops: avx512 not supported here, SiLU kernel skipped\n");
        return;
    }
    enum { M = 200 * 256 + 1 + 8 };
    float *g = malloc(M * sizeof *g), *u = malloc(M * sizeof *u), *ref = malloc(M * sizeof *ref),
          *vec = malloc(M * sizeof *vec);
    for (int i = 0; i < M - 8; i++) {
        g[i] = -100.0f + (float)i / 256.0f;
        u[i] = i % 3 ? 1.0f : rng_f() * 4.0f;
    }
    const float special[8] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-30f, -1e-30f, -1e-45f};
    for (int i = 0; i < 8; i++) {
        g[M - 8 + i] = special[i];
        u[M - 8 + i] = 1.5f;
    }
    for (int i = 0; i < M; i++) {
        ref[i] = g[i];
        vec[i] = g[i];
    }
    fg_silu_mul(ref, u, M);
    fg_silu_mul_isa(FG_ISA_AVX512, vec, u, M);
    int bad = 0;
    double worst = 0.0;
    for (int i = 0; i < M; i++) {
        if (isnan(ref[i]) || isinf(ref[i])) {
            bad += isnan(ref[i]) ? !isnan(vec[i]) : vec[i] != ref[i];
            continue;
        }
        const double err = fabs((double)vec[i] - ref[i]);
        bad += !(err <= 1e-6 * fabs(ref[i]) + 1e-37);
        if (fabs(ref[i]) > 1e-30 && err / fabs(ref[i]) > worst)
            worst = err / fabs(ref[i]);
    }
    CHECK_MSG(bad == 0, "silu_mul avx512: %d values off the reference", bad);
    fprintf(stderr, "test_vecops: silu_mul avx512 max relative error %.3g\n", worst);
    /* alone (n = 1, masked) equals inside the row, for every tail length */
    bad = 0;
    for (int i = 0; i < M; i += 97) {
        float one = g[i];
        fg_silu_mul_isa(FG_ISA_AVX512, &one, u + i, 1);
        bad += memcmp(&one, &vec[i], sizeof one) != 0;
    }
    for (int n = 1; n <= 33; n++) {
        float row[33];
        memcpy(row, g + 1000, (size_t)n * sizeof *row);
        fg_silu_mul_isa(FG_ISA_AVX512, row, u + 1000, n);
        bad += memcmp(row, vec + 1000, (size_t)n * sizeof *row) != 0;
    }
    CHECK_MSG(bad == 0, "silu_mul avx512: %d results depend on the row around them", bad);
    /* the scalar ISA is the reference itself */
    memcpy(vec, g, M * sizeof *vec);
    fg_silu_mul_isa(FG_ISA_SCALAR, vec, u, M);
    CHECK(memcmp(vec, ref, M * sizeof *vec) == 0);
    free(g);
    free(u);
    free(ref);
    free(vec);
}

/* fg_rmsnorm_isa on AVX-512 (the squares summed in another order) against the
 * reference: within 1e-6 relative for every length 1 .. 40 and the model's
 * widths, with and without gain, in place the same as out of place. */
static void test_rmsnorm_isa(void)
{
    if (!fg_isa_supported(FG_ISA_AVX512))
        return;
    const int widths[] = {160, 384, 1000, 1024, 2816};
    float *x = malloc(2816 * sizeof *x), *w = malloc(2816 * sizeof *w), *ref = malloc(2816 * sizeof *ref),
          *vec = malloc(2816 * sizeof *vec);
    int bad = 0, cases = 0, same = 0;
    for (int k = 0; k < 40 + 5; k++) {
        const int n = k < 40 ? k + 1 : widths[k - 40];
        for (int i = 0; i < n; i++) {
            x[i] = rng_f() * (i % 7 ? 1.0f : 50.0f);
            w[i] = rng_f() + 1.5f;
        }
        for (int g = 0; g < 2; g++) {
            const float *gain = g ? w : NULL;
            fg_rmsnorm(ref, x, gain, n, 1e-6f);
            fg_rmsnorm_isa(FG_ISA_AVX512, vec, x, gain, n, 1e-6f);
            for (int i = 0; i < n; i++)
                bad += !(fabs((double)vec[i] - ref[i]) <= 1e-6 * fabs(ref[i]) + 1e-30);
            same += memcmp(vec, ref, (size_t)n * sizeof *vec) == 0;
            cases++;
            float *inplace = malloc((size_t)n * sizeof *inplace);
            memcpy(inplace, x, (size_t)n * sizeof *inplace);
            fg_rmsnorm_isa(FG_ISA_AVX512, inplace, inplace, gain, n, 1e-6f);
            bad += memcmp(inplace, vec, (size_t)n * sizeof *vec) != 0;
            free(inplace);
        }
    }
    CHECK_MSG(bad == 0, "rmsnorm avx512: %d values off the reference", bad);
    fprintf(stderr, "test_vecops: rmsnorm avx512 bit-identical to the reference in %d of %d rows\n", same, cases);
    free(x);
    free(w);
    free(ref);
    free(vec);
}

int main(void)
{
    rng_seed(0x6a09e667f3bcc909ull);
    float x[N], w[N], y[N], g[N], u[N];
    for (int i = 0; i < N; i++) {
        x[i] = rng_f() * 3.0f;
        w[i] = rng_f();
    }

    /* rmsnorm, with and without gain, and in place */
    double ss = 0.0;
    for (int i = 0; i < N; i++)
        ss += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(ss / N + 1e-6);
    fg_rmsnorm(y, x, w, N, 1e-6f);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += fabs(y[i] - x[i] * r * w[i]) > 1e-6 * (fabs(x[i] * r) + 1e-30);
    fg_rmsnorm(y, x, NULL, N, 1e-6f);
    for (int i = 0; i < N; i++)
        bad += fabs(y[i] - x[i] * r) > 1e-6 * fabs(x[i] * r) + 1e-30;
    for (int i = 0; i < N; i++)
        g[i] = x[i];
    fg_rmsnorm(g, g, NULL, N, 1e-6f);
    for (int i = 0; i < N; i++)
        bad += g[i] != y[i];
    CHECK_MSG(bad == 0, "rmsnorm: %d mismatches", bad);

    /* softmax: large values must not overflow (max-subtracted); sums to 1 */
    for (int i = 0; i < N; i++)
        g[i] = x[i] * 100.0f;
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < N; i++)
        mx = fmax(mx, g[i]);
    for (int i = 0; i < N; i++)
        sum += exp(g[i] - mx);
    double ref[N];
    for (int i = 0; i < N; i++)
        ref[i] = exp(g[i] - mx) / sum;
    fg_softmax(g, N);
    bad = 0;
    double total = 0.0;
    for (int i = 0; i < N; i++) {
        bad += !(fabs(g[i] - ref[i]) <= 1e-5 * ref[i] + 1e-30);
        total += g[i];
    }
    CHECK_MSG(bad == 0, "softmax: %d mismatches", bad);
    CHECK(fabs(total - 1.0) < 1e-5);
    float one = 42.0f;
    fg_softmax(&one, 1);
    CHECK(one == 1.0f);

    /* silu(g) * u, including large negative gates (no NaN) */
    for (int i = 0; i < N; i++) {
        g[i] = x[i] * 10.0f;
        u[i] = w[i];
    }
    g[0] = -200.0f;
    g[1] = 200.0f;
    float g0[N];
    for (int i = 0; i < N; i++)
        g0[i] = g[i];
    fg_silu_mul(g, u, N);
    bad = 0;
    for (int i = 0; i < N; i++) {
        const double e = g0[i] / (1.0 + exp(-(double)g0[i])) * u[i];
        bad += !(fabs(g[i] - e) <= 1e-6 * fabs(e) + 1e-30);
    }
    CHECK_MSG(bad == 0, "silu_mul: %d mismatches", bad);

    test_silu_isa();
    test_rmsnorm_isa();

    /* axpy */
    for (int i = 0; i < N; i++)
        y[i] = w[i];
    fg_axpy(y, 0.5f, x, N);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += y[i] != w[i] + 0.5f * x[i];
    CHECK(bad == 0);

    /* argmax: first of ties, NaN never wins */
    const float a[6] = {1.0f, 3.0f, NAN, 3.0f, -1.0f, 2.0f};
    CHECK(fg_argmax(a, 6) == 1);
    const float b[3] = {NAN, -5.0f, NAN};
    CHECK(fg_argmax(b, 3) == 1);
    const float c[2] = {NAN, NAN};
    CHECK(fg_argmax(c, 2) == 0);
    const float d[3] = {-INFINITY, -INFINITY, -3.0f};
    CHECK(fg_argmax(d, 3) == 2);
    CHECK(fg_argmax(a, 0) == -1);
    return TEST_DONE("test_vecops");
}
