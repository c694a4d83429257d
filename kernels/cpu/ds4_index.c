/* ds4_index.c: the V4 indexer's scores and top-k (ds4_ops.h). */
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

/* The k-th highest of a[0..n) (1 <= k <= n, no NaN), a reordered:
 * quickselect, Hoare's partition, descending. */
static float kth_highest(float *a, int n, int k)
{
    int lo = 0, hi = n - 1;
    const int want = k - 1;
    while (lo < hi) {
        const float x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi];
        const float pivot = x < y ? (y < z ? y : x < z ? z : x) : (x < z ? x : y < z ? z : y);
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pivot)
                i++;
            while (a[j] < pivot)
                j--;
            if (i <= j) {
                const float t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return a[want]; /* between the halves: equal to the pivot */
    }
    return a[lo];
}

int fg_ds4_top_k_tmp(const float *s, int n, int k, int *out, float *tmp)
{
    if (k >= n || k < 1)
        return fg_ds4_top_k(s, n, k, out);
    for (int i = 0; i < n; i++) {
        if (s[i] != s[i])
            return fg_ds4_top_k(s, n, k, out);
        tmp[i] = s[i];
    }
    /* the rows above the k-th score, then those equal to it from the lowest index until k */
    const float v = kth_highest(tmp, n, k);
    int above = 0;
    for (int i = 0; i < n; i++)
        above += s[i] > v;
    int m = 0, ties = k - above;
    for (int i = 0; i < n; i++)
        if (s[i] > v || (s[i] == v && ties-- > 0))
            out[m++] = i;
    return m;
}
