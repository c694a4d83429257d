/* deepseek4.c: the deepseek4 architecture behind engine/model/arch.h: its
 * binding (model.c), its cache (cache.c) and its CPU forward pass (forward.c). */
#include "engine/model/deepseek4/cache.h"
#include "engine/model/deepseek4/forward.h"
#include "engine/model/deepseek4/model.h"

#include <stdlib.h>

const fg_ds4_model *fg_deepseek4_of(const fg_arch_model *m)
{
    return m && m->arch == &fg_arch_deepseek4 ? (const fg_ds4_model *)(const void *)m : NULL;
}

static fg_err ds4_load(const fg_gguf_t *g, fg_arch_model **out, fg_diag *diag)
{
    fg_ds4_model *m;
    fg_err e = fg_ds4_load(g, &m, diag);
    *out = e == FG_OK ? &m->base : NULL;
    return e;
}

static void ds4_free(fg_arch_model *m) { fg_ds4_free((fg_ds4_model *)(void *)m); }

static fg_kv_format ds4_cache_default(const fg_arch_model *am)
{
    const fg_ds4_hparams *hp = &fg_deepseek4_of(am)->hp;
    return hp->head_dim > hp->n_rope && hp->idx_dim % 16 == 0 ? FG_KV_FP8 : FG_KV_F16;
}

static fg_err ds4_cache(const fg_arch_model *am, fg_kv_format format, fg_kv_geometry *geo, fg_diag *diag)
{
    const fg_ds4_hparams *hp = &fg_deepseek4_of(am)->hp;
    fg_ds4_cache *c;
    fg_err e = fg_ds4_cache_layout(hp, format, &c, diag);
    if (e != FG_OK)
        return e;
    fg_ds4_cache_geometry(c, hp, geo);
    free(c);
    return FG_OK;
}

static fg_ds4_forward_t *fwd(fg_arch_forward_t *f) { return (fg_ds4_forward_t *)(void *)f; }

static fg_err ds4_forward_create(const fg_arch_model *am, const fg_kv_geometry *geo, int max_tokens, fg_pool_t *pool,
                                 fg_isa isa, fg_arch_forward_t **out, fg_diag *diag)
{
    fg_ds4_forward_t *f;
    fg_err e = fg_ds4_forward_create(fg_deepseek4_of(am), geo, max_tokens, pool, isa, &f, diag);
    *out = e == FG_OK ? (fg_arch_forward_t *)(void *)f : NULL;
    return e;
}

static void ds4_forward_destroy(fg_arch_forward_t *f) { fg_ds4_forward_destroy(fwd(f)); }

static fg_err ds4_forward_run(fg_arch_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs,
                              fg_diag *diag)
{
    return fg_ds4_forward_run(fwd(f), tokens, seqs, n_seqs, diag);
}

static fg_err ds4_forward_draft(fg_arch_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs,
                                fg_diag *diag)
{
    return fg_ds4_forward_draft(fwd(f), tokens, seqs, n_seqs, diag);
}

static void ds4_forward_count_experts(fg_arch_forward_t *f, _Atomic uint64_t *sink)
{
    fg_ds4_forward_count_experts(fwd(f), sink);
}

static void ds4_forward_set_ep(fg_arch_forward_t *f, fg_moe_ep_t *ep) { fg_ds4_forward_set_ep(fwd(f), ep); }

/* Every block has routed experts, the MTP block (n_layer) too; hash layers
 * differ only in their router, which runs on the token's home rank. */
static bool ds4_layer_experts(const fg_arch_model *am, int il, fg_arch_experts *out)
{
    const fg_ds4_model *m = fg_deepseek4_of(am);
    if (il < 0 || il >= m->hp.n_layer_all || m->hp.n_expert < 1)
        return false;
    const fg_ds4_layer *L = &m->layers[il];
    *out = (fg_arch_experts){.gate = &L->gate_exps, .up = &L->up_exps, .down = &L->down_exps,
                             .clamp = m->hp.clamp_exp[il], .act = fg_ds4_swiglu};
    return true;
}

const fg_arch fg_arch_deepseek4 = {
    .name = "deepseek4",
    .load = ds4_load,
    .free = ds4_free,
    .cache_default = ds4_cache_default,
    .cache = ds4_cache,
    .forward_create = ds4_forward_create,
    .forward_destroy = ds4_forward_destroy,
    .forward_run = ds4_forward_run,
    .forward_set_ep = ds4_forward_set_ep,
    .forward_count_experts = ds4_forward_count_experts,
    .layer_experts = ds4_layer_experts,
    .forward_draft = ds4_forward_draft, /* FG_ERR_UNSUPPORTED for a file without an MTP block */
};
