/* ds4_compress.c: V4 compressor pooling (ds4_ops.h), moved out of the
 * deepseek4 forward unchanged so the GPU self-check can call it. */
#include <math.h>

#include "kernels/cpu/ds4_ops.h"

void fg_ds4_pool_csa(int r, int width, const float *cur, const float *prev, float *row)
{
    const int cw = 2 * width;
    for (int ch = 0; ch < width; ch++) {
        double mx = -INFINITY;
        for (int i = 0; i < r; i++) {
            const double s = cur[((size_t)i * 2 + 1) * cw + width + ch];
            mx = s > mx ? s : mx;
            if (prev) {
                const double sp = prev[((size_t)i * 2 + 1) * cw + ch];
                mx = sp > mx ? sp : mx;
            }
        }
        double sum = 0, acc = 0;
        for (int i = 0; i < r; i++) {
            double w = exp(cur[((size_t)i * 2 + 1) * cw + width + ch] - mx);
            sum += w;
            acc += w * cur[(size_t)i * 2 * cw + width + ch];
            if (prev) {
                w = exp(prev[((size_t)i * 2 + 1) * cw + ch] - mx);
                sum += w;
                acc += w * prev[(size_t)i * 2 * cw + ch];
            }
        }
        row[ch] = (float)(acc / sum);
    }
}

void fg_ds4_hca_fold(float *st, const float *k, const float *g, const float *ape, int slot, int D)
{
    float *m = st, *sum = st + D, *acc = st + 2 * (size_t)D;
    for (int ch = 0; ch < D; ch++) {
        const float s = g[ch] + ape[ch];
        if (slot == 0) {
            m[ch] = s;
            sum[ch] = 1.0f;
            acc[ch] = k[ch];
            continue;
        }
        const float mx = s > m[ch] ? s : m[ch];
        const float c = expf(m[ch] - mx), e = expf(s - mx);
        sum[ch] = sum[ch] * c + e;
        acc[ch] = acc[ch] * c + e * k[ch];
        m[ch] = mx;
    }
}

void fg_ds4_hca_row(const float *st, int D, float *row)
{
    for (int ch = 0; ch < D; ch++)
        row[ch] = st[2 * (size_t)D + ch] / st[D + ch];
}
