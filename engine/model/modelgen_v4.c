/* modelgen_v4.c: the generator's `deepseek4` (DeepSeek V4) presets, checks,
 * metadata keys and tensor list (modelgen.c writes them; modelgen_plan.h).
 *
 * Names, shapes and key types follow llama.cpp: the tensor list is
 * llama_model_deepseek4::load_arch_tensors in its order (src/models/
 * deepseek4.cpp), the keys are the ones its load_arch_hparams and the generic
 * loader read, typed as conversion/deepseek.py writes them (compress_ratios an
 * INT32 array with one entry per block, swiglu_clamp_exp an F32 array, counts
 * UINT32). block_count counts the MTP block, whose ratio is 0; the first
 * hash_layer_count blocks carry ffn_gate_tid2eid (I32 {K, V}) instead of
 * exp_probs_b. Types as the converter writes them: norms, sinks,
 * hyper-connections and compressors F32 whatever the spec says; the spec picks
 * the dense matrices' type, the embedding/head/router/indexer-weights type and
 * the routed experts' type (v4-mini: Q8_0, BF16, MXFP4).
 *
 * Initial values (modelgen.h has the list) follow tests/reference/
 * make_v4_fixture.py, whose scales keep the residual streams O(1) through
 * the hyper-connections and attention.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/model/gguf.h"
#include "engine/model/modelgen_plan.h"
#include "engine/tokenizer/bpe_train.h"

#define ARCH "deepseek4"
#define MAX_DIM (1u << 20)
#define HC 4u                      /* hyper-connection streams: llama.cpp's graph takes only 4 */
#define HC_MIX ((2 + HC) * HC)     /* pre (4), post (4), comb (4 x 4) */
#define CSA 4u
#define HCA 128u

/* ---- presets ---- */

static void v4_common(fg_modelgen_spec *s)
{
    s->arch = FG_MODELGEN_DEEPSEEK4;
    s->rope_freq_base = 10000.0f;
    s->rms_eps = 1e-6f;
    /* V4 Flash's YaRN: compressed layers stretch a 64K training context 16 times */
    s->yarn_factor = 16.0f;
    s->yarn_orig_ctx = 65536;
    s->n_expert_shared = 1;
    s->gating = FG_MODELGEN_GATING_SQRT_SOFTPLUS;
    s->expert_weights_norm = true;
    s->expert_weights_scale = 1.5f;
    s->seed = 42;
    s->v4.n_nextn = 1;
    s->v4.hc_sinkhorn_iters = 20;
    s->v4.hc_eps = 1e-6f;
    s->v4.compress_rope_base = 160000.0f;
    s->v4.swiglu_clamp = 10.0f;
    s->v4.yarn_beta_fast = 32.0f;
    s->v4.yarn_beta_slow = 1.0f;
}

bool fg_modelgen_v4_preset(const char *name, fg_modelgen_spec *out)
{
    fg_modelgen_spec s;
    memset(&s, 0, sizeof s);
    if (strcmp(name, "v4-tiny") == 0) {
        /* make_v4_fixture.py's geometry: within 300 tokens the HCA layer
         * closes two blocks and the indexer's top-16 drops CSA rows */
        static const uint32_t ratios[] = {0, CSA, HCA, CSA};
        snprintf(s.name, sizeof s.name, "flashgate-v4-tiny");
        s.n_vocab = 512;
        s.n_ctx = 4096;
        s.n_embd = 64;
        s.n_layer = 4;
        s.n_head = 4;
        s.q_lora_rank = 32;
        s.rope_dim = 16;
        s.n_expert = 8;
        s.n_expert_used = 2;
        s.n_ff_exp = 32;
        s.weight_type = FG_GGML_F32;
        s.v4.head_dim = 32;
        s.v4.window = 16;
        memcpy(s.v4.ratios, ratios, sizeof ratios);
        s.v4.n_indexer_head = 2;
        s.v4.indexer_dim = 32;
        s.v4.indexer_top_k = 16;
        s.v4.n_out_group = 2;
        s.v4.out_lora_rank = 16;
        s.v4.n_hash_layer = 1;
        s.v4.embd_type = FG_GGML_F32;
        s.v4.expert_type = FG_GGML_F32;
    } else if (strcmp(name, "v4-mini") == 0) {
        /* V4 Flash's layout ([0, 0] + [4, 128] x k + [4], 3 hash layers, window
         * 128, indexer top-512, MTP) at about 400M parameters */
        static const uint32_t ratios[] = {0, 0, CSA, HCA, CSA, HCA, CSA, HCA, CSA};
        snprintf(s.name, sizeof s.name, "flashgate-v4-mini");
        s.n_vocab = 1024;
        s.n_ctx = 1048576; /* Flash's: yarn_orig_ctx x yarn_factor */
        s.n_embd = 1024;
        s.n_layer = 9;
        s.n_head = 8;
        s.q_lora_rank = 384;
        s.rope_dim = 64;
        s.n_expert = 64;
        s.n_expert_used = 6;
        s.n_ff_exp = 192;
        s.weight_type = FG_GGML_Q8_0;
        s.v4.head_dim = 256;
        s.v4.window = 128;
        memcpy(s.v4.ratios, ratios, sizeof ratios);
        s.v4.n_indexer_head = 8;
        s.v4.indexer_dim = 128;
        s.v4.indexer_top_k = 512;
        s.v4.n_out_group = 4;
        s.v4.out_lora_rank = 256;
        s.v4.n_hash_layer = 3;
        s.v4.embd_type = FG_GGML_BF16;
        s.v4.expert_type = FG_GGML_MXFP4;
    } else {
        return false;
    }
    v4_common(&s);
    *out = s;
    return true;
}

/* ---- validation ---- */

fg_err fg_modelgen_v4_validate(const fg_modelgen_spec *s, fg_diag *diag)
{
    const fg_modelgen_v4 *v = &s->v4;
    const fg_modelgen_dim dims[] = {
        {"n_vocab", s->n_vocab, MAX_DIM},
        {"n_ctx", s->n_ctx, 1u << 30},
        {"n_embd", s->n_embd, MAX_DIM / HC},
        {"n_layer", s->n_layer, FG_MODELGEN_V4_MAX_LAYERS},
        {"n_head", s->n_head, 4096},
        {"q_lora_rank", s->q_lora_rank, MAX_DIM},
        {"rope_dim", s->rope_dim, 4096},
        {"n_expert", s->n_expert, 4096},
        {"n_expert_used", s->n_expert_used, 4096},
        {"n_expert_shared", s->n_expert_shared, 64},
        {"n_ff_exp", s->n_ff_exp, MAX_DIM},
        {"v4.head_dim", v->head_dim, 4096},
        {"v4.window", v->window, 1u << 20},
        {"v4.n_indexer_head", v->n_indexer_head, 4096},
        {"v4.indexer_dim", v->indexer_dim, 4096},
        {"v4.indexer_top_k", v->indexer_top_k, 1u << 20},
        {"v4.n_out_group", v->n_out_group, 4096},
        {"v4.out_lora_rank", v->out_lora_rank, MAX_DIM},
        {"v4.hc_sinkhorn_iters", v->hc_sinkhorn_iters, 1000},
    };
    FG_TRY(fg_modelgen_check_dims(dims, sizeof dims / sizeof dims[0], diag));
    /* what deepseek2 has and a deepseek4 file has no key or tensor for */
    const struct {
        const char *field;
        uint32_t v;
    } unused[] = {
        {"n_layer_dense_lead", s->n_layer_dense_lead}, {"n_ff", s->n_ff},
        {"kv_lora_rank", s->kv_lora_rank},           {"nope_dim", s->nope_dim},
        {"v_dim", s->v_dim},                         {"n_expert_groups", s->n_expert_groups},
        {"n_expert_groups_used", s->n_expert_groups_used}, {"tied_embeddings", s->tied_embeddings},
    };
    for (size_t i = 0; i < sizeof unused / sizeof unused[0]; i++) {
        if (unused[i].v != 0)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: deepseek4 has no %s (it must be 0, not %u)",
                               unused[i].field, unused[i].v);
    }
    if (s->yarn_log_mul != 0.0f)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: deepseek4 has no yarn_log_mul (it must be 0)");
    if (s->n_vocab < FG_BPE_BYTE_TOKENS + 2)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_vocab = %u is below 258 (256 bytes + BOS + EOS)",
                           s->n_vocab);
    if ((uint64_t)s->n_head * v->head_dim > MAX_DIM || (uint64_t)v->n_indexer_head * v->indexer_dim > MAX_DIM ||
        (uint64_t)v->n_out_group * v->out_lora_rank > MAX_DIM ||
        (uint64_t)s->n_ff_exp * s->n_expert_shared > MAX_DIM)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "modelgen: n_head x head_dim, indexer heads x dim, output groups x rank or the shared "
                           "expert width exceeds %u",
                           MAX_DIM);
    if (s->n_head % v->n_out_group != 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: v4.n_out_group = %u must divide n_head = %u",
                           v->n_out_group, s->n_head);
    if (s->rope_dim % 2 || s->rope_dim > v->head_dim || s->rope_dim > v->indexer_dim)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "modelgen: rope_dim = %u must be even and fit v4.head_dim = %u and v4.indexer_dim = %u",
                           s->rope_dim, v->head_dim, v->indexer_dim);
    for (uint32_t il = 0; il < s->n_layer; il++) {
        uint32_t r = v->ratios[il];
        if (r != 0 && r != CSA && r != HCA)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "modelgen: v4.ratios[%u] = %u must be 0, 4 (CSA) or 128 (HCA)", il, r);
    }
    for (uint32_t il = s->n_layer; il < FG_MODELGEN_V4_MAX_LAYERS; il++) {
        if (v->ratios[il] != 0)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "modelgen: v4.ratios[%u] = %u lies past the %u trunk layers (the MTP block's is 0)",
                               il, v->ratios[il], s->n_layer);
    }
    if (v->n_hash_layer > s->n_layer)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: v4.n_hash_layer = %u exceeds n_layer = %u",
                           v->n_hash_layer, s->n_layer);
    if (v->n_nextn > 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: v4.n_nextn = %u must be 0 or 1", v->n_nextn);
    if (s->n_expert_used > s->n_expert)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_expert_used = %u exceeds n_expert = %u",
                           s->n_expert_used, s->n_expert);
    if (s->gating != FG_MODELGEN_GATING_SQRT_SOFTPLUS)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: deepseek4 gating = %u must be 4 (sqrt-softplus)",
                           s->gating);
    if (!fg_modelgen_matrix_type(s->weight_type) || !fg_modelgen_matrix_type(v->embd_type))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "modelgen: weight_type = %u and v4.embd_type = %u must be 0 (F32), 1 (F16), 30 (BF16) or "
                           "8 (Q8_0)",
                           s->weight_type, v->embd_type);
    if (!fg_modelgen_matrix_type(v->expert_type) && v->expert_type != FG_GGML_MXFP4)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "modelgen: v4.expert_type = %u must be 0 (F32), 1 (F16), 30 (BF16), 8 (Q8_0) or 39 (MXFP4)",
                           v->expert_type);
    if (!fg_modelgen_positive(s->rope_freq_base) || !fg_modelgen_positive(v->compress_rope_base))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: rope_freq_base and v4.compress_rope_base must be "
                                                     "positive");
    if (!fg_modelgen_positive(s->rms_eps) || !fg_modelgen_positive(v->hc_eps))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: rms_eps and v4.hc_eps must be positive");
    if (!fg_modelgen_positive(s->expert_weights_scale))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: expert_weights_scale must be positive");
    if (!(isfinite(v->swiglu_clamp) && v->swiglu_clamp >= 0.0f))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: v4.swiglu_clamp must be >= 0 (0: no clamp)");
    if (s->yarn_factor != 0.0f) {
        if (!(isfinite(s->yarn_factor) && s->yarn_factor >= 1.0f))
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: yarn_factor must be 0 (off) or >= 1");
        if (s->yarn_orig_ctx == 0)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: yarn_orig_ctx must be set with yarn_factor");
        if (!fg_modelgen_positive(v->yarn_beta_fast) || !fg_modelgen_positive(v->yarn_beta_slow))
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: v4.yarn_beta_fast and _slow must be positive");
    }
    return FG_OK;
}

/* ---- the tensor list ---- */

/* A matrix {ne0, ne1[, ne2]} of the given type, N(0, gain/sqrt(ne0)). */
static void matrix(fg_modelgen_visit_fn fn, void *ctx, const char *name, uint32_t type, int64_t ne0, int64_t ne1,
                   int64_t ne2, double gain)
{
    fg_modelgen_emit(fn, ctx, name, ne2 > 1 ? 3 : 2, ne0, ne1, ne2, fg_modelgen_block_type(type, ne0), 0.0,
                     gain / sqrt((double)ne0), ne2 > 1);
}

/* An F32 vector {n} (or small F32 matrix {n, m}), N(mean, sigma). */
static void f32(fg_modelgen_visit_fn fn, void *ctx, const char *name, int64_t n, int64_t m, double mean, double sigma)
{
    fg_modelgen_emit(fn, ctx, name, m > 1 ? 2 : 1, n, m, 1, FG_GGML_F32, mean, sigma, false);
}

/* The three hyper-connection tensors of one mixing point (prefix "blk.N.hc_attn_" etc.). */
static void hc_mix(fg_modelgen_visit_fn fn, void *ctx, const char *prefix, int64_t E, int64_t n_mix)
{
    char nm[64];
    snprintf(nm, sizeof nm, "%sfn.weight", prefix);
    matrix(fn, ctx, nm, FG_GGML_F32, HC * E, n_mix, 1, 0.5);
    snprintf(nm, sizeof nm, "%sbase.weight", prefix);
    f32(fn, ctx, nm, n_mix, 1, 0.0, 0.5);
    snprintf(nm, sizeof nm, "%sscale.weight", prefix);
    if (n_mix == HC) /* the head's one scale: the fixture's constant */
        f32(fn, ctx, nm, 1, 1, 0.7, 0.0);
    else
        f32(fn, ctx, nm, 3, 1, 0.75, 0.15);
}

/* One compressor: kv and gate {E, c*width}, APE {c*width, r}, norm {width}. */
static void compressor(fg_modelgen_visit_fn fn, void *ctx, uint32_t il, const char *stem, int64_t E, int64_t width,
                       uint32_t r)
{
    const int64_t c = r == CSA ? 2 : 1; /* CSA pools the previous block's half too */
    char nm[64];
    snprintf(nm, sizeof nm, "blk.%u.%s_kv.weight", il, stem);
    matrix(fn, ctx, nm, FG_GGML_F32, E, c * width, 1, 1.0);
    snprintf(nm, sizeof nm, "blk.%u.%s_gate.weight", il, stem);
    matrix(fn, ctx, nm, FG_GGML_F32, E, c * width, 1, 1.0);
    snprintf(nm, sizeof nm, "blk.%u.%s_ape.weight", il, stem);
    f32(fn, ctx, nm, c * width, r, 0.0, 0.5);
    snprintf(nm, sizeof nm, "blk.%u.%s_norm.weight", il, stem);
    fg_modelgen_emit_norm(fn, ctx, nm, width);
}

void fg_modelgen_v4_visit(const fg_modelgen_spec *s, fg_modelgen_visit_fn fn, void *ctx)
{
    const fg_modelgen_v4 *v = &s->v4;
    const int64_t E = s->n_embd, V = s->n_vocab, H = s->n_head, D = v->head_dim, Q = s->q_lora_rank;
    const int64_t G = v->n_out_group, R = v->out_lora_rank, Hi = v->n_indexer_head, Di = v->indexer_dim;
    const int64_t X = s->n_expert, K = s->n_expert_used, F = s->n_ff_exp, Fs = F * s->n_expert_shared;
    const uint32_t dense = s->weight_type, embd = v->embd_type, experts = v->expert_type;
    char nm[64];

    /* token_embd {E, V}: rows are looked up, not multiplied, so N(0, 1) */
    fg_modelgen_emit(fn, ctx, "token_embd.weight", 2, E, V, 1, fg_modelgen_block_type(embd, E), 0.0, 1.0, false);
    fg_modelgen_emit_norm(fn, ctx, "output_norm.weight", E);
    /* a wider logit spread keeps greedy choices robust to small numeric differences */
    matrix(fn, ctx, "output.weight", embd, E, V, 1, 3.0);
    hc_mix(fn, ctx, "output_hc_", E, HC);

#define BLK(suffix) (snprintf(nm, sizeof nm, "blk.%u." suffix, il), nm)
    for (uint32_t il = 0; il < s->n_layer + v->n_nextn; il++) {
        const uint32_t r = il < s->n_layer ? v->ratios[il] : 0;
        fg_modelgen_emit_norm(fn, ctx, BLK("attn_norm.weight"), E);
        f32(fn, ctx, BLK("attn_sinks.weight"), H, 1, 0.0, 1.0);
        matrix(fn, ctx, BLK("attn_q_a.weight"), dense, E, Q, 1, 1.0);
        fg_modelgen_emit_norm(fn, ctx, BLK("attn_q_a_norm.weight"), Q);
        matrix(fn, ctx, BLK("attn_q_b.weight"), dense, Q, H * D, 1, 1.0);
        matrix(fn, ctx, BLK("attn_kv.weight"), dense, E, D, 1, 1.0);
        fg_modelgen_emit_norm(fn, ctx, BLK("attn_kv_a_norm.weight"), D);
        /* G matrices {H*D/G, R} stored side by side */
        matrix(fn, ctx, BLK("attn_output_a.weight"), dense, H * D / G, R * G, 1, 1.0);
        matrix(fn, ctx, BLK("attn_output_b.weight"), dense, G * R, E, 1, 1.0);
        hc_mix(fn, ctx, BLK("hc_attn_"), E, HC_MIX);
        hc_mix(fn, ctx, BLK("hc_ffn_"), E, HC_MIX);
        if (r != 0) {
            compressor(fn, ctx, il, "attn_compressor", E, D, r);
            if (r == CSA) {
                matrix(fn, ctx, BLK("indexer.proj.weight"), embd, E, Hi, 1, 1.0);
                matrix(fn, ctx, BLK("indexer.attn_q_b.weight"), dense, Q, Hi * Di, 1, 1.0);
                compressor(fn, ctx, il, "indexer_compressor", E, Di, CSA);
            }
        }
        /* the router, as llama.cpp's converter stores it (BF16 in v4-mini) */
        matrix(fn, ctx, BLK("ffn_gate_inp.weight"), embd, E, X, 1, 1.0);
        if (il < v->n_hash_layer) {
            fg_modelgen_tensor t;
            memset(&t, 0, sizeof t);
            snprintf(t.name, sizeof t.name, "%s", BLK("ffn_gate_tid2eid.weight"));
            t.n_dims = 2;
            t.ne[0] = K; /* K expert ids per vocabulary token */
            t.ne[1] = V;
            t.ne[2] = 1;
            t.type = FG_GGML_I32;
            t.init = FG_MODELGEN_INIT_EXPERT_IDS;
            t.id_range = (uint32_t)X;
            fn(ctx, &t);
        } else {
            f32(fn, ctx, BLK("exp_probs_b.bias"), X, 1, 0.0, 0.1);
        }
        fg_modelgen_emit_norm(fn, ctx, BLK("ffn_norm.weight"), E);
        matrix(fn, ctx, BLK("ffn_gate_exps.weight"), experts, E, F, X, 1.0);
        matrix(fn, ctx, BLK("ffn_down_exps.weight"), experts, F, E, X, 1.0);
        matrix(fn, ctx, BLK("ffn_up_exps.weight"), experts, E, F, X, 1.0);
        matrix(fn, ctx, BLK("ffn_gate_shexp.weight"), dense, E, Fs, 1, 1.0);
        matrix(fn, ctx, BLK("ffn_down_shexp.weight"), dense, Fs, E, 1, 1.0);
        matrix(fn, ctx, BLK("ffn_up_shexp.weight"), dense, E, Fs, 1, 1.0);
        if (il >= s->n_layer) {
            /* MTP: eh_proj([enorm(embed(next)); hnorm(h)]) */
            matrix(fn, ctx, BLK("nextn.eh_proj.weight"), dense, 2 * E, E, 1, 1.0);
            fg_modelgen_emit_norm(fn, ctx, BLK("nextn.enorm.weight"), E);
            fg_modelgen_emit_norm(fn, ctx, BLK("nextn.hnorm.weight"), E);
        }
    }
#undef BLK
}

/* ---- metadata ---- */

typedef enum key_kind { K_U32, K_F32, K_BOOL, K_STR } key_kind;

typedef struct key_entry {
    const char *key;
    key_kind kind;
    uint32_t u;
    float f;
    const char *str;
} key_entry;

static fg_err add_entries(fg_gguf_writer_t *w, const key_entry *keys, size_t n, const char **err_key)
{
    fg_err e = FG_OK;
    for (size_t i = 0; i < n && !e; i++) {
        const key_entry *k = &keys[i];
        *err_key = k->key;
        switch (k->kind) {
        case K_U32: e = fg_gguf_writer_add_u32(w, k->key, k->u); break;
        case K_F32: e = fg_gguf_writer_add_f32(w, k->key, k->f); break;
        case K_BOOL: e = fg_gguf_writer_add_bool(w, k->key, k->u != 0); break;
        case K_STR: e = fg_gguf_writer_add_str(w, k->key, k->str); break;
        }
    }
    return e;
}

fg_err fg_modelgen_v4_add_keys(fg_gguf_writer_t *w, const fg_modelgen_spec *s, const char **err_key)
{
    const fg_modelgen_v4 *v = &s->v4;
    const uint32_t n_blocks = s->n_layer + v->n_nextn;
    const key_entry keys[] = {
        {"general.architecture", K_STR, 0, 0, ARCH},
        {"general.name", K_STR, 0, 0, s->name},
        {ARCH ".context_length", K_U32, s->n_ctx, 0, NULL},
        {ARCH ".embedding_length", K_U32, s->n_embd, 0, NULL},
        {ARCH ".block_count", K_U32, n_blocks, 0, NULL},
        {ARCH ".vocab_size", K_U32, s->n_vocab, 0, NULL},
        {ARCH ".expert_count", K_U32, s->n_expert, 0, NULL},
        {ARCH ".expert_used_count", K_U32, s->n_expert_used, 0, NULL},
        {ARCH ".expert_shared_count", K_U32, s->n_expert_shared, 0, NULL},
        {ARCH ".expert_feed_forward_length", K_U32, s->n_ff_exp, 0, NULL},
        {ARCH ".expert_weights_scale", K_F32, 0, s->expert_weights_scale, NULL},
        {ARCH ".expert_weights_norm", K_BOOL, s->expert_weights_norm, 0, NULL},
        {ARCH ".expert_gating_func", K_U32, s->gating, 0, NULL},
        {ARCH ".attention.head_count", K_U32, s->n_head, 0, NULL},
        {ARCH ".attention.head_count_kv", K_U32, 1, 0, NULL}, /* one shared KV head */
        {ARCH ".attention.key_length", K_U32, v->head_dim, 0, NULL},
        {ARCH ".attention.value_length", K_U32, v->head_dim, 0, NULL},
        {ARCH ".attention.layer_norm_rms_epsilon", K_F32, 0, s->rms_eps, NULL},
        {ARCH ".attention.q_lora_rank", K_U32, s->q_lora_rank, 0, NULL},
        {ARCH ".attention.sliding_window", K_U32, v->window, 0, NULL},
        {ARCH ".attention.indexer.head_count", K_U32, v->n_indexer_head, 0, NULL},
        {ARCH ".attention.indexer.key_length", K_U32, v->indexer_dim, 0, NULL},
        {ARCH ".attention.indexer.top_k", K_U32, v->indexer_top_k, 0, NULL},
        {ARCH ".attention.output_group_count", K_U32, v->n_out_group, 0, NULL},
        {ARCH ".attention.output_lora_rank", K_U32, v->out_lora_rank, 0, NULL},
        {ARCH ".attention.compress_rope_freq_base", K_F32, 0, v->compress_rope_base, NULL},
        {ARCH ".rope.dimension_count", K_U32, s->rope_dim, 0, NULL},
        {ARCH ".rope.freq_base", K_F32, 0, s->rope_freq_base, NULL},
        {ARCH ".hyper_connection.count", K_U32, HC, 0, NULL},
        {ARCH ".hyper_connection.sinkhorn_iterations", K_U32, v->hc_sinkhorn_iters, 0, NULL},
        {ARCH ".hyper_connection.epsilon", K_F32, 0, v->hc_eps, NULL},
        {ARCH ".hash_layer_count", K_U32, v->n_hash_layer, 0, NULL},
    };
    fg_err e = add_entries(w, keys, sizeof keys / sizeof keys[0], err_key);
    if (e)
        return e;

    /* one entry per block, the MTP block's included (ratio 0) */
    int32_t ratios[FG_MODELGEN_V4_MAX_LAYERS + 1];
    float clamps[FG_MODELGEN_V4_MAX_LAYERS + 1];
    for (uint32_t il = 0; il < n_blocks; il++) {
        ratios[il] = il < s->n_layer ? (int32_t)v->ratios[il] : 0;
        clamps[il] = v->swiglu_clamp;
    }
    if ((e = fg_gguf_writer_add_arr_i32(w, *err_key = ARCH ".attention.compress_ratios", ratios, n_blocks)))
        return e;
    if ((e = fg_gguf_writer_add_arr_f32(w, *err_key = ARCH ".swiglu_clamp_exp", clamps, n_blocks)))
        return e;
    if (v->n_nextn > 0 && (e = fg_gguf_writer_add_u32(w, *err_key = ARCH ".nextn_predict_layers", v->n_nextn)))
        return e;
    if (s->yarn_factor != 0.0f) {
        const key_entry rope[] = {
            {ARCH ".rope.scaling.type", K_STR, 0, 0, "yarn"},
            {ARCH ".rope.scaling.factor", K_F32, 0, s->yarn_factor, NULL},
            {ARCH ".rope.scaling.original_context_length", K_U32, s->yarn_orig_ctx, 0, NULL},
            {ARCH ".rope.scaling.yarn_beta_fast", K_F32, 0, v->yarn_beta_fast, NULL},
            {ARCH ".rope.scaling.yarn_beta_slow", K_F32, 0, v->yarn_beta_slow, NULL},
        };
        if ((e = add_entries(w, rope, sizeof rope / sizeof rope[0], err_key)))
            return e;
    }
    const key_entry tail[] = {
        {"general.file_type", K_U32, fg_modelgen_file_type(s->weight_type), 0, NULL},
        {"general.quantization_version", K_U32, 2, 0, NULL},
    };
    return add_entries(w, tail, sizeof tail / sizeof tail[0], err_key);
}
