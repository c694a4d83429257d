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

/* The bin (of the keys' bits [shift, shift + bits)) holding the want-th
 * highest key (1-based), the count above it subtracted from *want. */
static uint32_t bin_of(const uint32_t *u, int n, int shift, int bits, int *want, int *count)
{
    int hist[1 << 11] = {0};
    const uint32_t mask = (1u << bits) - 1;
    for (int i = 0; i < n; i++)
        hist[(u[i] >> shift) & mask]++;
    int b = (int)mask;
    while (hist[b] < *want) {
        *want -= hist[b];
        b--;
    }
    *count = hist[b];
    return (uint32_t)b;
}

/* The k-th highest of s[0..n) (1 <= k <= n, no NaN) and the count strictly
 * above it: radix selection on the order-preserving keys (11, 11, 10 bits),
 * each pass keeping the keys of the bin that holds it (u: [n] scratch). */
static float kth_highest(const float *s, int n, int k, uint32_t *u, int *above)
{
    for (int i = 0; i < n; i++)
        u[i] = ord_of(s[i]);
    int want = k, m = n, cnt;
    uint32_t key = 0;
    const int shifts[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
    for (int p = 0; p < 3; p++) {
        const uint32_t b = bin_of(u, m, shifts[p], bits[p], &want, &cnt);
        key |= b << shifts[p];
        if (p == 2)
            break;
        int w = 0; /* compact the bin's keys in place */
        for (int i = 0; i < m; i++)
            if (((u[i] >> shifts[p]) & ((1u << bits[p]) - 1)) == b)
                u[w++] = u[i];
        m = w;
    }
    *above = k - want;
    return float_of(key);
}

int fg_ds4_top_k_tmp(const float *s, int n, int k, int *out, float *tmp)
{
    if (k >= n || k < 1)
        return fg_ds4_top_k(s, n, k, out);
    for (int i = 0; i < n; i++)
        if (s[i] != s[i])
            return fg_ds4_top_k(s, n, k, out);
    /* the rows above the k-th score, then those equal to it from the lowest index until k */
    int above;
    const float v = kth_highest(s, n, k, (uint32_t *)(void *)tmp, &above);
    int m = 0, ties = k - above;
    for (int i = 0; i < n; i++)
        if (s[i] > v || (s[i] == v && ties-- > 0))
            out[m++] = i;
    return m;
}
