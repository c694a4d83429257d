/* test_quota_cluster.c: quotas on a Redis Cluster and behind Sentinel.
 *
 * cluster: three masters and three replicas on loopback ports, built with
 * CLUSTER ADDSLOTSRANGE / MEET / REPLICATE (what redis-cli --cluster create
 * sends). The quota module gets one seed (master 0) and must find the rest:
 * limits hold for a tenant whose keys live on master 1; the tenant's slot is
 * moved to master 0 (ASK while migrating, MOVED after) and the limits and
 * counters move with it; master 2 is SIGKILLed, its replica promoted, and
 * the usage settled during the outage is in Redis after the journal replay.
 *
 * sentinel: a master, its replica and two sentinels (a dead third address
 * listed first); the master is SIGKILLed, Sentinel promotes the replica, and
 * the quota module finds the new master with no usage lost.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fg_test.h"
#include "quota_cases.h"
#include "quota_harness.h"
#include "redis_fixture.h"

#define N_NODES 6   /* masters 0..2, node 3 + i replicates master i */

/* A port base for this process: nodes use base..base+5 and, for the cluster
 * bus, +10000; all below Linux's ephemeral range (32768..), where a client
 * socket could hold the port. */
static int port_base(int attempt)
{
    return 20000 + (int)(((unsigned)getpid() * 7u + (unsigned)attempt * 31u) % 150u) * 16;
}

static redisReply *cmd(const fg_redis_fixture *fx, const char *fmt, ...)
{
    redisContext *c = fg_redis_client(fx);
    if (!c)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

static bool reply_ok(redisReply *r)
{
    bool ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    if (r && !ok)
        fprintf(stderr, "redis: %s\n", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    if (r)
        freeReplyObject(r);
    return ok;
}

/* True when the text reply of the command contains needle. */
static bool text_has(const fg_redis_fixture *fx, const char *command, const char *needle)
{
    redisReply *r = cmd(fx, command);
    bool has = r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) && strstr(r->str, needle);
    if (r)
        freeReplyObject(r);
    return has;
}

/* Polls until text_has, for up to ms. */
static bool wait_text(const fg_redis_fixture *fx, const char *command, const char *needle, double ms)
{
    for (double t = 0; t < ms; t += 50) {
        if (text_has(fx, command, needle))
            return true;
        fg_sleep_ms(50);
    }
    fprintf(stderr, "timed out waiting for \"%s\" in %s\n", needle, command);
    return false;
}

/* The number after field (e.g. "master_repl_offset:") in INFO replication, -1 if absent. */
static long long info_num(const fg_redis_fixture *fx, const char *field)
{
    redisReply *r = cmd(fx, "INFO replication");
    long long v = -1;
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, field) : NULL;
    if (p)
        v = strtoll(p + strlen(field), NULL, 10);
    if (r)
        freeReplyObject(r);
    return v;
}

/* Until the replica has everything the master wrote so far (replication is
 * asynchronous: a master killed earlier takes its last writes with it). */
static bool wait_replicated(const fg_redis_fixture *master, const fg_redis_fixture *replica)
{
    long long want = info_num(master, "master_repl_offset:");
    for (int t = 0; want >= 0 && t < 500; t++) {
        if (info_num(replica, "slave_repl_offset:") >= want)
            return true;
        fg_sleep_ms(20);
    }
    fprintf(stderr, "the replica did not reach offset %lld\n", want);
    return false;
}

static long long get_int(const fg_redis_fixture *fx, const char *key)
{
    redisContext *c = fg_redis_client(fx);
    if (!c)
        return -2;
    long long v = fg_redis_int(c, "GET %s", key);
    redisFree(c);
    return v;
}

static bool wait_int(const fg_redis_fixture *fx, const char *key, long long want, double ms)
{
    for (double t = 0; t < ms; t += 20) {
        if (get_int(fx, key) == want)
            return true;
        fg_sleep_ms(20);
    }
    fprintf(stderr, "%s is %lld, not %lld\n", key, get_int(fx, key), want);
    return false;
}

static bool node_id(const fg_redis_fixture *fx, char out[41])
{
    redisReply *r = cmd(fx, "CLUSTER MYID");
    bool ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok)
        memcpy(out, r->str, 41);
    if (r)
        freeReplyObject(r);
    return ok;
}

/* A tenant id whose keys hash to a slot in lo..hi. */
static void tenant_in(int lo, int hi, char *id, size_t cap)
{
    for (int k = 0;; k++) {
        char key[64];
        snprintf(id, cap, "c%d", k);
        snprintf(key, sizeof key, "{tenant:%s}:config", id);
        int s = fg_rlink_key_slot(key, strlen(key));
        if (s >= lo && s <= hi)
            return;
    }
}

static void settle(qh *h, const char *tenant, const char *key, long long reserved, long long used)
{
    fg_quota_response_settle(h->q, tenant, key, reserved, used);
    qh_pump(h, 20);
}

static void stop_all(fg_redis_fixture *fx, int n)
{
    for (int i = 0; i < n; i++)
        fg_redis_stop(&fx[i]);
}

static const int RANGE[3][2] = {{0, 5460}, {5461, 10922}, {10923, 16383}};

/* Starts the six nodes and joins them into one cluster with a replica per master. */
static bool cluster_up(fg_redis_fixture *fx, int *base_out)
{
    static const char *const args[] = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                       "--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0", NULL};
    int base = 0;
    for (int attempt = 0; attempt < 4 && !base; attempt++) {
        base = port_base(attempt);
        for (int i = 0; i < N_NODES; i++)
            if (!fg_redis_start_port(&fx[i], base + i, NULL, args, false)) {
                stop_all(fx, i + 1);
                base = 0; /* a port taken: another base */
                break;
            }
    }
    if (!base)
        return false;
    *base_out = base;
    char id[N_NODES][41];
    for (int i = 0; i < N_NODES; i++)
        if (!node_id(&fx[i], id[i]))
            return false;
    for (int m = 0; m < 3; m++)
        if (!reply_ok(cmd(&fx[m], "CLUSTER SET-CONFIG-EPOCH %d", m + 1)) ||
            !reply_ok(cmd(&fx[m], "CLUSTER ADDSLOTSRANGE %d %d", RANGE[m][0], RANGE[m][1])))
            return false;
    for (int i = 1; i < N_NODES; i++)
        if (!reply_ok(cmd(&fx[0], "CLUSTER MEET 127.0.0.1 %d", base + i)))
            return false;
    for (int i = 0; i < N_NODES; i++)
        if (!wait_text(&fx[i], "CLUSTER INFO", "cluster_known_nodes:6", 15000))
            return false;
    for (int r = 3; r < N_NODES; r++) {
        bool ok = false;
        for (int t = 0; t < 200 && !ok; t++) { /* the replica must have heard of its master first */
            redisReply *x = cmd(&fx[r], "CLUSTER REPLICATE %s", id[r - 3]);
            ok = x && x->type == REDIS_REPLY_STATUS;
            if (x)
                freeReplyObject(x);
            if (!ok)
                fg_sleep_ms(50);
        }
        if (!ok)
            return false;
    }
    for (int r = 3; r < N_NODES; r++)
        if (!wait_text(&fx[r], "INFO replication", "master_link_status:up", 15000))
            return false;
    for (int i = 0; i < N_NODES; i++)
        if (!wait_text(&fx[i], "CLUSTER INFO", "cluster_state:ok", 15000))
            return false;
    return true;
}

/* Moves slot from master `from` to master `to` (CLUSTER SETSLOT + MIGRATE); finish:
 * hand the slot over (else it is left migrating: the old owner answers ASK). */
static bool move_slot(fg_redis_fixture *fx, int base, int slot, int from, int to, bool finish)
{
    char from_id[41], to_id[41];
    if (!node_id(&fx[from], from_id) || !node_id(&fx[to], to_id))
        return false;
    if (!finish) {
        if (!reply_ok(cmd(&fx[to], "CLUSTER SETSLOT %d IMPORTING %s", slot, from_id)) ||
            !reply_ok(cmd(&fx[from], "CLUSTER SETSLOT %d MIGRATING %s", slot, to_id)))
            return false;
        redisReply *keys = cmd(&fx[from], "CLUSTER GETKEYSINSLOT %d 1000", slot);
        bool ok = keys && keys->type == REDIS_REPLY_ARRAY && keys->elements > 0;
        for (size_t i = 0; ok && i < keys->elements; i++) {
            redisReply *m = cmd(&fx[from], "MIGRATE 127.0.0.1 %d %s 0 5000", base + to, keys->element[i]->str);
            ok = reply_ok(m);
        }
        if (keys)
            freeReplyObject(keys);
        return ok;
    }
    for (int m = 0; m < 3; m++)
        if (!reply_ok(cmd(&fx[m], "CLUSTER SETSLOT %d NODE %s", slot, to_id)))
            return false;
    return true;
}

/* Until the replica has taken over (ROLE says master), pumping the quota's answers. */
static bool wait_role_master(qh *h, const fg_redis_fixture *replica)
{
    for (int t = 0; t < 400; t++) {
        redisReply *role = cmd(replica, "ROLE");
        bool master = fg_rlink_parse_role_master(role);
        if (role)
            freeReplyObject(role);
        if (master)
            return true;
        qh_pump(h, 50);
    }
    char tail[1000];
    snprintf(tail, sizeof tail, "tail -20 %s/redis.log >&2", replica->dir);
    if (system(tail) != 0)
        fprintf(stderr, "(no log)\n");
    return false;
}

static uint64_t redirects(qh *h)
{
    fg_quota_stats st;
    fg_quota_get_stats(h->q, &st);
    return st.redirects;
}

/* The link's pure parts: slots as CLUSTER KEYSLOT of Redis 7.0 gives them,
 * the redirect parser, and the options create refuses. */
int test_quota_rlink(void)
{
    static const struct {
        const char *key;
        int slot;
    } slots[] = {{"foo", 12182}, {"bar", 5061}, {"123456789", 12739}, {"{user1000}.following", 3443},
                 {"{}foo", 9500}, {"foo{}{bar}", 8363}, {"{tenant:acme}:config", 1612}, {"a{b", 13340}};
    for (size_t i = 0; i < sizeof slots / sizeof *slots; i++)
        CHECK_MSG(fg_rlink_key_slot(slots[i].key, strlen(slots[i].key)) == slots[i].slot, "%s", slots[i].key);
    CHECK(fg_rlink_key_slot("{tenant:acme}:loc:s1", 20) == 1612);

    fg_rlink_redirect rd;
    CHECK(fg_rlink_parse_redirect("MOVED 3999 127.0.0.1:6381", 25, &rd) && !rd.ask && rd.slot == 3999 &&
          !strcmp(rd.addr, "127.0.0.1:6381"));
    CHECK(fg_rlink_parse_redirect("ASK 16383 [::1]:7002", 20, &rd) && rd.ask && rd.slot == 16383);
    CHECK(fg_rlink_parse_redirect("MOVED 12 :7001", 14, &rd) && !strcmp(rd.addr, ":7001"));
    static const char *const bad[] = {"MOVED 16384 h:1", "MOVED 12 h", "MOVED 12 h:0", "MOVED -1 h:1", "MOVED 12",
                                      "ASK 12 h:1 x", "MOVED  12 h:1", "ERR MOVED 12 h:1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(!fg_rlink_parse_redirect(bad[i], strlen(bad[i]), &rd), "%s", bad[i]);

    fg_rlink_t *l = NULL;
    fg_diag d = {{0}};
    const char *one[] = {"/tmp/x.sock"}, *two[] = {"h:1", "h:2"};
    fg_rlink_options o = {.mode = FG_RLINK_CLUSTER, .addrs = one, .n_addrs = 1, .timeout_ms = 100};
    CHECK(fg_rlink_create(&o, &l, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "cluster nodes are host:port"));
    o = (fg_rlink_options){.mode = FG_RLINK_SENTINEL, .addrs = two, .n_addrs = 2, .timeout_ms = 100};
    CHECK(fg_rlink_create(&o, &l, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "master name"));
    o = (fg_rlink_options){.mode = FG_RLINK_SINGLE, .addrs = two, .n_addrs = 2, .timeout_ms = 100};
    CHECK(fg_rlink_create(&o, &l, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "one address"));
    o = (fg_rlink_options){.mode = FG_RLINK_CLUSTER, .addrs = two, .n_addrs = 2, .timeout_ms = 100};
    CHECK(fg_rlink_create(&o, &l, &d) == FG_OK && l && !fg_rlink_up(l));
    char why[200];
    CHECK(!fg_rlink_exec(l, NULL, 0, NULL, why, sizeof why) && strstr(why, "not connected"));
    fg_rlink_destroy(l);
    return TEST_DONE("quota_rlink");
}

int test_quota_cluster(void)
{
    fg_redis_fixture fx[N_NODES];
    memset(fx, 0, sizeof fx);
    int base = 0;
    if (!cluster_up(fx, &base)) {
        stop_all(fx, N_NODES);
        return 1;
    }
    char a[16], b[16], key[80];
    tenant_in(RANGE[1][0], RANGE[1][1], a, sizeof a); /* on master 1, not the seed */
    tenant_in(RANGE[2][0], RANGE[2][1], b, sizeof b); /* on master 2, failed over below */
    char seed[32], journal[400];
    snprintf(seed, sizeof seed, "127.0.0.1:%d", base);
    snprintf(journal, sizeof journal, "%s/quota.journal", fx[0].dir);
    const char *nodes[] = {seed};
    fg_quota_options o = {.redis_mode = FG_RLINK_CLUSTER, .redis_nodes = nodes, .n_redis_nodes = 1,
                          .timeout_ms = 500, .lease_ttl_ms = 30000, .expected_instances = 1,
                          .journal_path = journal};
    qh g, h; /* h: a second instance, for the session directory */
    CHECK(qh_open_opts(&g, &o));
    o.journal_path = NULL;
    CHECK(qh_open_opts(&h, &o));
    fg_dir_options dg = {.instance_id = "gw-a", .advertise_url = "ws://gw-a:8080", .lease_ttl_ms = 10000};
    fg_dir_options dh = {.instance_id = "gw-b", .advertise_url = "ws://gw-b:8080", .lease_ttl_ms = 10000};
    fg_diag d = {{0}};
    CHECK(fg_quota_dir_enable(g.q, &dg, &d) == FG_OK && fg_quota_dir_enable(h.q, &dh, &d) == FG_OK);
    CHECK(qh_wait_connected(&g, false, 10000) && qh_wait_connected(&h, false, 10000));

    /* Limits hold with the tenant's keys on a master other than the seed. */
    fg_tenant_record ta = qh_record(a), tb = qh_record(b);
    ta.limits.max_sessions = 2;
    ta.limits.daily_tokens = 1000;
    tb.limits.daily_tokens = 1000000;
    CHECK(qh_put(&g, &ta) == FG_QUOTA_OK);
    CHECK(qh_put(&g, &tb) == FG_QUOTA_OK);
    CHECK(qh_session_open(&g, a, "s1").verdict == FG_QUOTA_OK);
    CHECK(qh_session_open(&g, a, "s2").verdict == FG_QUOTA_OK);
    fg_quota_result r = qh_session_open(&g, a, "s3");
    CHECK(r.verdict == FG_QUOTA_SESSIONS && !r.degraded);
    snprintf(key, sizeof key, "{tenant:%s}:config", a);
    redisContext *m1 = fg_redis_client(&fx[1]);
    CHECK(fg_redis_int(m1, "EXISTS %s", key) == 1);
    redisFree(m1);
    CHECK(qh_reserve(&g, a, "r1", 600, 0, 0, 0).verdict == FG_QUOTA_OK);
    r = qh_reserve(&g, a, "r2", 600, 0, 0, 0);
    CHECK(r.verdict == FG_QUOTA_DAILY_TOKENS && !r.degraded);
    settle(&g, a, "r1", 600, 100);
    snprintf(key, sizeof key, "{tenant:%s}:usage:total", a);
    CHECK(wait_int(&fx[1], key, 100, 5000));
    CHECK(qh_reserve(&g, a, "r3", 600, 0, 0, 0).verdict == FG_QUOTA_OK); /* 100 used + 600 */

    /* The tenant's slot moves to master 0: ASK while it migrates, MOVED after. */
    int slot = fg_rlink_key_slot(key, strlen(key));
    uint64_t red0 = redirects(&g);
    CHECK(move_slot(fx, base, slot, 1, 0, false));
    r = qh_session_open(&g, a, "s3");
    CHECK_MSG(r.verdict == FG_QUOTA_SESSIONS && !r.degraded, "verdict %d degraded %d", r.verdict, r.degraded);
    uint64_t red1 = redirects(&g);
    CHECK_MSG(red1 > red0, "no ASK followed (%llu)", (unsigned long long)red1);
    CHECK(move_slot(fx, base, slot, 1, 0, true));
    r = qh_reserve(&g, a, "r4", 200, 0, 0, 0); /* 700 + 200 */
    CHECK_MSG(r.verdict == FG_QUOTA_OK && !r.degraded, "verdict %d degraded %d", r.verdict, r.degraded);
    CHECK_MSG(redirects(&g) > red1, "no MOVED followed");
    r = qh_reserve(&g, a, "r5", 200, 0, 0, 0); /* 900 + 200: over, on the new owner */
    CHECK(r.verdict == FG_QUOTA_DAILY_TOKENS && !r.degraded);
    settle(&g, a, "r3", 600, 50);
    settle(&g, a, "r4", 200, 20);
    CHECK(wait_int(&fx[0], key, 170, 5000));

    /* The directory: a session of b held by g, seen from h. */
    CHECK(qh_dir_claim(&g, b, "d1", FG_DIR_LOOK, 0).state == FG_DIR_FREE);
    fg_quota_dir_claim(g.q, b, "d1", FG_DIR_NEW, 0, NULL, NULL);
    fg_dir_result dr = qh_dir_claim(&h, b, "d1", FG_DIR_LOOK, 0);
    for (int i = 0; i < 200 && dr.state == FG_DIR_FREE; i++) /* g's claim goes over its own link */
        dr = qh_dir_claim(&h, b, "d1", FG_DIR_LOOK, 0);
    CHECK_MSG(dr.state == FG_DIR_ELSEWHERE && !strcmp(dr.owner, "gw-a"), "state %d owner %s", dr.state, dr.owner);

    /* Master 2 dies; its replica takes over; usage settled meanwhile is replayed. */
    snprintf(key, sizeof key, "{tenant:%s}:usage:total", b);
    CHECK(qh_reserve(&g, b, "b1", 100, 0, 0, 0).verdict == FG_QUOTA_OK);
    settle(&g, b, "b1", 100, 100);
    CHECK(wait_int(&fx[2], key, 100, 5000));
    CHECK(wait_replicated(&fx[2], &fx[5]));
    fg_redis_kill(&fx[2], SIGKILL);
    r = qh_reserve(&g, b, "b2", 100, 0, 0, 0);
    CHECK(r.verdict == FG_QUOTA_OK);
    settle(&g, b, "b2", 100, 40);
    r = qh_reserve(&g, a, "a6", 10, 0, 0, 0); /* the cluster is down for every tenant a moment */
    CHECK(r.verdict == FG_QUOTA_OK);
    settle(&g, a, "a6", 10, 10);
    CHECK(wait_role_master(&g, &fx[5]));
    CHECK(wait_text(&fx[0], "CLUSTER INFO", "cluster_state:ok", 15000));
    CHECK(qh_wait_connected(&g, true, 20000));
    CHECK(wait_int(&fx[5], key, 140, 10000)); /* 100 before + 40 during the outage: none lost */
    snprintf(key, sizeof key, "{tenant:%s}:usage:total", a);
    CHECK(wait_int(&fx[0], key, 180, 10000));
    r = qh_reserve(&g, b, "b3", 100, 0, 0, 0);
    CHECK_MSG(r.verdict == FG_QUOTA_OK && !r.degraded, "verdict %d degraded %d", r.verdict, r.degraded);
    r = qh_session_open(&g, a, "s3");
    CHECK_MSG(r.verdict == FG_QUOTA_SESSIONS && !r.degraded, "verdict %d degraded %d", r.verdict, r.degraded);
    /* g still holds d1 on the promoted replica; h cannot take it. */
    CHECK(qh_wait_connected(&h, false, 20000));
    dr = qh_dir_claim(&h, b, "d1", FG_DIR_LOOK, 0);
    CHECK_MSG(dr.state == FG_DIR_ELSEWHERE && !strcmp(dr.owner, "gw-a"), "state %d owner %s", dr.state, dr.owner);
    CHECK(qh_dir_claim(&h, b, "d1", FG_DIR_TAKE, dr.epoch).state == FG_DIR_LOST_RACE);
    CHECK(fg_quota_dir_may_write(g.q, b, "d1"));

    /* The only seed dies too: the link reconnects through the masters it learnt. */
    snprintf(key, sizeof key, "{tenant:%s}:usage:total", a);
    CHECK(wait_replicated(&fx[0], &fx[3]));
    fg_redis_kill(&fx[0], SIGKILL);
    CHECK(qh_reserve(&g, a, "a7", 10, 0, 0, 0).verdict == FG_QUOTA_OK);
    settle(&g, a, "a7", 10, 5);
    CHECK(wait_role_master(&g, &fx[3]));
    CHECK(wait_text(&fx[1], "CLUSTER INFO", "cluster_state:ok", 15000));
    CHECK(qh_wait_connected(&g, true, 20000));
    CHECK(wait_int(&fx[3], key, 185, 10000));
    r = qh_session_open(&g, a, "s3");
    CHECK_MSG(r.verdict == FG_QUOTA_SESSIONS && !r.degraded, "verdict %d degraded %d", r.verdict, r.degraded);

    fg_quota_stats st;
    fg_quota_get_stats(g.q, &st);
    CHECK(st.connected && st.journal_entries == 0 && st.reconnects >= 2);
    fprintf(stderr, "quota_cluster: %llu redirects, %llu reconnects, last error: %s\n",
            (unsigned long long)st.redirects, (unsigned long long)st.reconnects, st.last_error);
    qh_close(&h);
    qh_close(&g);
    stop_all(fx, N_NODES);
    return TEST_DONE("quota_cluster");
}

int test_quota_sentinel(void)
{
    enum { MASTER, REPLICA, S1, S2, N };
    fg_redis_fixture fx[N];
    memset(fx, 0, sizeof fx);
    int base = 0;
    for (int attempt = 0; attempt < 4 && !base; attempt++) {
        base = port_base(attempt);
        char port[16], conf[400];
        snprintf(port, sizeof port, "%d", base);
        snprintf(conf, sizeof conf,
                 "sentinel monitor fgm 127.0.0.1 %d 1\n"
                 "sentinel down-after-milliseconds fgm 400\n"
                 "sentinel failover-timeout fgm 4000\n",
                 base);
        const char *replica[] = {"--replicaof", "127.0.0.1", port, NULL};
        const char *master[] = {"--repl-diskless-sync-delay", "0", NULL};
        const char *sentinel[] = {"--sentinel", NULL};
        bool ok = fg_redis_start_port(&fx[MASTER], base, NULL, master, false) &&
                  fg_redis_start_port(&fx[REPLICA], base + 1, NULL, replica, false) &&
                  fg_redis_start_port(&fx[S1], base + 2, conf, sentinel, false) &&
                  fg_redis_start_port(&fx[S2], base + 3, conf, sentinel, false);
        if (!ok) {
            stop_all(fx, N);
            memset(fx, 0, sizeof fx);
            base = 0;
        }
    }
    if (!base)
        return 1;
    CHECK(wait_text(&fx[REPLICA], "INFO replication", "master_link_status:up", 15000));
    /* Both sentinels know the replica before the master dies. */
    CHECK(wait_text(&fx[S1], "INFO sentinel", "slaves=1", 15000));
    CHECK(wait_text(&fx[S2], "INFO sentinel", "slaves=1", 15000));

    char dead[32], s1[32], s2[32], journal[400];
    snprintf(dead, sizeof dead, "127.0.0.1:%d", base + 4); /* nothing listens there */
    snprintf(s1, sizeof s1, "127.0.0.1:%d", base + 2);
    snprintf(s2, sizeof s2, "127.0.0.1:%d", base + 3);
    snprintf(journal, sizeof journal, "%s/quota.journal", fx[S1].dir);
    const char *sentinels[] = {dead, s1, s2};
    fg_quota_options o = {.redis_mode = FG_RLINK_SENTINEL, .redis_nodes = sentinels, .n_redis_nodes = 3,
                          .redis_master_name = "fgm", .timeout_ms = 300, .lease_ttl_ms = 30000,
                          .expected_instances = 1, .journal_path = journal};
    qh g;
    CHECK(qh_open_opts(&g, &o));
    CHECK(qh_wait_connected(&g, false, 10000));
    fg_tenant_record t = qh_record("sen");
    t.limits.max_sessions = 1;
    t.limits.daily_tokens = 100000;
    CHECK(qh_put(&g, &t) == FG_QUOTA_OK);
    CHECK(qh_session_open(&g, "sen", "x").verdict == FG_QUOTA_OK);
    fg_quota_result r = qh_session_open(&g, "sen", "y");
    CHECK(r.verdict == FG_QUOTA_SESSIONS && !r.degraded);
    CHECK(qh_reserve(&g, "sen", "r1", 100, 0, 0, 0).verdict == FG_QUOTA_OK);
    settle(&g, "sen", "r1", 100, 100);
    const char *key = "{tenant:sen}:usage:total";
    CHECK(wait_int(&fx[MASTER], key, 100, 5000));
    CHECK(wait_replicated(&fx[MASTER], &fx[REPLICA]));

    /* A replica answers writes with READONLY: a link pointed at one (as a demoted
     * master would be) treats that as "not now", not as a verdict. */
    qh ro;
    CHECK(qh_open(&ro, fx[REPLICA].sock, 300, 30000, 1, NULL));
    CHECK(qh_wait_connected(&ro, false, 5000));
    r = qh_session_open(&ro, "sen", "z");
    CHECK_MSG(r.verdict == FG_QUOTA_OK && r.degraded, "verdict %d degraded %d", r.verdict, r.degraded);
    fg_quota_stats st;
    fg_quota_get_stats(ro.q, &st);
    CHECK_MSG(strstr(st.last_error, "READONLY") != NULL, "%s", st.last_error);
    qh_close(&ro);

    fg_redis_kill(&fx[MASTER], SIGKILL);
    r = qh_reserve(&g, "sen", "r2", 100, 0, 0, 0);
    CHECK(r.verdict == FG_QUOTA_OK);
    settle(&g, "sen", "r2", 100, 30);
    char promoted[64];
    snprintf(promoted, sizeof promoted, "%d", base + 1);
    bool moved = false;
    for (int i = 0; i < 300 && !moved; i++) {
        redisReply *m = cmd(&fx[S1], "SENTINEL get-master-addr-by-name fgm");
        moved = m && m->type == REDIS_REPLY_ARRAY && m->elements == 2 && strcmp(m->element[1]->str, promoted) == 0;
        if (m)
            freeReplyObject(m);
        if (!moved)
            qh_pump(&g, 50);
    }
    CHECK(moved);
    CHECK(qh_wait_connected(&g, true, 15000));
    CHECK(wait_int(&fx[REPLICA], key, 130, 10000)); /* 100 before + 30 during the failover */
    r = qh_session_open(&g, "sen", "y");
    CHECK_MSG(r.verdict == FG_QUOTA_SESSIONS && !r.degraded, "verdict %d degraded %d", r.verdict, r.degraded);
    fg_quota_get_stats(g.q, &st);
    CHECK_MSG(st.master_discoveries >= 2, "%llu discoveries", (unsigned long long)st.master_discoveries);
    CHECK(st.connected && st.journal_entries == 0);
    fprintf(stderr, "quota_sentinel: %llu discoveries, %llu reconnects, last error: %s\n",
            (unsigned long long)st.master_discoveries, (unsigned long long)st.reconnects, st.last_error);
    qh_close(&g);
    stop_all(fx, N);
    return TEST_DONE("quota_sentinel");
}
