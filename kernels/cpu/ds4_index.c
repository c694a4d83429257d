/* ds4_index.c: the V4 indexer's scores and top-k (ds4_ops.h). */
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/ds4_dots_isa.h"
#include "kernels/cpu/ds4_ops.h"
#include "kernels/cpu/matmul.h"

float fg_ds4_index_score(const float *q, const float *w, const float *k, int Hi, int Di)
{
    double s = 0;
    for (int h = 0; h < Hi; h++) {
        float d = 0;
        for (int i = 0; i < Di; i++)
            d += q[(size_t)h * Di + i] * k[i];
        if (d > 0)
            s += (double)d * w[h];
    }
    return (float)s;
}

void fg_ds4_index_scores(const float *q, const float *w, const float *kt, int ldk, int n, int Hi, int Di,
                         float *dots, float *out)
{
    fg_ds4_dots(q, Hi, Di, kt, ldk, n, Di, dots, n);
    if (fg_isa_best() == FG_ISA_AVX512) {
        fg_ds4_head_sum_avx512(dots, w, n, Hi, out);
        return;
    }
    for (int j = 0; j < n; j++) {
        double s = 0; /* as fg_ds4_index_score: the heads in order, in double */
        for (int h = 0; h < Hi; h++) {
            const float d = dots[(size_t)h * n + j];
            if (d > 0)
                s += (double)d * w[h];
        }
        out[j] = (float)s;
    }
}

int fg_ds4_top_k(const float *s, int n, int k, int *out)
{
    if (k >= n) {
        for (int i = 0; i < n; i++)
            out[i] = i;
        return n;
    }
    /* out[0..k) kept sorted by (score desc, index asc); insertion (k is small). */
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m == k && !(s[i] > s[out[k - 1]]))
            continue;
        int at = m < k ? m++ : k - 1;
        while (at > 0 && s[i] > s[out[at - 1]]) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = i;
    }
    /* ascending index order (the order keys join the softmax) */
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int tmp = out[j];
            out[j] = out[j - 1];
            out[j - 1] = tmp;
        }
    return k;
}

/* f32 order as unsigned order; -0 is taken as +0 (they compare equal). */
static inline uint32_t ord_of(float x)
{
    uint32_t u;
    x += 0.0f;
    memcpy(&u, &x, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static inline float float_of(uint32_t u)
{
    u = u & 0x80000000u ? u & 0x7fffffffu : ~u;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#define NBIN 2048 /* radix bins per pass (11 bits) */

/* The bin holding the want-th highest key (1-based) of counts h[4][NBIN]
 * (four interleaved histograms: a run of keys in one bin then increments
 * four counters in turn instead of waiting on one), the count above it
 * subtracted from *want; h cleared for the next pass. */
static uint32_t bin_of(int (*h)[NBIN], int nbins, int *want)
{
    int b = nbins - 1;
    for (;; b--) {
        const int c = h[0][b] + h[1][b] + h[2][b] + h[3][b];
        if (c >= *want)
            break;
        *want -= c;
    }
    memset(h, 0, sizeof(int[4][NBIN]));
    return (uint32_t)b;
}

/* The k-th highest of s[0..n) (1 <= k <= n, no NaN) and the count strictly
 * above it: radix selection on the order-preserving keys, the top 11 bits
 * counted from s, the keys of the bin that holds it kept in u (scratch [n])
 * and narrowed by the next 11 bits and the last 10 (no branch on the data). */
static float kth_highest(const float *s, int n, int k, uint32_t *u, int *above)
{
    int h[4][NBIN] = {{0}};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++)
            h[j][ord_of(s[i + j]) >> 21]++;
    for (; i < n; i++)
        h[0][ord_of(s[i]) >> 21]++;
    int want = k;
    const uint32_t b1 = bin_of(h, NBIN, &want);
    int m = 0;
    for (i = 0; i < n; i++) {
        const uint32_t x = ord_of(s[i]);
        u[m] = x;
        m += x >> 21 == b1;
    }
    for (i = 0; i + 4 <= m; i += 4)
        for (int j = 0; j < 4; j++)
            h[j][(u[i + j] >> 10) & (NBIN - 1)]++;
    for (; i < m; i++)
        h[0][(u[i] >> 10) & (NBIN - 1)]++;
    const uint32_t b2 = bin_of(h, NBIN, &want);
    int w = 0;
    for (i = 0; i < m; i++) {
        const uint32_t x = u[i];
        u[w] = x;
        w += ((x >> 10) & (NBIN - 1)) == b2;
    }
    for (i = 0; i + 4 <= w; i += 4)
        for (int j = 0; j < 4; j++)
            h[j][u[i + j] & 1023]++;
    for (; i < w; i++)
        h[0][u[i] & 1023]++;
    const uint32_t b3 = bin_of(h, 1024, &want);
    *above = k - want;
    return float_of(b1 << 21 | b2 << 10 | b3);
}

int fg_ds4_top_k_tmp(const float *s, int n, int k, int *out, float *tmp)
{
    if (k >= n || k < 1)
        return fg_ds4_top_k(s, n, k, out);
    int nan = 0;
    for (int i = 0; i < n; i++)
        nan |= s[i] != s[i];
    if (nan)
        return fg_ds4_top_k(s, n, k, out);
    /* the rows above the k-th score, then those equal to it from the lowest index until k */
    int above;
    const float v = kth_highest(s, n, k, (uint32_t *)(void *)tmp, &above);
    int m = 0, ties = k - above;
    for (int i = 0; i < n && m < k; i++) {
        const int eq = s[i] == v;
        out[m] = i;
        m += (s[i] > v) | (eq & (ties > 0));
        ties -= eq;
    }
    return m;
}
