/* moe_route.cuh: deepseek2 expert selection on the GPU (launcher only), the
 * rules of engine/model/deepseek2/moe_route.h per token: scores = softmax or sigmoid(logits);
 * selection on scores + bias, limited to the best n_group_used groups (a
 * group's score: the sum of its two best biased scores); ids in descending
 * biased score, lowest id first on ties; weights = unbiased scores,
 * normalised to sum 1 when asked, times scale.
 *
 * Also the grouping the grouped expert products need: the n_tok * n_used
 * routed slots sorted by expert (a counting sort, stable in slot order).
 * CUDA's expf may differ from the host's by an ulp, so near-ties can pick
 * differently from the CPU; the self-check counts such cases apart.
 */
#ifndef FG_CUDA_MOE_ROUTE_CUH
#define FG_CUDA_MOE_ROUTE_CUH

#include "kernels/cuda/launch_check.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CUDA_MOE_MAX_EXPERTS 1024
#define FG_CUDA_MOE_MAX_USED 32
#define FG_CUDA_MOE_MAX_GROUPS 64
#define FG_CUDA_GATING_SOFTMAX 1 /* the values of fg_gating (engine/model/deepseek2/model.h) */
#define FG_CUDA_GATING_SIGMOID 2

typedef struct fg_cuda_moe_route_params {
    const float *logits;   /* [n_tok][n_expert] router outputs (device) */
    const float *bias;     /* [n_expert] exp_probs_b, or NULL (device) */
    int n_tok;
    int n_expert;          /* 1 .. FG_CUDA_MOE_MAX_EXPERTS */
    int n_used;            /* k, 1 .. min(n_expert, FG_CUDA_MOE_MAX_USED) */
    int gating;            /* FG_CUDA_GATING_* */
    int n_group;           /* 1: no groups; else divides n_expert, <= FG_CUDA_MOE_MAX_GROUPS */
    int n_group_used;      /* 1 .. n_group, and enough experts for k */
    int norm;              /* 1: normalise the k weights to sum 1 */
    float scale;
    int *ids;              /* [n_tok][n_used] (device) */
    float *weights;        /* [n_tok][n_used] (device) */
} fg_cuda_moe_route_params;

fg_cuda_status fg_cuda_moe_route_check(const fg_cuda_moe_route_params *p, int sm);
/* Checks, then launches one block per token. */
fg_cuda_status fg_cuda_moe_route(const fg_cuda_moe_route_params *p, const fg_cuda_launch *l);

typedef struct fg_cuda_moe_group_params {
    const int *ids;        /* [n_tok][k] expert of each routed slot, slot = t * k + j (device) */
    int n_tok;             /* >= 1 */
    int n_used;            /* k, 1 .. FG_CUDA_MOE_MAX_USED */
    int n_expert;
    int *seg;              /* [n_expert + 1] out: expert e's sorted slots are [seg[e], seg[e+1]) */
    int *sorted_tok;       /* [n_tok * k] out: the token of the slot at each sorted position */
    int *slot_pos;         /* [n_tok * k] out: the sorted position of each slot */
} fg_cuda_moe_group_params;

fg_cuda_status fg_cuda_moe_group_check(const fg_cuda_moe_group_params *p, int sm);
/* Checks, then launches one block (the counts are small: tokens x k). */
fg_cuda_status fg_cuda_moe_group(const fg_cuda_moe_group_params *p, const fg_cuda_launch *l);

#ifdef __cplusplus
}
#endif

#endif
