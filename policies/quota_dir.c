/* quota_dir.c: the session location directory (session_dir.h) on the quota
 * thread's Redis connection.
 *
 * The leases this instance holds are kept in dir.held (member "<tenant>
 * <session id>") under dir.mu, because three threads use them: the owner's
 * (claims and releases are queued from it; a new session is held from the
 * call on, its random id being nobody else's), the quota thread (answers and
 * renewals set each lease's epoch and how long writes stay allowed) and the
 * engine's writer thread (fg_quota_dir_may_write before each file write).
 * A lease found lost stays in the table, marked, so a save of that session
 * still queued in the engine is refused too.
 */
#include "policies/quota_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIR_MIN_TTL_MS 300
#define DIR_MAX_TTL_MS 3600000
#define DIR_RENEW_CHUNK 500 /* leases per renew call */

bool fg_qdir_url_valid(const char *u)
{
    size_t n = 0;
    for (; u[n]; n++)
        if ((unsigned char)u[n] <= ' ' || (unsigned char)u[n] > '~' || n >= FG_DIR_URL_MAX)
            return false; /* printable, no spaces: the lease value splits on spaces */
    return true;
}

/* How long after a claim or renewal is sent its file may be written (us). */
static int64_t write_window_us(const fg_qdir *d)
{
    return (int64_t)d->ttl_ms * 750; /* 3/4 of the ttl, in us */
}

fg_err fg_quota_dir_enable(fg_quota_t *q, const fg_dir_options *o, fg_diag *diag)
{
    if (!q || !o || !o->instance_id || !fg_name_valid(o->instance_id, strlen(o->instance_id)))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "session directory: instance id must be 1 to %d of A-Z a-z 0-9 _ -", FG_NAME_MAX);
    if (!o->advertise_url || !fg_qdir_url_valid(o->advertise_url))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "session directory: advertise url must be up to %d printable characters without spaces",
                           FG_DIR_URL_MAX - 1);
    if (o->lease_ttl_ms < DIR_MIN_TTL_MS || o->lease_ttl_ms > DIR_MAX_TTL_MS)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session directory: lease ttl %d ms outside %d..%d",
                           o->lease_ttl_ms, DIR_MIN_TTL_MS, DIR_MAX_TTL_MS);
    if (q->dir.on)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session directory: already enabled");
    fg_qdir *d = &q->dir;
    snprintf(d->instance, sizeof d->instance, "%s", o->instance_id);
    snprintf(d->url, sizeof d->url, "%s", o->advertise_url);
    d->ttl_ms = o->lease_ttl_ms;
    pthread_mutex_init(&d->mu, NULL);
    pthread_mutex_lock(&q->mu); /* published to the quota thread under its lock */
    d->on = true;
    pthread_mutex_unlock(&q->mu);
    return FG_OK;
}

bool fg_quota_dir_enabled(const fg_quota_t *q)
{
    return q && q->dir.on;
}

void fg_qdir_free(struct fg_quota *q)
{
    if (!q->dir.on)
        return;
    fg_qlease_vec_free(&q->dir.held);
    free(q->dir.lost);
    free(q->dir.view);
    pthread_mutex_destroy(&q->dir.mu);
}

static void member_of(char *out, size_t cap, const char *tenant, const char *session)
{
    snprintf(out, cap, "%.*s %.*s", FG_NAME_MAX, tenant, FG_NAME_MAX, session); /* both checked names */
}

/* ---- the owner's calls ---- */

/* A claim request for the quota thread (the table untouched); false on out of memory (cb answered). */
static bool queue_claim(fg_quota_t *q, const char *tenant_id, const char *session_id, fg_dir_mode mode,
                        uint64_t expect_epoch, fg_dir_cb cb, void *user)
{
    fg_qreq *r = calloc(1, sizeof *r);
    if (!r) {
        if (cb) {
            fg_dir_result res = {.state = FG_DIR_UNAVAILABLE};
            cb(user, &res);
        }
        return false;
    }
    r->kind = FG_QREQ_DIR_CLAIM;
    r->dir_cb = cb;
    r->user = user;
    r->dir_mode = mode;
    r->dir_epoch = expect_epoch;
    r->dir.state = FG_DIR_UNAVAILABLE; /* what an answer given before Redis was asked says */
    if (!q->dir.on || !tenant_id || !fg_name_valid(tenant_id, strlen(tenant_id)) || !session_id ||
        !fg_name_valid(session_id, strlen(session_id)))
        r->reject = FG_QUOTA_INVALID;
    else {
        snprintf(r->tenant, sizeof r->tenant, "%s", tenant_id);
        snprintf(r->member, sizeof r->member, "%s", session_id);
    }
    fg_qreq_enqueue(q, r);
    return true;
}

void fg_quota_dir_claim(fg_quota_t *q, const char *tenant_id, const char *session_id, fg_dir_mode mode,
                        uint64_t expect_epoch, fg_dir_cb cb, void *user)
{
    if (mode == FG_DIR_NEW && q->dir.on && tenant_id && session_id && fg_name_valid(tenant_id, strlen(tenant_id)) &&
        fg_name_valid(session_id, strlen(session_id))) {
        /* Held from now: the id is fresh and random, and the first save may come before the answer. */
        char m[FG_QUOTA_MEMBER_MAX + 1];
        member_of(m, sizeof m, tenant_id, session_id);
        pthread_mutex_lock(&q->dir.mu);
        fg_qlease *l = fg_qlease_find(&q->dir.held, m);
        if (!l && fg_qlease_add(&q->dir.held, m, 0, 0, true))
            l = fg_qlease_find(&q->dir.held, m);
        if (l) {
            l->epoch = 0;
            l->lost = false;
            l->valid_until_us = fg_clock_mono_us() + write_window_us(&q->dir);
        }
        pthread_mutex_unlock(&q->dir.mu);
    }
    queue_claim(q, tenant_id, session_id, mode, expect_epoch, cb, user);
}

void fg_quota_dir_release(fg_quota_t *q, const char *tenant_id, const char *session_id, bool forget)
{
    if (!q->dir.on || !tenant_id || !session_id)
        return;
    char m[FG_QUOTA_MEMBER_MAX + 1];
    member_of(m, sizeof m, tenant_id, session_id);
    fg_qlease l;
    bool held = false;
    pthread_mutex_lock(&q->dir.mu);
    fg_qlease *p = fg_qlease_find(&q->dir.held, m);
    if (p && !p->lost) /* a lost one stays: its queued saves must still be refused */
        held = fg_qlease_take(&q->dir.held, m, &l);
    pthread_mutex_unlock(&q->dir.mu);
    if (!held)
        return;
    free(l.member);
    fg_qreq *r = calloc(1, sizeof *r);
    if (!r)
        return; /* the lease expires by itself */
    r->kind = FG_QREQ_DIR_RELEASE;
    snprintf(r->tenant, sizeof r->tenant, "%s", tenant_id);
    snprintf(r->member, sizeof r->member, "%s", session_id);
    r->dir_epoch = l.epoch; /* 0: a new session's claim still unanswered: released by session id alone */
    r->dir_forget = forget;
    fg_qreq_enqueue(q, r);
}

bool fg_quota_dir_may_write(fg_quota_t *q, const char *tenant_id, const char *session_id)
{
    if (!q || !q->dir.on)
        return true;
    char m[FG_QUOTA_MEMBER_MAX + 1];
    member_of(m, sizeof m, tenant_id, session_id);
    pthread_mutex_lock(&q->dir.mu);
    fg_qlease *l = fg_qlease_find(&q->dir.held, m);
    bool ok = !l || (!l->lost && fg_clock_mono_us() < l->valid_until_us);
    if (!ok)
        q->dir.stats.fenced++;
    pthread_mutex_unlock(&q->dir.mu);
    return ok;
}

size_t fg_quota_dir_take_lost(fg_quota_t *q, fg_dir_lost *out, size_t max)
{
    if (!q || !q->dir.on)
        return 0;
    pthread_mutex_lock(&q->dir.mu);
    size_t n = q->dir.n_lost < max ? q->dir.n_lost : max;
    if (n) {
        memcpy(out, q->dir.lost, n * sizeof *out);
        memmove(q->dir.lost, q->dir.lost + n, (q->dir.n_lost - n) * sizeof *out);
        q->dir.n_lost -= n;
    }
    pthread_mutex_unlock(&q->dir.mu);
    return n;
}

void fg_quota_dir_get_stats(fg_quota_t *q, fg_dir_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!q || !q->dir.on)
        return;
    pthread_mutex_lock(&q->dir.mu);
    *st = q->dir.stats;
    st->held = 0;
    for (size_t i = 0; i < q->dir.held.n; i++)
        st->held += !q->dir.held.v[i].lost;
    pthread_mutex_unlock(&q->dir.mu);
}

/* ---- the quota thread ---- */

static void lease_key(char *buf, const char *tenant, const char *session)
{
    char suffix[FG_NAME_MAX + 8];
    snprintf(suffix, sizeof suffix, "loc:%.*s", FG_NAME_MAX, session);
    fg_qkey(buf, tenant, suffix);
}

/* Under dir.mu: marks member lost (once) and queues it for the owner. */
static void mark_lost(fg_qdir *d, fg_qlease *l, const char *tenant, const char *session)
{
    if (l->lost)
        return;
    l->lost = true;
    d->stats.lost++;
    if (d->n_lost == d->cap_lost) {
        size_t cap = d->cap_lost ? 2 * d->cap_lost : 16;
        fg_dir_lost *v = realloc(d->lost, cap * sizeof *v);
        if (!v)
            return; /* the owner finds out at its next write (refused) */
        d->lost = v;
        d->cap_lost = cap;
    }
    fg_dir_lost *e = &d->lost[d->n_lost++];
    snprintf(e->tenant, sizeof e->tenant, "%s", tenant);
    snprintf(e->session, sizeof e->session, "%s", session);
}

static void build(struct fg_quota *q, fg_qreq *r, fg_qcmd *c)
{
    char key[FG_QUOTA_REDIS_KEY_MAX];
    fg_qcmd_reset(c);
    lease_key(key, r->tenant, r->member);
    if (r->kind == FG_QREQ_DIR_CLAIM) {
        static const char *const modes[] = {[FG_DIR_NEW] = "new", [FG_DIR_LOOK] = "look", [FG_DIR_TAKE] = "take"};
        fg_qcmd_script(c, FG_QSCRIPT_DIR_CLAIM, 2);
        fg_qcmd_str(c, key);
        fg_qcmd_key(c, r->tenant, "loc_epochs");
        fg_qcmd_str(c, r->member);
        fg_qcmd_str(c, q->dir.instance);
        fg_qcmd_str(c, q->dir.url);
        fg_qcmd_i64(c, q->dir.ttl_ms);
        fg_qcmd_str(c, modes[r->dir_mode]);
        fg_qcmd_i64(c, (int64_t)r->dir_epoch);
    } else {
        fg_qcmd_script(c, FG_QSCRIPT_DIR_RELEASE, 2);
        fg_qcmd_str(c, key);
        fg_qcmd_key(c, r->tenant, "loc_epochs");
        fg_qcmd_str(c, r->member);
        fg_qcmd_i64(c, (int64_t)r->dir_epoch);
        fg_qcmd_str(c, q->dir.instance);
        fg_qcmd_str(c, r->dir_forget ? "1" : "0");
    }
}

static void str_el(const redisReply *e, char *out, size_t cap)
{
    out[0] = 0;
    if (e && (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS))
        snprintf(out, cap, "%.*s", (int)e->len, e->str);
}

/* A claim's reply into r->dir, and this instance's table. */
static void claim_done(struct fg_quota *q, fg_qreq *r, const redisReply *rep, int64_t sent_us)
{
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 4 || rep->element[0]->type != REDIS_REPLY_INTEGER ||
        rep->element[1]->type != REDIS_REPLY_INTEGER) {
        if (rep)
            fg_quota_stat_reply_error(q, "dir_claim script", rep);
        r->dir.state = FG_DIR_UNAVAILABLE;
    } else {
        long long st = rep->element[0]->integer;
        r->dir.state = st >= FG_DIR_FREE && st <= FG_DIR_LOST_RACE ? (fg_dir_state)st : FG_DIR_UNAVAILABLE;
        r->dir.epoch = rep->element[1]->integer > 0 ? (uint64_t)rep->element[1]->integer : 0;
        str_el(rep->element[2], r->dir.owner, sizeof r->dir.owner);
        str_el(rep->element[3], r->dir.owner_url, sizeof r->dir.owner_url);
    }
    char m[FG_QUOTA_MEMBER_MAX + 1];
    member_of(m, sizeof m, r->tenant, r->member);
    pthread_mutex_lock(&q->dir.mu);
    q->dir.stats.claims++;
    fg_qlease *l = fg_qlease_find(&q->dir.held, m);
    if (r->dir.state == FG_DIR_HELD) {
        /* A new session released before its answer came has no entry: it is not held here. */
        if (!l && r->dir_mode != FG_DIR_NEW && fg_qlease_add(&q->dir.held, m, 0, 0, true))
            l = fg_qlease_find(&q->dir.held, m);
        if (l) {
            l->epoch = r->dir.epoch;
            l->lost = false;
            l->valid_until_us = sent_us + write_window_us(&q->dir);
        }
    } else if (l && r->dir_mode == FG_DIR_NEW && r->dir.state != FG_DIR_UNAVAILABLE) {
        mark_lost(&q->dir, l, r->tenant, r->member); /* a fresh id held elsewhere: never ours */
    }
    pthread_mutex_unlock(&q->dir.mu);
}

void fg_qdir_batch(struct fg_quota *q, fg_qreq **reqs, size_t n)
{
    fg_qbatch *b = q->batch;
    for (size_t i = 0; i < n; i++) {
        build(q, reqs[i], &b->cmd[i]);
        b->ptr[i] = &b->cmd[i];
        b->rep[i] = NULL;
    }
    int64_t sent = fg_clock_mono_us();
    if (fg_qconn_up(q))
        fg_qconn_exec(q, b->ptr, n, b->rep);
    for (size_t i = 0; i < n; i++) {
        fg_qreq *r = reqs[i];
        if (r->kind == FG_QREQ_DIR_CLAIM) {
            claim_done(q, r, b->rep[i], sent);
        } else {
            if (b->rep[i] && b->rep[i]->type == REDIS_REPLY_ERROR)
                fg_quota_stat_reply_error(q, "dir_release script", b->rep[i]);
            pthread_mutex_lock(&q->dir.mu);
            q->dir.stats.releases++;
            pthread_mutex_unlock(&q->dir.mu);
        }
        if (b->rep[i])
            freeReplyObject(b->rep[i]);
        fg_quota_finish(q, r);
    }
}

/* One held lease as the renewal sends it. */
typedef struct renew_item {
    char tenant[FG_NAME_MAX + 1];
    char session[FG_NAME_MAX + 1];
    uint64_t epoch;
} renew_item;

static int item_cmp(const void *a, const void *b)
{
    return strcmp(((const renew_item *)a)->tenant, ((const renew_item *)b)->tenant);
}

void fg_qdir_renew_due(struct fg_quota *q, int64_t now_us, bool force)
{
    fg_qdir *d = &q->dir;
    if (!d->on || (!force && now_us < d->next_renew_us) || !fg_qconn_up(q))
        return;
    d->next_renew_us = now_us + (int64_t)d->ttl_ms * 1000 / 3;
    /* A snapshot of the held leases, grouped by tenant (one script call per tenant and chunk). */
    pthread_mutex_lock(&d->mu);
    size_t n = 0, n_retry = 0;
    renew_item *items = d->held.n ? calloc(d->held.n, sizeof *items) : NULL;
    renew_item *retry = d->held.n ? calloc(d->held.n, sizeof *retry) : NULL;
    for (size_t i = 0; items && i < d->held.n; i++) {
        const fg_qlease *l = &d->held.v[i];
        const char *sp = strchr(l->member, ' ');
        if (l->lost || !sp)
            continue;
        if (!l->epoch) {
            /* A new session whose claim got no answer (Redis was down): asked again (after
             * the window from its creation its writes are refused until the answer comes). */
            if (now_us - (l->valid_until_us - write_window_us(d)) > (int64_t)d->ttl_ms * 1000 / 3 && retry &&
                n_retry < d->held.n) {
                renew_item *it = &retry[n_retry++];
                snprintf(it->tenant, sizeof it->tenant, "%.*s", (int)(sp - l->member), l->member);
                snprintf(it->session, sizeof it->session, "%s", sp + 1);
            }
            continue;
        }
        snprintf(items[n].tenant, sizeof items[n].tenant, "%.*s", (int)(sp - l->member), l->member);
        snprintf(items[n].session, sizeof items[n].session, "%s", sp + 1);
        items[n++].epoch = l->epoch;
    }
    pthread_mutex_unlock(&d->mu);
    for (size_t i = 0; i < n_retry; i++)
        queue_claim(q, retry[i].tenant, retry[i].session, FG_DIR_NEW, 0, NULL, NULL);
    free(retry);
    if (!n) {
        free(items);
        return;
    }
    qsort(items, n, sizeof *items, item_cmp);
    size_t n_cmds = 0;
    for (size_t i = 0; i < n; n_cmds++) {
        size_t j = i;
        while (j < n && j - i < DIR_RENEW_CHUNK && !strcmp(items[j].tenant, items[i].tenant))
            j++;
        i = j;
    }
    fg_qcmd *cmds = calloc(n_cmds, sizeof *cmds);
    fg_qcmd **ptrs = calloc(n_cmds, sizeof *ptrs);
    redisReply **rep = calloc(n_cmds, sizeof *rep);
    size_t *first = calloc(n_cmds + 1, sizeof *first);
    if (!cmds || !ptrs || !rep || !first) {
        fg_quota_stat_error(q, "out of memory renewing directory leases (retried next period)");
        goto out;
    }
    char key[FG_QUOTA_REDIS_KEY_MAX];
    size_t c = 0;
    for (size_t i = 0; i < n; c++) {
        size_t j = i;
        while (j < n && j - i < DIR_RENEW_CHUNK && !strcmp(items[j].tenant, items[i].tenant))
            j++;
        fg_qcmd *cmd = &cmds[c];
        ptrs[c] = cmd;
        first[c] = i;
        fg_qcmd_init(cmd);
        fg_qcmd_script(cmd, FG_QSCRIPT_DIR_RENEW, (int)(j - i + 1));
        fg_qcmd_key(cmd, items[i].tenant, "loc_epochs");
        for (size_t k = i; k < j; k++) {
            lease_key(key, items[k].tenant, items[k].session);
            fg_qcmd_str(cmd, key);
        }
        fg_qcmd_str(cmd, d->instance);
        fg_qcmd_i64(cmd, d->ttl_ms);
        for (size_t k = i; k < j; k++) {
            fg_qcmd_str(cmd, items[k].session);
            fg_qcmd_i64(cmd, (int64_t)items[k].epoch);
            fg_qcmd_str(cmd, d->url);
        }
        i = j;
    }
    first[c] = n;
    int64_t sent = fg_clock_mono_us();
    for (size_t at = 0; at < c && fg_qconn_up(q); at += FG_QUOTA_BATCH_MAX) {
        size_t m = c - at < FG_QUOTA_BATCH_MAX ? c - at : FG_QUOTA_BATCH_MAX;
        fg_qconn_exec(q, ptrs + at, m, rep + at);
    }
    pthread_mutex_lock(&d->mu);
    d->stats.renewals += c;
    for (size_t i = 0; i < c; i++) {
        const redisReply *rp = rep[i];
        bool ok = rp && rp->type == REDIS_REPLY_ARRAY && rp->elements == first[i + 1] - first[i];
        if (rp && !ok)
            fg_quota_stat_reply_error(q, "dir_renew script", rp);
        for (size_t k = first[i]; ok && k < first[i + 1]; k++) {
            char m[FG_QUOTA_MEMBER_MAX + 1];
            member_of(m, sizeof m, items[k].tenant, items[k].session);
            fg_qlease *l = fg_qlease_find(&d->held, m);
            if (!l || l->epoch != items[k].epoch) /* released or claimed again meanwhile */
                continue;
            const redisReply *e = rp->element[k - first[i]];
            if (e->type == REDIS_REPLY_INTEGER && e->integer == 1)
                l->valid_until_us = sent + write_window_us(d);
            else
                mark_lost(d, l, items[k].tenant, items[k].session);
        }
    }
    pthread_mutex_unlock(&d->mu);
out:
    for (size_t i = 0; rep && cmds && i < n_cmds; i++) {
        if (rep[i])
            freeReplyObject(rep[i]);
        if (ptrs && ptrs[i])
            fg_qcmd_free(&cmds[i]);
    }
    free(cmds);
    free(ptrs);
    free(rep);
    free(first);
    free(items);
}
