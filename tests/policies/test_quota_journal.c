/* test_quota_journal.c: the fail-open journal on disk.
 *
 * A gateway journals usage while Redis is down and is then stopped before
 * Redis returns; the next gateway started on the same journal file replays
 * it (a torn last line, as a crash mid-write leaves, is skipped). Replaying
 * the same entries a second time changes nothing: settle entries are
 * guarded by their lease, usage entries by their ids. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *copy = malloc(n + 1);
    if (copy)
        memcpy(copy, buf, n + 1);
    return copy;
}

static void spill(const char *path, const char *text, const char *mode)
{
    FILE *f = fopen(path, mode);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

int test_quota_journal(void)
{
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, true))
        return 1;
    char journal[400];
    snprintf(journal, sizeof journal, "%s/quota.journal", fx.dir);
    qh g;
    if (!qh_open(&g, fx.sock, 200, 30000, 1, journal)) {
        fg_redis_stop(&fx);
        return 1;
    }
    CHECK(qh_wait_connected(&g, false, 5000));
    fg_tenant_record t = qh_record("t-j");
    t.limits.tokens_per_minute = 100000;
    t.limits.daily_tokens = 1000000;
    CHECK(qh_put(&g, &t) == FG_QUOTA_OK);
    CHECK(qh_key_add(&g, "t-j", "sk-journal-secret") == FG_QUOTA_OK);
    CHECK(qh_reserve(&g, "t-j", "a", 100, 0, 0, 0).verdict == FG_QUOTA_OK);

    fg_redis_kill(&fx, SIGKILL);
    fg_quota_response_settle(g.q, "t-j", "a", 100, 30); /* 'S': Redis holds the reservation */
    fg_quota_result r = qh_reserve(&g, "t-j", "b", 100, 0, 0, 0);
    CHECK(r.verdict == FG_QUOTA_OK && r.degraded);
    fg_quota_response_settle(g.q, "t-j", "b", 100, 40); /* 'U': the backstop admitted it */
    fg_quota_stats st;
    for (int i = 0; i < 100; i++) {
        qh_pump(&g, 10);
        fg_quota_get_stats(g.q, &st);
        if (st.journal_entries == 2)
            break;
    }
    CHECK(st.journal_entries == 2);
    qh_close(&g); /* stopped before Redis returns */

    char *text = slurp(journal);
    CHECK(text && count_lines(text) == 2);
    CHECK(text && strstr(text, "t-j") && !strstr(text, "sk-journal-secret"));
    fprintf(stderr, "quota_journal: journal left for the next start:\n%s", text ? text : "(none)\n");
    spill(journal, "U t-j torn-entry 19000 10", "a"); /* a crash mid-write */

    CHECK(fg_redis_restart(&fx));
    redisContext *rc = fg_redis_client(&fx);
    CHECK(fg_redis_int(rc, "GET {tenant:t-j}:usage:total") == -1); /* nothing settled before */
    qh g2;
    CHECK(qh_open(&g2, fx.sock, 200, 30000, 1, journal));
    fg_quota_get_stats(g2.q, &st);
    CHECK(st.journal_entries == 2); /* read from the file at start; the torn line skipped */
    CHECK(qh_wait_connected(&g2, true, 5000));
    CHECK(fg_redis_int(rc, "GET {tenant:t-j}:usage:total") == 70);
    /* Today's counter: 100 reserved for a, 30 - 100 settled, 40 replayed for b. */
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char daily[80];
    snprintf(daily, sizeof daily, "{tenant:t-j}:daily:%04d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
    CHECK_MSG(fg_redis_int(rc, "GET %s", daily) == 70, "daily %lld", fg_redis_int(rc, "GET %s", daily));
    qh_close(&g2);

    /* The same entries again: counted once. */
    spill(journal, text ? text : "", "w");
    qh g3;
    CHECK(qh_open(&g3, fx.sock, 200, 30000, 1, journal));
    CHECK(qh_wait_connected(&g3, true, 5000));
    CHECK(fg_redis_int(rc, "GET {tenant:t-j}:usage:total") == 70);
    CHECK(fg_redis_int(rc, "GET %s", daily) == 70);
    fg_quota_get_stats(g3.q, &st);
    CHECK_MSG(st.errors == 0, "%s", st.last_error);
    qh_close(&g3);

    /* A journal path that cannot be opened is an error at create. */
    fg_quota_options o = {.redis_address = fx.sock, .journal_path = "/nonexistent-dir/quota.journal"};
    fg_quota_t *bad = NULL;
    fg_diag d = {{0}};
    CHECK(fg_quota_create(&o, &bad, &d) == FG_ERR_IO && bad == NULL);
    CHECK(strstr(d.msg, "/nonexistent-dir/quota.journal") != NULL);

    free(text);
    redisFree(rc);
    fg_redis_stop(&fx);
    return TEST_DONE("quota_journal");
}
