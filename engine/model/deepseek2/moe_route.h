/* moe_route.h: deepseek2 expert selection for one token.
 *
 * scores = softmax or sigmoid(router logits); selection uses scores + bias
 * (exp_probs_b) and, with groups, only the best n_group_used groups (a group's
 * score is the sum of its two best biased scores); the chosen experts' weights
 * are the unbiased scores, normalised to sum 1 when asked, times scale.
 * Pure; safe from any thread.
 */
#ifndef FG_MOE_ROUTE_H
#define FG_MOE_ROUTE_H

#include <stdbool.h>

#include "engine/model/deepseek2/model.h"

typedef struct fg_moe_route_params {
    int n_expert;
    int n_used;               /* k */
    fg_gating gating;
    const float *bias;        /* [n_expert] or NULL */
    int n_group;              /* 1: no groups */
    int n_group_used;
    bool norm;
    float scale;
} fg_moe_route_params;

/* Floats of scratch fg_moe_route needs. */
int fg_moe_route_scratch_floats(const fg_moe_route_params *p);

/* logits [n_expert] (not modified); writes ids[k] (descending by biased score,
 * lowest id first on ties) and weights[k]. */
void fg_moe_route(const fg_moe_route_params *p, const float *logits, int *ids, float *weights, float *scratch);

#endif
