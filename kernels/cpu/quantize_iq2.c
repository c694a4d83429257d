/* quantize_iq2.c: the IQ2 quantizers, writing the bytes of ggml-quants.c's
 * quantize_row_iq2_xxs_impl and quantize_row_iq2_xs_impl (importance weights
 * required, as ggml asserts) and quantize_row_iq2_s_impl (with or without) on
 * the 8-value lattices of quantize_lattice.c.
 *
 * Each group of 8 magnitudes is coded on levels 2l + 1 (l = 0..2) and taken
 * to the grid entry of those codes, or to the nearest of its neighbours. A
 * sub-block's scale is searched over (5 + 0.1 is) / ref by the weighted
 * least-squares fit: IQ2_XS and IQ2_S (16 values, is = -9..9, ref the largest
 * magnitude) then re-code at the best scale the groups that had left the
 * grid; IQ2_XXS (32 values, is = -6..6) takes ref from make_qp's scale for 4
 * levels and re-codes every group. The 4-bit sub-block scales are then set
 * against one F16 scale (IQ2_S with ggml's fudge 0.9875). IQ2_XXS and IQ2_XS
 * store 7 signs per 8 values (parity gives the eighth), IQ2_S all 8.
 */
#include "kernels/cpu/quantize_lattice.h"

#include <stdbool.h>

#include "kernels/cpu/quantize_block.h"

#define QK 256

/* The codes of 8 magnitudes at inverse scale id, clamped to 0..2, into L;
 * their map index returned. */
static int iq2_codes(const float *xval, float id, int8_t *L)
{
    int u = 0;
    for (int i = 0; i < 8; i++) {
        int l = nearest_int(0.5f * (id * xval[i] - 1));
        l = l < 0 ? 0 : l > 2 ? 2 : l;
        L[i] = (int8_t)l;
        u |= l << 2 * i;
    }
    return u;
}

/* One group coded at inverse scale id, moved to its best neighbour at scale
 * (weights waux) when off the grid; false when it was off. */
static bool iq2_group(const fg_lattice *g, const float *xval, const float *waux, float id, float scale, int8_t *L)
{
    const int u = iq2_codes(xval, id, L);
    if (g->map[u] >= 0)
        return true;
    fg_lattice_nearest(g, u, xval, waux, scale, L);
    return false;
}

/* sum w x q and (to *sumq2) sum w q^2 over n values, q = 2L + 1. */
static float iq2_fit(const float *xval, const float *w, const int8_t *L, int n, float *sumq2)
{
    float sx = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        float q = 2 * L[i] + 1;
        sx += w[i] * xval[i] * q;
        s2 += w[i] * q * q;
    }
    *sumq2 = s2;
    return sx;
}

/* One sub-block of n magnitudes (n/8 groups; weights w, their roots waux):
 * codes on the grid in L, the scale returned (negative when the fit went
 * negative: the caller flips the signs). scale is kept when no try fits;
 * all_groups re-codes every group at the best scale, else only those the
 * best try took off the grid. */
static float iq2_sub(const fg_lattice *g, const float *xval, const float *w, const float *waux, int n, float ref,
                     int ntry, float scale, bool all_groups, int8_t *L)
{
    int8_t Laux[32];
    bool on_grid[4], on_grid_aux[4];
    const int ng = n / 8;
    float best = 0;
    for (int k = 0; k < ng; k++)
        on_grid[k] = true;
    for (int is = -ntry; is <= ntry; is++) {
        const float id = (5 + is * 0.1f) / ref;
        const float this_scale = 1 / id;
        for (int k = 0; k < ng; k++)
            on_grid_aux[k] = iq2_group(g, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k);
        float sumq2, sumqx = iq2_fit(xval, w, Laux, n, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, (size_t)n);
            memcpy(on_grid, on_grid_aux, sizeof on_grid);
        }
    }
    bool recode = all_groups;
    for (int k = 0; k < ng; k++)
        recode |= !on_grid[k];
    if (recode && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < ng; k++)
            if (all_groups || !on_grid[k])
                iq2_group(g, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k);
        float sumq2, sumqx = iq2_fit(xval, w, L, n, &sumq2);
        if (sumq2 > 0)
            scale = sumqx / sumq2;
    }
    return scale;
}

/* The grid entry of a group's codes (on the grid by construction). */
static int iq2_entry(const fg_lattice *g, const int8_t *L)
{
    int u = 0;
    for (int i = 0; i < 8; i++)
        u |= L[i] << 2 * i;
    return g->map[u] >= 0 ? g->map[u] : 0;
}

/* The weights of n values and their roots. */
static void iq2_weights(const float *xb, const float *qw, float sigma2, int n, float *w, float *waux)
{
    if (qw)
        imatrix_weights(xb, qw, sigma2, n, w);
    else /* IQ2_S only */
        for (int i = 0; i < n; i++)
            w[i] = 0.25f * sigma2 + xb[i] * xb[i];
    for (int i = 0; i < n; i++)
        waux[i] = sqrtf(w[i]);
}

static int scale_code(float id, float scale)
{
    int l = nearest_int(0.5f * (id * scale - 1));
    return l < 0 ? 0 : l > 15 ? 15 : l;
}

/* IQ2_XXS: d, then per sub-block of 32 a u32 of 4 grid entries and a u32 of
 * four 7-bit sign codes and the 4-bit scale. */
void fg_quant_iq2_xxs_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    (void)row_sigma2;
    const fg_lattice *g = fg_lattice_of(FG_WTYPE_IQ2_XXS);
    float scales[8], w[32], waux[32], xval[32];
    int8_t L[32];
    uint8_t Lqp[32];
    uint32_t q2[16] = {0};
    memset(b, 0, 66);
    if (!qw)
        return;
    float max_scale = 0;
    const float sigma2 = sum_squares(x, QK) / QK;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        iq2_weights(xb, qw + 32 * ib, sigma2, 32, w, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++)
            signs[k] = even_signs8(xb + 8 * k, w + 8 * k, xval + 8 * k);
        scales[ib] = 0;
        if (max_of(xval, 32) < 1e-15f)
            continue;
        float scale = fg_quant_make_qp(32, 4, xval, Lqp, w);
        const float eff_max = scale * 3;
        if (eff_max <= 0)
            continue;
        memset(L, 0, sizeof L);
        scale = iq2_sub(g, xval, w, waux, 32, eff_max, 6, scale, true, L);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++)
                signs[k] = (uint8_t)~signs[k] & 127;
        }
        for (int k = 0; k < 4; k++) {
            q2[2 * ib] |= (uint32_t)iq2_entry(g, L + 8 * k) << 8 * k;
            q2[2 * ib + 1] |= (uint32_t)signs[k] << 7 * k;
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale)
        return;
    const float d = max_scale / 31;
    put_f16(b, d);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib++)
        q2[2 * ib + 1] |= (uint32_t)scale_code(id, scales[ib]) << 28;
    for (int j = 0; j < 16; j++)
        for (int k = 0; k < 4; k++)
            b[2 + 4 * j + k] = (uint8_t)(q2[j] >> 8 * k);
}

/* IQ2_XS: d, qs[32] u16 of a 9-bit grid entry and 7 sign bits per group of 8,
 * scales[8] two 4-bit codes each (sub-blocks of 16). */
void fg_quant_iq2_xs_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    (void)row_sigma2;
    const fg_lattice *g = fg_lattice_of(FG_WTYPE_IQ2_XS);
    float scales[16], w[16], waux[16], xval[16];
    int8_t L[16];
    uint8_t *qs = b + 2, *sc = b + 66;
    memset(b, 0, 74);
    if (!qw)
        return;
    float max_scale = 0;
    const float sigma2 = sum_squares(x, QK) / QK;
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        iq2_weights(xb, qw + 16 * ib, sigma2, 16, w, waux);
        uint8_t signs[2];
        for (int k = 0; k < 2; k++)
            signs[k] = even_signs8(xb + 8 * k, w + 8 * k, xval + 8 * k);
        const float max = max_of(xval, 16);
        scales[ib] = 0;
        if (max < 1e-15f)
            continue;
        memset(L, 0, sizeof L); /* kept when no scale fits: code 0 is on the grid */
        float scale = iq2_sub(g, xval, w, waux, 16, max, 9, max / 5, false, L);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 2; k++)
                signs[k] = (uint8_t)~signs[k] & 127;
        }
        for (int k = 0; k < 2; k++) {
            const int v = iq2_entry(g, L + 8 * k) | signs[k] << 9;
            qs[2 * (2 * ib + k)] = (uint8_t)v;
            qs[2 * (2 * ib + k) + 1] = (uint8_t)(v >> 8);
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        memset(b, 0, 74);
        return;
    }
    const float d = max_scale / 31;
    put_f16(b, d);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ib += 2)
        sc[ib / 2] = (uint8_t)(scale_code(id, scales[ib]) | scale_code(id, scales[ib + 1]) << 4);
}

/* IQ2_S: d, qs[32] low bytes of the 10-bit grid entries, signs[32] (8 per
 * group), qh[8] the entries' top 2 bits (4 groups a byte), scales[8]. */
void fg_quant_iq2_s_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    (void)row_sigma2;
    const fg_lattice *g = fg_lattice_of(FG_WTYPE_IQ2_S);
    float scales[16], w[16], waux[16], xval[16];
    int8_t L[16];
    uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *sc = b + 74;
    memset(b, 0, 82);
    float max_scale = 0;
    const float sigma2 = 2 * sum_squares(x, QK) / QK;
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        iq2_weights(xb, qw ? qw + 16 * ib : NULL, sigma2, 16, w, waux);
        uint8_t s2[2];
        for (int k = 0; k < 2; k++)
            s2[k] = abs_signs8(xb + 8 * k, xval + 8 * k);
        const float max = max_of(xval, 16);
        scales[ib] = 0;
        if (max < 1e-8f)
            continue;
        memset(L, 0, sizeof L);
        float scale = iq2_sub(g, xval, w, waux, 16, max, 9, max / 5, false, L);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 2; k++)
                s2[k] = (uint8_t)~s2[k];
        }
        for (int k = 0; k < 2; k++) {
            const int i8 = 2 * ib + k, e = iq2_entry(g, L + 8 * k);
            qs[i8] = (uint8_t)e;
            qh[i8 / 4] = (uint8_t)(qh[i8 / 4] | (e >> 8) << 2 * (i8 % 4));
            signs[i8] = s2[k];
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) /* ggml keeps the entries and signs of sub-blocks whose scale is 0 */
        return;
    const float d = max_scale / 31;
    put_f16(b, d * 0.9875f);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ib += 2)
        sc[ib / 2] = (uint8_t)(scale_code(id, scales[ib]) | scale_code(id, scales[ib + 1]) << 4);
}
