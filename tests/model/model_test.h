/* model_test.h: helpers shared by the tests that run generated models.
 * Models are made by tests/model/gen_models.sh (the ctest fixture "models")
 * in $FG_TEST_DATA. */
#ifndef FG_MODEL_TEST_H
#define FG_MODEL_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "engine/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/vecops.h"
#include "tests/unit/fg_test.h"

/* Path of a generated test model; exits (as a failure) when FG_TEST_DATA is unset. */
static inline const char *model_path(const char *file)
{
    static char buf[4096];
    const char *dir = getenv("FG_TEST_DATA");
    if (!dir) {
        fprintf(stderr, "FG_TEST_DATA is not set (run through ctest)\n");
        exit(1);
    }
    snprintf(buf, sizeof buf, "%s/%s", dir, file);
    return buf;
}

/* Opens an engine with these options; exits on failure (nothing else can run). */
static inline fg_engine_t *open_engine_with(const fg_engine_options *o)
{
    fg_diag d = {{0}};
    fg_engine_t *e;
    if (fg_engine_open(o, &e, &d) != FG_OK) {
        fprintf(stderr, "cannot open %s: %s\n", o->model_path, d.msg);
        exit(1);
    }
    return e;
}

/* Options of the deepseek4 tests' engines: v4-tiny, f32 cache, batches of
 * 128, prefill chunks of 16, 2 threads, a 64 MiB KV budget; serving or direct. */
static inline void v4_test_options(fg_engine_options *o, bool serve)
{
    fg_engine_options_default(o);
    o->model_path = model_path("v4-tiny.gguf");
    o->kv_format = FG_KV_F32;
    o->max_batch_tokens = 128;
    o->prefill_chunk = 16;
    o->n_threads = 2;
    o->kv_budget_bytes = (size_t)64 << 20;
    o->serve = serve;
}

/* Opens a direct-mode engine on a test model; exits on failure. */
static inline fg_engine_t *open_engine(const char *file, int kv_format, int max_batch, int n_threads)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path(file);
    o.kv_format = kv_format;
    o.max_batch_tokens = max_batch;
    o.n_threads = n_threads;
    o.kv_budget_bytes = (size_t)64 << 20;
    return open_engine_with(&o);
}

static inline float max_abs_diff(const float *a, const float *b, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* A deterministic token sequence inside [1, n_vocab - 2] (avoids the special tokens at the end). */
static inline void test_tokens(int32_t *t, int n, int n_vocab, unsigned seed)
{
    unsigned s = seed * 2654435761u + 12345u;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        t[i] = 1 + (int32_t)((s >> 8) % (unsigned)(n_vocab - 3));
    }
}

/* Drains a serving-mode session's pending events: tokens into got[cap]
 * (counted in *n_got), whether it waited for KV, its DONE event, and the
 * error of a SAVE_FAILED event into *save_failed (may be NULL). */
static inline void fg_test_drain_saves(fg_session_t *s, int32_t *got, int *n_got, int cap, bool *done, bool *waited,
                                       fg_event *last, fg_err *save_failed)
{
    fg_event ev[16];
    char text[8192];
    int n;
    while ((n = fg_session_poll(s, ev, 16, text, sizeof text)) > 0)
        for (int i = 0; i < n; i++) {
            if (ev[i].type == FG_EVENT_TOKEN && *n_got < cap)
                got[(*n_got)++] = ev[i].token;
            if (ev[i].type == FG_EVENT_WAITING)
                *waited = true;
            if (ev[i].type == FG_EVENT_DONE) {
                *done = true;
                *last = ev[i];
            }
            if (ev[i].type == FG_EVENT_SAVE_FAILED && save_failed)
                *save_failed = ev[i].error;
        }
}

/* fg_test_drain_saves without the SAVE_FAILED events. */
static inline void fg_test_drain(fg_session_t *s, int32_t *got, int *n_got, int cap, bool *done, bool *waited,
                                 fg_event *last)
{
    fg_test_drain_saves(s, got, n_got, cap, done, waited, last, NULL);
}

/* Polls runs until each is done, up to 240 s (sanitizer builds are slow;
 * ctest's timeout is the backstop): drain(runs, i) drains run i's events and
 * returns whether it is done. */
static inline bool fg_test_wait_all(void *runs, int n, bool (*drain)(void *runs, int i))
{
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 240; usleep(1000)) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !drain(runs, i);
        if (!left)
            return true;
    }
    return false;
}

/* A serving-mode session with weight 1 (tenant and name may be NULL). */
static inline fg_session_t *fg_test_session(fg_engine_t *e, const char *tenant, const char *name)
{
    fg_session_params p = {.weight = 1, .name = name, .tenant_name = tenant};
    fg_session_t *s = NULL;
    const fg_err err = fg_session_create(e, &p, &s);
    CHECK_MSG(err == FG_OK, "create %s: %s", name ? name : "(anonymous)", fg_err_name(err));
    return s;
}

/* One greedy response of a serving-mode session, as the events told it. */
#define FG_TEST_TURN_MAX 72
typedef struct fg_test_turn {
    int32_t tok[FG_TEST_TURN_MAX]; /* its first FG_TEST_TURN_MAX tokens */
    int n;
    bool done, waited;  /* DONE came; it waited for KV */
    fg_event last;      /* the DONE event: finish, error, usage */
    fg_err save_failed; /* the error of a SAVE_FAILED event seen, or FG_OK */
} fg_test_turn;

static inline void fg_test_turn_drain(fg_session_t *s, fg_test_turn *t)
{
    fg_test_drain_saves(s, t->tok, &t->n, FG_TEST_TURN_MAX, &t->done, &t->waited, &t->last, &t->save_failed);
}

/* Appends in[0..n) (nothing when n is 0) and starts a greedy response of
 * max_tokens; t is cleared for it. */
static inline void fg_test_turn_start(fg_session_t *s, const int32_t *in, int n, int max_tokens, fg_test_turn *t)
{
    *t = (fg_test_turn){0};
    fg_diag d = {{0}};
    if (n)
        CHECK_MSG(fg_session_append(s, in, n, &d) == FG_OK, "append: %s", d.msg);
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = max_tokens, .generate = true};
    CHECK_MSG(fg_session_respond(s, &p, NULL, &d) == FG_OK, "respond: %s", d.msg);
}

typedef struct fg_test_turns {
    fg_session_t **s;
    fg_test_turn *t;
} fg_test_turns;

static inline bool fg_test_turns_drain(void *runs, int i)
{
    fg_test_turns *r = runs;
    if (!r->t[i].done)
        fg_test_turn_drain(r->s[i], &r->t[i]);
    return r->t[i].done;
}

/* Waits (fg_test_wait_all) for the turns t[i] started on s[i], i < n. */
static inline bool fg_test_turn_wait(fg_session_t **s, fg_test_turn *t, int n)
{
    fg_test_turns r = {s, t};
    return fg_test_wait_all(&r, n, fg_test_turns_drain);
}

/* A whole greedy turn (fg_test_turn_start, then its end); fails the test when
 * it does not end or ends with an error (a test that wants the error starts
 * and waits itself). */
static inline fg_test_turn fg_test_turn_run(fg_session_t *s, const int32_t *in, int n, int max_tokens)
{
    fg_test_turn t;
    fg_test_turn_start(s, in, n, max_tokens, &t);
    CHECK_MSG(fg_test_turn_wait(&s, &t, 1) && t.last.finish != FG_FINISH_ERROR, "turn: done %d, error %s", t.done,
              fg_err_name(t.last.error));
    return t;
}

/* The same tokens, at least one. */
static inline bool fg_test_turn_same(const fg_test_turn *a, const fg_test_turn *b)
{
    return a->n == b->n && a->n > 0 && memcmp(a->tok, b->tok, sizeof a->tok[0] * (size_t)a->n) == 0;
}

/* Greedy tokens of a prompt alone on a direct-mode engine: the prompt as
 * input, each later token as a sampled one (the serving engine's forms),
 * stopping at EOS or max_tokens as the serving engine does. Returns the
 * number of tokens written to out. */
static inline int greedy_alone(fg_engine_t *direct, const int32_t *prompt, int n_prompt, int max_tokens,
                               int32_t *out)
{
    fg_engine_info info;
    fg_engine_get_info(direct, &info);
    const int eos = fg_tokenizer_eos(fg_engine_tokenizer(direct));
    float *lg = malloc(sizeof(float) * (size_t)info.n_vocab);
    fg_session_t *s = NULL;
    fg_diag d;
    int n = 0;
    CHECK(lg != NULL);
    CHECK(fg_session_create(direct, NULL, &s) == FG_OK);
    CHECK_MSG(fg_session_eval(s, prompt, n_prompt, lg, false, &d) == FG_OK, "%s", d.msg);
    while (n < max_tokens) {
        const int32_t t = fg_argmax(lg, info.n_vocab);
        out[n++] = t;
        if (t == eos || n == max_tokens)
            break;
        CHECK_MSG(fg_session_eval_sampled(s, t, lg, &d) == FG_OK, "%s", d.msg);
    }
    fg_session_free(s);
    free(lg);
    return n;
}

/* Damages a file: xor_mask on the byte at off (from the end when off < 0), then
 * cuts it to truncate_to bytes when that is >= 0. */
static inline void corrupt(const char *path, long off, uint8_t xor_mask, long truncate_to)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    if (xor_mask) {
        fseek(f, off, off < 0 ? SEEK_END : SEEK_SET);
        int c = fgetc(f);
        fseek(f, -1, SEEK_CUR);
        fputc(c ^ xor_mask, f);
    }
    fclose(f);
    if (truncate_to >= 0)
        CHECK(truncate(path, truncate_to) == 0);
}

#endif
