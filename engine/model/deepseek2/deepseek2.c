/* deepseek2.c: the deepseek2 architecture behind engine/model/arch.h: its
 * model binding (model.c), its cache layout (here) and its CPU forward pass
 * (forward.c). */
#include <string.h>

#include "engine/model/deepseek2/forward.h"
#include "engine/model/deepseek2/model.h"
#include "kernels/cpu/vecops.h"

fg_err fg_kv_geometry_init(fg_kv_geometry *geo, const fg_hparams *hp, fg_kv_format format, fg_diag *diag)
{
    memset(geo, 0, sizeof *geo);
    if ((unsigned)format >= FG_KV__COUNT)
        return fg_diag_set(diag, FG_ERR_KV_FORMAT, "unknown KV cache format %d", (int)format);
    size_t lat = fg_kv_bytes(format, hp->kv_lora), rope = fg_kv_bytes(format, hp->n_rope);
    if (!lat || !rope)
        return fg_diag_set(diag, FG_ERR_KV_FORMAT, "KV format %s cannot store widths %d and %d (fp4 needs multiples of 16)",
                           fg_kv_format_name(format), hp->kv_lora, hp->n_rope);
    geo->format = format;
    geo->n_layer = hp->n_layer + hp->n_nextn; /* the MTP block's rows last */
    geo->kv_lora = hp->kv_lora;
    geo->n_rope = hp->n_rope;
    geo->latent_bytes = lat;
    /* Rows are padded to 4 bytes so the f32 scales of INT8/FP8 segments stay aligned. */
    geo->row_bytes = (lat + rope + 3) & ~(size_t)3;
    geo->bytes_per_token = geo->row_bytes * (size_t)geo->n_layer;
    geo->page_bytes = geo->bytes_per_token * FG_KV_PAGE_TOKENS;
    return FG_OK;
}

const fg_model *fg_deepseek2_of(const fg_arch_model *m)
{
    /* base is fg_model's first member */
    return m && (m->arch == &fg_arch_deepseek2 || m->arch == &fg_arch_deepseek2_mtp) ? (const fg_model *)(const void *)m
                                                                                    : NULL;
}

static fg_err ds2_load(const fg_gguf_t *g, fg_arch_model **out, fg_diag *diag)
{
    fg_model *m;
    fg_err e = fg_model_load(g, &m, diag);
    *out = e == FG_OK ? &m->base : NULL;
    return e;
}

static void ds2_free(fg_arch_model *m) { fg_model_free((fg_model *)(void *)m); }

static fg_kv_format ds2_cache_default(const fg_arch_model *am)
{
    const fg_hparams *hp = &fg_deepseek2_of(am)->hp;
    return fg_kv_bytes(FG_KV_FP4, hp->kv_lora) && fg_kv_bytes(FG_KV_FP4, hp->n_rope) ? FG_KV_FP4 : FG_KV_F16;
}

static fg_err ds2_cache(const fg_arch_model *am, fg_kv_format format, fg_kv_geometry *geo, fg_diag *diag)
{
    return fg_kv_geometry_init(geo, &fg_deepseek2_of(am)->hp, format, diag);
}

/* The arch's opaque forward is deepseek2's fg_forward_t. */
static fg_forward_t *fwd(fg_arch_forward_t *f) { return (fg_forward_t *)(void *)f; }

static fg_err ds2_forward_create(const fg_arch_model *am, const fg_kv_geometry *geo, int max_tokens, fg_pool_t *pool,
                                 fg_isa isa, fg_arch_forward_t **out, fg_diag *diag)
{
    fg_forward_t *f;
    fg_err e = fg_forward_create(fg_deepseek2_of(am), geo, max_tokens, pool, isa, &f, diag);
    *out = e == FG_OK ? (fg_arch_forward_t *)(void *)f : NULL;
    return e;
}

static void ds2_forward_destroy(fg_arch_forward_t *f) { fg_forward_destroy(fwd(f)); }

static fg_err ds2_forward_run(fg_arch_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs,
                              fg_diag *diag)
{
    return fg_forward_run(fwd(f), tokens, seqs, n_seqs, diag);
}

static fg_err ds2_forward_draft(fg_arch_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs,
                                fg_diag *diag)
{
    return fg_forward_draft(fwd(f), tokens, seqs, n_seqs, diag);
}

static void ds2_forward_set_ep(fg_arch_forward_t *f, fg_moe_ep_t *ep) { fg_forward_set_ep(fwd(f), ep); }

static void ds2_forward_count_experts(fg_arch_forward_t *f, _Atomic uint64_t *sink)
{
    fg_forward_count_experts(fwd(f), sink);
}

/* deepseek2's SwiGLU, as forward.c runs it (no clamp). */
static void ds2_act(fg_isa isa, float *gate, float *up, int n, float clamp)
{
    (void)clamp;
    fg_silu_mul_isa(isa, gate, up, n);
}

static bool ds2_layer_experts(const fg_arch_model *am, int il, fg_arch_experts *out)
{
    const fg_model *m = fg_deepseek2_of(am);
    if (il < 0 || il >= m->base.n_layer_run || !m->layers[il].is_moe)
        return false;
    const fg_layer *ly = &m->layers[il];
    *out = (fg_arch_experts){.gate = &ly->gate_exps, .up = &ly->up_exps, .down = &ly->down_exps, .act = ds2_act};
    return true;
}

#define DS2_FUNCTIONS                                                                                            \
    .name = "deepseek2", .load = ds2_load, .free = ds2_free, .cache_default = ds2_cache_default, .cache = ds2_cache,   \
    .forward_create = ds2_forward_create, .forward_destroy = ds2_forward_destroy, .forward_run = ds2_forward_run,     \
    .forward_set_ep = ds2_forward_set_ep, .forward_count_experts = ds2_forward_count_experts,                        \
    .layer_experts = ds2_layer_experts

/* Two tables, so that forward_draft is NULL for a model without the MTP
 * block (arch.h): the loaded model's base.arch is the second one when it has
 * the block. Both are "deepseek2"; the engine finds and loads the first. */
const fg_arch fg_arch_deepseek2 = {DS2_FUNCTIONS};
const fg_arch fg_arch_deepseek2_mtp = {DS2_FUNCTIONS, .forward_draft = ds2_forward_draft};
