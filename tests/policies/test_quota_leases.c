/* test_quota_leases.c: concurrency leases live while renewed and expire when
 * their gateway dies. A destroyed fg_quota that never closed its session nor
 * settled its response is a SIGKILLed gateway: nobody releases its leases,
 * and they must stop counting lease_ttl after the last renewal. */
#include <stdio.h>
#include <string.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"

#define TTL_MS 600

int test_quota_leases(void)
{
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, false))
        return 1;
    qh a, b;
    if (!qh_open(&a, fx.sock, 500, TTL_MS, 1, NULL) || !qh_open(&b, fx.sock, 500, TTL_MS, 1, NULL)) {
        fg_redis_stop(&fx);
        return 1;
    }
    CHECK(qh_wait_connected(&a, false, 5000));
    CHECK(qh_wait_connected(&b, false, 5000));
    redisContext *rc = fg_redis_client(&fx);

    fg_tenant_record t = qh_record("t-lease");
    t.limits.max_sessions = 1;
    t.limits.max_responses = 1;
    CHECK(qh_put(&a, &t) == FG_QUOTA_OK);
    CHECK(qh_session_open(&a, "t-lease", "s-a").verdict == FG_QUOTA_OK);
    CHECK(qh_reserve(&a, "t-lease", "r-a", 100, 0, 0, 0).verdict == FG_QUOTA_OK);

    /* Well past the ttl: gateway A renews, so B is still refused. */
    fg_sleep_ms(3 * TTL_MS);
    CHECK(qh_session_open(&b, "t-lease", "s-b").verdict == FG_QUOTA_SESSIONS);
    CHECK(qh_reserve(&b, "t-lease", "r-b", 100, 0, 0, 0).verdict == FG_QUOTA_RESPONSES);
    fg_tenant_usage u;
    CHECK(qh_usage(&b, "t-lease", &u));
    CHECK_MSG(u.sessions == 1 && u.responses == 1 && !u.degraded, "sessions %lld responses %lld",
              (long long)u.sessions, (long long)u.responses);
    /* The members name the gateway holding them: "<instance>:<id>". */
    redisReply *m = redisCommand(rc, "ZRANGE {tenant:t-lease}:sessions 0 -1");
    CHECK(m && m->type == REDIS_REPLY_ARRAY && m->elements == 1 && strlen(m->element[0]->str) == 16 + 1 + 3 &&
          strcmp(m->element[0]->str + 17, "s-a") == 0);
    if (m)
        freeReplyObject(m);

    /* Gateway A dies without releasing anything. */
    qh_close(&a);
    double t0 = fg_clock_mono_s() * 1e3;
    fg_quota_verdict v = FG_QUOTA_SESSIONS;
    while (v != FG_QUOTA_OK && fg_clock_mono_s() * 1e3 - t0 < 5000) {
        fg_sleep_ms(20);
        v = qh_session_open(&b, "t-lease", "s-b").verdict;
    }
    double waited = fg_clock_mono_s() * 1e3 - t0;
    CHECK(v == FG_QUOTA_OK);
    /* Last renewal at most ttl/3 before the death: expiry within [2/3 ttl, ttl] after it. */
    CHECK_MSG(waited >= TTL_MS * 2 / 3 - 50 && waited <= TTL_MS + 300, "lease gone after %.0f ms", waited);
    fprintf(stderr, "quota_leases: dead gateway's session lease expired %.0f ms after its death (ttl %d ms)\n",
            waited, TTL_MS);
    CHECK(qh_reserve(&b, "t-lease", "r-b", 100, 0, 0, 0).verdict == FG_QUOTA_OK);
    CHECK(qh_usage(&b, "t-lease", &u));
    CHECK(u.sessions == 1 && u.responses == 1);
    /* The expired session entry is gone; the response entry is kept a day
     * (settle's "already settled" guard) but no longer counts. */
    CHECK(fg_redis_int(rc, "ZCARD {tenant:t-lease}:sessions") == 1);
    CHECK(fg_redis_int(rc, "ZCARD {tenant:t-lease}:responses") == 2);

    /* B's own leases are renewed in turn: a third gateway is refused after several ttls. */
    qh c;
    CHECK(qh_open(&c, fx.sock, 500, TTL_MS, 1, NULL));
    fg_sleep_ms(3 * TTL_MS);
    CHECK(qh_session_open(&c, "t-lease", "s-c").verdict == FG_QUOTA_SESSIONS);
    CHECK(qh_reserve(&c, "t-lease", "r-c", 100, 0, 0, 0).verdict == FG_QUOTA_RESPONSES);
    /* A clean close and settle free them at once. */
    fg_quota_session_close(b.q, "t-lease", "s-b");
    fg_quota_response_settle(b.q, "t-lease", "r-b", 100, 40);
    qh_pump(&b, 0);
    double t1 = fg_clock_mono_s() * 1e3;
    v = FG_QUOTA_SESSIONS;
    while (v != FG_QUOTA_OK && fg_clock_mono_s() * 1e3 - t1 < 2000)
        v = qh_session_open(&c, "t-lease", "s-c").verdict;
    CHECK(v == FG_QUOTA_OK);
    CHECK(fg_clock_mono_s() * 1e3 - t1 < TTL_MS / 2);
    CHECK(qh_reserve(&c, "t-lease", "r-c", 100, 0, 0, 0).verdict == FG_QUOTA_OK);
    CHECK(fg_redis_int(rc, "GET {tenant:t-lease}:usage:total") == 40);

    qh_close(&b);
    qh_close(&c);
    redisFree(rc);
    fg_redis_stop(&fx);
    return TEST_DONE("quota_leases");
}
