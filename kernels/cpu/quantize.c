/* quantize.c: quantize.h's quantizers, one block of one type per function.
 *
 * Written from ggml's algorithms (ggml-quants.c), in its order of float
 * operations: the result must be ggml's bytes, and a reordered sum or a
 * fused multiply-add moves a value across a rounding boundary now and then.
 * Integer codes go through unsigned char where ggml stores into a uint8_t
 * (values wrap, as they do there). The searches:
 *   make_qx   symmetric codes in [-nmax, nmax), the scale searched over
 *             nmax + 0.1 is (is = -9..9) by the weighted least-squares fit
 *             (Q3_K sub-blocks use make_q3 instead; Q6_K uses this one)
 *   make_q3   the same start, then up to 5 passes moving single codes while
 *             the fit improves
 *   make_qkx2 affine codes in [0, nmax] with a minimum <= 0, the scale
 *             searched over nmax + rmin + rdelta*is (is = 0..nstep), scale and
 *             minimum refitted by weighted least squares each time, kept when
 *             the weighted (absolute or squared) error drops
 *   iq4       the 16 non-linear levels, scale searched over levels[0] + t
 *             (t = -7..7), codes by nearest level (ties upward)
 * and, with importance weights (the quant_weights paths of ggml's
 * quantize_row_*_impl):
 *   make_qkx3 make_qkx2 with the given weights and squared error, the grid
 *             nmax - 0.9 + 0.05 is (is = 0..36)
 *   make_qp   non-negative codes for the sub-block scales and minima,
 *             weighted by each sub-block's summed weights
 * The super-block scales are then quantized against one F16 scale and every
 * value re-coded against the scale the block really stores.
 */
#include "kernels/cpu/quantize.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quantize_block.h"
#include "kernels/cpu/quantize_lattice.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/quants.h"

#define QK 256
#define GROUP_MAX_EPS 1e-15f

static const int8_t iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }

/* C's truncating conversions, as ggml's (int8_t) and (uint8_t) casts do them;
 * outside the target's range (only for absurd inputs: a scale that
 * underflows makes its inverse infinite) ggml's cast is undefined, and
 * these saturate, NaN to 0. */
static int trunc_i8(float v)
{
    if (!(v > -129.0f))
        return v != v ? 0 : -128;
    return v < 128.0f ? (int8_t)v : 127;
}

static int trunc_u8(float v)
{
    if (!(v > -1.0f))
        return 0;
    return v < 256.0f ? (uint8_t)v : 255;
}

static float get_f16(const uint8_t *p)
{
    return fg_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static float f16_round(float f)
{
    return fg_f16_to_f32(fg_f32_to_f16(f));
}

/* ---- legacy types (32 values) ---- */

/* The searches, below with the K types. */
static float make_qx(int n, int nmax, const float *x, int8_t *L, const float *qw);
static float make_qkx3(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                       uint8_t *Laux, float rmin, float rdelta, int nstep);
static void put_u32(uint8_t *p, uint32_t v);

/* Legacy blocks with importance weights qw: the row's mean square is sigma2. */
static void q4_0_weighted(const float *x, uint8_t *b, const float *qw, float sigma2)
{
    float w[32];
    int8_t L[32];
    imatrix_weights(x, qw, sigma2, 32, w);
    put_f16(b, make_qx(32, 8, x, L, w));
    for (int j = 0; j < 16; j++)
        b[2 + j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

static void q4_1_weighted(const float *x, uint8_t *b, const float *qw, float sigma2)
{
    float w[32], min;
    uint8_t L[32], Laux[32];
    imatrix_weights(x, qw, sigma2, 32, w);
    put_f16(b, make_qkx3(32, 15, x, w, L, &min, Laux, -0.9f, 0.05f, 36));
    put_f16(b + 2, -min);
    for (int j = 0; j < 16; j++)
        b[4 + j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

static void q4_0_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    if (qw) {
        q4_0_weighted(x, b, qw, row_sigma2);
        return;
    }
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        const int q0 = imin(15, trunc_i8(x[j] * id + 8.5f));
        const int q1 = imin(15, trunc_i8(x[j + 16] * id + 8.5f));
        b[2 + j] = (uint8_t)((uint8_t)q0 | (uint8_t)q1 << 4);
    }
}

static void min_max(const float *x, float *mn, float *mx)
{
    float lo = 3.40282347e+38f, hi = -3.40282347e+38f;
    for (int j = 0; j < 32; j++) {
        if (x[j] < lo)
            lo = x[j];
        if (x[j] > hi)
            hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

static void q4_1_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    if (qw) {
        q4_1_weighted(x, b, qw, row_sigma2);
        return;
    }
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    for (int j = 0; j < 16; j++) {
        const int q0 = imin(15, trunc_i8((x[j] - min) * id + 0.5f));
        const int q1 = imin(15, trunc_i8((x[j + 16] - min) * id + 0.5f));
        b[4 + j] = (uint8_t)((uint8_t)q0 | (uint8_t)q1 << 4);
    }
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

/* Q5_0's and Q5_1's 5-bit codes: low nibbles at qs, fifth bits in the u32 at qh. */
static void q5_pack(const uint8_t *L, uint8_t *qh_at, uint8_t *qs)
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((L[j] & 15) | (L[j + 16] & 15) << 4);
        qh |= (uint32_t)(L[j] >> 4 & 1) << j;
        qh |= (uint32_t)(L[j + 16] >> 4 & 1) << (j + 16);
    }
    put_u32(qh_at, qh);
}

static void q5_0_weighted(const float *x, uint8_t *b, const float *qw, float sigma2)
{
    float w[32];
    int8_t L[32];
    imatrix_weights(x, qw, sigma2, 32, w);
    put_f16(b, make_qx(32, 16, x, L, w));
    q5_pack((const uint8_t *)L, b + 2, b + 6);
}

static void q5_1_weighted(const float *x, uint8_t *b, const float *qw, float sigma2)
{
    float w[32], min;
    uint8_t L[32], Laux[32];
    imatrix_weights(x, qw, sigma2, 32, w);
    put_f16(b, make_qkx3(32, 31, x, w, L, &min, Laux, -0.9f, 0.05f, 36));
    put_f16(b + 2, -min);
    q5_pack(L, b + 4, b + 8);
}

static void q5_0_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    if (qw) {
        q5_0_weighted(x, b, qw, row_sigma2);
        return;
    }
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        const uint8_t q0 = (uint8_t)imin(31, trunc_i8(x[j] * id + 16.5f));
        const uint8_t q1 = (uint8_t)imin(31, trunc_i8(x[j + 16] * id + 16.5f));
        b[6 + j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
        qh |= (uint32_t)(q0 >> 4 & 1) << j;
        qh |= (uint32_t)(q1 >> 4 & 1) << (j + 16);
    }
    put_u32(b + 2, qh);
}

static void q5_1_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    if (qw) {
        q5_1_weighted(x, b, qw, row_sigma2);
        return;
    }
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        const uint8_t q0 = (uint8_t)trunc_u8((x[j] - min) * id + 0.5f);
        const uint8_t q1 = (uint8_t)trunc_u8((x[j + 16] - min) * id + 0.5f);
        b[8 + j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
        qh |= (uint32_t)(q0 >> 4 & 1) << j;
        qh |= (uint32_t)(q1 >> 4 & 1) << (j + 16);
    }
    put_u32(b + 4, qh);
}

/* ---- the searches of the K types ---- */

/* The value of largest magnitude (the first of equals), with its sign: the
 * searches scale by it so that it lands on the most negative code. */
static float signed_max(const float *x, int n)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    return max;
}

/* Symmetric codes L[i] + nmax in [0, 2 nmax), weights qw (NULL: x^2, rmse
 * type 1); returns the scale. */
static float make_qx(int n, int nmax, const float *x, int8_t *L, const float *qw)
{
    const float max = signed_max(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's sub-block search (do_rmse): codes in [0, 2 nmax); returns the scale. */
static float make_q3(int n, int nmax, const float *x, int8_t *L)
{
    const float max = signed_max(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = imax(-nmax, imin(nmax - 1, nearest_int(x[i] * sl2 / slx)));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Affine codes in [0, nmax]; returns the scale, *the_min the (non-negative) offset. */
static float make_qkx2(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                       uint8_t *Laux, float rmin, float rdelta, int nstep, int use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* make_qkx2 as the importance-weighted quantizers run it (weights always
 * given, error squared): the same fit, codes clamped before rounding. */
static float make_qkx3(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                       uint8_t *Laux, float rmin, float rdelta, int nstep)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
        float diff = scale * L[i] + min - x[i];
        best += weights[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const float v = iscale * (x[i] - min);
            const int l = v > 0 ? nearest_int(v < nmax ? v : (float)nmax) : 0;
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur += weights[i] * (diff * diff);
            }
            if (cur < best) {
                memcpy(L, Laux, (size_t)n);
                best = cur;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Non-negative codes in [0, nmax] for the (non-negative) sub-block scales or
 * minima x, weighted by qw: the scale searched over nmax + 0.1 is
 * (is = -4..4) by weighted squared error, then up to 5 passes moving single
 * codes while the fit improves; returns the scale. */
float fg_quant_make_qp(int n, int nmax, const float *x, uint8_t *L, const float *qw)
{
    float max = 0;
    for (int i = 0; i < n; i++)
        max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = nmax / max;
    float scale = 1 / iscale;
    float best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)nearest_int(iscale * x[i]); /* wraps as ggml's uint8_t store does */
        float diff = x[i] - scale * L[i];
        best += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0)
            continue;
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            float diff = x[i] - scale_is * imin(nmax, nearest_int(iscale_is * x[i]));
            mse += qw[i] * diff * diff;
        }
        if (mse < best) {
            best = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imin(nmax, nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        float w = qw[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = imin(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Q2_K and Q3_K pack four 2-bit codes of values l, l+32, l+64, l+96 per byte. */
static void pack2(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < QK; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

/* Q2_K's codes against the scales the block stores, then packed. */
static void q2_k_finish(const float *x, uint8_t *b, uint8_t *L)
{
    const uint8_t *sc = b;
    const float dall = get_f16(b + 80), dmin = get_f16(b + 82);
    for (int j = 0; j < 16; j++) {
        const float d = dall * (sc[j] & 15);
        if (d == 0.0f)
            continue;
        const float dm = dmin * (sc[j] >> 4);
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (uint8_t)imax(0, imin(3, nearest_int((x[16 * j + i] + dm) / d)));
    }
    pack2(L, b + 16);
}

/* Q2_K: scales[16], qs[64], d, dmin. */
static void q2_k_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    uint8_t L[QK], Laux[16], *sc = b;
    float weights[16], mins[16], scales[16];
    if (qw) {
        float sw[16];
        uint8_t Ls[16], Lm[16];
        const float sigma2 = sum_squares(x, QK) / QK;
        for (int j = 0; j < 16; j++) {
            imatrix_weights(x + 16 * j, qw + 16 * j, sigma2, 16, weights);
            sw[j] = 0;
            for (int l = 0; l < 16; l++)
                sw[j] += weights[l];
            scales[j] = make_qkx3(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
        }
        const float dm = fg_quant_make_qp(16, 15, scales, Ls, sw), mm = fg_quant_make_qp(16, 15, mins, Lm, sw);
        put_f16(b + 80, dm);
        put_f16(b + 82, mm);
        for (int j = 0; j < 16; j++)
            sc[j] = (uint8_t)(Ls[j] | Lm[j] << 4);
        q2_k_finish(x, b, L);
        return;
    }
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++)
            weights[l] = fabsf(x[16 * j + l]);
        scales[j] = make_qkx2(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    if (max_scale > 0) {
        float iscale = 15.f / max_scale;
        for (int j = 0; j < 16; j++)
            sc[j] = (uint8_t)nearest_int(iscale * scales[j]);
        put_f16(b + 80, max_scale / 15.f);
    } else {
        memset(sc, 0, 16);
        put_f16(b + 80, 0.f);
    }
    if (max_min > 0) {
        float iscale = 15.f / max_min;
        for (int j = 0; j < 16; j++)
            sc[j] = (uint8_t)(sc[j] | (uint8_t)((unsigned)nearest_int(iscale * mins[j]) << 4));
        put_f16(b + 82, max_min / 15.f);
    } else {
        put_f16(b + 82, 0.f);
    }
    q2_k_finish(x, b, L);
}

/* Q3_K's 6-bit scale code l (0..63) of sub-block j into the 12 scale bytes. */
static void q3_k_put_scale(uint8_t *sc, int j, int l)
{
    if (j < 8)
        sc[j] = (uint8_t)(l & 15);
    else
        sc[j - 8] = (uint8_t)(sc[j - 8] | (l & 15) << 4);
    l >>= 4;
    sc[j % 4 + 8] = (uint8_t)(sc[j % 4 + 8] | l << (2 * (j / 4)));
}

/* Q3_K's codes against the scales the block stores, then the high bits and packing. */
static void q3_k_finish(const float *x, uint8_t *b, int8_t *L)
{
    uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    const float dall = get_f16(b + 108);
    for (int j = 0; j < 16; j++) {
        int s = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
        s = (s | ((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        const float d = dall * s;
        if (d == 0.0f)
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(imax(-4, imin(3, nearest_int(x[16 * j + i] / d))) + 4);
    }
    memset(hmask, 0, 32);
    uint8_t U[QK];
    for (int j = 0; j < QK; j++) {
        int l = L[j];
        if (l > 3) {
            hmask[j % 32] = (uint8_t)(hmask[j % 32] | 1 << (j / 32));
            l -= 4;
        }
        U[j] = (uint8_t)l;
    }
    pack2(U, qs);
}

/* Q3_K: hmask[32], qs[64], scales[12], d. */
static void q3_k_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    int8_t L[QK];
    float scales[16];
    uint8_t *sc = b + 96;
    memset(sc, 0, 12);
    if (qw) {
        float weights[16], sw[16];
        int8_t Ls[16];
        const float sigma2 = 2 * sum_squares(x, QK) / QK;
        for (int j = 0; j < 16; j++) {
            imatrix_weights(x + 16 * j, qw + 16 * j, sigma2, 16, weights);
            float sumw = 0;
            for (int l = 0; l < 16; l++)
                sumw += weights[l];
            sw[j] = sumw;
            scales[j] = make_qx(16, 4, x + 16 * j, L + 16 * j, weights);
        }
        const float d_block = make_qx(16, 32, scales, Ls, sw);
        for (int j = 0; j < 16; j++)
            q3_k_put_scale(sc, j, Ls[j]);
        put_f16(b + 108, d_block);
        q3_k_finish(x, b, L);
        return;
    }
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; j++) {
        scales[j] = make_q3(16, 4, x + 16 * j, L + 16 * j);
        float s = fabsf(scales[j]);
        if (s > amax) {
            amax = s;
            max_scale = scales[j];
        }
    }
    float dall = 0.f;
    if (max_scale != 0.0f) {
        float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; j++)
            q3_k_put_scale(sc, j, imax(-32, imin(31, (int8_t)nearest_int(iscale * scales[j]))) + 32);
        dall = 1 / iscale;
    }
    put_f16(b + 108, dall);
    q3_k_finish(x, b, L);
}

/* Sub-block j's 6-bit scale and minimum codes into Q4_K's and Q5_K's 12 scale bytes. */
static void k4_put_codes(uint8_t *s, int j, uint8_t ls, uint8_t lm)
{
    if (j < 4) {
        s[j] = ls;
        s[j + 4] = lm;
    } else {
        s[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
        s[j - 4] = (uint8_t)(s[j - 4] | (ls >> 4) << 6);
        s[j] = (uint8_t)(s[j] | (lm >> 4) << 6);
    }
}

/* The 12 scale bytes of Q4_K and Q5_K: eight 6-bit (scale, min) pairs. */
static void pack_scales_k4(const float *scales, const float *mins, float max_scale, float max_min, uint8_t *s)
{
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        k4_put_codes(s, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
    }
}

static void scale_min_k4(int j, const uint8_t *q, int *d, int *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4;
        *m = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

static void k4_finish(const float *x, uint8_t *b, int nmax, uint8_t *L);

/* Q4_K (nmax 15) and Q5_K (31): d, dmin, scales[12], then the codes; L gets the codes. */
static void k4_block(const float *x, uint8_t *b, int nmax, float rmin, int nstep, uint8_t *L, const float *qw)
{
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    if (qw) {
        float sw[8];
        uint8_t Ls[8], Lm[8];
        const float sigma2 = 2 * sum_squares(x, QK) / QK;
        for (int j = 0; j < 8; j++) {
            imatrix_weights(x + 32 * j, qw + 32 * j, sigma2, 32, weights);
            float sumw = 0;
            for (int l = 0; l < 32; l++)
                sumw += weights[l];
            sw[j] = sumw;
            scales[j] = make_qkx3(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
        }
        const float d_block = fg_quant_make_qp(8, 63, scales, Ls, sw), m_block = fg_quant_make_qp(8, 63, mins, Lm, sw);
        for (int j = 0; j < 8; j++)
            k4_put_codes(b + 4, j, Ls[j], Lm[j]);
        put_f16(b, d_block);
        put_f16(b + 2, m_block);
        k4_finish(x, b, nmax, L);
        return;
    }
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    pack_scales_k4(scales, mins, max_scale, max_min, b + 4);
    put_f16(b, max_scale / 63.f);
    put_f16(b + 2, max_min / 63.f);
    k4_finish(x, b, nmax, L);
}

/* Q4_K's and Q5_K's codes against the scales and minima the block stores. */
static void k4_finish(const float *x, uint8_t *b, int nmax, uint8_t *L)
{
    const float dall = get_f16(b), dmin = get_f16(b + 2);
    for (int j = 0; j < 8; j++) {
        int s, m;
        scale_min_k4(j, b + 4, &s, &m);
        const float d = dall * s;
        if (d == 0.0f)
            continue;
        const float dm = dmin * m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + i] + dm) / d)));
    }
}

static void q4_k_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    uint8_t L[QK];
    k4_block(x, b, 15, -1.f, 20, L, qw);
    uint8_t *q = b + 16;
    for (int j = 0; j < QK; j += 64, q += 32)
        for (int l = 0; l < 32; l++)
            q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
}

/* Q5_K: d, dmin, scales[12], qh[32], qs[128]. */
static void q5_k_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    uint8_t L[QK];
    k4_block(x, b, 31, -0.5f, 15, L, qw);
    uint8_t *qh = b + 16, *ql = b + 48;
    memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < QK; n += 64) {
        for (int j = 0; j < 32; j++) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[j] = (uint8_t)(l1 | l2 << 4);
        }
        m1 = (uint8_t)(m1 << 2);
        m2 = (uint8_t)(m2 << 2);
        ql += 32;
    }
}

/* Q6_K: ql[128], qh[64], scales[16] (int8), d. */
static void q6_k_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    int8_t L[QK];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ib++) {
        scales[ib] = make_qx(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + 16 * ib : NULL);
        float a = fabsf(scales[ib]);
        if (a > max_abs_scale) {
            max_abs_scale = a;
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(b, 0, 210);
        return;
    }
    int8_t *sc = (int8_t *)(b + 192);
    float iscale = -128.f / max_scale;
    put_f16(b + 208, 1 / iscale);
    const float dall = f16_round(1 / iscale);
    for (int ib = 0; ib < 16; ib++)
        sc[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
    for (int j = 0; j < 16; j++) {
        const float d = dall * sc[j];
        if (d == 0.0f)
            continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + i] / d))) + 32);
    }
    uint8_t *ql = b, *qh = b + 128;
    for (int j = 0; j < QK; j += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; l++) {
            const int c0 = L[j + l], c1 = L[j + l + 32], c2 = L[j + l + 64], c3 = L[j + l + 96];
            ql[l] = (uint8_t)((c0 & 15) | (c2 & 15) << 4);
            ql[l + 32] = (uint8_t)((c1 & 15) | (c3 & 15) << 4);
            qh[l] = (uint8_t)(c0 >> 4 | (c1 >> 4) << 2 | (c2 >> 4) << 4 | (c3 >> 4) << 6);
        }
}

/* ---- IQ4_NL and IQ4_XS ---- */

/* The level whose midpoints with its neighbours bracket x (ties go up):
 * a branch-free binary search comparing 2x with sums of neighbours, exact. */
static int iq4_index(float x)
{
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        idx = x2 >= (float)(iq4_levels[j - 1] + iq4_levels[j]) ? j : idx;
    }
    return idx;
}

/* One sub-block of 32 with weights w (NULL: x^2): its scale, codes in L (ntry = 7). */
static float iq4_sub(const float *xb, uint8_t *L, const float *wt)
{
    const float max = signed_max(xb, 32);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, 32);
        return 0;
    }
    float d = -max / iq4_levels[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = iq4_index(id * xb[j]);
        L[j] = (uint8_t)l;
        float q = iq4_levels[l], w = wt ? wt[j] : xb[j] * xb[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -7; itry <= 7; itry++) {
        id = (itry + iq4_levels[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = iq4_levels[iq4_index(id * xb[j])], w = wt ? wt[j] : xb[j] * xb[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void iq4_pack(const uint8_t *L, int n, uint8_t *qs)
{
    for (int i = 0; i < n / 32; i++)
        for (int j = 0; j < 16; j++)
            qs[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

/* The importance weights of an IQ4 super-block of n values: sigma2 is twice
 * their mean square, multiplied in ggml's order. */
static const float *iq4_weights(const float *x, const float *qw, int n, float *w)
{
    if (!qw)
        return NULL;
    const float sigma2 = sum_squares(x, n) * (2.f / n);
    imatrix_weights(x, qw, sigma2, n, w);
    return w;
}

static void iq4_nl_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    uint8_t L[32];
    float w[32];
    float s = iq4_sub(x, L, iq4_weights(x, qw, 32, w));
    put_f16(b, s);
    float id = s != 0.0f ? 1 / s : 0;
    for (int j = 0; j < 32; j++)
        L[j] = (uint8_t)iq4_index(id * x[j]);
    iq4_pack(L, 32, b + 2);
}

/* IQ4_XS: d, scales_h (u16), scales_l[4], qs[128]. */
static void iq4_xs_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    uint8_t L[QK];
    float scales[8], w[QK];
    const float *wt = iq4_weights(x, qw, QK, w);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < 8; ib++) {
        scales[ib] = iq4_sub(x + 32 * ib, L + 32 * ib, wt ? wt + 32 * ib : NULL);
        float a = fabsf(scales[ib]);
        if (a > amax_scale) {
            amax_scale = a;
            max_scale = scales[ib];
        }
    }
    uint16_t sh = 0;
    uint8_t *sl = b + 4;
    float d = -max_scale / 32;
    put_f16(b, d);
    float id = d != 0.0f ? 1 / d : 0.f;
    for (int ib = 0; ib < 8; ib++) {
        int l = imax(-32, imin(31, nearest_int(id * scales[ib])));
        float dl = d * l;
        float idl = dl != 0.0f ? 1 / dl : 0.f;
        for (int j = 0; j < 32; j++)
            L[32 * ib + j] = (uint8_t)iq4_index(idl * x[32 * ib + j]);
        l += 32;
        if (ib % 2 == 0)
            sl[ib / 2] = (uint8_t)(l & 15);
        else
            sl[ib / 2] = (uint8_t)(sl[ib / 2] | (l & 15) << 4);
        sh = (uint16_t)(sh | (l >> 4) << 2 * ib);
    }
    b[2] = (uint8_t)sh;
    b[3] = (uint8_t)(sh >> 8);
    iq4_pack(L, QK, b + 8);
}

/* ---- dispatch ---- */

static fg_quant_block_fn block_quantizer(int wtype)
{
    switch (wtype) {
    case FG_WTYPE_Q4_0: return q4_0_block;
    case FG_WTYPE_Q4_1: return q4_1_block;
    case FG_WTYPE_Q5_0: return q5_0_block;
    case FG_WTYPE_Q5_1: return q5_1_block;
    case FG_WTYPE_Q2_K: return q2_k_block;
    case FG_WTYPE_Q3_K: return q3_k_block;
    case FG_WTYPE_Q4_K: return q4_k_block;
    case FG_WTYPE_Q5_K: return q5_k_block;
    case FG_WTYPE_Q6_K: return q6_k_block;
    case FG_WTYPE_IQ4_NL: return iq4_nl_block;
    case FG_WTYPE_IQ4_XS: return iq4_xs_block;
    case FG_WTYPE_IQ3_XXS: return fg_quant_iq3_xxs_block;
    case FG_WTYPE_IQ3_S: return fg_quant_iq3_s_block;
    case FG_WTYPE_IQ2_XXS: return fg_quant_iq2_xxs_block;
    case FG_WTYPE_IQ2_XS: return fg_quant_iq2_xs_block;
    case FG_WTYPE_IQ2_S: return fg_quant_iq2_s_block;
    default: return NULL;
    }
}

int fg_wtype_quantizes(int wtype)
{
    return wtype == FG_WTYPE_F32 || wtype == FG_WTYPE_F16 || wtype == FG_WTYPE_BF16 || wtype == FG_WTYPE_Q8_0 ||
           wtype == FG_WTYPE_MXFP4 || block_quantizer(wtype) != NULL;
}

int fg_wtype_requires_imatrix(int wtype)
{
    return wtype == FG_WTYPE_IQ2_XXS || wtype == FG_WTYPE_IQ2_XS;
}

int fg_wtype_quantize_row(int wtype, const float *x, void *y, int64_t n)
{
    return fg_wtype_quantize_row_imatrix(wtype, x, y, n, NULL);
}

int fg_wtype_quantize_row_imatrix(int wtype, const float *x, void *y, int64_t n, const float *qw)
{
    if (!fg_wtype_quantizes(wtype) || n < 1 || !x || !y || (!qw && fg_wtype_requires_imatrix(wtype)))
        return -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || (qw && !(qw[i] >= 0 && isfinite(qw[i]))))
            return -1;
    uint8_t *out = y;
    switch (wtype) {
    case FG_WTYPE_F32:
        memcpy(y, x, (size_t)n * sizeof *x);
        return 0;
    case FG_WTYPE_F16:
    case FG_WTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = wtype == FG_WTYPE_F16 ? fg_f32_to_f16(x[i]) : fg_f32_to_bf16(x[i]);
            out[2 * i] = (uint8_t)h;
            out[2 * i + 1] = (uint8_t)(h >> 8);
        }
        return 0;
    default: break;
    }
    int elems, bytes;
    if (!fg_wtype_block(wtype, &elems, &bytes) || n % elems != 0)
        return -1;
    if (wtype == FG_WTYPE_Q8_0) {
        fg_quantize_row_q8_0(x, y, n);
        return 0;
    }
    if (wtype == FG_WTYPE_MXFP4)
        return fg_quantize_row_mxfp4(x, y, n);
    fg_quant_block_fn fn = block_quantizer(wtype);
    if (!fg_quant_lattice_ready(wtype))
        return -1;
    const float row_sigma2 = qw ? sum_squares(x, n) / n : 0.f;
    for (int64_t b = 0; b < n / elems; b++)
        fn(x + b * elems, out + b * bytes, qw ? qw + b * elems : NULL, row_sigma2);
    return 0;
}
