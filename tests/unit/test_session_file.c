/* Session files: a written file reads back byte for byte; every kind of damage
 * gets its named error (truncated anywhere, a bit flipped anywhere, another
 * model, another format version, another KV format, bad sizes, bad token
 * ids); a file names its tenant and session, and a file read as another's
 * (copied over it) is refused; the hash gives one value however its input is
 * split. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/base/hash64.h"
#include "engine/kv/session_file.h"
#include "tests/unit/fg_test.h"

#define N_TOK 150 /* two full pages and a partial one */

static fg_kv_geometry geo_of(fg_kv_format f)
{
    fg_kv_geometry g = {.format = f, .n_layer = 3, .kv_lora = 32, .n_rope = 16};
    g.latent_bytes = fg_kv_bytes(f, g.kv_lora);
    g.row_bytes = (g.latent_bytes + fg_kv_bytes(f, g.n_rope) + 3) & ~(size_t)3;
    g.bytes_per_token = g.row_bytes * (size_t)g.n_layer;
    g.page_bytes = g.bytes_per_token * FG_KV_PAGE_TOKENS;
    return g;
}

static fg_sfile_expect expect_of(const fg_kv_geometry *g, const char *id)
{
    return (fg_sfile_expect){.model_identity = id, .geo = *g, .max_tokens = 1024, .n_vocab = 500};
}

static char dir[256];

/* Writes a session file with N_TOK tokens (ids from tok0) and returns its bytes. */
static uint8_t *make_file(const fg_kv_geometry *g, const char *id, int32_t tok0, size_t *len)
{
    uint8_t *pages[3];
    for (int p = 0; p < 3; p++) {
        pages[p] = malloc(g->page_bytes);
        for (size_t i = 0; i < g->page_bytes; i++)
            pages[p][i] = (uint8_t)(i * 7 + (size_t)p * 13);
    }
    int32_t tokens[N_TOK + 2];
    for (int i = 0; i < N_TOK + 2; i++)
        tokens[i] = tok0 + i;
    const char meta[] = "{\"instructions\":\"be brief\"}";
    fg_sfile_content c = {.model_identity = id, .tenant = "acme", .geo = g, .tokens = tokens, .n_tokens = N_TOK, .n_pending = 2, .meta = meta,
                          .meta_len = sizeof meta - 1, .pages = pages};
    fg_diag d = {{0}};
    CHECK_MSG(fg_sfile_write(dir, "s1", &c, &d) == FG_OK, "%s", d.msg);
    char path[512];
    snprintf(path, sizeof path, "%s/s1.fgs", dir);
    uint8_t *buf;
    CHECK(fg_sfile_read(path, 1 << 30, &buf, len, &d) == FG_OK);
    CHECK(*len == fg_sfile_size(g, N_TOK, 2, sizeof meta - 1));
    /* The round trip: tokens, meta and every row come back. */
    fg_sfile_expect ex = expect_of(g, id);
    fg_sfile_view v;
    if (tok0 + N_TOK + 2 <= 500) {
        CHECK_MSG(fg_sfile_parse(buf, *len, &ex, &v, &d) == FG_OK, "%s", d.msg);
        CHECK(v.n_tokens == N_TOK && v.n_pending == 2 && v.meta_len == sizeof meta - 1 && memcmp(v.meta, meta, v.meta_len) == 0);
        CHECK(fg_sfile_token(&v, 0) == tok0 && fg_sfile_token(&v, N_TOK + 1) == tok0 + N_TOK + 1);
        CHECK(strcmp(v.tenant, "acme") == 0 && strcmp(v.name, "s1") == 0);
        CHECK_MSG(fg_sfile_check_owner(&v, "acme", "s1", &d) == FG_OK, "%s", d.msg);
        uint8_t *back[3];
        for (int p = 0; p < 3; p++)
            back[p] = calloc(1, g->page_bytes);
        fg_kv_seq q = {.pages = back, .n_pages = 3, .n_tokens = N_TOK, .max_tokens = 192};
        fg_sfile_copy_rows(&v, g, &q, N_TOK);
        fg_kv_seq orig = {.pages = pages, .n_pages = 3, .n_tokens = N_TOK, .max_tokens = 192};
        int same = 1;
        for (int t = 0; t < N_TOK; t++)
            for (int il = 0; il < g->n_layer; il++)
                same &= memcmp(fg_kv_row(g, &q, il, t), fg_kv_row(g, &orig, il, t), g->row_bytes) == 0;
        CHECK(same);
        for (int p = 0; p < 3; p++)
            free(back[p]);
    }
    for (int p = 0; p < 3; p++)
        free(pages[p]);
    return buf;
}

static fg_err parse(const uint8_t *buf, size_t len, const fg_kv_geometry *g, const char *id)
{
    fg_sfile_expect ex = expect_of(g, id);
    fg_sfile_view v;
    fg_diag d = {{0}};
    fg_err e = fg_sfile_parse(buf, len, &ex, &v, &d);
    if (e != FG_OK)
        CHECK_MSG(d.msg[0] != 0, "error %s without a message", fg_err_name(e));
    return e;
}

static void test_hash(void)
{
    uint8_t data[300];
    for (int i = 0; i < 300; i++)
        data[i] = (uint8_t)(i * 31 + 7);
    uint64_t whole = fg_hash64(data, sizeof data, 42);
    for (size_t split = 0; split <= sizeof data; split += 13) {
        fg_hash64_state h;
        fg_hash64_init(&h, 42);
        fg_hash64_update(&h, data, split);
        fg_hash64_update(&h, data + split, sizeof data - split);
        CHECK(fg_hash64_final(&h) == whole);
    }
    CHECK(fg_hash64(data, sizeof data, 43) != whole); /* the seed matters */
    data[150] ^= 1;
    CHECK(fg_hash64(data, sizeof data, 42) != whole); /* one bit matters */
    CHECK(fg_hash64(data, 0, 0) != fg_hash64(data, 1, 0));
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/fg_sfile_test.%d", (int)getpid());
    test_hash();
    const char *id = "0123456789abcdef", *other = "fedcba9876543210";
    fg_kv_geometry g = geo_of(FG_KV_F16);
    size_t len;
    uint8_t *buf = make_file(&g, id, 1, &len);
    CHECK(parse(buf, len, &g, id) == FG_OK);

    /* Truncated at every length up to the header, then at sampled lengths. */
    for (size_t n = 0; n < len; n += n < 200 ? 1 : 97) {
        fg_err e = parse(buf, n, &g, id);
        CHECK_MSG(e == FG_ERR_SESSION_TRUNCATED, "truncated to %zu: %s", n, fg_err_name(e));
    }
    CHECK(parse(buf, len - 1, &g, id) == FG_ERR_SESSION_TRUNCATED);

    /* One bit flipped anywhere: corrupt (version field: a version error). */
    for (size_t off = 0; off < len; off += off < 100 ? 1 : 61) {
        for (int bit = 0; bit < 8; bit += 3) {
            buf[off] ^= (uint8_t)(1u << bit);
            fg_err e = parse(buf, len, &g, id);
            fg_err want = off >= 8 && off < 12 ? FG_ERR_SESSION_VERSION : FG_ERR_SESSION_CORRUPT;
            /* A flip in the size fields can also make the file look short. */
            bool ok = e == want || (off >= 44 && off < 72 && e == FG_ERR_SESSION_TRUNCATED);
            /* The pending count: a flip can also push it past the context. */
            CHECK_MSG(ok, "bit %d of byte %zu: %s", bit, off, fg_err_name(e));
            buf[off] ^= (uint8_t)(1u << bit);
        }
    }
    buf[len - 1] ^= 0x80;
    CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_CORRUPT); /* the checksum itself */
    buf[len - 1] ^= 0x80;

    /* Too long: trailing bytes. */
    uint8_t *longer = malloc(len + 5);
    memcpy(longer, buf, len);
    memset(longer + len, 0, 5);
    CHECK(parse(longer, len + 5, &g, id) == FG_ERR_SESSION_CORRUPT);
    free(longer);

    /* An intact file from another model, and the same model read with another KV format. */
    CHECK(parse(buf, len, &g, other) == FG_ERR_SESSION_MODEL);
    fg_kv_geometry g8 = geo_of(FG_KV_INT8);
    CHECK(parse(buf, len, &g8, id) == FG_ERR_SESSION_VERSION);
    fg_kv_geometry g_layers = g;
    g_layers.n_layer = 4;
    g_layers.bytes_per_token = g_layers.row_bytes * 4;
    CHECK(parse(buf, len, &g_layers, id) == FG_ERR_SESSION_MODEL);

    /* A file claiming another format version: a newer one, and version 1 (without the names). */
    buf[8] = FG_SFILE_VERSION + 1;
    CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_VERSION);
    buf[8] = 1;
    CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_VERSION);
    buf[8] = FG_SFILE_VERSION;
    CHECK(parse(buf, len, &g, id) == FG_OK);

    /* The file names its owner: read as another session's or tenant's (a copy over
     * it), it is refused with a message naming both; an intact file whose name
     * field is malformed (checksum recomputed) is corrupt. */
    {
        fg_sfile_expect ex = expect_of(&g, id);
        fg_sfile_view v;
        fg_diag d = {{0}};
        CHECK(fg_sfile_parse(buf, len, &ex, &v, &d) == FG_OK);
        CHECK(fg_sfile_check_owner(&v, "acme", "s2", &d) == FG_ERR_SESSION_CORRUPT);
        CHECK_MSG(strstr(d.msg, "acme/s1") && strstr(d.msg, "acme/s2"), "%s", d.msg);
        CHECK(fg_sfile_check_owner(&v, "beta", "s1", &d) == FG_ERR_SESSION_CORRUPT);
        CHECK(fg_sfile_check_owner(&v, "acme", "s", &d) == FG_ERR_SESSION_CORRUPT);
        uint8_t keep = buf[160 + 3];
        buf[160 + 3] = 'x'; /* "s1\0x": bytes after the name's end */
        uint64_t sum = fg_hash64(buf, len - 8, FG_SFILE_MAGIC_SEED);
        uint64_t old_sum;
        memcpy(&old_sum, buf + len - 8, 8);
        memcpy(buf + len - 8, &sum, 8);
        CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_CORRUPT);
        buf[160 + 3] = keep;
        memset(buf + 96, 0, FG_SFILE_OWNER_BYTES); /* no tenant */
        sum = fg_hash64(buf, len - 8, FG_SFILE_MAGIC_SEED);
        memcpy(buf + len - 8, &sum, 8);
        CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_CORRUPT);
        memcpy(buf + 96, "acme", 4);
        memcpy(buf + len - 8, &old_sum, 8);
        CHECK(parse(buf, len, &g, id) == FG_OK);
    }
    /* Absurd sizes are refused before any arithmetic with them. */
    uint8_t save[4];
    memcpy(save, buf + 52, 4);
    memset(buf + 52, 0xff, 4);
    CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_CORRUPT);
    memcpy(buf + 52, save, 4);
    memcpy(save, buf + 56, 4);
    memset(buf + 56, 0xff, 4);
    CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_CORRUPT);
    memcpy(buf + 56, save, 4);
    memcpy(save, buf + 60, 4);
    memset(buf + 60, 0xff, 4);
    CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_CORRUPT); /* pending tokens past the context */
    memcpy(buf + 60, save, 4);
    memcpy(buf, "GGUF", 4);
    CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_CORRUPT);
    free(buf);

    /* Token ids past the vocabulary, with a valid checksum. */
    buf = make_file(&g, id, 450, &len);
    CHECK(parse(buf, len, &g, id) == FG_ERR_SESSION_CORRUPT);
    free(buf);

    /* Reading: a missing file, and one larger than the bound. */
    fg_diag d;
    size_t n;
    char path[512];
    snprintf(path, sizeof path, "%s/none.fgs", dir);
    CHECK(fg_sfile_read(path, 1 << 20, &buf, &n, &d) == FG_ERR_NOT_FOUND && buf == NULL);
    snprintf(path, sizeof path, "%s/s1.fgs", dir);
    CHECK(fg_sfile_read(path, 10, &buf, &n, &d) == FG_ERR_SESSION_CORRUPT && buf == NULL);
    /* No temp file is left behind by a successful write. */
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s/s1.fgs.tmp", dir);
    CHECK(access(tmp, F_OK) != 0);
    /* A directory that cannot be created: an I/O error, no crash. */
    uint8_t *pg = calloc(1, g.page_bytes);
    int32_t t1 = 1;
    fg_sfile_content c = {.model_identity = id, .tenant = "acme", .geo = &g, .tokens = &t1, .n_tokens = 1, .pages = &pg};
    CHECK(fg_sfile_write("/proc/nonexistent/x", "s", &c, &d) == FG_ERR_IO);
    /* A writer without a tenant or with a name too long for the header: refused, nothing written. */
    c.tenant = NULL;
    CHECK(fg_sfile_write(dir, "s", &c, &d) == FG_ERR_INVALID_ARG);
    c.tenant = "acme";
    char long_name[80];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    CHECK(fg_sfile_write(dir, long_name, &c, &d) == FG_ERR_INVALID_ARG);
    free(pg);
    unlink(path);
    rmdir(dir);
    return fg_test_failures ? 1 : 0;
}
