/* ds4_index.c: the V4 indexer's scores and top-k (ds4_ops.h). */
#include <math.h>
#include <stdbool.h>
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

/* The k-th highest of s[0..n) (1 <= k < n, no NaN) by radix selection on the
 * order-preserving keys: the top 11 bits counted over all rows, the next 11
 * and the last 10 over the rows of the bin that holds it (no branch on the
 * data). idx ([n] scratch) holds that bin's m rows from the front and the
 * higher bins' *above rows from the back, each in index order; *want: how
 * many of the rows equal to the k-th are in the top k. */
static float kth_select(const float *s, int n, int k, int *idx, int *m_out, int *above, int *want_out)
{
    int h[4][NBIN] = {{0}}, i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++)
            h[j][ord_of(s[i + j]) >> 21]++;
    for (; i < n; i++)
        h[0][ord_of(s[i]) >> 21]++;
    int want = k;
    const uint32_t b1 = bin_of(h, NBIN, &want);
    int m = 0, a = 0;
    for (i = 0; i < n; i++) {
        const uint32_t top = ord_of(s[i]) >> 21;
        idx[m] = i;
        idx[n - 1 - a] = i;
        m += top == b1;
        a += top > b1;
    }
    for (i = 0; i < m; i++)
        h[i & 3][(ord_of(s[idx[i]]) >> 10) & (NBIN - 1)]++;
    const uint32_t b2 = bin_of(h, NBIN, &want);
    for (i = 0; i < m; i++) {
        const uint32_t x = ord_of(s[idx[i]]);
        h[i & 3][x & 1023] += ((x >> 10) & (NBIN - 1)) == b2;
    }
    const uint32_t b3 = bin_of(h, 1024, &want);
    *m_out = m;
    *above = a;
    *want_out = want;
    return float_of(b1 << 21 | b2 << 10 | b3);
}

static bool has_nan(const float *s, int n)
{
    int nan = 0;
    for (int i = 0; i < n; i++)
        nan |= s[i] != s[i];
    return nan != 0;
}

int fg_ds4_top_k_tmp(const float *s, int n, int k, int *out, float *tmp)
{
    if (k >= n || k < 1 || has_nan(s, n))
        return fg_ds4_top_k(s, n, k, out);
    int *idx = (int *)(void *)tmp, m, a, ties;
    const float v = kth_select(s, n, k, idx, &m, &a, &ties);
    /* every row of the higher bins (above v), merged in index order with the
     * bin's rows above v and those equal to it from the lowest index until k */
    int got = 0, ia = n - 1, ib = 0;
    const int ea = n - 1 - a;
    while (ib < m || ia > ea) {
        if (ib < m && (ia <= ea || idx[ib] < idx[ia])) {
            const int r = idx[ib++];
            if (s[r] > v || (s[r] == v && ties-- > 0))
                out[got++] = r;
        } else {
            out[got++] = idx[ia--];
        }
    }
    return got;
}

float fg_ds4_kth(const float *s, int n, int k, float *tmp)
{
    if (n < 1 || k < 1 || has_nan(s, n))
        return -INFINITY;
    if (k >= n) { /* the lowest */
        float v = s[0];
        for (int i = 1; i < n; i++)
            v = s[i] < v ? s[i] : v;
        return v;
    }
    int m, a, ties;
    return kth_select(s, n, k, (int *)(void *)tmp, &m, &a, &ties);
}
