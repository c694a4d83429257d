/* test_ds4_ops.c: the batched forms of V4's indexer and attention
 * (kernels/cpu/ds4_ops.h) give the bits of the row-by-row forms, so that a
 * token's scores and top-k do not depend on how many tokens or rows were
 * computed together: fg_ds4_dots (AVX-512 where the CPU has it) against the
 * plain loop for every tail shape, fg_ds4_index_scores against
 * fg_ds4_index_score, dots + fg_ds4_attn_update against fg_ds4_attn_tile,
 * fg_ds4_acc_rows against one fg_axpy per row, fg_ds4_transpose against the definition,
 * fg_ds4_top_k_tmp against fg_ds4_top_k with ties, signed zeros and NaN. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ds4_ops.h"
#include "kernels/cpu/vecops.h"
#include "tests/unit/fg_test.h"

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_f() * scale;
}

/* every (na, nb, D) shape, strided, against s = 0; s += a * b per dot; the
 * output's padding (ldo > nb) untouched */
static void test_dots(void)
{
    const int nas[] = {1, 2, 3, 4, 5, 7, 8, 9}, nbs[] = {1, 15, 16, 17, 48, 63, 64, 65, 130};
    const int Ds[] = {1, 7, 32, 128, 256};
    int bad = 0, guard = 0;
    for (size_t ia = 0; ia < sizeof nas / sizeof *nas; ia++)
        for (size_t ib = 0; ib < sizeof nbs / sizeof *nbs; ib++)
            for (size_t id = 0; id < sizeof Ds / sizeof *Ds; id++) {
                const int na = nas[ia], nb = nbs[ib], D = Ds[id], lda = D + 3, ldb = nb + 5, ldo = nb + 2;
                float *a = malloc(sizeof(float) * (size_t)na * lda), *bt = malloc(sizeof(float) * (size_t)D * ldb);
                float *o = malloc(sizeof(float) * (size_t)na * ldo);
                fill(a, (size_t)na * lda, 2.0f);
                fill(bt, (size_t)D * ldb, 1.5f);
                for (int i = 0; i < na * ldo; i++)
                    o[i] = 12345.0f;
                fg_ds4_dots(a, na, lda, bt, ldb, nb, D, o, ldo);
                for (int x = 0; x < na; x++) {
                    for (int y = 0; y < nb; y++) {
                        float s = 0;
                        for (int i = 0; i < D; i++)
                            s += a[(size_t)x * lda + i] * bt[(size_t)i * ldb + y];
                        bad += fg_test_bits(s) != fg_test_bits(o[(size_t)x * ldo + y]);
                    }
                    for (int y = nb; y < ldo; y++)
                        guard += o[(size_t)x * ldo + y] != 12345.0f;
                }
                free(a);
                free(bt);
                free(o);
            }
    CHECK_MSG(bad == 0, "fg_ds4_dots: %d dots differ from the plain loop's bits", bad);
    CHECK_MSG(guard == 0, "fg_ds4_dots: %d writes past nb", guard);
}

/* the indexer's batched score = the row-by-row score, bit for bit, for row
 * counts across the vector tails; heads with negative dots drop out */
static void test_index_scores(void)
{
    enum { HI = 8, DI = 128, N = 77 };
    float *q = malloc(sizeof(float) * HI * DI), w[HI], *keys = malloc(sizeof(float) * N * DI);
    float *kt = malloc(sizeof(float) * DI * N), dots[HI * N], out[N];
    fill(q, HI * DI, 1.0f);
    fill(w, HI, 1.0f);
    fill(keys, (size_t)N * DI, 1.0f);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < DI; i++)
            kt[(size_t)i * N + j] = keys[(size_t)j * DI + i];
    int bad = 0;
    for (int n = 1; n <= N; n += 9) {
        fg_ds4_index_scores(q, w, kt, N, n, HI, DI, dots, out);
        for (int j = 0; j < n; j++)
            bad += fg_test_bits(out[j]) != fg_test_bits(fg_ds4_index_score(q, w, keys + (size_t)j * DI, HI, DI));
    }
    CHECK_MSG(bad == 0, "fg_ds4_index_scores: %d scores differ from fg_ds4_index_score's bits", bad);
    free(q);
    free(keys);
    free(kt);
}

/* the forward's attention step (dots of the transposed tile, scaled, then
 * fg_ds4_attn_update) = fg_ds4_attn_tile over two tiles */
static void test_attn(void)
{
    enum { D = 96, NK = 64 };
    float q[D], keys[NK * D], kt[D * NK], lg[NK], lg2[NK], acc[D], acc2[D];
    fill(q, D, 1.0f);
    fill(keys, NK * D, 1.0f);
    for (int k = 0; k < NK; k++)
        for (int i = 0; i < D; i++)
            kt[i * NK + k] = keys[k * D + i];
    const float scale = 1.0f / sqrtf((float)D);
    float m = -INFINITY, l = 0, m2 = -INFINITY, l2 = 0;
    memset(acc, 0, sizeof acc);
    memset(acc2, 0, sizeof acc2);
    for (int rep = 0; rep < 2; rep++) {
        const int n = rep ? 37 : NK;
        fg_ds4_attn_tile(q, keys, n, D, scale, &m, &l, acc, lg);
        fg_ds4_dots(q, 1, D, kt, NK, n, D, lg2, NK);
        for (int k = 0; k < n; k++)
            lg2[k] *= scale;
        fg_ds4_attn_update(lg2, keys, n, D, &m2, &l2, acc2);
    }
    int bad = fg_test_bits(m) != fg_test_bits(m2) || fg_test_bits(l) != fg_test_bits(l2);
    for (int i = 0; i < D; i++)
        bad += fg_test_bits(acc[i]) != fg_test_bits(acc2[i]);
    CHECK_MSG(bad == 0, "dots + fg_ds4_attn_update: %d values differ from fg_ds4_attn_tile's", bad);
}

/* the value accumulation = one axpy per row in order, for widths across the
 * vector tails */
static void test_acc_rows(void)
{
    const int Ds[] = {1, 17, 64, 96, 100, 256};
    enum { N = 64 };
    float *rows = malloc(sizeof(float) * N * 256), p[N], a[256], b[256];
    fill(rows, (size_t)N * 256, 1.0f);
    fill(p, N, 1.0f);
    int bad = 0;
    for (size_t id = 0; id < sizeof Ds / sizeof *Ds; id++) {
        const int D = Ds[id];
        for (int n = 1; n <= N; n += 21) {
            fill(a, (size_t)D, 3.0f);
            memcpy(b, a, sizeof(float) * (size_t)D);
            fg_ds4_acc_rows(a, p, rows, n, D);
            for (int k = 0; k < n; k++)
                fg_axpy(b, p[k], rows + (size_t)k * D, D);
            for (int i = 0; i < D; i++)
                bad += fg_test_bits(a[i]) != fg_test_bits(b[i]);
        }
    }
    CHECK_MSG(bad == 0, "fg_ds4_acc_rows: %d values differ from the axpy sequence", bad);
    free(rows);
}

/* the selection top-k = the insertion top-k: the same rows in the same
 * order, on distinct scores, heavy ties (signed zeros among them) and NaN */
static void test_top_k(void)
{
    const int ns[] = {1, 2, 31, 100, 1000, 4099, 16384}, ks[] = {1, 5, 32, 512, 700, 5000};
    float *s = malloc(sizeof(float) * 16384), *tmp = malloc(sizeof(float) * 16384);
    int *a = malloc(sizeof(int) * 5000), *b = malloc(sizeof(int) * 5000);
    int bad = 0, cases = 0;
    for (int kind = 0; kind < 3; kind++)
        for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
            for (size_t ik = 0; ik < sizeof ks / sizeof *ks; ik++) {
                const int n = ns[in], k = ks[ik];
                for (int i = 0; i < n; i++) {
                    if (kind == 0)
                        s[i] = rng_f();
                    else {
                        const float vals[5] = {-1.0f, -0.0f, 0.0f, 0.5f, 2.0f};
                        s[i] = vals[rng_u32() % 5];
                    }
                }
                if (kind == 2 && n > 1)
                    s[rng_u32() % (uint32_t)n] = NAN;
                const int na = fg_ds4_top_k(s, n, k, a), nb = fg_ds4_top_k_tmp(s, n, k, b, tmp);
                bad += na != nb || memcmp(a, b, sizeof(int) * (size_t)(na < nb ? na : nb)) != 0;
                cases++;
            }
    CHECK_MSG(bad == 0, "fg_ds4_top_k_tmp: %d of %d cases differ from fg_ds4_top_k", bad, cases);
    free(s);
    free(tmp);
    free(a);
    free(b);
}

/* fg_ds4_transpose moves every value to its place (AVX-512 by 16 x 16
 * blocks where the CPU has it): row counts and widths around the block size,
 * a strided destination whose padding stays untouched */
static void test_transpose(void)
{
    const int ns[] = {1, 5, 15, 16, 17, 33, 64, 130}, Ds[] = {1, 7, 16, 31, 128, 256};
    int bad = 0, guard = 0;
    for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
        for (size_t id = 0; id < sizeof Ds / sizeof *Ds; id++) {
            const int n = ns[in], D = Ds[id], ld = n + 3;
            float *x = malloc(sizeof(float) * (size_t)n * D), *xt = malloc(sizeof(float) * (size_t)D * ld);
            fill(x, (size_t)n * D, 1.0f);
            for (int i = 0; i < D * ld; i++)
                xt[i] = 1234.5f;
            fg_ds4_transpose(x, n, D, xt, ld);
            for (int d = 0; d < D; d++) {
                for (int k = 0; k < n; k++)
                    bad += fg_test_bits(xt[(size_t)d * ld + k]) != fg_test_bits(x[(size_t)k * D + d]);
                for (int k = n; k < ld; k++)
                    guard += xt[(size_t)d * ld + k] != 1234.5f;
            }
            free(x);
            free(xt);
        }
    CHECK_MSG(bad == 0, "fg_ds4_transpose: %d values misplaced", bad);
    CHECK_MSG(guard == 0, "fg_ds4_transpose: %d padding values written", guard);
}

int main(void)
{
    rng_seed(0x3c6ef372fe94f82bull);
    test_dots();
    test_index_scores();
    test_attn();
    test_acc_rows();
    test_transpose();
    test_top_k();
    return TEST_DONE("test_ds4_ops");
}
