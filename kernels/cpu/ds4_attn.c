/* ds4_attn.c: V4 attention with a sink, one head, online softmax by tiles
 * (ds4_ops.h), moved out of the deepseek4 forward unchanged. */
#include <math.h>

#include "kernels/cpu/ds4_dots_isa.h"
#include "kernels/cpu/ds4_ops.h"
#include "kernels/cpu/matmul.h"

void fg_ds4_acc_rows(float *acc, const float *p, const float *rows, int n, int D)
{
    if (fg_isa_best() == FG_ISA_AVX512) {
        fg_ds4_acc_rows_avx512(acc, p, rows, n, D);
        return;
    }
    for (int k = 0; k < n; k++)
        for (int i = 0; i < D; i++)
            acc[i] += p[k] * rows[(size_t)k * D + i];
}

void fg_ds4_attn_tile(const float *q, const float *keys, int n, int D, float scale, float *m, float *l,
                      float *acc, float *lg)
{
    for (int k = 0; k < n; k++) {
        const float *kk = keys + (size_t)k * D;
        float s = 0;
        for (int i = 0; i < D; i++)
            s += q[i] * kk[i];
        lg[k] = s * scale;
    }
    fg_ds4_attn_update(lg, keys, n, D, m, l, acc);
}

/* The running max over lg[0..n) in order, as its own function: inlined into
 * the update, whose max is live across expf calls (so kept on the stack), it
 * made every step a store and a reload. */
static __attribute__((noinline)) float tile_max(const float *lg, int n, float mx)
{
    for (int k = 0; k < n; k++)
        mx = lg[k] > mx ? lg[k] : mx;
    return mx;
}

void fg_ds4_attn_update(const float *lg, const float *keys, int n, int D, float *m, float *l, float *acc)
{
    const float mx = tile_max(lg, n, *m);
    const float corr = expf(*m - mx);
    float sum = *l * corr;
    for (int i = 0; i < D; i++)
        acc[i] *= corr;
    float p[FG_DS4_ATTN_TILE];
    for (int k0 = 0; k0 < n; k0 += FG_DS4_ATTN_TILE) {
        const int nk = n - k0 < FG_DS4_ATTN_TILE ? n - k0 : FG_DS4_ATTN_TILE;
        for (int k = 0; k < nk; k++) {
            p[k] = expf(lg[k0 + k] - mx);
            sum += p[k];
        }
        /* acc += p[k] keys[k] for k in order: per channel the axpy's sequence */
        fg_ds4_acc_rows(acc, p, keys + (size_t)k0 * D, nk, D);
    }
    *m = mx;
    *l = sum;
}

void fg_ds4_attn_finish(float m, float l, const float *acc, float sink, int D, float *out)
{
    const float mx = m > sink ? m : sink;
    const float corr = expf(m - mx);
    const float inv = 1.0f / (l * corr + expf(sink - mx));
    for (int i = 0; i < D; i++)
        out[i] = acc[i] * corr * inv;
}
