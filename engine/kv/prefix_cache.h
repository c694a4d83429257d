/* prefix_cache.h: the engine's table of full KV pages by chained hash, so
 * sessions of one tenant that share a prefix share its pages.
 *
 * A page's key is the hash of (the previous page's key, the tenant's salt,
 * its 64 tokens); the first page of a sequence chains from 0. Equal keys mean
 * equal prefixes with probability 1 - 2^-64 per pair, and a hit is only
 * taken when the previous key, the tenant and the 64 tokens compare equal, so
 * a hash collision can never hand out wrong KV.
 *
 * The cache holds one reference to every page it lists, so a system prompt
 * outlives its sessions; a page held only by the cache is "cold" and is the
 * first thing dropped under memory pressure.
 *
 * A geometry with per-sequence state (deepseek4) also keeps snapshots: a
 * copy of a sequence's state taken when it stood at the end of a listed page
 * that ends a unit of sharing (kv_store.h, share_tokens), attached to that
 * page's entry. A hit there needs both the pages and the snapshot. A
 * snapshot's memory is the store's: it holds fg_kv_store_state_pages pages
 * off the pool under the entry's tenant (fg_kv_state_copy), so the KV budget
 * bounds pages and snapshots together. It goes with its entry when that is
 * dropped, and on its own (fg_prefix_cache_snapshots) under pressure while
 * sessions still hold its page.
 *
 * Thread safety: like the KV store, one thread (the step thread, under the
 * engine lock).
 */
#ifndef FG_PREFIX_CACHE_H
#define FG_PREFIX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/kv/kv_store.h"
#include "policies/kv_evict.h"

typedef struct fg_prefix_cache fg_prefix_cache_t;

/* Key of a page: prev is the previous page's key (0 for the first page),
 * tokens[FG_KV_PAGE_TOKENS] its tokens. */
uint64_t fg_page_key(uint64_t prev, uint64_t tenant_salt, const int32_t *tokens);
/* The salt of a tenant name. */
uint64_t fg_tenant_salt(const char *tenant_name);

/* A table for at most max_pages pages. Errors: FG_ERR_NOMEM. */
fg_err fg_prefix_cache_create(size_t max_pages, fg_prefix_cache_t **out);
/* Releases every listed page to kv and frees the table. */
void fg_prefix_cache_destroy(fg_prefix_cache_t *c, fg_kv_store_t *kv);

/* The page listed under key with exactly this prev, tenant and tokens, or
 * NULL. Not retained: the caller retains what it keeps. Marks it used at now
 * (seconds). */
uint8_t *fg_prefix_cache_find(fg_prefix_cache_t *c, uint64_t key, uint64_t prev, int tenant, const int32_t *tokens,
                              double now);
/* Lists page under key (retaining it) unless the key is listed or the table
 * is full; at is the position of its first token in its sequence. Returns
 * true when listed. */
bool fg_prefix_cache_insert(fg_prefix_cache_t *c, fg_kv_store_t *kv, uint64_t key, uint64_t prev, int tenant,
                            const int32_t *tokens, int at, uint8_t *page, double now);

/* Cold pages (held only by the cache) as eviction candidates, at most max;
 * ids are for fg_prefix_cache_drop. Returns the count. */
int fg_prefix_cache_cold(const fg_prefix_cache_t *c, const fg_kv_store_t *kv, fg_evict_candidate *out, int max,
                         double now);
/* What an entry lists; pointers into the table, valid until it changes. */
typedef struct fg_prefix_entry {
    uint64_t key, prev;
    int tenant;
    int at;                  /* position of its first token */
    const int32_t *tokens;   /* [FG_KV_PAGE_TOKENS] */
    uint8_t *page;           /* not retained */
    const uint8_t *snap;     /* its snapshot (seq_bytes), or NULL */
} fg_prefix_entry;
/* The entry id (from fg_prefix_cache_cold) into *out. Returns false when the
 * id lists nothing. */
bool fg_prefix_cache_entry(const fg_prefix_cache_t *c, uint32_t id, fg_prefix_entry *out);
/* Unlists the entry id and releases its page. */
void fg_prefix_cache_drop(fg_prefix_cache_t *c, fg_kv_store_t *kv, uint32_t id);
/* Attaches a copy of state (seq_bytes) to the entry listed under key, charged
 * to its tenant. False when key is not listed or has a snapshot already, or
 * the pool has no pages for it. */
bool fg_prefix_cache_set_snapshot(fg_prefix_cache_t *c, fg_kv_store_t *kv, uint64_t key, const uint8_t *state);
/* The snapshot of the entry under key (a hit found it), or NULL. */
const uint8_t *fg_prefix_cache_snapshot(const fg_prefix_cache_t *c, uint64_t key);
/* Snapshots on pages that sessions still hold (a cold entry's goes with it,
 * fg_prefix_cache_cold counts it in its pages), as eviction candidates of
 * fg_kv_store_state_pages pages each, at most max; ids are for
 * fg_prefix_cache_drop_snapshot. Returns the count. */
int fg_prefix_cache_snapshots(const fg_prefix_cache_t *c, const fg_kv_store_t *kv, fg_evict_candidate *out, int max,
                              double now);
/* Frees the snapshot of entry id (the page stays listed). */
void fg_prefix_cache_drop_snapshot(fg_prefix_cache_t *c, fg_kv_store_t *kv, uint32_t id);
/* Snapshots held. */
size_t fg_prefix_cache_snapshot_count(const fg_prefix_cache_t *c);
/* Listed pages, and of those the cold ones. */
size_t fg_prefix_cache_count(const fg_prefix_cache_t *c);
size_t fg_prefix_cache_cold_count(const fg_prefix_cache_t *c, const fg_kv_store_t *kv);

#endif
