/* ds4_index.c: the V4 indexer's per-row score and top-k (ds4_ops.h), moved
 * out of the deepseek4 forward unchanged. */
#include "kernels/cpu/ds4_ops.h"

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
