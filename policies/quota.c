/* quota.c: the public face of the quota module (see quota.h).
 *
 * Every call here is non-blocking: it checks its arguments, builds an
 * fg_qreq and queues it for the quota thread (quota_thread.c), which talks
 * to Redis and queues the answer for fg_quota_poll(). Lookups read the
 * tenant cache under its mutex and never touch Redis.
 *
 * Lease members are "<instance>:<key>", instance a random id of this
 * fg_quota, so two gateways' session ids can never collide in Redis and a
 * member tells which gateway holds it.
 */
#include "policies/quota_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "config/base/random.h"

#define DEFAULT_TIMEOUT_MS 200
#define DEFAULT_LEASE_TTL_MS 30000
#define MIN_LEASE_TTL_MS 30 /* renewal every ttl / 3 must stay a positive, sane period */

const char *fg_quota_verdict_name(fg_quota_verdict v)
{
    static const char *const names[] = {
        [FG_QUOTA_OK] = "ok",
        [FG_QUOTA_SESSIONS] = "sessions",
        [FG_QUOTA_RESPONSES] = "responses",
        [FG_QUOTA_TOKENS_PER_MINUTE] = "tokens_per_minute",
        [FG_QUOTA_DAILY_TOKENS] = "daily_tokens",
        [FG_QUOTA_KV_BYTES] = "kv_bytes",
        [FG_QUOTA_CONTEXT] = "context",
        [FG_QUOTA_OUTPUT] = "output",
        [FG_QUOTA_UNAVAILABLE] = "unavailable",
        [FG_QUOTA_UNKNOWN_TENANT] = "unknown_tenant",
        [FG_QUOTA_INVALID] = "invalid",
    };
    return (unsigned)v < sizeof names / sizeof *names && names[v] ? names[v] : "unknown";
}

void fg_qreq_free(fg_qreq *r)
{
    if (!r)
        return;
    free(r->seed_hashes);
    free(r);
}

static void make_instance_id(char out[FG_QUOTA_INSTANCE_LEN + 1])
{
    const uint64_t v = fg_random_seed();
    snprintf(out, FG_QUOTA_INSTANCE_LEN + 1, "%016llx", (unsigned long long)v);
}

fg_err fg_quota_create(const fg_quota_options *o, fg_quota_t **out, fg_diag *diag)
{
    if (!out)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "quota: no output pointer");
    *out = NULL;
    if (!o)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "quota: no options");
    if (o->timeout_ms < 0 || o->timeout_ms > 60000)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "quota: timeout_ms %d outside 0..60000", o->timeout_ms);
    if (o->lease_ttl_ms != 0 && (o->lease_ttl_ms < MIN_LEASE_TTL_MS || o->lease_ttl_ms > 86400000))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "quota: lease_ttl_ms %d outside %d..86400000",
                           o->lease_ttl_ms, MIN_LEASE_TTL_MS);
    if (o->expected_instances < 0 || o->expected_instances > 100000)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "quota: expected_instances %d outside 0..100000",
                           o->expected_instances);

    struct fg_quota *q = calloc(1, sizeof *q);
    if (!q)
        return fg_diag_set(diag, FG_ERR_NOMEM, "quota: out of memory");
    q->timeout_ms = o->timeout_ms ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    fg_rlink_options lo = {.mode = o->redis_mode, .addrs = o->redis_nodes, .n_addrs = o->n_redis_nodes,
                           .master_name = o->redis_master_name, .timeout_ms = q->timeout_ms};
    if (o->redis_mode == FG_RLINK_SINGLE) {
        if (!o->redis_address || !o->redis_address[0]) {
            free(q);
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "quota: redis_address is empty");
        }
        lo.addrs = &o->redis_address;
        lo.n_addrs = 1;
    }
    fg_err le = fg_rlink_create(&lo, &q->conn.link, diag);
    if (le != FG_OK) {
        free(q);
        return le;
    }
    q->lease_ttl_ms = o->lease_ttl_ms ? o->lease_ttl_ms : DEFAULT_LEASE_TTL_MS;
    q->expected_instances = o->expected_instances ? o->expected_instances : 1;
    q->notify = o->notify;
    q->notify_user = o->notify_user;
    make_instance_id(q->instance);
    q->conn.backoff_ms = FG_QUOTA_BACKOFF_MIN_MS;
    q->batch = calloc(1, sizeof *q->batch);
    if (!q->batch) {
        fg_rlink_destroy(q->conn.link);
        free(q);
        return fg_diag_set(diag, FG_ERR_NOMEM, "quota: out of memory");
    }
    for (size_t i = 0; i < FG_QUOTA_BATCH_MAX; i++)
        fg_qcmd_init(&q->batch->cmd[i]);

    fg_err e = fg_qjournal_open(&q->journal, o->journal_path, diag);
    if (e != FG_OK) {
        free(q->batch);
        fg_rlink_destroy(q->conn.link);
        free(q);
        return e;
    }
    q->stats.journal_entries = q->journal.n;

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&q->mu, NULL);
    pthread_mutex_init(&q->cache_mu, NULL);

    int rc = pthread_create(&q->thread, NULL, fg_quota_thread_main, q);
    if (rc != 0) {
        fg_qjournal_close(&q->journal);
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        pthread_mutex_destroy(&q->cache_mu);
        free(q->batch);
        fg_rlink_destroy(q->conn.link);
        free(q);
        return fg_diag_set(diag, FG_ERR_NOMEM, "quota: cannot start the quota thread: %s", strerror(rc));
    }
    *out = q;
    return FG_OK;
}

static void free_list(fg_qreq *r)
{
    while (r) {
        fg_qreq *next = r->next;
        fg_qreq_free(r);
        r = next;
    }
}

void fg_quota_destroy(fg_quota_t *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);

    /* Answers nobody polled: their callbacks are not run. */
    free_list(q->done_head);
    free_list(q->in_head);
    free_list(q->out_head);
    while (q->seeds) {
        fg_qseed *s = q->seeds;
        q->seeds = s->next;
        free(s->hashes);
        free(s);
    }
    fg_qcache_free(&q->cache);
    fg_qdir_free(q);
    fg_qjournal_close(&q->journal);
    fg_qconn_close(q);
    fg_rlink_destroy(q->conn.link);
    free(q->conn.argv);
    free(q->conn.argvlen);
    free(q->conn.rcmds);
    for (size_t i = 0; i < FG_QUOTA_BATCH_MAX; i++)
        fg_qcmd_free(&q->batch->cmd[i]);
    free(q->batch);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    pthread_mutex_destroy(&q->cache_mu);
    free(q);
}

void fg_quota_poll(fg_quota_t *q)
{
    pthread_mutex_lock(&q->mu);
    fg_qreq *r = q->done_head;
    q->done_head = q->done_tail = NULL;
    pthread_mutex_unlock(&q->mu);
    while (r) {
        fg_qreq *next = r->next;
        if (r->usage_cb)
            r->usage_cb(r->user, r->usage_ok, &r->usage);
        else if (r->dir_cb)
            r->dir_cb(r->user, &r->dir);
        else if (r->cb)
            r->cb(r->user, &r->result);
        fg_qreq_free(r);
        r = next;
    }
}

/* ---- queueing ---- */

static bool is_admission(fg_qreq_kind k)
{
    return k == FG_QREQ_SESSION_OPEN || k == FG_QREQ_RESERVE || k == FG_QREQ_DIR_CLAIM;
}

/* Answers r at once on the calling thread's side (out of memory, queue full). */
static void answer_now(fg_quota_t *q, fg_qreq *r, fg_quota_verdict v)
{
    memset(&r->result, 0, sizeof r->result);
    r->result.verdict = v;
    r->result.degraded = true;
    pthread_mutex_lock(&q->mu);
    r->next = NULL;
    if (q->done_tail)
        q->done_tail->next = r;
    else
        q->done_head = r;
    q->done_tail = r;
    pthread_mutex_unlock(&q->mu);
    if (q->notify)
        q->notify(q->notify_user);
}

static void enqueue(fg_quota_t *q, fg_qreq *r)
{
    pthread_mutex_lock(&q->mu);
    if (q->n_in >= FG_QUOTA_QUEUE_MAX && is_admission(r->kind)) {
        /* Redis is far behind: refuse new work rather than grow without bound.
         * Settlements and closes are always queued (they carry usage). */
        pthread_mutex_unlock(&q->mu);
        answer_now(q, r, FG_QUOTA_UNAVAILABLE);
        return;
    }
    r->next = NULL;
    if (q->in_tail)
        q->in_tail->next = r;
    else
        q->in_head = r;
    q->in_tail = r;
    q->n_in++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

void fg_qreq_enqueue(fg_quota_t *q, fg_qreq *r)
{
    enqueue(q, r);
}

/* A request for tenant_id; on out of memory, cb runs now with FG_QUOTA_UNAVAILABLE. */
static fg_qreq *req_new(fg_qreq_kind kind, const char *tenant_id, fg_quota_cb cb, void *user)
{
    fg_qreq *r = calloc(1, sizeof *r);
    if (!r) {
        if (cb) {
            fg_quota_result res = {.verdict = FG_QUOTA_UNAVAILABLE, .degraded = true};
            cb(user, &res);
        }
        return NULL;
    }
    r->kind = kind;
    r->cb = cb;
    r->user = user;
    if (tenant_id && fg_name_valid(tenant_id, strlen(tenant_id)))
        snprintf(r->tenant, sizeof r->tenant, "%s", tenant_id);
    else
        r->reject = FG_QUOTA_UNKNOWN_TENANT;
    return r;
}

static void set_member(fg_quota_t *q, fg_qreq *r, const char *key)
{
    if (!fg_quota_valid_key(key)) {
        if (r->reject == FG_QUOTA_OK)
            r->reject = FG_QUOTA_INVALID;
        return;
    }
    snprintf(r->member, sizeof r->member, "%s:%s", q->instance, key);
}

static void hash_key(const char *api_key, char hex[FG_SHA256_HEX_LEN + 1])
{
    uint8_t d[FG_SHA256_BYTES];
    fg_sha256(api_key, strlen(api_key), d);
    fg_sha256_hex(d, hex);
}

/* ---- tenants and keys ---- */

void fg_quota_tenant_seed(fg_quota_t *q, const fg_tenant_record *t, const char *const *api_keys, size_t n_keys)
{
    if (!t || !fg_name_valid(t->id, strlen(t->id)) || !memchr(t->name, '\0', sizeof t->name))
        return;
    fg_qseed *s = calloc(1, sizeof *s);
    if (!s)
        return;
    s->rec = *t;
    if (s->rec.limits.weight < 1)
        s->rec.limits.weight = 1;
    if (!s->rec.name[0])
        snprintf(s->rec.name, sizeof s->rec.name, "%s", t->id);
    s->hashes = calloc(n_keys + 1, sizeof *s->hashes);
    if (!s->hashes) {
        free(s);
        return;
    }
    for (size_t i = 0; i < n_keys; i++)
        if (api_keys[i] && api_keys[i][0])
            fg_sha256(api_keys[i], strlen(api_keys[i]), s->hashes[s->n_hashes++]);
    pthread_mutex_lock(&q->cache_mu);
    fg_qseed **tail = &q->seeds;
    while (*tail)
        tail = &(*tail)->next;
    *tail = s;
    pthread_mutex_unlock(&q->cache_mu);
    fg_qcache_merge_seeds(q);

    fg_qreq *r = req_new(FG_QREQ_SEED, t->id, NULL, NULL);
    if (r)
        enqueue(q, r);
}

void fg_quota_tenant_put(fg_quota_t *q, const fg_tenant_record *t, fg_quota_cb cb, void *user)
{
    fg_qreq *r = req_new(FG_QREQ_PUT, t ? t->id : NULL, cb, user);
    if (!r)
        return;
    if (t)
        r->rec = *t;
    if (r->reject != FG_QUOTA_OK)
        r->reject = FG_QUOTA_INVALID;
    enqueue(q, r);
}

void fg_quota_tenant_create(fg_quota_t *q, const fg_tenant_record *t, fg_quota_cb cb, void *user)
{
    fg_qreq *r = req_new(FG_QREQ_CREATE, t ? t->id : NULL, cb, user);
    if (!r)
        return;
    if (t)
        r->rec = *t;
    if (r->reject != FG_QUOTA_OK)
        r->reject = FG_QUOTA_INVALID;
    enqueue(q, r);
}

void fg_quota_tenant_delete(fg_quota_t *q, const char *tenant_id, fg_quota_cb cb, void *user)
{
    fg_qreq *r = req_new(FG_QREQ_DELETE, tenant_id, cb, user);
    if (r)
        enqueue(q, r);
}

static void key_request(fg_quota_t *q, fg_qreq_kind kind, const char *tenant_id, const char *api_key,
                        fg_quota_cb cb, void *user)
{
    fg_qreq *r = req_new(kind, tenant_id, cb, user);
    if (!r)
        return;
    if (!api_key || !api_key[0]) {
        if (r->reject == FG_QUOTA_OK)
            r->reject = FG_QUOTA_INVALID;
    } else {
        hash_key(api_key, r->key_hash);
    }
    enqueue(q, r);
}

void fg_quota_key_add(fg_quota_t *q, const char *tenant_id, const char *api_key, fg_quota_cb cb, void *user)
{
    key_request(q, FG_QREQ_KEY_ADD, tenant_id, api_key, cb, user);
}

void fg_quota_key_revoke(fg_quota_t *q, const char *tenant_id, const char *api_key, fg_quota_cb cb, void *user)
{
    key_request(q, FG_QREQ_KEY_REVOKE, tenant_id, api_key, cb, user);
}

bool fg_quota_tenant_by_key(fg_quota_t *q, const char *api_key, fg_tenant_record *out)
{
    if (!api_key || !api_key[0])
        return false;
    uint8_t h[FG_SHA256_BYTES];
    fg_sha256(api_key, strlen(api_key), h);
    pthread_mutex_lock(&q->cache_mu);
    /* Every stored hash is compared, in constant time, without stopping at a
     * match: the time taken does not depend on which key (if any) matched. */
    size_t found = SIZE_MAX;
    for (size_t i = 0; i < q->cache.n_keys; i++) {
        bool eq = fg_sha256_equal(q->cache.keys[i].hash, h);
        size_t mask = (size_t)0 - (size_t)eq; /* all ones when equal */
        found = (found & ~mask) | (i & mask);
    }
    bool ok = found != SIZE_MAX;
    if (ok && out)
        *out = q->cache.tenants[q->cache.keys[found].tenant];
    pthread_mutex_unlock(&q->cache_mu);
    return ok;
}

bool fg_quota_tenant_get(fg_quota_t *q, const char *tenant_id, fg_tenant_record *out)
{
    if (!tenant_id || !fg_name_valid(tenant_id, strlen(tenant_id)))
        return false;
    return fg_qcache_get(q, tenant_id, out);
}

size_t fg_quota_tenant_list(fg_quota_t *q, fg_tenant_record *out, size_t max)
{
    pthread_mutex_lock(&q->cache_mu);
    size_t n = q->cache.n_tenants;
    for (size_t i = 0; out && i < n && i < max; i++)
        out[i] = q->cache.tenants[i];
    pthread_mutex_unlock(&q->cache_mu);
    return n;
}

/* ---- enforcement ---- */

void fg_quota_session_open(fg_quota_t *q, const char *tenant_id, const char *session_id, fg_quota_cb cb,
                           void *user)
{
    fg_qreq *r = req_new(FG_QREQ_SESSION_OPEN, tenant_id, cb, user);
    if (!r)
        return;
    set_member(q, r, session_id);
    enqueue(q, r);
}

void fg_quota_session_close(fg_quota_t *q, const char *tenant_id, const char *session_id)
{
    fg_qreq *r = req_new(FG_QREQ_SESSION_CLOSE, tenant_id, NULL, NULL);
    if (!r)
        return;
    set_member(q, r, session_id);
    if (r->reject != FG_QUOTA_OK) {
        fg_qreq_free(r); /* never opened: nothing to release */
        return;
    }
    enqueue(q, r);
}

void fg_quota_response_reserve(fg_quota_t *q, const char *tenant_id, const char *response_key,
                               int64_t reserve_tokens, int64_t kv_bytes, int64_t context_tokens,
                               int64_t max_output_tokens, fg_quota_cb cb, void *user)
{
    fg_qreq *r = req_new(FG_QREQ_RESERVE, tenant_id, cb, user);
    if (!r)
        return;
    set_member(q, r, response_key);
    if ((reserve_tokens < 0 || kv_bytes < 0 || context_tokens < 0 || max_output_tokens < 0) &&
        r->reject == FG_QUOTA_OK)
        r->reject = FG_QUOTA_INVALID;
    r->reserve_tokens = reserve_tokens;
    r->kv_bytes = kv_bytes;
    r->context_tokens = context_tokens;
    r->max_output_tokens = max_output_tokens;
    enqueue(q, r);
}

void fg_quota_response_settle(fg_quota_t *q, const char *tenant_id, const char *response_key,
                              int64_t reserved_tokens, int64_t used_tokens)
{
    fg_qreq *r = req_new(FG_QREQ_SETTLE, tenant_id, NULL, NULL);
    if (!r)
        return;
    set_member(q, r, response_key);
    if (r->reject != FG_QUOTA_OK) {
        fg_qreq_free(r); /* could not have been reserved */
        return;
    }
    /* The quota thread settles what it charged at reserve; reserved_tokens is
     * the caller's view of the same number, kept for symmetry. */
    r->reserve_tokens = reserved_tokens;
    r->used_tokens = used_tokens > 0 ? used_tokens : 0;
    enqueue(q, r);
}

void fg_quota_tenant_usage(fg_quota_t *q, const char *tenant_id, fg_quota_usage_cb cb, void *user)
{
    fg_qreq *r = req_new(FG_QREQ_USAGE, tenant_id, NULL, NULL);
    if (!r) {
        if (cb) {
            fg_tenant_usage u = {.degraded = true};
            cb(user, false, &u);
        }
        return;
    }
    r->usage_cb = cb;
    r->user = user;
    if (!cb) {
        fg_qreq_free(r);
        return;
    }
    enqueue(q, r);
}

void fg_quota_get_stats(fg_quota_t *q, fg_quota_stats *st)
{
    pthread_mutex_lock(&q->mu);
    *st = q->stats;
    pthread_mutex_unlock(&q->mu);
}
