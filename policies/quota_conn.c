/* quota_conn.c: the quota thread's Redis connection.
 *
 * The link (redis_link.h: a single server, a Sentinel-discovered master or a
 * Redis Cluster) on the quota thread only: the connect timeout and the
 * command timeout are both timeout_ms, so no call waits longer than that on
 * a dead or stopped Redis. Any I/O error, timeout or "not now" reply (a
 * failover in progress) drops the link (a timed-out hiredis context cannot
 * be reused); reconnection, which finds the master or the slot map again,
 * waits 100 ms, doubling to 2 s, with jitter. Each command carries the slot
 * of its first key, so a cluster link routes it to that key's master.
 *
 * Commands go out in pipelines (fg_qconn_exec): every command of a batch is
 * appended, then every reply read, so a batch costs one round trip. Scripts
 * are loaded with SCRIPT LOAD when connecting and called with EVALSHA; a
 * NOSCRIPT reply (SCRIPT FLUSH, a failover to a replica without the script)
 * is answered by sending that command again as EVAL of the source.
 */
#include "policies/quota_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- command builder ---- */

void fg_qcmd_init(fg_qcmd *c)
{
    memset(c, 0, sizeof *c);
    c->script = -1;
}

void fg_qcmd_free(fg_qcmd *c)
{
    free(c->buf);
    free(c->off);
    fg_qcmd_init(c);
}

void fg_qcmd_reset(fg_qcmd *c)
{
    c->len = 0;
    c->argc = 0;
    c->script = -1;
    c->oom = false;
}

void fg_qcmd_arg(fg_qcmd *c, const char *s, size_t n)
{
    if (c->oom)
        return;
    if (c->argc + 2 > c->argv_cap) {
        int cap = c->argv_cap ? 2 * c->argv_cap : 16;
        size_t *off = realloc(c->off, (size_t)cap * sizeof *off);
        if (!off) {
            c->oom = true;
            return;
        }
        c->off = off;
        c->argv_cap = cap;
    }
    if (c->len + n > c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        while (cap < c->len + n)
            cap *= 2;
        char *buf = realloc(c->buf, cap);
        if (!buf) {
            c->oom = true;
            return;
        }
        c->buf = buf;
        c->cap = cap;
    }
    if (n)
        memcpy(c->buf + c->len, s, n);
    c->off[c->argc] = c->len;
    c->len += n;
    c->argc++;
    c->off[c->argc] = c->len;
}

void fg_qcmd_str(fg_qcmd *c, const char *s)
{
    fg_qcmd_arg(c, s, strlen(s));
}

void fg_qcmd_i64(fg_qcmd *c, int64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%" PRId64, v);
    fg_qcmd_arg(c, tmp, (size_t)n);
}

void fg_qcmd_script(fg_qcmd *c, fg_qscript_id id, int nkeys)
{
    fg_qcmd_reset(c);
    fg_qcmd_str(c, "EVALSHA");
    fg_qcmd_str(c, ""); /* the SHA, filled in when sent */
    fg_qcmd_i64(c, nkeys);
    c->script = (int)id;
}

/* ---- clock ---- */

int64_t fg_quota_redis_now_us(const struct fg_quota *q)
{
    return fg_clock_real_us() + q->conn.clock_offset_us;
}

void fg_quota_note_redis_ms(struct fg_quota *q, int64_t redis_ms)
{
    if (redis_ms > 0)
        q->conn.clock_offset_us = redis_ms * 1000 - fg_clock_real_us();
}

/* ---- connection ---- */

/* Next attempt a backoff from now (the failed attempt itself may have taken a timeout). */
static void schedule_retry(struct fg_quota *q)
{
    fg_qconn *c = &q->conn;
    int64_t now_us = fg_clock_mono_us();
    /* Jitter of +-20 % from the clock's low bits, so instances spread out. */
    int64_t wait_us = (int64_t)c->backoff_ms * 1000;
    wait_us += (wait_us * ((now_us / 7) % 41 - 20)) / 100;
    c->next_attempt_us = now_us + wait_us;
    c->backoff_ms = c->backoff_ms * 2 > FG_QUOTA_BACKOFF_MAX_MS ? FG_QUOTA_BACKOFF_MAX_MS : c->backoff_ms * 2;
}

void fg_qconn_close(struct fg_quota *q)
{
    fg_rlink_close(q->conn.link);
    pthread_mutex_lock(&q->mu);
    q->stats.connected = false;
    pthread_mutex_unlock(&q->mu);
}

void fg_qconn_drop(struct fg_quota *q, const char *why)
{
    char msg[128];
    snprintf(msg, sizeof msg, "redis connection lost: %s", why && *why ? why : "unknown error");
    fg_quota_stat_error(q, msg);
    fg_qconn_close(q);
    fg_qconn *c = &q->conn;
    int64_t now_us = fg_clock_mono_us();
    if (now_us - c->connected_us < (int64_t)FG_QUOTA_BACKOFF_MAX_MS * 1000) {
        /* Lost soon after connecting (a cluster still down, a master about to be
         * replaced): keep backing off rather than reconnecting in a loop. */
        schedule_retry(q);
        return;
    }
    /* The first attempt right away (a restarted Redis is back at once), then backoff. */
    c->backoff_ms = FG_QUOTA_BACKOFF_MIN_MS;
    c->next_attempt_us = now_us;
}

bool fg_qconn_connect_if_due(struct fg_quota *q, int64_t now_us)
{
    fg_qconn *c = &q->conn;
    if (fg_rlink_up(c->link) || now_us < c->next_attempt_us)
        return false;
    char why[200];
    if (!fg_rlink_connect(c->link, why, sizeof why)) {
        char msg[128];
        snprintf(msg, sizeof msg, "redis connect: %.110s", why);
        fg_quota_stat_error(q, msg);
        schedule_retry(q);
        return false;
    }

    /* Scripts and clock in one round trip. */
    fg_qcmd cmds[FG_QSCRIPT__COUNT + 1];
    fg_qcmd *ptrs[FG_QSCRIPT__COUNT + 1];
    redisReply *rep[FG_QSCRIPT__COUNT + 1];
    for (int i = 0; i <= FG_QSCRIPT__COUNT; i++) {
        fg_qcmd_init(&cmds[i]);
        ptrs[i] = &cmds[i];
        if (i < FG_QSCRIPT__COUNT) {
            fg_qcmd_str(&cmds[i], "SCRIPT");
            fg_qcmd_str(&cmds[i], "LOAD");
            fg_qcmd_str(&cmds[i], fg_qscript_source((fg_qscript_id)i));
        } else {
            fg_qcmd_str(&cmds[i], "TIME");
        }
    }
    int backoff = c->backoff_ms; /* a drop inside exec must not reset the growing backoff */
    size_t got = fg_qconn_exec(q, ptrs, FG_QSCRIPT__COUNT + 1, rep);
    c->backoff_ms = backoff;
    bool ok = got == FG_QSCRIPT__COUNT + 1;
    for (int i = 0; ok && i < FG_QSCRIPT__COUNT; i++) {
        if (rep[i]->type == REDIS_REPLY_STRING && rep[i]->len == 40) {
            memcpy(c->sha[i], rep[i]->str, 40);
            c->sha[i][40] = '\0';
        } else {
            char msg[128];
            snprintf(msg, sizeof msg, "redis SCRIPT LOAD %s: %s", fg_qscript_name((fg_qscript_id)i),
                     rep[i]->type == REDIS_REPLY_ERROR ? rep[i]->str : "unexpected reply");
            fg_quota_stat_error(q, msg);
            ok = false;
        }
    }
    if (ok && rep[FG_QSCRIPT__COUNT]->type == REDIS_REPLY_ARRAY && rep[FG_QSCRIPT__COUNT]->elements == 2) {
        redisReply **e = rep[FG_QSCRIPT__COUNT]->element;
        int64_t s = strtoll(e[0]->str ? e[0]->str : "0", NULL, 10);
        int64_t us = strtoll(e[1]->str ? e[1]->str : "0", NULL, 10);
        c->clock_offset_us = s * 1000000 + us - fg_clock_real_us();
    }
    for (int i = 0; i <= FG_QSCRIPT__COUNT; i++) {
        if (rep[i])
            freeReplyObject(rep[i]);
        fg_qcmd_free(&cmds[i]);
    }
    if (!ok) {
        /* A Redis that cannot load scripts (e.g. still loading its data) is not usable yet. */
        fg_qconn_close(q);
        schedule_retry(q);
        return false;
    }
    c->connected_us = fg_clock_mono_us(); /* the backoff resets once the link has lasted (fg_qconn_drop) */
    pthread_mutex_lock(&q->mu);
    if (c->ever_connected)
        q->stats.reconnects++;
    q->stats.connected = true;
    pthread_mutex_unlock(&q->mu);
    c->ever_connected = true;
    return true;
}

/* ---- pipelines ---- */

static bool ensure_argv(fg_qconn *c, int argc)
{
    if (argc <= c->argv_cap)
        return true;
    int cap = c->argv_cap ? c->argv_cap : 32;
    while (cap < argc)
        cap *= 2;
    const char **argv = realloc(c->argv, (size_t)cap * sizeof *argv);
    if (!argv)
        return false;
    c->argv = argv;
    size_t *lens = realloc(c->argvlen, (size_t)cap * sizeof *lens);
    if (!lens)
        return false;
    c->argvlen = lens;
    c->argv_cap = cap;
    return true;
}

static bool arg_is(const fg_qcmd *cmd, int i, const char *s)
{
    size_t n = cmd->off[i + 1] - cmd->off[i];
    return n == strlen(s) && strncasecmp(cmd->buf + cmd->off[i], s, n) == 0;
}

/* The cluster slot of the command's first key, -1 for a command without one.
 * Every command we send names its key first (scripts: the first of KEYS);
 * SCRIPT and TIME have none. */
static int cmd_slot(const fg_qcmd *cmd)
{
    int key = 1;
    if (cmd->script >= 0)
        key = cmd->argc > 3 && !arg_is(cmd, 2, "0") ? 3 : -1;
    else if (arg_is(cmd, 0, "SCRIPT") || arg_is(cmd, 0, "TIME") || arg_is(cmd, 0, "PING"))
        key = -1;
    if (key < 0 || key >= cmd->argc)
        return -1;
    return fg_rlink_key_slot(cmd->buf + cmd->off[key], cmd->off[key + 1] - cmd->off[key]);
}

/* Formats one command as RESP into *out; eval: a script as EVAL of its source. */
static bool format_cmd(struct fg_quota *q, const fg_qcmd *cmd, bool eval, fg_rlink_cmd *out)
{
    fg_qconn *c = &q->conn;
    if (cmd->oom || cmd->argc == 0 || !ensure_argv(c, cmd->argc))
        return false;
    for (int i = 0; i < cmd->argc; i++) {
        c->argv[i] = cmd->buf + cmd->off[i];
        c->argvlen[i] = cmd->off[i + 1] - cmd->off[i];
    }
    if (cmd->script >= 0) {
        fg_qscript_id id = (fg_qscript_id)cmd->script;
        c->argv[0] = eval ? "EVAL" : "EVALSHA";
        c->argvlen[0] = strlen(c->argv[0]);
        c->argv[1] = eval ? fg_qscript_source(id) : c->sha[id];
        c->argvlen[1] = strlen(c->argv[1]);
    }
    char *resp = NULL;
    int len = redisFormatCommandArgv(&resp, cmd->argc, c->argv, c->argvlen);
    if (len < 0 || !resp)
        return false;
    out->resp = resp;
    out->len = (size_t)len;
    out->slot = cmd_slot(cmd);
    return true;
}

static bool is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Sends the commands whose index is in idx (all when idx is NULL) and reads
 * their replies. Returns false on a connection failure (connection dropped). */
static bool round_trip(struct fg_quota *q, fg_qcmd *const *cmds, const size_t *idx, size_t n,
                       redisReply **replies, bool eval)
{
    fg_qconn *c = &q->conn;
    if (n > c->rcmds_cap) {
        fg_rlink_cmd *v = realloc(c->rcmds, n * sizeof *v);
        if (!v) {
            fg_qconn_drop(q, "out of memory building a command");
            return false;
        }
        c->rcmds = v;
        c->rcmds_cap = n;
    }
    size_t built = 0;
    bool ok = true;
    for (; built < n && ok; built++)
        ok = format_cmd(q, cmds[idx ? idx[built] : built], eval, &c->rcmds[built]);
    if (!ok) {
        built--;
        /* Out of memory building the request: treat like a lost connection,
         * whose recovery path (decide locally, reconnect) handles it. */
        for (size_t k = 0; k < built; k++)
            redisFreeCommand((char *)c->rcmds[k].resp);
        fg_qconn_drop(q, "out of memory building a command");
        return false;
    }
    redisReply **got = replies;
    redisReply *scratch_one[1];
    redisReply **scratch = NULL;
    if (idx) {
        scratch = n == 1 ? scratch_one : malloc(n * sizeof *scratch);
        if (!scratch)
            ok = false;
        got = scratch;
    }
    char why[200] = "out of memory";
    int64_t t0 = fg_clock_mono_us();
    if (ok)
        ok = fg_rlink_exec(c->link, c->rcmds, n, got, why, sizeof why);
    fg_quota_stat_calls(q, n, (double)(fg_clock_mono_us() - t0) / 1000.0);
    fg_rlink_stats ls;
    fg_rlink_get_stats(c->link, &ls);
    pthread_mutex_lock(&q->mu);
    q->stats.redirects = ls.moved + ls.ask;
    q->stats.master_discoveries = ls.discoveries;
    pthread_mutex_unlock(&q->mu);
    for (size_t k = 0; k < n; k++)
        redisFreeCommand((char *)c->rcmds[k].resp);
    if (idx && scratch) {
        for (size_t k = 0; k < n; k++)
            replies[idx[k]] = scratch[k];
        if (scratch != scratch_one)
            free(scratch);
    }
    if (!ok)
        fg_qconn_drop(q, why);
    return ok;
}

size_t fg_qconn_exec(struct fg_quota *q, fg_qcmd *const *cmds, size_t n, redisReply **replies)
{
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    if (!fg_qconn_up(q) || n == 0)
        return 0;
    bool ok = round_trip(q, cmds, NULL, n, replies, false);

    /* NOSCRIPT (a master that never saw SCRIPT LOAD: another cluster node, a
     * promoted replica): send those again as EVAL (which also caches the script). */
    size_t n_retry = 0;
    for (size_t i = 0; ok && i < n; i++)
        if (is_noscript(replies[i]))
            n_retry++;
    if (n_retry) {
        size_t *idx = malloc(n_retry * sizeof *idx);
        if (!idx) {
            fg_quota_stat_error(q, "out of memory retrying NOSCRIPT");
        } else {
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                if (is_noscript(replies[i])) {
                    freeReplyObject(replies[i]);
                    replies[i] = NULL;
                    idx[k++] = i;
                }
            round_trip(q, cmds, idx, n_retry, replies, true);
            free(idx);
        }
    }
    size_t got = 0;
    for (size_t i = 0; i < n; i++)
        got += replies[i] != NULL;
    return got;
}

redisReply *fg_qconn_exec1(struct fg_quota *q, fg_qcmd *cmd)
{
    redisReply *r = NULL;
    fg_qconn_exec(q, &cmd, 1, &r);
    return r;
}
