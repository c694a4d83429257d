/* quota_admin.c: tenant and key administration, seeding, and usage reads,
 * run on the quota thread one request at a time (they are rare).
 *
 * Writes touch keys in several hash slots (a tenant's own keys, the global
 * index, the key-hash lookup, the version counter), so they are pipelined
 * commands rather than one script; each step leaves a state the readers
 * accept, and the version counter is INCRed last so other gateways reload
 * after the change is complete. An API key is bound to a tenant by
 * SET flashgate:keyhash:<sha> <id> NX first and added to {tenant:ID}:keys only
 * if that binding is this tenant's: a key can never belong to two tenants.
 *
 * Every change here reloads this instance's cache at once; other instances
 * see it within a second (their version check).
 */
#include "policies/quota_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERSION_KEY "flashgate:tenants:version"

/* Runs n commands; false on a connection failure (replies freed either way). */
static bool run(struct fg_quota *q, fg_qcmd *cmds, size_t n, redisReply **rep)
{
    fg_qcmd *ptrs[16] = {NULL};
    if (n == 0 || n > 16)
        return n == 0;
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &cmds[i];
    size_t got = fg_qconn_exec(q, ptrs, n, rep);
    for (size_t i = 0; i < n; i++)
        if (rep[i] && rep[i]->type == REDIS_REPLY_ERROR) {
            char msg[128];
            snprintf(msg, sizeof msg, "redis admin command: %s", rep[i]->str);
            fg_quota_stat_error(q, msg);
        }
    return got == n;
}

static void free_all(fg_qcmd *cmds, size_t n, redisReply **rep)
{
    for (size_t i = 0; i < n; i++) {
        fg_qcmd_free(&cmds[i]);
        if (rep && rep[i]) {
            freeReplyObject(rep[i]);
            rep[i] = NULL;
        }
    }
}

static void cmd2(fg_qcmd *c, const char *a, const char *b)
{
    fg_qcmd_init(c);
    fg_qcmd_str(c, a);
    fg_qcmd_str(c, b);
}

static void cmd3(fg_qcmd *c, const char *a, const char *b, const char *d)
{
    cmd2(c, a, b);
    fg_qcmd_str(c, d);
}

static bool rep_int_is(const redisReply *r, long long v)
{
    return r && r->type == REDIS_REPLY_INTEGER && r->integer == v;
}

static bool rep_str_is(const redisReply *r, const char *s)
{
    return r && r->type == REDIS_REPLY_STRING && strlen(s) == r->len && memcmp(r->str, s, r->len) == 0;
}

static bool valid_record(const fg_tenant_record *t)
{
    const fg_tenant_limits *l = &t->limits;
    if (!fg_name_valid(t->id, strlen(t->id)) || memchr(t->name, '\0', sizeof t->name) == NULL)
        return false;
    if (l->max_sessions < 0 || l->max_responses < 0 || l->tokens_per_minute < 0 || l->daily_tokens < 0 ||
        l->max_kv_bytes < 0 || l->max_context_tokens < 0 || l->max_output_tokens < 0)
        return false;
    return l->weight >= 0 && l->weight <= 1000; /* 0: the default, 1 */
}

static fg_tenant_record normalised(const fg_tenant_record *t)
{
    fg_tenant_record r = *t;
    if (r.limits.weight < 1)
        r.limits.weight = 1;
    return r;
}

/* HSET of the whole record and SADD to the index (no version INCR). */
static void put_cmds(fg_qcmd *c, const fg_tenant_record *t)
{
    char key[FG_QUOTA_REDIS_KEY_MAX];
    fg_tenant_record r = normalised(t);
    fg_qkey(key, r.id, "config");
    cmd2(&c[0], "HSET", key);
    fg_qcmd_config_fields(&c[0], &r);
    cmd3(&c[1], "SADD", "flashgate:tenants", r.id);
}

/* Binds key hashes to tenant id: SET NX + GET each (one round trip), then
 * SADD those now bound to id. Returns false on a connection failure;
 * *n_bound counts the keys that are (now) this tenant's. */
static bool bind_keys(struct fg_quota *q, const char *id, char (*hex)[FG_SHA256_HEX_LEN + 1], size_t n,
                      size_t *n_bound)
{
    *n_bound = 0;
    for (size_t at = 0; at < n; at += 4) {
        size_t m = n - at < 4 ? n - at : 4; /* 8 commands per round trip at most */
        fg_qcmd c[8];
        redisReply *rep[8];
        for (size_t i = 0; i < m; i++) {
            char key[FG_QUOTA_REDIS_KEY_MAX];
            snprintf(key, sizeof key, "flashgate:keyhash:%s", hex[at + i]);
            cmd3(&c[2 * i], "SET", key, id);
            fg_qcmd_str(&c[2 * i], "NX");
            cmd2(&c[2 * i + 1], "GET", key);
        }
        bool ok = run(q, c, 2 * m, rep);
        bool mine[4] = {false};
        for (size_t i = 0; ok && i < m; i++)
            mine[i] = rep_str_is(rep[2 * i + 1], id);
        free_all(c, 2 * m, rep);
        if (!ok)
            return false;
        char key[FG_QUOTA_REDIS_KEY_MAX];
        fg_qkey(key, id, "keys");
        fg_qcmd add;
        cmd2(&add, "SADD", key);
        size_t k = 0;
        for (size_t i = 0; i < m; i++)
            if (mine[i]) {
                fg_qcmd_str(&add, hex[at + i]);
                k++;
            }
        if (k) {
            redisReply *r = NULL;
            ok = run(q, &add, 1, &r);
            free_all(&add, 1, &r);
            if (!ok)
                return false;
        } else {
            fg_qcmd_free(&add);
        }
        *n_bound += k;
    }
    return true;
}

static bool bump_version(struct fg_quota *q)
{
    fg_qcmd c;
    redisReply *r = NULL;
    cmd2(&c, "INCR", VERSION_KEY);
    bool ok = run(q, &c, 1, &r);
    free_all(&c, 1, &r);
    return ok;
}

/* Writes one seed if its tenant is not in the index. The index entry is
 * written last: a seed cut off part way (the gateway killed, Redis stopped
 * between the round trips) leaves no indexed tenant without its keys, and is
 * written again whole, idempotently, by the next start. False on a
 * connection failure or an error reply (Redis still loading): tried again. */
static bool seed_one(struct fg_quota *q, fg_qseed *s)
{
    fg_qcmd c[2];
    redisReply *rep[2] = {NULL, NULL};
    cmd3(&c[0], "SISMEMBER", "flashgate:tenants", s->rec.id);
    bool ok = run(q, c, 1, rep) && rep[0] && rep[0]->type == REDIS_REPLY_INTEGER;
    bool indexed = ok && rep[0]->integer != 0;
    free_all(c, 1, rep);
    if (!ok || indexed)
        return ok;
    put_cmds(c, &s->rec); /* c[0]: the config now; c[1]: the index entry, last */
    ok = run(q, c, 1, rep) && rep[0] && rep[0]->type != REDIS_REPLY_ERROR;
    free_all(c, 1, rep);
    if (!ok) {
        fg_qcmd_free(&c[1]);
        return false;
    }
    char(*hex)[FG_SHA256_HEX_LEN + 1] = calloc(s->n_hashes + 1, sizeof *hex);
    for (size_t i = 0; hex && i < s->n_hashes; i++)
        fg_sha256_hex(s->hashes[i], hex[i]);
    size_t bound;
    ok = hex && bind_keys(q, s->rec.id, hex, s->n_hashes, &bound);
    free(hex);
    if (!ok) {
        fg_qcmd_free(&c[1]);
        return false;
    }
    ok = run(q, &c[1], 1, rep) && rep[0] && rep[0]->type != REDIS_REPLY_ERROR;
    free_all(&c[1], 1, rep);
    return ok && bump_version(q);
}

static void seed_free(fg_qseed *s)
{
    free(s->hashes);
    free(s);
}

bool fg_qadmin_run_seeds(struct fg_quota *q)
{
    if (!fg_qconn_up(q))
        return false;
    pthread_mutex_lock(&q->cache_mu);
    fg_qseed *list = q->seeds;
    q->seeds = NULL;
    pthread_mutex_unlock(&q->cache_mu);
    if (!list)
        return true;

    fg_qseed *keep = NULL, **keep_tail = &keep;
    bool ok = true;
    while (list) {
        fg_qseed *s = list;
        list = s->next;
        s->next = NULL;
        if (ok && seed_one(q, s)) {
            seed_free(s);
        } else {
            ok = false;
            *keep_tail = s;
            keep_tail = &s->next;
        }
    }
    if (keep) {
        pthread_mutex_lock(&q->cache_mu);
        *keep_tail = q->seeds;
        q->seeds = keep;
        pthread_mutex_unlock(&q->cache_mu);
    }
    if (ok)
        fg_qcache_refresh(q, true);
    return ok;
}

/* ---- requests ---- */

static void put(struct fg_quota *q, fg_qreq *r)
{
    if (!valid_record(&r->rec)) {
        r->result.verdict = FG_QUOTA_INVALID;
        return;
    }
    fg_qcmd c[3];
    redisReply *rep[3] = {NULL};
    put_cmds(c, &r->rec);
    cmd2(&c[2], "INCR", VERSION_KEY);
    bool ok = run(q, c, 3, rep);
    bool written = ok && rep[0]->type == REDIS_REPLY_INTEGER && rep[2]->type == REDIS_REPLY_INTEGER;
    free_all(c, 3, rep);
    r->result.verdict = written ? FG_QUOTA_OK : FG_QUOTA_UNAVAILABLE;
}

/* The create script, then the index and the version (only when it wrote). */
static void create(struct fg_quota *q, fg_qreq *r)
{
    if (!valid_record(&r->rec)) {
        r->result.verdict = FG_QUOTA_INVALID;
        return;
    }
    char key[FG_QUOTA_REDIS_KEY_MAX];
    fg_tenant_record rec = normalised(&r->rec);
    fg_qkey(key, rec.id, "config");
    fg_qcmd c[2];
    redisReply *rep[2] = {NULL};
    fg_qcmd_init(&c[0]);
    fg_qcmd_script(&c[0], FG_QSCRIPT_CREATE, 1);
    fg_qcmd_str(&c[0], key);
    fg_qcmd_config_fields(&c[0], &rec);
    bool ok = run(q, c, 1, rep);
    const bool written = ok && rep_int_is(rep[0], 1), exists = ok && rep_int_is(rep[0], 0);
    free_all(c, 1, rep);
    if (!written) {
        r->result.verdict = exists ? FG_QUOTA_INVALID : FG_QUOTA_UNAVAILABLE;
        return;
    }
    cmd3(&c[0], "SADD", "flashgate:tenants", rec.id);
    cmd2(&c[1], "INCR", VERSION_KEY);
    ok = run(q, c, 2, rep);
    free_all(c, 2, rep);
    r->result.verdict = ok ? FG_QUOTA_OK : FG_QUOTA_UNAVAILABLE;
}

static void delete_tenant(struct fg_quota *q, fg_qreq *r)
{
    char key[FG_QUOTA_REDIS_KEY_MAX];
    fg_qcmd c[2];
    redisReply *rep[2] = {NULL};
    fg_qkey(key, r->tenant, "config");
    cmd2(&c[0], "EXISTS", key);
    fg_qkey(key, r->tenant, "keys");
    cmd2(&c[1], "SMEMBERS", key);
    if (!run(q, c, 2, rep)) {
        free_all(c, 2, rep);
        r->result.verdict = FG_QUOTA_UNAVAILABLE;
        return;
    }
    if (!rep_int_is(rep[0], 1)) {
        free_all(c, 2, rep);
        r->result.verdict = FG_QUOTA_UNKNOWN_TENANT;
        return;
    }
    /* The key bindings, then the tenant's own keys, then the index and version.
     * One DEL per binding: they hash to different slots, and a Redis Cluster
     * refuses a DEL across slots. */
    const redisReply *members = rep[1];
    size_t n_members = members && members->type == REDIS_REPLY_ARRAY ? members->elements : 0;
    bool ok = true;
    for (size_t at = 0; ok && at < n_members;) {
        fg_qcmd d[16];
        redisReply *drep[16] = {NULL};
        size_t nd = 0;
        for (; at < n_members && nd < 16; at++) {
            const redisReply *e = members->element[at];
            uint8_t h[FG_SHA256_BYTES];
            if (e->type != REDIS_REPLY_STRING || !fg_sha256_from_hex(e->str, h))
                continue;
            snprintf(key, sizeof key, "flashgate:keyhash:%s", e->str);
            cmd2(&d[nd++], "DEL", key);
        }
        if (nd)
            ok = run(q, d, nd, drep);
        free_all(d, nd, drep);
    }
    free_all(c, 2, rep);
    if (!ok) {
        r->result.verdict = FG_QUOTA_UNAVAILABLE;
        return;
    }
    fg_qcmd d[3];
    redisReply *drep[3] = {NULL};
    size_t nd = 0;
    fg_qcmd_init(&d[nd]);
    fg_qcmd_str(&d[nd], "DEL");
    static const char *const own[] = {"config", "keys", "sessions", "responses", "tpm", "usage:total", "replayed"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
        fg_qkey(key, r->tenant, own[i]);
        fg_qcmd_str(&d[nd], key);
    }
    nd++;
    cmd3(&d[nd++], "SREM", "flashgate:tenants", r->tenant);
    cmd2(&d[nd++], "INCR", VERSION_KEY);
    ok = run(q, d, nd, drep);
    free_all(d, nd, drep);
    r->result.verdict = ok ? FG_QUOTA_OK : FG_QUOTA_UNAVAILABLE;
}

static void key_add(struct fg_quota *q, fg_qreq *r)
{
    char key[FG_QUOTA_REDIS_KEY_MAX];
    fg_qcmd c;
    redisReply *rep = NULL;
    fg_qkey(key, r->tenant, "config");
    cmd2(&c, "EXISTS", key);
    bool ok = run(q, &c, 1, &rep);
    bool exists = ok && rep_int_is(rep, 1);
    free_all(&c, 1, &rep);
    if (!ok) {
        r->result.verdict = FG_QUOTA_UNAVAILABLE;
        return;
    }
    if (!exists) {
        r->result.verdict = FG_QUOTA_UNKNOWN_TENANT;
        return;
    }
    size_t bound;
    if (!bind_keys(q, r->tenant, &r->key_hash, 1, &bound) || !bump_version(q)) {
        r->result.verdict = FG_QUOTA_UNAVAILABLE;
        return;
    }
    r->result.verdict = bound == 1 ? FG_QUOTA_OK : FG_QUOTA_INVALID; /* another tenant's key */
}

static void key_revoke(struct fg_quota *q, fg_qreq *r)
{
    char key[FG_QUOTA_REDIS_KEY_MAX];
    char bind[FG_QUOTA_REDIS_KEY_MAX];
    snprintf(bind, sizeof bind, "flashgate:keyhash:%s", r->key_hash);
    fg_qcmd c;
    redisReply *rep = NULL;
    cmd2(&c, "GET", bind);
    bool ok = run(q, &c, 1, &rep);
    bool mine = ok && rep_str_is(rep, r->tenant);
    free_all(&c, 1, &rep);
    if (!ok) {
        r->result.verdict = FG_QUOTA_UNAVAILABLE;
        return;
    }
    if (!mine) {
        r->result.verdict = FG_QUOTA_INVALID;
        return;
    }
    fg_qcmd d[3];
    redisReply *drep[3] = {NULL};
    cmd2(&d[0], "DEL", bind);
    fg_qkey(key, r->tenant, "keys");
    cmd3(&d[1], "SREM", key, r->key_hash);
    cmd2(&d[2], "INCR", VERSION_KEY);
    ok = run(q, d, 3, drep);
    free_all(d, 3, drep);
    r->result.verdict = ok ? FG_QUOTA_OK : FG_QUOTA_UNAVAILABLE;
}

/* Live usage: the usage script, or this instance's own view when Redis is away. */
static void usage(struct fg_quota *q, fg_qreq *r)
{
    memset(&r->usage, 0, sizeof r->usage);
    if (fg_qconn_up(q)) {
        char key[FG_QUOTA_REDIS_KEY_MAX];
        int64_t day = fg_quota_redis_now_us(q) / 86400000000LL;
        fg_qcmd c;
        fg_qcmd_init(&c);
        fg_qcmd_script(&c, FG_QSCRIPT_USAGE, 7);
        static const char *const keys[] = {"config", "sessions", "responses", "tpm"};
        for (size_t i = 0; i < 4; i++) {
            fg_qkey(key, r->tenant, keys[i]);
            fg_qcmd_str(&c, key);
        }
        for (int64_t d = day - 1; d <= day + 1; d++) {
            fg_qkey_daily(key, r->tenant, d);
            fg_qcmd_str(&c, key);
        }
        fg_qcmd_i64(&c, day);
        redisReply *rep = NULL;
        bool ok = run(q, &c, 1, &rep);
        if (ok && rep->type == REDIS_REPLY_ARRAY && rep->elements == 5) {
            long long v[5];
            for (size_t i = 0; i < 5; i++)
                v[i] = rep->element[i]->type == REDIS_REPLY_INTEGER ? rep->element[i]->integer : 0;
            r->usage_ok = v[0] == 1;
            r->usage.sessions = v[1];
            r->usage.responses = v[2];
            r->usage.tokens_last_minute_capacity_left = v[3];
            r->usage.daily_tokens_used = v[4];
            free_all(&c, 1, &rep);
            return;
        }
        free_all(&c, 1, &rep);
    }
    /* Degraded: what this instance holds. Sessions and responses only. */
    r->usage.degraded = true;
    r->usage_ok = fg_qcache_get(q, r->tenant, NULL);
    r->usage.tokens_last_minute_capacity_left = -1;
    r->usage.daily_tokens_used = -1;
    const fg_qtenant *t = fg_qtenant_find(q, r->tenant);
    if (t) {
        r->usage.sessions = (int64_t)t->sessions.n;
        r->usage.responses = (int64_t)t->responses.n;
    }
}

void fg_qadmin_handle(struct fg_quota *q, fg_qreq *r)
{
    memset(&r->result, 0, sizeof r->result);
    if (r->kind == FG_QREQ_SEED) {
        /* The seed itself waits on q->seeds; this request only wakes the runner. */
        q->seeds_pending = true;
        fg_quota_finish(q, r);
        return;
    }
    if (r->kind == FG_QREQ_USAGE) {
        usage(q, r);
        fg_quota_finish(q, r);
        return;
    }
    if (!fg_qconn_up(q)) {
        r->result.verdict = FG_QUOTA_UNAVAILABLE;
        r->result.degraded = true;
        fg_quota_finish(q, r);
        return;
    }
    switch (r->kind) {
    case FG_QREQ_PUT:
        put(q, r);
        break;
    case FG_QREQ_CREATE:
        create(q, r);
        break;
    case FG_QREQ_DELETE:
        delete_tenant(q, r);
        break;
    case FG_QREQ_KEY_ADD:
        key_add(q, r);
        break;
    case FG_QREQ_KEY_REVOKE:
        key_revoke(q, r);
        break;
    default:
        break;
    }
    if (r->result.verdict == FG_QUOTA_OK || fg_qconn_up(q))
        fg_qcache_refresh(q, true);
    fg_quota_finish(q, r);
}
