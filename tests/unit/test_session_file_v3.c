/* Session files of a cache with per-sequence state (format version 3,
 * session_file.h): pages and the state read back byte for byte, whether
 * written from page pointers or from a file's pages; truncated anywhere and a
 * bit flipped anywhere give their named errors (the version and layout
 * fields: _VERSION); an intact file of another model or architecture is
 * _MODEL, of another KV format, page size or file version _VERSION; a state
 * whose token count is not the file's is refused even with a valid checksum;
 * a page file (no state) reads as one, a session file does not; a page
 * file at 64 with its unit's snapshot (state of 128 tokens, first token 64)
 * reads as one at 64 only, and a wrong count, a truncated or flipped
 * snapshot, a first token off a page or past the context are refused. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/base/hash64.h"
#include "engine/kv/page_file.h"
#include "engine/kv/prefix_cache.h"
#include "engine/kv/session_file.h"
#include "tests/unit/fg_test.h"

#define N_TOK 150 /* two full pages and a partial one */

static fg_kv_geometry geo_state(fg_kv_format f, size_t page_bytes)
{
    fg_kv_geometry g = {.format = f, .n_layer = 5, .kv_lora = 64, .n_rope = 16};
    g.latent_bytes = g.row_bytes = 256;
    g.page_bytes = page_bytes;
    g.bytes_per_token = (page_bytes + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    g.seq_bytes = 1000;
    return g;
}

static fg_sfile_expect expect_of(const fg_kv_geometry *g, const char *id, const char *arch)
{
    return (fg_sfile_expect){.model_identity = id, .arch = arch, .geo = *g, .max_tokens = 1024, .n_vocab = 500};
}

static char dir[256];

static fg_err parse(const uint8_t *buf, size_t len, const fg_kv_geometry *g, const char *id, const char *arch)
{
    fg_sfile_expect ex = expect_of(g, id, arch);
    fg_sfile_view v;
    fg_diag d = {{0}};
    fg_err e = fg_sfile_parse(buf, len, &ex, &v, &d);
    if (e != FG_OK)
        CHECK_MSG(d.msg[0] != 0, "error %s without a message", fg_err_name(e));
    return e;
}

static uint8_t *read_back(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.fgs", dir, name);
    uint8_t *buf;
    fg_diag d = {{0}};
    CHECK(fg_sfile_read(path, 1 << 30, &buf, len, &d) == FG_OK);
    unlink(path);
    return buf;
}

static void fix_sum(uint8_t *buf, size_t len)
{
    uint64_t sum = fg_hash64(buf, len - 8, FG_SFILE_MAGIC_SEED);
    memcpy(buf + len - 8, &sum, 8);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/fg_sfile_v3_test.%d", (int)getpid());
    const char *id = "0123456789abcdef", *other = "fedcba9876543210";
    fg_kv_geometry g = geo_state(FG_KV_F32, 1100);
    uint8_t *pages[3], state[1000];
    for (int p = 0; p < 3; p++) {
        pages[p] = malloc(g.page_bytes);
        for (size_t i = 0; i < g.page_bytes; i++)
            pages[p][i] = (uint8_t)(i * 7 + (size_t)p * 13);
    }
    for (size_t i = 0; i < sizeof state; i++)
        state[i] = (uint8_t)(i * 11);
    const int32_t held = N_TOK;
    memcpy(state, &held, 4); /* a state begins with its token count */
    int32_t tokens[N_TOK + 1];
    for (int i = 0; i <= N_TOK; i++)
        tokens[i] = 1 + i;
    const char meta[] = "{\"x\":1}";
    fg_sfile_content c = {.model_identity = id, .arch = "deepseek4", .tenant = "acme", .geo = &g, .tokens = tokens,
                          .n_tokens = N_TOK, .n_pending = 1, .meta = meta, .meta_len = sizeof meta - 1,
                          .pages = pages, .state = state};
    fg_diag d = {{0}};
    CHECK_MSG(fg_sfile_write(dir, "s1", &c, &d) == FG_OK, "%s", d.msg);
    size_t len;
    uint8_t *buf = read_back("s1", &len);
    CHECK(len == fg_sfile_size(&g, N_TOK, 1, sizeof meta - 1));
    CHECK(len == FG_SFILE_HEADER_V3_BYTES + (N_TOK + 1) * 4 + sizeof meta - 1 + 3 * g.page_bytes + g.seq_bytes + 8);

    /* the round trip */
    fg_sfile_expect ex = expect_of(&g, id, "deepseek4");
    fg_sfile_view v;
    CHECK_MSG(fg_sfile_parse(buf, len, &ex, &v, &d) == FG_OK, "%s", d.msg);
    CHECK(v.version == FG_SFILE_VERSION_PAGES && v.n_tokens == N_TOK && v.n_pending == 1 && !v.rows);
    CHECK(v.state && v.state_len == g.seq_bytes && memcmp(v.state, state, sizeof state) == 0);
    for (int p = 0; p < 3; p++)
        CHECK(memcmp(fg_sfile_page(&v, &g, p), pages[p], g.page_bytes) == 0);
    CHECK(fg_sfile_token(&v, N_TOK) == N_TOK + 1 && strcmp(v.name, "s1") == 0);
    /* written again from the file's own pages and state (a session on disk whose meta changed): the same bytes */
    fg_sfile_content c2 = c;
    c2.pages = NULL;
    c2.rows = v.pages;
    c2.state = v.state;
    CHECK(fg_sfile_write(dir, "s1", &c2, &d) == FG_OK);
    size_t len2;
    uint8_t *buf2 = read_back("s1", &len2);
    CHECK(len2 == len && memcmp(buf2, buf, len) == 0);
    free(buf2);

    /* truncated anywhere */
    for (size_t n = 0; n < len; n += n < 300 ? 1 : 97)
        CHECK_MSG(parse(buf, n, &g, id, "deepseek4") == FG_ERR_SESSION_TRUNCATED, "truncated to %zu", n);
    CHECK(parse(buf, len - 1, &g, id, "deepseek4") == FG_ERR_SESSION_TRUNCATED);

    /* a bit flipped anywhere */
    for (size_t off = 0; off < len; off += off < 300 ? 1 : 37) {
        for (int bit = 0; bit < 8; bit += 3) {
            buf[off] ^= (uint8_t)(1u << bit);
            fg_err e = parse(buf, len, &g, id, "deepseek4");
            bool ok = e == FG_ERR_SESSION_CORRUPT;
            if (off >= 8 && off < 12) /* another version (2: read as rows, which do not add up) */
                ok |= e == FG_ERR_SESSION_VERSION;
            if (off >= 224 && off < 228) /* the layout kind */
                ok = e == FG_ERR_SESSION_VERSION;
            if ((off >= 44 && off < 72) || (off >= 228 && off < 236)) /* sizes: can also look short */
                ok |= e == FG_ERR_SESSION_TRUNCATED;
            CHECK_MSG(ok, "bit %d of byte %zu: %s", bit, off, fg_err_name(e));
            buf[off] ^= (uint8_t)(1u << bit);
        }
    }
    CHECK(parse(buf, len, &g, id, "deepseek4") == FG_OK);

    /* intact files of another model, architecture, format, page size, or for a cache of rows */
    CHECK(parse(buf, len, &g, other, "deepseek4") == FG_ERR_SESSION_MODEL);
    CHECK(parse(buf, len, &g, id, "deepseek5") == FG_ERR_SESSION_MODEL);
    fg_kv_geometry rows = g;
    rows.seq_bytes = 0;
    rows.bytes_per_token = rows.row_bytes * (size_t)rows.n_layer;
    CHECK(parse(buf, len, &rows, id, NULL) == FG_ERR_SESSION_MODEL); /* an engine without state names no architecture */
    fg_kv_geometry g16 = geo_state(FG_KV_F16, 1100);
    CHECK(parse(buf, len, &g16, id, "deepseek4") == FG_ERR_SESSION_VERSION);
    fg_kv_geometry gp = geo_state(FG_KV_F32, 1104);
    CHECK(parse(buf, len, &gp, id, "deepseek4") == FG_ERR_SESSION_VERSION);
    fg_kv_geometry gs = g;
    gs.seq_bytes = 1004;
    CHECK(parse(buf, len, &gs, id, "deepseek4") == FG_ERR_SESSION_VERSION);

    /* a state that holds another count of tokens, the checksum recomputed: corrupt */
    {
        uint8_t *st = buf + len - 8 - g.seq_bytes;
        int32_t wrong = N_TOK - 1;
        memcpy(st, &wrong, 4);
        fix_sum(buf, len);
        CHECK(parse(buf, len, &g, id, "deepseek4") == FG_ERR_SESSION_CORRUPT);
        memcpy(st, &held, 4);
        fix_sum(buf, len);
        CHECK(parse(buf, len, &g, id, "deepseek4") == FG_OK);
        /* an unknown layout kind and a malformed architecture name, intact otherwise */
        buf[224] ^= 1;
        fix_sum(buf, len);
        CHECK(parse(buf, len, &g, id, "deepseek4") == FG_ERR_SESSION_VERSION);
        buf[224] ^= 1;
        buf[240 + 12] = 'x'; /* after the name's NUL */
        fix_sum(buf, len);
        CHECK(parse(buf, len, &g, id, "deepseek4") == FG_ERR_SESSION_CORRUPT);
        buf[240 + 12] = 0;
        fix_sum(buf, len);
        CHECK(parse(buf, len, &g, id, "deepseek4") == FG_OK);
    }
    free(buf);

    /* a version 2 file (rows) read by an engine whose cache has state: a version error */
    {
        fg_sfile_content rc = {.model_identity = id, .tenant = "acme", .geo = &rows, .tokens = tokens,
                               .n_tokens = 3, .pages = pages};
        rows.page_bytes = rows.bytes_per_token * FG_KV_PAGE_TOKENS;
        uint8_t *big = malloc(rows.page_bytes);
        memset(big, 3, rows.page_bytes);
        uint8_t *one[1] = {big};
        rc.pages = one;
        CHECK(fg_sfile_write(dir, "r", &rc, &d) == FG_OK);
        uint8_t *rb = read_back("r", &len);
        CHECK(rb[8] == FG_SFILE_VERSION);
        CHECK(parse(rb, len, &g, id, "deepseek4") == FG_ERR_SESSION_VERSION);
        CHECK(parse(rb, len, &g, other, "deepseek4") == FG_ERR_SESSION_MODEL);
        free(rb);
        free(big);
    }

    /* a page file: one page, no state; a session file is not one */
    {
        uint8_t pm[FG_PFILE_META_BYTES];
        fg_pfile_meta(pm, 0x77, 0, 0x1234);
        fg_sfile_content pc = {.model_identity = id, .arch = "deepseek4", .tenant = "acme", .geo = &g,
                               .tokens = tokens, .n_tokens = FG_KV_PAGE_TOKENS, .meta = pm, .meta_len = sizeof pm,
                               .rows = pages[1]};
        CHECK(fg_sfile_write_as(dir, "p", ".fgs", &pc, &d) == FG_OK);
        uint8_t *pb = read_back("p", &len);
        CHECK(len == fg_pfile_size(&g, false));
        fg_sfile_view pv;
        CHECK(fg_sfile_parse(pb, len, &ex, &pv, &d) == FG_OK && !pv.state && pv.first_token == 0);
        CHECK(memcmp(fg_sfile_page(&pv, &g, 0), pages[1], g.page_bytes) == 0);
        uint64_t prev = 1;
        /* its key is not the chained hash of these tokens: refused as corrupt */
        CHECK(fg_pfile_check(&pv, &g, 0x77, 0x1234, 0, &prev, &d) == FG_ERR_SESSION_CORRUPT && strstr(d.msg, "key"));
        free(pb);
    }

    /* a page file of the second page of a unit with the snapshot of the unit's end (page_file.h) */
    {
        fg_kv_geometry gu = g;
        gu.share_tokens = 128;
        fg_sfile_expect exu = expect_of(&gu, id, "deepseek4");
        const uint64_t salt = 0x1234, prev = 0x55, key = fg_page_key(prev, salt, tokens);
        uint8_t pm[FG_PFILE_META_BYTES];
        fg_pfile_meta(pm, key, prev, salt);
        memcpy(state, &(int32_t){2 * FG_KV_PAGE_TOKENS}, 4);
        fg_sfile_content pc = {.model_identity = id, .arch = "deepseek4", .tenant = "acme", .geo = &gu,
                               .tokens = tokens, .n_tokens = FG_KV_PAGE_TOKENS, .meta = pm, .meta_len = sizeof pm,
                               .rows = pages[1], .state = state, .first_token = FG_KV_PAGE_TOKENS};
        CHECK(fg_sfile_write_as(dir, "p", ".fgs", &pc, &d) == FG_OK);
        uint8_t *pb = read_back("p", &len);
        CHECK(len == fg_pfile_size(&gu, true) && len == fg_pfile_size(&gu, false) + gu.seq_bytes);
        fg_sfile_view pv;
        CHECK_MSG(fg_sfile_parse(pb, len, &exu, &pv, &d) == FG_OK, "%s", d.msg);
        CHECK(pv.state && pv.first_token == FG_KV_PAGE_TOKENS && !memcmp(pv.state, state, gu.seq_bytes));
        CHECK(memcmp(fg_sfile_page(&pv, &gu, 0), pages[1], gu.page_bytes) == 0);
        uint64_t got = 0;
        CHECK_MSG(fg_pfile_check(&pv, &gu, key, salt, FG_KV_PAGE_TOKENS, &got, &d) == FG_OK && got == prev, "%s",
                  d.msg);
        /* read for a chain that has the page elsewhere: refused */
        CHECK(fg_pfile_check(&pv, &gu, key, salt, 3 * FG_KV_PAGE_TOKENS, &got, &d) == FG_ERR_SESSION_CORRUPT &&
              strstr(d.msg, "at 64"));
        /* the state's count is position + 64: another count, the checksum recomputed, is refused */
        uint8_t *st = pb + len - 8 - gu.seq_bytes;
        memcpy(st, &(int32_t){FG_KV_PAGE_TOKENS}, 4);
        fix_sum(pb, len);
        CHECK(fg_sfile_parse(pb, len, &exu, &pv, &d) == FG_ERR_SESSION_CORRUPT && strstr(d.msg, "state"));
        /* truncated inside the snapshot, or a bit flipped in it: refused */
        memcpy(st, &(int32_t){2 * FG_KV_PAGE_TOKENS}, 4);
        fix_sum(pb, len);
        CHECK(fg_sfile_parse(pb, len, &exu, &pv, &d) == FG_OK);
        CHECK(fg_sfile_parse(pb, len - 12, &exu, &pv, &d) == FG_ERR_SESSION_TRUNCATED);
        st[10] ^= 4;
        CHECK(fg_sfile_parse(pb, len, &exu, &pv, &d) == FG_ERR_SESSION_CORRUPT);
        st[10] ^= 4;
        /* a first token off a page boundary or past the context, the checksum recomputed */
        const uint32_t bad[2] = {FG_KV_PAGE_TOKENS + 1, 1024 - 63};
        for (int i = 0; i < 2; i++) {
            memcpy(pb + 236, &bad[i], 4);
            fix_sum(pb, len);
            CHECK(fg_sfile_parse(pb, len, &exu, &pv, &d) == FG_ERR_SESSION_CORRUPT && strstr(d.msg, "first token"));
        }
        free(pb);
        /* the same snapshot on the page at 0, which ends no unit: parses, but is no page file */
        memcpy(state, &(int32_t){FG_KV_PAGE_TOKENS}, 4);
        pc.first_token = 0;
        fg_pfile_meta(pm, fg_page_key(0, salt, tokens), 0, salt);
        CHECK(fg_sfile_write_as(dir, "p", ".fgs", &pc, &d) == FG_OK);
        pb = read_back("p", &len);
        CHECK(fg_sfile_parse(pb, len, &exu, &pv, &d) == FG_OK && pv.state);
        CHECK(fg_pfile_check(&pv, &gu, fg_page_key(0, salt, tokens), salt, 0, &got, &d) == FG_ERR_SESSION_CORRUPT &&
              strstr(d.msg, "ends no unit"));
        free(pb);
        memcpy(state, &held, 4);
    }
    /* a writer without the architecture's name: refused, nothing written */
    c.arch = NULL;
    CHECK(fg_sfile_write(dir, "s1", &c, &d) == FG_ERR_INVALID_ARG);
    c.arch = "an-architecture-name-too-long";
    CHECK(fg_sfile_write(dir, "s1", &c, &d) == FG_ERR_INVALID_ARG);
    for (int p = 0; p < 3; p++)
        free(pages[p]);
    rmdir(dir);
    return fg_test_failures ? 1 : 0;
}
