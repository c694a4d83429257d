/* test_quota_limits.c: every limit, black-box against a real redis-server:
 * admitted under it, refused over it with its own verdict and a retry_after
 * that fits, admitted again once the window allows (GCRA refills
 * continuously, so tiny per-minute limits recover in about a second). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"

static const fg_quota_limit_state *state(const fg_quota_result *r, const char *name)
{
    for (int i = 0; i < r->n_states; i++)
        if (strcmp(r->states[i].name, name) == 0)
            return &r->states[i];
    return NULL;
}

#define OK_(r) CHECK_MSG((r).verdict == FG_QUOTA_OK, "verdict %s", fg_quota_verdict_name((r).verdict))
#define IS_(r, v) \
    CHECK_MSG((r).verdict == (v), "verdict %s, want %s", fg_quota_verdict_name((r).verdict), fg_quota_verdict_name(v))

static void sessions(qh *h)
{
    fg_tenant_record t = qh_record("t-sess");
    t.limits.max_sessions = 2;
    CHECK(qh_put(h, &t) == FG_QUOTA_OK);
    fg_quota_result r = qh_session_open(h, "t-sess", "s1");
    OK_(r);
    CHECK(!r.degraded);
    const fg_quota_limit_state *s = state(&r, "sessions");
    CHECK(s && s->limit == 2 && s->remaining == 1);
    r = qh_session_open(h, "t-sess", "s2");
    OK_(r);
    r = qh_session_open(h, "t-sess", "s3");
    IS_(r, FG_QUOTA_SESSIONS);
    CHECK(r.retry_after > 0);
    CHECK(strcmp(fg_quota_verdict_name(r.verdict), "sessions") == 0);
    r = qh_session_open(h, "t-sess", "s1"); /* already held: kept, not a new one */
    OK_(r);
    fg_quota_session_close(h->q, "t-sess", "s1");
    r = qh_session_open(h, "t-sess", "s3");
    OK_(r);
}

static void responses(qh *h)
{
    fg_tenant_record t = qh_record("t-resp");
    t.limits.max_responses = 1;
    CHECK(qh_put(h, &t) == FG_QUOTA_OK);
    fg_quota_result r = qh_reserve(h, "t-resp", "r1", 10, 0, 10, 5);
    OK_(r);
    const fg_quota_limit_state *s = state(&r, "responses");
    CHECK(s && s->limit == 1 && s->remaining == 0);
    r = qh_reserve(h, "t-resp", "r2", 10, 0, 10, 5);
    IS_(r, FG_QUOTA_RESPONSES);
    CHECK(r.retry_after > 0);
    fg_quota_response_settle(h->q, "t-resp", "r1", 10, 5);
    r = qh_reserve(h, "t-resp", "r2", 10, 0, 10, 5);
    OK_(r);
    fg_quota_response_settle(h->q, "t-resp", "r2", 10, 10);
}

static void tokens_per_minute(qh *h)
{
    fg_tenant_record t = qh_record("t-tpm");
    t.limits.tokens_per_minute = 600; /* 10 tokens/s, burst 600 */
    CHECK(qh_put(h, &t) == FG_QUOTA_OK);
    fg_quota_result r = qh_reserve(h, "t-tpm", "a", 600, 0, 0, 0);
    OK_(r);
    const fg_quota_limit_state *s = state(&r, "tokens_per_minute");
    CHECK(s && s->limit == 600 && s->remaining == 0);
    CHECK(s && fabs(s->reset_seconds - 60.0) < 0.5);
    fg_quota_response_settle(h->q, "t-tpm", "a", 600, 600);

    r = qh_reserve(h, "t-tpm", "b", 10, 0, 0, 0);
    IS_(r, FG_QUOTA_TOKENS_PER_MINUTE);
    /* retry_after = cost / rate = 10 tokens / 10 per s, less the little time since. */
    CHECK_MSG(r.retry_after > 0.85 && r.retry_after <= 1.01, "retry_after %.3f", r.retry_after);
    fg_sleep_ms(r.retry_after * 1000 + 30);
    r = qh_reserve(h, "t-tpm", "c", 10, 0, 0, 0);
    OK_(r);
    fg_quota_response_settle(h->q, "t-tpm", "c", 10, 10);
    r = qh_reserve(h, "t-tpm", "d", 10, 0, 0, 0);
    IS_(r, FG_QUOTA_TOKENS_PER_MINUTE);
    CHECK_MSG(r.retry_after > 0.5 && r.retry_after <= 1.01, "retry_after %.3f", r.retry_after);
    /* More than a whole minute's burst can never pass: retry_after 0 says so. */
    r = qh_reserve(h, "t-tpm", "e", 601, 0, 0, 0);
    IS_(r, FG_QUOTA_TOKENS_PER_MINUTE);
    CHECK(r.retry_after == 0);
}

static void refunds(qh *h)
{
    fg_tenant_record t = qh_record("t-refund");
    t.limits.tokens_per_minute = 600;
    CHECK(qh_put(h, &t) == FG_QUOTA_OK);
    OK_(qh_reserve(h, "t-refund", "x", 600, 0, 0, 0));
    IS_(qh_reserve(h, "t-refund", "y", 100, 0, 0, 0), FG_QUOTA_TOKENS_PER_MINUTE);
    fg_quota_response_settle(h->q, "t-refund", "x", 600, 100); /* 500 back */
    OK_(qh_reserve(h, "t-refund", "y", 100, 0, 0, 0));
    OK_(qh_reserve(h, "t-refund", "z", 395, 0, 0, 0));
    IS_(qh_reserve(h, "t-refund", "w", 20, 0, 0, 0), FG_QUOTA_TOKENS_PER_MINUTE);

    /* A refund never takes tat below now: no credit beyond a full bucket. */
    t = qh_record("t-floor");
    t.limits.tokens_per_minute = 600;
    CHECK(qh_put(h, &t) == FG_QUOTA_OK);
    OK_(qh_reserve(h, "t-floor", "p", 100, 0, 0, 0)); /* tat = t0 + 10 s */
    fg_sleep_ms(1500);
    fg_quota_response_settle(h->q, "t-floor", "p", 100, 0); /* would be t0, 1.5 s in the past */
    OK_(qh_reserve(h, "t-floor", "q", 600, 0, 0, 0));
    IS_(qh_reserve(h, "t-floor", "r", 5, 0, 0, 0), FG_QUOTA_TOKENS_PER_MINUTE);
}

static void daily(qh *h, redisContext *rc)
{
    fg_tenant_record t = qh_record("t-daily");
    t.limits.daily_tokens = 100;
    CHECK(qh_put(h, &t) == FG_QUOTA_OK);
    fg_quota_result r = qh_reserve(h, "t-daily", "a", 60, 0, 0, 0);
    OK_(r);
    const fg_quota_limit_state *s = state(&r, "daily_tokens");
    CHECK(s && s->limit == 100 && s->remaining == 40);
    r = qh_reserve(h, "t-daily", "b", 50, 0, 0, 0);
    IS_(r, FG_QUOTA_DAILY_TOKENS);
    time_t now = time(NULL);
    double to_midnight = 86400.0 - (double)(now % 86400);
    CHECK_MSG(fabs(r.retry_after - to_midnight) < 5, "retry_after %.1f, midnight in %.1f", r.retry_after,
              to_midnight);
    fg_quota_response_settle(h->q, "t-daily", "a", 60, 20); /* 40 back */
    r = qh_reserve(h, "t-daily", "b", 50, 0, 0, 0);
    OK_(r);
    s = state(&r, "daily_tokens");
    CHECK(s && s->remaining == 30);

    /* The day's counter: named by the UTC date, expiring after the day. */
    struct tm tm;
    gmtime_r(&now, &tm);
    char key[128];
    snprintf(key, sizeof key, "{tenant:t-daily}:daily:%04d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
    CHECK_MSG(fg_redis_int(rc, "GET %s", key) == 70, "%s = %lld", key, fg_redis_int(rc, "GET %s", key));
    long long ttl = fg_redis_int(rc, "TTL %s", key);
    CHECK_MSG(ttl > 86400 && ttl <= 172800, "ttl %lld", ttl);
    IS_(qh_reserve(h, "t-daily", "c", 50, 0, 0, 0), FG_QUOTA_DAILY_TOKENS);
    /* A new day is a new counter: without today's key the budget is whole again. */
    fg_redis_int(rc, "DEL %s", key);
    OK_(qh_reserve(h, "t-daily", "c", 50, 0, 0, 0));
}

static void static_limits(qh *h, redisContext *rc)
{
    fg_tenant_record t = qh_record("t-static");
    t.limits.max_kv_bytes = 1000;
    t.limits.max_context_tokens = 100;
    t.limits.max_output_tokens = 50;
    CHECK(qh_put(h, &t) == FG_QUOTA_OK);
    OK_(qh_reserve(h, "t-static", "k1", 10, 1000, 100, 50));
    fg_quota_result r = qh_reserve(h, "t-static", "k2", 10, 1001, 100, 50);
    IS_(r, FG_QUOTA_KV_BYTES);
    CHECK(r.retry_after > 0);
    r = qh_reserve(h, "t-static", "k3", 10, 0, 101, 50);
    IS_(r, FG_QUOTA_CONTEXT);
    CHECK(r.retry_after == 0);
    r = qh_reserve(h, "t-static", "k4", 10, 0, 0, 51);
    IS_(r, FG_QUOTA_OUTPUT);
    CHECK(strcmp(fg_quota_verdict_name(r.verdict), "output") == 0);

    /* The script checks them too (a limit changed in Redis before this
     * instance's cache saw it: no version bump). */
    redisReply *x = redisCommand(rc, "HSET {tenant:t-static}:config max_output_tokens 5");
    if (x)
        freeReplyObject(x);
    r = qh_reserve(h, "t-static", "k5", 10, 0, 0, 6);
    IS_(r, FG_QUOTA_OUTPUT);
    CHECK(!r.degraded);
}

static void unknown_and_invalid(qh *h)
{
    IS_(qh_reserve(h, "nobody", "k", 1, 0, 0, 0), FG_QUOTA_UNKNOWN_TENANT);
    IS_(qh_session_open(h, "nobody", "s"), FG_QUOTA_UNKNOWN_TENANT);
    IS_(qh_session_open(h, "bad id", "s"), FG_QUOTA_UNKNOWN_TENANT);
    IS_(qh_session_open(h, "{tenant:x}", "s"), FG_QUOTA_UNKNOWN_TENANT);
    IS_(qh_session_open(h, "t-sess", "has space"), FG_QUOTA_INVALID);
    IS_(qh_session_open(h, "t-sess", ""), FG_QUOTA_INVALID);
    IS_(qh_reserve(h, "t-resp", "neg", -1, 0, 0, 0), FG_QUOTA_INVALID);
    /* Unknown settles and closes are ignored quietly. */
    fg_quota_response_settle(h->q, "nobody", "k", 1, 1);
    fg_quota_session_close(h->q, "nobody", "s");
    fg_quota_session_close(h->q, "bad id", "s");
    CHECK(strcmp(fg_quota_verdict_name(FG_QUOTA_TOKENS_PER_MINUTE), "tokens_per_minute") == 0);
    CHECK(strcmp(fg_quota_verdict_name((fg_quota_verdict)99), "unknown") == 0);
}

int test_quota_limits(void)
{
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, false))
        return 1;
    qh h;
    if (!qh_open(&h, fx.sock, 500, 30000, 1, NULL)) {
        fg_redis_stop(&fx);
        return 1;
    }
    CHECK(qh_wait_connected(&h, false, 5000));
    redisContext *rc = fg_redis_client(&fx);
    CHECK(rc != NULL);

    sessions(&h);
    responses(&h);
    tokens_per_minute(&h);
    refunds(&h);
    daily(&h, rc);
    static_limits(&h, rc);
    unknown_and_invalid(&h);

    fg_quota_stats st;
    fg_quota_get_stats(h.q, &st);
    CHECK(st.connected && st.degraded == 0 && st.journal_entries == 0);
    CHECK_MSG(st.errors == 0, "errors %llu: %s", (unsigned long long)st.errors, st.last_error);

    qh_close(&h);
    redisFree(rc);
    fg_redis_stop(&fx);
    return TEST_DONE("quota_limits");
}
