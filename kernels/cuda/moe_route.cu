/* moe_route.cu: routing, one block per token: the scores in parallel, then
 * the selection by thread 0 in the order engine/model/deepseek2/moe_route.c uses (so ties
 * break the same way); k and the group count are small, the expert count at
 * most FG_CUDA_MOE_MAX_EXPERTS. Grouping: one block, one thread, a counting
 * sort over tokens x k slots (a few thousand at most per step). */
#include "kernels/cuda/moe_route.cuh"

#include "kernels/cuda/common.cuh"

#define ROUTE_THREADS 128

__global__ void moe_route_kernel(fg_cuda_moe_route_params p)
{
    __shared__ float scores[FG_CUDA_MOE_MAX_EXPERTS];
    __shared__ unsigned char chosen[FG_CUDA_MOE_MAX_EXPERTS];
    __shared__ float red[32];
    const int t = blockIdx.x, E = p.n_expert, K = p.n_used;
    const float *lg = p.logits + (int64_t)t * E;
    if (p.gating == FG_CUDA_GATING_SIGMOID) {
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            scores[e] = 1.0f / (1.0f + expf(-lg[e]));
        __syncthreads();
    } else {
        float mx = -INFINITY;
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            mx = fmaxf(mx, lg[e]);
        mx = fg_block_max(mx, red);
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            scores[e] = expf(lg[e] - mx);
        __syncthreads();
        if (threadIdx.x == 0) { /* the CPU's summation order */
            float sum = 0.0f;
            for (int e = 0; e < E; e++)
                sum += scores[e];
            red[0] = sum;
        }
        __syncthreads();
        const float sum = red[0];
        for (int e = threadIdx.x; e < E; e += blockDim.x)
            scores[e] /= sum;
        __syncthreads();
    }
    if (threadIdx.x != 0)
        return;
#define SEL(e) (scores[e] + (p.bias ? p.bias[e] : 0.0f))
    for (int e = 0; e < E; e++)
        chosen[e] = 0;
    if (p.n_group > 1) {
        float group_score[FG_CUDA_MOE_MAX_GROUPS];
        const int G = p.n_group, per = E / p.n_group;
        for (int gi = 0; gi < G; gi++) {
            float a = -INFINITY, b = -INFINITY;
            for (int j = 0; j < per; j++) {
                const float s = SEL(gi * per + j);
                if (s > a) {
                    b = a;
                    a = s;
                } else if (s > b) {
                    b = s;
                }
            }
            group_score[gi] = a + b;
        }
        for (int k = 0; k < p.n_group_used; k++) {
            int best = -1;
            for (int gi = 0; gi < G; gi++)
                if (group_score[gi] != -INFINITY && (best < 0 || group_score[gi] > group_score[best]))
                    best = gi;
            if (best >= 0)
                group_score[best] = -INFINITY;
        }
        for (int gi = 0; gi < G; gi++)
            if (group_score[gi] != -INFINITY)
                for (int j = 0; j < per; j++)
                    chosen[gi * per + j] = 1;
    }
    int *ids = p.ids + (int64_t)t * K;
    float *w = p.weights + (int64_t)t * K;
    float sum = 0.0f;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!chosen[e] && (best < 0 || SEL(e) > SEL(best)))
                best = e;
        if (best < 0) {
            ids[k] = 0;
            w[k] = 0.0f;
            continue;
        }
        chosen[best] = 1;
        ids[k] = best;
        w[k] = scores[best];
        sum += scores[best];
    }
#undef SEL
    for (int k = 0; k < K; k++) {
        float v = w[k];
        if (p.norm && sum > 0.0f)
            v /= sum;
        w[k] = v * p.scale;
    }
}

extern "C" fg_cuda_status fg_cuda_moe_route(const fg_cuda_moe_route_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_moe_route_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    moe_route_kernel<<<p->n_tok, ROUTE_THREADS, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}

__global__ void moe_group_kernel(fg_cuda_moe_group_params p)
{
    __shared__ int cursor[FG_CUDA_MOE_MAX_EXPERTS];
    if (threadIdx.x != 0)
        return;
    for (int e = 0; e <= p.n_expert; e++)
        p.seg[e] = 0;
    const int n_slots = p.n_tok * p.n_used;
    for (int s = 0; s < n_slots; s++) {
        const int e = p.ids[s];
        if (e >= 0 && e < p.n_expert)
            p.seg[e + 1]++;
    }
    for (int e = 0; e < p.n_expert; e++) {
        p.seg[e + 1] += p.seg[e];
        cursor[e] = 0;
    }
    /* Fill in slot order, so each expert's slots stay in slot order. */
    for (int s = 0; s < n_slots; s++) {
        const int e = p.ids[s];
        if (e < 0 || e >= p.n_expert) {
            p.slot_pos[s] = -1; /* never produced by routing; the combine skips it */
            continue;
        }
        const int pos = p.seg[e] + cursor[e]++;
        p.slot_pos[s] = pos;
        p.sorted_tok[pos] = s / p.n_used;
    }
}

extern "C" fg_cuda_status fg_cuda_moe_group(const fg_cuda_moe_group_params *p, const fg_cuda_launch *l)
{
    fg_cuda_status st = fg_cuda_moe_group_check(p, l ? l->sm : 0);
    if (st != FG_CUDA_OK)
        return st;
    moe_group_kernel<<<1, 32, 0, fg_cuda_stream(l)>>>(*p);
    return fg_cuda_check_launch();
}
