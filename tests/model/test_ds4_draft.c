/* deepseek4's MTP drafts (engine/model/arch.h, forward_draft) and the
 * bit-identity speculative decoding stands on (greedy speculation = plain
 * decoding bit for bit needs a verify pass of k + 1 tokens to give the logits
 * bits of k + 1 single-token steps).
 *
 * 1. Bit-identity across chunks and batches: one sequence through the
 *    forward pass in one pass, in chunks of 1 and of 5 (a verify of 4
 *    drafts), and in chunks of 3 beside another sequence: every logit and
 *    every MTP logit the same bits, on the scalar reference and on AVX-512
 *    (where the CPU has it: kernels/cpu/matmul.h), for v4-tiny (F32) and
 *    v4-tiny-mxfp4 (the converter's types: Q8_0, BF16, MXFP4), fp8 cache.
 * 2. Drafts: a draft is the bits of the MTP logits of a run of the same token
 *    at that position; a second call chains (a run in between ends the chain:
 *    the first draft's bits again); the sequence's state and pages are the
 *    same bytes after drafts, and its next runs give the bits of a twin
 *    sequence that never drafted; drafts of three sequences in one call are
 *    the bits of each alone (chained too); bad calls are refused with
 *    nothing changed. */
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"
#include "engine/model/deepseek4/forward.h"
#include "engine/model/deepseek4/model.h"
#include "engine/model/gguf.h"
#include "kernels/cpu/pool.h"
#include "tests/model/model_test.h"

#define N_SEQ_TOK 200 /* past v4-tiny's window (16) and one HCA block (128); the indexer drops rows */
#define MAX_TOK 256

typedef struct rig {
    fg_gguf_t *g;
    fg_arch_model *am;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    fg_ds4_forward_t *f;
    int V;
} rig;

static void rig_open(rig *r, const char *file, fg_isa isa, fg_pool_t *pool)
{
    fg_diag d = {{0}};
    CHECK_MSG(fg_gguf_open_file(model_path(file), &r->g, &d) == FG_OK, "%s", d.msg);
    CHECK_MSG(fg_arch_load(r->g, &r->am, &d) == FG_OK, "%s", d.msg);
    CHECK(fg_deepseek4_of(r->am) && fg_deepseek4_of(r->am)->hp.n_nextn == 1);
    CHECK_MSG(r->am->arch->cache(r->am, FG_KV_FP8, &r->geo, &d) == FG_OK, "%s", d.msg);
    CHECK(fg_kv_store_create(&r->geo, (size_t)64 << 20, &r->kv, &d) == FG_OK);
    CHECK_MSG(fg_ds4_forward_create(fg_deepseek4_of(r->am), &r->geo, MAX_TOK, pool, isa, &r->f, &d) == FG_OK, "%s",
              d.msg);
    r->V = r->am->n_vocab;
}

static void rig_close(rig *r)
{
    fg_ds4_forward_destroy(r->f);
    fg_kv_store_destroy(r->kv);
    fg_arch_free(r->am);
    fg_gguf_close(r->g);
}

static fg_kv_seq *seq_new(rig *r, int n_tokens)
{
    fg_kv_seq *q = malloc(sizeof *q);
    CHECK(q && fg_kv_seq_init(q, 4096) == FG_OK && fg_kv_seq_reserve(r->kv, q, n_tokens) == FG_OK);
    return q;
}

static void seq_del(rig *r, fg_kv_seq *q)
{
    fg_kv_seq_free(r->kv, q);
    free(q);
}

/* n tokens through q, every logit (and MTP logit into mtp, NULL: none). */
static void run(rig *r, fg_kv_seq *q, const int32_t *tok, int n, float *logits, float *mtp)
{
    fg_diag d = {{0}};
    fg_fwd_seq fs = {.kv = q, .n_tokens = n, .n_logits = n, .logits = logits};
    fg_ds4_forward_set_mtp_out(r->f, mtp);
    CHECK_MSG(fg_ds4_forward_run(r->f, tok, &fs, 1, &d) == FG_OK, "%s", d.msg);
    fg_ds4_forward_set_mtp_out(r->f, NULL);
}

/* One draft call through the architecture's table: tok[i] for qs[i], logits [n][V]. */
static fg_err draft(rig *r, fg_kv_seq **qs, const int32_t *tok, int n, float *logits, fg_diag *d)
{
    fg_fwd_seq fs[4];
    for (int i = 0; i < n; i++)
        fs[i] = (fg_fwd_seq){.kv = qs[i], .n_tokens = 1, .n_logits = 1, .logits = logits + (size_t)i * r->V};
    return r->am->arch->forward_draft((fg_arch_forward_t *)(void *)r->f, tok, fs, n, d);
}

static bool same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* ---------------------------------------------------------------- 1. chunks and batches */

static void check_chunking(const char *file, fg_isa isa, fg_pool_t *pool)
{
    rig r;
    rig_open(&r, file, isa, pool);
    const size_t V = (size_t)r.V, N = N_SEQ_TOK;
    int32_t tok[N_SEQ_TOK], other[N_SEQ_TOK];
    test_tokens(tok, N_SEQ_TOK, r.V, 7);
    test_tokens(other, N_SEQ_TOK, r.V, 8);
    float *l1 = malloc(N * V * sizeof(float)), *m1 = malloc(N * V * sizeof(float));
    float *l2 = malloc(2 * N * V * sizeof(float)), *m2 = malloc(2 * N * V * sizeof(float));
    CHECK(l1 && m1 && l2 && m2);
    fg_kv_seq *q = seq_new(&r, N_SEQ_TOK);
    run(&r, q, tok, N_SEQ_TOK, l1, m1);
    seq_del(&r, q);
    const int chunks[] = {1, 5};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        q = seq_new(&r, N_SEQ_TOK);
        for (int at = 0; at < N_SEQ_TOK; at += chunks[c]) {
            const int k = N_SEQ_TOK - at < chunks[c] ? N_SEQ_TOK - at : chunks[c];
            run(&r, q, tok + at, k, l2 + (size_t)at * V, m2 + (size_t)at * V);
        }
        seq_del(&r, q);
        const float dl = max_abs_diff(l1, l2, N * V), dm = max_abs_diff(m1, m2, N * V);
        CHECK_MSG(same(l1, l2, N * V) && same(m1, m2, N * V),
                  "%s, isa %d: chunks of %d vs one pass: logits max |d| %g, MTP %g (want the same bits)", file,
                  (int)isa, chunks[c], (double)dl, (double)dm);
    }
    /* chunks of 3 beside another sequence's chunks of 4 (its prompt, then the batch's rows in order) */
    fg_kv_seq *a = seq_new(&r, N_SEQ_TOK), *b = seq_new(&r, N_SEQ_TOK);
    float *lb = l2 + N * V; /* the other sequence's logits (not compared) */
    float *mtp = malloc(7 * V * sizeof(float));
    CHECK(mtp != NULL);
    for (int at = 0, bt = 0; at < N_SEQ_TOK;) {
        const int ka = N_SEQ_TOK - at < 3 ? N_SEQ_TOK - at : 3, kb = N_SEQ_TOK - bt < 4 ? N_SEQ_TOK - bt : 4;
        int32_t btok[7];
        fg_fwd_seq fs[2];
        int n = 0;
        if (kb) {
            memcpy(btok, other + bt, sizeof(int32_t) * (size_t)kb);
            fs[n++] = (fg_fwd_seq){.kv = b, .n_tokens = kb, .n_logits = kb, .logits = lb + (size_t)bt * V};
        }
        memcpy(btok + kb, tok + at, sizeof(int32_t) * (size_t)ka);
        fs[n++] = (fg_fwd_seq){.kv = a, .n_tokens = ka, .n_logits = ka, .logits = l2 + (size_t)at * V};
        fg_diag d = {{0}};
        fg_ds4_forward_set_mtp_out(r.f, mtp);
        CHECK_MSG(fg_ds4_forward_run(r.f, btok, fs, n, &d) == FG_OK, "%s", d.msg);
        fg_ds4_forward_set_mtp_out(r.f, NULL);
        memcpy(m2 + (size_t)at * V, mtp + (size_t)kb * V, (size_t)ka * V * sizeof(float));
        at += ka;
        bt += kb;
    }
    free(mtp);
    seq_del(&r, a);
    seq_del(&r, b);
    CHECK_MSG(same(l1, l2, N * V) && same(m1, m2, N * V),
              "%s, isa %d: in a batch beside another sequence vs alone: logits max |d| %g, MTP %g", file, (int)isa,
              (double)max_abs_diff(l1, l2, N * V), (double)max_abs_diff(m1, m2, N * V));
    printf("%s, isa %d: chunks of 1, 5 and batched vs one pass: checked\n", file, (int)isa);
    free(l1);
    free(m1);
    free(l2);
    free(m2);
    rig_close(&r);
}

/* ---------------------------------------------------------------- 2. drafts */

/* The bytes of q's state and pages, for comparing before and after. */
static uint8_t *snapshot(const rig *r, const fg_kv_seq *q, size_t *n)
{
    *n = r->geo.seq_bytes + (size_t)q->n_pages * r->geo.page_bytes;
    uint8_t *s = malloc(*n);
    CHECK(s != NULL);
    memcpy(s, q->state, r->geo.seq_bytes);
    for (int p = 0; p < q->n_pages; p++)
        memcpy(s + r->geo.seq_bytes + (size_t)p * r->geo.page_bytes, q->pages[p], r->geo.page_bytes);
    return s;
}

static void check_drafts(const char *file, fg_isa isa, fg_pool_t *pool)
{
    rig r;
    rig_open(&r, file, isa, pool);
    const size_t V = (size_t)r.V;
    const int P = 150;
    int32_t tok[N_SEQ_TOK];
    test_tokens(tok, N_SEQ_TOK, r.V, 11);
    float *lg = malloc((size_t)P * V * sizeof(float)), *d1 = malloc(V * sizeof(float)), *d2 = malloc(V * sizeof(float));
    float *x = malloc(4 * V * sizeof(float)), *la = malloc(V * sizeof(float)), *ma = malloc(V * sizeof(float));
    float *lb = malloc(V * sizeof(float)), *mb = malloc(V * sizeof(float));
    CHECK(lg && d1 && d2 && x && la && ma && lb && mb);
    fg_diag d = {{0}};
    /* a drafts, its twin b never does */
    fg_kv_seq *a = seq_new(&r, P + 1), *b = seq_new(&r, P + 8), *c = seq_new(&r, 8);
    run(&r, a, tok, P, lg, NULL);
    run(&r, b, tok, P, lg, NULL);
    const int32_t t = fg_argmax(lg + (size_t)(P - 1) * V, r.V);
    size_t n0, n1;
    uint8_t *before = snapshot(&r, a, &n0);
    CHECK(draft(&r, &a, &t, 1, d1, &d) == FG_OK);
    const int32_t t2 = fg_argmax(d1, r.V);
    CHECK(draft(&r, &a, &t2, 1, d2, &d) == FG_OK); /* chained: position P + 1, no page there yet */
    CHECK(!same(d1, d2, V));
    uint8_t *after = snapshot(&r, a, &n1);
    CHECK_MSG(a->n_tokens == P && n0 == n1 && !memcmp(before, after, n0), "%s: drafts wrote the sequence", file);
    free(after);
    /* a run (of another sequence) ends the chain: the first draft again, then its chain again */
    run(&r, c, tok, 1, lg, NULL);
    CHECK(draft(&r, &a, &t, 1, x, &d) == FG_OK && same(x, d1, V));
    CHECK(draft(&r, &a, &t2, 1, x, &d) == FG_OK && same(x, d2, V));
    after = snapshot(&r, a, &n1);
    CHECK(!memcmp(before, after, n0));
    free(after);
    free(before);
    /* the run of t gives the draft's bits as its MTP logits, and the twin's bits */
    CHECK(fg_kv_seq_reserve(r.kv, a, P + 8) == FG_OK);
    run(&r, a, &t, 1, la, ma);
    run(&r, b, &t, 1, lb, mb);
    CHECK_MSG(same(ma, d1, V), "%s: the draft is not the run's MTP logits (max |d| %g)", file,
              (double)max_abs_diff(ma, d1, V));
    CHECK(same(la, lb, V) && same(ma, mb, V) && !memcmp(a->state, b->state, r.geo.seq_bytes));
    /* drafts again, then both go on with t2 and one more token: the same bits */
    CHECK(draft(&r, &a, &t2, 1, x, &d) == FG_OK);
    const int32_t t3 = fg_argmax(x, r.V);
    CHECK(draft(&r, &a, &t3, 1, x, &d) == FG_OK);
    const int32_t two[2] = {t2, t3};
    float l2a[2 * 1024], l2b[2 * 1024], m2a[2 * 1024], m2b[2 * 1024];
    CHECK(V <= 1024);
    run(&r, a, two, 2, l2a, m2a);
    run(&r, b, two, 2, l2b, m2b);
    CHECK(same(l2a, l2b, 2 * V) && same(m2a, m2b, 2 * V) && !memcmp(a->state, b->state, r.geo.seq_bytes));

    /* three sequences drafting in one call (two chained calls) vs each alone */
    fg_kv_seq *qs[3] = {a, b, c};
    const int32_t t1s[3] = {5, 6, 7}, t2s[3] = {8, 9, 10};
    float *bat1 = malloc(3 * V * sizeof(float)), *bat2 = malloc(3 * V * sizeof(float));
    CHECK(bat1 && bat2);
    CHECK_MSG(draft(&r, qs, t1s, 3, bat1, &d) == FG_OK, "%s", d.msg);
    CHECK_MSG(draft(&r, qs, t2s, 3, bat2, &d) == FG_OK, "%s", d.msg);
    fg_kv_seq *dummy = seq_new(&r, 1);
    for (int i = 0; i < 3; i++) {
        CHECK(fg_kv_seq_reserve(r.kv, dummy, 1) == FG_OK);
        run(&r, dummy, tok, 1, lg, NULL); /* ends the chains */
        fg_kv_seq_truncate(r.kv, dummy, 0);
        CHECK(draft(&r, &qs[i], &t1s[i], 1, x, &d) == FG_OK);
        CHECK_MSG(same(x, bat1 + (size_t)i * V, V), "%s: sequence %d's draft in a batch of 3 differs (max |d| %g)",
                  file, i, (double)max_abs_diff(x, bat1 + (size_t)i * V, V));
        CHECK(draft(&r, &qs[i], &t2s[i], 1, x, &d) == FG_OK);
        CHECK_MSG(same(x, bat2 + (size_t)i * V, V), "%s: sequence %d's chained draft in a batch of 3 differs", file, i);
    }
    seq_del(&r, dummy);

    /* refused, nothing changed: two tokens, the same sequence twice, a bad token id */
    before = snapshot(&r, a, &n0);
    fg_fwd_seq two_tok = {.kv = a, .n_tokens = 2, .n_logits = 1, .logits = x};
    CHECK(r.am->arch->forward_draft((fg_arch_forward_t *)(void *)r.f, two, &two_tok, 1, &d) == FG_ERR_INVALID_ARG);
    fg_kv_seq *twice[2] = {a, a};
    CHECK(draft(&r, twice, two, 2, x, &d) == FG_ERR_INVALID_ARG);
    const int32_t badtok = r.V;
    CHECK(draft(&r, &a, &badtok, 1, x, &d) == FG_ERR_TOKEN_ID);
    after = snapshot(&r, a, &n1);
    CHECK(n0 == n1 && !memcmp(before, after, n0));
    free(before);
    free(after);
    printf("%s, isa %d: drafts: checked\n", file, (int)isa);
    seq_del(&r, a);
    seq_del(&r, b);
    seq_del(&r, c);
    free(bat1);
    free(bat2);
    free(lg);
    free(d1);
    free(d2);
    free(x);
    free(la);
    free(ma);
    free(lb);
    free(mb);
    rig_close(&r);
}

int main(void)
{
    fg_pool_t *pool = fg_pool_create(2);
    CHECK(pool != NULL);
    const char *files[] = {"v4-tiny.gguf", "v4-tiny-mxfp4.gguf"};
    /* the scalar reference, and AVX-512 where the CPU has it (the ISA whose products are batch-invariant,
     * kernels/cpu/matmul.h; AVX2's f32 and Q8_0 products are not) */
    const fg_isa isas[] = {FG_ISA_SCALAR, FG_ISA_AVX512};
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        if (!fg_isa_supported(isas[k])) {
            printf("isa %d: not on this CPU, skipped\n", (int)isas[k]);
            continue;
        }
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            check_chunking(files[i], isas[k], pool);
            check_drafts(files[i], isas[k], pool);
        }
    }
    fg_pool_destroy(pool);
    return TEST_DONE("test_ds4_draft");
}
