/* test_quota_global.c: two gateways (two fg_quota instances) on one Redis
 * enforce one global tokens-per-minute limit. Both are driven as hard as
 * they go (several reservations in flight each, a refused one retried after
 * its retry_after); the tokens admitted across both in a 5 s window must be
 * within 5 % of the limit's rate. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"

#define TPM 60000   /* 1000 tokens/s */
#define COST 20     /* tokens per response */
#define SLOTS 4     /* reservations in flight per gateway */
#define WINDOW_MS 5000.0

typedef struct slot {
    qh_wait w;
    bool busy;
    double next_ms;
    char key[32];
} slot;

typedef struct driver {
    qh *h;
    char name;
    slot s[SLOTS];
    int seq;
    long long tokens_in_window, admitted, refused;
} driver;

static void drive(driver *d, double now, double win_start, double win_end)
{
    fg_quota_poll(d->h->q);
    for (int i = 0; i < SLOTS; i++) {
        slot *s = &d->s[i];
        if (s->busy && s->w.done) {
            s->busy = false;
            if (s->w.r.verdict == FG_QUOTA_OK) {
                d->admitted++;
                fg_quota_response_settle(d->h->q, "t-global", s->key, COST, COST);
                if (s->w.done_ms >= win_start && s->w.done_ms < win_end)
                    d->tokens_in_window += COST;
                s->next_ms = now;
            } else {
                d->refused++;
                double wait = s->w.r.retry_after * 1000.0;
                s->next_ms = now + (wait < 0.5 ? 0.5 : wait);
            }
        }
        if (!s->busy && now >= s->next_ms && now < win_end) {
            snprintf(s->key, sizeof s->key, "%c-%d", d->name, d->seq++);
            memset(&s->w, 0, sizeof s->w);
            s->busy = true;
            fg_quota_response_reserve(d->h->q, "t-global", s->key, COST, 0, 0, 0, qh_on_result, &s->w);
        }
    }
}

int test_quota_global(void)
{
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, false))
        return 1;
    qh a, b;
    if (!qh_open(&a, fx.sock, 500, 30000, 2, NULL) || !qh_open(&b, fx.sock, 500, 30000, 2, NULL)) {
        fg_redis_stop(&fx);
        return 1;
    }
    CHECK(qh_wait_connected(&a, false, 5000));
    CHECK(qh_wait_connected(&b, false, 5000));
    fg_tenant_record t = qh_record("t-global");
    t.limits.tokens_per_minute = TPM;
    CHECK(qh_put(&a, &t) == FG_QUOTA_OK);
    /* Empty the bucket (a whole minute's burst) so the window measures the rate. */
    CHECK(qh_reserve(&a, "t-global", "drain", TPM, 0, 0, 0).verdict == FG_QUOTA_OK);
    fg_quota_response_settle(a.q, "t-global", "drain", TPM, TPM);

    driver da = {.h = &a, .name = 'a'}, db = {.h = &b, .name = 'b'};
    double start = fg_clock_mono_s() * 1e3;
    double win_start = start + 200, win_end = win_start + WINDOW_MS;
    for (double now = start; now < win_end + 50; now = fg_clock_mono_s() * 1e3) {
        drive(&da, now, win_start, win_end);
        drive(&db, now, win_start, win_end);
        fg_sleep_ms(0.1);
    }
    /* Let the last answers land (not counted: outside the window). */
    for (int i = 0; i < 100; i++) {
        double now = fg_clock_mono_s() * 1e3;
        drive(&da, now, win_start, win_end);
        drive(&db, now, win_start, win_end);
        bool busy = false;
        for (int k = 0; k < SLOTS; k++)
            busy = busy || da.s[k].busy || db.s[k].busy;
        if (!busy)
            break;
        fg_sleep_ms(5);
    }

    long long total = da.tokens_in_window + db.tokens_in_window;
    double expected = TPM / 60.0 * WINDOW_MS / 1000.0;
    double err = fabs((double)total - expected) / expected;
    fprintf(stderr,
            "quota_global: %lld tokens admitted in %.0f s across two gateways (a %lld, b %lld), limit allows %.0f: "
            "error %.2f %%; refusals a %lld b %lld\n",
            total, WINDOW_MS / 1000, da.tokens_in_window, db.tokens_in_window, expected, err * 100, da.refused,
            db.refused);
    CHECK_MSG(err <= 0.05, "global limit off by %.2f %%", err * 100);
    /* Both gateways were served: one limit shared, not one each. */
    CHECK(da.tokens_in_window > expected * 0.15 && db.tokens_in_window > expected * 0.15);

    fg_quota_stats sa, sb;
    fg_quota_get_stats(a.q, &sa);
    fg_quota_get_stats(b.q, &sb);
    CHECK(sa.degraded == 0 && sb.degraded == 0);
    CHECK_MSG(sa.errors == 0 && sb.errors == 0, "errors: %s / %s", sa.last_error, sb.last_error);
    qh_close(&a);
    qh_close(&b);
    fg_redis_stop(&fx);
    return TEST_DONE("quota_global");
}
