/* test_quota_instances.c: the cluster view (policies/session_dir.h) against a
 * real redis-server, with two fg_quota objects as instances: each sees both
 * records with their loads, its own flagged; a record that does not parse
 * (written into Redis by hand) is left out of the view and counted as an
 * error; a destroyed instance's record leaves the other's view once it
 * expired; the record parser refuses what it must. */
#include <stdio.h>
#include <string.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"
#include "policies/session_dir.h"

#define TTL_MS 600 /* under 3 publish periods: records live 3 s */

/* Pumps h until its view holds n instances (the first n copied into v); false after 10 s. */
static bool view_of(qh *h, size_t n, fg_dir_instance *v)
{
    for (int i = 0; i < 1000; i++) {
        if (fg_quota_dir_instances(h->q, v, FG_DIR_INSTANCES_MAX, NULL) == n)
            return true;
        qh_pump(h, 10);
    }
    return false;
}

static void parse_cases(void)
{
    fg_dir_instance d;
    fg_diag diag = {{0}};
    static const char good[] = "1764687135123 ws://h:1 2 3 1 4096 65536 12500 1";
    CHECK(fg_dir_record_parse(good, strlen(good), &d, &diag) == FG_OK);
    CHECK(d.published_ms == 1764687135123 && !strcmp(d.url, "ws://h:1") && d.load.leases == 2 &&
          d.load.sessions == 3 && d.load.streaming == 1 && d.load.kv_used_bytes == 4096 &&
          d.load.kv_capacity_bytes == 65536 && d.load.tokens_per_s_milli == 12500 && d.load.draining);
    char again[FG_DIR_RECORD_MAX];
    size_t n = fg_dir_record_format(d.url, &d.load, again, sizeof again);
    CHECK(n && !strcmp(again, good + strlen("1764687135123 ")));
    static const char *const bad[] = {
        "",
        "1 ws://h:1 2 3 1 4096 65536 12500",          /* a field short */
        "1 ws://h:1 2 3 1 4096 65536 12500 1 9",      /* one too many */
        "1 ws://h:1 2 3 1 4096 65536 12500 2",        /* draining not 0 or 1 */
        "1 ws://h:1 -2 3 1 4096 65536 12500 1",       /* negative */
        "1 ws://h:1 +2 3 1 4096 65536 12500 1",
        "1 ws://h:1 2x 3 1 4096 65536 12500 1",
        "1 ws://h:1 99999999999999999999 3 1 4096 65536 12500 1", /* over int64 */
        "1  ws://h:1 2 3 1 4096 65536 12500 1",       /* two spaces */
        "1 ws://h:1 2 3 1 4096 65536 12500 1 ",       /* trailing space */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        diag.msg[0] = 0;
        CHECK_MSG(fg_dir_record_parse(bad[i], strlen(bad[i]), &d, &diag) == FG_ERR_INVALID_ARG && diag.msg[0],
                  "record %zu parsed: \"%s\"", i, bad[i]);
    }
    char nul[] = "1 ws://h:1 2 3 1 4096 65536 12500 1";
    nul[4] = 0; /* a NUL inside the url */
    CHECK(fg_dir_record_parse(nul, sizeof nul - 1, &d, &diag) == FG_ERR_INVALID_ARG);
}

int test_quota_instances(void)
{
    parse_cases();
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, false))
        return 1;
    qh a, b;
    if (!qh_open(&a, fx.sock, 500, TTL_MS, 1, NULL) || !qh_open(&b, fx.sock, 500, TTL_MS, 1, NULL)) {
        fg_redis_stop(&fx);
        return 1;
    }
    CHECK(qh_dir_enable(&a, "gw-a", TTL_MS) && qh_dir_enable(&b, "gw-b", TTL_MS));
    fg_dir_load la = {.sessions = 5, .streaming = 2, .kv_used_bytes = 1 << 20, .kv_capacity_bytes = 64 << 20,
                      .tokens_per_s_milli = 41500, .leases = 99 /* ignored: the directory's count is sent */};
    fg_quota_dir_publish(a.q, &la);
    fg_quota_dir_claim(a.q, "t-inst", "s1", FG_DIR_NEW, 0, NULL, NULL);
    fg_dir_load lb = {.sessions = 1, .draining = true};
    fg_quota_dir_publish(b.q, &lb);

    static fg_dir_instance v[FG_DIR_INSTANCES_MAX];
    CHECK_MSG(view_of(&b, 2, v), "b sees both instances");
    /* a's record with the new session's lease counted may take one more period */
    for (int i = 0; i < 300 && !(v[0].load.leases == 1); i++) {
        qh_pump(&b, 10);
        fg_quota_dir_instances(b.q, v, FG_DIR_INSTANCES_MAX, NULL);
    }
    CHECK(!strcmp(v[0].id, "gw-a") && !strcmp(v[1].id, "gw-b")); /* by id */
    CHECK(!strcmp(v[0].url, "ws://gw-a.example:8080") && !v[0].self && v[1].self);
    CHECK_MSG(v[0].load.sessions == 5 && v[0].load.streaming == 2 && v[0].load.kv_used_bytes == 1 << 20 &&
                  v[0].load.kv_capacity_bytes == 64 << 20 && v[0].load.tokens_per_s_milli == 41500 &&
                  v[0].load.leases == 1 && !v[0].load.draining,
              "a's load as b sees it: sessions %llu leases %llu", (unsigned long long)v[0].load.sessions,
              (unsigned long long)v[0].load.leases);
    CHECK(v[1].load.draining && v[1].load.sessions == 1);
    CHECK_MSG(v[0].age_ms >= 0 && v[0].age_ms < 3000 && v[0].expires_in_ms > 0 && v[0].expires_in_ms <= 3000,
              "a's record: age %lld ms, expires in %lld ms", (long long)v[0].age_ms, (long long)v[0].expires_in_ms);
    int64_t age = -2;
    fg_quota_dir_instances(b.q, v, 1, &age);
    CHECK(age >= 0 && age < 3000);

    /* A record that does not parse is left out, and counted. */
    redisContext *rc = fg_redis_client(&fx);
    redisReply *x = redisCommand(rc, "HSET {flashgate:instances}:load gw-x %s", "1 ws://x 1 2");
    if (x)
        freeReplyObject(x);
    x = redisCommand(rc, "ZADD {flashgate:instances}:live 99999999999999 gw-x");
    if (x)
        freeReplyObject(x);
    fg_quota_stats qs0, qs1;
    fg_quota_get_stats(b.q, &qs0);
    qs1 = qs0;
    for (int i = 0; i < 300 && qs1.errors == qs0.errors; i++) {
        qh_pump(&b, 10);
        fg_quota_get_stats(b.q, &qs1);
    }
    CHECK_MSG(qs1.errors > qs0.errors, "the malformed record counted as an error");
    CHECK(fg_quota_dir_instances(b.q, v, FG_DIR_INSTANCES_MAX, NULL) == 2);
    x = redisCommand(rc, "ZREM {flashgate:instances}:live gw-x");
    if (x)
        freeReplyObject(x);

    /* a destroyed: its record leaves b's view once expired (3 s after its last publish). */
    qh_close(&a);
    CHECK_MSG(view_of(&b, 1, v) && !strcmp(v[0].id, "gw-b"), "a left b's view");
    CHECK(fg_redis_int(rc, "HEXISTS {flashgate:instances}:load gw-a") == 0);
    redisFree(rc);
    qh_close(&b);
    fg_redis_stop(&fx);
    return TEST_DONE("quota_instances");
}
