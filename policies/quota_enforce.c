/* quota_enforce.c: session opens and closes, reserves and settles, in
 * batches: one pipelined round trip per batch (the session, reserve and
 * settle scripts, ZREM for a close), then each reply turned into a verdict.
 *
 * Per response, Redis sees exactly two calls: the reserve script at
 * response.create and the settle script at response.done; nothing per token.
 *
 * When Redis cannot answer (not connected, I/O error, timeout, error reply)
 * a session open or reserve is decided locally by the tenant's fail mode:
 * closed refuses with FG_QUOTA_UNAVAILABLE, open admits within the backstop
 * (this instance's share of each limit). A settlement that cannot reach
 * Redis goes to the journal, replayed when Redis is back.
 *
 * Quota thread only.
 */
#include "policies/quota_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void stat_degraded(struct fg_quota *q)
{
    pthread_mutex_lock(&q->mu);
    q->stats.degraded++;
    pthread_mutex_unlock(&q->mu);
}

/* ---- clocks ---- */

static int64_t redis_day(struct fg_quota *q)
{
    return fg_quota_redis_now_us(q) / 86400000000LL;
}

static double to_midnight_s(struct fg_quota *q)
{
    int64_t now = fg_quota_redis_now_us(q);
    return (double)((now / 86400000000LL + 1) * 86400000000LL - now) / 1e6;
}

/* ---- local decisions ---- */

static void add_state(fg_quota_result *r, const char *name, int64_t limit, int64_t remaining, double reset_s)
{
    if (limit <= 0 || r->n_states >= FG_QUOTA_MAX_STATES)
        return;
    fg_quota_limit_state *s = &r->states[r->n_states++];
    s->name = name;
    s->limit = limit;
    s->remaining = remaining > 0 ? remaining : 0;
    s->reset_seconds = reset_s > 0 ? reset_s : 0;
}

/* Limits that need no shared state; FG_QUOTA_OK when they pass. */
static fg_quota_verdict static_checks(const fg_qreq *r, const fg_tenant_limits *l, double *retry)
{
    *retry = 0;
    if (l->max_output_tokens > 0 && r->max_output_tokens > l->max_output_tokens)
        return FG_QUOTA_OUTPUT;
    if (l->max_context_tokens > 0 && r->context_tokens > l->max_context_tokens)
        return FG_QUOTA_CONTEXT;
    if (l->max_kv_bytes > 0 && r->kv_bytes > l->max_kv_bytes) {
        *retry = 1.0;
        return FG_QUOTA_KV_BYTES;
    }
    return FG_QUOTA_OK;
}

/* Decides a session open or a reserve without Redis, by the tenant's fail mode. */
static void decide_local(struct fg_quota *q, fg_qreq *r)
{
    fg_quota_result *res = &r->result;
    memset(res, 0, sizeof *res);
    res->degraded = true;
    fg_tenant_record rec;
    if (!fg_qcache_get(q, r->tenant, &rec)) {
        /* not in the cache (not loaded yet from Redis, or gone): its fail mode is unknown,
         * so the answer is "cannot check now", which the client retries */
        res->verdict = FG_QUOTA_UNAVAILABLE;
        return;
    }
    const fg_tenant_limits *l = &rec.limits;
    stat_degraded(q);
    if (l->fail_closed) {
        res->verdict = FG_QUOTA_UNAVAILABLE;
        return;
    }
    fg_qtenant *t = fg_qtenant_get(q, r->tenant);
    if (!t) {
        res->verdict = FG_QUOTA_UNAVAILABLE;
        return;
    }
    int n = q->expected_instances;
    if (r->kind == FG_QREQ_SESSION_OPEN) {
        int64_t share = fg_backstop_share(l->max_sessions, n);
        bool held = fg_qlease_find(&t->sessions, r->member) != NULL;
        if (share > 0 && !held && (int64_t)t->sessions.n >= share) {
            res->verdict = FG_QUOTA_SESSIONS;
            res->retry_after = 1.0;
        } else if (!fg_qlease_add(&t->sessions, r->member, 0, 0, false)) {
            res->verdict = FG_QUOTA_UNAVAILABLE;
        }
        add_state(res, "sessions", share, share - (int64_t)t->sessions.n, 0);
        return;
    }
    /* reserve */
    int64_t share = fg_backstop_share(l->max_responses, n);
    if (share > 0 && (int64_t)t->responses.n >= share) {
        res->verdict = FG_QUOTA_RESPONSES;
        res->retry_after = 1.0;
        add_state(res, "responses", share, 0, 0);
        return;
    }
    int64_t day = redis_day(q);
    res->verdict = fg_backstop_admit(&t->backstop, l, n, r->reserve_tokens, fg_clock_mono_us(), day,
                                     to_midnight_s(q), res);
    if (res->verdict == FG_QUOTA_OK) {
        if (!fg_qlease_add(&t->responses, r->member, r->reserve_tokens, day, false)) {
            /* Cannot track it: give the tokens back and refuse. */
            fg_backstop_settle(&t->backstop, l, n, r->reserve_tokens, 0, fg_clock_mono_us());
            res->verdict = FG_QUOTA_UNAVAILABLE;
        }
    }
    add_state(res, "responses", share, share - (int64_t)t->responses.n, 0);
}

/* Journals a settlement that Redis could not take ('S') or usage the backstop admitted ('U'). */
static void journal_settle(struct fg_quota *q, const char *tenant, const fg_qlease *l, int64_t used)
{
    fg_qjentry e;
    memset(&e, 0, sizeof e);
    e.kind = l->in_redis ? 'S' : 'U';
    snprintf(e.tenant, sizeof e.tenant, "%s", tenant);
    if (l->in_redis)
        snprintf(e.member, sizeof e.member, "%s", l->member);
    else
        snprintf(e.member, sizeof e.member, "%s:j%llu", q->instance, (unsigned long long)q->journal.seq++);
    e.day = l->day;
    e.reserved = l->reserved;
    e.used = used;
    e.ts_ms = fg_quota_redis_now_us(q) / 1000;
    fg_qjournal_append(q, &e);
}

/* ---- commands ---- */

static void session_cmd(struct fg_quota *q, fg_qcmd *c, const fg_qreq *r)
{
    fg_qcmd_script(c, FG_QSCRIPT_SESSION, 2);
    fg_qcmd_key(c, r->tenant, "config");
    fg_qcmd_key(c, r->tenant, "sessions");
    fg_qcmd_str(c, r->member);
    fg_qcmd_i64(c, q->lease_ttl_ms);
}

static void reserve_cmd(struct fg_quota *q, fg_qcmd *c, const fg_qreq *r)
{
    int64_t day = redis_day(q);
    fg_qcmd_script(c, FG_QSCRIPT_RESERVE, 6);
    fg_qcmd_key(c, r->tenant, "config");
    fg_qcmd_key(c, r->tenant, "responses");
    fg_qcmd_key(c, r->tenant, "tpm");
    for (int64_t d = day - 1; d <= day + 1; d++) {
        fg_qcmd_key_daily(c, r->tenant, d);
    }
    fg_qcmd_str(c, r->member);
    fg_qcmd_i64(c, r->reserve_tokens);
    fg_qcmd_i64(c, r->kv_bytes);
    fg_qcmd_i64(c, r->context_tokens);
    fg_qcmd_i64(c, r->max_output_tokens);
    fg_qcmd_i64(c, q->lease_ttl_ms);
    fg_qcmd_i64(c, day);
}

static void settle_cmd(fg_qcmd *c, const char *tenant, const fg_qlease *l, int64_t used)
{
    fg_qcmd_script(c, FG_QSCRIPT_SETTLE, 5);
    fg_qcmd_key(c, tenant, "config");
    fg_qcmd_key(c, tenant, "responses");
    fg_qcmd_key(c, tenant, "tpm");
    fg_qcmd_key_daily(c, tenant, l->day);
    fg_qcmd_key(c, tenant, "usage:total");
    fg_qcmd_str(c, l->member);
    fg_qcmd_i64(c, l->reserved);
    fg_qcmd_i64(c, used);
}

static void close_cmd(fg_qcmd *c, const char *tenant, const char *member)
{
    fg_qcmd_reset(c);
    fg_qcmd_str(c, "ZREM");
    fg_qcmd_key(c, tenant, "sessions");
    fg_qcmd_str(c, member);
}

/* ---- replies ---- */

static int64_t rep_int(const redisReply *r, size_t i)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
        return 0;
    const redisReply *e = r->element[i];
    return e->type == REDIS_REPLY_INTEGER ? (int64_t)e->integer : 0;
}

static bool rep_is_array(const redisReply *r, size_t min)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < min)
        return false;
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return false;
    return true;
}

/* A verdict number from a script, or -2 if Redis sent something we never return. */
static int verdict_of(const redisReply *r)
{
    int64_t v = rep_int(r, 0);
    return v >= -1 && v <= FG_QUOTA_INVALID ? (int)v : -2;
}

static void session_reply(struct fg_quota *q, fg_qreq *r, const redisReply *rep)
{
    if (!rep_is_array(rep, 5) || verdict_of(rep) < 0) {
        if (rep)
            fg_quota_stat_reply_error(q, "session script", rep);
        decide_local(q, r);
        return;
    }
    fg_quota_result *res = &r->result;
    memset(res, 0, sizeof *res);
    fg_quota_note_redis_ms(q, rep_int(rep, 2));
    res->verdict = (fg_quota_verdict)rep_int(rep, 0);
    res->retry_after = (double)rep_int(rep, 1) / 1000.0;
    int64_t max = rep_int(rep, 3), active = rep_int(rep, 4);
    add_state(res, "sessions", max, max - active, 0);
    if (res->verdict == FG_QUOTA_OK) {
        fg_qtenant *t = fg_qtenant_get(q, r->tenant);
        if (!t || !fg_qlease_add(&t->sessions, r->member, 0, 0, true))
            fg_quota_stat_error(q, "out of memory: session lease not tracked (it will expire)");
    }
}

/* Returns true when the reserve must be sent again (the day guess was off). */
static bool reserve_reply(struct fg_quota *q, fg_qreq *r, const redisReply *rep, bool last_try)
{
    if (rep_is_array(rep, 4) && rep_int(rep, FG_QRES_VERDICT) == -1) {
        fg_quota_note_redis_ms(q, rep_int(rep, FG_QRES_NOW_MS));
        if (!last_try)
            return true;
        rep = NULL; /* a clock that will not settle: decide locally */
    }
    if (!rep_is_array(rep, 4) || verdict_of(rep) < 0) {
        if (rep)
            fg_quota_stat_reply_error(q, "reserve script", rep);
        decide_local(q, r);
        return false;
    }
    fg_quota_result *res = &r->result;
    memset(res, 0, sizeof *res);
    fg_quota_note_redis_ms(q, rep_int(rep, FG_QRES_NOW_MS));
    res->verdict = (fg_quota_verdict)rep_int(rep, FG_QRES_VERDICT);
    res->retry_after = (double)rep_int(rep, FG_QRES_RETRY_MS) / 1000.0;
    if (rep->elements < FG_QRES__COUNT)
        return false; /* unknown tenant: no states */
    int64_t tpm = rep_int(rep, FG_QRES_TPM_LIMIT), daily = rep_int(rep, FG_QRES_DAILY_LIMIT);
    int64_t used = rep_int(rep, FG_QRES_DAILY_USED), resp = rep_int(rep, FG_QRES_RESP_LIMIT);
    int64_t day = rep_int(rep, FG_QRES_DAY);
    add_state(res, "tokens_per_minute", tpm, rep_int(rep, FG_QRES_TPM_REMAINING),
              (double)rep_int(rep, FG_QRES_TPM_RESET_MS) / 1000.0);
    add_state(res, "daily_tokens", daily, daily - used, (double)rep_int(rep, FG_QRES_DAILY_RESET_MS) / 1000.0);
    add_state(res, "responses", resp, resp - rep_int(rep, FG_QRES_RESP_ACTIVE), 0);

    fg_qtenant *t = fg_qtenant_get(q, r->tenant);
    if (t) {
        fg_tenant_limits l = {.daily_tokens = daily};
        fg_backstop_note_daily(&t->backstop, &l, q->expected_instances, day, used);
    }
    if (res->verdict == FG_QUOTA_OK && (!t || !fg_qlease_add(&t->responses, r->member, r->reserve_tokens, day, true)))
        fg_quota_stat_error(q, "out of memory: response lease not tracked (it will expire)");
    return false;
}

/* ---- one batch of enforcement requests ---- */

void fg_qenforce_batch(struct fg_quota *q, fg_qreq **reqs, size_t n)
{
    /* Scratch allocated with the quota: no allocation here but the replies. */
    fg_qbatch *b = q->batch;
    fg_qslot *s = b->slot;
    fg_qcmd *cmds = b->cmd;
    fg_qcmd **ptrs = b->ptr;
    redisReply **rep = b->rep;
    if (n > FG_QUOTA_BATCH_MAX)
        n = FG_QUOTA_BATCH_MAX; /* the caller never passes more */
    memset(s, 0, n * sizeof *s);
    bool up = fg_qconn_up(q);
    size_t n_cmds = 0;
    for (size_t i = 0; i < n; i++) {
        fg_qreq *r = reqs[i];
        s[i].r = r;
        fg_qcmd_reset(&cmds[i]);
        switch (r->kind) {
        case FG_QREQ_SESSION_OPEN:
            if (up) {
                session_cmd(q, &cmds[i], r);
                s[i].has_cmd = true;
            } else {
                decide_local(q, r);
            }
            break;
        case FG_QREQ_RESERVE: {
            fg_tenant_record rec;
            double retry;
            fg_quota_verdict v = FG_QUOTA_OK;
            if (fg_qcache_get(q, r->tenant, &rec))
                v = static_checks(r, &rec.limits, &retry);
            if (v != FG_QUOTA_OK) {
                memset(&r->result, 0, sizeof r->result);
                r->result.verdict = v;
                r->result.retry_after = retry;
            } else if (up) {
                reserve_cmd(q, &cmds[i], r);
                s[i].has_cmd = true;
            } else {
                decide_local(q, r);
            }
            break;
        }
        case FG_QREQ_SESSION_CLOSE: {
            fg_qtenant *t = fg_qtenant_find(q, r->tenant);
            fg_qlease l;
            if (t && fg_qlease_take(&t->sessions, r->member, &l)) {
                free(l.member);
                if (up) {
                    close_cmd(&cmds[i], r->tenant, r->member);
                    s[i].has_cmd = true;
                }
                /* else: the lease is no longer renewed and expires in Redis by itself. */
            }
            break;
        }
        case FG_QREQ_SETTLE: {
            fg_qtenant *t = fg_qtenant_find(q, r->tenant);
            if (!t || !fg_qlease_take(&t->responses, r->member, &s[i].lease))
                break; /* nothing reserved for this key (refused, or settled already) */
            if (!s[i].lease.in_redis) {
                fg_tenant_record rec;
                if (fg_qcache_get(q, r->tenant, &rec))
                    fg_backstop_settle(&t->backstop, &rec.limits, q->expected_instances, s[i].lease.reserved,
                                       r->used_tokens, fg_clock_mono_us());
                journal_settle(q, r->tenant, &s[i].lease, r->used_tokens);
            } else if (up) {
                settle_cmd(&cmds[i], r->tenant, &s[i].lease, r->used_tokens);
                s[i].has_cmd = true;
            } else {
                journal_settle(q, r->tenant, &s[i].lease, r->used_tokens);
            }
            break;
        }
        default:
            break;
        }
        if (s[i].has_cmd)
            ptrs[n_cmds++] = &cmds[i];
    }

    if (n_cmds)
        fg_qconn_exec(q, ptrs, n_cmds, rep);

    /* Replies, in request order (rep[k] belongs to the k-th slot with a command). */
    size_t k = 0;
    size_t n_retry = 0;
    for (size_t i = 0; i < n; i++) {
        if (!s[i].has_cmd)
            continue;
        fg_qreq *r = s[i].r;
        redisReply *x = rep[k++];
        switch (r->kind) {
        case FG_QREQ_SESSION_OPEN:
            session_reply(q, r, x);
            break;
        case FG_QREQ_RESERVE:
            if (reserve_reply(q, r, x, false)) {
                s[i].has_cmd = true; /* keep: sent again below */
                n_retry++;
            } else {
                s[i].has_cmd = false;
            }
            break;
        case FG_QREQ_SETTLE:
            if (!x || x->type != REDIS_REPLY_INTEGER) {
                if (x)
                    fg_quota_stat_reply_error(q, "settle script", x);
                /* Unknown whether it applied: the settle script's lease check makes the replay safe. */
                journal_settle(q, r->tenant, &s[i].lease, r->used_tokens);
            }
            break;
        default:
            break;
        }
        if (r->kind != FG_QREQ_RESERVE)
            s[i].has_cmd = false;
        if (x)
            freeReplyObject(x);
    }

    /* Reserves whose day guess was off: once more with the corrected clock. */
    if (n_retry) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (s[i].has_cmd) {
                reserve_cmd(q, &cmds[i], s[i].r);
                ptrs[m++] = &cmds[i];
            }
        fg_qconn_exec(q, ptrs, m, rep);
        k = 0;
        for (size_t i = 0; i < n; i++)
            if (s[i].has_cmd) {
                reserve_reply(q, s[i].r, rep[k], true);
                if (rep[k])
                    freeReplyObject(rep[k]);
                k++;
            }
    }

    for (size_t i = 0; i < n; i++) {
        free(s[i].lease.member);
        fg_quota_finish(q, reqs[i]);
    }
}
