/* quota_harness.c: see quota_harness.h. */
#include "quota_harness.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "redis_fixture.h"
#include "policies/session_dir.h"

static void notify(void *user)
{
    qh *h = user;
    pthread_mutex_lock(&h->mu);
    h->notified++;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

bool qh_open(qh *h, const char *address, int timeout_ms, int lease_ttl_ms, int instances, const char *journal)
{
    fg_quota_options o = {
        .redis_address = address,
        .timeout_ms = timeout_ms,
        .lease_ttl_ms = lease_ttl_ms,
        .expected_instances = instances,
        .journal_path = journal,
    };
    return qh_open_opts(h, &o);
}

bool qh_open_opts(qh *h, const fg_quota_options *opts)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    fg_quota_options o = *opts;
    o.notify = notify;
    o.notify_user = h;
    fg_diag d = {{0}};
    if (fg_quota_create(&o, &h->q, &d) != FG_OK) {
        fprintf(stderr, "fg_quota_create: %s\n", d.msg);
        return false;
    }
    return true;
}

void qh_close(qh *h)
{
    fg_quota_destroy(h->q);
    h->q = NULL;
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}

void qh_on_result(void *user, const fg_quota_result *r)
{
    qh_wait *w = user;
    w->r = *r;
    w->done = true;
    w->done_ms = fg_clock_mono_s() * 1e3;
}

void qh_on_usage(void *user, bool ok, const fg_tenant_usage *u)
{
    qh_wait *w = user;
    w->usage_ok = ok;
    w->usage = *u;
    w->done = true;
    w->done_ms = fg_clock_mono_s() * 1e3;
}

void qh_pump(qh *h, double ms)
{
    pthread_mutex_lock(&h->mu);
    unsigned long seen = h->notified;
    if (ms > 0) {
        struct timespec ts = fg_clock_deadline(ms / 1e3);
        while (h->notified == seen)
            if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) != 0)
                break;
    }
    pthread_mutex_unlock(&h->mu);
    fg_quota_poll(h->q);
}

bool qh_wait_for(qh *h, qh_wait *w, double timeout_ms)
{
    double end = fg_clock_mono_s() * 1e3 + timeout_ms;
    fg_quota_poll(h->q);
    while (!w->done) {
        double left = end - fg_clock_mono_s() * 1e3;
        if (left <= 0)
            return false;
        qh_pump(h, left < 5 ? left : 5);
    }
    return true;
}

static fg_quota_result timed_out(void)
{
    fg_quota_result r;
    memset(&r, 0, sizeof r);
    r.verdict = (fg_quota_verdict)-1;
    return r;
}

fg_quota_result qh_session_open(qh *h, const char *tenant, const char *sid)
{
    qh_wait w = {.issued_ms = fg_clock_mono_s() * 1e3};
    fg_quota_session_open(h->q, tenant, sid, qh_on_result, &w);
    return qh_wait_for(h, &w, 10000) ? w.r : timed_out();
}

fg_quota_result qh_reserve(qh *h, const char *tenant, const char *key, long long tokens, long long kv,
                           long long ctx, long long max_out)
{
    qh_wait w = {.issued_ms = fg_clock_mono_s() * 1e3};
    fg_quota_response_reserve(h->q, tenant, key, tokens, kv, ctx, max_out, qh_on_result, &w);
    return qh_wait_for(h, &w, 10000) ? w.r : timed_out();
}

fg_quota_verdict qh_put(qh *h, const fg_tenant_record *t)
{
    qh_wait w = {0};
    fg_quota_tenant_put(h->q, t, qh_on_result, &w);
    return qh_wait_for(h, &w, 10000) ? w.r.verdict : (fg_quota_verdict)-1;
}

fg_quota_verdict qh_delete(qh *h, const char *tenant)
{
    qh_wait w = {0};
    fg_quota_tenant_delete(h->q, tenant, qh_on_result, &w);
    return qh_wait_for(h, &w, 10000) ? w.r.verdict : (fg_quota_verdict)-1;
}

fg_quota_verdict qh_key_add(qh *h, const char *tenant, const char *key)
{
    qh_wait w = {0};
    fg_quota_key_add(h->q, tenant, key, qh_on_result, &w);
    return qh_wait_for(h, &w, 10000) ? w.r.verdict : (fg_quota_verdict)-1;
}

fg_quota_verdict qh_key_revoke(qh *h, const char *tenant, const char *key)
{
    qh_wait w = {0};
    fg_quota_key_revoke(h->q, tenant, key, qh_on_result, &w);
    return qh_wait_for(h, &w, 10000) ? w.r.verdict : (fg_quota_verdict)-1;
}

bool qh_usage(qh *h, const char *tenant, fg_tenant_usage *u)
{
    qh_wait w = {0};
    fg_quota_tenant_usage(h->q, tenant, qh_on_usage, &w);
    if (!qh_wait_for(h, &w, 10000))
        return false;
    *u = w.usage;
    return w.usage_ok;
}

bool qh_wait_connected(qh *h, bool journal_empty, double timeout_ms)
{
    double end = fg_clock_mono_s() * 1e3 + timeout_ms;
    for (;;) {
        fg_quota_stats st;
        fg_quota_get_stats(h->q, &st);
        if (st.connected && (!journal_empty || st.journal_entries == 0))
            return true;
        if (fg_clock_mono_s() * 1e3 > end)
            return false;
        qh_pump(h, 10);
    }
}

fg_tenant_record qh_record(const char *id)
{
    fg_tenant_record t;
    memset(&t, 0, sizeof t);
    snprintf(t.id, sizeof t.id, "%s", id);
    snprintf(t.name, sizeof t.name, "tenant %s", id);
    t.limits.weight = 1;
    return t;
}

bool qh_dir_enable(qh *h, const char *name, int lease_ttl_ms)
{
    char url[64];
    snprintf(url, sizeof url, "ws://%s.example:8080", name);
    fg_dir_options o = {.instance_id = name, .advertise_url = url, .lease_ttl_ms = lease_ttl_ms};
    fg_diag d = {{0}};
    return fg_quota_dir_enable(h->q, &o, &d) == FG_OK;
}

typedef struct dir_wait {
    bool done;
    fg_dir_result r;
} dir_wait;

static void on_dir(void *user, const fg_dir_result *r)
{
    dir_wait *w = user;
    w->r = *r;
    w->done = true;
}

fg_dir_result qh_dir_claim(qh *h, const char *tenant, const char *sid, fg_dir_mode mode, uint64_t epoch)
{
    dir_wait w = {0};
    fg_quota_dir_claim(h->q, tenant, sid, mode, epoch, on_dir, &w);
    for (int i = 0; i < 2000 && !w.done; i++)
        qh_pump(h, 5);
    if (!w.done)
        w.r.state = (fg_dir_state)-1;
    return w.r;
}
