/* The prefix cache: chained page keys depend on the previous key, the tenant
 * and every token; a hit needs the same previous key, tenant and tokens (a
 * forged key collision finds nothing); the cache holds its own reference,
 * so pages outlive their sessions as "cold" pages until dropped. */
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
    CHECK(fg_prefix_cache_insert(c, kv, k1, 0, 3, a, p1, 1.0));
    CHECK(fg_kv_page_refs(kv, p1) == 2);
    CHECK(!fg_prefix_cache_insert(c, kv, k1, 0, 3, a, p1, 1.0)); /* listed once */
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
        CHECK(fg_prefix_cache_insert(c, kv, fg_page_key(0, s1, a), 0, 0, a, p, 5.0));
        fg_kv_page_release(kv, p);
    }
    CHECK(fg_kv_store_pages_free(kv) == 0);
    uint8_t extra[8];
    CHECK(!fg_prefix_cache_insert(c, kv, 12345, 0, 0, a, extra, 5.0));
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
    return fg_test_failures ? 1 : 0;
}
