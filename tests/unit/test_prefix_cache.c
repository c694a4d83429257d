/* The prefix cache: chained page keys depend on the previous key, the tenant
 * and every token; a hit needs the same previous key, tenant and tokens (a
 * forged key collision finds nothing); the cache holds its own reference,
 * so pages outlive their sessions as "cold" pages until dropped. With a
 * state geometry: snapshots charged to the pool, shares that copy the
 * state, copy-on-write over a 128-token unit. */
#include <string.h>

#include "engine/kv/prefix_cache.h"
#include "tests/unit/fg_test.h"

int main(void)
{
    int32_t a[FG_KV_PAGE_TOKENS], b[FG_KV_PAGE_TOKENS];
    for (int i = 0; i < FG_KV_PAGE_TOKENS; i++)
        a[i] = b[i] = i * 7 + 1;
    b[63] = 999;
    uint64_t s1 = fg_tenant_salt("acme"), s2 = fg_tenant_salt("other");
    CHECK(s1 != s2 && s1 == fg_tenant_salt("acme"));
    uint64_t k1 = fg_page_key(0, s1, a);
    CHECK(k1 == fg_page_key(0, s1, a));         /* deterministic */
    CHECK(k1 != fg_page_key(0, s1, b));         /* the last token matters */
    CHECK(k1 != fg_page_key(0, s2, a));         /* the tenant matters */
    CHECK(k1 != fg_page_key(1, s1, a));         /* the chain matters */
    uint64_t k2 = fg_page_key(k1, s1, a);       /* page 2 of a a-a prefix */
    CHECK(k2 != k1 && k2 != fg_page_key(fg_page_key(0, s1, b), s1, a));

    fg_kv_geometry g = {.format = FG_KV_F32, .n_layer = 1, .kv_lora = 16, .n_rope = 16,
                        .latent_bytes = 64, .row_bytes = 128, .bytes_per_token = 128};
    g.page_bytes = g.bytes_per_token * FG_KV_PAGE_TOKENS;
    fg_kv_store_t *kv;
    fg_diag d;
    CHECK(fg_kv_store_create(&g, 4 * g.page_bytes, &kv, &d) == FG_OK);
    fg_prefix_cache_t *c;
    CHECK(fg_prefix_cache_create(4, &c) == FG_OK);
    uint8_t *p1 = fg_kv_page_alloc_for(kv, 3);
    CHECK(fg_prefix_cache_insert(c, kv, k1, 0, 3, a, 0, p1, 1.0));
    CHECK(fg_kv_page_refs(kv, p1) == 2);
    CHECK(!fg_prefix_cache_insert(c, kv, k1, 0, 3, a, 0, p1, 1.0)); /* listed once */
    CHECK(fg_prefix_cache_find(c, k1, 0, 3, a, 2.0) == p1);
    /* The same key with other tokens, another tenant or another chain: no hit. */
    CHECK(fg_prefix_cache_find(c, k1, 0, 3, b, 2.0) == NULL);
    CHECK(fg_prefix_cache_find(c, k1, 0, 4, a, 2.0) == NULL);
    CHECK(fg_prefix_cache_find(c, k1, 5, 3, a, 2.0) == NULL);
    /* Not cold while a session holds it; cold once only the cache does. */
    fg_evict_candidate cand[4];
    CHECK(fg_prefix_cache_cold(c, kv, cand, 4, 3.0) == 0);
    fg_kv_page_release(kv, p1);
    CHECK(fg_prefix_cache_cold_count(c, kv) == 1 && fg_kv_owner_pages(kv, 3) == 1);
    CHECK(fg_prefix_cache_cold(c, kv, cand, 4, 3.0) == 1 && cand[0].kind == FG_EVICT_COLD_PAGE &&
          cand[0].idle_seconds == 1.0);
    fg_prefix_cache_drop(c, kv, cand[0].id);
    CHECK(fg_prefix_cache_count(c) == 0 && fg_kv_store_pages_free(kv) == 4 && fg_kv_owner_pages(kv, 3) == 0);
    CHECK(fg_prefix_cache_find(c, k1, 0, 3, a, 4.0) == NULL);
    /* A full table lists nothing more (and takes no reference). */
    for (int i = 0; i < 4; i++) {
        uint8_t *p = fg_kv_page_alloc(kv);
        a[0] = 100 + i;
        CHECK(fg_prefix_cache_insert(c, kv, fg_page_key(0, s1, a), 0, 0, a, 0, p, 5.0));
        fg_kv_page_release(kv, p);
    }
    CHECK(fg_kv_store_pages_free(kv) == 0);
    uint8_t extra[8];
    CHECK(!fg_prefix_cache_insert(c, kv, 12345, 0, 0, a, 0, extra, 5.0));
    fg_prefix_cache_destroy(c, kv);
    CHECK(fg_kv_store_pages_free(kv) == 4); /* destroy released every page */

    /* Copy-on-write in the store: a shared page is copied before a write. */
    fg_kv_seq q1, q2;
    fg_kv_seq_init(&q1, 256);
    fg_kv_seq_init(&q2, 256);
    CHECK(fg_kv_seq_reserve(kv, &q1, 70) == FG_OK);
    q1.n_tokens = 70;
    memset(q1.pages[1], 0xab, g.page_bytes);
    CHECK(fg_kv_seq_share(kv, &q2, &q1, 70) == FG_OK && q2.pages[1] == q1.pages[1]);
    CHECK(fg_kv_seq_make_writable(kv, &q2, 70) == FG_OK && q2.pages[1] != q1.pages[1]);
    CHECK(q2.pages[1][0] == 0xab && q2.pages[0] == q1.pages[0]);
    CHECK(fg_kv_store_pages_free(kv) == 1 && fg_kv_pages_shared(kv) == 1);
    CHECK(fg_kv_seq_make_writable(kv, &q1, 70) == FG_OK); /* private again: no copy */
    CHECK(fg_kv_store_pages_free(kv) == 1);
    fg_kv_seq_free(kv, &q1);
    fg_kv_seq_free(kv, &q2);
    CHECK(fg_kv_store_pages_free(kv) == 4);
    fg_kv_store_destroy(kv);

    /* A geometry with state (deepseek4's shape: 2 pages per state, 128-token
     * units): snapshots hold pages off the pool under the entry's tenant, a
     * cold entry counts them, and a share copies the state. */
    g.seq_bytes = g.page_bytes + 1;
    g.share_tokens = 2 * FG_KV_PAGE_TOKENS;
    CHECK(fg_kv_store_create(&g, 12 * g.page_bytes, &kv, &d) == FG_OK && fg_kv_store_state_pages(kv) == 2);
    CHECK(fg_prefix_cache_create(4, &c) == FG_OK);
    fg_kv_seq_init(&q1, 512);
    fg_kv_seq_init(&q2, 512);
    CHECK(fg_kv_seq_reserve(kv, &q1, 200) == FG_OK && q1.state && fg_kv_owner_pages(kv, 0) == 4 + 2);
    q1.n_tokens = 200;
    memset(q1.state, 0x3c, g.seq_bytes);
    k2 = fg_page_key(k1, s1, a);
    CHECK(fg_prefix_cache_insert(c, kv, k1, 0, 5, a, 0, q1.pages[0], 1.0) &&
          fg_prefix_cache_insert(c, kv, k2, k1, 5, a, FG_KV_PAGE_TOKENS, q1.pages[1], 1.0));
    CHECK(!fg_prefix_cache_snapshot(c, k2));
    CHECK(fg_prefix_cache_set_snapshot(c, kv, k2, q1.state) && !fg_prefix_cache_set_snapshot(c, kv, k2, q1.state));
    CHECK(!fg_prefix_cache_set_snapshot(c, kv, 12345, q1.state)); /* not listed */
    const uint8_t *sn = fg_prefix_cache_snapshot(c, k2);
    CHECK(sn && sn != q1.state && !memcmp(sn, q1.state, g.seq_bytes));
    CHECK(fg_kv_owner_pages(kv, 5) == 2 && fg_kv_store_pages_held(kv) == 4 && fg_prefix_cache_snapshot_count(c) == 1);
    fg_evict_candidate ev[4];
    CHECK(fg_prefix_cache_cold(c, kv, ev, 4, 2.0) == 0); /* q1 holds the pages */
    CHECK(fg_prefix_cache_snapshots(c, kv, ev, 4, 2.0) == 1 && ev[0].pages == 2);
    /* a share copies the state, at src's whole length only */
    CHECK(fg_kv_seq_share(kv, &q2, &q1, 199) == FG_ERR_UNSUPPORTED);
    CHECK(fg_kv_seq_share(kv, &q2, &q1, 200) == FG_OK && q2.state && q2.state != q1.state &&
          !memcmp(q2.state, q1.state, g.seq_bytes) && q2.pages[3] == q1.pages[3]);
    /* copy-on-write at 200 (200 mod 128 = 72) copies pages 2 and 3: a row of
     * the unit lands in its first page */
    CHECK(fg_kv_first_written_page(&g, 200) == 2 && fg_kv_first_written_page(&g, 190) == 2 &&
          fg_kv_first_written_page(&g, 128) == 2 && fg_kv_first_written_page(&g, 127) == 0);
    CHECK(fg_kv_seq_make_writable(kv, &q2, 200) == FG_OK);
    CHECK(q2.pages[2] != q1.pages[2] && q2.pages[3] != q1.pages[3] && q2.pages[1] == q1.pages[1]);
    fg_kv_seq_free(kv, &q2);
    fg_kv_seq_free(kv, &q1);
    CHECK(fg_prefix_cache_cold(c, kv, ev, 4, 2.0) == 2 && ev[0].pages + ev[1].pages == 1 + 3);
    /* what a spill to a page file reads of each: its position, and the snapshot of the one that has it */
    for (int i = 0; i < 2; i++) {
        fg_prefix_entry x;
        CHECK(fg_prefix_cache_entry(c, ev[i].id, &x) && x.tenant == 5 && x.tokens && x.page);
        CHECK(x.key == k2 ? x.prev == k1 && x.at == FG_KV_PAGE_TOKENS && x.snap == sn
                          : x.key == k1 && x.at == 0 && !x.snap);
    }
    CHECK(fg_prefix_cache_snapshots(c, kv, ev, 4, 2.0) == 0); /* a cold entry's goes with it */
    CHECK(fg_kv_store_pages_free(kv) == 12 - 2 - 2);           /* the two cold pages and the snapshot */
    fg_prefix_cache_destroy(c, kv);
    CHECK(fg_kv_store_pages_free(kv) == 12 && fg_kv_store_pages_held(kv) == 0 && fg_kv_owner_pages(kv, 5) == 0);
    fg_kv_store_destroy(kv);
    return fg_test_failures ? 1 : 0;
}
