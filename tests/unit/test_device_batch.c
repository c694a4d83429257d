/* test_device_batch.c: the batch description a device backend uploads each
 * step (engine/backend/device_batch.h), built on the CPU from real KV store pages:
 * device page addresses follow the host pages' indices (not their order in
 * memory), sequences' page tables are concatenated with each token pointing
 * at its own sequence's first page, row addresses land on the right page and
 * slot, n_kv is causal, and the rows wanting logits are listed in order. The
 * batch checks give fg_forward_run's errors.
 */
#include <string.h>

#include "engine/backend/device_batch.h"
#include "engine/model/deepseek2/model.h"
#include "tests/unit/fg_test.h"

#define DEV_BASE ((uintptr_t)0x7f0000000000ull)

int main(void)
{
    fg_hparams hp = {.n_layer = 2, .kv_lora = 32, .n_rope = 16};
    fg_kv_geometry geo;
    CHECK(fg_kv_geometry_init(&geo, &hp, FG_KV_F16, NULL) == FG_OK);
    CHECK(geo.row_bytes == 96 && geo.page_bytes == 64 * 2 * 96);
    fg_kv_store_t *kv;
    CHECK(fg_kv_store_create(&geo, geo.page_bytes * 8, &kv, NULL) == FG_OK);

    /* Take page 0 first and give it back later, so B's page is not A's neighbour. */
    uint8_t *spare = fg_kv_page_alloc(kv);
    CHECK(fg_kv_store_page_index(kv, spare) == 0);
    fg_kv_seq a, b;
    fg_kv_seq_init(&a, 1000);
    fg_kv_seq_init(&b, 1000);
    CHECK(fg_kv_seq_reserve(kv, &a, 68) == FG_OK); /* pages 1, 2 */
    fg_kv_page_release(kv, spare);
    CHECK(fg_kv_seq_reserve(kv, &b, 5) == FG_OK);  /* page 0 again */
    a.n_tokens = 65;
    CHECK(fg_kv_store_page_index(kv, a.pages[0]) == 1 && fg_kv_store_page_index(kv, a.pages[1]) == 2);
    CHECK(fg_kv_store_page_index(kv, b.pages[0]) == 0);

    float la[10], lb[50];
    fg_fwd_seq seqs[2] = {{.kv = &a, .n_tokens = 3, .n_logits = 1, .logits = la},
                          {.kv = &b, .n_tokens = 5, .n_logits = 5, .logits = lb}};
    const int32_t toks[8] = {5, 6, 7, 1, 2, 3, 4, 9};
    int n = -1;
    CHECK(fg_device_batch_check(toks, seqs, 2, 16, 10, &n, NULL) == FG_OK && n == 8);

    int32_t ints[5][16];
    uintptr_t rows[16], pages[3];
    fg_device_batch bt = {.tok = ints[0], .pos = ints[1], .page0 = ints[2], .n_kv = ints[3], .logit_row = ints[4],
                          .rows = rows, .pages = pages, .cap_pages = 3, .max_tokens = 16};
    CHECK(fg_device_batch_pages(seqs, 2) == 3);
    CHECK(fg_device_batch_plan(&bt, kv, DEV_BASE, toks, seqs, 2, NULL) == FG_OK);
    CHECK(bt.n_tok == 8 && bt.n_pages == 3 && bt.n_logit_rows == 6);
    CHECK(pages[0] == DEV_BASE + 1 * geo.page_bytes && pages[1] == DEV_BASE + 2 * geo.page_bytes &&
          pages[2] == DEV_BASE);
    for (int t = 0; t < 8; t++)
        CHECK(ints[0][t] == toks[t]);
    /* A: positions 65..67 on its second page, slots 1..3; B: 0..4 on its only page. */
    for (int t = 0; t < 3; t++) {
        CHECK(ints[1][t] == 65 + t && ints[3][t] == 66 + t && ints[2][t] == 0);
        CHECK(rows[t] == DEV_BASE + 2 * geo.page_bytes + (size_t)(1 + t) * geo.row_bytes);
    }
    for (int t = 3; t < 8; t++) {
        CHECK(ints[1][t] == t - 3 && ints[3][t] == t - 2 && ints[2][t] == 2);
        CHECK(rows[t] == DEV_BASE + (size_t)(t - 3) * geo.row_bytes);
    }
    const int32_t want_logits[6] = {2, 3, 4, 5, 6, 7};
    CHECK(memcmp(ints[4], want_logits, sizeof want_logits) == 0);

    /* A page list too short is refused, not overrun. */
    bt.cap_pages = 2;
    CHECK(fg_device_batch_plan(&bt, kv, DEV_BASE, toks, seqs, 2, NULL) == FG_ERR_INVALID_ARG);

    /* fg_forward_run's errors. */
    fg_diag d = {{0}};
    const int32_t bad_tok[8] = {5, 6, 10, 1, 2, 3, 4, 9};
    CHECK(fg_device_batch_check(bad_tok, seqs, 2, 16, 10, &n, &d) == FG_ERR_TOKEN_ID && strstr(d.msg, "10"));
    CHECK(fg_device_batch_check(toks, seqs, 2, 7, 10, &n, &d) == FG_ERR_INVALID_ARG);
    seqs[0].n_logits = 2;
    CHECK(fg_device_batch_check(toks, seqs, 2, 16, 10, &n, &d) == FG_ERR_INVALID_ARG);
    seqs[0].n_logits = 1;
    seqs[1].n_tokens = 70, seqs[1].n_logits = 1; /* B has one page: 64 rows */
    CHECK_MSG(fg_device_batch_check(toks, seqs, 2, 128, 10, &n, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "pages"), "%s", d.msg);
    seqs[1].n_tokens = 5;
    seqs[1].logits = NULL; /* logits asked for without a buffer */
    CHECK(fg_device_batch_check(toks, seqs, 2, 16, 10, &n, &d) == FG_ERR_INVALID_ARG);

    fg_kv_seq_free(kv, &a);
    fg_kv_seq_free(kv, &b);
    CHECK(fg_kv_store_pages_free(kv) == 8);
    fg_kv_store_destroy(kv);
    return fg_test_failures ? 1 : 0;
}
