/* test_quota_traffic.c: what Redis sees.
 *
 *   round trips: INFO commandstats counts exactly two EVALSHA per response
 *     (reserve, settle), whether it generated 1 token or 5000; nothing else
 *     per response but the once-a-second version GET.
 *   latency: reserve p50/p99 against a local redis-server, and the pipelined
 *     throughput of many reservations at once.
 *   layout: every key of tenant X starts with the hash tag "{tenant:X}" (one
 *     cluster slot); only the flashgate:* index keys are global.
 *   secrets: no API key appears raw in any key name or value.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_test.h"
#include "policies/sha256.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"

static const char *const RAW_KEYS[] = {"sk-traffic-RAW-key-1", "sk-traffic-RAW-key-2", "sk-seed-RAW-key-3"};

/* Sum of "calls=" over every command in INFO commandstats, and a short listing. */
static long long all_calls(redisContext *c, char *listing, size_t cap)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    long long total = 0;
    if (listing)
        listing[0] = '\0';
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    for (const char *p = strstr(r->str, "cmdstat_"); p; p = strstr(p + 1, "cmdstat_")) {
        const char *colon = strchr(p, ':');
        const char *calls = strstr(p, "calls=");
        if (!colon || !calls)
            break;
        long long n = strtoll(calls + 6, NULL, 10);
        total += n;
        if (listing) {
            size_t len = strlen(listing);
            snprintf(listing + len, cap - len, "%s%.*s=%lld", len ? " " : "", (int)(colon - p - 8), p + 8, n);
        }
    }
    freeReplyObject(r);
    return total;
}

static void reset_stats(redisContext *c)
{
    redisReply *r = redisCommand(c, "CONFIG RESETSTAT");
    if (r)
        freeReplyObject(r);
}

/* Waits until the tenant's usage:total reaches want (settles have no callback). */
static bool wait_total(redisContext *c, const char *tenant, long long want)
{
    for (int i = 0; i < 500; i++) {
        if (fg_redis_int(c, "GET {tenant:%s}:usage:total", tenant) == want)
            return true;
        fg_sleep_ms(10);
    }
    return false;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* n responses of `used` tokens each; returns the EVALSHA calls Redis counted. */
static long long responses(qh *h, redisContext *rc, int n, long long reserve, long long used, long long *total,
                           long long *sent, char *listing, size_t cap)
{
    fg_quota_stats s0, s1;
    reset_stats(rc);
    fg_quota_get_stats(h->q, &s0);
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "rt-%lld-%d", used, i);
        fg_quota_result r = qh_reserve(h, "t-traffic", key, reserve, 0, 0, 0);
        CHECK(r.verdict == FG_QUOTA_OK);
        fg_quota_response_settle(h->q, "t-traffic", key, reserve, used);
        *total += used;
    }
    CHECK(wait_total(rc, "t-traffic", *total));
    long long evalsha = fg_redis_cmdstat(rc, "evalsha");
    all_calls(rc, listing, cap); /* Redis 7 counts the commands scripts run too: for the listing only */
    fg_quota_get_stats(h->q, &s1);
    *sent = (long long)(s1.calls - s0.calls);
    return evalsha;
}

static void check_layout_and_secrets(redisContext *rc)
{
    unsigned long long cursor = 0;
    int n_keys = 0, n_global = 0;
    bool seen[7] = {false};
    static const char *const kinds[7] = {":config", ":keys", ":sessions", ":responses", ":tpm", ":daily:", ":usage:total"};
    do {
        redisReply *r = redisCommand(rc, "SCAN %llu COUNT 1000", cursor);
        CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r)
                freeReplyObject(r);
            return;
        }
        cursor = strtoull(r->element[0]->str, NULL, 10);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const char *key = r->element[1]->element[i]->str;
            n_keys++;
            for (size_t k = 0; k < sizeof RAW_KEYS / sizeof *RAW_KEYS; k++)
                CHECK_MSG(!strstr(key, RAW_KEYS[k]) && !strstr(key, "RAW"), "raw key in key name %s", key);
            if (strncmp(key, "flashgate:", 10) == 0) {
                n_global++;
            } else {
                /* The first {...} is the hash tag Redis Cluster hashes: "{tenant:<id>}". */
                const char *close = strchr(key, '}');
                CHECK_MSG(strncmp(key, "{tenant:", 8) == 0 && close && close > key + 8, "untagged key %s", key);
                for (int k = 0; k < 7; k++)
                    if (close && strncmp(close + 1, kinds[k], strlen(kinds[k])) == 0)
                        seen[k] = true;
            }
            /* Every value, whatever its type. */
            redisReply *type = redisCommand(rc, "TYPE %s", key);
            const char *ty = type && type->type == REDIS_REPLY_STATUS ? type->str : "";
            redisReply *v = NULL;
            if (strcmp(ty, "string") == 0)
                v = redisCommand(rc, "GET %s", key);
            else if (strcmp(ty, "hash") == 0)
                v = redisCommand(rc, "HGETALL %s", key);
            else if (strcmp(ty, "set") == 0)
                v = redisCommand(rc, "SMEMBERS %s", key);
            else if (strcmp(ty, "zset") == 0)
                v = redisCommand(rc, "ZRANGE %s 0 -1 WITHSCORES", key);
            CHECK_MSG(v != NULL, "key %s of type %s", key, ty);
            if (v && v->type == REDIS_REPLY_STRING)
                CHECK_MSG(!strstr(v->str, "RAW"), "raw key in the value of %s", key);
            for (size_t e = 0; v && v->type == REDIS_REPLY_ARRAY && e < v->elements; e++)
                CHECK_MSG(!v->element[e]->str || !strstr(v->element[e]->str, "RAW"), "raw key in %s", key);
            if (v)
                freeReplyObject(v);
            if (type)
                freeReplyObject(type);
        }
        freeReplyObject(r);
    } while (cursor != 0);
    for (int k = 0; k < 7; k++)
        CHECK_MSG(seen[k], "no key of kind %s was seen", kinds[k]);
    fprintf(stderr, "quota_traffic: %d keys scanned, %d global (flashgate:*), all others tagged {tenant:ID}\n",
            n_keys, n_global);

    /* The key is found by its hash. */
    uint8_t d[FG_SHA256_BYTES];
    char hex[FG_SHA256_HEX_LEN + 1];
    fg_sha256(RAW_KEYS[0], strlen(RAW_KEYS[0]), d);
    fg_sha256_hex(d, hex);
    redisReply *r = redisCommand(rc, "GET flashgate:keyhash:%s", hex);
    CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "t-traffic") == 0);
    if (r)
        freeReplyObject(r);
    CHECK(fg_redis_int(rc, "SISMEMBER {tenant:t-traffic}:keys %s", hex) == 1);
}

int test_quota_traffic(void)
{
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, false))
        return 1;
    qh h;
    /* Leases of 10 minutes: no renewal falls inside the counted windows. */
    if (!qh_open(&h, fx.sock, 500, 600000, 1, NULL)) {
        fg_redis_stop(&fx);
        return 1;
    }
    CHECK(qh_wait_connected(&h, false, 5000));
    redisContext *rc = fg_redis_client(&fx);

    fg_tenant_record t = qh_record("t-traffic");
    t.limits.max_sessions = 100;
    t.limits.max_responses = 100000;
    t.limits.tokens_per_minute = 1000000000;
    t.limits.daily_tokens = 1000000000000LL;
    CHECK(qh_put(&h, &t) == FG_QUOTA_OK);
    CHECK(qh_key_add(&h, "t-traffic", RAW_KEYS[0]) == FG_QUOTA_OK);
    CHECK(qh_key_add(&h, "t-traffic", RAW_KEYS[1]) == FG_QUOTA_OK);
    fg_tenant_record seed = qh_record("t-seed");
    const char *seed_keys[] = {RAW_KEYS[2]};
    fg_quota_tenant_seed(h.q, &seed, seed_keys, 1);
    /* The seed is written in the background: wait for it, then for one admin
     * call queued after it, so nothing of it falls into the counted windows. */
    for (int i = 0; i < 500 && fg_redis_int(rc, "SCARD {tenant:t-seed}:keys") != 1; i++)
        fg_sleep_ms(10);
    CHECK(fg_redis_int(rc, "SCARD {tenant:t-seed}:keys") == 1);
    CHECK(qh_put(&h, &t) == FG_QUOTA_OK);
    CHECK(qh_session_open(&h, "t-traffic", "s1").verdict == FG_QUOTA_OK);

    /* ---- round trips per response ---- */
    enum { N = 50 };
    long long total = 0, sent_small, sent_big;
    char list_small[1024], list_big[1024];
    long long ev_small = responses(&h, rc, N, 2, 1, &total, &sent_small, list_small, sizeof list_small);
    long long ev_big = responses(&h, rc, N, 6000, 5000, &total, &sent_big, list_big, sizeof list_big);
    fprintf(stderr, "quota_traffic: %d responses of 1 token: evalsha %lld (%.2f per response), commands sent %lld; "
            "inside Redis: %s\n", N, ev_small, (double)ev_small / N, sent_small, list_small);
    fprintf(stderr, "quota_traffic: %d responses of 5000 tokens: evalsha %lld (%.2f per response), commands sent %lld; "
            "inside Redis: %s\n", N, ev_big, (double)ev_big / N, sent_big, list_big);
    CHECK(ev_small == 2 * N);
    CHECK(ev_big == 2 * N);
    /* Beyond the two scripts this client sent only the cache's version GET (once a second). */
    CHECK_MSG(sent_small - 2 * N <= 3 && sent_big - 2 * N <= 3, "other commands sent: %lld / %lld",
              sent_small - 2 * N, sent_big - 2 * N);

    /* ---- latency, one at a time ---- */
    enum { L = 2000 };
    static double lat[L];
    fg_quota_stats s0, s1;
    fg_quota_get_stats(h.q, &s0);
    for (int i = 0; i < L; i++) {
        char key[32];
        snprintf(key, sizeof key, "lat-%d", i);
        qh_wait w = {.issued_ms = fg_clock_mono_s() * 1e3};
        fg_quota_response_reserve(h.q, "t-traffic", key, 100, 0, 0, 0, qh_on_result, &w);
        CHECK(qh_wait_for(&h, &w, 5000) && w.r.verdict == FG_QUOTA_OK);
        lat[i] = w.done_ms - w.issued_ms;
        fg_quota_response_settle(h.q, "t-traffic", key, 100, 50);
        total += 50;
    }
    fg_quota_get_stats(h.q, &s1);
    qsort(lat, L, sizeof *lat, cmp_double);
    fprintf(stderr, "quota_traffic: reserve latency (issue to callback) over %d: p50 %.3f ms, p99 %.3f ms, max %.3f ms; "
            "%.2f round trips per response\n",
            L, lat[L / 2], lat[L * 99 / 100], lat[L - 1], (double)(s1.round_trips - s0.round_trips) / L);
    CHECK(lat[L * 99 / 100] < 100);

    /* ---- many at once: pipelined ---- */
    enum { P = 5000 };
    static qh_wait ws[P];
    fg_quota_get_stats(h.q, &s0);
    double t0 = fg_clock_mono_s() * 1e3;
    for (int i = 0; i < P; i++) {
        char key[32];
        snprintf(key, sizeof key, "pipe-%d", i);
        ws[i].issued_ms = t0;
        fg_quota_response_reserve(h.q, "t-traffic", key, 10, 0, 0, 0, qh_on_result, &ws[i]);
    }
    int ok = 0;
    for (int i = 0; i < P; i++)
        ok += qh_wait_for(&h, &ws[i], 10000) && ws[i].r.verdict == FG_QUOTA_OK;
    double el = fg_clock_mono_s() * 1e3 - t0;
    fg_quota_get_stats(h.q, &s1);
    CHECK(ok == P);
    fprintf(stderr, "quota_traffic: %d reservations at once: %.0f ms (%.0f per second), %llu round trips\n", P, el,
            P / (el / 1000), (unsigned long long)(s1.round_trips - s0.round_trips));
    for (int i = 0; i < P; i++) {
        char key[32];
        snprintf(key, sizeof key, "pipe-%d", i);
        fg_quota_response_settle(h.q, "t-traffic", key, 10, 10);
        total += 10;
    }
    CHECK(wait_total(rc, "t-traffic", total));

    /* ---- NOSCRIPT: the script cache flushed (as after a failover) ---- */
    redisReply *fl = redisCommand(rc, "SCRIPT FLUSH");
    CHECK(fl && fl->type == REDIS_REPLY_STATUS);
    if (fl)
        freeReplyObject(fl);
    reset_stats(rc);
    CHECK(qh_reserve(&h, "t-traffic", "ns-1", 10, 0, 0, 0).verdict == FG_QUOTA_OK);
    fg_quota_response_settle(h.q, "t-traffic", "ns-1", 10, 7);
    total += 7;
    CHECK(wait_total(rc, "t-traffic", total));
    CHECK(fg_redis_cmdstat(rc, "eval") == 2); /* reserve and settle sent again as EVAL, once each */
    CHECK(qh_reserve(&h, "t-traffic", "ns-2", 10, 0, 0, 0).verdict == FG_QUOTA_OK); /* EVALSHA works again */
    CHECK(fg_redis_cmdstat(rc, "eval") == 2);
    fg_quota_response_settle(h.q, "t-traffic", "ns-2", 10, 10);
    total += 10;
    CHECK(wait_total(rc, "t-traffic", total));

    /* ---- layout and secrets ---- */
    fg_quota_session_close(h.q, "t-traffic", "s1");
    CHECK(qh_session_open(&h, "t-traffic", "s2").verdict == FG_QUOTA_OK); /* sessions zset kept non-empty */
    CHECK(qh_reserve(&h, "t-traffic", "held", 10, 0, 0, 0).verdict == FG_QUOTA_OK); /* and responses */
    check_layout_and_secrets(rc);

    fg_quota_stats st;
    fg_quota_get_stats(h.q, &st);
    CHECK_MSG(st.errors == 0, "%s", st.last_error);
    redisFree(rc);
    qh_close(&h);
    fg_redis_stop(&fx);
    return TEST_DONE("quota_traffic");
}
