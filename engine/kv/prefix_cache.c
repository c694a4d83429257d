/* prefix_cache.c: chained page keys and the page table (see prefix_cache.h).
 * Chained hashing into a power-of-two bucket array; entries come from a fixed
 * array with a free list, so nothing is allocated after create. */
#include "engine/kv/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

#include "config/base/hash64.h"

typedef struct entry {
    uint64_t key, prev;
    int tenant;              /* -1: free */
    int at;                  /* position of its first token */
    int32_t next;            /* bucket chain or free list; -1 ends */
    double last_used;
    uint8_t *page;
    uint8_t *snap;           /* the state at the page's end, or NULL (prefix_cache.h) */
    int32_t tokens[FG_KV_PAGE_TOKENS];
} entry;

struct fg_prefix_cache {
    entry *e;
    size_t cap, count, snaps;
    int32_t *bucket;         /* [mask + 1] */
    size_t mask;
    int32_t free_head;
};

uint64_t fg_page_key(uint64_t prev, uint64_t tenant_salt, const int32_t *tokens)
{
    fg_hash64_state h;
    fg_hash64_init(&h, tenant_salt);
    fg_hash64_update(&h, &prev, sizeof prev);
    fg_hash64_update(&h, tokens, FG_KV_PAGE_TOKENS * sizeof *tokens);
    return fg_hash64_final(&h);
}

uint64_t fg_tenant_salt(const char *tenant_name) { return fg_hash64(tenant_name, strlen(tenant_name), 0x74656e616e74ull); }

fg_err fg_prefix_cache_create(size_t max_pages, fg_prefix_cache_t **out)
{
    *out = NULL;
    fg_prefix_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return FG_ERR_NOMEM;
    c->cap = max_pages ? max_pages : 1;
    size_t nb = 1;
    while (nb < c->cap)
        nb *= 2;
    c->mask = nb - 1;
    c->e = malloc(c->cap * sizeof *c->e);
    c->bucket = malloc(nb * sizeof *c->bucket);
    if (!c->e || !c->bucket || c->cap > INT32_MAX) {
        free(c->e);
        free(c->bucket);
        free(c);
        return FG_ERR_NOMEM;
    }
    for (size_t i = 0; i < nb; i++)
        c->bucket[i] = -1;
    for (size_t i = 0; i < c->cap; i++) {
        c->e[i].tenant = -1;
        c->e[i].next = i + 1 < c->cap ? (int32_t)(i + 1) : -1;
    }
    c->free_head = 0;
    *out = c;
    return FG_OK;
}

void fg_prefix_cache_destroy(fg_prefix_cache_t *c, fg_kv_store_t *kv)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->cap; i++)
        if (c->e[i].tenant >= 0) {
            fg_kv_state_free(kv, c->e[i].snap, c->e[i].tenant);
            fg_kv_page_release(kv, c->e[i].page);
        }
    free(c->e);
    free(c->bucket);
    free(c);
}

static bool same(const entry *x, uint64_t key, uint64_t prev, int tenant, const int32_t *tokens)
{
    return x->key == key && x->prev == prev && x->tenant == tenant &&
           memcmp(x->tokens, tokens, sizeof x->tokens) == 0;
}

uint8_t *fg_prefix_cache_find(fg_prefix_cache_t *c, uint64_t key, uint64_t prev, int tenant, const int32_t *tokens,
                              double now)
{
    for (int32_t i = c->bucket[key & c->mask]; i >= 0; i = c->e[i].next)
        if (same(&c->e[i], key, prev, tenant, tokens)) {
            c->e[i].last_used = now;
            return c->e[i].page;
        }
    return NULL;
}

bool fg_prefix_cache_insert(fg_prefix_cache_t *c, fg_kv_store_t *kv, uint64_t key, uint64_t prev, int tenant,
                            const int32_t *tokens, int at, uint8_t *page, double now)
{
    for (int32_t i = c->bucket[key & c->mask]; i >= 0; i = c->e[i].next)
        if (c->e[i].key == key)
            return false; /* listed (or a 2^-64 collision: keep the first) */
    if (c->free_head < 0)
        return false;
    int32_t i = c->free_head;
    entry *x = &c->e[i];
    c->free_head = x->next;
    x->key = key;
    x->prev = prev;
    x->tenant = tenant;
    x->at = at;
    x->last_used = now;
    x->page = page;
    x->snap = NULL;
    memcpy(x->tokens, tokens, sizeof x->tokens);
    x->next = c->bucket[key & c->mask];
    c->bucket[key & c->mask] = i;
    fg_kv_page_retain(kv, page);
    c->count++;
    return true;
}

int fg_prefix_cache_cold(const fg_prefix_cache_t *c, const fg_kv_store_t *kv, fg_evict_candidate *out, int max,
                         double now)
{
    int n = 0;
    for (size_t i = 0; i < c->cap && n < max; i++)
        if (c->e[i].tenant >= 0 && fg_kv_page_refs(kv, c->e[i].page) == 1)
            out[n++] = (fg_evict_candidate){.kind = FG_EVICT_COLD_PAGE, .idle_seconds = now - c->e[i].last_used,
                                            .weight = 1,
                                            .pages = 1 + (c->e[i].snap ? fg_kv_store_state_pages(kv) : 0),
                                            .id = (uint32_t)i};
    return n;
}

bool fg_prefix_cache_entry(const fg_prefix_cache_t *c, uint32_t id, fg_prefix_entry *out)
{
    if (id >= c->cap || c->e[id].tenant < 0)
        return false;
    const entry *x = &c->e[id];
    *out = (fg_prefix_entry){.key = x->key, .prev = x->prev, .tenant = x->tenant, .at = x->at, .tokens = x->tokens,
                             .page = x->page, .snap = x->snap};
    return true;
}

void fg_prefix_cache_drop(fg_prefix_cache_t *c, fg_kv_store_t *kv, uint32_t id)
{
    if (id >= c->cap || c->e[id].tenant < 0)
        return;
    entry *x = &c->e[id];
    for (int32_t *p = &c->bucket[x->key & c->mask]; *p >= 0; p = &c->e[*p].next)
        if (*p == (int32_t)id) {
            *p = x->next;
            break;
        }
    fg_prefix_cache_drop_snapshot(c, kv, id);
    fg_kv_page_release(kv, x->page);
    x->tenant = -1;
    x->page = NULL;
    x->next = c->free_head;
    c->free_head = (int32_t)id;
    c->count--;
}

static entry *by_key(const fg_prefix_cache_t *c, uint64_t key)
{
    for (int32_t i = c->bucket[key & c->mask]; i >= 0; i = c->e[i].next)
        if (c->e[i].key == key)
            return &c->e[i];
    return NULL;
}

bool fg_prefix_cache_set_snapshot(fg_prefix_cache_t *c, fg_kv_store_t *kv, uint64_t key, const uint8_t *state)
{
    entry *x = by_key(c, key);
    if (!x || x->snap || !(x->snap = fg_kv_state_copy(kv, state, x->tenant)))
        return false;
    c->snaps++;
    return true;
}

const uint8_t *fg_prefix_cache_snapshot(const fg_prefix_cache_t *c, uint64_t key)
{
    const entry *x = by_key(c, key);
    return x ? x->snap : NULL;
}

int fg_prefix_cache_snapshots(const fg_prefix_cache_t *c, const fg_kv_store_t *kv, fg_evict_candidate *out, int max,
                              double now)
{
    int n = 0;
    for (size_t i = 0; i < c->cap && n < max && c->snaps; i++)
        if (c->e[i].tenant >= 0 && c->e[i].snap && fg_kv_page_refs(kv, c->e[i].page) > 1)
            out[n++] = (fg_evict_candidate){.kind = FG_EVICT_COLD_PAGE, .idle_seconds = now - c->e[i].last_used,
                                            .weight = 1, .pages = fg_kv_store_state_pages(kv), .id = (uint32_t)i};
    return n;
}

void fg_prefix_cache_drop_snapshot(fg_prefix_cache_t *c, fg_kv_store_t *kv, uint32_t id)
{
    if (id >= c->cap || c->e[id].tenant < 0 || !c->e[id].snap)
        return;
    fg_kv_state_free(kv, c->e[id].snap, c->e[id].tenant);
    c->e[id].snap = NULL;
    c->snaps--;
}

size_t fg_prefix_cache_snapshot_count(const fg_prefix_cache_t *c) { return c->snaps; }

size_t fg_prefix_cache_count(const fg_prefix_cache_t *c) { return c->count; }

size_t fg_prefix_cache_cold_count(const fg_prefix_cache_t *c, const fg_kv_store_t *kv)
{
    size_t n = 0;
    for (size_t i = 0; i < c->cap; i++)
        n += c->e[i].tenant >= 0 && fg_kv_page_refs(kv, c->e[i].page) == 1;
    return n;
}
