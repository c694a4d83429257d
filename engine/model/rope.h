/* rope.h: rotary position embedding as llama.cpp applies it to deepseek2
 * ("normal" mode: adjacent pairs (x[2i], x[2i+1]) rotate by pos * theta_i,
 * theta_i = base^(-2i/n)), with YaRN frequency blending and magnitude scaling
 * when the model declares rope.scaling.type = yarn (and the same tables for
 * other architectures, fg_rope_init_params).
 * Immutable after init; safe from any thread.
 */
#ifndef FG_ROPE_H
#define FG_ROPE_H

#include <stdbool.h>

#include "engine/model/deepseek2/model.h"

#define FG_ROPE_MAX_DIMS 512

typedef struct fg_rope {
    int n_dims;
    double inv_freq[FG_ROPE_MAX_DIMS / 2];  /* per pair: effective frequency */
    double ramp_mix[FG_ROPE_MAX_DIMS / 2];  /* YaRN: 1 = extrapolate (original), 0 = interpolate */
    double freq_scale;                      /* 1 / yarn factor, 1 without YaRN */
    float mscale;                           /* magnitude factor applied to cos/sin */
    float attn_scale;                       /* softmax scale for q.k: mscale^2 / sqrt(nope + rope) style */
} fg_rope;

/* Errors: FG_ERR_MODEL_HPARAM when the rope width exceeds FG_ROPE_MAX_DIMS. */
fg_err fg_rope_init(fg_rope *r, const fg_hparams *hp, fg_diag *diag);

/* RoPE of n_dims at base, with YaRN when yarn_factor > 0 (ggml's ramp over the
 * correction dims of beta_fast/beta_slow), for architectures other than
 * deepseek2. unit_magnitude: cos/sin are not scaled (deepseek4 passes an
 * attn_factor that cancels ggml's YaRN magnitude); attn_scale is left 0.
 * Errors: FG_ERR_MODEL_HPARAM (bad width or base). */
typedef struct fg_rope_params {
    int n_dims;
    float base;
    float yarn_factor;   /* 0: no YaRN */
    int yarn_orig_ctx;
    float beta_fast, beta_slow;
    bool unit_magnitude;
} fg_rope_params;
fg_err fg_rope_init_params(fg_rope *r, const fg_rope_params *p, fg_diag *diag);

/* Rotates x[0..n_dims) in place for position pos. */
void fg_rope_apply(const fg_rope *r, float *x, int pos);

/* The rotation of position pos, for applying it many times (every head and
 * layer of a token): cs[2i], cs[2i + 1] = cos, sin of pair i's angle, times
 * mscale; cs is [n_dims] floats. */
void fg_rope_coefs(const fg_rope *r, int pos, float *cs);

/* Rotates x[0..n_dims) in place by coefficients from fg_rope_coefs: the same
 * bits as fg_rope_apply at that position. */
void fg_rope_apply_coefs(const fg_rope *r, const float *cs, float *x);

#endif
