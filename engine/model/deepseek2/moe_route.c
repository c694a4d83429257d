/* moe_route.c: expert selection (see moe_route.h for the rules). */
#include "engine/model/deepseek2/moe_route.h"

#include <math.h>

int fg_moe_route_scratch_floats(const fg_moe_route_params *p)
{
    return 2 * p->n_expert + p->n_group;
}

void fg_moe_route(const fg_moe_route_params *p, const float *logits, int *ids, float *weights, float *scratch)
{
    const int E = p->n_expert;
    float *scores = scratch;        /* [E] unbiased */
    float *chosen = scratch + E;    /* [E] 0 = eligible, 1 = taken or masked out */
    float *group_score = scratch + 2 * E;

    if (p->gating == FG_GATING_SIGMOID) {
        for (int e = 0; e < E; e++)
            scores[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else {
        float mx = logits[0];
        for (int e = 1; e < E; e++)
            mx = logits[e] > mx ? logits[e] : mx;
        float sum = 0;
        for (int e = 0; e < E; e++)
            sum += scores[e] = expf(logits[e] - mx);
        for (int e = 0; e < E; e++)
            scores[e] /= sum;
    }

    /* Selection score: unbiased score plus the optional bias. */
#define SEL(e) (scores[e] + (p->bias ? p->bias[e] : 0.0f))
    for (int e = 0; e < E; e++)
        chosen[e] = 0.0f;

    if (p->n_group > 1) {
        const int per = E / p->n_group;
        for (int gi = 0; gi < p->n_group; gi++) {
            float a = -INFINITY, b = -INFINITY; /* two best in the group */
            for (int j = 0; j < per; j++) {
                float s = SEL(gi * per + j);
                if (s > a) {
                    b = a;
                    a = s;
                } else if (s > b) {
                    b = s;
                }
            }
            group_score[gi] = a + b;
        }
        /* Keep the n_group_used best groups; mask the experts of the others. */
        for (int k = 0; k < p->n_group_used; k++) {
            int best = -1;
            for (int gi = 0; gi < p->n_group; gi++)
                if (group_score[gi] != -INFINITY && (best < 0 || group_score[gi] > group_score[best]))
                    best = gi;
            if (best >= 0)
                group_score[best] = -INFINITY; /* mark as kept */
        }
        for (int gi = 0; gi < p->n_group; gi++)
            if (group_score[gi] != -INFINITY)
                for (int j = 0; j < per; j++)
                    chosen[gi * per + j] = 1.0f;
    }

    /* Top-k over the biased scores among the eligible experts. */
    float sum = 0;
    for (int k = 0; k < p->n_used; k++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (chosen[e] == 0.0f && (best < 0 || SEL(e) > SEL(best)))
                best = e;
        if (best < 0) { /* cannot happen with validated hyperparameters */
            ids[k] = 0;
            weights[k] = 0;
            continue;
        }
        chosen[best] = 1.0f;
        ids[k] = best;
        weights[k] = scores[best];
        sum += scores[best];
    }
#undef SEL
    for (int k = 0; k < p->n_used; k++) {
        if (p->norm && sum > 0)
            weights[k] /= sum;
        weights[k] *= p->scale;
    }
}
