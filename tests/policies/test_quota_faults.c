/* test_quota_faults.c: Redis hung and Redis killed mid-load.
 *
 *   hung (SIGSTOP): every call still answers within the timeout (decided
 *     locally), and the client reconnects once Redis resumes.
 *   killed (SIGKILL, with requests and settlements in flight): no crash, no
 *     hang; the fail-open tenant is served within its backstop (its share of
 *     tokens per minute) and its usage journaled; the fail-closed tenant is
 *     refused with FG_QUOTA_UNAVAILABLE while its running responses finish
 *     and are journaled.
 *   restarted (same socket, data from its AOF): the journal is replayed and
 *     each tenant's usage:total equals the tokens its responses settled,
 *     exactly — including settlements whose reply was lost in the kill.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"

#define TIMEOUT_MS 200
#define INSTANCES 2
#define TPM 60000            /* per tenant; backstop share: TPM / INSTANCES */
#define BOUND_MS (3.0 * TIMEOUT_MS + 100) /* what any call may take while Redis fails */

typedef struct flight {
    qh_wait w;
    char tenant[16];
    char key[40];
    long long cost;
    bool settled;
} flight;

static int seq;

static void issue(qh *h, flight *f, const char *tenant, long long cost)
{
    memset(f, 0, sizeof *f);
    snprintf(f->tenant, sizeof f->tenant, "%s", tenant);
    snprintf(f->key, sizeof f->key, "resp-%d", seq++);
    f->cost = cost;
    f->w.issued_ms = fg_clock_mono_s() * 1e3;
    fg_quota_response_reserve(h->q, tenant, f->key, cost, 0, 0, 0, qh_on_result, &f->w);
}

/* Waits for every flight; returns the slowest answer in ms (-1: one never came). */
static double wait_all(qh *h, flight *f, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        if (!qh_wait_for(h, &f[i].w, 10000))
            return -1;
        double ms = f[i].w.done_ms - f[i].w.issued_ms;
        if (ms > worst)
            worst = ms;
    }
    return worst;
}

/* Settles an admitted flight with `used` tokens, adding them to *sum. */
static void settle(qh *h, flight *f, long long used, long long *sum)
{
    if (f->settled || f->w.r.verdict != FG_QUOTA_OK)
        return;
    fg_quota_response_settle(h->q, f->tenant, f->key, f->cost, used);
    f->settled = true;
    *sum += used;
}

static long long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

int test_quota_faults(void)
{
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, true))
        return 1;
    char journal[400];
    snprintf(journal, sizeof journal, "%s/quota.journal", fx.dir);
    qh h;
    if (!qh_open(&h, fx.sock, TIMEOUT_MS, 30000, INSTANCES, journal)) {
        fg_redis_stop(&fx);
        return 1;
    }
    CHECK(qh_wait_connected(&h, false, 5000));
    fg_tenant_record t = qh_record("t-open");
    t.limits.tokens_per_minute = TPM;
    CHECK(qh_put(&h, &t) == FG_QUOTA_OK);
    t = qh_record("t-closed");
    t.limits.tokens_per_minute = TPM;
    t.limits.fail_closed = true;
    CHECK(qh_put(&h, &t) == FG_QUOTA_OK);
    long long used_open = 0, used_closed = 0;

    /* ---- normal load ---- */
    static flight f[400];
    for (int i = 0; i < 200; i++)
        issue(&h, &f[i], i % 2 ? "t-open" : "t-closed", 100);
    CHECK(wait_all(&h, f, 200) >= 0);
    for (int i = 0; i < 200; i++) {
        CHECK(f[i].w.r.verdict == FG_QUOTA_OK && !f[i].w.r.degraded);
        settle(&h, &f[i], 1 + i % 50, i % 2 ? &used_open : &used_closed);
    }
    /* Responses still running when Redis fails. */
    static flight running[20];
    for (int i = 0; i < 20; i++)
        issue(&h, &running[i], i % 2 ? "t-open" : "t-closed", 200);
    CHECK(wait_all(&h, running, 20) >= 0);
    for (int i = 0; i < 20; i++)
        CHECK(running[i].w.r.verdict == FG_QUOTA_OK);

    /* ---- hung Redis ---- */
    fg_redis_kill(&fx, SIGSTOP);
    flight hung[2];
    issue(&h, &hung[0], "t-open", 100);
    issue(&h, &hung[1], "t-closed", 100);
    double worst = wait_all(&h, hung, 2);
    fprintf(stderr, "quota_faults: Redis stopped: slowest answer %.0f ms (timeout %d ms)\n", worst, TIMEOUT_MS);
    CHECK_MSG(worst >= 0 && worst <= BOUND_MS, "answer took %.0f ms", worst);
    CHECK(hung[0].w.r.verdict == FG_QUOTA_OK && hung[0].w.r.degraded);
    CHECK(hung[1].w.r.verdict == FG_QUOTA_UNAVAILABLE && hung[1].w.r.degraded);
    settle(&h, &hung[0], 60, &used_open); /* admitted by the backstop: journaled */
    /* Calls keep coming while it stays stopped (reconnect attempts time out in turn). */
    double stop_start = fg_clock_mono_s() * 1e3;
    int n_stopped = 0;
    worst = 0;
    while (fg_clock_mono_s() * 1e3 - stop_start < 1500) {
        flight *g = &f[300 + (n_stopped % 2)];
        issue(&h, g, n_stopped % 2 ? "t-open" : "t-closed", 10);
        double w = wait_all(&h, g, 1);
        if (w > worst)
            worst = w;
        CHECK(g->w.r.degraded && g->w.r.verdict == (n_stopped % 2 ? FG_QUOTA_OK : FG_QUOTA_UNAVAILABLE));
        settle(&h, g, 5, &used_open);
        n_stopped++;
        fg_sleep_ms(20);
    }
    fprintf(stderr, "quota_faults: %d more calls while stopped: slowest %.0f ms\n", n_stopped, worst);
    CHECK_MSG(worst <= BOUND_MS, "answer took %.0f ms", worst);
    fg_redis_kill(&fx, SIGCONT);
    CHECK(qh_wait_connected(&h, true, 10000));

    /* ---- killed mid-load ---- */
    /* Requests keep coming; Redis dies half-way, with some of them (and of
     * the settlements) answered, some in its socket, some not yet sent. */
    for (int i = 0; i < 80; i++) {
        issue(&h, &f[i], i % 2 ? "t-open" : "t-closed", 100);
        if (i % 8 == 0)
            settle(&h, &running[i / 8], 150, (i / 8) % 2 ? &used_open : &used_closed);
        if (i == 40)
            fg_redis_kill(&fx, SIGKILL);
        else
            fg_sleep_ms(0.3);
    }
    worst = wait_all(&h, f, 80);
    fprintf(stderr, "quota_faults: Redis killed mid-load: slowest of 80 answers %.0f ms\n", worst);
    CHECK_MSG(worst >= 0 && worst <= BOUND_MS, "answer took %.0f ms", worst);
    int admitted_closed = 0, refused_closed = 0;
    for (int i = 0; i < 80; i++) {
        fg_quota_verdict v = f[i].w.r.verdict;
        if (i % 2) {
            CHECK(v == FG_QUOTA_OK); /* Redis or backstop: well within both */
            settle(&h, &f[i], 70, &used_open);
        } else {
            CHECK(v == FG_QUOTA_OK || (v == FG_QUOTA_UNAVAILABLE && f[i].w.r.degraded));
            admitted_closed += v == FG_QUOTA_OK;
            refused_closed += v == FG_QUOTA_UNAVAILABLE;
            settle(&h, &f[i], 70, &used_closed); /* admitted before the kill: still runs to the end */
        }
    }
    fprintf(stderr, "quota_faults: closed tenant in the kill batch: %d admitted, %d refused\n", admitted_closed,
            refused_closed);

    /* While Redis is down: closed refused, open within the backstop. */
    fg_quota_result r = qh_session_open(&h, "t-closed", "s-closed");
    CHECK(r.verdict == FG_QUOTA_UNAVAILABLE && r.degraded);
    r = qh_session_open(&h, "t-open", "s-open");
    CHECK(r.verdict == FG_QUOTA_OK && r.degraded);
    r = qh_reserve(&h, "t-closed", "late", 10, 0, 0, 0);
    CHECK(r.verdict == FG_QUOTA_UNAVAILABLE && r.degraded);

    double out_start = fg_clock_mono_s() * 1e3;
    long long out_used = 0, out_refused = 0;
    int n_out = 0;
    while (fg_clock_mono_s() * 1e3 - out_start < 1500 && n_out < 400) {
        flight *g = &f[100 + (n_out % 300)];
        issue(&h, g, "t-open", 1000);
        n_out++;
        double w = wait_all(&h, g, 1);
        CHECK_MSG(w >= 0 && w <= BOUND_MS, "answer took %.0f ms", w);
        if (g->w.r.verdict == FG_QUOTA_OK) {
            CHECK(g->w.r.degraded);
            long long before = used_open;
            settle(&h, g, 900, &used_open);
            out_used += used_open - before;
        } else {
            CHECK(g->w.r.verdict == FG_QUOTA_TOKENS_PER_MINUTE && g->w.r.degraded && g->w.r.retry_after > 0);
            out_refused++;
            fg_sleep_ms(5);
        }
    }
    double out_s = (fg_clock_mono_s() * 1e3 - out_start) / 1000.0;
    double share = TPM / INSTANCES; /* tokens per minute, and the burst */
    double allowed = share + share / 60.0 * out_s + 1000;
    fprintf(stderr,
            "quota_faults: Redis down %.1f s: open tenant used %lld tokens (backstop allows %.0f), %lld refused\n",
            out_s, out_used, allowed, out_refused);
    CHECK(out_used > 0 && out_used <= allowed);
    CHECK(out_refused > 0);

    /* The running responses finish while Redis is away. */
    for (int i = 10; i < 20; i++)
        settle(&h, &running[i], 120, i % 2 ? &used_open : &used_closed);
    qh_pump(&h, 50);
    fg_quota_stats st;
    fg_quota_get_stats(h.q, &st);
    CHECK(!st.connected && st.journal_entries > 0 && st.degraded > 0);
    CHECK(file_size(journal) > 0);
    fprintf(stderr, "quota_faults: %llu journal entries waiting; last error: %s\n",
            (unsigned long long)st.journal_entries, st.last_error);

    /* ---- Redis back ---- */
    CHECK(fg_redis_restart(&fx));
    CHECK(qh_wait_connected(&h, true, 10000));
    CHECK(file_size(journal) == 0);
    redisContext *rc = fg_redis_client(&fx);
    long long total_open = fg_redis_int(rc, "GET {tenant:t-open}:usage:total");
    long long total_closed = fg_redis_int(rc, "GET {tenant:t-closed}:usage:total");
    fprintf(stderr, "quota_faults: usage:total after replay: open %lld (settled %lld), closed %lld (settled %lld)\n",
            total_open, used_open, total_closed, used_closed);
    CHECK(total_open == used_open);
    CHECK(total_closed == used_closed);
    r = qh_reserve(&h, "t-closed", "after", 10, 0, 0, 0);
    CHECK(r.verdict == FG_QUOTA_OK && !r.degraded);
    fg_quota_response_settle(h.q, "t-closed", "after", 10, 10);
    fg_quota_session_close(h.q, "t-open", "s-open");

    redisFree(rc);
    qh_close(&h);
    fg_redis_stop(&fx);
    return TEST_DONE("quota_faults");
}
