/* page_file.c: page files on top of the session file format (see page_file.h). */
#include "engine/kv/page_file.h"

#include <stdio.h>
#include <string.h>

#include "engine/kv/prefix_cache.h"

static const uint8_t PMAGIC[8] = {'F', 'G', 'P', 'A', 'G', 'E', 0, 0};

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

void fg_pfile_meta(uint8_t out[FG_PFILE_META_BYTES], uint64_t key, uint64_t prev, uint64_t tenant_salt)
{
    memcpy(out, PMAGIC, 8);
    put64(out + 8, key);
    put64(out + 16, prev);
    put64(out + 24, tenant_salt);
}

fg_err fg_pfile_check(const fg_sfile_view *v, const fg_kv_geometry *geo, uint64_t key, uint64_t tenant_salt, int at,
                      uint64_t *prev, fg_diag *diag)
{
    if (v->n_tokens != FG_KV_PAGE_TOKENS || v->n_pending != 0 || v->meta_len != FG_PFILE_META_BYTES ||
        memcmp(v->meta, PMAGIC, 8) != 0)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "not a page file (%d tokens, %u bytes of meta)", v->n_tokens,
                           v->meta_len);
    /* Version 2 names no position (and holds no state); version 3 must be where the chain has its page. */
    if (v->version == FG_SFILE_VERSION_PAGES && v->first_token != at)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "page file of the page at %d, wanted at %d", v->first_token,
                           at);
    if (v->state && (at + FG_KV_PAGE_TOKENS) % fg_kv_share_tokens(geo) != 0)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "a state snapshot on the page at %d, which ends no unit of %d",
                           at, fg_kv_share_tokens(geo));
    if (get64(v->meta + 24) != tenant_salt)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "page file of another tenant");
    uint64_t k = get64(v->meta + 8), p = get64(v->meta + 16);
    int32_t tokens[FG_KV_PAGE_TOKENS];
    for (int i = 0; i < FG_KV_PAGE_TOKENS; i++)
        tokens[i] = fg_sfile_token(v, i);
    if (k != key || fg_page_key(p, tenant_salt, tokens) != key)
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "page key %016llx does not match its name or tokens",
                           (unsigned long long)k);
    *prev = p;
    return FG_OK;
}

uint64_t fg_pfile_size(const fg_kv_geometry *geo, bool snapshot)
{
    return fg_sfile_size_with(geo, FG_KV_PAGE_TOKENS, 0, FG_PFILE_META_BYTES, snapshot ? geo->seq_bytes : 0);
}

void fg_pfile_name(uint64_t key, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)key); }

bool fg_pfile_parse_name(const char *file_name, uint64_t *key)
{
    if (strlen(file_name) != 16 + strlen(FG_PFILE_SUFFIX) || strcmp(file_name + 16, FG_PFILE_SUFFIX) != 0)
        return false;
    uint64_t k = 0;
    for (int i = 0; i < 16; i++) {
        char c = file_name[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        k = k << 4 | (uint64_t)d;
    }
    *key = k;
    return true;
}
