/* model.c: binds a deepseek2 GGUF to fg_model, validating every hyperparameter
 * and tensor against llama.cpp's conventions (see GGUF-DEEPSEEK2.md). */
#include "engine/model/deepseek2/model.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH "deepseek2"

static fg_err get_int(const fg_gguf_t *g, const char *suffix, bool required, int def, int lo, int hi,
                      int *out, fg_diag *diag)
{
    return fg_weight_get_int(g, ARCH, suffix, required, def, lo, hi, out, diag);
}

static fg_err get_float(const fg_gguf_t *g, const char *suffix, bool required, float def, float *out,
                        fg_diag *diag)
{
    return fg_weight_get_float(g, ARCH, suffix, required, def, out, diag);
}

/* nextn_predict_layers: hp->n_layer (the trunk) and hp->n_nextn from
 * block_count. As llama.cpp, the trunk is block_count - nextn_predict_layers
 * whether or not the file holds the MTP block: one whose tensors are all
 * absent (blk.N.attn_norm and blk.N.nextn.eh_proj both) is a trunk-only
 * export and loads without it; a block with some of its tensors is bound
 * whole, so a missing one is an error naming it (bind_mtp). */
static fg_err read_nextn(const fg_gguf_t *g, int n_blocks, fg_hparams *hp, fg_diag *diag)
{
    int nextn;
    FG_TRY(get_int(g, "nextn_predict_layers", false, 0, 0, 4096, &nextn, diag));
    if (nextn >= n_blocks)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "nextn_predict_layers %d leaves no trunk of block_count %d",
                           nextn, n_blocks);
    if (nextn > 1)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM,
                           "nextn_predict_layers %d: one MTP block is supported (DeepSeek-V3 has one)", nextn);
    hp->n_layer = n_blocks - nextn;
    hp->n_nextn = 0;
    if (nextn) {
        char a[64], b[64];
        snprintf(a, sizeof a, "blk.%d.attn_norm.weight", hp->n_layer);
        snprintf(b, sizeof b, "blk.%d.nextn.eh_proj.weight", hp->n_layer);
        hp->n_nextn = fg_gguf_find_tensor(g, a) || fg_gguf_find_tensor(g, b) ? 1 : 0;
    }
    return FG_OK;
}

static fg_err read_hparams(const fg_gguf_t *g, fg_hparams *hp, fg_diag *diag)
{
    enum { BIG = 1 << 24 };
    fg_gguf_str arch;
    if (fg_gguf_get_str(g, "general.architecture", &arch) != FG_OK)
        return fg_diag_set(diag, FG_ERR_MODEL_ARCH, "general.architecture is missing or not a string");
    if (arch.len != strlen(ARCH) || memcmp(arch.ptr, ARCH, arch.len) != 0)
        return fg_diag_set(diag, FG_ERR_MODEL_ARCH, "architecture '%.*s' is not supported (need '" ARCH "')",
                           (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);

    int head_kv, key_len_mla, val_len_mla, gating, n_blocks;
    FG_TRY(get_int(g, "context_length", true, 0, 1, BIG, &hp->n_ctx_train, diag));
    FG_TRY(get_int(g, "embedding_length", true, 0, 1, 65536, &hp->n_embd, diag));
    FG_TRY(get_int(g, "block_count", true, 0, 1, 4096, &n_blocks, diag));
    FG_TRY(read_nextn(g, n_blocks, hp, diag));
    FG_TRY(get_int(g, "feed_forward_length", true, 0, 1, BIG, &hp->n_ff, diag));
    FG_TRY(get_int(g, "attention.head_count", true, 0, 1, 4096, &hp->n_head, diag));
    FG_TRY(get_int(g, "attention.head_count_kv", false, 1, 1, 4096, &head_kv, diag));
    FG_TRY(get_int(g, "attention.q_lora_rank", false, 0, 0, 65536, &hp->q_lora, diag));
    FG_TRY(get_int(g, "attention.kv_lora_rank", true, 0, 1, 65536, &hp->kv_lora, diag));
    FG_TRY(get_int(g, "rope.dimension_count", true, 0, 2, 4096, &hp->n_rope, diag));
    FG_TRY(get_int(g, "attention.key_length_mla", true, 0, 1, 65536, &key_len_mla, diag));
    FG_TRY(get_int(g, "attention.value_length_mla", true, 0, 1, 65536, &val_len_mla, diag));
    FG_TRY(get_float(g, "attention.layer_norm_rms_epsilon", true, 0, &hp->rms_eps, diag));
    FG_TRY(get_float(g, "rope.freq_base", false, 10000.0f, &hp->rope_base, diag));
    FG_TRY(get_int(g, "expert_count", true, 0, 1, 65536, &hp->n_expert, diag));
    FG_TRY(get_int(g, "expert_used_count", true, 0, 1, 65536, &hp->n_expert_used, diag));
    FG_TRY(get_int(g, "expert_shared_count", false, 0, 0, 64, &hp->n_expert_shared, diag));
    FG_TRY(get_int(g, "expert_feed_forward_length", true, 0, 1, BIG, &hp->n_ff_exp, diag));
    FG_TRY(get_int(g, "leading_dense_block_count", false, 0, 0, 4096, &hp->n_dense_lead, diag));
    FG_TRY(get_float(g, "expert_weights_scale", false, 1.0f, &hp->expert_weights_scale, diag));
    FG_TRY(get_int(g, "expert_gating_func", false, FG_GATING_SOFTMAX, 1, 2, &gating, diag));
    FG_TRY(get_int(g, "expert_group_count", false, 1, 0, 65536, &hp->n_group, diag));
    FG_TRY(get_int(g, "expert_group_used_count", false, 1, 0, 65536, &hp->n_group_used, diag));
    hp->gating = (fg_gating)gating;
    if (hp->expert_weights_scale == 0.0f) /* llama.cpp reads 0 as "no scaling" */
        hp->expert_weights_scale = 1.0f;
    FG_TRY(fg_weight_get_bool(g, ARCH, "expert_weights_norm", false, &hp->expert_weights_norm, diag));

    if (head_kv != 1)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "attention.head_count_kv = %d; MLA needs 1", head_kv);
    if (key_len_mla <= hp->n_rope)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "key_length_mla %d must exceed rope dims %d",
                           key_len_mla, hp->n_rope);
    if (hp->n_rope % 2)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "rope.dimension_count %d must be even", hp->n_rope);
    hp->n_nope = key_len_mla - hp->n_rope;
    hp->n_v = val_len_mla;
    if (hp->n_expert_used > hp->n_expert)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "expert_used_count %d > expert_count %d",
                           hp->n_expert_used, hp->n_expert);
    if (hp->n_dense_lead > n_blocks)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "leading_dense_block_count %d > block_count %d",
                           hp->n_dense_lead, n_blocks);
    if (hp->n_group <= 0)
        hp->n_group = 1;
    if (hp->n_group > 1) {
        if (hp->n_expert % hp->n_group)
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "expert_count %d not divisible by expert_group_count %d",
                               hp->n_expert, hp->n_group);
        if (hp->n_group_used < 1 || hp->n_group_used > hp->n_group)
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "expert_group_used_count %d outside [1, %d]",
                               hp->n_group_used, hp->n_group);
        if (hp->n_expert / hp->n_group < 2)
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "expert groups need at least 2 experts each");
        if (hp->n_expert_used > hp->n_group_used * (hp->n_expert / hp->n_group))
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "expert_used_count %d exceeds the experts of the used groups",
                               hp->n_expert_used);
    } else {
        hp->n_group_used = 1;
    }

    /* YaRN: only the "yarn" scaling type changes the math; "none" or absent is plain RoPE. */
    hp->yarn_factor = 0;
    fg_gguf_str st;
    if (fg_gguf_get_str(g, ARCH ".rope.scaling.type", &st) == FG_OK) {
        if (st.len == 4 && memcmp(st.ptr, "yarn", 4) == 0) {
            FG_TRY(get_float(g, "rope.scaling.factor", true, 0, &hp->yarn_factor, diag));
            FG_TRY(get_int(g, "rope.scaling.original_context_length", false, hp->n_ctx_train, 1, BIG,
                           &hp->yarn_orig_ctx, diag));
            FG_TRY(get_float(g, "rope.scaling.yarn_log_multiplier", false, 0.0f, &hp->yarn_log_mul, diag));
            if (!(hp->yarn_factor >= 1.0f))
                return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "rope.scaling.factor %g must be >= 1",
                                   hp->yarn_factor);
        } else if (!(st.len == 4 && memcmp(st.ptr, "none", 4) == 0)) {
            return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "rope.scaling.type '%.*s' is not supported",
                               (int)(st.len > 32 ? 32 : st.len), st.ptr);
        }
    }
    return FG_OK;
}

static fg_err bind_layer(const fg_gguf_t *g, const fg_hparams *hp, int il, fg_layer *L, fg_diag *diag)
{
    char n[96];
    const int64_t d = hp->n_embd, H = hp->n_head;
    const int64_t qk = hp->n_nope + hp->n_rope;
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, il), n)
    FG_TRY(fg_weight_bind_vector(g, NAME("attn_norm.weight"), d, true, &L->attn_norm, diag));
    if (hp->q_lora > 0) {
        FG_TRY(fg_weight_bind_matrix(g, NAME("attn_q_a.weight"), d, hp->q_lora, 1, true, &L->q_a, diag));
        FG_TRY(fg_weight_bind_vector(g, NAME("attn_q_a_norm.weight"), hp->q_lora, true, &L->q_a_norm, diag));
        FG_TRY(fg_weight_bind_matrix(g, NAME("attn_q_b.weight"), hp->q_lora, H * qk, 1, true, &L->q_b, diag));
    } else {
        FG_TRY(fg_weight_bind_matrix(g, NAME("attn_q.weight"), d, H * qk, 1, true, &L->q_b, diag));
    }
    FG_TRY(fg_weight_bind_matrix(g, NAME("attn_kv_a_mqa.weight"), d, hp->kv_lora + hp->n_rope, 1, true, &L->kv_a, diag));
    FG_TRY(fg_weight_bind_vector(g, NAME("attn_kv_a_norm.weight"), hp->kv_lora, true, &L->kv_a_norm, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("attn_k_b.weight"), hp->n_nope, hp->kv_lora, H, true, &L->k_b, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("attn_v_b.weight"), hp->kv_lora, hp->n_v, H, true, &L->v_b, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("attn_output.weight"), H * hp->n_v, d, 1, true, &L->attn_out, diag));
    FG_TRY(fg_weight_bind_vector(g, NAME("ffn_norm.weight"), d, true, &L->ffn_norm, diag));
    L->is_moe = il >= hp->n_dense_lead;
    if (!L->is_moe) {
        FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_gate.weight"), d, hp->n_ff, 1, true, &L->ffn_gate, diag));
        FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_up.weight"), d, hp->n_ff, 1, true, &L->ffn_up, diag));
        FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_down.weight"), hp->n_ff, d, 1, true, &L->ffn_down, diag));
        return FG_OK;
    }
    const int64_t E = hp->n_expert, f = hp->n_ff_exp;
    FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_gate_inp.weight"), d, E, 1, true, &L->router, diag));
    if (L->router.type != FG_GGML_F32)
        return fg_diag_set(diag, FG_ERR_MODEL_TYPE, "%s must be f32", n);
    FG_TRY(fg_weight_bind_vector(g, NAME("exp_probs_b.bias"), E, false, &L->exp_probs_b, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_gate_exps.weight"), d, f, E, true, &L->gate_exps, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_up_exps.weight"), d, f, E, true, &L->up_exps, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_down_exps.weight"), f, d, E, true, &L->down_exps, diag));
    if (hp->n_expert_shared > 0) {
        const int64_t fs = f * hp->n_expert_shared;
        FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_gate_shexp.weight"), d, fs, 1, true, &L->gate_shexp, diag));
        FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_up_shexp.weight"), d, fs, 1, true, &L->up_shexp, diag));
        FG_TRY(fg_weight_bind_matrix(g, NAME("ffn_down_shexp.weight"), fs, d, 1, true, &L->down_shexp, diag));
    }
#undef NAME
    return FG_OK;
}

/* The MTP block's nextn.* tensors (its layer is bound by bind_layer):
 * eh_proj {2d, d}, enorm and hnorm {d} required; shared_head_norm {d},
 * shared_head_head and embed_tokens {d, vocab} optional, standing in for
 * output_norm, output and token_embd (llama.cpp's choice when absent). */
static fg_err bind_mtp(const fg_gguf_t *g, fg_model *m, fg_diag *diag)
{
    const fg_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, V = hp->n_vocab;
    fg_mtp *t = &m->mtp;
    char n[96];
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%d.nextn." suffix, hp->n_layer), n)
    FG_TRY(fg_weight_bind_matrix(g, NAME("eh_proj.weight"), 2 * d, d, 1, true, &t->eh_proj, diag));
    FG_TRY(fg_weight_bind_vector(g, NAME("enorm.weight"), d, true, &t->enorm, diag));
    FG_TRY(fg_weight_bind_vector(g, NAME("hnorm.weight"), d, true, &t->hnorm, diag));
    FG_TRY(fg_weight_bind_vector(g, NAME("shared_head_norm.weight"), d, false, &t->head_norm, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("shared_head_head.weight"), d, V, 1, false, &t->head, diag));
    FG_TRY(fg_weight_bind_matrix(g, NAME("embed_tokens.weight"), d, V, 1, false, &t->embd, diag));
#undef NAME
    if (!t->head_norm)
        t->head_norm = m->output_norm;
    if (!t->head.data)
        t->head = m->output;
    if (!t->embd.data)
        t->embd = m->tok_embd;
    return FG_OK;
}

/* Bytes of a layer's attention, dense, shared-expert, router and routed-expert weights. */
static void layer_bytes(const fg_layer *L, const fg_hparams *hp, uint64_t *total, uint64_t *active)
{
    uint64_t attn = fg_weight_bytes(&L->q_a) + fg_weight_bytes(&L->q_b) + fg_weight_bytes(&L->kv_a) +
                    fg_weight_bytes(&L->k_b) + fg_weight_bytes(&L->v_b) + fg_weight_bytes(&L->attn_out);
    uint64_t dense = fg_weight_bytes(&L->ffn_gate) + fg_weight_bytes(&L->ffn_up) + fg_weight_bytes(&L->ffn_down);
    uint64_t shared = fg_weight_bytes(&L->gate_shexp) + fg_weight_bytes(&L->up_shexp) + fg_weight_bytes(&L->down_shexp);
    uint64_t experts = fg_weight_bytes(&L->gate_exps) + fg_weight_bytes(&L->up_exps) + fg_weight_bytes(&L->down_exps);
    uint64_t router = fg_weight_bytes(&L->router);
    *total += attn + dense + shared + experts + router;
    *active += attn + dense + shared + router +
               (L->is_moe ? experts / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used : 0);
}

fg_err fg_model_load(const fg_gguf_t *g, fg_model **out, fg_diag *diag)
{
    *out = NULL;
    fg_model *m = calloc(1, sizeof *m);
    if (!m)
        return fg_diag_set(diag, FG_ERR_NOMEM, "model: out of memory");
    fg_err e = read_hparams(g, &m->hp, diag);
    if (e != FG_OK)
        goto fail;
    fg_hparams *hp = &m->hp;

    /* The vocabulary size is the embedding's row count. */
    if ((e = fg_weight_vocab_size(g, &hp->n_vocab, diag)))
        goto fail;
    if ((e = fg_weight_bind_matrix(g, "token_embd.weight", hp->n_embd, hp->n_vocab, 1, true, &m->tok_embd, diag)))
        goto fail;
    if ((e = fg_weight_bind_vector(g, "output_norm.weight", hp->n_embd, true, &m->output_norm, diag)))
        goto fail;
    if ((e = fg_weight_bind_matrix(g, "output.weight", hp->n_embd, hp->n_vocab, 1, false, &m->output, diag)))
        goto fail;
    if (!m->output.data)
        m->output = m->tok_embd; /* tied embeddings */

    const int n_run = hp->n_layer + hp->n_nextn;
    m->layers = calloc((size_t)n_run, sizeof *m->layers);
    if (!m->layers) {
        e = fg_diag_set(diag, FG_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    uint64_t total = fg_weight_bytes(&m->tok_embd) + (m->output.data != m->tok_embd.data ? fg_weight_bytes(&m->output) : 0);
    uint64_t active = fg_weight_bytes(&m->output); /* the LM head is read every token; one embedding row is noise */
    for (int il = 0; il < n_run; il++) {
        if ((e = bind_layer(g, hp, il, &m->layers[il], diag)))
            goto fail;
        layer_bytes(&m->layers[il], hp, &total, &active); /* the MTP block runs every token too */
    }
    if (hp->n_nextn) {
        if ((e = bind_mtp(g, m, diag)))
            goto fail;
        const fg_mtp *t = &m->mtp;
        const uint64_t own = fg_weight_bytes(&t->eh_proj) +
                             (t->head.data != m->output.data ? fg_weight_bytes(&t->head) : 0);
        total += own + (t->embd.data != m->tok_embd.data ? fg_weight_bytes(&t->embd) : 0);
        active += own;
    }
    fg_arch_model_init(&m->base, hp->n_nextn ? &fg_arch_deepseek2_mtp : &fg_arch_deepseek2, g);
    m->base.n_vocab = hp->n_vocab;
    m->base.n_ctx_train = hp->n_ctx_train;
    m->base.n_layer = hp->n_layer;
    m->base.n_embd = hp->n_embd;
    m->base.n_expert = hp->n_expert;
    m->base.n_expert_used = hp->n_expert_used;
    m->base.n_ff_exp = hp->n_ff_exp;
    m->base.n_layer_run = n_run; /* the MTP block runs after the trunk */
    m->base.weight_bytes_total = total;
    m->base.weight_bytes_active = active;
    *out = m;
    return FG_OK;
fail:
    fg_model_free(m);
    return e;
}

void fg_model_free(fg_model *m)
{
    if (!m)
        return;
    free(m->layers);
    free(m);
}

