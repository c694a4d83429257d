/* launch_check_ds4.c: the host-side checks of the DeepSeek V4 ops
 * (kernels/cuda/ds4_*.cuh), beside launch_check.c's and by its rules:
 * plain C, built in every configuration, tested on the CPU
 * (tests/unit/test_cuda_launch_check.c). The limits are the kernels' own
 * (shared-memory arrays and per-thread accumulators are sized by them). */
#include "kernels/cuda/ds4_attn.cuh"
#include "kernels/cuda/ds4_compress.cuh"
#include "kernels/cuda/ds4_hc.cuh"
#include "kernels/cuda/ds4_index.cuh"
#include "kernels/cuda/launch_check.h"

#define F32_OK(ptr) fg_cuda_aligned((ptr), sizeof(float))
#define ARCH(sm) (fg_cuda_arch_supported(sm) ? FG_CUDA_OK : FG_CUDA_BAD_ARCH)

fg_cuda_status fg_cuda_ds4_pool_csa_check(const fg_cuda_ds4_pool_csa_params *p, int sm)
{
    if (p->n_blocks < 1 || p->n_blocks > (1 << 20) || p->r < 1 || p->r > FG_CUDA_DS4_MAX_RATIO || p->width < 1 ||
        p->width > FG_CUDA_DS4_MAX_WIDTH)
        return FG_CUDA_BAD_SHAPE;
    if (!F32_OK(p->row) || !F32_OK(p->cur) || (p->prev && !F32_OK(p->prev)) || (p->has_prev && !F32_OK(p->has_prev)))
        return FG_CUDA_BAD_POINTER;
    return ARCH(sm);
}

fg_cuda_status fg_cuda_ds4_hca_check(const fg_cuda_ds4_hca_params *p, int sm)
{
    if (p->n_seq < 1 || p->n_seq > (1 << 16) || p->ratio < 1 || p->ratio > FG_CUDA_DS4_MAX_RATIO || p->D < 1 ||
        p->D > FG_CUDA_DS4_MAX_WIDTH)
        return FG_CUDA_BAD_SHAPE;
    if (!F32_OK(p->state) || !F32_OK(p->rows) || !F32_OK(p->k) || !F32_OK(p->g) || !F32_OK(p->ape) ||
        !F32_OK(p->tok0) || !F32_OK(p->n_tok) || !F32_OK(p->pos0) || !F32_OK(p->row0))
        return FG_CUDA_BAD_POINTER;
    return ARCH(sm);
}

fg_cuda_status fg_cuda_ds4_index_score_check(const fg_cuda_ds4_index_score_params *p, int sm)
{
    if (p->n_tok < 1 || p->n_tok > (1 << 20) || p->max_rows < 1 || p->max_rows > (1 << 20) ||
        p->stride < p->max_rows || p->Hi < 1 || p->Di < 1 || p->Di > FG_CUDA_DS4_IDX_MAX_DIM ||
        p->Hi > FG_CUDA_DS4_IDX_MAX_QK / p->Di)
        return FG_CUDA_BAD_SHAPE;
    if (!F32_OK(p->scores) || !F32_OK(p->q) || !F32_OK(p->w) || !F32_OK(p->keys) || !F32_OK(p->key0) ||
        !F32_OK(p->n_rows))
        return FG_CUDA_BAD_POINTER;
    return ARCH(sm);
}

fg_cuda_status fg_cuda_ds4_topk_check(const fg_cuda_ds4_topk_params *p, int sm)
{
    if (p->n_tok < 1 || p->n_tok > (1 << 20) || p->stride < 1 || p->stride > (1 << 22) || p->k < 1 ||
        p->k > FG_CUDA_DS4_TOPK_MAX)
        return FG_CUDA_BAD_SHAPE;
    if (!F32_OK(p->sel) || !F32_OK(p->n_sel) || !F32_OK(p->scores) || !F32_OK(p->n_rows))
        return FG_CUDA_BAD_POINTER;
    return ARCH(sm);
}

fg_cuda_status fg_cuda_ds4_attn_check(const fg_cuda_ds4_attn_params *p, int sm)
{
    if (p->n_tok < 1 || p->n_tok > (1 << 20) || p->H < 1 || p->H > FG_CUDA_DS4_ATTN_MAX_HEADS || p->D < 1 ||
        p->D > FG_CUDA_DS4_ATTN_MAX_DIM || p->kstride < 1 || p->kstride > (1 << 24) || !(p->scale > 0.0f))
        return FG_CUDA_BAD_SHAPE;
    if (!F32_OK(p->out) || !F32_OK(p->q) || !F32_OK(p->keys) || !F32_OK(p->kidx) || !F32_OK(p->n_keys) ||
        !F32_OK(p->sinks))
        return FG_CUDA_BAD_POINTER;
    return ARCH(sm);
}

fg_cuda_status fg_cuda_ds4_hc_pre_check(const fg_cuda_ds4_hc_pre_params *p, int sm)
{
    if (p->n_tok < 1 || p->n_tok > (1 << 20) || p->E < 1 || p->E > (1 << 20) || p->iters < 1 ||
        p->iters > FG_CUDA_DS4_HC_MAX_ITERS || !(p->eps >= 0.0f))
        return FG_CUDA_BAD_SHAPE;
    if (!F32_OK(p->w) || !F32_OK(p->y) || !F32_OK(p->mix) || !F32_OK(p->x) || !F32_OK(p->scale) ||
        !F32_OK(p->base))
        return FG_CUDA_BAD_POINTER;
    return ARCH(sm);
}

fg_cuda_status fg_cuda_ds4_hc_post_check(const fg_cuda_ds4_hc_post_params *p, int sm)
{
    if (p->n_tok < 1 || p->n_tok > (1 << 20) || p->E < 1 || p->E > (1 << 20))
        return FG_CUDA_BAD_SHAPE;
    /* a thread reads all four streams of its channel while others write theirs */
    if (!F32_OK(p->out) || !F32_OK(p->w) || !F32_OK(p->o) || !F32_OK(p->x) || (const float *)p->out == p->x)
        return FG_CUDA_BAD_POINTER;
    return ARCH(sm);
}
