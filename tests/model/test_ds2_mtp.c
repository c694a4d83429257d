/* deepseek2's MTP block (nextn) through the forward pass (forward.h):
 *   - tiny.gguf has none (n_layer_run 4, drafts refused); tiny-mtp.gguf (the
 *     same seed, so the same trunk tensors) has one: 4 trunk layers, 5 run,
 *     a cache of 5 layers, and trunk logits bit for bit tiny.gguf's;
 *   - a draft equals the MTP row a run computes at that position, bit for
 *     bit (one sequence, a one-token run; F32 and F16 caches; mid-page, at a
 *     page's last row and a new page's first), and within float rounding
 *     for three sequences drafted in one call;
 *   - drafts change no cache byte and no length, and the next run gives what
 *     a twin sequence that never drafted gets, bit for bit;
 *   - a chained draft reads the draft before; after a verify run of three
 *     tokens cut back to two, a draft from the kept hidden equals a twin's
 *     run that took those two tokens (within float rounding: another batch
 *     shape);
 *   - errors: no kept hidden (a fresh forward) is FG_ERR_STATE, too many
 *     chained drafts and bad arguments FG_ERR_INVALID_ARG, nothing changed.
 */
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/deepseek2/forward.h"
#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "tests/model/model_test.h"

#define P 40 /* prompt tokens */
#define T 64 /* max batch */

typedef struct env {
    fg_gguf_t *g;
    fg_model *m;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    fg_forward_t *f;
    int V;
} env;

static void env_open(env *e, const char *file, fg_kv_format fmt, fg_pool_t *pool)
{
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path(file), &e->g, &d) != FG_OK || fg_model_load(e->g, &e->m, &d) != FG_OK) {
        fprintf(stderr, "%s: %s\n", file, d.msg);
        exit(1);
    }
    e->V = e->m->hp.n_vocab;
    CHECK(fg_kv_geometry_init(&e->geo, &e->m->hp, fmt, &d) == FG_OK);
    CHECK(fg_kv_store_create(&e->geo, (size_t)64 << 20, &e->kv, &d) == FG_OK);
    CHECK(fg_forward_create(e->m, &e->geo, T, pool, FG_ISA_AUTO, &e->f, &d) == FG_OK);
}

static void env_close(env *e)
{
    fg_forward_destroy(e->f);
    fg_kv_store_destroy(e->kv);
    fg_model_free(e->m);
    fg_gguf_close(e->g);
}

static fg_kv_seq new_seq(env *e, int n)
{
    fg_kv_seq s;
    CHECK(fg_kv_seq_init(&s, 4096) == FG_OK);
    CHECK(fg_kv_seq_reserve(e->kv, &s, n) == FG_OK);
    return s;
}

/* Runs n tokens of one sequence: every row's trunk logits into logits, MTP rows into mtp (NULL: none). */
static void run(env *e, fg_kv_seq *s, const int32_t *tok, int n, float *logits, float *mtp)
{
    fg_diag d = {{0}};
    fg_fwd_seq one = {.kv = s, .n_tokens = n, .n_logits = n, .logits = logits, .absorbed = n < 32};
    fg_forward_set_mtp_out(e->f, mtp);
    CHECK_MSG(fg_forward_run(e->f, tok, &one, 1, &d) == FG_OK, "%s", d.msg);
    fg_forward_set_mtp_out(e->f, NULL);
}

static fg_err draft(env *e, fg_kv_seq *s, int32_t tok, float *logits, fg_diag *d)
{
    fg_fwd_seq one = {.kv = s, .n_tokens = 1, .n_logits = 1, .logits = logits, .absorbed = true};
    return fg_forward_draft(e->f, &tok, &one, 1, d);
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        b = x[i] > x[b] ? i : b;
    return b;
}

/* A copy of every page byte of s. */
static uint8_t *snapshot(const env *e, const fg_kv_seq *s)
{
    uint8_t *c = malloc((size_t)s->n_pages * e->geo.page_bytes);
    for (int i = 0; i < s->n_pages; i++)
        memcpy(c + (size_t)i * e->geo.page_bytes, s->pages[i], e->geo.page_bytes);
    return c;
}

static bool same_pages(const env *e, const fg_kv_seq *s, const uint8_t *c)
{
    for (int i = 0; i < s->n_pages; i++)
        if (memcmp(c + (size_t)i * e->geo.page_bytes, s->pages[i], e->geo.page_bytes) != 0)
            return false;
    return true;
}

/* Loading: with and without the block, the trunk unchanged by it. */
static void check_load(fg_pool_t *pool)
{
    env a, b;
    env_open(&a, "tiny.gguf", FG_KV_F32, pool);
    env_open(&b, "tiny-mtp.gguf", FG_KV_F32, pool);
    CHECK(a.m->hp.n_nextn == 0 && a.m->base.n_layer == 4 && a.m->base.n_layer_run == 4 && a.geo.n_layer == 4);
    CHECK(b.m->hp.n_nextn == 1 && b.m->base.n_layer == 4 && b.m->base.n_layer_run == 5 && b.geo.n_layer == 5);
    CHECK(b.m->mtp.head.data == b.m->output.data && b.m->mtp.embd.data == b.m->tok_embd.data);
    CHECK(b.m->mtp.head_norm != b.m->output_norm); /* the generator writes shared_head_norm */
    CHECK(b.m->base.weight_bytes_total > a.m->base.weight_bytes_total);
    /* arch.h: forward_draft is NULL for a model without the block */
    CHECK(a.m->base.arch->forward_draft == NULL && b.m->base.arch->forward_draft != NULL);
    CHECK(fg_deepseek2_of(&a.m->base) == a.m && fg_deepseek2_of(&b.m->base) == b.m);
    CHECK(fg_arch_deepseek2.layer_experts(&b.m->base, 4, &(fg_arch_experts){0}));
    CHECK(!fg_arch_deepseek2.layer_experts(&a.m->base, 4, &(fg_arch_experts){0}));

    int32_t tok[P + 4];
    test_tokens(tok, P + 4, a.V, 7);
    fg_kv_seq sa = new_seq(&a, P + 4), sb = new_seq(&b, P + 4);
    float *la = malloc(sizeof(float) * (P + 4) * a.V), *lb = malloc(sizeof(float) * (P + 4) * a.V);
    float *mb = malloc(sizeof(float) * (P + 4) * a.V);
    run(&a, &sa, tok, P, la, NULL);
    run(&b, &sb, tok, P, lb, mb);
    for (int i = 0; i < 4; i++) {
        run(&a, &sa, tok + P + i, 1, la + (size_t)(P + i) * a.V, NULL);
        run(&b, &sb, tok + P + i, 1, lb + (size_t)(P + i) * a.V, mb + (size_t)(P + i) * a.V);
    }
    CHECK_MSG(memcmp(la, lb, sizeof(float) * (P + 4) * a.V) == 0, "the MTP block changed the trunk's logits");
    float mx = 0;
    for (size_t i = 0; i < (size_t)(P + 4) * a.V; i++) {
        CHECK(isfinite(mb[i]));
        mx = fabsf(mb[i]) > mx ? fabsf(mb[i]) : mx;
    }
    CHECK(mx > 0.1f); /* the MTP logits were written */

    fg_diag d = {{0}};
    float tmp[1024];
    CHECK(a.V <= 1024);
    CHECK(draft(&a, &sa, tok[0], tmp, &d) == FG_ERR_UNSUPPORTED);
    CHECK(strstr(d.msg, "MTP") != NULL);
    fg_kv_seq_free(a.kv, &sa);
    fg_kv_seq_free(b.kv, &sb);
    free(la);
    free(lb);
    free(mb);
    env_close(&a);
    env_close(&b);
}

/* A draft is the run's MTP row; drafts leave the caches as they were. */
static void check_draft(fg_pool_t *pool, fg_kv_format fmt)
{
    env e;
    env_open(&e, "tiny-mtp.gguf", fmt, pool);
    const int V = e.V;
    fg_diag d = {{0}};
    int32_t tok[80];
    test_tokens(tok, P + 8, V, 11);
    float *lg = malloc(sizeof(float) * (P + 8) * V), *mtp = malloc(sizeof(float) * (P + 8) * V);
    float *d1 = malloc(sizeof(float) * V), *d2 = malloc(sizeof(float) * V), *again = malloc(sizeof(float) * V);
    fg_kv_seq a = new_seq(&e, P + 8), twin = new_seq(&e, P + 8);
    run(&e, &a, tok, P, lg, NULL);
    run(&e, &twin, tok, P, lg, NULL);

    /* drafts: the cache untouched, chained reads the draft before, repeatable */
    uint8_t *before = snapshot(&e, &a);
    CHECK_MSG(draft(&e, &a, tok[P], d1, &d) == FG_OK, "%s", d.msg);
    const int32_t a1 = argmax(d1, V);
    CHECK_MSG(draft(&e, &a, a1, d2, &d) == FG_OK, "%s", d.msg);
    CHECK(a.n_tokens == P && same_pages(&e, &a, before));
    CHECK(memcmp(d1, d2, sizeof(float) * V) != 0);
    for (int k = 2; k < FG_DS2_MAX_DRAFTS; k++)
        CHECK(draft(&e, &a, a1, again, &d) == FG_OK);
    CHECK(draft(&e, &a, a1, again, &d) == FG_ERR_INVALID_ARG); /* one more than FG_DS2_MAX_DRAFTS */
    CHECK(strstr(d.msg, "chained") != NULL);
    a.n_tokens--; /* a cache cut between drafts, with no run: its drafts are refused */
    CHECK(draft(&e, &a, a1, again, &d) == FG_ERR_STATE);
    a.n_tokens++;
    CHECK(a.n_tokens == P && same_pages(&e, &a, before));
    free(before);

    /* the next run: the draft's row exactly, and the twin's results exactly */
    float *tw = malloc(sizeof(float) * V), *twm = malloc(sizeof(float) * V);
    run(&e, &a, tok + P, 1, lg, mtp);
    run(&e, &twin, tok + P, 1, tw, twm);
    CHECK_MSG(memcmp(mtp, d1, sizeof(float) * V) == 0, "draft != the run's MTP row (max %g)",
              max_abs_diff(mtp, d1, (size_t)V));
    CHECK(memcmp(lg, tw, sizeof(float) * V) == 0 && memcmp(mtp, twm, sizeof(float) * V) == 0);

    /* a verify run of three tokens, cut back to two (one draft accepted):
     * the draft after it reads the kept hidden of the second, as a twin that
     * ran just those two does (another batch shape: float rounding) */
    int32_t v3[3] = {tok[P + 1], tok[P + 2], tok[P + 3]};
    run(&e, &a, v3, 3, lg, NULL);
    fg_kv_seq_truncate(e.kv, &a, P + 3);
    run(&e, &twin, v3, 2, lg, NULL);
    CHECK(a.n_tokens == twin.n_tokens);
    CHECK_MSG(draft(&e, &a, tok[P + 5], d1, &d) == FG_OK, "%s", d.msg);
    CHECK(fg_kv_seq_reserve(e.kv, &a, P + 4) == FG_OK);
    run(&e, &twin, tok + P + 5, 1, lg, mtp);
    CHECK_MSG(max_abs_diff(d1, mtp, (size_t)V) < 1e-4f, "draft after a rollback: max %g",
              max_abs_diff(d1, mtp, (size_t)V));

    /* three sequences in one draft call, each against its own run */
    fg_kv_seq s3[3];
    int32_t next[3];
    float *dl = malloc(sizeof(float) * 3 * V);
    fg_fwd_seq fs[3];
    for (int i = 0; i < 3; i++) {
        s3[i] = new_seq(&e, P + 8);
        test_tokens(tok, P + 1, V, 100 + (unsigned)i);
        run(&e, &s3[i], tok, 5 + 11 * i, lg, NULL);
        next[i] = tok[5 + 11 * i];
        fs[i] = (fg_fwd_seq){.kv = &s3[i], .n_tokens = 1, .n_logits = 1, .logits = dl + (size_t)i * V,
                             .absorbed = true};
    }
    CHECK_MSG(fg_forward_draft(e.f, next, fs, 3, &d) == FG_OK, "%s", d.msg);
    fs[1].kv = &s3[0];
    CHECK(fg_forward_draft(e.f, next, fs, 3, &d) == FG_ERR_INVALID_ARG); /* one sequence twice */
    fs[1].kv = &s3[1];
    for (int i = 0; i < 3; i++) {
        run(&e, &s3[i], next + i, 1, lg, mtp);
        CHECK_MSG(max_abs_diff(dl + (size_t)i * V, mtp, (size_t)V) < 1e-4f, "batched draft %d: max %g", i,
                  max_abs_diff(dl + (size_t)i * V, mtp, (size_t)V));
    }

    /* at page ends: a first draft at the last row of a page (63 rows copied)
     * and at the first row of a new one (64), each against the run's row; a
     * chained one from 63 crosses into the next page */
    for (int len = 63; len <= 64; len++) {
        fg_kv_seq q = new_seq(&e, len + 2);
        test_tokens(tok, len + 2, V, 200 + (unsigned)len);
        run(&e, &q, tok, 40, lg, NULL);
        run(&e, &q, tok + 40, len - 40, lg, NULL);
        CHECK_MSG(draft(&e, &q, tok[len], d1, &d) == FG_OK, "%s", d.msg);
        CHECK(draft(&e, &q, (int32_t)argmax(d1, V), d2, &d) == FG_OK);
        for (int i = 0; i < V; i++)
            CHECK(isfinite(d2[i]));
        run(&e, &q, tok + len, 1, lg, mtp);
        CHECK_MSG(memcmp(mtp, d1, sizeof(float) * V) == 0, "draft at %d != the run's MTP row (max %g)", len,
                  max_abs_diff(mtp, d1, (size_t)V));
        fg_kv_seq_free(e.kv, &q);
    }

    /* bad arguments; a forward that did not run the sequence keeps no hidden */
    int32_t bad = V;
    CHECK(draft(&e, &a, bad, d1, &d) == FG_ERR_TOKEN_ID);
    fg_fwd_seq two = {.kv = &a, .n_tokens = 2, .n_logits = 1, .logits = d1};
    CHECK(fg_forward_draft(e.f, tok, &two, 1, &d) == FG_ERR_INVALID_ARG);
    fg_forward_t *fresh;
    CHECK(fg_forward_create(e.m, &e.geo, T, pool, FG_ISA_AUTO, &fresh, &d) == FG_OK);
    fg_fwd_seq one = {.kv = &a, .n_tokens = 1, .n_logits = 1, .logits = d1};
    CHECK(fg_forward_draft(fresh, tok, &one, 1, &d) == FG_ERR_STATE);
    CHECK(strstr(d.msg, "hidden") != NULL);
    fg_forward_destroy(fresh);

    for (int i = 0; i < 3; i++)
        fg_kv_seq_free(e.kv, &s3[i]);
    fg_kv_seq_free(e.kv, &a);
    fg_kv_seq_free(e.kv, &twin);
    free(dl);
    free(tw);
    free(twm);
    free(lg);
    free(mtp);
    free(d1);
    free(d2);
    free(again);
    env_close(&e);
}

int main(void)
{
    fg_pool_t *pool = fg_pool_create(2);
    check_load(pool);
    check_draft(pool, FG_KV_F32);
    check_draft(pool, FG_KV_F16);
    fg_pool_destroy(pool);
    return TEST_DONE("test_ds2_mtp");
}
