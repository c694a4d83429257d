/* test_quota_admin.c: tenants and keys through the admin calls, seen by a
 * second gateway within a second; config seeding that never overwrites, that
 * completes a seed cut off part way, and that works from start-up while Redis
 * is down. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"

/* Polls until fg_quota_tenant_by_key(key) == want (as an id, NULL: not found). */
static double wait_key(qh *h, const char *key, const char *want, double timeout_ms)
{
    double t0 = fg_clock_mono_s() * 1e3;
    for (;;) {
        fg_tenant_record r;
        bool found = fg_quota_tenant_by_key(h->q, key, &r);
        if (want ? found && strcmp(r.id, want) == 0 : !found)
            return fg_clock_mono_s() * 1e3 - t0;
        if (fg_clock_mono_s() * 1e3 - t0 > timeout_ms)
            return -1;
        qh_pump(h, 10);
    }
}

int test_quota_admin(void)
{
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, false))
        return 1;
    qh a, b;
    if (!qh_open(&a, fx.sock, 500, 30000, 1, NULL) || !qh_open(&b, fx.sock, 500, 30000, 1, NULL)) {
        fg_redis_stop(&fx);
        return 1;
    }
    CHECK(qh_wait_connected(&a, false, 5000));
    CHECK(qh_wait_connected(&b, false, 5000));
    redisContext *rc = fg_redis_client(&fx);

    /* ---- put, read back, keys ---- */
    fg_tenant_record t = qh_record("acme");
    snprintf(t.name, sizeof t.name, "Acme Corp");
    t.limits = (fg_tenant_limits){.max_sessions = 10, .max_responses = 4, .tokens_per_minute = 90000,
                                  .daily_tokens = 5000000, .max_kv_bytes = 1 << 30, .max_context_tokens = 32768,
                                  .max_output_tokens = 4096, .weight = 7, .fail_closed = true};
    CHECK(qh_put(&a, &t) == FG_QUOTA_OK);
    CHECK(qh_key_add(&a, "acme", "sk-acme-1") == FG_QUOTA_OK);
    fg_tenant_record got;
    CHECK(fg_quota_tenant_by_key(a.q, "sk-acme-1", &got)); /* this instance: at once */
    CHECK(strcmp(got.id, "acme") == 0 && strcmp(got.name, "Acme Corp") == 0);
    CHECK(memcmp(&got.limits, &t.limits, sizeof t.limits) == 0);
    CHECK(!fg_quota_tenant_by_key(a.q, "sk-acme-2", NULL));
    CHECK(!fg_quota_tenant_by_key(a.q, "", NULL));
    double ms = wait_key(&b, "sk-acme-1", "acme", 3000); /* another gateway: its version check */
    fprintf(stderr, "quota_admin: a new key reached the other gateway in %.0f ms\n", ms);
    CHECK(ms >= 0 && ms <= 1500);
    CHECK(fg_quota_tenant_get(b.q, "acme", &got) && got.limits.weight == 7 && got.limits.fail_closed);

    /* Replace: a put overwrites every field. */
    t.limits.weight = 3;
    t.limits.fail_closed = false;
    t.limits.max_kv_bytes = 0;
    CHECK(qh_put(&a, &t) == FG_QUOTA_OK);
    CHECK(fg_quota_tenant_get(a.q, "acme", &got) && got.limits.weight == 3 && !got.limits.fail_closed &&
          got.limits.max_kv_bytes == 0);
    redisReply *x = redisCommand(rc, "HGET {tenant:acme}:config fail_mode");
    CHECK(x && x->type == REDIS_REPLY_STRING && strcmp(x->str, "open") == 0);
    if (x)
        freeReplyObject(x);

    /* A key belongs to one tenant. */
    fg_tenant_record other = qh_record("globex");
    CHECK(qh_put(&a, &other) == FG_QUOTA_OK);
    CHECK(qh_key_add(&a, "globex", "sk-acme-1") == FG_QUOTA_INVALID);
    CHECK(qh_key_add(&a, "globex", "sk-globex-1") == FG_QUOTA_OK);
    CHECK(qh_key_revoke(&a, "globex", "sk-acme-1") == FG_QUOTA_INVALID);
    CHECK(qh_key_add(&a, "nobody", "sk-x") == FG_QUOTA_UNKNOWN_TENANT);
    CHECK(fg_redis_int(rc, "EXISTS flashgate:keyhash:x") == 0);
    fg_tenant_record list[8];
    CHECK(fg_quota_tenant_list(a.q, list, 8) == 2);
    CHECK(strcmp(list[0].id, "acme") == 0 && strcmp(list[1].id, "globex") == 0);

    /* Revoke: gone here at once, there within a second. */
    CHECK(qh_key_revoke(&a, "acme", "sk-acme-1") == FG_QUOTA_OK);
    CHECK(!fg_quota_tenant_by_key(a.q, "sk-acme-1", NULL));
    ms = wait_key(&b, "sk-acme-1", NULL, 3000);
    CHECK(ms >= 0 && ms <= 1500);
    CHECK(qh_key_add(&a, "globex", "sk-acme-1") == FG_QUOTA_OK); /* free for another tenant now */

    /* Bad records. */
    fg_tenant_record bad = qh_record("acme");
    bad.limits.weight = 1001;
    CHECK(qh_put(&a, &bad) == FG_QUOTA_INVALID);
    bad = qh_record("acme");
    bad.limits.tokens_per_minute = -5;
    CHECK(qh_put(&a, &bad) == FG_QUOTA_INVALID);
    bad = qh_record("a:b");
    CHECK(qh_put(&a, &bad) == FG_QUOTA_INVALID);
    CHECK(qh_put(&a, NULL) == FG_QUOTA_INVALID);

    /* Delete: tenant, keys and bindings gone. */
    CHECK(qh_session_open(&a, "globex", "s1").verdict == FG_QUOTA_OK);
    CHECK(qh_delete(&a, "globex") == FG_QUOTA_OK);
    CHECK(!fg_quota_tenant_get(a.q, "globex", NULL));
    CHECK(!fg_quota_tenant_by_key(a.q, "sk-globex-1", NULL));
    CHECK(fg_redis_int(rc, "EXISTS {tenant:globex}:config {tenant:globex}:keys {tenant:globex}:sessions") == 0);
    CHECK(fg_redis_int(rc, "SISMEMBER flashgate:tenants globex") == 0);
    CHECK(qh_delete(&a, "globex") == FG_QUOTA_UNKNOWN_TENANT);
    CHECK(qh_session_open(&a, "globex", "s2").verdict == FG_QUOTA_UNKNOWN_TENANT);
    CHECK(wait_key(&b, "sk-globex-1", NULL, 3000) >= 0);

    /* ---- seeding ---- */
    fg_tenant_record s = qh_record("seeded");
    s.limits.tokens_per_minute = 1234;
    const char *keys[] = {"sk-seed-1", "sk-seed-2"};
    fg_quota_tenant_seed(a.q, &s, keys, 2);
    CHECK(fg_quota_tenant_by_key(a.q, "sk-seed-2", &got) && strcmp(got.id, "seeded") == 0); /* at once, locally */
    CHECK(wait_key(&b, "sk-seed-1", "seeded", 3000) >= 0);
    /* Seeding again (a restart with another config) does not overwrite what the admin API set. */
    s.limits.tokens_per_minute = 999;
    const char *keys2[] = {"sk-seed-3"};
    fg_quota_tenant_seed(b.q, &s, keys2, 1);
    qh_pump(&b, 200);
    CHECK(qh_put(&b, &other) == FG_QUOTA_OK); /* a sync point: after the seed on b's thread */
    CHECK(fg_redis_int(rc, "HGET {tenant:seeded}:config tokens_per_minute") == 1234);
    CHECK(!fg_quota_tenant_by_key(b.q, "sk-seed-3", NULL));
    /* A seed cut off after its first write (the gateway killed between the
     * round trips) is written whole by the next start: its keys reach Redis,
     * so another gateway, which has no seed of it, knows them. */
    CHECK(fg_redis_int(rc, "HSET {tenant:cut}:config name cut weight 1") == 2);
    fg_tenant_record cut = qh_record("cut");
    const char *cut_keys[] = {"sk-cut-1"};
    fg_quota_tenant_seed(a.q, &cut, cut_keys, 1);
    CHECK(wait_key(&b, "sk-cut-1", "cut", 5000) >= 0);
    CHECK(fg_redis_int(rc, "SISMEMBER flashgate:tenants cut") == 1);

    /* ---- admin while Redis is down; seeding at a start-up without Redis ---- */
    fg_redis_kill(&fx, SIGKILL);
    CHECK(qh_put(&a, &t) == FG_QUOTA_UNAVAILABLE);
    qh e;
    CHECK(qh_open(&e, fx.sock, 200, 30000, 1, NULL));
    fg_tenant_record late = qh_record("late");
    const char *late_keys[] = {"sk-late-1"};
    fg_quota_tenant_seed(e.q, &late, late_keys, 1);
    CHECK(fg_quota_tenant_by_key(e.q, "sk-late-1", &got) && strcmp(got.id, "late") == 0);
    fg_quota_result r = qh_reserve(&e, "late", "r1", 100, 0, 0, 0);
    CHECK(r.verdict == FG_QUOTA_OK && r.degraded);
    fg_quota_response_settle(e.q, "late", "r1", 100, 25);
    CHECK(fg_redis_restart(&fx)); /* empty: no AOF */
    CHECK(qh_wait_connected(&e, true, 10000));
    redisFree(rc);
    rc = fg_redis_client(&fx);
    CHECK(fg_redis_int(rc, "SISMEMBER flashgate:tenants late") == 1);
    CHECK(fg_redis_int(rc, "GET {tenant:late}:usage:total") == 25);
    CHECK(wait_key(&e, "sk-late-1", "late", 3000) >= 0);
    CHECK(wait_key(&a, "sk-late-1", "late", 5000) >= 0); /* a reconnected and reloaded too */

    redisFree(rc);
    qh_close(&a);
    qh_close(&b);
    qh_close(&e);
    fg_redis_stop(&fx);
    return TEST_DONE("quota_admin");
}
