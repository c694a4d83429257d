/* ds4_hc.c: V4 hyper-connection mixing (mHC) of one token (ds4_ops.h),
 * moved out of the deepseek4 forward unchanged. */
#include <math.h>

#include "kernels/cpu/ds4_ops.h"

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

void fg_ds4_hc_weights(const float *m, const float *scale, const float *base, double eps, int iters, float *w)
{
    double c[4][4]; /* c[d][s] */
    for (int h = 0; h < 4; h++) {
        w[h] = (float)(sigm((double)m[h] * scale[0] + base[h]) + eps);
        w[4 + h] = (float)(2.0 * sigm((double)m[4 + h] * scale[1] + base[4 + h]));
    }
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++)
            c[d][s] = (double)m[8 + d + 4 * s] * scale[2] + base[8 + d + 4 * s];
    /* Sinkhorn: softmax over d, + eps, rows; then iters-1 times columns, rows. */
    for (int s = 0; s < 4; s++) {
        double mx = c[0][s], sum = 0;
        for (int d = 1; d < 4; d++)
            mx = c[d][s] > mx ? c[d][s] : mx;
        for (int d = 0; d < 4; d++)
            sum += (c[d][s] = exp(c[d][s] - mx));
        for (int d = 0; d < 4; d++)
            c[d][s] = c[d][s] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int s = 0; s < 4; s++) {
                double sum = 0;
                for (int d = 0; d < 4; d++)
                    sum += c[d][s];
                for (int d = 0; d < 4; d++)
                    c[d][s] /= sum + eps;
            }
        for (int d = 0; d < 4; d++) {
            double sum = 0;
            for (int s = 0; s < 4; s++)
                sum += c[d][s];
            for (int s = 0; s < 4; s++)
                c[d][s] /= sum + eps;
        }
    }
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++)
            w[8 + 4 * d + s] = (float)c[d][s];
}

void fg_ds4_hc_pre(const float *w, const float *xt, int E, float *yt)
{
    for (int i = 0; i < E; i++)
        yt[i] = w[0] * xt[i] + w[1] * xt[E + i] + w[2] * xt[2 * E + i] + w[3] * xt[3 * E + i];
}

void fg_ds4_hc_post(const float *w, const float *ot, const float *xt, int E, float *yt)
{
    for (int d = 0; d < 4; d++) {
        const float *c = w + 8 + 4 * d;
        for (int i = 0; i < E; i++)
            yt[d * E + i] = w[4 + d] * ot[i] + c[0] * xt[i] + c[1] * xt[E + i] + c[2] * xt[2 * E + i] +
                            c[3] * xt[3 * E + i];
    }
}
