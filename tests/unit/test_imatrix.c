/* test_imatrix.c: engine/model/imatrix.h on legacy .dat buffers built here
 * from the format's definition: the weights are the sums divided by the call
 * count, entries are found by name, the trailer's chunk count and dataset are
 * read; the tensor match takes ne[0] weights per expert along ne[2], refuses
 * another size naming the tensor and lets token_embd go without; and every
 * truncation of a good file (but at the optional trailer) is refused with a
 * message. (The GGUF form and the
 * whole tool: bad_imatrix_cli, quantize_ggml, fuzz_imatrix.)
 */
#include <stdlib.h>
#include <string.h>

#include "engine/model/imatrix.h"
#include "fg_test.h"

static size_t put(uint8_t *b, size_t at, const void *p, size_t n)
{
    memcpy(b + at, p, n);
    return at + n;
}

static size_t put_i32(uint8_t *b, size_t at, int32_t v)
{
    return put(b, at, &v, 4);
}

/* name, ncall, n values v[i] = base + i */
static size_t put_entry(uint8_t *b, size_t at, const char *name, int32_t ncall, int32_t n, float base)
{
    at = put_i32(b, at, (int32_t)strlen(name));
    at = put(b, at, name, strlen(name));
    at = put_i32(b, at, ncall);
    at = put_i32(b, at, n);
    for (int32_t i = 0; i < n; i++) {
        float v = base + (float)i;
        at = put(b, at, &v, 4);
    }
    return at;
}

int main(void)
{
    static uint8_t b[4096];
    size_t n = put_i32(b, 0, 2);
    n = put_entry(b, n, "blk.1.ffn_up_exps.weight", 4, 8, 1.0f); /* 4 columns x 2 experts */
    n = put_entry(b, n, "blk.0.ffn_up.weight", 0, 4, 2.0f);
    const size_t entries_end = n; /* a file may end here: the trailer is optional */
    n = put_i32(b, n, 42);
    n = put_i32(b, n, 9);
    n = put(b, n, "wiki.test", 9);

    fg_diag d = {{0}};
    fg_imatrix_t *m = NULL;
    CHECK_MSG(fg_imatrix_parse(b, n, &m, &d) == FG_OK, "%s", d.msg);
    CHECK(m && fg_imatrix_count(m) == 2 && fg_imatrix_is_legacy(m));
    CHECK(fg_imatrix_chunks(m) == 42 && fg_imatrix_dataset(m) && strcmp(fg_imatrix_dataset(m), "wiki.test") == 0);
    int64_t k = 0;
    const float *w = fg_imatrix_find(m, "blk.1.ffn_up_exps.weight", &k);
    CHECK(w && k == 8 && w[0] == 0.25f && w[7] == 2.0f);
    w = fg_imatrix_find(m, "blk.0.ffn_up.weight", &k);
    CHECK(w && k == 4 && w[3] == 5.0f); /* ncall 0: the sums as they are */
    CHECK(!fg_imatrix_find(m, "blk.0.ffn_up", &k) && k == 0);

    const float *tw = NULL;
    fg_gguf_tensor t = {.name = "blk.1.ffn_up_exps.weight", .n_dims = 3, .ne = {4, 3, 2, 1}};
    CHECK(fg_imatrix_for_tensor(m, &t, &tw, &d) == FG_OK && tw == fg_imatrix_find(m, t.name, &k));
    t.ne[2] = 4;
    d.msg[0] = 0;
    CHECK(fg_imatrix_for_tensor(m, &t, &tw, &d) == FG_ERR_MODEL_SHAPE && !tw);
    CHECK_MSG(strstr(d.msg, "blk.1.ffn_up_exps.weight") && strstr(d.msg, "8 weights"), "%s", d.msg);
    fg_gguf_tensor none = {.name = "output.weight", .n_dims = 2, .ne = {4, 3, 1, 1}};
    CHECK(fg_imatrix_for_tensor(m, &none, &tw, &d) == FG_OK && !tw);
    fg_imatrix_destroy(m);

    /* token_embd with an entry of another size: quantized without, no error */
    static uint8_t b2[256];
    size_t n2 = put_entry(b2, put_i32(b2, 0, 1), "token_embd.weight", 1, 5, 1.0f);
    CHECK(fg_imatrix_parse(b2, n2, &m, &d) == FG_OK);
    fg_gguf_tensor emb = {.name = "token_embd.weight", .n_dims = 2, .ne = {4, 10, 1, 1}};
    CHECK(fg_imatrix_for_tensor(m, &emb, &tw, &d) == FG_OK && !tw);
    CHECK(fg_imatrix_chunks(m) == 0 && !fg_imatrix_dataset(m));
    fg_imatrix_destroy(m);

    /* every other truncation of the first file is refused with a message */
    int refused = 0;
    for (size_t cut = 0; cut < n; cut++) {
        d.msg[0] = 0;
        fg_imatrix_t *p = NULL;
        if (fg_imatrix_parse(b, cut, &p, &d) != FG_OK) {
            CHECK_MSG(d.msg[0] && !p, "a file cut to %zu bytes: refused without a message", cut);
            refused++;
        } else {
            CHECK_MSG(cut == entries_end, "a file cut to %zu bytes was accepted", cut);
            fg_imatrix_destroy(p);
        }
    }
    CHECK_MSG(refused == (int)n - 1, "%d of %zu truncations refused", refused, n - 1);
    return TEST_DONE("test_imatrix");
}
