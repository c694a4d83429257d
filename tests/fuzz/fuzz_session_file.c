/* fuzz_session_file.c: libFuzzer target for the session file reader.
 *
 * Parses the input as a session file of two small fixed geometries: one of
 * token rows (deepseek2's, format version 2) and one with per-sequence state
 * (deepseek4's kind, format version 3: pages as stored and the state). When
 * it parses, every token, the meta blob and every KV row, page and state
 * byte the view hands out are read (they must lie inside the input) and
 * copied into pages, as a restore does. A failed parse must say why in the
 * diag. When bit 0 of header byte 72 (reserved, unchecked) is set, the
 * trailing checksum is recomputed first, so mutations reach the checks
 * behind it. The seed corpus is tests/fuzz/corpus/fuzz_session_file/ (files
 * written by the writer, session acme/s1: small, twopages, twopages_fixsum in
 * version 2; v3_small, v3_twopages, v3_twopages_fixsum, v3_page, a page
 * file without state, and v3_page_snap (and _fixsum), the page at 64 with
 * the snapshot of its unit's end (first token 64, state of 128 tokens), in
 * version 3).
 * A parsed file is also checked against the owner acme/s1 (the seeds' names),
 * as a page file (page_file.h) under the key its meta names at the position
 * it names (and at another), and the input's first bytes as a page file name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/hash64.h"
#include "engine/kv/page_file.h"
#include "engine/kv/session_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

/* The version 3 geometry: any sizes that fit together (the reader knows no architecture's layout). */
static fg_kv_geometry geo_state(void)
{
    fg_kv_geometry g = {.format = FG_KV_F16, .n_layer = 3, .kv_lora = 16, .n_rope = 8};
    g.latent_bytes = g.row_bytes = 32;
    g.page_bytes = 200;
    g.bytes_per_token = (g.page_bytes + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    g.seq_bytes = 24;
    g.share_tokens = 128;
    return g;
}

static void parse_as(const uint8_t *buf, size_t size, const fg_kv_geometry *g, const char *arch)
{
    fg_sfile_expect ex = {.model_identity = "0123456789abcdef", .arch = arch, .geo = *g, .max_tokens = 256,
                          .n_vocab = 300};
    fg_sfile_view v;
    fg_diag d = {{0}};
    fg_err e = fg_sfile_parse(buf, size, &ex, &v, &d);
    if (e != FG_OK) {
        if (!d.msg[0])
            abort();
        return;
    }
    if (v.n_tokens < 0 || v.n_tokens > ex.max_tokens || v.meta_len > FG_SFILE_META_MAX)
        abort();
    if ((v.version == FG_SFILE_VERSION_PAGES) != (g->seq_bytes != 0) || (v.state && v.state_len != g->seq_bytes))
        abort(); /* a file is read only into the layout it describes */
    /* The names it gives itself are NUL-terminated and non-empty; a mismatch says why. */
    if (!v.tenant[0] || !v.name[0] || strlen(v.tenant) > FG_SFILE_OWNER_BYTES || strlen(v.name) > FG_SFILE_OWNER_BYTES)
        abort();
    fg_diag od = {{0}};
    if (fg_sfile_check_owner(&v, "acme", "s1", &od) != FG_OK && !od.msg[0])
        abort();
    for (int i = 0; i < v.n_tokens; i++)
        sink += (uint64_t)fg_sfile_token(&v, i);
    for (uint32_t i = 0; i < v.meta_len; i++)
        sink += v.meta[i];
    if (v.meta_len >= 16) {
        uint64_t key, prev = 0;
        memcpy(&key, v.meta + 8, 8);
        for (int at = v.first_token; at <= v.first_token + FG_KV_PAGE_TOKENS; at += FG_KV_PAGE_TOKENS) {
            fg_diag pd = {{0}};
            fg_err pe = fg_pfile_check(&v, g, key, 0x1234, at, &prev, &pd);
            if (pe != FG_OK && !pd.msg[0])
                abort();
            if (pe == FG_OK && ((v.version == FG_SFILE_VERSION_PAGES && at != v.first_token) ||
                                (v.state && (at + FG_KV_PAGE_TOKENS) % fg_kv_share_tokens(g))))
                abort(); /* a page file is read only at its own position, a snapshot only at a unit's end */
            sink += prev;
        }
    }
    int n_pages = (v.n_tokens + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    uint8_t *pages[4] = {0};
    for (int p = 0; p < n_pages; p++)
        pages[p] = malloc(g->page_bytes);
    fg_kv_seq q = {.pages = pages, .n_pages = n_pages, .n_tokens = v.n_tokens, .max_tokens = 256};
    if (v.version == FG_SFILE_VERSION_PAGES) {
        for (int p = 0; p < n_pages; p++)
            memcpy(pages[p], fg_sfile_page(&v, g, p), g->page_bytes);
        if (v.state) {
            uint8_t state[24];
            int32_t held;
            memcpy(state, v.state, sizeof state);
            memcpy(&held, state, 4);
            if (held != v.first_token + v.n_tokens)
                abort(); /* the state holds the tokens up to the file's last */
        }
    } else {
        fg_sfile_copy_rows(&v, g, &q, v.n_tokens);
    }
    for (int p = 0; p < n_pages; p++)
        free(pages[p]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_kv_geometry g = {.format = FG_KV_F16, .n_layer = 2, .kv_lora = 16, .n_rope = 8};
    g.latent_bytes = fg_kv_bytes(g.format, g.kv_lora);
    g.row_bytes = (g.latent_bytes + fg_kv_bytes(g.format, g.n_rope) + 3) & ~(size_t)3;
    g.bytes_per_token = g.row_bytes * (size_t)g.n_layer;
    g.page_bytes = g.bytes_per_token * FG_KV_PAGE_TOKENS;
    /* A private copy, so reads past the end are caught by the sanitizer. */
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    if (size >= FG_SFILE_HEADER_BYTES + 8 && (buf[72] & 1)) {
        uint64_t sum = fg_hash64(buf, size - 8, FG_SFILE_MAGIC_SEED);
        memcpy(buf + size - 8, &sum, 8); /* little-endian host, like the writer */
    }
    char name[24] = {0};
    uint64_t key = 0;
    memcpy(name, data, size < sizeof name - 1 ? size : sizeof name - 1);
    if (fg_pfile_parse_name(name, &key)) {
        char back[17];
        fg_pfile_name(key, back);
        if (memcmp(back, name, 16) != 0)
            abort(); /* a name that parses is the key's own name */
    }
    parse_as(buf, size, &g, NULL);
    const fg_kv_geometry gs = geo_state();
    parse_as(buf, size, &gs, "fuzzarch");
    free(buf);
    return 0;
}
