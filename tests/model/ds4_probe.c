/* ds4_probe: runs a deepseek4 model's forward pass directly (below the
 * engine) for tests/reference/check_deepseek4.py, which compares what it
 * writes with the numpy reference.
 *
 *   ds4_probe MODEL TOKENS OUT_LOGITS OUT_MTP CHUNK FORMAT [ISA]
 *
 * TOKENS: comma-separated ids. The tokens go through one sequence in chunks
 * of CHUNK (the last may be shorter), logits at every position; OUT_LOGITS
 * and OUT_MTP get [n][V] raw little-endian f32 (the trunk's logits and the
 * MTP block's drafts). FORMAT: f32, f16 or fp8. ISA: scalar, avx2, avx512
 * (default: the best). Exit 0, or 1 with the error on stderr.
 *
 * CHUNK "draft:K": the tokens but the last K in one pass, then K chained
 * drafts (fg_ds4_forward_draft) of the last K tokens into OUT_LOGITS [K][V]
 * (OUT_MTP is not written).
 *
 * CHUNK "checks" instead runs the cache's rules and prints what failed:
 * a sequence cut in the middle refuses to continue (FG_ERR_STATE) and one cut
 * to 0 starts again with the same logits; two sequences in one batch give
 * each its logits alone (within 1e-4: f32 products sum in other tiles); a
 * share of a deepseek4 sequence's whole length takes its pages and state,
 * one of part of it is refused (FG_ERR_UNSUPPORTED: the window rings and open
 * blocks match the whole length only). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"
#include "engine/model/deepseek4/forward.h"
#include "engine/model/deepseek4/model.h"
#include "kernels/cpu/pool.h"
#include "tests/model/probe.h"

static int fail(const char *what, const fg_diag *d) { return probe_fail("ds4_probe", what, d); }

static int bad;

#define EXPECT(cond, what)                                     \
    do {                                                       \
        if (!(cond)) {                                         \
            fprintf(stderr, "ds4_probe: FAIL: %s\n", what);   \
            bad++;                                             \
        }                                                      \
    } while (0)

static fg_err run(fg_ds4_forward_t *f, fg_kv_seq *q, const int32_t *tok, int n, float *logits, fg_diag *d)
{
    fg_fwd_seq fs = {.kv = q, .n_tokens = n, .n_logits = n, .logits = logits};
    return fg_ds4_forward_run(f, tok, &fs, 1, d);
}

static int checks(fg_ds4_forward_t *f, fg_kv_store_t *kv, const int32_t *tok, int n, size_t V)
{
    fg_diag d = {{0}};
    const int h = n / 2;
    float *a = calloc((size_t)n * V, sizeof *a), *b = calloc((size_t)n * V, sizeof *b);
    fg_kv_seq q, q2, q3;
    fg_kv_seq_init(&q, n);
    fg_kv_seq_init(&q2, n);
    fg_kv_seq_init(&q3, n);
    EXPECT(fg_kv_seq_reserve(kv, &q, n) == FG_OK, "reserve");
    EXPECT(run(f, &q, tok, h, a, &d) == FG_OK, "first half");
    fg_kv_seq_truncate(kv, &q, h / 2);
    EXPECT(run(f, &q, tok + h / 2, 1, b, &d) == FG_ERR_STATE && q.n_tokens == h / 2,
           "a sequence cut in the middle continues");
    fg_kv_seq_truncate(kv, &q, 0);
    EXPECT(fg_kv_seq_reserve(kv, &q, h) == FG_OK, "reserve again");
    EXPECT(run(f, &q, tok, h, b, &d) == FG_OK && !memcmp(a, b, (size_t)h * V * sizeof *a),
           "a sequence cut to 0 does not start again with the same logits");
    /* two sequences in one batch: the first half's continuation and a fresh one */
    EXPECT(fg_kv_seq_reserve(kv, &q, n) == FG_OK && fg_kv_seq_reserve(kv, &q2, n - h) == FG_OK, "reserve pair");
    fg_fwd_seq pair[2] = {{.kv = &q, .n_tokens = n - h, .n_logits = n - h, .logits = b},
                          {.kv = &q2, .n_tokens = n - h, .n_logits = n - h, .logits = b + (size_t)(n - h) * V}};
    int32_t *both = malloc(sizeof *both * (size_t)(2 * (n - h)));
    memcpy(both, tok + h, sizeof *both * (size_t)(n - h));
    memcpy(both + (n - h), tok + h, sizeof *both * (size_t)(n - h));
    EXPECT(fg_ds4_forward_run(f, both, pair, 2, &d) == FG_OK, "pair run");
    EXPECT(fg_kv_seq_reserve(kv, &q3, n - h) == FG_OK && run(f, &q3, tok + h, n - h, a, &d) == FG_OK,
           "alone run");
    /* f32 weights: a batch's products sum in other tiles than one sequence's
     * (kernels/cpu/matmul.h), ~1e-5 of logit; tests/model/test_ds4_serve.c measures it */
    float dmax = 0;
    for (size_t i = 0; i < (size_t)(n - h) * V; i++) {
        const float dd = a[i] - b[(size_t)(n - h) * V + i];
        dmax = dd > dmax ? dd : -dd > dmax ? -dd : dmax;
    }
    EXPECT(dmax <= 1e-4f, "the batch's second sequence differs from it alone");
    EXPECT(run(f, &q2, tok, 1, a, &d) == FG_OK, "continue the pair's second");
    fg_kv_seq share;
    fg_kv_seq_init(&share, n);
    EXPECT(fg_kv_seq_share(kv, &share, &q, q.n_tokens - 1) == FG_ERR_UNSUPPORTED && share.n_pages == 0,
           "sharing part of a deepseek4 sequence is not refused");
    EXPECT(fg_kv_seq_share(kv, &share, &q, q.n_tokens) == FG_OK && share.n_tokens == q.n_tokens &&
               share.n_pages == q.n_pages && share.pages[0] == q.pages[0] && share.state &&
               !memcmp(share.state, q.state, fg_kv_store_geometry(kv)->seq_bytes),
           "sharing a deepseek4 sequence's whole length does not take its pages and state");
    fg_kv_seq_free(kv, &share);
    fg_kv_seq_free(kv, &q);
    fg_kv_seq_free(kv, &q2);
    fg_kv_seq_free(kv, &q3);
    free(both);
    free(a);
    free(b);
    if (!bad)
        printf("ds4_probe checks: ok\n");
    return bad ? 1 : 0;
}

/* The first n - k tokens in one pass, then k chained drafts of the last k into path. */
static int drafts(fg_ds4_forward_t *f, fg_kv_store_t *kv, const int32_t *tok, int n, int k, size_t V,
                  const char *path)
{
    fg_diag d = {{0}};
    float *lg = calloc((size_t)n * V, sizeof *lg);
    fg_kv_seq q;
    fg_kv_seq_init(&q, n);
    if (!lg || fg_kv_seq_reserve(kv, &q, n - k) != FG_OK)
        return fail("reserve", NULL);
    if (run(f, &q, tok, n - k, lg, &d) != FG_OK)
        return fail("run", &d);
    for (int i = 0; i < k; i++) {
        fg_fwd_seq fs = {.kv = &q, .n_tokens = 1, .n_logits = 1, .logits = lg + (size_t)i * V};
        if (fg_ds4_forward_draft(f, tok + n - k + i, &fs, 1, &d) != FG_OK)
            return fail("draft", &d);
    }
    const int rc = probe_write_f32(path, lg, (size_t)k * V);
    fg_kv_seq_free(kv, &q);
    free(lg);
    return rc ? fail("write", NULL) : 0;
}

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: ds4_probe MODEL TOKENS OUT_LOGITS OUT_MTP CHUNK FORMAT [ISA]\n");
        return 2;
    }
    fg_isa isa = FG_ISA_AUTO;
    if (argc == 8)
        isa = !strcmp(argv[7], "scalar") ? FG_ISA_SCALAR : !strcmp(argv[7], "avx2") ? FG_ISA_AVX2 : FG_ISA_AVX512;
    if (!fg_isa_supported(isa))
        return fail("ISA not available here", NULL);
    const bool run_checks = !strcmp(argv[5], "checks");
    const int n_draft = !strncmp(argv[5], "draft:", 6) ? atoi(argv[5] + 6) : 0;
    const int format = fg_kv_format_parse(argv[6]);
    int n = 1;
    for (const char *p = argv[2]; *p; p++)
        n += *p == ',';
    int32_t *tok = malloc(sizeof *tok * (size_t)n);
    char *s = argv[2];
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)strtol(s, &s, 10), s += *s == ',';
    const int chunk = run_checks || n_draft ? n : atoi(argv[5]);
    if (chunk < 1 || format < 0 || n_draft < 0 || n_draft >= n)
        return 2;
    fg_diag d = {{0}};
    fg_gguf_t *g;
    fg_arch_model *am;
    if (fg_gguf_open_file(argv[1], &g, &d) != FG_OK)
        return fail("open", &d);
    if (fg_arch_load(g, &am, &d) != FG_OK)
        return fail("load", &d);
    const fg_ds4_model *m = fg_deepseek4_of(am);
    if (!m)
        return fail("not a deepseek4 model", NULL);
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    if (am->arch->cache(am, (fg_kv_format)format, &geo, &d) != FG_OK)
        return fail("cache", &d);
    /* four sequences at a time (three and a share): their pages and the pages their states stand for
     * (kv_store.h) */
    const size_t pages = 4 * ((size_t)(n + FG_KV_PAGE_TOKENS) / FG_KV_PAGE_TOKENS + 1 +
                              (geo.seq_bytes + geo.page_bytes - 1) / geo.page_bytes);
    if (fg_kv_store_create(&geo, pages * geo.page_bytes, &kv, &d) != FG_OK)
        return fail("store", &d);
    fg_pool_t *pool = fg_pool_create(2);
    fg_ds4_forward_t *f;
    if (fg_ds4_forward_create(m, &geo, chunk, pool, isa, &f, &d) != FG_OK)
        return fail("forward", &d);
    const size_t V = (size_t)am->n_vocab;
    if (run_checks || n_draft) {
        int rc = run_checks ? checks(f, kv, tok, n, V) : drafts(f, kv, tok, n, n_draft, V, argv[3]);
        fg_ds4_forward_destroy(f);
        fg_pool_destroy(pool);
        fg_kv_store_destroy(kv);
        fg_arch_free(am);
        fg_gguf_close(g);
        free(tok);
        return rc;
    }
    float *logits = calloc((size_t)n * V, sizeof *logits), *mtp = calloc((size_t)n * V, sizeof *mtp);
    fg_kv_seq q;
    fg_kv_seq_init(&q, n);
    if (fg_kv_seq_reserve(kv, &q, n) != FG_OK)
        return fail("reserve", NULL);
    for (int at = 0; at < n; at += chunk) {
        const int c = n - at < chunk ? n - at : chunk;
        fg_fwd_seq fs = {.kv = &q, .n_tokens = c, .n_logits = c, .logits = logits + (size_t)at * V};
        fg_ds4_forward_set_mtp_out(f, mtp + (size_t)at * V);
        if (fg_ds4_forward_run(f, tok + at, &fs, 1, &d) != FG_OK)
            return fail("run", &d);
    }
    int rc = probe_write_f32(argv[3], logits, (size_t)n * V) || probe_write_f32(argv[4], mtp, (size_t)n * V);
    fg_kv_seq_free(kv, &q);
    fg_ds4_forward_destroy(f);
    fg_pool_destroy(pool);
    fg_kv_store_destroy(kv);
    fg_arch_free(am);
    fg_gguf_close(g);
    free(logits);
    free(mtp);
    free(tok);
    return rc ? fail("write", NULL) : 0;
}
