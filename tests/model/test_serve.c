/* Serving mode: many sessions batched into one forward pass per step produce
 * exactly what each produces alone, through joins and leaves, cancels, a full
 * KV pool, a reader that stops reading, prompts that run alone in longer
 * steps, and requests served in the order they came.
 *
 * The reference for every session is a direct-mode greedy run of the same
 * tokens on its own. Tiny model, F32 weights and cache. */
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "kernels/cpu/mla_attn.h"
#include "kernels/cpu/vecops.h"
#include "tests/model/model_test.h"

#define MAXGEN 24

typedef struct run {
    fg_session_t *s;
    int32_t prompt[200];
    int n_prompt;
    int max_tokens;
    int32_t want[MAXGEN];  /* greedy tokens alone */
    int n_want;
    int32_t got[MAXGEN];
    int n_got;
    bool done;
    fg_event last;
    bool waited;
} run;

static fg_engine_t *open_serving_with(int max_batch, int prefill_chunk, size_t kv_budget, int prefill_alone)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path("tiny.gguf");
    o.kv_format = FG_KV_F32;
    o.max_batch_tokens = max_batch;
    o.prefill_chunk = prefill_chunk;
    o.prefill_alone_tokens = prefill_alone;
    o.n_threads = 2;
    o.kv_budget_bytes = kv_budget;
    o.serve = true;
    o.event_capacity = 8; /* small, so an unread session pauses quickly */
    return open_engine_with(&o);
}

static fg_engine_t *open_serving(int max_batch, size_t kv_budget)
{
    return open_serving_with(max_batch, 32, kv_budget, 512);
}


/* Greedy tokens of a prompt on its own (direct mode), stopping at EOS like the engine. */
static void alone(fg_engine_t *direct, run *r)
{
    fg_engine_info info;
    fg_engine_get_info(direct, &info);
    int eos = fg_tokenizer_eos(fg_engine_tokenizer(direct));
    float *lg = malloc(sizeof(float) * info.n_vocab);
    fg_session_t *s;
    fg_diag d;
    CHECK(fg_session_create(direct, NULL, &s) == FG_OK);
    CHECK(fg_session_eval(s, r->prompt, r->n_prompt, lg, false, &d) == FG_OK);
    r->n_want = 0;
    while (r->n_want < r->max_tokens) {
        int32_t t = fg_argmax(lg, info.n_vocab);
        r->want[r->n_want++] = t;
        if (t == eos || r->n_want == r->max_tokens)
            break;
        CHECK(fg_session_eval(s, &t, 1, lg, false, &d) == FG_OK);
    }
    fg_session_free(s);
    free(lg);
}

static fg_response_params greedy(int max_tokens)
{
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = max_tokens, .generate = true};
    return p;
}

static void start(fg_engine_t *e, run *r, uint32_t tenant)
{
    fg_session_params sp = {.tenant = tenant, .weight = 1 + (int)tenant % 3, .user = r};
    fg_diag d;
    CHECK(fg_session_create(e, &sp, &r->s) == FG_OK);
    CHECK(fg_session_append(r->s, r->prompt, r->n_prompt, &d) == FG_OK);
    fg_response_params p = greedy(r->max_tokens);
    CHECK_MSG(fg_session_respond(r->s, &p, NULL, &d) == FG_OK, "%s", d.msg);
    r->n_got = 0;
    r->done = false;
}

/* Drains one session's events. */
static void drain(run *r)
{
    fg_test_drain(r->s, r->got, &r->n_got, MAXGEN, &r->done, &r->waited, &r->last);
}

static bool drain_run(void *runs, int i)
{
    run *r = (run *)runs + i;
    if (!r->done)
        drain(r);
    return r->done;
}

static bool wait_all(run *runs, int n) { return fg_test_wait_all(runs, n, drain_run); }

static void check_same(const run *r, const char *what, int i)
{
    int k = 0;
    while (k < r->n_got && k < r->n_want && r->got[k] == r->want[k])
        k++;
    CHECK_MSG(r->n_got == r->n_want && k == r->n_got, "%s: session %d got %d tokens, alone %d, first difference at %d",
              what, i, r->n_got, r->n_want, k);
}

/* Steps of more than 2^b tokens, from the batch-size histogram (bucket i: <= 2^i). */
static uint64_t steps_over(const fg_engine_stats *st, int b)
{
    uint64_t n = 0;
    for (int i = b + 1; i < FG_ENGINE_HIST_BUCKETS; i++)
        n += st->batch_tokens_hist[i];
    return n;
}

/* 6. A prompt with no one decoding beside it runs in prefill_alone_tokens
 *    steps (one step for all 200 tokens), with prefill_alone_tokens 0 in
 *    max_batch_tokens/prefill_chunk steps; the tokens are the same. */
static void check_prefill_alone(fg_engine_t *direct, run *r)
{
    r->n_prompt = 200;
    fg_engine_info info;
    fg_engine_get_info(direct, &info);
    test_tokens(r->prompt, r->n_prompt, info.n_vocab, 77);
    r->max_tokens = 8;
    alone(direct, r);
    for (int alone_tokens = 256; alone_tokens >= 0; alone_tokens -= 256) {
        fg_engine_t *e = open_serving_with(64, 32, 64 << 20, alone_tokens);
        start(e, r, 0);
        CHECK(wait_all(r, 1));
        check_same(r, alone_tokens ? "prefill alone" : "prefill in chunks", 0);
        fg_engine_stats st;
        fg_engine_get_stats(e, &st);
        if (alone_tokens) {
            CHECK_MSG(st.steps_alone == 1 && steps_over(&st, 7) == 1 && st.steps == 1 + 7,
                      "200 prompt tokens alone: %llu steps (%llu alone, %llu over 128 tokens), want 1 + 7 decodes",
                      (unsigned long long)st.steps, (unsigned long long)st.steps_alone,
                      (unsigned long long)steps_over(&st, 7));
        } else {
            CHECK_MSG(st.steps_alone == 0 && steps_over(&st, 5) == 0 && st.steps == 7 + 7,
                      "200 prompt tokens in chunks of 32: %llu steps (%llu over 32 tokens), want 7 + 7",
                      (unsigned long long)st.steps, (unsigned long long)steps_over(&st, 5));
        }
        fg_session_free(r->s);
        fg_engine_close(e);
    }
}

/* 7. Within a tenant the oldest request goes first, not the oldest session:
 *    session `young` asks first (a 20-token prompt), then the older session
 *    `old` (190 tokens); in 4-token steps young's first token comes dozens of
 *    steps before old's. Polled old first, so a tie would count against. */
static void check_request_order(fg_engine_t *direct, run *old, run *young)
{
    fg_engine_t *e = open_serving_with(4, 4, 64 << 20, 0);
    fg_diag d;
    fg_engine_info info;
    fg_engine_get_info(direct, &info);
    old->n_prompt = 190;
    young->n_prompt = 20;
    test_tokens(old->prompt, old->n_prompt, info.n_vocab, 31);
    test_tokens(young->prompt, young->n_prompt, info.n_vocab, 32);
    old->max_tokens = young->max_tokens = 2;
    alone(direct, old);
    alone(direct, young);
    fg_session_params sp = {.tenant = 0, .weight = 1};
    CHECK(fg_session_create(e, &sp, &old->s) == FG_OK);
    CHECK(fg_session_create(e, &sp, &young->s) == FG_OK);
    fg_response_params p = greedy(2);
    CHECK(fg_session_append(young->s, young->prompt, young->n_prompt, &d) == FG_OK);
    CHECK(fg_session_append(old->s, old->prompt, old->n_prompt, &d) == FG_OK);
    CHECK(fg_session_respond(young->s, &p, NULL, &d) == FG_OK);
    CHECK(fg_session_respond(old->s, &p, NULL, &d) == FG_OK);
    old->n_got = young->n_got = 0;
    old->done = young->done = false;
    run *first = NULL;
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 240 && !(old->done && young->done);) {
        drain(old);
        drain(young);
        if (!first && (old->n_got || young->n_got))
            first = old->n_got ? old : young;
        sched_yield();
    }
    CHECK_MSG(first == young, "the older session's later request got its first token first");
    check_same(old, "request order", 0);
    check_same(young, "request order", 1);
    fg_session_free(old->s);
    fg_session_free(young->s);
    fg_engine_close(e);
}

int main(void)
{
    fg_engine_t *direct = open_engine("tiny.gguf", FG_KV_F32, 64, 2);
    fg_engine_info info;
    fg_engine_get_info(direct, &info);
    enum { N = 64 };
    static run runs[N];
    for (int i = 0; i < N; i++) {
        runs[i].n_prompt = 3 + (i * 37) % 150;
        test_tokens(runs[i].prompt, runs[i].n_prompt, info.n_vocab, 100 + (unsigned)i);
        runs[i].max_tokens = 4 + i % (MAXGEN - 4);
        alone(direct, &runs[i]);
    }

    /* 1. 64 sessions at once, three tenants, equal to alone */
    fg_engine_t *e = open_serving(256, 64 << 20);
    for (int i = 0; i < N; i++)
        start(e, &runs[i], (uint32_t)(i % 3));
    CHECK(wait_all(runs, N));
    for (int i = 0; i < N; i++) {
        check_same(&runs[i], "batched", i);
        CHECK(runs[i].last.finish == FG_FINISH_LENGTH || runs[i].last.finish == FG_FINISH_EOS);
        CHECK(runs[i].last.usage.input_tokens == runs[i].n_prompt && runs[i].last.usage.cached_tokens == 0);
        CHECK(runs[i].last.usage.output_tokens == runs[i].n_got);
    }
    fg_engine_stats st;
    fg_engine_get_stats(e, &st);
    CHECK(st.steps > 0 && st.steps < (uint64_t)N * MAXGEN); /* sessions shared steps */
    fprintf(stderr, "batched: %llu steps for %d sessions\n", (unsigned long long)st.steps, N);

    /* 2. a second turn reuses the cache: cached tokens = the whole history */
    {
        run *r = &runs[0];
        int32_t more[5] = {11, 12, 13, 14, 15};
        fg_diag d;
        CHECK(fg_session_append(r->s, more, 5, &d) == FG_OK);
        fg_response_params p = greedy(4);
        CHECK(fg_session_respond(r->s, &p, NULL, &d) == FG_OK);
        CHECK(fg_session_respond(r->s, &p, NULL, &d) == FG_ERR_BUSY);
        r->done = false;
        r->n_got = 0;
        CHECK(wait_all(r, 1));
        /* history = prompt + generated (the last generated token is evaluated now) */
        int64_t hist = r->n_prompt + r->n_want;
        CHECK_MSG(r->last.usage.cached_tokens == hist - 1 && r->last.usage.input_tokens == hist + 5,
                  "turn 2 usage: input %lld cached %lld (history %lld)", (long long)r->last.usage.input_tokens,
                  (long long)r->last.usage.cached_tokens, (long long)hist);
    }
    for (int i = 0; i < N; i++)
        fg_session_free(runs[i].s);

    /* 3. joins and leaves mid-run, and cancels at different points */
    for (int i = 0; i < 16; i++)
        start(e, &runs[i], 0);
    for (int spin = 0; spin < 30; spin++) {
        for (int i = 0; i < 16; i++)
            drain(&runs[i]);
        usleep(500);
    }
    for (int i = 16; i < 32; i++) /* joiners */
        start(e, &runs[i], 1);
    for (int i = 0; i < 4; i++) /* leavers: freed mid-response, never waited for */
        fg_session_free(runs[i].s);
    for (int i = 4; i < 8; i++)
        fg_session_cancel(runs[i].s);
    CHECK(wait_all(runs + 4, 28));
    for (int i = 4; i < 8; i++) {
        CHECK(runs[i].last.finish == FG_FINISH_CANCELLED || runs[i].n_got == runs[i].n_want);
        /* what came before the cancel is a prefix of the alone run */
        CHECK(runs[i].n_got <= runs[i].n_want && memcmp(runs[i].got, runs[i].want, sizeof(int32_t) * runs[i].n_got) == 0);
    }
    for (int i = 8; i < 32; i++)
        check_same(&runs[i], "join/leave", i);
    for (int i = 4; i < 32; i++)
        fg_session_free(runs[i].s);
    fg_engine_close(e);

    /* 4. a KV pool too small for everyone at once: responses wait, then complete
     *    as finished sessions are freed */
    fg_engine_t *small = open_serving(64, (size_t)6 * info.n_layer * FG_KV_PAGE_TOKENS * (64 + 16) * 4);
    for (int i = 0; i < 12; i++)
        start(small, &runs[i], 0);
    int finished = 0, waited = 0;
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 240 && finished < 12;) {
        for (int i = 0; i < 12; i++) {
            if (runs[i].done || !runs[i].s)
                continue;
            drain(&runs[i]);
            if (runs[i].done) {
                check_same(&runs[i], "full pool", i);
                waited += runs[i].waited;
                fg_session_free(runs[i].s);
                runs[i].s = NULL;
                finished++;
            }
        }
        usleep(1000);
    }
    CHECK_MSG(finished == 12, "only %d of 12 finished with a small pool", finished);
    CHECK_MSG(waited > 0, "no session was told to wait for KV pages");
    fg_engine_close(small);

    /* 5. a reader that stops reading pauses only its own session, and loses nothing */
    e = open_serving(256, 64 << 20);
    for (int i = 0; i < 8; i++) {
        runs[i].s = NULL;
        runs[i].max_tokens = MAXGEN; /* longer than the 8-event queue */
        alone(direct, &runs[i]);
        start(e, &runs[i], 0);
    }
    CHECK(wait_all(runs + 1, 7));
    fg_engine_get_stats(e, &st);
    CHECK_MSG(st.paused >= 1 || runs[0].n_want < 6, "the unread session did not pause (paused %d)", st.paused);
    CHECK(!runs[0].done);
    CHECK(wait_all(runs, 1)); /* now read it */
    for (int i = 0; i < 8; i++) {
        check_same(&runs[i], "slow reader", i);
        fg_session_free(runs[i].s);
    }
    fg_engine_close(e);
    check_prefill_alone(direct, &runs[0]);
    check_request_order(direct, &runs[0], &runs[1]);
    fg_engine_close(direct);
    return TEST_DONE("test_serve");
}
