/* test_ds4_ops.c: the batched forms of V4's indexer and attention
 * (kernels/cpu/ds4_ops.h) give the bits of the row-by-row forms, so that a
 * token's scores and top-k do not depend on how many tokens or rows were
 * computed together: fg_ds4_dots (AVX-512 where the CPU has it) against the
 * plain loop for every tail shape, fg_ds4_index_scores against
 * fg_ds4_index_score, dots + fg_ds4_attn_update against fg_ds4_attn_tile,
 * fg_ds4_acc_rows against one fg_axpy per row, fg_ds4_transpose against the definition,
 * fg_ds4_top_k_tmp against fg_ds4_top_k with ties, signed zeros and NaN; the
 * pruned scoring's kernels against their plain definitions, its bound
 * against the exact scores, and its top-k against the exact top-k, ties
 * included, on inputs made to tie at the k-th row. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ds4_ops.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/numeric.h"
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

/* ---- the pruned scoring ---- */

/* n FP4 keys [n][bytes] from random rows (a few all-zero blocks, scales
 * spread over 2^-6 .. 2^6), and their f32 values [n][Di] */
static void prune_keys(int n, int Di, int dup, uint8_t *raw, size_t bytes, float *kf)
{
    float *x = malloc(sizeof(float) * (size_t)Di);
    for (int r = 0; r < n; r++) {
        if (dup > 1 && r % dup) { /* a copy of the row before: scores that tie */
            memcpy(raw + (size_t)r * bytes, raw + (size_t)(r - 1) * bytes, bytes);
        } else {
            const float mag = ldexpf(1.0f, (int)(rng_u32() % 13) - 6);
            for (int i = 0; i < Di; i++)
                x[i] = (i / 16) % 5 == 3 && r % 3 == 0 ? 0.0f : rng_f() * mag;
            fg_kv_quantize(FG_KV_FP4, x, Di, raw + (size_t)r * bytes);
        }
        fg_kv_dequantize(FG_KV_FP4, raw + (size_t)r * bytes, Di, kf + (size_t)r * Di);
    }
    free(x);
}

/* The pruned scoring of one query over n rows: its top-k into sel (count
 * returned), the kept count in *kept; -1 when the query is not pruned. */
static int prune_top_k(const float *q, const float *w, int Hi, int Di, const uint8_t *raw, size_t bytes,
                       const float *kf, int n, int k, int *sel, int *kept)
{
    int32_t *qp = malloc(sizeof(int32_t) * (size_t)Hi * Di / 2), *pk = malloc(sizeof(int32_t) * (size_t)Di / 2 * 64);
    float alpha[64], ab[2], *ps = malloc(sizeof(float) * (size_t)Di / 16 * 64);
    float *k1 = malloc(sizeof(float) * (size_t)(n + 64)), *pre = malloc(sizeof(float) * (size_t)n);
    float *lo = malloc(sizeof(float) * (size_t)n), *tmp = malloc(sizeof(float) * (size_t)n);
    float *ex = malloc(sizeof(float) * (size_t)n), *qt = malloc(sizeof(float) * (size_t)Hi * Di);
    float *dots = malloc(sizeof(float) * 4 * (size_t)Hi);
    uint64_t *mask = malloc(sizeof(uint64_t) * (size_t)(n / 64 + 1));
    int *keep = malloc(sizeof(int) * (size_t)n), got = -1;
    if (fg_ds4_prune_query(q, w, Hi, Di, qp, alpha, ab)) {
        for (int r0 = 0; r0 < n; r0 += 64) {
            const uint8_t *rows[64];
            const int nk = n - r0 < 64 ? n - r0 : 64;
            for (int j = 0; j < nk; j++)
                rows[j] = raw + (size_t)(r0 + j) * bytes;
            fg_ds4_prune_pack(rows, nk, Di, pk, ps, k1 + r0);
            fg_ds4_prune_scores(qp, alpha, w, Hi, Di, pk, ps, nk, pre + r0);
        }
        *kept = fg_ds4_prune_mark(pre, k1, ab, n, k, mask, lo, tmp);
        int m = 0;
        for (int r = 0; r < n; r++)
            if (mask[r / 64] >> (r % 64) & 1)
                keep[m++] = r;
        for (int h = 0; h < Hi; h++)
            for (int i = 0; i < Di; i++)
                qt[(size_t)i * Hi + h] = q[(size_t)h * Di + i];
        int *idx = malloc(sizeof(int) * (size_t)(m > 0 ? m : 1));
        for (int c = 0; c < m; c++)
            idx[c] = keep[c];
        fg_ds4_index_score_rows(qt, w, Hi, Di, kf, idx, m, dots, ex);
        got = fg_ds4_top_k_tmp(ex, m, k, sel, tmp);
        for (int x = 0; x < got; x++)
            sel[x] = keep[sel[x]];
        *kept = *kept == m ? m : -1;
        free(idx);
    }
    free(qp); free(pk); free(ps); free(k1); free(pre); free(lo); free(tmp); free(ex); free(qt); free(dots);
    free(mask); free(keep);
    return got;
}

/* the kernels against their definitions: the tile's pairs and scales, k1 an
 * upper bound of each l1 norm within 2^-10, the pre-scores' bits (the
 * fused multiply-adds in order), every pre-score within its bound of
 * the exact score, the scattered rows' exact scores, the marked rows */
static void test_prune_kernels(void)
{
    const int His[] = {1, 8, 9, 17, 64}, Dis[] = {16, 128}, ns[] = {1, 15, 16, 17, 63, 64};
    int bad_pack = 0, bad_k1 = 0, bad_pre = 0, bad_bound = 0, bad_rows = 0, bad_mark = 0, cases = 0;
    for (size_t ih = 0; ih < sizeof His / sizeof *His; ih++)
        for (size_t id = 0; id < sizeof Dis / sizeof *Dis; id++)
            for (size_t in = 0; in < sizeof ns / sizeof *ns; in++) {
                const int Hi = His[ih], Di = Dis[id], n = ns[in], G = Di / 2, NB = Di / 16;
                const size_t bytes = fg_kv_bytes(FG_KV_FP4, Di);
                uint8_t *raw = malloc(bytes * 64);
                float *kf = malloc(sizeof(float) * 64 * (size_t)Di), *q = malloc(sizeof(float) * (size_t)Hi * Di);
                float w[64], alpha[64], ab[2], ps[8 * 64], k1[64], pre[64], ex[64], qt[64 * 128], dots[4 * 64];
                int32_t qp[64 * 64], pk[64 * 64];
                prune_keys(n, Di, 1, raw, bytes, kf);
                for (int i = 0; i < Hi * Di; i++)
                    q[i] = rng_f() * (i % 7 == 0 ? 3.0f : 0.5f);
                for (int h = 0; h < Hi; h++)
                    w[h] = h % 4 == 3 ? -rng_f() : rng_f();
                CHECK(fg_ds4_prune_query(q, w, Hi, Di, qp, alpha, ab));
                const uint8_t *rows[64];
                for (int j = 0; j < n; j++)
                    rows[j] = raw + (size_t)j * bytes;
                fg_ds4_prune_pack(rows, n, Di, pk, ps, k1);
                for (int j = 0; j < 64; j++) {
                    double l1 = 0;
                    for (int i = 0; i < Di; i++) {
                        const uint8_t c = j < n ? (uint8_t)(raw[(size_t)j * bytes + i / 2] >> (i % 2 * 4) & 15) : 0;
                        const int v = (int)(2 * fg_e2m1_to_f32(c));
                        const int32_t got = pk[(size_t)(i / 2) * 64 + j];
                        bad_pack += (i % 2 ? got >> 16 : (int16_t)got) != v;
                        l1 += j < n ? fabs((double)kf[(size_t)j * Di + i]) : 0;
                    }
                    for (int b = 0; b < NB; b++)
                        bad_pack += fg_test_bits(ps[b * 64 + j]) !=
                                    fg_test_bits(j < n ? fg_e4m3_to_f32(raw[(size_t)j * bytes + G + b]) : 0.0f);
                    bad_k1 += !(k1[j] >= l1 && k1[j] <= l1 * (1 + 0x1p-10) + 0x1p-100);
                }
                fg_ds4_prune_scores(qp, alpha, w, Hi, Di, pk, ps, n, pre);
                for (int j = 0; j < n; j++) {
                    float s = 0;
                    for (int h = 0; h < Hi; h++) {
                        float acc = 0;
                        for (int b = 0; b < NB; b++) {
                            int32_t d = 0;
                            for (int g = 8 * b; g < 8 * b + 8; g++) {
                                const int32_t x = qp[h * G + g], y = pk[g * 64 + j];
                                d += (int16_t)x * (int16_t)y + (x >> 16) * (y >> 16);
                            }
                            acc = fmaf((float)d, ps[b * 64 + j], acc);
                        }
                        const float p = acc * alpha[h];
                        if (p > 0)
                            s = fmaf(w[h], p, s);
                    }
                    bad_pre += fg_test_bits(s) != fg_test_bits(pre[j]);
                    const float e = fg_ds4_index_score(q, w, kf + (size_t)j * Di, Hi, Di);
                    bad_bound += !(fabsf(pre[j] - e) <= ab[0] * k1[j] + ab[1]);
                }
                for (int h = 0; h < Hi; h++)
                    for (int i = 0; i < Di; i++)
                        qt[i * Hi + h] = q[h * Di + i];
                int idx[64];
                for (int c = 0; c < n; c++)
                    idx[c] = (c * 7) % n;
                fg_ds4_index_score_rows(qt, w, Hi, Di, kf, idx, n, dots, ex);
                for (int c = 0; c < n; c++)
                    bad_rows += fg_test_bits(ex[c]) != fg_test_bits(fg_ds4_index_score(q, w, kf + (size_t)idx[c] * Di, Hi, Di));
                if (n > 2) {
                    const int k = n / 3;
                    float lo[64], tmp[64], srt[64];
                    uint64_t mask;
                    const int m = fg_ds4_prune_mark(pre, k1, ab, n, k, &mask, lo, tmp);
                    for (int r = 0; r < n; r++) {
                        const float b = ab[0] * k1[r];
                        srt[r] = pre[r] - (b + ab[1]);
                    }
                    for (int a = 0; a < n; a++) /* descending: srt[k - 1] is the floor */
                        for (int c = a + 1; c < n; c++)
                            if (srt[c] > srt[a]) {
                                const float t = srt[a];
                                srt[a] = srt[c];
                                srt[c] = t;
                            }
                    uint64_t want = 0;
                    for (int r = 0; r < n; r++) {
                        const float b = ab[0] * k1[r];
                        want |= (uint64_t)!(pre[r] + (b + ab[1]) < srt[k - 1]) << r;
                    }
                    bad_mark += mask != want || m != __builtin_popcountll(want) || m < k;
                }
                cases++;
                free(raw);
                free(kf);
                free(q);
            }
    CHECK_MSG(bad_pack == 0, "fg_ds4_prune_pack: %d pairs or scales differ from the codes", bad_pack);
    CHECK_MSG(bad_k1 == 0, "fg_ds4_prune_pack: %d l1 norms not bounded within 2^-10", bad_k1);
    CHECK_MSG(bad_pre == 0, "fg_ds4_prune_scores: %d pre-scores differ from the definition's bits", bad_pre);
    CHECK_MSG(bad_bound == 0, "fg_ds4_prune_query: %d pre-scores outside their bound of the exact score", bad_bound);
    CHECK_MSG(bad_rows == 0, "fg_ds4_index_score_rows: %d scores differ from fg_ds4_index_score", bad_rows);
    CHECK_MSG(bad_mark == 0, "fg_ds4_prune_mark: %d of %d cases mark other rows", bad_mark, cases);
}

/* the pruned top-k is the exact top-k (fg_ds4_top_k over every exact score):
 * random keys (where most rows must drop out), keys repeated in runs so
 * that scores tie at the k-th row, all keys equal, a query of one large
 * channel, heads with zero queries or negative weights */
static void test_prune_top_k(void)
{
    const int ns[] = {600, 2048, 5000}, ks[] = {1, 7, 512};
    const int Hi = 8, Di = 128;
    const size_t bytes = fg_kv_bytes(FG_KV_FP4, Di);
    uint8_t *raw = malloc(bytes * 5000);
    float *kf = malloc(sizeof(float) * 5000 * Di), *ex = malloc(sizeof(float) * 5000), q[8 * 128], w[8];
    int a[512], b[512], bad = 0, cases = 0, pruned_random = 0, random_cases = 0, unpruned = 0;
    for (int kind = 0; kind < 5; kind++)
        for (size_t in = 0; in < sizeof ns / sizeof *ns; in++)
            for (size_t ik = 0; ik < sizeof ks / sizeof *ks; ik++) {
                const int n = ns[in], k = ks[ik];
                prune_keys(n, Di, kind == 1 ? 5 : kind == 2 ? n : 1, raw, bytes, kf);
                for (int i = 0; i < Hi * Di; i++)
                    q[i] = kind == 3 ? (i % Di == 5 ? 40.0f : rng_f() * 1e-3f) : rng_f();
                for (int h = 0; h < Hi; h++)
                    w[h] = kind == 4 ? (h % 2 ? -rng_f() : rng_f()) : rng_f() * 0.5f + 0.5f;
                if (kind == 4)
                    for (int i = 0; i < Di; i++)
                        q[2 * Di + i] = 0.0f;
                for (int r = 0; r < n; r++)
                    ex[r] = fg_ds4_index_score(q, w, kf + (size_t)r * Di, Hi, Di);
                const int na = fg_ds4_top_k(ex, n, k, a);
                int kept = 0;
                const int nb = prune_top_k(q, w, Hi, Di, raw, bytes, kf, n, k, b, &kept);
                if (nb < 0) {
                    unpruned++;
                    continue;
                }
                bad += na != nb || memcmp(a, b, sizeof(int) * (size_t)na) != 0 || kept < k;
                if (kind == 0 && k < n / 4) {
                    random_cases++;
                    pruned_random += kept < n / 2;
                }
                cases++;
            }
    CHECK_MSG(unpruned == 0, "fg_ds4_prune_query refused %d queries", unpruned);
    CHECK_MSG(bad == 0, "pruned top-k: %d of %d cases choose other rows than the exact top-k", bad, cases);
    CHECK_MSG(pruned_random == random_cases, "pruned top-k: %d of %d random cases dropped half the rows",
              pruned_random, random_cases);
    /* a query out of the bound's range is refused, not pruned */
    q[3] = INFINITY;
    int32_t qp[8 * 64];
    float alpha[8], ab[2];
    CHECK(!fg_ds4_prune_query(q, w, Hi, Di, qp, alpha, ab));
    q[3] = 0x1p-60f;
    for (int i = 0; i < Di; i++)
        q[i] = i == 3 ? 0x1p-60f : 0.0f;
    CHECK(!fg_ds4_prune_query(q, w, Hi, Di, qp, alpha, ab));
    free(raw);
    free(kf);
    free(ex);
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
    test_prune_kernels();
    test_prune_top_k();
    return TEST_DONE("test_ds4_ops");
}
