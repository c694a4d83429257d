/* fg_session_truncate on the tiny model (F32 cache):
 *  - direct mode: a cache cut back mid-page and fed other tokens gives the
 *    logits of a run that never had the cut tokens, bit for bit (memcmp);
 *  - serving mode, prefix cache on: a session cut mid-page inside pages that
 *    a fork and the prefix cache hold, then fed new input, answers with the
 *    tokens of a fresh session sent only the kept head and the new input
 *    (cached_tokens: the kept head), its queued sampled token dropped; the
 *    fork and a new session taking those pages from the prefix cache answer
 *    as if no cut had happened (their pages were copied, never written); a
 *    cut during a response is refused (busy);
 *  - a session whose KV is on disk is cut in place and continues the same;
 *  - deepseek4 (v4-tiny): a cut inside the cache is refused (unsupported)
 *    and leaves the session as it was; cuts at 0 and past the end work.
 * References run on a second engine without the prefix cache.
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/cpu/mla_attn.h" /* FG_KV_PAGE_TOKENS */
#include "tests/model/model_test.h"

static fg_engine_t *serving(const char *file, bool prefix, const char *dir, double idle_spill)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path(file);
    o.kv_format = FG_KV_F32;
    o.max_batch_tokens = 256;
    o.prefill_chunk = 128;
    o.n_threads = 2;
    o.kv_budget_bytes = (size_t)64 << 20;
    o.serve = true;
    o.prefix_cache = prefix;
    o.persist_dir = dir;
    o.idle_spill_seconds = idle_spill;
    return open_engine_with(&o);
}

static void fill(int32_t *t, int n, int n_vocab, uint32_t seed)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((seed + 2654435761u * (uint32_t)(i + 1)) % (uint32_t)(n_vocab - 8)) + 4;
}

enum { NP = 130, KEEP = 100, NQ = 70, NX = 50, NZ = 20 };
static int32_t P[NP], Q[NQ], X[NX], Z[NZ];

/* ---- 1. direct mode: logits after a cut and a refeed are a straight run's ---- */

static void test_direct(int V)
{
    fg_engine_t *e = open_engine("tiny.gguf", FG_KV_F32, 256, 2);
    fg_session_t *a = NULL, *b = NULL;
    CHECK(fg_session_create(e, NULL, &a) == FG_OK && fg_session_create(e, NULL, &b) == FG_OK);
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    fg_diag d = {{0}};
    /* a: the head, tokens that are cut again, the new tokens; b: the head and the new tokens */
    CHECK(fg_session_eval(a, P, KEEP, NULL, false, &d) == FG_OK);
    CHECK(fg_session_eval(a, X, NX, NULL, false, &d) == FG_OK);
    CHECK(fg_session_truncate(a, KEEP, &d) == FG_OK && fg_session_length(a) == KEEP);
    CHECK(fg_session_truncate(a, 5000, &d) == FG_OK && fg_session_length(a) == KEEP); /* past the end: kept */
    CHECK(fg_session_truncate(a, -1, &d) == FG_ERR_INVALID_ARG);
    CHECK(fg_session_eval(a, Q, NQ, la, false, &d) == FG_OK);
    CHECK(fg_session_eval(b, P, KEEP, NULL, false, &d) == FG_OK);
    CHECK(fg_session_eval(b, Q, NQ, lb, false, &d) == FG_OK);
    CHECK_MSG(memcmp(la, lb, (size_t)V * sizeof *la) == 0, "logits after the cut differ by %g",
              (double)max_abs_diff(la, lb, (size_t)V));
    free(la);
    free(lb);
    fg_session_free(a);
    fg_session_free(b);
    fg_engine_close(e);
}

/* ---- 2. serving: shared and listed pages are copied, never written ---- */

static void test_serving(void)
{
    fg_engine_t *e = serving("tiny.gguf", true, NULL, 0), *ref = serving("tiny.gguf", false, NULL, 0);
    fg_diag d = {{0}};
    /* s: the prompt, a turn (its sampled token queued), then forked */
    fg_session_t *s = fg_test_session(e, NULL, NULL);
    fg_test_turn t0 = fg_test_turn_run(s, P, NP, 4);
    fg_session_params fp = {.weight = 1};
    fg_session_t *f = NULL;
    CHECK(fg_session_fork(s, &fp, &f, &d) == FG_OK);
    /* cut inside page 1, which the fork and the prefix cache hold */
    CHECK_MSG(fg_session_truncate(s, KEEP, &d) == FG_OK, "truncate: %s", d.msg);
    CHECK(fg_session_length(s) == KEEP);
    CHECK(fg_session_room(s) == fg_session_room(f) + (fg_session_length(f) + 1 - KEEP)); /* its queue went too */
    fg_test_turn ts = fg_test_turn_run(s, Q, NQ, 8);
    CHECK_MSG(ts.last.usage.cached_tokens == KEEP, "cached %lld", (long long)ts.last.usage.cached_tokens);
    /* the straight run: the kept head and the new input, nothing else */
    int32_t pq[KEEP + NQ];
    memcpy(pq, P, KEEP * sizeof *P);
    memcpy(pq + KEEP, Q, NQ * sizeof *Q);
    fg_session_t *r = fg_test_session(ref, NULL, NULL);
    fg_test_turn tr = fg_test_turn_run(r, pq, KEEP + NQ, 8);
    CHECK_MSG(fg_test_turn_same(&ts, &tr), "the cut session answers as a session sent only the head and the new input");
    fg_session_free(r);
    /* the fork and a session taking the listed pages answer as the uncut session would */
    r = fg_test_session(ref, NULL, NULL);
    fg_test_turn u0 = fg_test_turn_run(r, P, NP, 4);
    CHECK(fg_test_turn_same(&u0, &t0));
    fg_test_turn ur = fg_test_turn_run(r, Z, NZ, 8);
    fg_test_turn tf = fg_test_turn_run(f, Z, NZ, 8);
    CHECK_MSG(fg_test_turn_same(&tf, &ur), "the fork's shared pages are untouched by the cut session's writes");
    fg_session_t *g = fg_test_session(e, NULL, NULL);
    fg_test_turn tg = fg_test_turn_run(g, P, NP, 4);
    CHECK_MSG(tg.last.usage.cached_tokens >= 2 * FG_KV_PAGE_TOKENS, "g took the listed pages (cached %lld)",
              (long long)tg.last.usage.cached_tokens);
    CHECK_MSG(fg_test_turn_same(&tg, &t0), "the prefix cache's pages are untouched by the cut session's writes");
    /* refused during a response */
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = 8, .generate = true};
    CHECK(fg_session_append(g, Z, NZ, &d) == FG_OK && fg_session_respond(g, &p, NULL, &d) == FG_OK);
    CHECK(fg_session_truncate(g, 10, &d) == FG_ERR_BUSY);
    fg_session_free(g);
    fg_session_free(r);
    fg_session_free(f);
    fg_session_free(s);
    fg_engine_close(e);
    fg_engine_close(ref);
}

/* ---- 3. a session on disk is cut in place ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(path);
}

static void test_on_disk(void)
{
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/fg_test_truncate.%d", (int)getpid());
    mkdir(dir, 0755);
    fg_engine_t *e = serving("tiny.gguf", true, dir, 0.2), *ref = serving("tiny.gguf", false, NULL, 0);
    fg_diag d = {{0}};
    fg_session_t *s = fg_test_session(e, NULL, "cut-on-disk");
    fg_test_turn_run(s, P, NP, 4);
    bool spilled = false;
    for (double t0 = fg_clock_mono_s(); !spilled && fg_clock_mono_s() - t0 < 60; usleep(2000))
        spilled = fg_session_on_disk(s);
    CHECK(spilled);
    CHECK_MSG(fg_session_truncate(s, KEEP, &d) == FG_OK, "truncate on disk: %s", d.msg);
    CHECK(fg_session_length(s) == KEEP && fg_session_on_disk(s));
    CHECK_MSG(fg_session_save(s, &d) == FG_OK, "the file rewritten from itself: %s", d.msg);
    fg_test_turn ts = fg_test_turn_run(s, Q, NQ, 8);
    int32_t pq[KEEP + NQ];
    memcpy(pq, P, KEEP * sizeof *P);
    memcpy(pq + KEEP, Q, NQ * sizeof *Q);
    fg_session_t *r = fg_test_session(ref, NULL, NULL);
    fg_test_turn tr = fg_test_turn_run(r, pq, KEEP + NQ, 8);
    CHECK_MSG(ts.last.usage.cached_tokens == KEEP && fg_test_turn_same(&ts, &tr),
              "the session cut on disk continues (cached %lld)", (long long)ts.last.usage.cached_tokens);
    fg_session_delete(s);
    fg_session_free(r);
    fg_engine_close(e);
    fg_engine_close(ref);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* ---- 4. deepseek4: its state cannot be rewound ---- */

static void test_v4(void)
{
    fg_engine_options o;
    v4_test_options(&o, true);
    fg_engine_t *e = open_engine_with(&o);
    fg_engine_info info;
    fg_engine_get_info(e, &info);
    int32_t p[40];
    fill(p, 40, info.n_vocab, 7);
    fg_diag d = {{0}};
    fg_session_t *s = NULL, *r = NULL;
    CHECK(fg_session_create(e, NULL, &s) == FG_OK && fg_session_create(e, NULL, &r) == FG_OK);
    fg_test_turn t0 = fg_test_turn_run(s, p, 40, 4);
    const int len = fg_session_length(s);
    CHECK(fg_session_truncate(s, 20, &d) == FG_ERR_UNSUPPORTED && fg_session_length(s) == len);
    CHECK(fg_session_truncate(s, len, &d) == FG_OK && fg_session_length(s) == len); /* the queue only */
    CHECK(fg_session_truncate(s, 0, &d) == FG_OK && fg_session_length(s) == 0);
    fg_test_turn t1 = fg_test_turn_run(s, p, 40, 4);
    fg_test_turn t2 = fg_test_turn_run(r, p, 40, 4);
    CHECK(fg_test_turn_same(&t0, &t1) && fg_test_turn_same(&t1, &t2)); /* cut to nothing: as a fresh session */
    fg_session_free(s);
    fg_session_free(r);
    fg_engine_close(e);
}

int main(void)
{
    fg_engine_t *probe = open_engine("tiny.gguf", FG_KV_F32, 16, 1);
    fg_engine_info info;
    fg_engine_get_info(probe, &info);
    fg_engine_close(probe);
    fill(P, NP, info.n_vocab, 1);
    fill(Q, NQ, info.n_vocab, 2);
    fill(X, NX, info.n_vocab, 3);
    fill(Z, NZ, info.n_vocab, 4);
    test_direct(info.n_vocab);
    test_serving();
    test_on_disk();
    test_v4();
    fprintf(stderr, "test_truncate: %s (%d failures)\n", fg_test_failures ? "FAIL" : "ok", fg_test_failures);
    return fg_test_failures ? 1 : 0;
}
