/* test_quota_dir.c: the session directory (policies/session_dir.h) against a
 * real redis-server, with two or three fg_quota objects as instances:
 * a new session is held by its maker and seen as elsewhere by the others; a
 * look and two takes with the epoch it saw: exactly one take wins; a lease
 * another instance took is found lost by the old holder's renewal, which
 * then refuses writes (fencing); a destroyed instance's leases expire and can
 * be adopted with a higher epoch; a release gives a lease back at once. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"
#include "policies/session_dir.h"

#define TTL_MS 600

static fg_dir_result claim(qh *h, const char *sid, fg_dir_mode mode, uint64_t epoch)
{
    return qh_dir_claim(h, "t-dir", sid, mode, epoch);
}

int test_quota_dir(void)
{
    fg_redis_fixture fx;
    if (!fg_redis_start(&fx, false))
        return 1;
    qh a, b, c;
    if (!qh_open(&a, fx.sock, 500, TTL_MS, 1, NULL) || !qh_open(&b, fx.sock, 500, TTL_MS, 1, NULL) ||
        !qh_open(&c, fx.sock, 500, TTL_MS, 1, NULL)) {
        fg_redis_stop(&fx);
        return 1;
    }
    CHECK(qh_dir_enable(&a, "gw-a", TTL_MS) && qh_dir_enable(&b, "gw-b", TTL_MS) && qh_dir_enable(&c, "gw-c", TTL_MS));
    fg_dir_options bad = {.instance_id = "has space", .advertise_url = "ws://x", .lease_ttl_ms = TTL_MS};
    fg_diag d = {{0}};
    CHECK(fg_quota_dir_enable(a.q, &bad, &d) == FG_ERR_INVALID_ARG);
    CHECK(qh_wait_connected(&a, false, 5000) && qh_wait_connected(&b, false, 5000) && qh_wait_connected(&c, false, 5000));
    redisContext *rc = fg_redis_client(&fx);

    /* A new session: held by its maker at once (its first save may come before Redis answers). */
    fg_quota_dir_claim(a.q, "t-dir", "s1", FG_DIR_NEW, 0, NULL, NULL);
    CHECK(fg_quota_dir_may_write(a.q, "t-dir", "s1"));
    fg_dir_result r = claim(&b, "s1", FG_DIR_LOOK, 0);
    for (int i = 0; i < 200 && r.state == FG_DIR_FREE; i++) { /* a's claim goes over its own connection */
        fg_sleep_ms(5);
        r = claim(&b, "s1", FG_DIR_LOOK, 0);
    }
    CHECK_MSG(r.state == FG_DIR_ELSEWHERE && r.epoch == 1 && !strcmp(r.owner, "gw-a") &&
                  !strcmp(r.owner_url, "ws://gw-a.example:8080"),
              "look from b: state %d epoch %llu owner %s", r.state, (unsigned long long)r.epoch, r.owner);
    /* Well past the ttl it is still a's: a renews. */
    fg_sleep_ms(3 * TTL_MS);
    CHECK(claim(&b, "s1", FG_DIR_LOOK, 0).state == FG_DIR_ELSEWHERE);
    CHECK(fg_quota_dir_may_write(a.q, "t-dir", "s1"));
    /* b never claimed s1: writes are its own business (a file from before the directory). */
    CHECK(fg_quota_dir_may_write(b.q, "t-dir", "s1"));

    /* A second session, given back: free, and its next holder gets epoch 2. */
    fg_quota_dir_claim(a.q, "t-dir", "s2", FG_DIR_NEW, 0, NULL, NULL);
    CHECK(claim(&a, "s2", FG_DIR_LOOK, 0).state == FG_DIR_HELD);
    fg_quota_dir_release(a.q, "t-dir", "s2", false);
    r = claim(&b, "s2", FG_DIR_LOOK, 0);
    for (int i = 0; i < 100 && r.state != FG_DIR_FREE; i++) { /* the release is asynchronous */
        fg_sleep_ms(10);
        r = claim(&b, "s2", FG_DIR_LOOK, 0);
    }
    CHECK_MSG(r.state == FG_DIR_FREE && r.epoch == 1, "s2 after release: state %d epoch %llu", r.state,
              (unsigned long long)r.epoch);

    /* The race: b and c both saw epoch 1 free; exactly one take wins. */
    fg_dir_result rb = claim(&b, "s2", FG_DIR_TAKE, 1), rcx = claim(&c, "s2", FG_DIR_TAKE, 1);
    CHECK_MSG(rb.state == FG_DIR_HELD && rb.epoch == 2, "b's take: %d epoch %llu", rb.state,
              (unsigned long long)rb.epoch);
    CHECK_MSG(rcx.state == FG_DIR_LOST_RACE && !strcmp(rcx.owner, "gw-b"), "c's take: %d owner %s", rcx.state,
              rcx.owner);
    CHECK(fg_quota_dir_may_write(b.q, "t-dir", "s2"));
    /* A take with a stale epoch loses even when the lease is free again. */
    fg_quota_dir_release(b.q, "t-dir", "s2", false);
    for (int i = 0; i < 100 && claim(&c, "s2", FG_DIR_LOOK, 0).state != FG_DIR_FREE; i++)
        fg_sleep_ms(10);
    CHECK(claim(&c, "s2", FG_DIR_TAKE, 1).state == FG_DIR_LOST_RACE);

    /* Lost while alive (a paused holder whose lease lapsed): s1's lease is taken by c
     * behind a's back; a's next renewal finds it lost, and a may no longer write. */
    CHECK(fg_redis_int(rc, "DEL {tenant:t-dir}:loc:s1") == 1);
    fg_dir_result rt = claim(&c, "s1", FG_DIR_TAKE, 1);
    CHECK_MSG(rt.state == FG_DIR_HELD && rt.epoch == 2, "c adopts s1: %d epoch %llu", rt.state,
              (unsigned long long)rt.epoch);
    fg_dir_lost lost[4];
    size_t n = 0;
    for (int i = 0; i < 200 && !n; i++) {
        fg_sleep_ms(10);
        n = fg_quota_dir_take_lost(a.q, lost, 4);
    }
    CHECK_MSG(n == 1 && !strcmp(lost[0].tenant, "t-dir") && !strcmp(lost[0].session, "s1"), "a's lost: %zu", n);
    CHECK(!fg_quota_dir_may_write(a.q, "t-dir", "s1"));
    fg_quota_dir_release(a.q, "t-dir", "s1", true); /* a lost lease stays fenced, and c keeps its own */
    CHECK(!fg_quota_dir_may_write(a.q, "t-dir", "s1"));
    fg_dir_stats st;
    fg_quota_dir_get_stats(a.q, &st);
    CHECK(st.fenced == 2 && st.lost == 1);
    CHECK(claim(&b, "s1", FG_DIR_LOOK, 0).state == FG_DIR_ELSEWHERE);

    /* A dies (destroyed, nothing released): c's s1 lives on; kill c: s1 expires within the ttl
     * and b adopts it with epoch 3. */
    qh_close(&a);
    qh_close(&c);
    double t0 = fg_clock_mono_s() * 1e3;
    r = claim(&b, "s1", FG_DIR_LOOK, 0);
    while (r.state != FG_DIR_FREE && fg_clock_mono_s() * 1e3 - t0 < 5000) {
        fg_sleep_ms(20);
        r = claim(&b, "s1", FG_DIR_LOOK, 0);
    }
    double waited = fg_clock_mono_s() * 1e3 - t0;
    CHECK_MSG(r.state == FG_DIR_FREE && r.epoch == 2 && waited <= TTL_MS + 300, "s1 free after %.0f ms: %d", waited,
              r.state);
    r = claim(&b, "s1", FG_DIR_TAKE, r.epoch);
    CHECK(r.state == FG_DIR_HELD && r.epoch == 3);
    /* Close for good: the lease and the epoch go. */
    fg_quota_dir_release(b.q, "t-dir", "s1", true);
    for (int i = 0; i < 100 && fg_redis_int(rc, "HEXISTS {tenant:t-dir}:loc_epochs s1") != 0; i++)
        fg_sleep_ms(10);
    CHECK(fg_redis_int(rc, "EXISTS {tenant:t-dir}:loc:s1") == 0);
    CHECK(fg_redis_int(rc, "HEXISTS {tenant:t-dir}:loc_epochs s1") == 0);
    /* A session made while Redis is down: held locally within the write window, then
     * registered once Redis is back (the renewal asks again). */
    fg_redis_kill(&fx, SIGSTOP);
    fg_quota_dir_claim(b.q, "t-dir", "s3", FG_DIR_NEW, 0, NULL, NULL);
    CHECK(fg_quota_dir_may_write(b.q, "t-dir", "s3"));
    fg_sleep_ms(TTL_MS); /* past the write window (3/4 ttl) from its creation: not known to be ours */
    CHECK(!fg_quota_dir_may_write(b.q, "t-dir", "s3"));
    fg_redis_kill(&fx, SIGCONT);
    bool back = false;
    for (int i = 0; i < 300 && !back; i++) {
        fg_sleep_ms(20);
        back = fg_quota_dir_may_write(b.q, "t-dir", "s3");
    }
    CHECK_MSG(back, "s3 registered after Redis came back");
    redisFree(rc);
    rc = fg_redis_client(&fx);
    redisReply *v = redisCommand(rc, "GET {tenant:t-dir}:loc:s3");
    CHECK(v && v->type == REDIS_REPLY_STRING && !strcmp(v->str, "1 gw-b ws://gw-b.example:8080"));
    if (v)
        freeReplyObject(v);
    fg_quota_dir_get_stats(b.q, &st);
    fprintf(stderr, "quota_dir: b made %llu claims, %llu renewals, %llu releases\n", (unsigned long long)st.claims,
            (unsigned long long)st.renewals, (unsigned long long)st.releases);
    redisFree(rc);
    qh_close(&b);
    fg_redis_stop(&fx);
    return TEST_DONE("quota_dir");
}
