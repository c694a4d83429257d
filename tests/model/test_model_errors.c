/* Bad models and bad requests give a clear error, never a crash.
 *
 * Each case copies tiny.gguf with one edit (through the GGUF reader and
 * writer), opens it as an engine and checks the error code and that the message
 * names the culprit. Then requests: a prompt past the context, token ids
 * outside the vocabulary, a full KV pool. */
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "tests/model/model_test.h"

typedef struct edit {
    const char *drop_key;       /* key left out */
    const char *set_str_key;    /* string key replaced ... */
    const char *set_str_val;    /* ... by this */
    const char *set_u32_key;    /* integer key replaced ... */
    uint32_t set_u32_val;       /* ... by this */
    const char *drop_tensor;    /* tensor left out */
    const char *drop_prefix;    /* every tensor whose name starts so left out */
    const char *swap_tensor;    /* tensor declared with ne[0] and ne[1] swapped (same bytes) */
    const char *retype_tensor;  /* tensor (F32 in tiny.gguf) re-declared with ... */
    uint32_t retype;            /* ... this ggml type (same shape), its data ... */
    int fill;                   /* ... every byte this value (-1: the F32 data's first bytes) */
} edit;

static bool same(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

static bool dropped(const fg_gguf_tensor *t, const edit *ed)
{
    return same(t->name, ed->drop_tensor) ||
           (ed->drop_prefix && strncmp(t->name, ed->drop_prefix, strlen(ed->drop_prefix)) == 0);
}

/* Writes src with the edit applied to path. Returns false if src has a key type this copier does not handle. */
static bool copy_with_edit(const fg_gguf_t *g, const edit *ed, const char *path)
{
    fg_gguf_writer_t *w;
    fg_diag d;
    if (fg_gguf_writer_create(path, 0, &w, &d) != FG_OK)
        return false;
    bool ok = true;
    for (uint64_t i = 0; i < fg_gguf_key_count(g) && ok; i++) {
        const char *k = fg_gguf_key_name(g, i);
        if (same(k, ed->drop_key))
            continue;
        fg_gguf_str str;
        uint32_t u32;
        int64_t i64;
        float f;
        bool b;
        fg_gguf_vtype et;
        uint64_t n;
        switch (fg_gguf_key_type(g, i)) {
        case FG_GGUF_STRING:
            fg_gguf_get_str(g, k, &str);
            if (same(k, ed->set_str_key)) {
                fg_gguf_writer_add_str(w, k, ed->set_str_val);
            } else {
                char *tmp = strndup(str.ptr, str.len);
                fg_gguf_writer_add_str(w, k, tmp);
                free(tmp);
            }
            break;
        case FG_GGUF_UINT32:
            fg_gguf_get_u32(g, k, &u32);
            fg_gguf_writer_add_u32(w, k, same(k, ed->set_u32_key) ? ed->set_u32_val : u32);
            break;
        case FG_GGUF_INT32:
            fg_gguf_get_i64(g, k, &i64);
            fg_gguf_writer_add_i32(w, k, (int32_t)i64);
            break;
        case FG_GGUF_UINT64:
            fg_gguf_get_i64(g, k, &i64);
            fg_gguf_writer_add_u64(w, k, (uint64_t)i64);
            break;
        case FG_GGUF_FLOAT32:
            fg_gguf_get_f32(g, k, &f);
            fg_gguf_writer_add_f32(w, k, f);
            break;
        case FG_GGUF_BOOL:
            fg_gguf_get_bool(g, k, &b);
            fg_gguf_writer_add_bool(w, k, b);
            break;
        case FG_GGUF_ARRAY:
            fg_gguf_get_arr(g, k, &et, &n);
            if (et == FG_GGUF_STRING) {
                const char **v = malloc(n * sizeof *v);
                uint64_t *lens = malloc(n * sizeof *lens);
                for (uint64_t j = 0; j < n; j++) {
                    fg_gguf_get_arr_str(g, k, j, &str);
                    v[j] = str.ptr;
                    lens[j] = str.len;
                }
                fg_gguf_writer_add_arr_str(w, k, v, lens, n);
                free(v);
                free(lens);
            } else if (et == FG_GGUF_INT32) {
                int32_t *v = malloc(n * sizeof *v + 1);
                for (uint64_t j = 0; j < n; j++) {
                    fg_gguf_get_arr_i64(g, k, j, &i64);
                    v[j] = (int32_t)i64;
                }
                fg_gguf_writer_add_arr_i32(w, k, v, n);
                free(v);
            } else {
                ok = false;
            }
            break;
        default:
            ok = false;
        }
    }
    for (uint64_t i = 0; i < fg_gguf_tensor_count(g) && ok; i++) {
        const fg_gguf_tensor *t = fg_gguf_tensor_at(g, i);
        if (dropped(t, ed))
            continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (same(t->name, ed->swap_tensor)) {
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
        }
        fg_gguf_writer_add_tensor(w, t->name, same(t->name, ed->retype_tensor) ? ed->retype : t->type, t->n_dims,
                                  ne);
    }
    ok = ok && fg_gguf_writer_begin_data(w, &d) == FG_OK;
    for (uint64_t i = 0; i < fg_gguf_tensor_count(g) && ok; i++) {
        const fg_gguf_tensor *t = fg_gguf_tensor_at(g, i);
        if (dropped(t, ed))
            continue;
        if (!same(t->name, ed->retype_tensor)) {
            ok = fg_gguf_writer_write_tensor(w, t->data, t->nbytes, &d) == FG_OK;
            continue;
        }
        uint64_t nb = 0; /* a shape the type cannot hold is declared with no data (the writer's rule) */
        if (fg_ggml_tensor_bytes(ed->retype, t->n_dims, t->ne, &nb, &d) != FG_OK)
            nb = 0;
        uint8_t *buf = malloc(nb ? nb : 1);
        ok = buf != NULL;
        if (ok) {
            if (ed->fill >= 0)
                memset(buf, ed->fill, nb);
            else
                memcpy(buf, t->data, nb);
            ok = fg_gguf_writer_write_tensor(w, buf, nb, &d) == FG_OK;
        }
        free(buf);
    }
    ok = ok && fg_gguf_writer_finish(w, &d) == FG_OK;
    fg_gguf_writer_destroy(w);
    return ok;
}

static void expect_open_error(const fg_gguf_t *g, const char *dir, const edit *ed, fg_err want, const char *needle)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/edited.gguf", dir);
    CHECK(copy_with_edit(g, ed, path));
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = path;
    o.kv_budget_bytes = 16 << 20;
    fg_engine_t *e = NULL;
    fg_diag d = {{0}};
    fg_err err = fg_engine_open(&o, &e, &d);
    CHECK_MSG(err == want, "want %s, got %s (%s)", fg_err_name(want), fg_err_name(err), d.msg);
    CHECK_MSG(strstr(d.msg, needle) != NULL, "message '%s' does not name '%s'", d.msg, needle);
    fg_engine_close(e);
    unlink(path);
}

int main(void)
{
    char dir[] = "/tmp/fg_model_errors_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    fg_gguf_t *g;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path("tiny.gguf"), &g, &d) != FG_OK) {
        fprintf(stderr, "cannot read tiny.gguf: %s\n", d.msg);
        return 1;
    }
    const edit none = {0};
    expect_open_error(g, dir, &(edit){.set_str_key = "general.architecture", .set_str_val = "llama"},
                      FG_ERR_MODEL_ARCH, "llama");
    expect_open_error(g, dir, &(edit){.drop_key = "deepseek2.block_count"}, FG_ERR_MODEL_HPARAM, "block_count");
    expect_open_error(g, dir, &(edit){.drop_tensor = "blk.1.attn_k_b.weight"}, FG_ERR_MODEL_TENSOR,
                      "blk.1.attn_k_b.weight");
    expect_open_error(g, dir, &(edit){.set_u32_key = "deepseek2.attention.kv_lora_rank", .set_u32_val = 48},
                      FG_ERR_MODEL_SHAPE, "attn_kv_a_mqa");
    expect_open_error(g, dir, &(edit){.set_u32_key = "deepseek2.expert_used_count", .set_u32_val = 99},
                      FG_ERR_MODEL_HPARAM, "expert_used_count");
    /* q8_1 (ggml's activation type, 36-byte blocks) is no weight type the engine computes with */
    expect_open_error(g, dir, &(edit){.retype_tensor = "blk.2.ffn_down_exps.weight", .retype = 9,
                                      .fill = -1},
                      FG_ERR_MODEL_TYPE, "blk.2.ffn_down_exps.weight");
    /* MXFP4 blocks whose E8M0 scale byte is 0xFF (NaN): refused by name */
    expect_open_error(g, dir, &(edit){.retype_tensor = "blk.1.ffn_up_exps.weight", .retype = 39,
                                      .fill = 0xff},
                      FG_ERR_MODEL_TYPE, "blk.1.ffn_up_exps.weight (mxfp4): block 0 of row 0 of matrix 0");
    /* Q4_0 blocks whose F16 scale is 0xFFFF (NaN): refused by name */
    expect_open_error(g, dir, &(edit){.retype_tensor = "blk.2.ffn_gate_exps.weight", .retype = 2,
                                      .fill = 0xff},
                      FG_ERR_MODEL_TYPE, "blk.2.ffn_gate_exps.weight (q4_0): block 0 of row 0 of matrix 0");
    /* rows of 128 are no whole number of Q4_K's 256-value blocks: refused by name when the file is read */
    expect_open_error(g, dir, &(edit){.retype_tensor = "blk.3.ffn_gate_exps.weight", .retype = 12,
                                      .fill = 0},
                      FG_ERR_GGUF_LIMIT, "blk.3.ffn_gate_exps.weight");
    /* nor of the lattice IQ types' (IQ2_XXS here) */
    expect_open_error(g, dir, &(edit){.retype_tensor = "blk.3.ffn_up_exps.weight", .retype = 16, .fill = 0},
                      FG_ERR_GGUF_LIMIT, "blk.3.ffn_up_exps.weight");
    expect_open_error(g, dir, &(edit){.set_str_key = "tokenizer.ggml.model", .set_str_val = "llama"},
                      FG_ERR_TOKENIZER, "");
    /* IQ1_M keeps its F16 scale in four nibbles of its scale words: all ones
     * is a NaN, refused by name (tiny-256.gguf: rows of 256, IQ1_M's block) */
    {
        fg_gguf_t *g256;
        CHECK(fg_gguf_open_file(model_path("tiny-256.gguf"), &g256, &d) == FG_OK);
        expect_open_error(g256, dir, &(edit){.retype_tensor = "blk.1.ffn_up_exps.weight", .retype = 29, .fill = 0xff},
                          FG_ERR_MODEL_TYPE, "blk.1.ffn_up_exps.weight (iq1_m): block 0 of row 0 of matrix 0");
        fg_gguf_close(g256);
    }

    /* the MTP block (tiny-mtp.gguf: blk.4 after 4 trunk layers): every
     * tensor of a block the file has is required, its shapes checked, and
     * nextn_predict_layers within block_count; a file without any of the
     * block's tensors (llama.cpp's trunk-only export) loads without it */
    {
        fg_gguf_t *gm;
        CHECK(fg_gguf_open_file(model_path("tiny-mtp.gguf"), &gm, &d) == FG_OK);
        expect_open_error(gm, dir, &(edit){.drop_tensor = "blk.4.nextn.eh_proj.weight"}, FG_ERR_MODEL_TENSOR,
                          "blk.4.nextn.eh_proj.weight");
        expect_open_error(gm, dir, &(edit){.drop_tensor = "blk.4.nextn.hnorm.weight"}, FG_ERR_MODEL_TENSOR,
                          "blk.4.nextn.hnorm.weight");
        expect_open_error(gm, dir, &(edit){.drop_tensor = "blk.4.ffn_up_exps.weight"}, FG_ERR_MODEL_TENSOR,
                          "blk.4.ffn_up_exps.weight");
        expect_open_error(gm, dir, &(edit){.swap_tensor = "blk.4.nextn.eh_proj.weight"}, FG_ERR_MODEL_SHAPE,
                          "blk.4.nextn.eh_proj.weight");
        expect_open_error(gm, dir, &(edit){.set_u32_key = "deepseek2.nextn_predict_layers", .set_u32_val = 5},
                          FG_ERR_MODEL_HPARAM, "nextn_predict_layers 5 leaves no trunk of block_count 5");
        expect_open_error(gm, dir, &(edit){.set_u32_key = "deepseek2.nextn_predict_layers", .set_u32_val = 2},
                          FG_ERR_MODEL_HPARAM, "nextn_predict_layers 2");
        const struct {
            edit ed;
            int n_nextn;
        } loads[] = {{{.drop_prefix = "blk.4."}, 0}, {{.drop_tensor = "blk.4.nextn.shared_head_norm.weight"}, 1}};
        for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/mtp.gguf", dir);
            CHECK(copy_with_edit(gm, &loads[i].ed, path));
            fg_gguf_t *ge;
            fg_model *m = NULL;
            CHECK(fg_gguf_open_file(path, &ge, &d) == FG_OK);
            CHECK_MSG(fg_model_load(ge, &m, &d) == FG_OK, "%s", d.msg);
            CHECK(m && m->hp.n_nextn == loads[i].n_nextn && m->hp.n_layer == 4);
            CHECK(m && (!m->hp.n_nextn || m->mtp.head_norm == m->output_norm)); /* shared_head_norm absent */
            fg_model_free(m);
            fg_gguf_close(ge);
            unlink(path);
        }
        fg_gguf_close(gm);
    }

    /* the unedited copy loads and matches the original's logits */
    {
        char path[4200];
        snprintf(path, sizeof path, "%s/copy.gguf", dir);
        CHECK(copy_with_edit(g, &none, path));
        fg_engine_options o;
        fg_engine_options_default(&o);
        o.model_path = path;
        o.kv_budget_bytes = 16 << 20;
        fg_engine_t *e = NULL;
        CHECK(fg_engine_open(&o, &e, &d) == FG_OK);
        fg_engine_close(e);
        unlink(path);
    }
    fg_gguf_close(g);
    rmdir(dir);

    /* requests: context, token ids, a full page pool */
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path("tiny.gguf");
    o.max_context = 70;
    o.kv_budget_bytes = 1; /* below one page */
    fg_engine_t *e = NULL;
    CHECK(fg_engine_open(&o, &e, &d) == FG_ERR_INVALID_ARG);
    o.kv_budget_bytes = 16 << 20;
    CHECK(fg_engine_open(&o, &e, &d) == FG_OK);
    fg_engine_info info;
    fg_engine_get_info(e, &info);
    int32_t toks[80];
    test_tokens(toks, 80, info.n_vocab, 1);
    fg_session_t *s;
    CHECK(fg_session_create(e, NULL, &s) == FG_OK);
    CHECK(fg_session_eval(s, toks, 71, NULL, false, &d) == FG_ERR_CONTEXT_FULL);
    CHECK(strstr(d.msg, "context") != NULL);
    CHECK(fg_session_length(s) == 0);
    CHECK(fg_session_eval(s, toks, 70, NULL, false, &d) == FG_OK);
    CHECK(fg_session_eval(s, toks, 1, NULL, false, &d) == FG_ERR_CONTEXT_FULL);
    fg_session_free(s);
    CHECK(fg_session_create(e, NULL, &s) == FG_OK);
    int32_t bad[3] = {1, info.n_vocab, 2};
    CHECK(fg_session_eval(s, bad, 3, NULL, false, &d) == FG_ERR_TOKEN_ID);
    bad[1] = -1;
    CHECK(fg_session_eval(s, bad, 3, NULL, false, &d) == FG_ERR_TOKEN_ID);
    CHECK(fg_session_length(s) == 0);
    fg_session_free(s);

    /* pool exhaustion: sessions take pages until none is left; the failing
     * eval changes nothing and later succeeds once a session is freed. */
    fg_session_t *held[4096];
    int n_held = 0;
    fg_err err = FG_OK;
    while (n_held < 4096) {
        CHECK(fg_session_create(e, NULL, &held[n_held]) == FG_OK);
        err = fg_session_eval(held[n_held], toks, 65, NULL, false, &d); /* 2 pages each */
        if (err != FG_OK)
            break;
        n_held++;
    }
    CHECK(err == FG_ERR_KV_FULL);
    CHECK(fg_session_length(held[n_held]) == 0);
    fg_session_free(held[0]);
    CHECK(fg_session_eval(held[n_held], toks, 65, NULL, false, &d) == FG_OK);
    for (int i = 1; i <= n_held; i++)
        fg_session_free(held[i]);
    fg_engine_close(e);
    return TEST_DONE("test_model_errors");
}
