/* deepseek4 prefix sharing and forks: pages shared in whole 128-token units
 * with a snapshot of the state (window rings, compressor blocks, MTP input)
 * at the unit boundary, and forks that share the pages and copy the state.
 *
 * 1. Below the engine, through the architecture's forward on v4-tiny (f32
 *    and fp8 caches), every sequence alone in its passes with the same
 *    chunks, so logits compare bit for bit (memcmp):
 *    - a prefix hit: a sequence that takes another's first 3 units of pages
 *      and its state snapshot at 384 tokens, then computes the 37-token tail
 *      and 64 greedy tokens, gets the logits of a run that computed all;
 *    - a fork at 484 tokens (484 mod 128 = 100: the fork's first block close,
 *      at 511, writes a 128-ratio row into page 6, the page before the one
 *      it writes tokens into): copy-on-write gives the fork its own pages 6
 *      and 7; the fork fed other tokens leaves the source's pages
 *      byte-identical, its logits equal a straight run of its tokens, and a
 *      second fork's and the source's next 64 greedy tokens' logits equal the
 *      straight run's.
 * 2. Serving (v4-tiny, f32 cache, prefix cache on): 8 sessions with one
 *    long prompt (3 units + a tail) hold one copy of its 6 shared pages and
 *    one snapshot (counted in the store's pages), and their greedy tokens
 *    equal a cache-less engine's, started one after the others or all
 *    together; sessions with a common system prompt
 *    learn a snapshot where they part; a fork over the serving API with
 *    the previous-page case continues like a cache-less run, and so does
 *    its source, and a fork of a spilled session (loaded from the source's
 *    file); in a pool too small for two sessions and a snapshot, the
 *    second session's admission frees the first one's snapshot.
 * 3. Cold entries on disk (persist_dir, a pool of one session and a
 *    snapshot): another session's prompt pushes a prompt's pages and its
 *    snapshot out to page files (the snapshot in its page's file); a session
 *    with that prompt then reads them back and takes them (cached_tokens
 *    384, the snapshot read once) with a cache-less run's greedy tokens;
 *    after a restart the files hit again; with the snapshot's bytes flipped
 *    or cut off the page file is refused and moved aside, and the session
 *    computes the prompt (no hit) with the same tokens; sessions with one
 *    system prompt whose pages idled out to disk without a snapshot where
 *    they part: the second leaves one there, its page file is replaced by
 *    one with it, and the third resumes there from disk. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "engine/kv/kv_store.h"
#include "engine/kv/prefix_cache.h"
#include "engine/kv/session_file.h"
#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "tests/model/model_test.h"

#define CHUNK 16    /* prompt chunk of every run below the engine: 128 is a multiple */
#define NGEN 64     /* greedy tokens compared */
#define PROMPT 421  /* 3 units + 37 */
#define FORK_AT 484 /* 3 units + 100 */
#define MAXT (FORK_AT + NGEN + 8)

/* ---------------------------------------------------------------- 1. forward */

typedef struct fwd {
    const fg_arch *a;
    fg_arch_forward_t *f;
    fg_kv_store_t *kv;
    int V;
} fwd;

/* Feeds tok[0..n) to q (prompt chunks of CHUNK), logits of every position into lg[n][V]. */
static void feed(fwd *w, fg_kv_seq *q, const int32_t *tok, int n, float *lg)
{
    fg_diag d = {{0}};
    CHECK(fg_kv_seq_reserve(w->kv, q, q->n_tokens + n) == FG_OK);
    CHECK(fg_kv_seq_make_writable(w->kv, q, q->n_tokens) == FG_OK); /* what serving's admission does */
    for (int at = 0; at < n;) {
        const int k = n - at < CHUNK ? n - at : CHUNK;
        fg_fwd_seq s = {.kv = q, .n_tokens = k, .n_logits = k, .logits = lg + (size_t)at * w->V};
        CHECK_MSG(w->a->forward_run(w->f, tok + at, &s, 1, &d) == FG_OK, "%s", d.msg);
        at += k;
    }
}

/* NGEN greedy tokens one at a time after lg0 (the last logits), their logits into lg[NGEN][V]. */
static void greedy(fwd *w, fg_kv_seq *q, const float *lg0, int32_t *out, float *lg)
{
    fg_diag d = {{0}};
    CHECK(fg_kv_seq_reserve(w->kv, q, q->n_tokens + NGEN) == FG_OK);
    CHECK(fg_kv_seq_make_writable(w->kv, q, q->n_tokens) == FG_OK);
    for (int i = 0; i < NGEN; i++) {
        out[i] = fg_argmax(i ? lg + (size_t)(i - 1) * w->V : lg0, w->V);
        fg_fwd_seq s = {.kv = q, .n_tokens = 1, .n_logits = 1, .logits = lg + (size_t)i * w->V};
        CHECK_MSG(w->a->forward_run(w->f, out + i, &s, 1, &d) == FG_OK, "%s", d.msg);
    }
}

/* Fills every free page with a pattern, so that a page a sequence gets holds
 * no rows of an earlier run (which could equal what a fork writes). */
static void poison_free_pages(fg_kv_store_t *kv)
{
    const size_t n = fg_kv_store_pages_free(kv), bytes = fg_kv_store_geometry(kv)->page_bytes;
    uint8_t **p = malloc(n * sizeof *p);
    CHECK(p != NULL);
    for (size_t i = 0; i < n; i++) {
        p[i] = fg_kv_page_alloc(kv);
        memset(p[i], 0x5a, bytes);
    }
    for (size_t i = n; i-- > 0;)
        fg_kv_page_release(kv, p[i]);
    free(p);
}

static bool same_logits(const float *x, const float *y, int n, int V)
{
    return memcmp(x, y, sizeof(float) * (size_t)n * (size_t)V) == 0;
}

static void check_forward(const fg_arch_model *m, fg_kv_format fmt, fg_pool_t *pool)
{
    fwd w = {.a = m->arch, .V = m->n_vocab};
    fg_diag d = {{0}};
    fg_kv_geometry geo;
    CHECK_MSG(w.a->cache(m, fmt, &geo, &d) == FG_OK, "%s", d.msg);
    CHECK_MSG(fg_kv_share_tokens(&geo) == 128, "share unit %d, want 128 (v4-tiny has 128-ratio layers)",
              fg_kv_share_tokens(&geo));
    CHECK(fg_kv_store_create(&geo, (size_t)256 << 20, &w.kv, &d) == FG_OK);
    CHECK_MSG(w.a->forward_create(m, &geo, CHUNK, pool, FG_ISA_AUTO, &w.f, &d) == FG_OK, "%s", d.msg);
    const size_t V = (size_t)w.V;
    static int32_t tok[MAXT], gen[NGEN], gen2[NGEN], other[NGEN];
    test_tokens(tok, FORK_AT, w.V, 77);
    test_tokens(other, NGEN, w.V, 78);
    float *ref = malloc(sizeof(float) * (MAXT)*V), *ref_g = malloc(sizeof(float) * NGEN * V);
    float *lg = malloc(sizeof(float) * (MAXT)*V), *lg_g = malloc(sizeof(float) * NGEN * V);
    CHECK(ref && ref_g && lg && lg_g);

    /* prefix hit at 384: pages 0..5 and the snapshot, then the tail and 64 greedy tokens */
    fg_kv_seq full, a, b;
    fg_kv_seq_init(&full, MAXT);
    fg_kv_seq_init(&a, MAXT);
    fg_kv_seq_init(&b, MAXT);
    feed(&w, &full, tok, PROMPT, ref);
    greedy(&w, &full, ref + (PROMPT - 1) * V, gen, ref_g);
    const int B = PROMPT / 128 * 128;
    feed(&w, &a, tok, B, lg);
    uint8_t *snap = fg_kv_state_copy(w.kv, a.state, 0);
    CHECK(snap && fg_kv_store_pages_held(w.kv) == 3 * fg_kv_store_state_pages(w.kv)); /* full's, a's, the snapshot's */
    CHECK(fg_kv_seq_grow_table(&b, B / FG_KV_PAGE_TOKENS) == FG_OK);
    for (int k = 0; k < B / FG_KV_PAGE_TOKENS; k++) {
        fg_kv_page_retain(w.kv, a.pages[k]);
        fg_kv_seq_set_page(w.kv, &b, k, a.pages[k]);
    }
    CHECK(fg_kv_seq_set_state(w.kv, &b, snap) == FG_OK);
    b.n_tokens = B;
    fg_kv_seq_free(w.kv, &a); /* the snapshot stands alone */
    feed(&w, &b, tok + B, PROMPT - B, lg);
    CHECK_MSG(same_logits(lg, ref + (size_t)B * V, PROMPT - B, w.V), "%s: the tail after a prefix hit differs",
              fg_kv_format_name(fmt));
    greedy(&w, &b, lg + (PROMPT - B - 1) * V, gen2, lg_g);
    CHECK_MSG(!memcmp(gen, gen2, sizeof gen) && same_logits(lg_g, ref_g, NGEN, w.V),
              "%s: greedy logits after a prefix hit differ", fg_kv_format_name(fmt));
    fg_kv_state_free(w.kv, snap, 0);
    fg_kv_seq_free(w.kv, &b);
    fg_kv_seq_free(w.kv, &full);

    /* forks at 484: straight runs first (greedy, and the other tokens) */
    float *ref_o = malloc(sizeof(float) * NGEN * V);
    CHECK(ref_o != NULL);
    static int32_t straight[FORK_AT + NGEN];
    memcpy(straight, tok, sizeof(int32_t) * FORK_AT);
    memcpy(straight + FORK_AT, other, sizeof other);
    fg_kv_seq_init(&full, MAXT);
    feed(&w, &full, tok, FORK_AT, ref);
    greedy(&w, &full, ref + (FORK_AT - 1) * V, gen, ref_g);
    fg_kv_seq_free(w.kv, &full);
    fg_kv_seq_init(&full, MAXT);
    feed(&w, &full, straight, FORK_AT, lg);
    for (int i = 0; i < NGEN; i++) /* one at a time, as the fork below */
        feed(&w, &full, other + i, 1, ref_o + (size_t)i * V);
    fg_kv_seq_free(w.kv, &full);

    fg_kv_seq src, f1, f2;
    fg_kv_seq_init(&src, MAXT);
    fg_kv_seq_init(&f1, MAXT);
    fg_kv_seq_init(&f2, MAXT);
    poison_free_pages(w.kv);
    feed(&w, &src, tok, FORK_AT, lg);
    CHECK(fg_kv_seq_share(w.kv, &f1, &src, FORK_AT - 1) == FG_ERR_UNSUPPORTED); /* a state is never cut back */
    CHECK(fg_kv_seq_share(w.kv, &f1, &src, FORK_AT) == FG_OK && f1.n_tokens == FORK_AT && f1.state);
    CHECK(!memcmp(f1.state, src.state, geo.seq_bytes));
    const int last = FORK_AT / FG_KV_PAGE_TOKENS, prev = last - 1; /* pages 7 and 6 */
    CHECK(fg_kv_first_written_page(&geo, FORK_AT) == prev);
    static uint8_t before[2][1 << 20];
    CHECK(geo.page_bytes <= sizeof before[0]);
    memcpy(before[0], src.pages[prev], geo.page_bytes);
    memcpy(before[1], src.pages[last], geo.page_bytes);
    for (int i = 0; i < NGEN; i++)
        feed(&w, &f1, other + i, 1, lg_g + (size_t)i * V);
    CHECK_MSG(f1.pages[prev] != src.pages[prev] && f1.pages[last] != src.pages[last] &&
                  f1.pages[prev - 1] == src.pages[prev - 1],
              "the fork's writes did not copy pages %d and %d (or copied the full page before)", prev, last);
    CHECK_MSG(!memcmp(before[0], src.pages[prev], geo.page_bytes) &&
                  !memcmp(before[1], src.pages[last], geo.page_bytes),
              "%s: the fork's writes changed the source's pages", fg_kv_format_name(fmt));
    CHECK_MSG(same_logits(lg_g, ref_o, NGEN, w.V), "%s: the fork's logits differ from a straight run of its tokens",
              fg_kv_format_name(fmt));
    CHECK(fg_kv_seq_share(w.kv, &f2, &src, FORK_AT) == FG_OK);
    greedy(&w, &f2, lg + (FORK_AT - 1) * V, gen2, lg_g);
    CHECK_MSG(!memcmp(gen, gen2, sizeof gen) && same_logits(lg_g, ref_g, NGEN, w.V),
              "%s: a fork's next %d logits differ from the unforked run's", fg_kv_format_name(fmt), NGEN);
    greedy(&w, &src, lg + (FORK_AT - 1) * V, gen2, lg_g);
    CHECK_MSG(!memcmp(gen, gen2, sizeof gen) && same_logits(lg_g, ref_g, NGEN, w.V),
              "%s: the source's next %d logits after two forks differ from the unforked run's", fg_kv_format_name(fmt),
              NGEN);
    fg_kv_seq_free(w.kv, &f1);
    fg_kv_seq_free(w.kv, &f2);
    fg_kv_seq_free(w.kv, &src);
    CHECK(fg_kv_store_pages_free(w.kv) == fg_kv_store_pages_total(w.kv)); /* pages, states, snapshot came back */
    fprintf(stderr, "v4 %s cache: prefix hit at %d and forks at %d: logits bit-identical to straight runs\n",
            fg_kv_format_name(fmt), B, FORK_AT);
    free(ref);
    free(ref_g);
    free(ref_o);
    free(lg);
    free(lg_g);
    w.a->forward_destroy(w.f);
    fg_kv_store_destroy(w.kv);
}

/* ---------------------------------------------------------------- 2. serving */

#define MAXGEN 32

typedef struct run {
    fg_session_t *s;
    int32_t got[MAXGEN];
    int n_got;
    bool done, waited;
    fg_event last;
} run;

static fg_engine_t *open_v4_budget(bool serve, bool prefix, size_t budget)
{
    fg_engine_options o;
    v4_test_options(&o, serve);
    o.kv_budget_bytes = budget;
    o.prefix_cache = prefix;
    return open_engine_with(&o);
}

static fg_engine_t *open_v4(bool serve, bool prefix) { return open_v4_budget(serve, prefix, (size_t)64 << 20); }

static void start(run *r, const int32_t *in, int n, int max_tokens)
{
    fg_diag d = {{0}};
    CHECK_MSG(fg_session_append(r->s, in, n, &d) == FG_OK, "%s", d.msg);
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = max_tokens, .generate = true};
    CHECK_MSG(fg_session_respond(r->s, &p, NULL, &d) == FG_OK, "%s", d.msg);
    r->n_got = 0;
    r->done = false;
}

static bool drain_run(void *runs, int i)
{
    run *r = (run *)runs + i;
    if (!r->done)
        fg_test_drain(r->s, r->got, &r->n_got, MAXGEN, &r->done, &r->waited, &r->last);
    return r->done;
}

static bool wait_all(run *runs, int n) { return fg_test_wait_all(runs, n, drain_run); }

static run turn(fg_session_t *s, const int32_t *in, int n, int max_tokens)
{
    run r = {.s = s};
    start(&r, in, n, max_tokens);
    CHECK(wait_all(&r, 1));
    CHECK_MSG(r.last.finish != FG_FINISH_ERROR, "turn failed: %s", fg_err_name(r.last.error));
    return r;
}

static void same(const run *r, const int32_t *want, int n_want, const char *what, int i)
{
    CHECK_MSG(r->n_got == n_want && !memcmp(r->got, want, sizeof(int32_t) * (size_t)n_want),
              "%s %d: %d tokens, not the cache-less run's %d", what, i, r->n_got, n_want);
}

static fg_session_t *session(fg_engine_t *e)
{
    fg_session_params sp = {.weight = 1};
    fg_session_t *s;
    CHECK(fg_session_create(e, &sp, &s) == FG_OK);
    return s;
}

/* 8 sessions, one prompt of 3 units + a tail (each its own last 2 tokens). */
static void check_eight(fg_engine_t *direct, int V, size_t state_pages)
{
    enum { N = 8, L = PROMPT + 2, SHARED = PROMPT / 128 * 128 / FG_KV_PAGE_TOKENS };
    static int32_t prompt[N][L], want[N][MAXGEN];
    int n_want[N];
    for (int i = 0; i < N; i++) {
        test_tokens(prompt[i], PROMPT, V, 91);
        test_tokens(prompt[i] + PROMPT, 2, V, 200 + (unsigned)i);
        n_want[i] = greedy_alone(direct, prompt[i], L, MAXGEN, want[i]);
    }
    fg_engine_t *e = open_v4(true, true);
    run r[N];
    for (int i = 0; i < N; i++)
        r[i] = (run){.s = session(e)};
    /* the first computes the prompt and leaves a snapshot at its last unit boundary */
    start(&r[0], prompt[0], L, MAXGEN);
    CHECK(wait_all(r, 1));
    for (int i = 1; i < N; i++)
        start(&r[i], prompt[i], L, MAXGEN);
    CHECK(wait_all(r, N));
    size_t own = 0;
    for (int i = 0; i < N; i++) {
        same(&r[i], want[i], n_want[i], "shared prompt: session", i);
        CHECK_MSG(r[i].last.usage.cached_tokens == (i ? SHARED * FG_KV_PAGE_TOKENS : 0),
                  "session %d: %lld tokens from the cache", i, (long long)r[i].last.usage.cached_tokens);
        own += (size_t)(fg_session_length(r[i].s) + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS - SHARED;
    }
    fg_engine_stats st;
    fg_engine_get_stats(e, &st);
    /* one copy of the 6 shared pages, each session's own pages and state, one snapshot */
    const size_t want_used = SHARED + own + (N + 1) * state_pages;
    CHECK_MSG(st.kv_pages_shared == SHARED && st.kv_pages_used == want_used,
              "%zu pages shared (want %d), %zu used (want %zu)", st.kv_pages_shared, SHARED, st.kv_pages_used,
              want_used);
    CHECK_MSG(st.kv_pages_cached == state_pages, "%zu pages only the cache holds, want the snapshot's %zu",
              st.kv_pages_cached, state_pages);
    CHECK(st.prefix_hits == (uint64_t)(N - 1) * SHARED);
    fprintf(stderr, "v4 serving: %d sessions, one prompt of %d tokens: %d pages shared, %zu used (%zu per state)\n",
            N, L, SHARED, st.kv_pages_used, state_pages);
    for (int i = 0; i < N; i++)
        fg_session_free(r[i].s);
    /* the cache keeps the pages and the snapshot; nothing else stays */
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 60; usleep(1000)) {
        fg_engine_get_stats(e, &st);
        if (st.kv_pages_used == st.kv_pages_cached)
            break;
    }
    CHECK_MSG(st.kv_pages_used == SHARED + state_pages && st.kv_pages_cached == st.kv_pages_used,
              "%zu pages used after the sessions closed, %zu cached", st.kv_pages_used, st.kv_pages_cached);
    fg_engine_close(e);

    /* started together: the others sit out while the first computes the prompt
     * in a step of its own (cut at the last boundary, its snapshot there), then
     * take it (prefix_waits) */
    e = open_v4(true, true);
    for (int i = 0; i < N; i++) {
        r[i] = (run){.s = session(e)};
        start(&r[i], prompt[i], L, MAXGEN);
    }
    CHECK(wait_all(r, N));
    long long cached = 0;
    for (int i = 0; i < N; i++) {
        same(&r[i], want[i], n_want[i], "started together: session", i);
        cached += r[i].last.usage.cached_tokens;
    }
    fg_engine_get_stats(e, &st);
    fprintf(stderr, "v4 serving, started together: %lld tokens from the cache, %llu prefix waits, %zu pages shared\n",
            cached, (unsigned long long)st.prefix_waits, st.kv_pages_shared);
    CHECK_MSG(cached == (long long)(N - 1) * SHARED * FG_KV_PAGE_TOKENS, "started together: %lld tokens cached",
              cached);
    for (int i = 0; i < N; i++)
        fg_session_free(r[i].s);
    fg_engine_close(e);
}

/* A system prompt of 300 tokens, then each session's own 200: the first
 * leaves a snapshot at 384 (useless to the others), the second finds pages
 * to 256 without one and leaves it there, the third resumes at 256. */
static void check_learned(fg_engine_t *direct, int V)
{
    enum { N = 3, SYS = 300, L = SYS + 200 };
    static int32_t prompt[N][L], want[N][MAXGEN];
    int n_want[N];
    for (int i = 0; i < N; i++) {
        test_tokens(prompt[i], SYS, V, 92);
        test_tokens(prompt[i] + SYS, L - SYS, V, 300 + (unsigned)i);
        n_want[i] = greedy_alone(direct, prompt[i], L, MAXGEN, want[i]);
    }
    fg_engine_t *e = open_v4(true, true);
    const long long cached[N] = {0, 0, 256};
    for (int i = 0; i < N; i++) {
        fg_session_t *s = session(e);
        run r = turn(s, prompt[i], L, MAXGEN);
        same(&r, want[i], n_want[i], "system prompt: session", i);
        CHECK_MSG(r.last.usage.cached_tokens == cached[i], "system prompt: session %d: %lld cached, want %lld", i,
                  (long long)r.last.usage.cached_tokens, cached[i]);
        fg_session_free(s);
    }
    fg_engine_close(e);
}

/* A fork at 484 tokens (484 mod 128 = 100): the fork's input crosses 511
 * (a 128-ratio row into page 6, which the source shares), then the source's
 * does, then the fork continues and reads that row. Each equals a cache-less
 * run of its own tokens. */
static void check_fork(fg_engine_t *direct, int V)
{
    enum { P = FORK_AT, X = 30 };
    static int32_t prompt[P], xs[X], ys[X], more[4] = {5, 6, 7, 8};
    static int32_t all[P + 1 + 2 * X + MAXGEN + 8], want[MAXGEN];
    test_tokens(prompt, P, V, 93);
    test_tokens(xs, X, V, 94);
    test_tokens(ys, X, V, 95);
    fg_engine_t *e = open_v4(true, true);
    fg_session_t *src = session(e);
    run r0 = turn(src, prompt, P, 1); /* the sampled token is the next turn's first input */
    CHECK(r0.n_got == 1 && fg_session_length(src) >= P);
    fg_session_t *fk = NULL;
    fg_diag d = {{0}};
    fg_session_params fp = {.weight = 1};
    CHECK_MSG(fg_session_fork(src, &fp, &fk, &d) == FG_OK, "fork of a V4 session: %s", d.msg);
    CHECK(fg_session_length(fk) == fg_session_length(src));
    run rf = turn(fk, xs, X, MAXGEN), rs = turn(src, ys, X, MAXGEN);
    run rf2 = turn(fk, more, 4, MAXGEN);
    /* cache-less: prompt, sampled token, input, (tokens, more) */
    int n = 0;
    memcpy(all, prompt, sizeof prompt);
    n = P;
    all[n++] = r0.got[0];
    memcpy(all + n, ys, sizeof ys);
    int n_want = greedy_alone(direct, all, n + X, MAXGEN, want);
    same(&rs, want, n_want, "the fork's source after the fork", 0);
    memcpy(all + n, xs, sizeof xs);
    n_want = greedy_alone(direct, all, n + X, MAXGEN, want);
    same(&rf, want, n_want, "the fork's first turn", 0);
    n += X;
    memcpy(all + n, rf.got, sizeof(int32_t) * (size_t)rf.n_got);
    n += rf.n_got;
    memcpy(all + n, more, sizeof more);
    n_want = greedy_alone(direct, all, n + 4, MAXGEN, want);
    same(&rf2, want, n_want, "the fork's second turn (reads the row the source wrote over)", 0);
    fg_session_free(fk);
    fg_session_free(src);
    fg_engine_close(e);
}

/* A fork of a spilled V4 session loads the source's file (pages and state)
 * and continues like a cache-less run; so does the source. */
static void check_fork_spilled(fg_engine_t *direct, int V)
{
    enum { P = 200, X = 20 };
    static int32_t prompt[P], xs[X], ys[X], all[P + 1 + X], want[MAXGEN];
    test_tokens(prompt, P, V, 97);
    test_tokens(xs, X, V, 98);
    test_tokens(ys, X, V, 99);
    char dir[] = "/tmp/fg_ds4_shareXXXXXX", cmd[64];
    CHECK(mkdtemp(dir) != NULL);
    fg_engine_options o;
    v4_test_options(&o, true);
    o.persist_dir = dir;
    o.idle_spill_seconds = 0.05;
    fg_engine_t *e = open_engine_with(&o);
    fg_session_params sp = {.weight = 1, .name = "src"};
    fg_session_t *src, *fk = NULL;
    CHECK(fg_session_create(e, &sp, &src) == FG_OK);
    run r0 = turn(src, prompt, P, 1);
    CHECK(r0.n_got == 1);
    bool spilled = false;
    for (double t0 = fg_clock_mono_s(); !spilled && fg_clock_mono_s() - t0 < 240; usleep(1000))
        spilled = fg_session_on_disk(src);
    CHECK(spilled);
    fg_diag d = {{0}};
    fg_session_params fp = {.weight = 1, .name = "fork"};
    CHECK_MSG(fg_session_fork(src, &fp, &fk, &d) == FG_OK, "fork of a spilled V4 session: %s", d.msg);
    run rf = turn(fk, xs, X, MAXGEN), rs = turn(src, ys, X, MAXGEN);
    memcpy(all, prompt, sizeof prompt);
    all[P] = r0.got[0];
    memcpy(all + P + 1, xs, sizeof xs);
    int n_want = greedy_alone(direct, all, P + 1 + X, MAXGEN, want);
    same(&rf, want, n_want, "the fork of a spilled session", 0);
    memcpy(all + P + 1, ys, sizeof ys);
    n_want = greedy_alone(direct, all, P + 1 + X, MAXGEN, want);
    same(&rs, want, n_want, "the spilled source after the fork", 0);
    fg_session_delete(fk);
    fg_session_delete(src);
    fg_engine_close(e);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Snapshots are bounded by the pool: with room for one session, its
 * snapshot and a second session less 2 pages, the second session's
 * admission frees the first one's snapshot (its pages are held by the idle
 * first session) instead of waiting for ever. */
static void check_pressure(fg_engine_t *direct, int V, size_t state_pages, size_t page_bytes)
{
    enum { L = PROMPT + 2 };
    static int32_t prompt[2][L], want[2][MAXGEN];
    int n_want[2];
    for (int i = 0; i < 2; i++) {
        test_tokens(prompt[i], L, V, 96 + (unsigned)i);
        n_want[i] = greedy_alone(direct, prompt[i], L, MAXGEN, want[i]);
    }
    const size_t per = state_pages + (L + MAXGEN + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    fg_engine_t *e = open_v4_budget(true, true, (2 * per + state_pages - 2) * page_bytes);
    fg_engine_stats st;
    fg_session_t *s[2];
    for (int i = 0; i < 2; i++) {
        s[i] = session(e);
        run r = turn(s[i], prompt[i], L, MAXGEN);
        same(&r, want[i], n_want[i], "small pool: session", i);
        fg_engine_get_stats(e, &st);
        CHECK_MSG(st.kv_pages_cached == (i ? 0 : state_pages), "after session %d: %zu pages for snapshots", i,
                  st.kv_pages_cached);
    }
    for (int i = 0; i < 2; i++)
        fg_session_free(s[i]);
    fg_engine_close(e);
}

/* ---------------------------------------------------------------- 3. cold entries on disk */

static fg_engine_stats stats_of(fg_engine_t *e)
{
    fg_engine_stats st;
    fg_engine_get_stats(e, &st);
    return st;
}

static fg_engine_t *open_cold(const char *dir, size_t budget, double idle_spill)
{
    fg_engine_options o;
    v4_test_options(&o, true);
    o.kv_budget_bytes = budget;
    o.prefix_cache = true;
    o.persist_dir = dir;
    o.idle_spill_seconds = idle_spill;
    return open_engine_with(&o);
}

/* The whole file at path into a malloc'd buffer (*len bytes). */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len);
    CHECK(b && fread(b, 1, *len, f) == *len);
    fclose(f);
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, len, f) == len);
    if (f)
        fclose(f);
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* One session's turn with prompt on e: its greedy tokens must be want's;
 * cached_tokens must be `cached`. Returns the engine's stats after it. */
static fg_engine_stats cold_turn(fg_engine_t *e, const int32_t *prompt, int n, const int32_t *want, int n_want,
                                 long long cached, const char *what)
{
    fg_session_t *s = session(e);
    run r = turn(s, prompt, n, MAXGEN);
    same(&r, want, n_want, what, 0);
    CHECK_MSG(r.last.usage.cached_tokens == cached, "%s: %lld tokens from the cache, want %lld", what,
              (long long)r.last.usage.cached_tokens, cached);
    fg_engine_stats st = stats_of(e);
    CHECK(st.kv_pages_used <= st.kv_pages_total);
    fg_session_free(s);
    return st;
}

static void check_cold(fg_engine_t *direct, int V, size_t state_pages, size_t page_bytes, size_t seq_bytes)
{
    enum { L = PROMPT + 2, SHARED = PROMPT / 128 * 128 / FG_KV_PAGE_TOKENS, HIT = SHARED * FG_KV_PAGE_TOKENS };
    static int32_t prompt[L], other[L], want[MAXGEN], want_o[MAXGEN];
    test_tokens(prompt, L, V, 101);
    test_tokens(other, L, V, 102);
    const int n_want = greedy_alone(direct, prompt, L, MAXGEN, want), n_want_o = greedy_alone(direct, other, L,
                                                                                              MAXGEN, want_o);
    char dir[] = "/tmp/fg_ds4_coldXXXXXX", cmd[64], path[200], aside[220];
    CHECK(mkdtemp(dir) != NULL);
    /* Room for one session (its pages and state) and one snapshot: what a hit at 384 holds. Another
     * session's admission then needs the cold pages and the snapshot of the first one's prompt. */
    const size_t per = state_pages + (L + MAXGEN + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    const size_t budget = (per + state_pages) * page_bytes;
    const uint64_t salt = fg_tenant_salt("default");
    uint64_t key = 0;
    for (int k = 0; k < SHARED; k++)
        key = fg_page_key(key, salt, prompt + (size_t)k * FG_KV_PAGE_TOKENS);
    snprintf(path, sizeof path, "%s/default/pages/%016llx.fgp", dir, (unsigned long long)key);
    snprintf(aside, sizeof aside, "%s.damaged", path);
    /* a page file with the snapshot: a version 3 file of 64 tokens, its page and the state */
    const long long with_snap = FG_SFILE_HEADER_V3_BYTES + FG_KV_PAGE_TOKENS * 4 + 32 + (long long)page_bytes +
                                (long long)seq_bytes + 8;

    fg_engine_t *e = open_cold(dir, budget, 0);
    cold_turn(e, prompt, L, want, n_want, 0, "cold: the first session");
    cold_turn(e, other, L, want_o, n_want_o, 0, "cold: the other prompt");
    fg_engine_stats st0 = stats_of(e);
    for (double t0 = fg_clock_mono_s(); st0.snapshots_to_disk < 1 && fg_clock_mono_s() - t0 < 240; usleep(1000))
        st0 = stats_of(e);
    CHECK_MSG(st0.snapshots_to_disk == 1 && st0.pages_to_disk >= 1, "%llu page files written, %llu with a snapshot",
              (unsigned long long)st0.pages_to_disk, (unsigned long long)st0.snapshots_to_disk);
    /* the snapshot is in the file of the page that ends at 384 */
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    CHECK_MSG((long long)sb.st_size == with_snap, "the page file at 320: %lld bytes, want %lld with the snapshot",
              (long long)sb.st_size, with_snap);
    /* the same prompt: the pages and the snapshot come back; the session continues from 384 */
    fg_engine_stats st1 = cold_turn(e, prompt, L, want, n_want, HIT, "cold: pages and snapshot from disk");
    CHECK_MSG(st1.snapshots_from_disk - st0.snapshots_from_disk == 1 && st1.pages_from_disk > st0.pages_from_disk,
              "%llu snapshots, %llu pages read back", (unsigned long long)(st1.snapshots_from_disk - st0.snapshots_from_disk),
              (unsigned long long)(st1.pages_from_disk - st0.pages_from_disk));
    CHECK(st1.page_files_damaged == 0);
    fprintf(stderr, "v4 cold: %llu page files (%llu with the snapshot) written, %llu pages and the snapshot read back: "
            "%d tokens cached\n", (unsigned long long)st1.pages_to_disk, (unsigned long long)st1.snapshots_to_disk,
            (unsigned long long)(st1.pages_from_disk - st0.pages_from_disk), HIT);
    /* what is left is the cache's: its pages and the snapshots it holds, in the pool's count */
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 60; usleep(1000)) {
        st1 = stats_of(e);
        if (st1.kv_pages_used == st1.kv_pages_cached)
            break;
    }
    CHECK_MSG(st1.kv_pages_used == st1.kv_pages_cached && st1.kv_pages_cached >= state_pages,
              "%zu pages used after the sessions closed, %zu cached", st1.kv_pages_used, st1.kv_pages_cached);
    fg_engine_close(e);
    snprintf(cmd, sizeof cmd, "rm -rf %s/default", dir);
    CHECK(system(cmd) == 0);

    /* Idle cold entries go to page files too: all 6 pages and the snapshot, nothing left in the pool. */
    e = open_cold(dir, (size_t)64 << 20, 0.05);
    cold_turn(e, prompt, L, want, n_want, 0, "cold: a prompt that idles out");
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 240; usleep(1000)) {
        st1 = stats_of(e);
        if (st1.kv_pages_used == 0 && st1.pages_to_disk == SHARED)
            break;
    }
    CHECK_MSG(st1.kv_pages_used == 0 && st1.pages_to_disk == SHARED && st1.snapshots_to_disk == 1,
              "idle: %zu pages used, %llu page files, %llu with the snapshot", st1.kv_pages_used,
              (unsigned long long)st1.pages_to_disk, (unsigned long long)st1.snapshots_to_disk);
    fg_engine_close(e);

    /* The file as written, then three restarts: flipped in the snapshot, cut inside it, as written. */
    size_t len = 0;
    uint8_t *good = slurp(path, &len);
    static const char *const how[3] = {"a flipped snapshot", "a truncated snapshot", "the intact file again"};
    for (int round = 0; round < 3 && good; round++) {
        spit(path, good, len);
        unlink(aside);
        if (round == 0)
            corrupt(path, (long)len - 8 - (long)seq_bytes / 2, 0x08, -1);
        if (round == 1)
            corrupt(path, 0, 0, (long)(len - seq_bytes / 2));
        e = open_cold(dir, budget, 0);
        char what[80];
        snprintf(what, sizeof what, "cold, after a restart, %s", how[round]);
        fg_engine_stats st = cold_turn(e, prompt, L, want, n_want, round < 2 ? 0 : HIT, what);
        CHECK_MSG(st.page_files_damaged == (round < 2 ? 1u : 0u) && st.snapshots_from_disk == (round < 2 ? 0u : 1u),
                  "%s: %llu page files damaged, %llu snapshots read back", how[round],
                  (unsigned long long)st.page_files_damaged, (unsigned long long)st.snapshots_from_disk);
        CHECK_MSG(exists(aside) == (round < 2) && exists(path) == (round == 2), "%s: the file %s moved aside", how[round],
                  round < 2 ? "was not" : "was");
        fg_engine_close(e);
    }
    free(good);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* A system prompt of 300 tokens on disk without a snapshot where sessions
 * part (256): the second session reads its pages back, finds no snapshot,
 * leaves one while computing, and when that entry idles out its page file
 * is replaced by one with the snapshot; the third reads both back and
 * resumes at 256. */
static void check_cold_learned(fg_engine_t *direct, int V, size_t page_bytes, size_t seq_bytes)
{
    enum { N = 3, SYS = 300, L = SYS + 200, PART = 256 };
    static int32_t prompt[N][L], want[N][MAXGEN];
    int n_want[N];
    for (int i = 0; i < N; i++) {
        test_tokens(prompt[i], SYS, V, 103);
        test_tokens(prompt[i] + SYS, L - SYS, V, 400 + (unsigned)i);
        n_want[i] = greedy_alone(direct, prompt[i], L, MAXGEN, want[i]);
    }
    char dir[] = "/tmp/fg_ds4_coldlXXXXXX", cmd[64], path[200];
    CHECK(mkdtemp(dir) != NULL);
    const uint64_t salt = fg_tenant_salt("default");
    uint64_t key = 0;
    for (int k = 0; k < PART / FG_KV_PAGE_TOKENS; k++)
        key = fg_page_key(key, salt, prompt[0] + (size_t)k * FG_KV_PAGE_TOKENS);
    snprintf(path, sizeof path, "%s/default/pages/%016llx.fgp", dir, (unsigned long long)key);
    const long long plain = FG_SFILE_HEADER_V3_BYTES + FG_KV_PAGE_TOKENS * 4 + 32 + (long long)page_bytes + 8;
    /* idle long enough that pages read back stay listed until the session that waited for them walks again */
    fg_engine_t *e = open_cold(dir, (size_t)64 << 20, 0.5);
    const long long cached[N] = {0, 0, PART};
    const uint64_t snaps[N] = {1, 3, 4}; /* each at its input's last boundary (384); the second's at 256 too */
    for (int i = 0; i < N; i++) {
        char what[64];
        snprintf(what, sizeof what, "cold, system prompt: session %d", i);
        fg_engine_stats st = cold_turn(e, prompt[i], L, want[i], n_want[i], cached[i], what);
        if (i == 1)
            CHECK_MSG(st.pages_from_disk >= PART / FG_KV_PAGE_TOKENS && st.snapshots_from_disk == 0,
                      "session 1: %llu pages, %llu snapshots read back", (unsigned long long)st.pages_from_disk,
                      (unsigned long long)st.snapshots_from_disk);
        if (i == 2)
            CHECK_MSG(st.snapshots_from_disk == 1, "session 2: %llu snapshots read back",
                      (unsigned long long)st.snapshots_from_disk);
        /* everything idles out to page files; after the second, the file at 192 gains the snapshot at 256 */
        struct stat sb = {0};
        for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 240; usleep(1000)) {
            st = stats_of(e);
            if (stat(path, &sb) != 0)
                sb.st_size = 0;
            if (st.kv_pages_used == 0 && st.snapshots_to_disk == snaps[i] &&
                (sb.st_size == plain + (long long)seq_bytes) == (i > 0))
                break;
        }
        CHECK_MSG(st.kv_pages_used == 0 && st.snapshots_to_disk == snaps[i] &&
                      sb.st_size == plain + (i > 0 ? (long long)seq_bytes : 0),
                  "after session %d: %zu pages used, %llu snapshots on disk, the page file at 192 of %lld bytes", i,
                  st.kv_pages_used, (unsigned long long)st.snapshots_to_disk, (long long)sb.st_size);
    }
    fg_engine_close(e);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    fg_pool_t *pool = fg_pool_create(2);
    fg_gguf_t *g;
    fg_arch_model *m;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path("v4-tiny.gguf"), &g, &d) != FG_OK || fg_arch_load(g, &m, &d) != FG_OK) {
        fprintf(stderr, "%s\n", d.msg);
        return 1;
    }
    check_forward(m, FG_KV_F32, pool);
    check_forward(m, FG_KV_FP8, pool);
    fg_arch_free(m);
    fg_gguf_close(g);
    fg_pool_destroy(pool);

    fg_engine_t *direct = open_v4(false, false);
    fg_engine_info info;
    fg_engine_get_info(direct, &info);
    const size_t state_pages = (info.kv_seq_bytes + info.kv_page_bytes - 1) / info.kv_page_bytes;
    check_eight(direct, info.n_vocab, state_pages);
    check_learned(direct, info.n_vocab);
    check_fork(direct, info.n_vocab);
    check_fork_spilled(direct, info.n_vocab);
    check_pressure(direct, info.n_vocab, state_pages, info.kv_page_bytes);
    check_cold(direct, info.n_vocab, state_pages, info.kv_page_bytes, info.kv_seq_bytes);
    check_cold_learned(direct, info.n_vocab, info.kv_page_bytes, info.kv_seq_bytes);
    fg_engine_close(direct);
    return TEST_DONE("test_ds4_share");
}
