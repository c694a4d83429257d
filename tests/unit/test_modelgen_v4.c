/* test_modelgen_v4.c: the generator's deepseek4 files (v4-tiny, v4-mini).
 *
 * Writes v4-tiny variants into a temporary directory and reads them back with
 * the GGUF reader: byte-identical output for the same spec and seed (F32 and
 * the converter's mixed layout with MXFP4 experts), other bytes for another
 * seed; the same random values behind every type (F32 vs BF16, Q8_0 and the
 * MXFP4 bytes of kernels/cpu's quantizer); tid2eid rows of distinct expert
 * ids; the engine's tokenizer accepts the vocabulary; v4-mini's parameter
 * counts from the spec alone; and each named validation error. The key and
 * tensor table against llama.cpp's loader is tests/reference/test_v4_layout.py;
 * the numpy reference runs the file in tests/reference/test_v4_generated.py.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/modelgen.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/numeric.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_files.h"
#include "tests/unit/fg_test_modelgen.h"

/* v4-tiny in the types llama.cpp's converter writes (v4-mini's layout) */
static fg_modelgen_spec v4_tiny_converter(void)
{
    fg_modelgen_spec s = fg_test_preset("v4-tiny");
    s.weight_type = FG_GGML_Q8_0;
    s.v4.embd_type = FG_GGML_BF16;
    s.v4.expert_type = FG_GGML_MXFP4;
    return s;
}

static void test_determinism(void)
{
    char a[256], b[256];
    fg_test_path(a, sizeof a, "det_a.gguf");
    fg_test_path(b, sizeof b, "det_b.gguf");
    for (int k = 0; k < 2; k++) {
        fg_modelgen_spec s = k ? v4_tiny_converter() : fg_test_preset("v4-tiny");
        if (!fg_test_write_spec(&s, a) || !fg_test_write_spec(&s, b))
            return;
        CHECK_MSG(fg_test_compare_files(a, b) == 0, "layout %d: same seed, different bytes", k);
        s.seed = 43;
        if (!fg_test_write_spec(&s, b))
            return;
        CHECK_MSG(fg_test_compare_files(a, b) == 1, "layout %d: another seed, same bytes", k);
    }
    unlink(a);
    unlink(b);
}

/* Every float tensor of b holds a's F32 values in b's type, bit for bit as
 * the reference conversions and quantizers produce them. */
static void expect_same_values(const fg_gguf_t *ga, const fg_gguf_t *gb)
{
    CHECK(fg_gguf_tensor_count(ga) == fg_gguf_tensor_count(gb));
    for (uint64_t i = 0; i < fg_gguf_tensor_count(ga); i++) {
        const fg_gguf_tensor *a = fg_gguf_tensor_at(ga, i);
        const fg_gguf_tensor *b = fg_gguf_find_tensor(gb, a->name);
        CHECK_MSG(b != NULL, "%s missing", a->name);
        if (!b)
            continue;
        if (a->type == FG_GGML_I32 || b->type == FG_GGML_F32) {
            CHECK_MSG(a->type == b->type && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0,
                      "%s: data differs between layouts", a->name);
            continue;
        }
        const uint64_t n = a->nbytes / 4;
        uint64_t nb = 0;
        CHECK(fg_ggml_tensor_bytes(b->type, b->n_dims, b->ne, &nb, NULL) == FG_OK && nb == b->nbytes);
        void *want = malloc(nb ? nb : 1);
        if (!want)
            return;
        const float *x = a->data;
        if (b->type == FG_GGML_BF16 || b->type == FG_GGML_F16) {
            uint16_t *h = want;
            for (uint64_t j = 0; j < n; j++)
                h[j] = b->type == FG_GGML_BF16 ? fg_f32_to_bf16(x[j]) : fg_f32_to_f16(x[j]);
        } else if (b->type == FG_GGML_Q8_0) {
            fg_quantize_row_q8_0(x, want, (int64_t)n);
        } else if (b->type == FG_GGML_MXFP4) {
            CHECK(fg_quantize_row_mxfp4(x, want, (int64_t)n) == 0);
        } else {
            CHECK_MSG(0, "%s: unexpected type %u", b->name, b->type);
        }
        CHECK_MSG(memcmp(want, b->data, nb) == 0, "%s (%s): not the F32 values encoded", b->name,
                  fg_ggml_type_name(b->type));
        free(want);
    }
}

static void test_layouts_share_values(void)
{
    char pf[256], pc[256];
    fg_test_path(pf, sizeof pf, "vals_f32.gguf");
    fg_test_path(pc, sizeof pc, "vals_conv.gguf");
    /* expert stacks of 64 x 1024 x 8 values: the encoder's 65536-value chunks
     * (modelgen.c) cross rows and tensors are several chunks long */
    fg_modelgen_spec f = fg_test_preset("v4-tiny"), c = v4_tiny_converter();
    f.n_ff_exp = c.n_ff_exp = 1024;
    if (!fg_test_write_spec(&f, pf) || !fg_test_write_spec(&c, pc))
        return;
    fg_gguf_t *gf = NULL, *gc = NULL;
    CHECK(fg_gguf_open_file(pf, &gf, NULL) == FG_OK);
    CHECK(fg_gguf_open_file(pc, &gc, NULL) == FG_OK);
    if (gf && gc) {
        expect_same_values(gf, gc);
        /* the converter's types, where they belong */
        const struct {
            const char *name;
            uint32_t type;
        } want[] = {
            {"token_embd.weight", FG_GGML_BF16},         {"output.weight", FG_GGML_BF16},
            {"blk.0.ffn_gate_inp.weight", FG_GGML_BF16}, {"blk.1.indexer.proj.weight", FG_GGML_BF16},
            {"blk.1.attn_q_b.weight", FG_GGML_Q8_0},     {"blk.4.nextn.eh_proj.weight", FG_GGML_Q8_0},
            {"blk.1.ffn_down_exps.weight", FG_GGML_MXFP4}, {"blk.1.attn_compressor_kv.weight", FG_GGML_F32},
            {"blk.2.hc_ffn_fn.weight", FG_GGML_F32},     {"blk.0.attn_sinks.weight", FG_GGML_F32},
            {"blk.0.ffn_gate_tid2eid.weight", FG_GGML_I32},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const fg_gguf_tensor *t = fg_gguf_find_tensor(gc, want[i].name);
            CHECK_MSG(t && t->type == want[i].type, "%s: type %s, want %s", want[i].name,
                      t ? fg_ggml_type_name(t->type) : "(missing)", fg_ggml_type_name(want[i].type));
        }
    }
    fg_gguf_close(gf);
    fg_gguf_close(gc);
    unlink(pf);
    unlink(pc);
}

static void test_tid2eid_and_vocab(void)
{
    char p[256];
    fg_test_path(p, sizeof p, "ids.gguf");
    fg_modelgen_spec s = fg_test_preset("v4-tiny");
    if (!fg_test_write_spec(&s, p))
        return;
    fg_gguf_t *g = NULL;
    CHECK(fg_gguf_open_file(p, &g, NULL) == FG_OK);
    if (!g)
        return;
    const fg_gguf_tensor *t = fg_gguf_find_tensor(g, "blk.0.ffn_gate_tid2eid.weight");
    CHECK(t && t->type == FG_GGML_I32 && t->ne[0] == s.n_expert_used && t->ne[1] == s.n_vocab);
    CHECK(fg_gguf_find_tensor(g, "blk.0.exp_probs_b.bias") == NULL);
    CHECK(fg_gguf_find_tensor(g, "blk.1.ffn_gate_tid2eid.weight") == NULL);
    CHECK(fg_gguf_find_tensor(g, "blk.1.exp_probs_b.bias") != NULL);
    if (t && t->type == FG_GGML_I32) {
        const int32_t *ids = t->data;
        uint32_t hits[64] = {0}, bad = 0, same_as_prev = 0;
        for (int64_t v = 0; v < t->ne[1]; v++) {
            const int32_t *row = ids + v * t->ne[0];
            for (int64_t j = 0; j < t->ne[0]; j++) {
                bad += row[j] < 0 || row[j] >= (int32_t)s.n_expert;
                for (int64_t k = 0; k < j; k++)
                    bad += row[j] == row[k];
                if (row[j] >= 0 && row[j] < 64)
                    hits[row[j]]++;
            }
            same_as_prev += v > 0 && memcmp(row, row - t->ne[0], (size_t)t->ne[0] * 4) == 0;
        }
        CHECK_MSG(bad == 0, "%u ids out of range or repeated within a row", bad);
        /* a shuffle, not a constant: every expert is used, rows vary */
        for (uint32_t e = 0; e < s.n_expert; e++)
            CHECK_MSG(hits[e] > 0, "expert %u never listed", e);
        CHECK(same_as_prev < (uint32_t)t->ne[1] / 4);
    }
    fg_tokenizer_t *tok = NULL;
    fg_diag d = {{0}};
    CHECK_MSG(fg_tokenizer_create(g, &tok, &d) == FG_OK, "tokenizer: %s", d.msg);
    fg_tokenizer_destroy(tok);
    fg_gguf_close(g);

    /* no hash layers: exp_probs_b everywhere, hash_layer_count 0 */
    s.v4.n_hash_layer = 0;
    if (fg_test_write_spec(&s, p) && fg_gguf_open_file(p, &g, NULL) == FG_OK) {
        uint32_t n = 99;
        CHECK(fg_gguf_get_u32(g, "deepseek4.hash_layer_count", &n) == FG_OK && n == 0);
        for (uint32_t il = 0; il < s.n_layer + s.v4.n_nextn; il++) {
            char nm[64];
            snprintf(nm, sizeof nm, "blk.%u.ffn_gate_tid2eid.weight", il);
            CHECK(fg_gguf_find_tensor(g, nm) == NULL);
            snprintf(nm, sizeof nm, "blk.%u.exp_probs_b.bias", il);
            CHECK(fg_gguf_find_tensor(g, nm) != NULL);
        }
        fg_gguf_close(g);
    }
    unlink(p);
}

static void test_counts(void)
{
    fg_modelgen_spec s;
    CHECK(fg_modelgen_preset("v4-mini", &s) == FG_OK);
    CHECK(fg_modelgen_validate(&s, NULL) == FG_OK);
    CHECK(s.arch == FG_MODELGEN_DEEPSEEK4 && s.weight_type == FG_GGML_Q8_0 && s.v4.embd_type == FG_GGML_BF16 &&
          s.v4.expert_type == FG_GGML_MXFP4 && s.v4.window == 128 && s.v4.n_hash_layer == 3 && s.v4.n_nextn == 1);
    static const uint32_t flash_pattern[] = {0, 0, 4, 128, 4, 128, 4, 128, 4};
    CHECK(s.n_layer == 9 && memcmp(s.v4.ratios, flash_pattern, sizeof flash_pattern) == 0);
    uint64_t total = 0, active = 0;
    fg_modelgen_param_counts(&s, &total, &active);
    CHECK_MSG(total >= 380000000ull && total <= 450000000ull, "v4-mini total %llu", (unsigned long long)total);
    /* the routed stacks of 10 blocks (9 + MTP): 3 x E x F x X each; a token uses K of X */
    const uint64_t experts = 10ull * 3 * 1024 * 192 * 64;
    CHECK(total - active == experts / 64 * (64 - 6));

    s = fg_test_preset("v4-tiny");
    fg_modelgen_param_counts(&s, &total, &active);
    CHECK_MSG(total >= 300000ull && total <= 1000000ull, "v4-tiny total %llu", (unsigned long long)total);
}

/* One spec field changed from v4-tiny: validation refuses it, naming the field. */
static void expect_invalid(const fg_modelgen_spec *s, const char *field)
{
    fg_diag d = {{0}};
    fg_err e = fg_modelgen_validate(s, &d);
    CHECK_MSG(e == FG_ERR_INVALID_ARG && strstr(d.msg, field), "%s: err %d, '%s'", field, (int)e, d.msg);
}

static void test_validation(void)
{
    fg_modelgen_spec s = fg_test_preset("v4-tiny");
    CHECK(fg_modelgen_validate(&s, NULL) == FG_OK);
    s.v4.ratios[2] = 64;
    expect_invalid(&s, "v4.ratios[2]");
    s = fg_test_preset("v4-tiny");
    s.v4.ratios[s.n_layer] = 4; /* past the trunk: the MTP block's ratio is 0 */
    expect_invalid(&s, "v4.ratios[4]");
    s = fg_test_preset("v4-tiny");
    s.v4.n_out_group = 3;
    expect_invalid(&s, "n_out_group");
    s = fg_test_preset("v4-tiny");
    s.rope_dim = 48; /* > head_dim 32 */
    expect_invalid(&s, "rope_dim");
    s = fg_test_preset("v4-tiny");
    s.v4.n_hash_layer = 5;
    expect_invalid(&s, "n_hash_layer");
    s = fg_test_preset("v4-tiny");
    s.v4.n_nextn = 2;
    expect_invalid(&s, "n_nextn");
    s = fg_test_preset("v4-tiny");
    s.gating = FG_MODELGEN_GATING_SIGMOID;
    expect_invalid(&s, "sqrt-softplus");
    s = fg_test_preset("v4-tiny");
    s.v4.expert_type = 2; /* Q4_0 */
    expect_invalid(&s, "expert_type");
    s = fg_test_preset("v4-tiny");
    s.v4.embd_type = FG_GGML_MXFP4; /* MXFP4 is for the experts only */
    expect_invalid(&s, "embd_type");
    s = fg_test_preset("v4-tiny");
    s.kv_lora_rank = 64; /* a deepseek2 field */
    expect_invalid(&s, "kv_lora_rank");
    s = fg_test_preset("v4-tiny");
    s.n_expert_used = 9;
    expect_invalid(&s, "n_expert_used");
    s = fg_test_preset("v4-tiny");
    s.v4.head_dim = 0;
    expect_invalid(&s, "v4.head_dim");
    s = fg_test_preset("v4-tiny");
    s.arch = (fg_modelgen_arch)7;
    expect_invalid(&s, "arch");

    /* a bad spec writes nothing */
    char p[256];
    fg_test_path(p, sizeof p, "bad.gguf");
    s = fg_test_preset("v4-tiny");
    s.v4.ratios[1] = 5;
    CHECK(fg_modelgen_write(&s, p, NULL) == FG_ERR_INVALID_ARG);
    CHECK(access(p, F_OK) != 0);
}

int main(void)
{
    if (!fg_test_dir_make("fg_modelgen_v4"))
        return 1;
    test_counts();
    test_validation();
    test_determinism();
    test_layouts_share_values();
    test_tid2eid_and_vocab();
    rmdir(fg_test_dir);
    return TEST_DONE("test_modelgen_v4");
}
