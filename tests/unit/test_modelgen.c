/* test_modelgen.c: the deepseek2 GGUF generator and its BPE trainer.
 *
 * Writes tiny models into a temporary directory and reads them back with the
 * GGUF reader: byte-identical output for the same spec and seed (all four
 * weight types), different bytes for another seed; every key and tensor
 * (name, ggml shape, type) re-derived here independently of modelgen.c, for
 * the q-LoRA and lite layouts, tied and untied heads, groups, softmax and
 * YaRN; the same random values behind every weight type; the vocabulary's
 * structure; flash-mini's parameter counts from the spec alone (its 400 MB
 * file is not written here); and that the engine's model loader and tokenizer
 * accept the result.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "engine/model/modelgen.h"
#include "engine/tokenizer/bpe_train.h"
#include "engine/tokenizer/byte_unicode.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_files.h"
#include "tests/unit/fg_test_modelgen.h"

/* ---- determinism ---- */

static void test_determinism(void)
{
    const uint32_t types[] = {FG_GGML_F32, FG_GGML_F16, FG_GGML_BF16, FG_GGML_Q8_0};
    char a[256], b[256];
    fg_test_path(a, sizeof a, "det_a.gguf");
    fg_test_path(b, sizeof b, "det_b.gguf");
    for (size_t i = 0; i < 4; i++) {
        fg_modelgen_spec s = fg_test_preset("tiny");
        s.weight_type = types[i];
        if (!fg_test_write_spec(&s, a) || !fg_test_write_spec(&s, b))
            return;
        int cmp = fg_test_compare_files(a, b);
        CHECK(cmp >= 0);
        CHECK_MSG(cmp == 0, "type %u: same seed, different bytes", types[i]);
        s.seed = 43;
        if (!fg_test_write_spec(&s, b))
            return;
        cmp = fg_test_compare_files(a, b);
        CHECK_MSG(cmp > 0, "type %u: another seed, same bytes", types[i]);
        /* the metadata is identical; only tensor data may differ */
    }
    unlink(a);
    unlink(b);
}

/* ---- keys ---- */

static void expect_u32(const fg_gguf_t *g, const char *key, uint32_t want)
{
    int64_t i = fg_gguf_find_key(g, key);
    CHECK_MSG(i >= 0, "missing key %s", key);
    if (i < 0)
        return;
    CHECK_MSG(fg_gguf_key_type(g, (uint64_t)i) == FG_GGUF_UINT32, "%s is not u32", key);
    uint32_t v = 0;
    CHECK(fg_gguf_get_u32(g, key, &v) == FG_OK);
    CHECK_MSG(v == want, "%s = %u, want %u", key, v, want);
}

static void expect_f32(const fg_gguf_t *g, const char *key, float want)
{
    int64_t i = fg_gguf_find_key(g, key);
    CHECK_MSG(i >= 0, "missing key %s", key);
    if (i < 0)
        return;
    CHECK_MSG(fg_gguf_key_type(g, (uint64_t)i) == FG_GGUF_FLOAT32, "%s is not f32", key);
    float v = 0;
    CHECK(fg_gguf_get_f32(g, key, &v) == FG_OK);
    CHECK_MSG(v == want, "%s = %g, want %g", key, v, want);
}

static void expect_bool(const fg_gguf_t *g, const char *key, bool want)
{
    bool v = !want;
    CHECK_MSG(fg_gguf_get_bool(g, key, &v) == FG_OK, "missing bool key %s", key);
    CHECK_MSG(v == want, "%s = %d, want %d", key, v, want);
}

static void expect_str(const fg_gguf_t *g, const char *key, const char *want)
{
    fg_gguf_str v = {0};
    CHECK_MSG(fg_gguf_get_str(g, key, &v) == FG_OK, "missing string key %s", key);
    CHECK_MSG(v.len == strlen(want) && memcmp(v.ptr, want, v.len) == 0, "%s is '%.*s', want '%s'", key,
              (int)v.len, v.ptr ? v.ptr : "", want);
}

static void expect_absent(const fg_gguf_t *g, const char *key)
{
    CHECK_MSG(fg_gguf_find_key(g, key) < 0, "key %s should be absent", key);
}

static uint32_t file_type(uint32_t t)
{
    return t == FG_GGML_F16 ? 1 : t == FG_GGML_Q8_0 ? 7 : t == FG_GGML_BF16 ? 32 : 0;
}

static void check_keys(const fg_gguf_t *g, const fg_modelgen_spec *s)
{
    expect_str(g, "general.architecture", "deepseek2");
    expect_str(g, "general.name", s->name);
    expect_u32(g, "general.file_type", file_type(s->weight_type));
    expect_u32(g, "deepseek2.context_length", s->n_ctx);
    expect_u32(g, "deepseek2.embedding_length", s->n_embd);
    expect_u32(g, "deepseek2.block_count", s->n_layer + s->n_nextn);
    if (s->n_nextn)
        expect_u32(g, "deepseek2.nextn_predict_layers", s->n_nextn);
    else
        expect_absent(g, "deepseek2.nextn_predict_layers");
    expect_u32(g, "deepseek2.feed_forward_length", s->n_ff);
    expect_u32(g, "deepseek2.vocab_size", s->n_vocab);
    expect_u32(g, "deepseek2.attention.head_count", s->n_head);
    expect_u32(g, "deepseek2.attention.head_count_kv", 1);
    expect_f32(g, "deepseek2.attention.layer_norm_rms_epsilon", s->rms_eps);
    if (s->q_lora_rank)
        expect_u32(g, "deepseek2.attention.q_lora_rank", s->q_lora_rank);
    else
        expect_absent(g, "deepseek2.attention.q_lora_rank");
    expect_u32(g, "deepseek2.attention.kv_lora_rank", s->kv_lora_rank);
    expect_u32(g, "deepseek2.attention.key_length", s->kv_lora_rank + s->rope_dim);
    expect_u32(g, "deepseek2.attention.value_length", s->kv_lora_rank);
    expect_u32(g, "deepseek2.attention.key_length_mla", s->nope_dim + s->rope_dim);
    expect_u32(g, "deepseek2.attention.value_length_mla", s->v_dim);
    expect_u32(g, "deepseek2.rope.dimension_count", s->rope_dim);
    expect_f32(g, "deepseek2.rope.freq_base", s->rope_freq_base);
    expect_u32(g, "deepseek2.expert_count", s->n_expert);
    expect_u32(g, "deepseek2.expert_used_count", s->n_expert_used);
    expect_u32(g, "deepseek2.expert_shared_count", s->n_expert_shared);
    expect_u32(g, "deepseek2.expert_feed_forward_length", s->n_ff_exp);
    expect_u32(g, "deepseek2.leading_dense_block_count", s->n_layer_dense_lead);
    expect_f32(g, "deepseek2.expert_weights_scale", s->expert_weights_scale);
    expect_bool(g, "deepseek2.expert_weights_norm", s->expert_weights_norm);
    expect_u32(g, "deepseek2.expert_gating_func", s->gating);
    if (s->n_expert_groups) {
        expect_u32(g, "deepseek2.expert_group_count", s->n_expert_groups);
        expect_u32(g, "deepseek2.expert_group_used_count", s->n_expert_groups_used);
    } else {
        expect_absent(g, "deepseek2.expert_group_count");
        expect_absent(g, "deepseek2.expert_group_used_count");
    }
    if (s->yarn_factor != 0.0f) {
        expect_str(g, "deepseek2.rope.scaling.type", "yarn");
        expect_f32(g, "deepseek2.rope.scaling.factor", s->yarn_factor);
        expect_u32(g, "deepseek2.rope.scaling.original_context_length", s->yarn_orig_ctx);
        expect_f32(g, "deepseek2.rope.scaling.yarn_log_multiplier", s->yarn_log_mul);
    } else {
        expect_absent(g, "deepseek2.rope.scaling.type");
        expect_absent(g, "deepseek2.rope.scaling.factor");
    }
    expect_str(g, "tokenizer.ggml.model", "gpt2");
    expect_str(g, "tokenizer.ggml.pre", "gpt-2"); /* our pre-split is GPT-2's, by llama.cpp's name */
    expect_u32(g, "tokenizer.ggml.bos_token_id", s->n_vocab - 2);
    expect_u32(g, "tokenizer.ggml.eos_token_id", s->n_vocab - 1);
    expect_bool(g, "tokenizer.ggml.add_bos_token", true);
}

/* ---- tensors ---- */

static int n_checked;

static void expect_tensor(const fg_gguf_t *g, const char *name, uint32_t type, uint32_t n_dims, int64_t ne0,
                          int64_t ne1, int64_t ne2)
{
    n_checked++;
    const fg_gguf_tensor *t = fg_gguf_find_tensor(g, name);
    CHECK_MSG(t != NULL, "missing tensor %s", name);
    if (!t)
        return;
    CHECK_MSG(t->type == type, "%s: type %u, want %u", name, t->type, type);
    CHECK_MSG(t->n_dims == n_dims, "%s: %u dims, want %u", name, t->n_dims, n_dims);
    CHECK_MSG(t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2,
              "%s: {%lld, %lld, %lld}, want {%lld, %lld, %lld}", name, (long long)t->ne[0], (long long)t->ne[1],
              (long long)t->ne[2], (long long)ne0, (long long)ne1, (long long)ne2);
}

static void check_tensors(const fg_gguf_t *g, const fg_modelgen_spec *s)
{
    const uint32_t W = s->weight_type, F32 = FG_GGML_F32;
    const int64_t d = s->n_embd, V = s->n_vocab, H = s->n_head, qk = s->nope_dim + s->rope_dim;
    const int64_t E = s->n_expert, f = s->n_ff_exp, fs = (int64_t)s->n_ff_exp * s->n_expert_shared;
    char n[96];
    n_checked = 0;
    expect_tensor(g, "token_embd.weight", W, 2, d, V, 1);
    expect_tensor(g, "output_norm.weight", F32, 1, d, 1, 1);
    if (s->tied_embeddings)
        CHECK_MSG(fg_gguf_find_tensor(g, "output.weight") == NULL, "tied model has output.weight");
    else
        expect_tensor(g, "output.weight", W, 2, d, V, 1);
#define T(suffix, ...) (snprintf(n, sizeof n, "blk.%u." suffix, il), expect_tensor(g, n, __VA_ARGS__))
    for (uint32_t il = 0; il < s->n_layer + s->n_nextn; il++) {
        T("attn_norm.weight", F32, 1, d, 1, 1);
        if (s->q_lora_rank) {
            T("attn_q_a.weight", W, 2, d, s->q_lora_rank, 1);
            T("attn_q_a_norm.weight", F32, 1, s->q_lora_rank, 1, 1);
            T("attn_q_b.weight", W, 2, s->q_lora_rank, H * qk, 1);
            snprintf(n, sizeof n, "blk.%u.attn_q.weight", il);
            CHECK_MSG(fg_gguf_find_tensor(g, n) == NULL, "q-LoRA model has %s", n);
        } else {
            T("attn_q.weight", W, 2, d, H * qk, 1);
            snprintf(n, sizeof n, "blk.%u.attn_q_a.weight", il);
            CHECK_MSG(fg_gguf_find_tensor(g, n) == NULL, "lite model has %s", n);
        }
        T("attn_kv_a_mqa.weight", W, 2, d, s->kv_lora_rank + s->rope_dim, 1);
        T("attn_kv_a_norm.weight", F32, 1, s->kv_lora_rank, 1, 1);
        T("attn_k_b.weight", W, 3, s->nope_dim, s->kv_lora_rank, H);
        T("attn_v_b.weight", W, 3, s->kv_lora_rank, s->v_dim, H);
        T("attn_output.weight", W, 2, H * s->v_dim, d, 1);
        T("ffn_norm.weight", F32, 1, d, 1, 1);
        if (il < s->n_layer_dense_lead) {
            T("ffn_gate.weight", W, 2, d, s->n_ff, 1);
            T("ffn_up.weight", W, 2, d, s->n_ff, 1);
            T("ffn_down.weight", W, 2, s->n_ff, d, 1);
        } else {
            T("ffn_gate_inp.weight", F32, 2, d, E, 1);
            if (s->gating == FG_MODELGEN_GATING_SIGMOID) {
                T("exp_probs_b.bias", F32, 1, E, 1, 1);
            } else {
                snprintf(n, sizeof n, "blk.%u.exp_probs_b.bias", il);
                CHECK_MSG(fg_gguf_find_tensor(g, n) == NULL, "softmax model has %s", n);
            }
            T("ffn_gate_exps.weight", W, 3, d, f, E);
            T("ffn_up_exps.weight", W, 3, d, f, E);
            T("ffn_down_exps.weight", W, 3, f, d, E);
            T("ffn_gate_shexp.weight", W, 2, d, fs, 1);
            T("ffn_up_shexp.weight", W, 2, d, fs, 1);
            T("ffn_down_shexp.weight", W, 2, fs, d, 1);
        }
        if (il >= s->n_layer) { /* the MTP block, as llama.cpp's deepseek2 loader names it */
            T("nextn.eh_proj.weight", W, 2, 2 * d, d, 1);
            T("nextn.enorm.weight", F32, 1, d, 1, 1);
            T("nextn.hnorm.weight", F32, 1, d, 1, 1);
            T("nextn.shared_head_norm.weight", F32, 1, d, 1, 1);
        }
    }
#undef T
    CHECK_MSG(fg_gguf_tensor_count(g) == (uint64_t)n_checked, "%llu tensors, expected %d",
              (unsigned long long)fg_gguf_tensor_count(g), n_checked);
}

/* ---- vocabulary ---- */

static const char BOS[] = "<\xEF\xBD\x9C" "begin\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>";
static const char EOS[] = "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>";

static int64_t find_token(const fg_gguf_t *g, uint64_t n, const char *s, size_t len)
{
    for (uint64_t i = 0; i < n; i++) {
        fg_gguf_str t;
        if (fg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &t) == FG_OK && t.len == len &&
            memcmp(t.ptr, s, len) == 0)
            return (int64_t)i;
    }
    return -1;
}

static void check_vocab(const fg_gguf_t *g, const fg_modelgen_spec *s)
{
    fg_gguf_vtype et;
    uint64_t n_tok = 0, n_merge = 0, n_type = 0;
    CHECK(fg_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok) == FG_OK && et == FG_GGUF_STRING);
    CHECK(fg_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merge) == FG_OK && et == FG_GGUF_STRING);
    CHECK(fg_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n_type) == FG_OK && et == FG_GGUF_INT32);
    CHECK_MSG(n_tok == s->n_vocab, "%llu tokens, want %u", (unsigned long long)n_tok, s->n_vocab);
    CHECK_MSG(n_tok == 256 + n_merge + 2, "%llu tokens != 256 + %llu merges + 2", (unsigned long long)n_tok,
              (unsigned long long)n_merge);
    CHECK(n_type == n_tok);
    if (n_tok != s->n_vocab || n_type != n_tok)
        return;

    for (uint32_t b = 0; b < 256; b++) {
        char u[4];
        int len = fg_byte_to_utf8((uint8_t)b, u);
        fg_gguf_str t;
        CHECK(fg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", b, &t) == FG_OK);
        CHECK_MSG(t.len == (uint64_t)len && memcmp(t.ptr, u, (size_t)len) == 0, "token %u is not byte %u", b, b);
    }
    for (uint64_t i = 0; i < n_tok; i++) {
        int64_t ty = 0;
        CHECK(fg_gguf_get_arr_i64(g, "tokenizer.ggml.token_type", i, &ty) == FG_OK);
        CHECK_MSG(ty == (i + 2 >= n_tok ? 3 : 1), "token %llu has type %lld", (unsigned long long)i, (long long)ty);
    }
    fg_gguf_str t;
    CHECK(fg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", n_tok - 2, &t) == FG_OK && t.len == strlen(BOS) &&
          memcmp(t.ptr, BOS, t.len) == 0);
    CHECK(fg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", n_tok - 1, &t) == FG_OK && t.len == strlen(EOS) &&
          memcmp(t.ptr, EOS, t.len) == 0);

    /* merge i is "A B": A and B are tokens, and A+B is token 256 + i */
    int bad = 0;
    for (uint64_t i = 0; i < n_merge && bad < 5; i++) {
        fg_gguf_str m;
        CHECK(fg_gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &m) == FG_OK);
        const char *sp = memchr(m.ptr, ' ', m.len);
        if (!sp || sp == m.ptr || memchr(sp + 1, ' ', m.len - (size_t)(sp + 1 - m.ptr))) {
            CHECK_MSG(0, "merge %llu is not 'A B'", (unsigned long long)i);
            bad++;
            continue;
        }
        size_t la = (size_t)(sp - m.ptr), lb = m.len - la - 1;
        int64_t ia = find_token(g, n_tok, m.ptr, la), ib = find_token(g, n_tok, sp + 1, lb);
        char joined[256];
        CHECK(la + lb < sizeof joined);
        memcpy(joined, m.ptr, la);
        memcpy(joined + la, sp + 1, lb);
        int64_t ij = find_token(g, n_tok, joined, la + lb);
        if (ia < 0 || ib < 0 || ij != (int64_t)(256 + i) || ia >= ij || ib >= ij) {
            CHECK_MSG(0, "merge %llu '%.*s': left %lld right %lld result %lld", (unsigned long long)i, (int)m.len,
                      m.ptr, (long long)ia, (long long)ib, (long long)ij);
            bad++;
        }
    }
    /* token texts are unique */
    for (uint64_t i = 256; i < n_tok && bad < 5; i++) {
        CHECK(fg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &t) == FG_OK);
        if (find_token(g, n_tok, t.ptr, t.len) != (int64_t)i) {
            CHECK_MSG(0, "token %llu is a duplicate", (unsigned long long)i);
            bad++;
        }
    }
}

/* ---- the engine accepts the file ---- */

static void check_engine_loads(const fg_gguf_t *g, const fg_modelgen_spec *s)
{
    fg_diag d = {{0}};
    fg_model *m = NULL;
    fg_err e = fg_model_load(g, &m, &d);
    CHECK_MSG(e == FG_OK, "fg_model_load: %s", d.msg);
    if (m) {
        CHECK(m->hp.n_vocab == (int)s->n_vocab);
        CHECK(m->hp.q_lora == (int)s->q_lora_rank);
        CHECK(m->hp.n_layer == (int)s->n_layer && m->hp.n_nextn == (int)s->n_nextn);
        fg_model_free(m);
    }
    fg_tokenizer_t *tok = NULL;
    e = fg_tokenizer_create(g, &tok, &d);
    CHECK_MSG(e == FG_OK, "fg_tokenizer_create: %s", d.msg);
    if (tok) {
        const char text[] = "The agent opens a session and streams tokens from the GPU cache.";
        int32_t ids[256];
        size_t n = 0;
        CHECK(fg_tokenizer_encode(tok, text, sizeof text - 1, true, false, ids, 256, &n) == FG_OK);
        CHECK(n > 1 && ids[0] == (int32_t)s->n_vocab - 2);
        CHECK_MSG(n < (sizeof text - 1) / 2, "%zu tokens for %zu bytes: the merges do little", n, sizeof text - 1);
        char back[256];
        size_t nb = 0;
        CHECK(fg_tokenizer_decode(tok, ids, n, false, back, sizeof back, &nb) == FG_OK);
        CHECK(nb == sizeof text - 1 && memcmp(back, text, nb) == 0);
        fg_tokenizer_destroy(tok);
    }
}

static void check_variant(const char *label, const fg_modelgen_spec *s)
{
    char p[256];
    fg_test_path(p, sizeof p, "variant.gguf");
    if (!fg_test_write_spec(s, p))
        return;
    fg_gguf_t *g = NULL;
    fg_diag d = {{0}};
    fg_err e = fg_gguf_open_file(p, &g, &d);
    CHECK_MSG(e == FG_OK, "%s: open: %s", label, d.msg);
    if (e == FG_OK) {
        int before = fg_test_failures;
        check_keys(g, s);
        check_tensors(g, s);
        check_vocab(g, s);
        check_engine_loads(g, s);
        if (fg_test_failures != before)
            fprintf(stderr, "  (in variant %s)\n", label);
        fg_gguf_close(g);
    }
    unlink(p);
}

static void test_variants(void)
{
    fg_modelgen_spec s = fg_test_preset("tiny");
    check_variant("tiny", &s);

    s = fg_test_preset("tiny");
    s.q_lora_rank = 0;
    check_variant("tiny --no-q-lora", &s);

    s = fg_test_preset("tiny");
    s.tied_embeddings = true;
    check_variant("tiny --tied", &s);

    s = fg_test_preset("tiny");
    s.n_expert_groups = 4;
    s.n_expert_groups_used = 2;
    check_variant("tiny --groups 4:2", &s);

    s = fg_test_preset("tiny");
    s.gating = FG_MODELGEN_GATING_SOFTMAX;
    s.q_lora_rank = 0;
    s.tied_embeddings = true;
    s.weight_type = FG_GGML_Q8_0;
    check_variant("tiny softmax lite tied q8_0", &s);

    s = fg_test_preset("tiny");
    s.yarn_factor = 4.0f;
    s.yarn_orig_ctx = s.n_ctx;
    s.n_ctx *= 4;
    s.weight_type = FG_GGML_BF16;
    check_variant("tiny --yarn 4 bf16", &s);

    s = fg_test_preset("tiny");
    s.n_nextn = 1;
    s.weight_type = FG_GGML_Q8_0;
    check_variant("tiny --nextn 1 q8_0", &s);
}

/* ---- the same values behind every type ---- */

static void test_types_share_values(void)
{
    char pf[256], pq[256];
    fg_test_path(pf, sizeof pf, "vals_f32.gguf");
    fg_test_path(pq, sizeof pq, "vals_other.gguf");
    fg_modelgen_spec s = fg_test_preset("tiny");
    if (!fg_test_write_spec(&s, pf))
        return;
    fg_gguf_t *gf = NULL;
    CHECK(fg_gguf_open_file(pf, &gf, NULL) == FG_OK);
    if (!gf)
        return;

    /* value statistics of the F32 file */
    const fg_gguf_tensor *te = fg_gguf_find_tensor(gf, "token_embd.weight");
    const fg_gguf_tensor *tq = fg_gguf_find_tensor(gf, "blk.1.attn_q_a.weight");
    const fg_gguf_tensor *tn = fg_gguf_find_tensor(gf, "blk.0.attn_norm.weight");
    CHECK(te && tq && tn);
    if (te && tq && tn) {
        struct {
            const fg_gguf_tensor *t;
            double mean, sd;
        } want[] = {{te, 0.0, 1.0}, {tq, 0.0, 1.0 / sqrt((double)s.n_embd)}, {tn, 1.0, 0.1}};
        for (size_t k = 0; k < 3; k++) {
            const float *x = want[k].t->data;
            uint64_t n = want[k].t->nbytes / 4;
            double sum = 0, sq = 0;
            for (uint64_t i = 0; i < n; i++) {
                sum += x[i];
                sq += (double)x[i] * x[i];
            }
            double mean = sum / n, sd = sqrt(sq / n - mean * mean);
            CHECK_MSG(fabs(mean - want[k].mean) < 4 * want[k].sd / sqrt((double)n) + 1e-9, "%s: mean %g, want %g",
                      want[k].t->name, mean, want[k].mean);
            CHECK_MSG(fabs(sd / want[k].sd - 1.0) < 0.1, "%s: sd %g, want %g", want[k].t->name, sd, want[k].sd);
        }
    }

    const uint32_t types[] = {FG_GGML_F16, FG_GGML_BF16, FG_GGML_Q8_0};
    for (size_t k = 0; k < 3; k++) {
        s.weight_type = types[k];
        if (!fg_test_write_spec(&s, pq))
            break;
        fg_gguf_t *gq = NULL;
        CHECK(fg_gguf_open_file(pq, &gq, NULL) == FG_OK);
        if (!gq)
            break;
        int bad = 0;
        for (uint64_t i = 0; i < fg_gguf_tensor_count(gf) && bad < 3; i++) {
            const fg_gguf_tensor *a = fg_gguf_tensor_at(gf, i);
            const fg_gguf_tensor *b = fg_gguf_find_tensor(gq, a->name);
            CHECK_MSG(b != NULL, "%s missing in type %u", a->name, types[k]);
            if (!b)
                continue;
            const float *x = a->data;
            const uint64_t n = a->nbytes / 4;
            if (b->type == FG_GGML_F32) {
                CHECK_MSG(b->nbytes == a->nbytes && memcmp(a->data, b->data, a->nbytes) == 0,
                          "%s: F32 data differs between types", a->name);
            } else if (b->type == FG_GGML_F16 || b->type == FG_GGML_BF16) {
                const uint16_t *h = b->data;
                for (uint64_t j = 0; j < n; j++) {
                    uint16_t want = b->type == FG_GGML_F16 ? fg_f32_to_f16(x[j]) : fg_f32_to_bf16(x[j]);
                    if (h[j] != want) {
                        CHECK_MSG(0, "%s[%llu]: 0x%04x, want 0x%04x", a->name, (unsigned long long)j, h[j], want);
                        bad++;
                        break;
                    }
                }
            } else {
                CHECK(b->type == FG_GGML_Q8_0 && b->nbytes == n / 32 * 34);
                const fg_block_q8_0 *q = b->data;
                for (uint64_t blk = 0; blk < n / 32; blk++) {
                    float amax = 0;
                    for (int j = 0; j < 32; j++)
                        amax = fmaxf(amax, fabsf(x[blk * 32 + j]));
                    float dq = fg_f16_to_f32(q[blk].d);
                    int ok = fabsf(dq - amax / 127) <= amax / 127 * 1e-3f;
                    for (int j = 0; j < 32 && ok; j++)
                        ok = fabsf(dq * q[blk].qs[j] - x[blk * 32 + j]) <= dq * 0.5f + amax * 1e-3f;
                    if (!ok) {
                        CHECK_MSG(0, "%s block %llu does not quantize the F32 values", a->name,
                                  (unsigned long long)blk);
                        bad++;
                        break;
                    }
                }
            }
        }
        fg_gguf_close(gq);
    }
    fg_gguf_close(gf);
    unlink(pf);
    unlink(pq);
}

/* ---- counts, presets, validation ---- */

static void test_counts_and_presets(void)
{
    fg_modelgen_spec s;
    CHECK(fg_modelgen_preset("flash-mini", &s) == FG_OK);
    CHECK(fg_modelgen_validate(&s, NULL) == FG_OK);
    CHECK(s.weight_type == FG_GGML_Q8_0 && s.n_expert_groups == 8 && s.n_expert_groups_used == 4);
    uint64_t total = 0, active = 0;
    fg_modelgen_param_counts(&s, &total, &active);
    CHECK_MSG(total >= 350000000ull && total <= 410000000ull, "flash-mini total %llu", (unsigned long long)total);
    CHECK_MSG(active >= 50000000ull && active <= 70000000ull, "flash-mini active %llu", (unsigned long long)active);

    /* the closed form for flash-mini's expert stacks: 7 MoE layers x 3 x E x d x f */
    uint64_t experts = 7ull * 3 * 64 * 1024 * 256;
    CHECK(total - active == experts / 64 * (64 - 6));

    s = fg_test_preset("tiny");
    fg_modelgen_param_counts(&s, &total, &active);
    CHECK_MSG(total >= 1000000ull && total <= 3000000ull, "tiny total %llu", (unsigned long long)total);
    CHECK(active < total);

    CHECK(fg_modelgen_preset("huge", &s) == FG_ERR_INVALID_ARG);
    CHECK(fg_modelgen_preset(NULL, &s) == FG_ERR_INVALID_ARG);

    fg_diag d = {{0}};
    s = fg_test_preset("tiny");
    s.rope_dim = 15;
    CHECK(fg_modelgen_validate(&s, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "rope_dim"));
    s = fg_test_preset("tiny");
    s.n_expert_groups = 3; /* does not divide 16 */
    s.n_expert_groups_used = 1;
    CHECK(fg_modelgen_validate(&s, &d) == FG_ERR_INVALID_ARG);
    s = fg_test_preset("tiny");
    s.n_expert_groups = 8;
    s.n_expert_groups_used = 1; /* top-4 from one group of 2 */
    CHECK(fg_modelgen_validate(&s, &d) == FG_ERR_INVALID_ARG);
    s = fg_test_preset("tiny");
    s.weight_type = 2; /* Q4_0 */
    CHECK(fg_modelgen_validate(&s, &d) == FG_ERR_INVALID_ARG);
    s = fg_test_preset("tiny");
    s.n_layer_dense_lead = 5;
    CHECK(fg_modelgen_validate(&s, &d) == FG_ERR_INVALID_ARG);
    s = fg_test_preset("tiny");
    s.n_vocab = 257;
    CHECK(fg_modelgen_validate(&s, &d) == FG_ERR_INVALID_ARG);
    s = fg_test_preset("tiny");
    s.n_nextn = 2; /* one MTP block at most */
    CHECK(fg_modelgen_validate(&s, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "n_nextn"));
    CHECK(fg_modelgen_preset("v4-tiny", &s) == FG_OK);
    s.n_nextn = 1; /* deepseek4's is v4.n_nextn */
    CHECK(fg_modelgen_validate(&s, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "n_nextn"));
    /* the MTP block adds one MoE layer and its nextn tensors, the trunk's counts unchanged */
    s = fg_test_preset("tiny");
    uint64_t t0, a0, t1, a1;
    fg_modelgen_param_counts(&s, &t0, &a0);
    s.n_nextn = 1;
    fg_modelgen_param_counts(&s, &t1, &a1);
    const uint64_t dd = s.n_embd;
    CHECK(t1 - t0 > 2 * dd * dd + 3 * dd && a1 - a0 > 2 * dd * dd + 3 * dd && t1 - t0 > a1 - a0);
    s = fg_test_preset("tiny");
    s.yarn_factor = 4.0f; /* without the original context */
    CHECK(fg_modelgen_validate(&s, &d) == FG_ERR_INVALID_ARG);

    /* a bad spec writes nothing */
    char p[256];
    fg_test_path(p, sizeof p, "bad.gguf");
    CHECK(fg_modelgen_write(&s, p, &d) == FG_ERR_INVALID_ARG);
    CHECK(access(p, F_OK) != 0);
}

/* ---- the BPE trainer on its own ---- */

static void test_bpe(void)
{
    fg_bpe_vocab v;
    fg_diag d = {{0}};
    /* "ab" is the most frequent pair, then "abab" via (ab, ab) */
    const char text[] = "abab abab abab cd";
    CHECK(fg_bpe_train(text, sizeof text - 1, 2, &v, &d) == FG_OK);
    CHECK(v.n_tokens == 258 && v.n_merges == 2);
    if (v.n_merges == 2) {
        CHECK(v.merge[0][0] == 'a' && v.merge[0][1] == 'b' && strcmp(v.text[256], "ab") == 0);
        CHECK(v.merge[1][0] == 256 && v.merge[1][1] == 256 && strcmp(v.text[257], "abab") == 0);
    }
    fg_bpe_vocab_free(&v);
    CHECK(v.text == NULL && v.n_tokens == 0);

    /* ties go to the smallest (left, right) */
    const char tie[] = "xy yx";
    CHECK(fg_bpe_train(tie, sizeof tie - 1, 1, &v, &d) == FG_OK);
    /* pieces: "xy", " yx": pairs (x,y), (' ',y), (y,x) once each; (' ', y) is smallest */
    CHECK(v.n_merges == 1 && v.merge[0][0] == ' ' && v.merge[0][1] == 'y');
    fg_bpe_vocab_free(&v);

    /* a text that runs out of pairs */
    CHECK(fg_bpe_train("ab", 2, 5, &v, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "1 of 5"));
    CHECK(v.text == NULL);

    /* the built-in text reaches flash-mini's 766 merges with unique texts */
    size_t len = 0;
    const char *corpus = fg_bpe_builtin_corpus(&len);
    CHECK(len >= 3000 && len <= 8000);
    CHECK(fg_bpe_train(corpus, len, 1024 - 258, &v, &d) == FG_OK);
    CHECK(v.n_tokens == 1024 - 2);
    for (uint32_t i = 0; i < v.n_merges; i++) {
        CHECK(v.merge[i][0] < 256 + i && v.merge[i][1] < 256 + i);
        CHECK(strchr(v.text[256 + i], ' ') == NULL);
    }
    fg_bpe_vocab_free(&v);
}

/* ---- chat markers ---- */

/* --chat-markers: DeepSeek-V3's markers are single control tokens after BOS
 * and EOS, within n_vocab; template-written markers encode to them, and they
 * decode to nothing unless rendered. */
static void test_chat_markers(void)
{
    fg_modelgen_spec s = fg_test_preset("tiny");
    s.chat_markers = true;
    char p[256];
    fg_test_path(p, sizeof p, "chat.gguf");
    if (!fg_test_write_spec(&s, p))
        return;
    fg_gguf_t *g = NULL;
    fg_diag d = {{0}};
    fg_tokenizer_t *tok = NULL;
    CHECK(fg_gguf_open_file(p, &g, &d) == FG_OK);
    if (g && fg_tokenizer_create(g, &tok, &d) == FG_OK) {
        static const char *const marks[] = {
            "<\xEF\xBD\x9CUser\xEF\xBD\x9C>", "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>",
            "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>",
            "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>",
            "<\xEF\xBD\x9Ctool\xE2\x96\x81sep\xEF\xBD\x9C>",
            "<\xEF\xBD\x9Ctool\xE2\x96\x81output\xE2\x96\x81" "begin\xEF\xBD\x9C>",
        };
        for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
            const int32_t id = fg_tokenizer_special_id(tok, marks[i], strlen(marks[i]));
            CHECK_MSG(id >= (int32_t)s.n_vocab - 11 && id < (int32_t)s.n_vocab, "marker %zu: id %d", i, (int)id);
            int32_t ids[8];
            size_t n = 0;
            CHECK(fg_tokenizer_encode(tok, marks[i], strlen(marks[i]), false, true, ids, 8, &n) == FG_OK);
            CHECK_MSG(n == 1 && ids[0] == id, "marker %zu encodes to %zu ids", i, n);
            char out[64];
            size_t nb = 99;
            CHECK(fg_tokenizer_decode(tok, &id, 1, false, out, sizeof out, &nb) == FG_OK && nb == 0);
            CHECK(fg_tokenizer_decode(tok, &id, 1, true, out, sizeof out, &nb) == FG_OK && nb == strlen(marks[i]));
        }
        /* BOS and EOS keep their place before the markers */
        const char bos[] = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
        CHECK(fg_tokenizer_special_id(tok, bos, sizeof bos - 1) == (int32_t)s.n_vocab - 13);
        fg_tokenizer_destroy(tok);
    }
    if (g)
        fg_gguf_close(g);
    unlink(p);
    s.n_vocab = 258 + 10; /* no room for the eleven markers */
    CHECK(fg_modelgen_write(&s, p, &d) == FG_ERR_INVALID_ARG);
    s = fg_test_preset("tiny");
    s.chat_markers = s.v4_chat_markers = true; /* one family's markers or the other's */
    CHECK(fg_modelgen_write(&s, p, &d) == FG_ERR_INVALID_ARG);
    unlink(p);
}

int main(void)
{
    if (!fg_test_dir_make("fg_modelgen"))
        return 1;
    test_bpe();
    test_counts_and_presets();
    test_determinism();
    test_variants();
    test_types_share_values();
    test_chat_markers();
    rmdir(fg_test_dir);
    return TEST_DONE("test_modelgen");
}
