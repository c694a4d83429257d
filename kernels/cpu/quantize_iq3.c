/* quantize_iq3.c: the IQ3 quantizers, writing the bytes of ggml-quants.c's
 * quantize_row_iq3_xxs_impl and quantize_row_iq3_s_impl (with and without
 * importance weights) on the lattices of quantize_lattice.c.
 *
 * Each group of 4 magnitudes is coded on levels 2l + 1 (l = 0 .. 7). The
 * scale is searched over 2*kMaxQ - 1 + 0.2 is (is = -15..15 for IQ3_XXS,
 * -9..9 for IQ3_S) by the weighted least-squares fit, groups that left the
 * grid re-coded at the best scale, and the sub-block scales quantized against
 * one F16 scale with ggml's fudge factor. ggml aborts where a neighbour search
 * finds nothing (only with infinite or NaN intermediates from values near
 * FLT_MAX); here the first neighbour is taken.
 */
#include "kernels/cpu/quantize_lattice.h"

#include <float.h>
#include <stdbool.h>

#include "kernels/cpu/quantize_block.h"

#define QK 256

/* Group k's codes of xval at inverse scale id, clamped to 0..7, into L; the
 * map index of them returned. */
static int iq3_codes(const float *xval, float id, int8_t *L)
{
    int u = 0;
    for (int i = 0; i < 4; i++) {
        int l = nearest_int(0.5f * (id * xval[i] - 1));
        l = l < 0 ? 0 : l > 7 ? 7 : l;
        L[i] = (int8_t)l;
        u |= l << 3 * i;
    }
    return u;
}

static void iq3_fit(const float *xval, const float *w, const int8_t *L, float *sumqx, float *sumq2)
{
    float sx = 0, s2 = 0;
    for (int i = 0; i < 32; i++) {
        float q = 2 * L[i] + 1;
        sx += w[i] * xval[i] * q;
        s2 += w[i] * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

/* One sub-block of 32 magnitudes xval (largest max > 0; weights w, their
 * roots waux) on lattice g: codes in L (on the grid), the scale returned (>= 0 unless the
 * fit went negative: the caller flips the signs). xxs: IQ3_XXS's search (31
 * scales, groups on the grid left alone when re-coding), else IQ3_S's. */
static float iq3_sub(const fg_lattice *g, const float *xval, float max, const float *w, const float *waux, int8_t *L,
                     bool xxs)
{
    int8_t Laux[32];
    bool on_grid[8], on_grid_aux[8];
    const int ntry = xxs ? 15 : 9;
    memset(L, 0, 32); /* kept when no scale fits (all weights 0): code 0 is on both grids */
    float best = 0, scale = max / 15;
    for (int k = 0; k < 8; k++)
        on_grid[k] = xxs;
    for (int is = -ntry; is <= ntry; is++) {
        const float id = (15 + is * 0.2f) / max;
        const float this_scale = 1 / id;
        for (int k = 0; k < 8; k++) {
            int u = iq3_codes(xval + 4 * k, id, Laux + 4 * k);
            on_grid_aux[k] = g->map[u] >= 0;
            if (!on_grid_aux[k])
                fg_lattice_nearest(g, u, xval + 4 * k, waux + 4 * k, this_scale, Laux + 4 * k);
        }
        float sumqx, sumq2;
        iq3_fit(xval, w, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, 32);
            memcpy(on_grid, on_grid_aux, sizeof on_grid);
        }
    }
    int off_grid = 0;
    for (int k = 0; k < 8; k++)
        off_grid += !on_grid[k];
    if (off_grid > 0 && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < 8; k++) {
            if (xxs && on_grid[k])
                continue;
            int8_t l4[4];
            int u = iq3_codes(xval + 4 * k, id, l4);
            int e = g->map[u] >= 0 ? g->map[u] : fg_lattice_nearest(g, u, xval + 4 * k, waux + 4 * k, scale, l4);
            for (int i = 0; i < 4; i++)
                L[4 * k + i] = (int8_t)((g->pos[e][i] - 1) / 2);
        }
        float sumqx, sumq2;
        iq3_fit(xval, w, L, &sumqx, &sumq2);
        if (sumq2 > 0)
            scale = sumqx / sumq2;
    }
    return scale;
}

/* The grid entry of group k's codes (on the grid by construction). */
static int iq3_entry(const fg_lattice *g, const int8_t *L)
{
    int u = 0;
    for (int i = 0; i < 4; i++)
        u |= L[i] << 3 * i;
    return g->map[u] >= 0 ? g->map[u] : 0;
}

/* The sub-block weights: importance times sqrt(sigma2 + x^2), or x^2. */
static void iq3_weights(const float *xb, const float *qw, float sigma2, float *w, float *waux)
{
    if (qw)
        imatrix_weights(xb, qw, sigma2, 32, w);
    else
        for (int i = 0; i < 32; i++)
            w[i] = xb[i] * xb[i];
    for (int i = 0; i < 32; i++)
        waux[i] = sqrtf(w[i]);
}

/* IQ3_XXS: d, qs[64] grid entries, 8 u32 of four 7-bit sign codes (the
 * eighth sign from parity: an odd count flips the least important value) and
 * a 4-bit scale. */
void fg_quant_iq3_xxs_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    (void)row_sigma2;
    const fg_lattice *g = fg_lattice_of(FG_WTYPE_IQ3_XXS);
    float scales[8], w[32], waux[32], xval[32];
    int8_t L[32];
    uint32_t ss[8] = {0};
    memset(b, 0, 98);
    float max_scale = 0;
    const float sigma2 = 2 * sum_squares(x, QK) / QK;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        iq3_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, w, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++)
            signs[k] = even_signs8(xb + 8 * k, w + 8 * k, xval + 8 * k);
        const float max = max_of(xval, 32);
        if (max < 1e-8f) {
            scales[ib] = 0;
            continue;
        }
        float scale = iq3_sub(g, xval, max, w, waux, L, true);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++)
                signs[k] = (uint8_t)~signs[k] & 127;
        }
        for (int k = 0; k < 8; k++)
            b[2 + 8 * ib + k] = (uint8_t)iq3_entry(g, L + 4 * k);
        ss[ib] = signs[0] | (uint32_t)signs[1] << 7 | (uint32_t)signs[2] << 14 | (uint32_t)signs[3] << 21;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        memset(b, 0, 98);
        return;
    }
    const float d = max_scale / 31;
    put_f16(b, d * 1.0125f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) {
        int l = nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 15 ? 15 : l;
        uint32_t v = ss[ib] | (uint32_t)l << 28;
        for (int k = 0; k < 4; k++)
            b[66 + 4 * ib + k] = (uint8_t)(v >> 8 * k);
    }
}

/* IQ3_S: d, qs[64] low bytes of the 9-bit entries, qh[8] their ninth bits,
 * signs[32] (8 per group of 8, no parity), scales[4] two 4-bit codes each. */
void fg_quant_iq3_s_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    (void)row_sigma2;
    const fg_lattice *g = fg_lattice_of(FG_WTYPE_IQ3_S);
    float scales[8], w[32], waux[32], xval[32];
    int8_t L[32];
    uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *sc = b + 106;
    int kept = 0; /* sub-blocks written to qs and signs */
    memset(b, 0, 110);
    float max_scale = 0;
    const float sigma2 = 2 * sum_squares(x, QK) / QK;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        iq3_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, w, waux);
        uint8_t s4[4];
        for (int k = 0; k < 4; k++)
            s4[k] = abs_signs8(xb + 8 * k, xval + 8 * k);
        const float max = max_of(xval, 32);
        if (!max) {
            /* ggml skips it without advancing its qs and signs cursors: the
             * next sub-block's entries and signs take this one's place */
            scales[ib] = 0;
            continue;
        }
        float scale = iq3_sub(g, xval, max, w, waux, L, false);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++)
                s4[k] = (uint8_t)~s4[k];
        }
        for (int k = 0; k < 8; k++) {
            int e = iq3_entry(g, L + 4 * k);
            qs[8 * kept + k] = (uint8_t)(e & 255);
            qh[ib] = (uint8_t)(qh[ib] | (e >> 8) << k);
        }
        memcpy(signs + 4 * kept, s4, 4);
        kept++;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale)
        return;
    const float d = max_scale / 31;
    put_f16(b, d * 1.033f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2) {
        int l1 = nearest_int(0.5f * (id * scales[ib] - 1));
        int l2 = nearest_int(0.5f * (id * scales[ib + 1] - 1));
        l1 = l1 < 0 ? 0 : l1 > 15 ? 15 : l1;
        l2 = l2 < 0 ? 0 : l2 > 15 ? 15 : l2;
        sc[ib / 2] = (uint8_t)(l1 | l2 << 4);
    }
}
