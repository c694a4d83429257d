/* quota_harness.h: synchronous wrappers over the asynchronous quota API,
 * for tests. A harness owns one fg_quota; its notify callback wakes the
 * waiting test thread, which runs fg_quota_poll() (the owner's thread). */
#ifndef FG_QUOTA_HARNESS_H
#define FG_QUOTA_HARNESS_H

#include <pthread.h>
#include <stdbool.h>

#include "policies/quota.h"
#include "policies/session_dir.h"

typedef struct qh {
    fg_quota_t *q;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long notified;
} qh;

/* One awaited answer. */
typedef struct qh_wait {
    bool done;
    fg_quota_result r;
    double issued_ms, done_ms; /* CLOCK_MONOTONIC */
    bool usage_ok;
    fg_tenant_usage usage;
} qh_wait;

/* Options: address, timeout, lease ttl, instances, journal path (NULL). */
bool qh_open(qh *h, const char *address, int timeout_ms, int lease_ttl_ms, int instances, const char *journal);
/* Any options (notify and notify_user are the harness's). */
bool qh_open_opts(qh *h, const fg_quota_options *o);
void qh_close(qh *h);

/* The callbacks to pass with a qh_wait* as user. */
void qh_on_result(void *user, const fg_quota_result *r);
void qh_on_usage(void *user, bool ok, const fg_tenant_usage *u);

/* Polls until w->done or timeout_ms passes; false on timeout. */
bool qh_wait_for(qh *h, qh_wait *w, double timeout_ms);
/* Polls once, waiting up to ms for a notification. */
void qh_pump(qh *h, double ms);

/* Blocking forms (10 s limit; verdict -1 cast on timeout). */
fg_quota_result qh_session_open(qh *h, const char *tenant, const char *sid);
fg_quota_result qh_reserve(qh *h, const char *tenant, const char *key, long long tokens, long long kv,
                           long long ctx, long long max_out);
fg_quota_verdict qh_put(qh *h, const fg_tenant_record *t);
fg_quota_verdict qh_delete(qh *h, const char *tenant);
fg_quota_verdict qh_key_add(qh *h, const char *tenant, const char *key);
fg_quota_verdict qh_key_revoke(qh *h, const char *tenant, const char *key);
bool qh_usage(qh *h, const char *tenant, fg_tenant_usage *u);
/* A directory claim, awaited (10 s; state -1 cast on timeout). */
fg_dir_result qh_dir_claim(qh *h, const char *tenant, const char *sid, fg_dir_mode mode, uint64_t epoch);

/* Waits until the quota's stats say connected (and the journal is empty
 * when journal_empty); false after timeout_ms. */
bool qh_wait_connected(qh *h, bool journal_empty, double timeout_ms);

/* Turns the session directory on as instance name, advertised at "ws://<name>.example:8080". */
bool qh_dir_enable(qh *h, const char *name, int lease_ttl_ms);

/* A record with only an id and the given tokens per minute. */
fg_tenant_record qh_record(const char *id);

#endif
