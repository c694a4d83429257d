/* ds4_index.c: the V4 indexer's scores and top-k (ds4_ops.h). */
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/cpu/ds4_dots_isa.h"
#include "kernels/cpu/ds4_ops.h"
#include "kernels/cpu/matmul.h"

/* From this k on, top-k keeps its rows in a heap (an insertion costs log k,
 * not k: at top-512 over thousands of rows the shifts were most of it). */
#define TOPK_HEAP_MIN 32

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

/* Row a ranks below row b: a lower score, or the same and a higher index. */
static bool below(const float *s, int a, int b) { return s[a] < s[b] || (s[a] == s[b] && a > b); }

static void sift(const float *s, int *h, int k, int at)
{
    for (;;) {
        int low = at;
        const int c1 = 2 * at + 1, c2 = c1 + 1;
        if (c1 < k && below(s, h[c1], h[low]))
            low = c1;
        if (c2 < k && below(s, h[c2], h[low]))
            low = c2;
        if (low == at)
            return;
        const int tmp = h[at];
        h[at] = h[low];
        h[low] = tmp;
        at = low;
    }
}

static int by_index(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The insertion below in a min-heap of the k kept rows (the lowest ranked at
 * the root): a row enters when it scores above the root, as there. The same
 * set without NaN (scores then are totally ordered); false at a NaN, whose
 * comparisons the insertion defines. */
static bool top_k_heap(const float *s, int n, int k, int *out)
{
    for (int i = 0; i < n; i++)
        if (s[i] != s[i])
            return false;
    for (int i = 0; i < k; i++)
        out[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--)
        sift(s, out, k, i);
    for (int i = k; i < n; i++)
        if (s[i] > s[out[0]]) {
            out[0] = i;
            sift(s, out, k, 0);
        }
    qsort(out, (size_t)k, sizeof *out, by_index);
    return true;
}

int fg_ds4_top_k(const float *s, int n, int k, int *out)
{
    if (k >= n) {
        for (int i = 0; i < n; i++)
            out[i] = i;
        return n;
    }
    if (k >= TOPK_HEAP_MIN && top_k_heap(s, n, k, out))
        return k;
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
