/* model.c: binds a deepseek4 GGUF to fg_ds4_model, validating every key and
 * tensor against llama.cpp's loader (src/models/deepseek4.cpp
 * load_arch_hparams / load_arch_tensors; GGUF-DEEPSEEK4.md). */
#include "engine/model/deepseek4/model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH "deepseek4"

static fg_err get_int(const fg_gguf_t *g, const char *suffix, bool required, int def, int lo, int hi, int *out,
                      fg_diag *diag)
{
    return fg_weight_get_int(g, ARCH, suffix, required, def, lo, hi, out, diag);
}

static fg_err get_float(const fg_gguf_t *g, const char *suffix, bool required, float def, float *out,
                        fg_diag *diag)
{
    return fg_weight_get_float(g, ARCH, suffix, required, def, out, diag);
}

/* A per-layer float: a scalar for every layer, or an array whose last entry
 * repeats past its end (llama.cpp's get_key_or_arr). */
static fg_err get_per_layer(const fg_gguf_t *g, const char *suffix, bool required, float def, int n, float *out,
                            fg_diag *diag)
{
    char key[128];
    snprintf(key, sizeof key, ARCH ".%s", suffix);
    fg_gguf_vtype et;
    uint64_t count;
    if (fg_gguf_get_arr(g, key, &et, &count) == FG_OK) {
        const void *data;
        if (et != FG_GGUF_FLOAT32 || fg_gguf_get_arr_data(g, key, &data) != FG_OK)
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "key %s must be an f32 or an array of f32", key);
        if (count == 0)
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "key %s is an empty array", key);
        for (int i = 0; i < n; i++) {
            memcpy(&out[i], (const uint8_t *)data + 4 * (i < (int64_t)count ? (uint64_t)i : count - 1), 4);
            if (!(out[i] == out[i]))
                return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "key %s[%d] is not a number", key, i);
        }
        return FG_OK;
    }
    float v;
    FG_TRY(get_float(g, suffix, required, def, &v, diag));
    for (int i = 0; i < n; i++)
        out[i] = v;
    return FG_OK;
}

static bool str_is(fg_gguf_str s, const char *lit) { return s.len == strlen(lit) && !memcmp(s.ptr, lit, s.len); }

static fg_err read_hparams(const fg_gguf_t *g, fg_ds4_hparams *hp, fg_diag *diag)
{
    enum { BIG = 1 << 24 };
    fg_gguf_str arch;
    if (fg_gguf_get_str(g, "general.architecture", &arch) != FG_OK || !str_is(arch, ARCH))
        return fg_diag_set(diag, FG_ERR_MODEL_ARCH, "general.architecture is not '" ARCH "'");
    int head_kv, key_len, val_len, hc, gating;
    FG_TRY(get_int(g, "context_length", true, 0, 1, BIG, &hp->n_ctx_train, diag));
    FG_TRY(get_int(g, "embedding_length", true, 0, 1, 65536, &hp->n_embd, diag));
    FG_TRY(get_int(g, "block_count", true, 0, 1, 4096, &hp->n_layer_all, diag));
    FG_TRY(get_int(g, "attention.head_count", true, 0, 1, 4096, &hp->n_head, diag));
    FG_TRY(get_int(g, "attention.head_count_kv", false, 1, 0, 4096, &head_kv, diag));
    FG_TRY(get_int(g, "attention.key_length", true, 0, 1, 65536, &key_len, diag));
    FG_TRY(get_int(g, "attention.value_length", true, 0, 1, 65536, &val_len, diag));
    FG_TRY(get_int(g, "rope.dimension_count", true, 0, 2, 4096, &hp->n_rope, diag));
    FG_TRY(get_int(g, "attention.q_lora_rank", true, 0, 1, 65536, &hp->q_lora, diag));
    FG_TRY(get_int(g, "attention.sliding_window", true, 0, 1, 1 << 20, &hp->window, diag));
    FG_TRY(get_float(g, "attention.layer_norm_rms_epsilon", true, 0, &hp->rms_eps, diag));
    FG_TRY(get_int(g, "expert_count", true, 0, 1, 65536, &hp->n_expert, diag));
    FG_TRY(get_int(g, "expert_used_count", true, 0, 1, 65536, &hp->n_expert_used, diag));
    FG_TRY(get_int(g, "expert_shared_count", true, 0, 0, 64, &hp->n_expert_shared, diag));
    FG_TRY(get_int(g, "expert_feed_forward_length", true, 0, 1, BIG, &hp->n_ff_exp, diag));
    FG_TRY(get_float(g, "expert_weights_scale", false, 1.0f, &hp->expert_weights_scale, diag));
    FG_TRY(get_int(g, "expert_gating_func", true, 0, 0, 1 << 30, &gating, diag));
    FG_TRY(get_int(g, "attention.indexer.head_count", true, 0, 1, 4096, &hp->idx_head, diag));
    FG_TRY(get_int(g, "attention.indexer.key_length", true, 0, 1, 65536, &hp->idx_dim, diag));
    FG_TRY(get_int(g, "attention.indexer.top_k", true, 0, 1, 1 << 20, &hp->idx_top_k, diag));
    FG_TRY(get_int(g, "attention.output_group_count", true, 0, 1, 4096, &hp->out_groups, diag));
    FG_TRY(get_int(g, "attention.output_lora_rank", true, 0, 1, 65536, &hp->out_lora, diag));
    FG_TRY(get_float(g, "attention.compress_rope_freq_base", true, 0, &hp->compress_rope_base, diag));
    FG_TRY(get_int(g, "hyper_connection.count", true, 0, 0, 1 << 30, &hc, diag));
    FG_TRY(get_int(g, "hyper_connection.sinkhorn_iterations", true, 0, 1, 1000, &hp->hc_iters, diag));
    FG_TRY(get_float(g, "hyper_connection.epsilon", true, 0, &hp->hc_eps, diag));
    FG_TRY(get_int(g, "hash_layer_count", false, 0, 0, 4096, &hp->n_hash, diag));
    FG_TRY(get_int(g, "nextn_predict_layers", false, 0, 0, 4096, &hp->n_nextn, diag));
    FG_TRY(get_float(g, "rope.freq_base", false, 10000.0f, &hp->rope_base, diag));
    if (hp->expert_weights_scale == 0.0f) /* llama.cpp reads 0 as "no scaling" */
        hp->expert_weights_scale = 1.0f;
    FG_TRY(fg_weight_get_bool(g, ARCH, "expert_weights_norm", false, &hp->expert_weights_norm, diag));

    if (hc != FG_DS4_HC)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "hyper_connection.count is %d; deepseek4 needs %d", hc,
                           FG_DS4_HC);
    if (gating != 4)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "expert_gating_func is %d; deepseek4 needs 4 (sqrt-softplus)",
                           gating);
    if (hp->n_head % hp->out_groups)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM,
                           "attention.head_count %d is not divisible by attention.output_group_count %d", hp->n_head,
                           hp->out_groups);
    if (key_len != val_len)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM,
                           "attention.key_length %d != attention.value_length %d (deepseek4's K is its V)", key_len,
                           val_len);
    if (head_kv != 1)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "attention.head_count_kv is %d; deepseek4 has one KV head",
                           head_kv);
    hp->head_dim = key_len;
    if (hp->n_rope % 2 || hp->n_rope > hp->head_dim || hp->n_rope > hp->idx_dim)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM,
                           "rope.dimension_count %d must be even and fit key_length %d and indexer.key_length %d",
                           hp->n_rope, hp->head_dim, hp->idx_dim);
    if (hp->n_expert_used > hp->n_expert)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "expert_used_count %d > expert_count %d", hp->n_expert_used,
                           hp->n_expert);
    if ((hp->n_head * (int64_t)hp->head_dim) % hp->out_groups)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "head width does not split into %d groups", hp->out_groups);

    /* Ratios: one per block (the MTP block's too). */
    const char *rkey = ARCH ".attention.compress_ratios";
    fg_gguf_vtype et;
    uint64_t count;
    if (fg_gguf_get_arr(g, rkey, &et, &count) != FG_OK)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "missing key %s (an integer array)", rkey);
    if (count < (uint64_t)hp->n_layer_all)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "%s has %" PRIu64 " entries, block_count is %d", rkey, count,
                           hp->n_layer_all);
    hp->ratio = calloc((size_t)hp->n_layer_all, sizeof *hp->ratio);
    hp->clamp_exp = calloc((size_t)hp->n_layer_all, sizeof *hp->clamp_exp);
    hp->clamp_shexp = calloc((size_t)hp->n_layer_all, sizeof *hp->clamp_shexp);
    if (!hp->ratio || !hp->clamp_exp || !hp->clamp_shexp)
        return fg_diag_set(diag, FG_ERR_NOMEM, "model: out of memory");
    for (int il = 0; il < hp->n_layer_all; il++) {
        int64_t r;
        if (fg_gguf_get_arr_i64(g, rkey, (uint64_t)il, &r) != FG_OK)
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "%s must be an integer array", rkey);
        if (r != 0 && r != FG_DS4_CSA && r != FG_DS4_HCA)
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "%s[%d] = %" PRId64 "; allowed: 0, 4, 128", rkey, il, r);
        hp->ratio[il] = (int)r;
    }
    FG_TRY(get_per_layer(g, "swiglu_clamp_exp", false, 0.0f, hp->n_layer_all, hp->clamp_exp, diag));
    if (fg_gguf_find_key(g, ARCH ".swiglu_clamp_shexp") >= 0)
        FG_TRY(get_per_layer(g, "swiglu_clamp_shexp", true, 0.0f, hp->n_layer_all, hp->clamp_shexp, diag));
    else
        memcpy(hp->clamp_shexp, hp->clamp_exp, (size_t)hp->n_layer_all * sizeof *hp->clamp_shexp);

    /* YaRN applies to the compressed layers only. */
    hp->yarn_factor = 0;
    fg_gguf_str st;
    if (fg_gguf_get_str(g, ARCH ".rope.scaling.type", &st) == FG_OK) {
        if (str_is(st, "yarn")) {
            float f;
            FG_TRY(get_float(g, "rope.scaling.factor", false, 0.0f, &f, diag));
            if (f != 0.0f && !(f >= 1.0f))
                return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "rope.scaling.factor %g must be >= 1", f);
            hp->yarn_factor = f;
            FG_TRY(get_int(g, "rope.scaling.original_context_length", false, hp->n_ctx_train, 1, BIG,
                           &hp->yarn_orig_ctx, diag));
            FG_TRY(get_float(g, "rope.scaling.yarn_beta_fast", false, 32.0f, &hp->yarn_beta_fast, diag));
            FG_TRY(get_float(g, "rope.scaling.yarn_beta_slow", false, 1.0f, &hp->yarn_beta_slow, diag));
        } else if (!str_is(st, "none")) {
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "rope.scaling.type '%.*s' is not supported",
                               (int)(st.len > 32 ? 32 : st.len), st.ptr);
        }
    }
    /* llama.cpp: nextn_predict_layers without the MTP tensors means no MTP. */
    if (hp->n_nextn > 1)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "nextn_predict_layers %d: only one MTP block is supported",
                           hp->n_nextn);
    if (hp->n_nextn >= hp->n_layer_all)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "nextn_predict_layers %d leaves no trunk of block_count %d",
                           hp->n_nextn, hp->n_layer_all);
    if (hp->n_nextn) {
        char n[64];
        snprintf(n, sizeof n, "blk.%d.nextn.eh_proj.weight", hp->n_layer_all - 1);
        if (!fg_gguf_find_tensor(g, n))
            hp->n_nextn = 0;
    }
    hp->n_layer = hp->n_layer_all - hp->n_nextn;
    for (int il = hp->n_layer; il < hp->n_layer_all; il++) {
        if (hp->ratio[il] != 0)
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "MTP block %d has compress ratio %d; it must be 0", il,
                               hp->ratio[il]);
        if (il < hp->n_hash)
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "hash_layer_count %d reaches the MTP block %d", hp->n_hash,
                               il);
    }
    return FG_OK;
}

/* An F32 tensor of the given shape (norms, APE, sinks, hc base/scale). */
static fg_err bind_f32(const fg_gguf_t *g, const char *name, int n_dims, const int64_t *want, bool required,
                       const float **out, fg_diag *diag)
{
    const fg_gguf_tensor *t;
    FG_TRY(fg_weight_find(g, name, n_dims, want, required, &t, diag));
    *out = NULL;
    if (!t)
        return FG_OK;
    if (t->type != FG_GGML_F32)
        return fg_diag_set(diag, FG_ERR_MODEL_TYPE, "tensor %s must be f32, is %s", name, fg_ggml_type_name(t->type));
    if ((uintptr_t)t->data % sizeof(float))
        return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "tensor %s data is not 4-byte aligned", name);
    *out = t->data;
    return FG_OK;
}

static fg_err bind_hc(const fg_gguf_t *g, const char *prefix, int64_t n_embd, int64_t n_mix, int64_t n_scale,
                      fg_ds4_hc *hc, fg_diag *diag)
{
    char n[96];
    snprintf(n, sizeof n, "%sfn.weight", prefix);
    FG_TRY(fg_weight_bind_matrix(g, n, FG_DS4_HC * n_embd, n_mix, 1, true, &hc->fn, diag));
    snprintf(n, sizeof n, "%sbase.weight", prefix);
    FG_TRY(fg_weight_bind_vector(g, n, n_mix, true, &hc->base, diag));
    snprintf(n, sizeof n, "%sscale.weight", prefix);
    return fg_weight_bind_vector(g, n, n_scale, true, &hc->scale, diag);
}

static fg_err bind_comp(const fg_gguf_t *g, const char *prefix, int64_t n_embd, int64_t width, int ratio,
                        fg_ds4_compressor *c, fg_diag *diag)
{
    char n[96];
    const int64_t cw = (ratio == FG_DS4_CSA ? 2 : 1) * width;
    snprintf(n, sizeof n, "%skv.weight", prefix);
    FG_TRY(fg_weight_bind_matrix(g, n, n_embd, cw, 1, true, &c->kv, diag));
    snprintf(n, sizeof n, "%sgate.weight", prefix);
    FG_TRY(fg_weight_bind_matrix(g, n, n_embd, cw, 1, true, &c->gate, diag));
    snprintf(n, sizeof n, "%sape.weight", prefix);
    const int64_t ape[2] = {cw, ratio};
    FG_TRY(bind_f32(g, n, 2, ape, true, &c->ape, diag));
    snprintf(n, sizeof n, "%snorm.weight", prefix);
    return fg_weight_bind_vector(g, n, width, true, &c->norm, diag);
}

static fg_err bind_layer(const fg_gguf_t *g, const fg_ds4_hparams *hp, int il, fg_ds4_layer *L, fg_diag *diag)
{
    char n[96], p[48];
    const int64_t E = hp->n_embd, H = hp->n_head, D = hp->head_dim, Q = hp->q_lora;
    const int64_t X = hp->n_expert, F = hp->n_ff_exp, G = hp->out_groups, R = hp->out_lora;
    const int64_t Hi = hp->idx_head, Di = hp->idx_dim;
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, il), n)
#define PREFIX(suffix) (snprintf(p, sizeof p, "blk.%d." suffix, il), p)
    L->ratio = hp->ratio[il];
    FG_TRY(bind_hc(g, PREFIX("hc_attn_"), E, FG_DS4_HC_MIX, 3, &L->hc_attn, diag));
    FG_TRY(bind_hc(g, PREFIX("hc_ffn_"), E, FG_DS4_HC_MIX, 3, &L->hc_ffn, diag));
    FG_TRY(fg_weight_bind_vector(g, NAME("attn_norm.weight"), E, true, &L->attn_norm, diag));
    FG_TRY(fg_weight_bind_vector(g, NAME("attn_sinks.weight"), H, true, &L->sinks, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("attn_q_a.weight"), E, Q, 1, true, &L->q_a, diag));
    FG_TRY(fg_weight_bind_vector(g, NAME("attn_q_a_norm.weight"), Q, true, &L->q_a_norm, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("attn_q_b.weight"), Q, H * D, 1, true, &L->q_b, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("attn_kv.weight"), E, D, 1, true, &L->kv, diag));
    FG_TRY(fg_weight_bind_vector(g, NAME("attn_kv_a_norm.weight"), D, true, &L->kv_norm, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("attn_output_a.weight"), H * D / G, R * G, 1, true, &L->out_a, diag));
    L->out_a.n_out = R; /* used as G matrices of R rows */
    L->out_a.n_mat = G;
    L->out_a.mat_bytes = L->out_a.row_bytes * (size_t)R;
    FG_TRY(fg_weight_bind_matrix(g, NAME("attn_output_b.weight"), G * R, E, 1, true, &L->out_b, diag));
    if (L->ratio != 0) {
        FG_TRY(bind_comp(g, PREFIX("attn_compressor_"), E, D, L->ratio, &L->comp, diag));
        if (L->ratio == FG_DS4_CSA) {
            FG_TRY(fg_weight_bind_matrix(g, NAME("indexer.proj.weight"), E, Hi, 1, true, &L->idx_proj, diag));
            FG_TRY(fg_weight_bind_matrix(g, NAME("indexer.attn_q_b.weight"), Q, Hi * Di, 1, true, &L->idx_q_b, diag));
            FG_TRY(bind_comp(g, PREFIX("indexer_compressor_"), E, Di, L->ratio, &L->idx_comp, diag));
        }
    }
    FG_TRY(fg_weight_bind_vector(g, NAME("ffn_norm.weight"), E, true, &L->ffn_norm, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_gate_inp.weight"), E, X, 1, true, &L->router, diag));
    if (il < hp->n_hash) {
        const int64_t want[2] = {hp->n_expert_used, hp->n_vocab};
        const fg_gguf_tensor *t;
        NAME("ffn_gate_tid2eid.weight");
        FG_TRY(fg_weight_find(g, n, 2, want, false, &t, diag));
        if (!t)
            return fg_diag_set(diag, FG_ERR_MODEL_TENSOR, "hash layer %d (hash_layer_count %d) has no tensor %s", il,
                               hp->n_hash, n);
        if (t->type != 26 /* ggml i32 */)
            return fg_diag_set(diag, FG_ERR_MODEL_TYPE, "tensor %s must be i32, is %s", n, fg_ggml_type_name(t->type));
        if ((uintptr_t)t->data % 4)
            return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "tensor %s data is not 4-byte aligned", n);
        L->tid2eid = t->data;
        for (int64_t i = 0; i < want[0] * want[1]; i++)
            if (L->tid2eid[i] < 0 || L->tid2eid[i] >= hp->n_expert)
                return fg_diag_set(diag, FG_ERR_MODEL_HPARAM,
                                   "tensor %s holds expert id %" PRId32 " for token %" PRId64 "; expert_count is %d",
                                   n, L->tid2eid[i], i / want[0], hp->n_expert);
    } else {
        FG_TRY(fg_weight_bind_vector(g, NAME("exp_probs_b.bias"), X, true, &L->exp_probs_b, diag));
    }
    FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_gate_exps.weight"), E, F, X, true, &L->gate_exps, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_up_exps.weight"), E, F, X, true, &L->up_exps, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_down_exps.weight"), F, E, X, true, &L->down_exps, diag));
    if (hp->n_expert_shared > 0) {
        const int64_t Fs = F * hp->n_expert_shared;
        FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_gate_shexp.weight"), E, Fs, 1, true, &L->gate_shexp, diag));
        FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_up_shexp.weight"), E, Fs, 1, true, &L->up_shexp, diag));
        FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_down_shexp.weight"), Fs, E, 1, true, &L->down_shexp, diag));
    }
    if (il >= hp->n_layer) {
        FG_TRY(fg_weight_bind_matrix(g, NAME("nextn.eh_proj.weight"), 2 * E, E, 1, true, &L->eh_proj, diag));
        FG_TRY(fg_weight_bind_vector(g, NAME("nextn.enorm.weight"), E, true, &L->enorm, diag));
        FG_TRY(fg_weight_bind_vector(g, NAME("nextn.hnorm.weight"), E, true, &L->hnorm, diag));
    }
#undef NAME
#undef PREFIX
    return FG_OK;
}

static uint64_t layer_bytes(const fg_ds4_layer *L, const fg_ds4_hparams *hp, uint64_t *active)
{
    const fg_weight *dense[] = {&L->hc_attn.fn, &L->hc_ffn.fn, &L->q_a, &L->q_b, &L->kv, &L->out_a, &L->out_b,
                                &L->comp.kv, &L->comp.gate, &L->idx_proj, &L->idx_q_b, &L->idx_comp.kv,
                                &L->idx_comp.gate, &L->router, &L->gate_shexp, &L->up_shexp, &L->down_shexp,
                                &L->eh_proj};
    uint64_t d = 0;
    for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++)
        d += fg_weight_bytes(dense[i]);
    const uint64_t ex = fg_weight_bytes(&L->gate_exps) + fg_weight_bytes(&L->up_exps) + fg_weight_bytes(&L->down_exps);
    *active += d + ex / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used;
    return d + ex;
}

fg_err fg_ds4_load(const fg_gguf_t *g, fg_ds4_model **out, fg_diag *diag)
{
    *out = NULL;
    fg_ds4_model *m = calloc(1, sizeof *m);
    if (!m)
        return fg_diag_set(diag, FG_ERR_NOMEM, "model: out of memory");
    fg_ds4_hparams *hp = &m->hp;
    fg_err e = read_hparams(g, hp, diag);
    if (e != FG_OK)
        goto fail;
    if ((e = fg_weight_vocab_size(g, &hp->n_vocab, diag)))
        goto fail;
    int vs;
    if ((e = get_int(g, "vocab_size", false, hp->n_vocab, 1, 1 << 24, &vs, diag)))
        goto fail;
    if (vs != hp->n_vocab) {
        e = fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "vocab_size %d != token_embd.weight rows %d", vs, hp->n_vocab);
        goto fail;
    }
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    if ((e = fg_weight_bind_matrix(g, "token_embd.weight", E, V, 1, true, &m->tok_embd, diag)) ||
        (e = fg_weight_bind_vector(g, "output_norm.weight", E, true, &m->output_norm, diag)) ||
        (e = fg_weight_bind_matrix(g, "output.weight", E, V, 1, true, &m->output, diag)) ||
        (e = bind_hc(g, "output_hc_", E, FG_DS4_HC, 1, &m->hc_out, diag)))
        goto fail;
    m->layers = calloc((size_t)hp->n_layer_all, sizeof *m->layers);
    if (!m->layers) {
        e = fg_diag_set(diag, FG_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    uint64_t total = fg_weight_bytes(&m->tok_embd) + fg_weight_bytes(&m->output) + fg_weight_bytes(&m->hc_out.fn);
    uint64_t active = fg_weight_bytes(&m->output);
    for (int il = 0; il < hp->n_layer_all; il++) {
        if ((e = bind_layer(g, hp, il, &m->layers[il], diag)))
            goto fail;
        uint64_t unused = 0;
        total += layer_bytes(&m->layers[il], hp, il < hp->n_layer ? &active : &unused);
    }
    m->mtp_norm = m->output_norm;
    m->mtp_output = m->output;
    m->mtp_embd = m->tok_embd;
    if (hp->n_nextn) {
        char n[96];
        const int mb = hp->n_layer;
        const float *nv;
        fg_weight w;
        snprintf(n, sizeof n, "blk.%d.nextn.shared_head_norm.weight", mb);
        if ((e = fg_weight_bind_vector(g, n, E, false, &nv, diag)))
            goto fail;
        if (nv)
            m->mtp_norm = nv;
        snprintf(n, sizeof n, "blk.%d.nextn.shared_head_head.weight", mb);
        if ((e = fg_weight_bind_matrix(g, n, E, V, 1, false, &w, diag)))
            goto fail;
        if (w.data)
            m->mtp_output = w;
        snprintf(n, sizeof n, "blk.%d.nextn.embed_tokens.weight", mb);
        if ((e = fg_weight_bind_matrix(g, n, E, V, 1, false, &w, diag)))
            goto fail;
        if (w.data)
            m->mtp_embd = w;
    }
    fg_arch_model_init(&m->base, &fg_arch_deepseek4, g);
    m->base.n_vocab = hp->n_vocab;
    m->base.n_ctx_train = hp->n_ctx_train;
    m->base.n_layer = hp->n_layer;
    m->base.n_embd = hp->n_embd;
    m->base.n_expert = hp->n_expert;
    m->base.n_expert_used = hp->n_expert_used;
    m->base.n_ff_exp = hp->n_ff_exp;
    m->base.n_layer_run = hp->n_layer_all; /* the MTP block runs after the trunk */
    m->base.weight_bytes_total = total;
    m->base.weight_bytes_active = active;
    *out = m;
    return FG_OK;
fail:
    fg_ds4_free(m);
    return e;
}

void fg_ds4_free(fg_ds4_model *m)
{
    if (!m)
        return;
    free(m->hp.ratio);
    free(m->hp.clamp_exp);
    free(m->hp.clamp_shexp);
    free(m->layers);
    free(m);
}
