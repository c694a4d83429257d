/* quota_thread.c: the quota thread — the only thread that talks to Redis.
 *
 * Each round it takes every queued request, hands the enforcement ones
 * (session open/close, reserve, settle) to quota_enforce.c in batches of
 * FG_QUOTA_BATCH_MAX (one round trip each), runs admin requests one by one
 * (quota_admin.c), then its timers: the
 * journal replay (whenever connected with entries waiting), the tenant cache
 * check (every second), lease renewal (every lease_ttl / 3, one call per
 * tenant for all the leases this instance holds). Finished requests go to
 * the done queue and the owner is notified once per round.
 */
#include "policies/quota_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RENEW_CHUNK 1000 /* members per renew call */

/* ---- counters ---- */

void fg_quota_stat_calls(struct fg_quota *q, uint64_t commands, double ms)
{
    pthread_mutex_lock(&q->mu);
    q->stats.calls += commands;
    q->stats.round_trips++;
    q->stats.last_call_ms = ms;
    int b = 0; /* the smallest bucket whose bound holds ms */
    for (double bound_ms = FG_QUOTA_RTT_BASE_S * 1e3; b < FG_QUOTA_RTT_BUCKETS - 1 && ms > bound_ms; bound_ms *= 2.0)
        b++;
    q->stats.rtt_hist[b]++;
    q->stats.rtt_seconds_sum += ms * 1e-3;
    pthread_mutex_unlock(&q->mu);
}

void fg_quota_stat_error(struct fg_quota *q, const char *what)
{
    pthread_mutex_lock(&q->mu);
    q->stats.errors++;
    snprintf(q->stats.last_error, sizeof q->stats.last_error, "%s", what);
    pthread_mutex_unlock(&q->mu);
}

void fg_quota_stat_reply_error(struct fg_quota *q, const char *what, const redisReply *r)
{
    char msg[128];
    snprintf(msg, sizeof msg, "redis %s: %s", what,
             r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    fg_quota_stat_error(q, msg);
}

void fg_quota_finish(struct fg_quota *q, fg_qreq *r)
{
    if (!r->cb && !r->usage_cb && !r->dir_cb) {
        fg_qreq_free(r);
        return;
    }
    r->next = NULL;
    if (q->out_tail)
        q->out_tail->next = r;
    else
        q->out_head = r;
    q->out_tail = r;
}

/* Moves this round's finished requests to the done queue and notifies once. */
static void publish(struct fg_quota *q)
{
    if (!q->out_head)
        return;
    pthread_mutex_lock(&q->mu);
    if (q->done_tail)
        q->done_tail->next = q->out_head;
    else
        q->done_head = q->out_head;
    q->done_tail = q->out_tail;
    pthread_mutex_unlock(&q->mu);
    q->out_head = q->out_tail = NULL;
    if (q->notify)
        q->notify(q->notify_user);
}

/* ---- lease renewal ---- */

static void renew_all(struct fg_quota *q)
{
    /* Count the commands: one per tenant with leases (more past RENEW_CHUNK members). */
    size_t n_cmds = 0;
    for (size_t i = 0; i < q->n_tenants; i++) {
        size_t m = q->tenants[i]->sessions.n + q->tenants[i]->responses.n;
        n_cmds += (m + RENEW_CHUNK - 1) / RENEW_CHUNK;
    }
    if (!n_cmds || !fg_qconn_up(q))
        return;
    fg_qcmd *cmds = calloc(n_cmds, sizeof *cmds);
    fg_qcmd **ptrs = calloc(n_cmds, sizeof *ptrs);
    redisReply **rep = calloc(n_cmds, sizeof *rep);
    if (!cmds || !ptrs || !rep) {
        free(cmds);
        free(ptrs);
        free(rep);
        fg_quota_stat_error(q, "out of memory renewing leases (retried next period)");
        return;
    }
    size_t c = 0;
    char key[FG_QUOTA_REDIS_KEY_MAX];
    for (size_t i = 0; i < q->n_tenants; i++) {
        fg_qtenant *t = q->tenants[i];
        size_t ns = t->sessions.n, total = ns + t->responses.n;
        for (size_t at = 0; at < total; at += RENEW_CHUNK) {
            size_t end = at + RENEW_CHUNK < total ? at + RENEW_CHUNK : total;
            fg_qcmd *cmd = &cmds[c];
            ptrs[c++] = cmd;
            fg_qcmd_init(cmd);
            fg_qcmd_script(cmd, FG_QSCRIPT_RENEW, 2);
            fg_qkey(key, t->id, "sessions");
            fg_qcmd_str(cmd, key);
            fg_qkey(key, t->id, "responses");
            fg_qcmd_str(cmd, key);
            fg_qcmd_i64(cmd, q->lease_ttl_ms);
            size_t n_sess = at < ns ? (end < ns ? end : ns) - at : 0;
            fg_qcmd_i64(cmd, (int64_t)n_sess);
            size_t added = 0;
            for (size_t m = at; m < end; m++) {
                const fg_qlease *l = m < ns ? &t->sessions.v[m] : &t->responses.v[m - ns];
                /* A response the backstop admitted has no lease in Redis: its settle is journaled. */
                if (m < ns || l->in_redis) {
                    fg_qcmd_str(cmd, l->member);
                    added++;
                }
            }
            if (!added) {
                fg_qcmd_free(cmd);
                c--;
            }
        }
    }
    for (size_t at = 0; at < c && fg_qconn_up(q); at += FG_QUOTA_BATCH_MAX) {
        size_t n = c - at < FG_QUOTA_BATCH_MAX ? c - at : FG_QUOTA_BATCH_MAX;
        fg_qconn_exec(q, ptrs + at, n, rep + at);
    }
    for (size_t i = 0; i < c; i++) {
        if (rep[i] && rep[i]->type == REDIS_REPLY_ERROR)
            fg_quota_stat_reply_error(q, "renew script", rep[i]);
        if (rep[i])
            freeReplyObject(rep[i]);
        fg_qcmd_free(&cmds[i]);
    }
    free(cmds);
    free(ptrs);
    free(rep);
}

/* ---- the loop ---- */

static bool is_enforcement(const fg_qreq *r)
{
    return r->kind == FG_QREQ_SESSION_OPEN || r->kind == FG_QREQ_SESSION_CLOSE || r->kind == FG_QREQ_RESERVE ||
           r->kind == FG_QREQ_SETTLE;
}

static bool is_dir(const fg_qreq *r)
{
    return r->kind == FG_QREQ_DIR_CLAIM || r->kind == FG_QREQ_DIR_RELEASE;
}

static void handle_requests(struct fg_quota *q, fg_qreq *list)
{
    fg_qreq *batch[FG_QUOTA_BATCH_MAX], *dir[FG_QUOTA_BATCH_MAX];
    size_t n = 0, n_dir = 0;
    while (list) {
        fg_qreq *r = list;
        list = r->next;
        r->next = NULL;
        if (r->reject != FG_QUOTA_OK) {
            memset(&r->result, 0, sizeof r->result);
            r->result.verdict = r->reject;
            fg_quota_finish(q, r);
        } else if (is_dir(r)) {
            dir[n_dir++] = r;
            if (n_dir == FG_QUOTA_BATCH_MAX) {
                fg_qdir_batch(q, dir, n_dir);
                n_dir = 0;
            }
        } else if (is_enforcement(r)) {
            batch[n++] = r;
            if (n == FG_QUOTA_BATCH_MAX) {
                fg_qenforce_batch(q, batch, n);
                n = 0;
            }
        } else {
            fg_qadmin_handle(q, r);
        }
    }
    if (n)
        fg_qenforce_batch(q, batch, n);
    if (n_dir)
        fg_qdir_batch(q, dir, n_dir);
}

static void on_connected(struct fg_quota *q, int64_t now_us)
{
    if (!fg_qadmin_run_seeds(q))
        q->seeds_pending = true;
    fg_qcache_refresh(q, true);
    fg_qjournal_replay(q);
    renew_all(q); /* leases that expired during the outage come back */
    fg_qdir_renew_due(q, now_us, true);
    q->next_refresh_us = now_us + FG_QUOTA_REFRESH_MS * 1000LL;
    q->next_renew_us = now_us + q->lease_ttl_ms * 1000LL / 3;
}

static void run_timers(struct fg_quota *q)
{
    int64_t now = fg_clock_mono_us();
    if (!fg_qconn_up(q) && fg_qconn_connect_if_due(q, now))
        on_connected(q, now);
    if (!fg_qconn_up(q))
        return;
    if (q->seeds_pending && now >= q->next_seed_us) {
        q->seeds_pending = false;
        if (!fg_qadmin_run_seeds(q)) {
            q->seeds_pending = true;
            q->next_seed_us = now + 100 * 1000LL;
        }
    }
    if (q->journal.n && fg_qconn_up(q) && now >= q->next_replay_us && !fg_qjournal_replay(q))
        q->next_replay_us = now + FG_QUOTA_REFRESH_MS * 1000LL; /* out of memory: not in a tight loop */
    if (now >= q->next_refresh_us && fg_qconn_up(q)) {
        fg_qcache_refresh(q, now >= q->next_full_reload_us);
        q->next_refresh_us = now + FG_QUOTA_REFRESH_MS * 1000LL;
    }
    if (now >= q->next_renew_us && fg_qconn_up(q)) {
        renew_all(q);
        q->next_renew_us = now + q->lease_ttl_ms * 1000LL / 3;
    }
    fg_qdir_renew_due(q, now, false);
    fg_qdir_publish_due(q, now);
}

/* When the loop must wake up without requests, CLOCK_MONOTONIC us. */
static int64_t next_wake(struct fg_quota *q)
{
    if (!fg_qconn_up(q))
        return q->conn.next_attempt_us;
    int64_t w = q->next_refresh_us < q->next_renew_us ? q->next_refresh_us : q->next_renew_us;
    if (q->journal.n && q->next_replay_us < w)
        w = q->next_replay_us; /* usage journaled while connected (backstop-admitted responses) */
    if (q->dir.on && q->dir.next_renew_us < w)
        w = q->dir.next_renew_us;
    if (q->dir.on && q->dir.next_publish_us < w)
        w = q->dir.next_publish_us;
    if (q->seeds_pending && q->next_seed_us < w)
        w = q->next_seed_us;
    return w;
}

void *fg_quota_thread_main(void *arg)
{
    struct fg_quota *q = arg;
    /* A write to a socket Redis closed raises SIGPIPE in this thread; blocked,
     * it leaves write() failing with EPIPE instead of ending the process. */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);

    for (;;) {
        int64_t wake = next_wake(q);
        pthread_mutex_lock(&q->mu);
        while (!q->in_head && !q->stop) {
            if (fg_clock_mono_us() >= wake)
                break;
            struct timespec ts = {.tv_sec = wake / 1000000, .tv_nsec = (wake % 1000000) * 1000};
            pthread_cond_timedwait(&q->cv, &q->mu, &ts);
        }
        fg_qreq *list = q->in_head;
        q->in_head = q->in_tail = NULL;
        q->n_in = 0;
        bool stop = q->stop;
        pthread_mutex_unlock(&q->mu);

        int64_t now = fg_clock_mono_us();
        if (list && !fg_qconn_up(q) && fg_qconn_connect_if_due(q, now))
            on_connected(q, now);
        handle_requests(q, list);
        publish(q);
        if (!stop) {
            run_timers(q);
            publish(q);
        }

        /* Consume a SIGPIPE left pending by a dead socket. */
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) > 0) {
        }
        if (stop)
            break;
    }
    fg_qjournal_replay(q);
    fg_qconn_close(q);
    for (size_t i = 0; i < q->n_tenants; i++)
        fg_qtenant_free(q->tenants[i]);
    free(q->tenants);
    q->tenants = NULL;
    q->n_tenants = 0;
    return NULL;
}
