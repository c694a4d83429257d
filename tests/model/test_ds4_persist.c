/* deepseek4 sessions on disk (issue 16 item 4), on v4-tiny:
 *
 * 1. Logits, below the engine (the architecture's forward and the store, as
 *    test_ds4_serve's part 1): a sequence of n tokens written as a session
 *    file (version 3: its pages as stored and its state), the store and the
 *    forward pass destroyed, fresh ones made, the file parsed and put back
 *    into a new sequence: the state's token count is n, and the logits of the
 *    next 64 greedy tokens are bit-identical (memcmp) to those of the
 *    sequence that never left, for the f32 and fp8 caches and histories that
 *    end inside a CSA block, on a page and HCA boundary, and past one.
 * 2. Serving, through the engine's disk tier: a named session saved
 *    (fg_session_save) and another by fg_engine_save_all, the engine closed
 *    and reopened, both restored: their next 64 greedy tokens equal those of
 *    sessions on an engine that never closed; an idle session spilled
 *    (idle_spill_seconds: its pages and state go back to the pool) and loaded
 *    back continues the same way; six sessions in a pool of about three
 *    spill under pressure and come back with the tokens of a large pool.
 * 3. Damage: a truncated file, bit flips in the pages and in the state, a
 *    file of another V4 model (v4-tiny-nohash), of another KV format (fp8)
 *    and of a deepseek2 engine each give their error and are moved aside,
 *    while a healthy file restores and a resident session goes on exactly.
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "engine/kv/kv_store.h"
#include "engine/kv/session_file.h"
#include "engine/model/arch.h"
#include "engine/model/deepseek4/cache.h"
#include "engine/model/gguf.h"
#include "tests/model/model_test.h"

#define NEXT 64 /* <= FG_TEST_TURN_MAX */

static char root[256];

/* ---------------------------------------------------------------- 1. logits */

/* Runs NEXT greedy tokens on q (holding n tokens, last logits in lg) into out[NEXT][V]. */
static void continue_greedy(const fg_arch *a, fg_arch_forward_t *f, fg_kv_store_t *kv, fg_kv_seq *q, int V,
                            float *lg, float *out)
{
    fg_diag d = {{0}};
    CHECK(fg_kv_seq_reserve(kv, q, q->n_tokens + NEXT) == FG_OK);
    for (int t = 0; t < NEXT; t++) {
        int32_t tok = fg_argmax(t ? out + (size_t)(t - 1) * V : lg, V);
        fg_fwd_seq p = {.kv = q, .n_tokens = 1, .n_logits = 1, .logits = out + (size_t)t * V};
        CHECK_MSG(a->forward_run(f, &tok, &p, 1, &d) == FG_OK, "%s", d.msg);
    }
}

static void check_logits(const fg_arch_model *m, fg_kv_format fmt, int n, fg_pool_t *pool)
{
    const fg_arch *a = m->arch;
    const int V = m->n_vocab;
    fg_diag d = {{0}};
    fg_kv_geometry geo;
    CHECK_MSG(a->cache(m, fmt, &geo, &d) == FG_OK, "%s", d.msg);
    int32_t tok[300];
    test_tokens(tok, n, V, 40 + (unsigned)n);
    float *lg = malloc(sizeof(float) * (size_t)V);
    float *want = malloc(sizeof(float) * (size_t)NEXT * V), *got = malloc(sizeof(float) * (size_t)NEXT * V);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/logits", root);

    /* the sequence that never leaves, written to a file after its n tokens */
    fg_kv_store_t *kv;
    fg_arch_forward_t *f;
    CHECK(fg_kv_store_create(&geo, (size_t)64 << 20, &kv, &d) == FG_OK);
    CHECK_MSG(a->forward_create(m, &geo, 512, pool, FG_ISA_AUTO, &f, &d) == FG_OK, "%s", d.msg);
    fg_kv_seq q;
    CHECK(fg_kv_seq_init(&q, 4096) == FG_OK && fg_kv_seq_reserve(kv, &q, n) == FG_OK);
    fg_fwd_seq p = {.kv = &q, .n_tokens = n, .n_logits = 1, .logits = lg};
    CHECK_MSG(a->forward_run(f, tok, &p, 1, &d) == FG_OK, "%s", d.msg);
    fg_sfile_content c = {.model_identity = m->identity, .arch = a->name, .tenant = "acme", .geo = &geo,
                          .tokens = tok, .n_tokens = n, .pages = q.pages, .state = q.state};
    CHECK_MSG(fg_sfile_write(dir, "s", &c, &d) == FG_OK, "%s", d.msg);
    continue_greedy(a, f, kv, &q, V, lg, want);
    fg_kv_seq_free(kv, &q);
    a->forward_destroy(f);
    fg_kv_store_destroy(kv);

    /* a fresh store and forward pass, the sequence from the file */
    CHECK(fg_kv_store_create(&geo, (size_t)64 << 20, &kv, &d) == FG_OK);
    CHECK_MSG(a->forward_create(m, &geo, 512, pool, FG_ISA_AUTO, &f, &d) == FG_OK, "%s", d.msg);
    char path[400];
    snprintf(path, sizeof path, "%s/s.fgs", dir);
    fg_sfile_expect ex = {.model_identity = m->identity, .arch = a->name, .geo = geo, .max_tokens = 4096,
                          .n_vocab = V};
    uint8_t *buf;
    size_t len;
    fg_sfile_view v;
    CHECK(fg_sfile_read(path, fg_sfile_max_size(&ex), &buf, &len, &d) == FG_OK);
    CHECK(len == fg_sfile_size(&geo, n, 0, 0));
    CHECK_MSG(fg_sfile_parse(buf, len, &ex, &v, &d) == FG_OK, "%s", d.msg);
    CHECK(v.version == FG_SFILE_VERSION_PAGES && v.n_tokens == n && v.state && v.state_len == geo.seq_bytes);
    CHECK(fg_kv_seq_init(&q, 4096) == FG_OK && fg_kv_seq_reserve(kv, &q, n) == FG_OK);
    for (int k = 0; k < q.n_pages; k++)
        memcpy(q.pages[k], fg_sfile_page(&v, &geo, k), geo.page_bytes);
    memcpy(q.state, v.state, geo.seq_bytes);
    q.n_tokens = n;
    CHECK(((const fg_ds4_state_head *)(const void *)q.state)->n_tokens == n);
    free(buf);
    continue_greedy(a, f, kv, &q, V, lg, got);
    CHECK_MSG(memcmp(got, want, sizeof(float) * (size_t)NEXT * V) == 0,
              "%s cache, %d tokens: the restored sequence's next %d logits differ from the uninterrupted one's",
              fg_kv_format_name(fmt), n, NEXT);
    fg_kv_seq_free(kv, &q);
    a->forward_destroy(f);
    fg_kv_store_destroy(kv);
    unlink(path);
    rmdir(dir);
    free(lg);
    free(want);
    free(got);
}

/* ---------------------------------------------------------------- 2. serving */

typedef struct eng_opts {
    const char *model;
    int kv_format;
    const char *dir;
    double idle_spill;
} eng_opts;

static fg_engine_t *open_e(eng_opts x)
{
    fg_engine_options o;
    v4_test_options(&o, true);
    if (x.model)
        o.model_path = model_path(x.model);
    if (x.kv_format)
        o.kv_format = x.kv_format;
    o.persist_dir = x.dir;
    o.idle_spill_seconds = x.idle_spill;
    return open_engine_with(&o);
}

static fg_session_t *restore(fg_engine_t *e, const char *name, fg_err want)
{
    fg_session_params p = {.weight = 1, .name = name, .tenant_name = "acme"};
    fg_session_t *s = NULL;
    fg_diag d = {{0}};
    fg_err err = fg_session_restore(e, &p, &s, &d);
    CHECK_MSG(err == want && (err == FG_OK) == (s != NULL), "restore %s: %s (%s), want %s", name, fg_err_name(err),
              d.msg, fg_err_name(want));
    if (err != FG_OK)
        CHECK_MSG(strstr(d.msg, name) != NULL, "the error names the session: %s", d.msg);
    return s;
}

static void path_of(char *out, size_t cap, const char *dir, const char *name, const char *suffix)
{
    snprintf(out, cap, "%s/acme/%s%s", dir, name, suffix);
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static const int32_t in2[5] = {7, 8, 9, 10, 11};

static void check_restart_and_spill(int n_vocab)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/serve", root);
    int32_t pa[150], pb[61];
    test_tokens(pa, 150, n_vocab, 11);
    test_tokens(pb, 61, n_vocab, 12);

    /* the references: sessions that never leave memory */
    fg_engine_t *e = open_e((eng_opts){0});
    fg_session_t *ra = fg_test_session(e, "acme", NULL), *rb = fg_test_session(e, "acme", NULL);
    fg_test_turn ra1 = fg_test_turn_run(ra, pa, 150, 6), ra2 = fg_test_turn_run(ra, in2, 5, NEXT);
    fg_test_turn rb1 = fg_test_turn_run(rb, pb, 61, 3), rb2 = fg_test_turn_run(rb, in2, 5, NEXT);
    CHECK(ra2.n == NEXT && rb2.n == NEXT);
    fg_session_free(ra);
    fg_session_free(rb);
    fg_engine_close(e);

    /* turn 1 of each; "alpha" saved by fg_session_save, "beta" by save_all; the engine closes */
    e = open_e((eng_opts){.dir = dir});
    fg_session_t *a = fg_test_session(e, "acme", "alpha"), *b = fg_test_session(e, "acme", "beta");
    fg_test_turn a1 = fg_test_turn_run(a, pa, 150, 6), b1 = fg_test_turn_run(b, pb, 61, 3);
    CHECK(fg_test_turn_same(&a1, &ra1) && fg_test_turn_same(&b1, &rb1));
    fg_diag d = {{0}};
    CHECK_MSG(fg_session_save(a, &d) == FG_OK, "%s", d.msg);
    CHECK_MSG(fg_engine_save_all(e, &d) == FG_OK, "%s", d.msg);
    char path[400];
    path_of(path, sizeof path, dir, "alpha", ".fgs");
    CHECK(exists(path));
    fg_session_free(a);
    fg_session_free(b);
    fg_engine_close(e);

    /* reopened: both restored; their next 64 tokens are the references' */
    e = open_e((eng_opts){.dir = dir});
    a = restore(e, "alpha", FG_OK);
    b = restore(e, "beta", FG_OK);
    if (a && b) {
        CHECK(fg_session_on_disk(a) && fg_session_on_disk(b));
        fg_test_turn a2 = fg_test_turn_run(a, in2, 5, NEXT), b2 = fg_test_turn_run(b, in2, 5, NEXT);
        CHECK_MSG(fg_test_turn_same(&a2, &ra2), "alpha after the restart: %d tokens, the reference's %d", a2.n, ra2.n);
        CHECK_MSG(fg_test_turn_same(&b2, &rb2), "beta after the restart: %d tokens, the reference's %d", b2.n, rb2.n);
        /* only the new input was evaluated: the history came from the file */
        CHECK_MSG(a2.last.usage.cached_tokens == ra2.last.usage.cached_tokens,
                  "alpha: %lld cached tokens, the reference %lld", (long long)a2.last.usage.cached_tokens,
                  (long long)ra2.last.usage.cached_tokens);
        fg_engine_stats st;
        fg_engine_get_stats(e, &st);
        CHECK(st.restores == 2);
        fprintf(stderr, "v4 restore: %llu sessions, %.3f ms each (v4-tiny, f32 cache, sanitizer build)\n",
                (unsigned long long)st.restores, 1e3 * st.restore_seconds / (double)st.restores);
    }
    fg_session_free(a);
    fg_session_free(b);
    fg_engine_close(e);

    /* an idle session spills (pages and state back to the pool) and comes back */
    e = open_e((eng_opts){.dir = dir, .idle_spill = 0.05});
    a = fg_test_session(e, "acme", "gamma");
    a1 = fg_test_turn_run(a, pa, 150, 6);
    CHECK(fg_test_turn_same(&a1, &ra1));
    bool spilled = false;
    for (double t0 = fg_clock_mono_s(); !spilled && fg_clock_mono_s() - t0 < 240; usleep(1000))
        spilled = fg_session_on_disk(a);
    CHECK(spilled);
    fg_engine_stats st;
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 60; usleep(1000)) {
        fg_engine_get_stats(e, &st);
        if (st.kv_pages_used == 0)
            break;
    }
    CHECK_MSG(st.spills >= 1 && st.kv_pages_used == 0, "%llu spills, %zu pages still used by a spilled session",
              (unsigned long long)st.spills, st.kv_pages_used);
    fg_test_turn a2 = fg_test_turn_run(a, in2, 5, NEXT);
    CHECK_MSG(fg_test_turn_same(&a2, &ra2), "the spilled session: %d tokens, the reference's %d", a2.n, ra2.n);
    fg_engine_get_stats(e, &st);
    CHECK(st.restores >= 1);
    fg_session_delete(a);
    fg_engine_close(e);
}

/* A pool of about three sessions for six: idle ones spill under pressure (their
 * state's pages with them) and come back with the tokens of a large pool. */
static void check_pressure(int n_vocab)
{
    enum { N = 6 };
    char dir[300];
    snprintf(dir, sizeof dir, "%s/pressure", root);
    int32_t prompt[N][150];
    for (int i = 0; i < N; i++)
        test_tokens(prompt[i], 150, n_vocab, 60 + (unsigned)i);
    fg_test_turn want[2][N], got[2][N];
    for (int big = 1; big >= 0; big--) {
        fg_engine_options o;
        v4_test_options(&o, true);
        o.persist_dir = big ? NULL : dir;
        if (!big) {
            fg_engine_t *probe = open_engine_with(&o);
            fg_engine_info info;
            fg_engine_get_info(probe, &info);
            fg_engine_close(probe);
            /* each session: its state and 4 pages (150 + 6 + 5 + 16 tokens) */
            o.kv_budget_bytes = (info.kv_seq_bytes + 4 * info.kv_page_bytes) * 3 + info.kv_page_bytes;
        }
        fg_engine_t *e = open_engine_with(&o);
        fg_session_t *s[N];
        char name[N][16];
        for (int i = 0; i < N; i++) {
            snprintf(name[i], sizeof name[i], "p%d", i);
            s[i] = fg_test_session(e, "acme", big ? NULL : name[i]);
        }
        for (int t = 0; t < 2; t++) {
            fg_test_turn *x = (big ? want : got)[t];
            for (int i = 0; i < N; i++)
                fg_test_turn_start(s[i], t ? in2 : prompt[i], t ? 5 : 150, t ? 16 : 6, &x[i]);
            CHECK_MSG(fg_test_turn_wait(s, x, N), "the sessions never finished turn %d", t + 1);
        }
        fg_engine_stats st;
        fg_engine_get_stats(e, &st);
        if (!big) {
            for (int i = 0; i < N; i++)
                for (int t = 0; t < 2; t++)
                    CHECK_MSG(fg_test_turn_same(&got[t][i], &want[t][i]),
                              "session %d, turn %d: %d tokens, the large pool's %d", i, t + 1, got[t][i].n,
                              want[t][i].n);
            CHECK_MSG(st.spills > 0 && st.restores > 0, "a pool of 3 sessions for 6: %llu spills, %llu restores",
                      (unsigned long long)st.spills, (unsigned long long)st.restores);
            CHECK(st.kv_pages_used <= st.kv_pages_total);
            fprintf(stderr, "v4 pressure: %llu spills, %llu restores for %d sessions in a pool of %zu pages\n",
                    (unsigned long long)st.spills, (unsigned long long)st.restores, N, st.kv_pages_total);
        }
        for (int i = 0; i < N; i++)
            big ? fg_session_free(s[i]) : fg_session_delete(s[i]);
        fg_engine_close(e);
    }
}

/* ---------------------------------------------------------------- 3. damage */

static void save_one(eng_opts x, const char *name, const int32_t *prompt, int n)
{
    fg_engine_t *e = open_e(x);
    fg_session_t *s = fg_test_session(e, "acme", name);
    fg_test_turn_run(s, prompt, n, 4);
    fg_diag d = {{0}};
    CHECK_MSG(fg_engine_save_all(e, &d) == FG_OK, "%s", d.msg);
    fg_session_free(s);
    fg_engine_close(e);
}

static void check_damage(int n_vocab)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/damage", root);
    int32_t prompt[150];
    test_tokens(prompt, 150, n_vocab, 22);
    eng_opts x = {.dir = dir};
    static const struct {
        const char *name, *model;
        int kv_format;
    } saves[] = {{"truncated", NULL, 0},     {"pageflip", NULL, 0},
                 {"stateflip", NULL, 0},     {"model", "v4-tiny-nohash.gguf", 0},
                 {"format", NULL, FG_KV_FP8}, {"deepseek2", "tiny.gguf", 0},
                 {"healthy", NULL, 0}};
    for (size_t i = 0; i < sizeof saves / sizeof saves[0]; i++) {
        eng_opts y = x;
        y.model = saves[i].model;
        y.kv_format = saves[i].kv_format;
        save_one(y, saves[i].name, prompt, 150);
    }
    char p[400];
    struct stat sb;
    path_of(p, sizeof p, dir, "truncated", ".fgs");
    CHECK(stat(p, &sb) == 0);
    corrupt(p, 0, 0, (long)sb.st_size - 100); /* inside the state */
    path_of(p, sizeof p, dir, "pageflip", ".fgs");
    corrupt(p, FG_SFILE_HEADER_V3_BYTES + 154 * 4 + 100, 0x10, -1); /* in the first page */
    path_of(p, sizeof p, dir, "stateflip", ".fgs");
    corrupt(p, -20, 0x01, -1); /* in the state, just before the checksum */

    /* the reference continuation of the healthy one and of a resident session */
    fg_engine_t *e = open_e((eng_opts){0});
    fg_session_t *r = fg_test_session(e, "acme", NULL);
    fg_test_turn_run(r, prompt, 150, 4);
    fg_test_turn want = fg_test_turn_run(r, in2, 5, 8);
    fg_session_free(r);
    fg_engine_close(e);

    e = open_e(x);
    fg_session_t *live = fg_test_session(e, "acme", "live");
    fg_test_turn l1 = fg_test_turn_run(live, prompt, 150, 4);
    static const struct {
        const char *name;
        fg_err want;
    } cases[] = {{"truncated", FG_ERR_SESSION_TRUNCATED}, {"pageflip", FG_ERR_SESSION_CORRUPT},
                 {"stateflip", FG_ERR_SESSION_CORRUPT},   {"model", FG_ERR_SESSION_MODEL},
                 {"format", FG_ERR_SESSION_VERSION},      {"deepseek2", FG_ERR_SESSION_MODEL},
                 {"missing", FG_ERR_NOT_FOUND}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        restore(e, cases[i].name, cases[i].want);
        char fgs[400], aside[400];
        path_of(fgs, sizeof fgs, dir, cases[i].name, ".fgs");
        path_of(aside, sizeof aside, dir, cases[i].name, ".fgs.damaged");
        if (cases[i].want != FG_ERR_NOT_FOUND)
            CHECK_MSG(!exists(fgs) && exists(aside), "%s was not moved aside", cases[i].name);
    }
    /* the others are untouched: the healthy file restores and continues, the resident session goes on */
    fg_session_t *h = restore(e, "healthy", FG_OK);
    if (h) {
        fg_test_turn h2 = fg_test_turn_run(h, in2, 5, 8);
        CHECK_MSG(fg_test_turn_same(&h2, &want), "the healthy session after the damaged ones: %d tokens", h2.n);
        fg_session_free(h);
    }
    fg_test_turn l2 = fg_test_turn_run(live, in2, 5, 8);
    CHECK(l1.n == 4 && fg_test_turn_same(&l2, &want));
    fg_session_free(live);
    fg_engine_close(e);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/fg_ds4_persist.%d", (int)getpid());
    mkdir(root, 0755);
    fg_pool_t *pool = fg_pool_create(2);
    fg_gguf_t *g;
    fg_arch_model *m;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path("v4-tiny.gguf"), &g, &d) != FG_OK || fg_arch_load(g, &m, &d) != FG_OK) {
        fprintf(stderr, "%s\n", d.msg);
        return 1;
    }
    static const int lens[] = {61, 128, 150};
    for (int f = 0; f < 2; f++)
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
            check_logits(m, f ? FG_KV_FP8 : FG_KV_F32, lens[i], pool);
    const int n_vocab = m->n_vocab;
    fg_arch_free(m);
    fg_gguf_close(g);
    fg_pool_destroy(pool);
    check_restart_and_spill(n_vocab);
    check_pressure(n_vocab);
    check_damage(n_vocab);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return TEST_DONE("test_ds4_persist");
}
