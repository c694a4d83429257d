/* test_ds4_cache.c: the deepseek4 cache layout and row codecs
 * (engine/model/deepseek4/cache.h).
 *
 * V4 Flash's released geometry: bytes per token of the growing part in each
 * format (f16 must be llama.cpp's 6,880; the compact fp8 layout within the
 * 3,900 goal) and the fixed bytes per sequence; a page holds exactly 64
 * tokens' share. Compressed rows of both ratios and index keys written to
 * pages and read back: exact in f32, within each format's rounding otherwise;
 * a 128-ratio row split over two pages comes back whole and leaves the other
 * rows of those pages alone. Formats deepseek4 cannot store are refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/deepseek4/cache.h"
#include "tests/unit/fg_test.h"

static void test_flash_bytes(void)
{
    fg_ds4_hparams hp;
    fg_ds4_flash_geometry(&hp);
    const struct {
        fg_kv_format f;
        double per_token;
    } want[] = {
        {FG_KV_F32, 13760}, /* 21 (512 + 128) / 4 + 20 * 512 / 128 = 3,440 values */
        {FG_KV_F16, 6880},  /* llama.cpp's default cache */
        /* 21 CSA * (580 B row + 72 B FP4 key) / 4 + 20 HCA * 292 B half-row / 64:
         * a row is 448 FP8 + 4 scale + 64 * 2 BF16 */
        {FG_KV_FP8, 21.0 * (580 + 72) / 4 + 20.0 * 292 / 64},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        fg_ds4_cache *c;
        fg_diag d = {{0}};
        CHECK(fg_ds4_cache_layout(&hp, want[i].f, &c, &d) == FG_OK);
        const double per_token = (double)c->page_bytes / FG_KV_PAGE_TOKENS;
        CHECK_MSG(per_token == want[i].per_token, "%s: %.2f B/token, want %.2f", fg_kv_format_name(want[i].f),
                  per_token, want[i].per_token);
        printf("V4 Flash, kv %s: %.2f B/token growing, %zu B fixed per sequence\n", fg_kv_format_name(want[i].f),
               per_token, c->seq_bytes);
        if (want[i].f == FG_KV_FP8)
            CHECK(per_token <= 3900);
        fg_kv_geometry geo;
        fg_ds4_cache_geometry(c, &hp, &geo);
        CHECK(geo.page_bytes == c->page_bytes && geo.seq_bytes == c->seq_bytes);
        CHECK(geo.bytes_per_token == (c->page_bytes + 63) / 64);
        free(c);
    }
    fg_ds4_cache *c;
    fg_diag d = {{0}};
    CHECK(fg_ds4_cache_layout(&hp, FG_KV_INT8, &c, &d) == FG_ERR_KV_FORMAT && c == NULL);
    CHECK(strstr(d.msg, "int8") != NULL);
    CHECK(fg_ds4_cache_layout(&hp, FG_KV_FP4, &c, &d) == FG_ERR_KV_FORMAT);
}

/* Rows through pages: 4 pages (256 tokens) of a CSA layer and an HCA layer. */
static void test_pages(fg_kv_format f, float tol)
{
    static int ratio[3] = {0, FG_DS4_CSA, FG_DS4_HCA};
    fg_ds4_hparams hp;
    fg_ds4_flash_geometry(&hp);
    hp.n_layer = hp.n_layer_all = 3;
    hp.n_nextn = 0;
    hp.ratio = ratio;
    fg_ds4_cache *c;
    fg_diag d = {{0}};
    CHECK(fg_ds4_cache_layout(&hp, f, &c, &d) == FG_OK);
    enum { PAGES = 4 };
    uint8_t *mem = calloc(PAGES, c->page_bytes), *pages[PAGES], *tmp = malloc(c->row_bytes * 2);
    for (int i = 0; i < PAGES; i++)
        pages[i] = mem + (size_t)i * c->page_bytes;
    fg_kv_seq q = {.pages = pages, .n_pages = PAGES, .cap_pages = PAGES};
    const int D = hp.head_dim, Di = hp.idx_dim;
    const int n_csa = PAGES * FG_KV_PAGE_TOKENS / FG_DS4_CSA, n_hca = PAGES * FG_KV_PAGE_TOKENS / FG_DS4_HCA;
    float *rows = malloc(sizeof(float) * (size_t)(n_csa + n_hca) * D), *keys = malloc(sizeof(float) * n_csa * Di);
    float *y = malloc(sizeof(float) * (size_t)D);
    for (int i = 0; i < (n_csa + n_hca) * D; i++)
        rows[i] = rng_f() * 3.0f;
    for (int i = 0; i < n_csa * Di; i++)
        keys[i] = rng_f() * 3.0f;
    /* interleaved writes, as a sequence makes them */
    for (int j = 0; j < n_csa; j++) {
        fg_ds4_comp_store(c, &q, 1, FG_DS4_CSA, j, rows + (size_t)j * D, tmp);
        fg_ds4_key_store(c, &q, 1, j, keys + (size_t)j * Di);
        if ((j + 1) % (FG_DS4_HCA / FG_DS4_CSA) == 0) {
            const int h = j / (FG_DS4_HCA / FG_DS4_CSA);
            fg_ds4_comp_store(c, &q, 2, FG_DS4_HCA, h, rows + (size_t)(n_csa + h) * D, tmp);
        }
    }
    float err = 0;
    for (int j = 0; j < n_csa + n_hca; j++) {
        if (j < n_csa)
            fg_ds4_comp_load(c, &q, 1, FG_DS4_CSA, j, y, tmp);
        else
            fg_ds4_comp_load(c, &q, 2, FG_DS4_HCA, j - n_csa, y, tmp);
        for (int i = 0; i < D; i++)
            err = fmaxf(err, fabsf(y[i] - rows[(size_t)j * D + i]));
    }
    float kerr = 0;
    for (int j = 0; j < n_csa; j++) {
        fg_ds4_key_load(c, &q, 1, j, y);
        for (int i = 0; i < Di; i++)
            kerr = fmaxf(kerr, fabsf(y[i] - keys[(size_t)j * Di + i]));
    }
    CHECK_MSG(err <= tol * 3.0f, "%s rows: max error %g", fg_kv_format_name(f), err);
    /* FP4 keys: half an E2M1 step at the top of the block's range (6 -> 4: 1/6 of amax) */
    const float ktol = f == FG_KV_FP8 ? 3.0f / 6.0f * 1.01f : tol * 3.0f;
    CHECK_MSG(kerr <= ktol, "%s keys: max error %g", fg_kv_format_name(f), kerr);
    if (f == FG_KV_F32)
        CHECK(err == 0 && kerr == 0);
    free(mem);
    free(tmp);
    free(rows);
    free(keys);
    free(y);
    free(c);
}

int main(void)
{
    rng_seed(0x5eed4ull);
    test_flash_bytes();
    test_pages(FG_KV_F32, 0);
    test_pages(FG_KV_F16, 0x1p-11f);
    /* FP8 E4M3: 3 mantissa bits, half a step 2^-4 relative; BF16 2^-8 */
    test_pages(FG_KV_FP8, 0x1p-4f);
    return TEST_DONE("test_ds4_cache");
}
