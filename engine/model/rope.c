/* rope.c: RoPE tables for deepseek2 (and, by parameters, deepseek4), YaRN included.
 *
 * YaRN as ggml's rope_yarn does it (ext_factor 1, beta_fast 32, beta_slow 1):
 * pair i blends the interpolated angle (pos * theta_i / factor) with the
 * original one by a linear ramp over the "correction dims". ggml multiplies
 * cos/sin by (1 + 0.1 ln factor) times the attn_factor llama.cpp passes:
 *  - with rope.scaling.yarn_log_multiplier (DeepSeek files): attn_factor is the
 *    inverse, so rotations keep magnitude 1, and the attention scale carries
 *    mscale = 1 + yarn_log_multiplier * ln(factor): kq_scale = mscale^2 / sqrt(nope + rope);
 *  - without it: attn_factor is 1, so cos/sin are scaled by m = 1 + 0.1 ln(factor)
 *    and kq_scale = m^2 / sqrt(nope + rope).
 */
#include "engine/model/rope.h"

#include <math.h>

static float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base)
{
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

/* The frequency tables; deepseek2's magnitude and attention scale are set by
 * fg_rope_init. */
static fg_err rope_tables(fg_rope *r, const fg_rope_params *p, fg_diag *diag)
{
    const int n = p->n_dims;
    if (n < 2 || n > FG_ROPE_MAX_DIMS || n % 2)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "rope dims %d unsupported (2..%d, even)", n, FG_ROPE_MAX_DIMS);
    if (!(p->base > 1.0f))
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "rope.freq_base %g must be > 1", p->base);
    r->n_dims = n;
    const bool yarn = p->yarn_factor > 0;
    r->freq_scale = yarn ? 1.0 / p->yarn_factor : 1.0;
    float low = 0, high = 0;
    if (yarn) {
        low = floorf(corr_dim(n, p->yarn_orig_ctx, p->beta_fast, p->base));
        high = ceilf(corr_dim(n, p->yarn_orig_ctx, p->beta_slow, p->base));
        low = low > 0 ? low : 0;
        high = high < (float)(n - 1) ? high : (float)(n - 1);
    }
    for (int i = 0; i < n / 2; i++) {
        double theta = pow((double)p->base, -2.0 * i / n);
        double mix = 1.0;
        if (yarn) {
            float y = ((float)i - low) / fmaxf(0.001f, high - low);
            mix = 1.0 - fmin(1.0, fmax(0.0, y));
        }
        r->ramp_mix[i] = mix;
        r->inv_freq[i] = theta * (r->freq_scale * (1.0 - mix) + mix);
    }
    r->mscale = 1.0f;
    r->attn_scale = 0;
    return FG_OK;
}

fg_err fg_rope_init(fg_rope *r, const fg_hparams *hp, fg_diag *diag)
{
    const fg_rope_params p = {.n_dims = hp->n_rope, .base = hp->rope_base, .yarn_factor = hp->yarn_factor,
                              .yarn_orig_ctx = hp->yarn_orig_ctx, .beta_fast = 32.0f, .beta_slow = 1.0f};
    fg_err e = rope_tables(r, &p, diag);
    if (e != FG_OK)
        return e;
    const bool yarn = hp->yarn_factor > 0;
    double m = 1.0;
    if (yarn && hp->yarn_log_mul != 0.0f) {
        m = 1.0 + hp->yarn_log_mul * log(hp->yarn_factor);
    } else if (yarn) {
        m = 1.0 + 0.1 * log(hp->yarn_factor);
        r->mscale = (float)m;
    }
    r->attn_scale = (float)(m * m / sqrt((double)(hp->n_nope + hp->n_rope)));
    return FG_OK;
}

fg_err fg_rope_init_params(fg_rope *r, const fg_rope_params *p, fg_diag *diag)
{
    fg_err e = rope_tables(r, p, diag);
    if (e == FG_OK && p->yarn_factor > 0 && !p->unit_magnitude)
        r->mscale = (float)(1.0 + 0.1 * log(p->yarn_factor));
    return e;
}

void fg_rope_coefs(const fg_rope *r, int pos, float *cs)
{
    for (int i = 0; i < r->n_dims / 2; i++) {
        double a = (double)pos * r->inv_freq[i];
        cs[2 * i] = (float)cos(a) * r->mscale;
        cs[2 * i + 1] = (float)sin(a) * r->mscale;
    }
}

void fg_rope_apply_coefs(const fg_rope *r, const float *cs, float *x)
{
    for (int i = 0; i < r->n_dims / 2; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

void fg_rope_apply(const fg_rope *r, float *x, int pos)
{
    float cs[FG_ROPE_MAX_DIMS];
    fg_rope_coefs(r, pos, cs);
    fg_rope_apply_coefs(r, cs, x);
}
