/* modelgen.c: the random-weight GGUF generator (see modelgen.h): presets,
 * checks, the deepseek2 keys and tensor list, and what both architectures
 * share: random numbers, encoding, writing and the vocabulary. deepseek4's
 * keys and tensor list are in modelgen_v4.c (modelgen_plan.h between them).
 *
 * Design: one visit function per architecture walks the tensors of a spec in
 * file order and hands each one (name, ggml shape, type, initialiser) to a
 * callback. The same walk declares the tensors, writes their data and counts
 * parameters, so the three can never disagree. Writing streams one tensor at a
 * time: values are generated in chunks of CHUNK floats and encoded (F32, F16,
 * BF16, Q8_0 or MXFP4; I32 expert ids are drawn as integers) straight into one
 * reusable buffer the size of the largest tensor, which goes to the GGUF
 * writer in one call.
 *
 * Random numbers: splitmix64, seeded per tensor from (spec seed, FNV-1a of the
 * tensor name). Each 64-bit draw is cut into four 16-bit uniforms whose sum
 * (Irwin-Hall, n = 4) is centred and scaled to unit variance; the only float
 * operations are an exact int->double conversion, a multiply by a per-tensor
 * scale and an add, so the bytes are the same on every IEEE machine.
 *
 * Conventions copied from llama.cpp's converter (convert_hf_to_gguf.py,
 * DeepseekV2Model, and gguf-py): tensor names carry ".weight" (".bias" for
 * exp_probs_b); 1-D tensors and the router ffn_gate_inp stay F32 whatever the
 * output type; a Q8_0 matrix whose rows are not a multiple of 32 falls back to
 * F16; q_lora_rank is written only for q-LoRA models; vocab_size and
 * general.quantization_version (2) are written; general.alignment is not (the
 * default 32 is used). expert_weights_norm and expert_gating_func are always
 * written (llama.cpp treats them as optional).
 */
#include "engine/model/modelgen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/hash64.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/modelgen_plan.h"
#include "engine/tokenizer/bpe_train.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/quantize.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "modelgen writes tensor data in host order; GGUF is little-endian"
#endif

#define ARCH "deepseek2"
#define MAX_DIM (1u << 20)
#define MAX_LAYERS 1024u
#define CHUNK 65536 /* floats generated per step; a multiple of the 32-element blocks */

/* DeepSeek's special token texts: U+FF5C (fullwidth vertical bar) and U+2581
 * (lower one eighth block) in UTF-8. Literals are split so that a hex escape
 * never swallows the letters after it. */
#define FW_BAR "\xEF\xBD\x9C"
#define LOW_BLK "\xE2\x96\x81"
static const char BOS_TEXT[] = "<" FW_BAR "begin" LOW_BLK "of" LOW_BLK "sentence" FW_BAR ">";
static const char EOS_TEXT[] = "<" FW_BAR "end" LOW_BLK "of" LOW_BLK "sentence" FW_BAR ">";
/* spec.chat_markers: the markers of DeepSeek-V3's chat template and tool calls,
 * so a test model's prompts and replies use them as the real vocabulary does. */
#define MARK(t) "<" FW_BAR t FW_BAR ">"
static const char *const CHAT_MARKERS[] = {
    MARK("User"),
    MARK("Assistant"),
    MARK("tool" LOW_BLK "calls" LOW_BLK "begin"),
    MARK("tool" LOW_BLK "calls" LOW_BLK "end"),
    MARK("tool" LOW_BLK "call" LOW_BLK "begin"),
    MARK("tool" LOW_BLK "call" LOW_BLK "end"),
    MARK("tool" LOW_BLK "sep"),
    MARK("tool" LOW_BLK "outputs" LOW_BLK "begin"),
    MARK("tool" LOW_BLK "outputs" LOW_BLK "end"),
    MARK("tool" LOW_BLK "output" LOW_BLK "begin"),
    MARK("tool" LOW_BLK "output" LOW_BLK "end"),
};
/* spec.v4_chat_markers: what DeepSeek-V4's encoder writes as markers, so a
 * V4 test model's vocabulary makes the family detectable and its prompts'
 * markers single ids. */
static const char *const V4_CHAT_MARKERS[] = {
    MARK("User"), MARK("Assistant"), MARK("latest_reminder"), "<think>", "</think>", FW_BAR "DSML" FW_BAR,
};
#undef MARK
#define N_CHAT_MARKERS (sizeof CHAT_MARKERS / sizeof CHAT_MARKERS[0])
#define N_V4_CHAT_MARKERS (sizeof V4_CHAT_MARKERS / sizeof V4_CHAT_MARKERS[0])

/* The markers a spec adds after EOS. */
static const char *const *spec_markers(const fg_modelgen_spec *s, uint32_t *n)
{
    *n = s->v4_chat_markers ? (uint32_t)N_V4_CHAT_MARKERS : s->chat_markers ? (uint32_t)N_CHAT_MARKERS : 0;
    return s->v4_chat_markers ? V4_CHAT_MARKERS : CHAT_MARKERS;
}

/* llama.cpp token types */
#define TOKEN_TYPE_NORMAL 1
#define TOKEN_TYPE_CONTROL 3

/* ---- presets ---- */

fg_err fg_modelgen_preset(const char *name, fg_modelgen_spec *out)
{
    if (!name || !out)
        return FG_ERR_INVALID_ARG;
    if (fg_modelgen_v4_preset(name, out))
        return FG_OK;
    fg_modelgen_spec s;
    memset(&s, 0, sizeof s);
    if (strcmp(name, "tiny") == 0) {
        snprintf(s.name, sizeof s.name, "flashgate-tiny");
        s.n_vocab = 512;
        s.n_ctx = 4096;
        s.n_embd = 128;
        s.n_layer = 4;
        s.n_layer_dense_lead = 1;
        s.n_ff = 384;
        s.n_head = 4;
        s.q_lora_rank = 64;
        s.kv_lora_rank = 64;
        s.rope_dim = 16;
        s.nope_dim = 32;
        s.v_dim = 32;
        s.n_expert = 16;
        s.n_expert_used = 4;
        s.n_ff_exp = 64;
        s.weight_type = FG_GGML_F32;
    } else if (strcmp(name, "flash-mini") == 0) {
        snprintf(s.name, sizeof s.name, "flashgate-flash-mini");
        s.n_vocab = 1024;
        s.n_ctx = 32768;
        s.n_embd = 1024;
        s.n_layer = 8;
        s.n_layer_dense_lead = 1;
        s.n_ff = 2816;
        s.n_head = 8;
        s.q_lora_rank = 384;
        s.kv_lora_rank = 160;
        s.rope_dim = 32;
        s.nope_dim = 64;
        s.v_dim = 64;
        s.n_expert = 64;
        s.n_expert_used = 6;
        s.n_ff_exp = 256;
        s.n_expert_groups = 8;
        s.n_expert_groups_used = 4;
        s.weight_type = FG_GGML_Q8_0;
    } else if (strcmp(name, "english") == 0) {
        /* the trained default model's geometry, sized to learn in ~40 min on two
         * busy CPU cores (docs/english-model.md) */
        snprintf(s.name, sizeof s.name, "flashgate-flash-english");
        s.n_vocab = 2048;
        s.n_ctx = 2048;
        s.n_embd = 128;
        s.n_layer = 4;
        s.n_layer_dense_lead = 1;
        s.n_ff = 384;
        s.n_head = 4;
        s.q_lora_rank = 64;
        s.kv_lora_rank = 64;
        s.rope_dim = 16;
        s.nope_dim = 32;
        s.v_dim = 32;
        s.n_expert = 8;
        s.n_expert_used = 2;
        s.n_ff_exp = 128;
        s.weight_type = FG_GGML_F32;
    } else {
        return FG_ERR_INVALID_ARG;
    }
    /* shared by all presets */
    s.rope_freq_base = 10000.0f;
    s.rms_eps = 1e-6f;
    s.yarn_log_mul = 0.1f;
    s.n_expert_shared = 1;
    s.gating = FG_MODELGEN_GATING_SIGMOID;
    s.expert_weights_norm = true;
    s.expert_weights_scale = 2.5f;
    s.seed = 42;
    *out = s;
    return FG_OK;
}

/* ---- validation ---- */

bool fg_modelgen_matrix_type(uint32_t t)
{
    return t == FG_GGML_F32 || t == FG_GGML_F16 || t == FG_GGML_BF16 || t == FG_GGML_Q8_0;
}

bool fg_modelgen_positive(float v) { return isfinite(v) && v > 0.0f; }

fg_err fg_modelgen_check_dims(const fg_modelgen_dim *dims, size_t n, fg_diag *diag)
{
    for (size_t i = 0; i < n; i++) {
        if (dims[i].v == 0 || dims[i].v > dims[i].max)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: %s = %u must be in 1..%u", dims[i].field,
                               dims[i].v, dims[i].max);
    }
    return FG_OK;
}

fg_err fg_modelgen_validate(const fg_modelgen_spec *s, fg_diag *diag)
{
    if (!s)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: NULL spec");
    if (!memchr(s->name, '\0', sizeof s->name) || s->name[0] == '\0')
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: name must be 1..63 bytes");
    if (s->arch == FG_MODELGEN_DEEPSEEK4) {
        if (s->n_nextn)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_nextn is deepseek2's (deepseek4: v4.n_nextn)");
        return fg_modelgen_v4_validate(s, diag);
    }
    if (s->arch != FG_MODELGEN_DEEPSEEK2)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: arch = %d must be 0 (deepseek2) or 1 (deepseek4)",
                           (int)s->arch);
    const fg_modelgen_dim dims[] = {
        {"n_vocab", s->n_vocab, MAX_DIM},       {"n_ctx", s->n_ctx, 1u << 30},
        {"n_embd", s->n_embd, MAX_DIM},         {"n_layer", s->n_layer, MAX_LAYERS},
        {"n_ff", s->n_ff, MAX_DIM},             {"n_head", s->n_head, 4096},
        {"kv_lora_rank", s->kv_lora_rank, MAX_DIM}, {"rope_dim", s->rope_dim, 4096},
        {"nope_dim", s->nope_dim, 4096},        {"v_dim", s->v_dim, 4096},
        {"n_expert", s->n_expert, 4096},        {"n_expert_used", s->n_expert_used, 4096},
        {"n_expert_shared", s->n_expert_shared, 64}, {"n_ff_exp", s->n_ff_exp, MAX_DIM},
    };
    FG_TRY(fg_modelgen_check_dims(dims, sizeof dims / sizeof dims[0], diag));
    if (s->q_lora_rank > MAX_DIM)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: q_lora_rank = %u exceeds %u", s->q_lora_rank, MAX_DIM);
    if ((uint64_t)s->n_head * (s->nope_dim + s->rope_dim) > MAX_DIM ||
        (uint64_t)s->n_head * s->v_dim > MAX_DIM)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_head * head width exceeds %u", MAX_DIM);
    if ((uint64_t)s->n_ff_exp * s->n_expert_shared > MAX_DIM)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_ff_exp * n_expert_shared exceeds %u", MAX_DIM);
    if (s->n_vocab < FG_BPE_BYTE_TOKENS + 2)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_vocab = %u is below 258 (256 bytes + BOS + EOS)",
                           s->n_vocab);
    uint32_t n_marks;
    spec_markers(s, &n_marks);
    if (s->chat_markers && s->v4_chat_markers)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: V3's and V4's chat markers are exclusive");
    if (s->n_vocab < FG_BPE_BYTE_TOKENS + 2 + n_marks)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "modelgen: n_vocab = %u is below %u (256 bytes + BOS + EOS + the chat markers)", s->n_vocab,
                           (unsigned)(FG_BPE_BYTE_TOKENS + 2 + n_marks));
    if (s->rope_dim % 2)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: rope_dim = %u must be even", s->rope_dim);
    if (s->n_nextn > 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_nextn = %u must be 0 or 1", s->n_nextn);
    if (s->n_layer + s->n_nextn > MAX_LAYERS)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_layer + n_nextn exceeds %u", MAX_LAYERS);
    if (s->n_layer_dense_lead > s->n_layer)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_layer_dense_lead = %u exceeds n_layer = %u",
                           s->n_layer_dense_lead, s->n_layer);
    if (s->n_expert_used > s->n_expert)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_expert_used = %u exceeds n_expert = %u",
                           s->n_expert_used, s->n_expert);
    if (s->n_expert_groups == 0) {
        if (s->n_expert_groups_used != 0)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_expert_groups_used set without groups");
    } else {
        uint32_t g = s->n_expert_groups, k = s->n_expert_groups_used;
        if (s->n_expert % g != 0 || s->n_expert / g < 2)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "modelgen: %u groups must divide %u experts into groups of at least 2", g,
                               s->n_expert);
        if (k == 0 || k > g)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: n_expert_groups_used = %u must be in 1..%u", k, g);
        if (s->n_expert_used > k * (s->n_expert / g))
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "modelgen: top-%u cannot be chosen from %u groups of %u experts", s->n_expert_used, k,
                               s->n_expert / g);
    }
    if (s->gating != FG_MODELGEN_GATING_SOFTMAX && s->gating != FG_MODELGEN_GATING_SIGMOID)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: gating = %u must be 1 (softmax) or 2 (sigmoid)",
                           s->gating);
    if (s->weights_path && s->source_path)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: weights_path and source_path exclude each other");
    if (s->bpe_text && !s->bpe_text_len)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: bpe_text is empty");
    if (!fg_modelgen_matrix_type(s->weight_type))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "modelgen: weight_type = %u must be 0 (F32), 1 (F16), 30 (BF16) or 8 (Q8_0)",
                           s->weight_type);
    if (!fg_modelgen_positive(s->rope_freq_base))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: rope_freq_base must be positive");
    if (!fg_modelgen_positive(s->rms_eps))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: rms_eps must be positive");
    if (!fg_modelgen_positive(s->expert_weights_scale))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: expert_weights_scale must be positive");
    if (s->yarn_factor != 0.0f) {
        if (!(isfinite(s->yarn_factor) && s->yarn_factor >= 1.0f))
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: yarn_factor must be 0 (off) or >= 1");
        if (s->yarn_orig_ctx == 0)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: yarn_orig_ctx must be set with yarn_factor");
        if (!isfinite(s->yarn_log_mul))
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: yarn_log_mul must be finite");
    }
    return FG_OK;
}

/* ---- the tensor plan ---- */

/* Q8_0 and MXFP4 need whole 32-element blocks per row; like llama.cpp's
 * converter, fall back to F16 where a row does not split into blocks. */
uint32_t fg_modelgen_block_type(uint32_t type, int64_t ne0)
{
    if ((type == FG_GGML_Q8_0 || type == FG_GGML_MXFP4) && ne0 % FG_Q8_0_BLOCK != 0)
        return FG_GGML_F16;
    return type;
}

static uint32_t matrix_type(const fg_modelgen_spec *s, int64_t ne0)
{
    return fg_modelgen_block_type(s->weight_type, ne0);
}

void fg_modelgen_emit(fg_modelgen_visit_fn fn, void *ctx, const char *name, uint32_t n_dims, int64_t ne0,
                      int64_t ne1, int64_t ne2, uint32_t type, double mean, double sigma, bool routed)
{
    fg_modelgen_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.n_dims = n_dims;
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.ne[2] = ne2;
    t.type = type;
    t.init = FG_MODELGEN_INIT_NORMAL;
    t.mean = mean;
    t.sigma = sigma;
    t.routed = routed;
    fn(ctx, &t);
}

void fg_modelgen_emit_norm(fg_modelgen_visit_fn fn, void *ctx, const char *name, int64_t n)
{
    fg_modelgen_emit(fn, ctx, name, 1, n, 1, 1, FG_GGML_F32, 1.0, 0.1, false);
}

/* A weight matrix (or stack of them) with the default N(0, 1/sqrt(n_in)) init. */
static void emit_matrix(fg_modelgen_visit_fn fn, void *ctx, const fg_modelgen_spec *s, const char *name,
                        uint32_t n_dims, int64_t ne0, int64_t ne1, int64_t ne2, bool routed)
{
    fg_modelgen_emit(fn, ctx, name, n_dims, ne0, ne1, ne2, matrix_type(s, ne0), 0.0, 1.0 / sqrt((double)ne0), routed);
}

/* Walks every tensor of a deepseek2 file in order. Shapes follow llama.cpp's
 * llama_model_deepseek2::load_arch_tensors (ggml order, ne[0] first). */
static void v2_visit(const fg_modelgen_spec *s, fg_modelgen_visit_fn fn, void *ctx)
{
    const int64_t d = s->n_embd, V = s->n_vocab, H = s->n_head;
    const int64_t qk = (int64_t)s->nope_dim + s->rope_dim;
    const int64_t E = s->n_expert, f = s->n_ff_exp, fsh = (int64_t)s->n_ff_exp * s->n_expert_shared;
    char nm[64];

    /* token_embd {d, V}: rows are looked up, not multiplied, so N(0, 1). */
    fg_modelgen_emit(fn, ctx, "token_embd.weight", 2, d, V, 1, matrix_type(s, d), 0.0, 1.0, false);

#define BLK(suffix) (snprintf(nm, sizeof nm, "blk.%u." suffix, il), nm)
    for (uint32_t il = 0; il < s->n_layer + s->n_nextn; il++) {
        fg_modelgen_emit_norm(fn, ctx, BLK("attn_norm.weight"), d);
        if (s->q_lora_rank > 0) {
            emit_matrix(fn, ctx, s, BLK("attn_q_a.weight"), 2, d, s->q_lora_rank, 1, false);
            fg_modelgen_emit_norm(fn, ctx, BLK("attn_q_a_norm.weight"), s->q_lora_rank);
            emit_matrix(fn, ctx, s, BLK("attn_q_b.weight"), 2, s->q_lora_rank, H * qk, 1, false);
        } else {
            emit_matrix(fn, ctx, s, BLK("attn_q.weight"), 2, d, H * qk, 1, false);
        }
        emit_matrix(fn, ctx, s, BLK("attn_kv_a_mqa.weight"), 2, d, (int64_t)s->kv_lora_rank + s->rope_dim, 1, false);
        fg_modelgen_emit_norm(fn, ctx, BLK("attn_kv_a_norm.weight"), s->kv_lora_rank);
        /* the two halves of DeepSeek's kv_b_proj, per head: k_b maps the query's
         * nope part into the latent (transposed), v_b maps the latent to v */
        emit_matrix(fn, ctx, s, BLK("attn_k_b.weight"), 3, s->nope_dim, s->kv_lora_rank, H, false);
        emit_matrix(fn, ctx, s, BLK("attn_v_b.weight"), 3, s->kv_lora_rank, s->v_dim, H, false);
        emit_matrix(fn, ctx, s, BLK("attn_output.weight"), 2, H * s->v_dim, d, 1, false);
        fg_modelgen_emit_norm(fn, ctx, BLK("ffn_norm.weight"), d);
        if (il < s->n_layer_dense_lead) {
            emit_matrix(fn, ctx, s, BLK("ffn_gate.weight"), 2, d, s->n_ff, 1, false);
            emit_matrix(fn, ctx, s, BLK("ffn_up.weight"), 2, d, s->n_ff, 1, false);
            emit_matrix(fn, ctx, s, BLK("ffn_down.weight"), 2, s->n_ff, d, 1, false);
        } else {
            /* the router stays F32, as llama.cpp keeps ffn_gate_inp */
            fg_modelgen_emit(fn, ctx, BLK("ffn_gate_inp.weight"), 2, d, E, 1, FG_GGML_F32, 0.0, 1.0 / sqrt((double)d),
                             false);
            if (s->gating == FG_MODELGEN_GATING_SIGMOID)
                fg_modelgen_emit(fn, ctx, BLK("exp_probs_b.bias"), 1, E, 1, 1, FG_GGML_F32, 0.0, 0.05, false);
            emit_matrix(fn, ctx, s, BLK("ffn_gate_exps.weight"), 3, d, f, E, true);
            emit_matrix(fn, ctx, s, BLK("ffn_up_exps.weight"), 3, d, f, E, true);
            emit_matrix(fn, ctx, s, BLK("ffn_down_exps.weight"), 3, f, d, E, true);
            emit_matrix(fn, ctx, s, BLK("ffn_gate_shexp.weight"), 2, d, fsh, 1, false);
            emit_matrix(fn, ctx, s, BLK("ffn_up_shexp.weight"), 2, d, fsh, 1, false);
            emit_matrix(fn, ctx, s, BLK("ffn_down_shexp.weight"), 2, fsh, d, 1, false);
        }
        if (il >= s->n_layer) { /* the MTP block: eh_proj([enorm(embed(next)); hnorm(h)]), its own head norm */
            emit_matrix(fn, ctx, s, BLK("nextn.eh_proj.weight"), 2, 2 * d, d, 1, false);
            fg_modelgen_emit_norm(fn, ctx, BLK("nextn.enorm.weight"), d);
            fg_modelgen_emit_norm(fn, ctx, BLK("nextn.hnorm.weight"), d);
            fg_modelgen_emit_norm(fn, ctx, BLK("nextn.shared_head_norm.weight"), d);
        }
    }
#undef BLK

    fg_modelgen_emit_norm(fn, ctx, "output_norm.weight", d);
    /* a wider logit spread keeps greedy choices robust to small numeric differences */
    if (!s->tied_embeddings)
        fg_modelgen_emit(fn, ctx, "output.weight", 2, d, V, 1, matrix_type(s, d), 0.0, 3.0 / sqrt((double)d), false);
}

static void plan_visit(const fg_modelgen_spec *s, fg_modelgen_visit_fn fn, void *ctx)
{
    if (s->arch == FG_MODELGEN_DEEPSEEK4)
        fg_modelgen_v4_visit(s, fn, ctx);
    else
        v2_visit(s, fn, ctx);
}

static uint64_t plan_elems(const fg_modelgen_tensor *t)
{
    return (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
}

/* Bytes of a tensor of a type the generator writes (0 for another). */
static uint64_t plan_bytes(const fg_modelgen_tensor *t)
{
    uint32_t be = 0, bb = 0;
    if (!fg_ggml_type_size(t->type, &be, &bb))
        return 0;
    return plan_elems(t) / be * bb;
}

/* ---- parameter counts ---- */

typedef struct count_ctx {
    const fg_modelgen_spec *spec;
    uint64_t total, inactive;
} count_ctx;

static void count_one(void *vctx, const fg_modelgen_tensor *t)
{
    count_ctx *c = vctx;
    uint64_t n = plan_elems(t);
    c->total += n;
    if (t->routed) /* each expert slice is n / E; a token skips E - k of them */
        c->inactive += n / c->spec->n_expert * (c->spec->n_expert - c->spec->n_expert_used);
}

void fg_modelgen_param_counts(const fg_modelgen_spec *spec, uint64_t *total, uint64_t *active)
{
    count_ctx c = {spec, 0, 0};
    plan_visit(spec, count_one, &c);
    if (total)
        *total = c.total;
    if (active)
        *active = c.total - c.inactive;
}

/* ---- random numbers ---- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t tensor_seed(uint64_t seed, const char *name)
{
    uint64_t st = seed ^ fg_fnv1a64(name, strlen(name));
    return splitmix64(&st);
}

/* Centred Irwin-Hall sum of four 16-bit uniforms, times 2: an even integer in
 * [-262140, 262140] with variance 4 * (65536^2 - 1) / 3. */
static int32_t irwin_hall4x2(uint64_t r)
{
    int32_t s = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) + (int32_t)((r >> 32) & 0xffff) +
                (int32_t)(r >> 48);
    return 2 * s - 4 * 65535;
}

/* ---- writing ---- */

typedef struct write_ctx {
    const fg_modelgen_spec *spec;
    fg_gguf_writer_t *w;
    fg_diag *diag;
    fg_err err;
    uint64_t max_bytes;   /* largest tensor, for the encode buffer */
    void *buf;            /* encoded tensor */
    float *chunk;         /* [CHUNK] generated values */
    double unit;          /* 1 / (2 * sqrt((65536^2 - 1) / 3)): irwin_hall4x2 -> N(0, 1) */
    uint32_t n_tensors;   /* declared */
    FILE *wf;             /* spec->weights_path, read in step with the plan; NULL: random */
    fg_gguf_t *src;       /* spec->source_path; NULL: none */
} write_ctx;

static void declare_one(void *vctx, const fg_modelgen_tensor *t)
{
    write_ctx *c = vctx;
    if (c->err)
        return;
    fg_err e = fg_gguf_writer_add_tensor(c->w, t->name, t->type, t->n_dims, t->ne);
    if (e) {
        c->err = fg_diag_set(c->diag, e, "modelgen: declaring tensor %s: %s", t->name, fg_err_describe(e));
        return;
    }
    uint64_t nb = plan_bytes(t);
    if (nb > c->max_bytes)
        c->max_bytes = nb;
    c->n_tensors++;
}

/* ---- trained weights (FGW1, see modelgen.h) ---- */

static bool read_exact(FILE *f, void *dst, size_t n)
{
    return fread(dst, 1, n, f) == n;
}

static fg_err weights_open(write_ctx *c, const char *path)
{
    c->wf = fopen(path, "rb");
    if (!c->wf)
        return fg_diag_set(c->diag, FG_ERR_IO, "modelgen: cannot open weights file %s", path);
    unsigned char magic[4];
    uint32_t n = 0;
    if (!read_exact(c->wf, magic, 4) || memcmp(magic, "FGW1", 4) != 0 || !read_exact(c->wf, &n, 4))
        return fg_diag_set(c->diag, FG_ERR_INVALID_ARG, "modelgen: %s is not an FGW1 weights file (bad magic)", path);
    if (n != c->n_tensors)
        return fg_diag_set(c->diag, FG_ERR_INVALID_ARG,
                           "modelgen: %s holds %u tensors, the spec has %u (was it trained for this preset?)", path,
                           n, c->n_tensors);
    return FG_OK;
}

/* Reads the next tensor's header and checks it is t. */
static fg_err weights_header(write_ctx *c, const fg_modelgen_tensor *t)
{
    uint32_t len = 0;
    char name[sizeof t->name];
    uint64_t n = 0;
    if (!read_exact(c->wf, &len, 4) || len == 0 || len >= sizeof name || !read_exact(c->wf, name, len))
        return fg_diag_set(c->diag, FG_ERR_INVALID_ARG, "modelgen: weights file: bad or missing name where %s belongs",
                           t->name);
    name[len] = '\0';
    if (strcmp(name, t->name) != 0)
        return fg_diag_set(c->diag, FG_ERR_INVALID_ARG, "modelgen: weights file has %s where %s belongs", name,
                           t->name);
    if (!read_exact(c->wf, &n, 8) || n != plan_elems(t))
        return fg_diag_set(c->diag, FG_ERR_INVALID_ARG, "modelgen: weights file: %s has %llu values, the spec %llu",
                           t->name, (unsigned long long)n, (unsigned long long)plan_elems(t));
    return FG_OK;
}

/* The source GGUF's tensor t, which must be F32 with t's shape. */
static fg_err source_tensor(write_ctx *c, const fg_modelgen_tensor *t, const float **out)
{
    const fg_gguf_tensor *st = fg_gguf_find_tensor(c->src, t->name);
    if (!st)
        return fg_diag_set(c->diag, FG_ERR_INVALID_ARG, "modelgen: source model has no tensor %s", t->name);
    if (st->type != FG_GGML_F32 || st->ne[0] != t->ne[0] || st->ne[1] != t->ne[1] || st->ne[2] != t->ne[2] ||
        st->ne[3] != 1)
        return fg_diag_set(c->diag, FG_ERR_INVALID_ARG,
                           "modelgen: source tensor %s must be f32 of shape {%lld, %lld, %lld} (convert from the "
                           "F32 model)",
                           t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2]);
    *out = st->data;
    return FG_OK;
}

static fg_err weights_chunk(write_ctx *c, const fg_modelgen_tensor *t, float *x, int64_t m)
{
    if (!read_exact(c->wf, x, (size_t)m * sizeof *x))
        return fg_diag_set(c->diag, FG_ERR_INVALID_ARG, "modelgen: weights file ends inside %s", t->name);
    for (int64_t i = 0; i < m; i++) {
        if (!isfinite(x[i]))
            return fg_diag_set(c->diag, FG_ERR_INVALID_ARG, "modelgen: weights file: %s has a non-finite value",
                               t->name);
    }
    return FG_OK;
}

/* One conversion for every writer: kernels/cpu/quantize.h (F16, BF16 and Q8_0
 * as before, bit for bit). Our values are finite and chunks whole blocks, so
 * its "cannot" answer does not come. */
static void encode_chunk(uint32_t type, const float *x, int64_t n, void *dst)
{
    (void)fg_wtype_quantize_row((int)type, x, dst, n);
}

/* Rows of ne[0] distinct ids in [0, id_range): a partial Fisher-Yates shuffle
 * of one permutation kept across rows, with integer draws only. */
static fg_err write_expert_ids(const fg_modelgen_tensor *t, uint64_t *state, int32_t *dst, fg_diag *diag)
{
    const uint32_t n = t->id_range, k = (uint32_t)t->ne[0];
    uint32_t *perm = malloc((n ? n : 1) * sizeof *perm);
    if (!perm)
        return fg_diag_set(diag, FG_ERR_NOMEM, "modelgen: out of memory for %s", t->name);
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    for (int64_t row = 0; row < t->ne[1] * t->ne[2]; row++) {
        for (uint32_t j = 0; j < k; j++) {
            uint32_t pick = j + (uint32_t)(splitmix64(state) % (n - j));
            uint32_t tmp = perm[j];
            perm[j] = perm[pick];
            perm[pick] = tmp;
            dst[row * k + j] = (int32_t)perm[j];
        }
    }
    free(perm);
    return FG_OK;
}

static void write_one(void *vctx, const fg_modelgen_tensor *t)
{
    write_ctx *c = vctx;
    if (c->err)
        return;
    uint64_t state = tensor_seed(c->spec->seed, t->name);
    if (t->init == FG_MODELGEN_INIT_EXPERT_IDS) {
        if ((c->err = write_expert_ids(t, &state, c->buf, c->diag)))
            return;
        c->err = fg_gguf_writer_write_tensor(c->w, c->buf, plan_bytes(t), c->diag);
        return;
    }
    const double scale = t->sigma * c->unit;
    const uint64_t n = plan_elems(t);
    unsigned char *dst = c->buf;
    uint32_t block_elems = 1, block_bytes = 4;
    (void)fg_ggml_type_size(t->type, &block_elems, &block_bytes);
    if (c->wf && (c->err = weights_header(c, t)))
        return;
    const float *from = NULL;
    if (c->src && (c->err = source_tensor(c, t, &from)))
        return;
    for (uint64_t off = 0; off < n; off += CHUNK) {
        int64_t m = (int64_t)(n - off < CHUNK ? n - off : CHUNK);
        if (from) {
            memcpy(c->chunk, from + off, (size_t)m * sizeof *c->chunk);
        } else if (c->wf) {
            if ((c->err = weights_chunk(c, t, c->chunk, m)))
                return;
        } else {
            for (int64_t i = 0; i < m; i++) {
                /* separate statements: no fused multiply-add may change the bytes */
                double z = (double)irwin_hall4x2(splitmix64(&state)) * scale;
                c->chunk[i] = (float)(t->mean + z);
            }
        }
        /* CHUNK and every block-typed row are whole blocks, so a chunk starts on a block */
        encode_chunk(t->type, c->chunk, m, dst + off / block_elems * block_bytes);
    }
    fg_err e = fg_gguf_writer_write_tensor(c->w, c->buf, plan_bytes(t), c->diag);
    if (e)
        c->err = e;
}

uint32_t fg_modelgen_file_type(uint32_t wtype)
{
    /* llama.cpp's LLAMA_FTYPE_*: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32 */
    switch (wtype) {
    case FG_GGML_F16: return 1;
    case FG_GGML_Q8_0: return 7;
    case FG_GGML_BF16: return 32;
    default: return 0;
    }
}

/* Adds the general.* and deepseek2.* keys; *err_key names the key that failed. */
static fg_err v2_add_keys(fg_gguf_writer_t *w, const fg_modelgen_spec *s, const char **err_key)
{
#define KEY(k) (*err_key = (k), (k))
    FG_TRY(fg_gguf_writer_add_str(w, KEY("general.architecture"), ARCH));
    FG_TRY(fg_gguf_writer_add_str(w, KEY("general.name"), s->name));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".block_count"), s->n_layer + s->n_nextn));
    if (s->n_nextn)
        FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".nextn_predict_layers"), s->n_nextn));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".context_length"), s->n_ctx));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".embedding_length"), s->n_embd));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".feed_forward_length"), s->n_ff));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".attention.head_count"), s->n_head));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".attention.head_count_kv"), 1)); /* MLA runs as MQA */
    FG_TRY(fg_gguf_writer_add_f32(w, KEY(ARCH ".rope.freq_base"), s->rope_freq_base));
    FG_TRY(fg_gguf_writer_add_f32(w, KEY(ARCH ".attention.layer_norm_rms_epsilon"), s->rms_eps));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".expert_used_count"), s->n_expert_used));
    if (s->n_expert_groups > 0) {
        FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".expert_group_count"), s->n_expert_groups));
        FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".expert_group_used_count"), s->n_expert_groups_used));
    }
    FG_TRY(fg_gguf_writer_add_u32(w, KEY("general.file_type"), fg_modelgen_file_type(s->weight_type)));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".leading_dense_block_count"), s->n_layer_dense_lead));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".vocab_size"), s->n_vocab));
    if (s->q_lora_rank > 0)
        FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".attention.q_lora_rank"), s->q_lora_rank));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".attention.kv_lora_rank"), s->kv_lora_rank));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".attention.key_length"), s->kv_lora_rank + s->rope_dim));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".attention.value_length"), s->kv_lora_rank));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".attention.key_length_mla"), s->nope_dim + s->rope_dim));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".attention.value_length_mla"), s->v_dim));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".expert_feed_forward_length"), s->n_ff_exp));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".expert_count"), s->n_expert));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".expert_shared_count"), s->n_expert_shared));
    FG_TRY(fg_gguf_writer_add_f32(w, KEY(ARCH ".expert_weights_scale"), s->expert_weights_scale));
    FG_TRY(fg_gguf_writer_add_bool(w, KEY(ARCH ".expert_weights_norm"), s->expert_weights_norm));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".expert_gating_func"), s->gating));
    FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".rope.dimension_count"), s->rope_dim));
    if (s->yarn_factor != 0.0f) {
        FG_TRY(fg_gguf_writer_add_str(w, KEY(ARCH ".rope.scaling.type"), "yarn"));
        FG_TRY(fg_gguf_writer_add_f32(w, KEY(ARCH ".rope.scaling.factor"), s->yarn_factor));
        FG_TRY(fg_gguf_writer_add_u32(w, KEY(ARCH ".rope.scaling.original_context_length"), s->yarn_orig_ctx));
        FG_TRY(fg_gguf_writer_add_f32(w, KEY(ARCH ".rope.scaling.yarn_log_multiplier"), s->yarn_log_mul));
    }
    FG_TRY(fg_gguf_writer_add_u32(w, KEY("general.quantization_version"), 2));
    return FG_OK;
#undef KEY
}

/* Adds the tokenizer.* keys, the same for every architecture: bytes, merges,
 * then BOS and EOS. *err_key names the key that failed. */
static fg_err add_vocab(fg_gguf_writer_t *w, const fg_bpe_vocab *bpe, const fg_modelgen_spec *s, const char **err_key)
{
    fg_err e = FG_OK;
#define KEY(k) (*err_key = (k), (k))
    uint32_t n_marks;
    const char *const *marks = spec_markers(s, &n_marks);
    const uint32_t n_tok = bpe->n_tokens + 2 + n_marks;
    const char **texts = malloc(n_tok * sizeof *texts);
    int32_t *types = malloc(n_tok * sizeof *types);
    char **merges = calloc(bpe->n_merges ? bpe->n_merges : 1, sizeof *merges);
    if (!texts || !types || !merges) {
        e = FG_ERR_NOMEM;
        goto tok_done;
    }
    for (uint32_t i = 0; i < bpe->n_tokens; i++) {
        texts[i] = bpe->text[i];
        types[i] = TOKEN_TYPE_NORMAL;
    }
    texts[bpe->n_tokens] = BOS_TEXT;
    texts[bpe->n_tokens + 1] = EOS_TEXT;
    types[bpe->n_tokens] = types[bpe->n_tokens + 1] = TOKEN_TYPE_CONTROL;
    for (uint32_t i = 0; i < n_marks; i++) {
        texts[bpe->n_tokens + 2 + i] = marks[i];
        types[bpe->n_tokens + 2 + i] = TOKEN_TYPE_CONTROL;
    }
    for (uint32_t i = 0; i < bpe->n_merges; i++) {
        const char *l = bpe->text[bpe->merge[i][0]], *r = bpe->text[bpe->merge[i][1]];
        size_t ll = strlen(l), lr = strlen(r);
        merges[i] = malloc(ll + lr + 2);
        if (!merges[i]) {
            e = FG_ERR_NOMEM;
            goto tok_done;
        }
        memcpy(merges[i], l, ll);
        merges[i][ll] = ' ';
        memcpy(merges[i] + ll + 1, r, lr + 1);
    }
    e = fg_gguf_writer_add_str(w, KEY("tokenizer.ggml.model"), "gpt2");
    if (!e)
        /* "gpt-2" (llama.cpp's name for it; it refuses "gpt2"): the pre-split
         * our tokenizer and trainer use, so llama.cpp splits text alike. */
        e = fg_gguf_writer_add_str(w, KEY("tokenizer.ggml.pre"), "gpt-2");
    if (!e)
        e = fg_gguf_writer_add_arr_str(w, KEY("tokenizer.ggml.tokens"), texts, NULL, n_tok);
    if (!e)
        e = fg_gguf_writer_add_arr_i32(w, KEY("tokenizer.ggml.token_type"), types, n_tok);
    if (!e)
        e = fg_gguf_writer_add_arr_str(w, KEY("tokenizer.ggml.merges"), (const char *const *)merges, NULL,
                                       bpe->n_merges);
    if (!e)
        e = fg_gguf_writer_add_u32(w, KEY("tokenizer.ggml.bos_token_id"), bpe->n_tokens);
    if (!e)
        e = fg_gguf_writer_add_u32(w, KEY("tokenizer.ggml.eos_token_id"), bpe->n_tokens + 1);
    if (!e)
        e = fg_gguf_writer_add_bool(w, KEY("tokenizer.ggml.add_bos_token"), true);
tok_done:
    if (merges) {
        for (uint32_t i = 0; i < bpe->n_merges; i++)
            free(merges[i]);
    }
    free(merges);
    free(types);
    free(texts);
    return e;
#undef KEY
}

static fg_err add_metadata(fg_gguf_writer_t *w, const fg_modelgen_spec *s, const fg_bpe_vocab *bpe,
                           const char **err_key)
{
    fg_err e = s->arch == FG_MODELGEN_DEEPSEEK4 ? fg_modelgen_v4_add_keys(w, s, err_key) : v2_add_keys(w, s, err_key);
    return e ? e : add_vocab(w, bpe, s, err_key);
}

/* The vocabulary of a GGUF this generator wrote (bytes, merges, BOS, EOS) as
 * an fg_bpe_vocab, so a conversion keeps it exactly. */
static fg_err vocab_from_gguf(const fg_gguf_t *g, uint32_t n_vocab, fg_bpe_vocab *v, fg_diag *diag)
{
    memset(v, 0, sizeof *v);
    fg_gguf_vtype et;
    uint64_t n_tok = 0, n_merge = 0;
    if (fg_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok) || et != FG_GGUF_STRING ||
        fg_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merge) || et != FG_GGUF_STRING)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: source model has no tokenizer.ggml tokens/merges");
    if (n_tok != n_vocab || n_merge + FG_BPE_BYTE_TOKENS + 2 != n_tok)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "modelgen: source vocabulary (%llu tokens, %llu merges) is not this spec's (%u tokens)",
                           (unsigned long long)n_tok, (unsigned long long)n_merge, n_vocab);
    v->n_tokens = (uint32_t)n_tok - 2;
    v->n_merges = (uint32_t)n_merge;
    v->text = calloc(v->n_tokens, sizeof *v->text);
    v->merge = calloc(v->n_merges ? v->n_merges : 1, sizeof *v->merge);
    if (!v->text || !v->merge) {
        fg_bpe_vocab_free(v);
        return fg_diag_set(diag, FG_ERR_NOMEM, "modelgen: out of memory for the source vocabulary");
    }
    fg_gguf_str t;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (fg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &t) || !(v->text[i] = malloc(t.len + 1))) {
            fg_bpe_vocab_free(v);
            return fg_diag_set(diag, FG_ERR_NOMEM, "modelgen: out of memory for the source vocabulary");
        }
        memcpy(v->text[i], t.ptr, t.len);
        v->text[i][t.len] = '\0';
    }
    /* merge i made token 256 + i from two earlier tokens: find them by text */
    for (uint32_t i = 0; i < v->n_merges; i++) {
        const uint32_t made = FG_BPE_BYTE_TOKENS + i;
        fg_gguf_str m;
        bool ok = fg_gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &m) == FG_OK;
        const char *sp = ok ? memchr(m.ptr, ' ', m.len) : NULL;
        ok = sp != NULL;
        for (uint32_t side = 0; ok && side < 2; side++) {
            const char *p = side ? sp + 1 : m.ptr;
            size_t len = side ? (size_t)(m.ptr + m.len - sp - 1) : (size_t)(sp - m.ptr);
            uint32_t id = 0;
            while (id < made && !(strlen(v->text[id]) == len && memcmp(v->text[id], p, len) == 0))
                id++;
            v->merge[i][side] = id;
            ok = id < made;
        }
        if (ok) {
            const char *l = v->text[v->merge[i][0]], *r = v->text[v->merge[i][1]];
            size_t ll = strlen(l);
            ok = strncmp(v->text[made], l, ll) == 0 && strcmp(v->text[made] + ll, r) == 0;
        }
        if (!ok) {
            fg_bpe_vocab_free(v);
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "modelgen: source merge %u does not make token %u from earlier tokens (not a "
                               "vocabulary this generator wrote)",
                               i, made);
        }
    }
    return FG_OK;
}

fg_err fg_modelgen_write(const fg_modelgen_spec *spec, const char *path, fg_diag *diag)
{
    fg_err e = fg_modelgen_validate(spec, diag);
    if (e)
        return e;
    if (!path || !*path)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: empty output path");

    write_ctx c;
    memset(&c, 0, sizeof c);
    fg_bpe_vocab bpe;
    if (spec->source_path) {
        if ((e = fg_gguf_open_file(spec->source_path, &c.src, diag)))
            return e;
        if ((e = vocab_from_gguf(c.src, spec->n_vocab, &bpe, diag))) {
            fg_gguf_close(c.src);
            return e;
        }
    } else {
        uint32_t n_marks;
        spec_markers(spec, &n_marks);
        size_t corpus_len = spec->bpe_text_len;
        const char *corpus = spec->bpe_text ? spec->bpe_text : fg_bpe_builtin_corpus(&corpus_len);
        if ((e = fg_bpe_train(corpus, corpus_len,
                              spec->n_vocab - FG_BPE_BYTE_TOKENS - 2 - n_marks,
                              &bpe, diag)))
            return e;
    }

    c.spec = spec;
    c.diag = diag;
    c.unit = 0.5 / sqrt((65536.0 * 65536.0 - 1.0) / 3.0);
    if ((e = fg_gguf_writer_create(path, 0, &c.w, diag)))
        goto done;
    const char *key = "";
    if ((e = add_metadata(c.w, spec, &bpe, &key))) {
        e = fg_diag_set(diag, e, "modelgen: adding key %s: %s", key, fg_err_describe(e));
        goto done;
    }
    plan_visit(spec, declare_one, &c);
    if ((e = c.err))
        goto done;
    c.buf = malloc(c.max_bytes ? (size_t)c.max_bytes : 1);
    c.chunk = malloc(CHUNK * sizeof *c.chunk);
    if (!c.buf || !c.chunk) {
        e = fg_diag_set(diag, FG_ERR_NOMEM, "modelgen: out of memory for a %llu-byte tensor buffer",
                        (unsigned long long)c.max_bytes);
        goto done;
    }
    if (spec->weights_path && (e = weights_open(&c, spec->weights_path)))
        goto done;
    if ((e = fg_gguf_writer_begin_data(c.w, diag)))
        goto done;
    plan_visit(spec, write_one, &c);
    if ((e = c.err))
        goto done;
    if (c.wf && fgetc(c.wf) != EOF) {
        e = fg_diag_set(diag, FG_ERR_INVALID_ARG, "modelgen: weights file %s has bytes after the last tensor",
                        spec->weights_path);
        goto done;
    }
    e = fg_gguf_writer_finish(c.w, diag);

done:
    if (c.w)
        fg_gguf_writer_destroy(c.w); /* after finish: frees; before: removes the temp file */
    if (c.wf)
        fclose(c.wf);
    fg_gguf_close(c.src);
    free(c.buf);
    free(c.chunk);
    fg_bpe_vocab_free(&bpe);
    return e;
}
