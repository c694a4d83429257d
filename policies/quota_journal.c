/* quota_journal.c: usage recorded while Redis could not take it, and its replay.
 *
 * Two kinds of entries:
 *   'S'  the settlement of a reservation that Redis holds (reserved before the
 *        outage, finished during it, or its settle timed out). Replayed with
 *        the settle script, whose lease check makes it count once even if
 *        the lost settle had in fact reached Redis.
 *   'U'  usage admitted by the local backstop (fail-open). Replayed with the
 *        replay script, per tenant and day; each entry has a unique id that
 *        the script records, so a replay cut short and run again counts it once.
 *
 * Entries live in memory and, when a journal path is set, in an append-only
 * file (one line per entry, written and fsynced per entry) that a restarted
 * gateway replays. Line format:
 *   <kind> <tenant> <member or id> <day> <reserved> <used> <ts_ms>\n
 * A torn last line (a crash mid-write) is skipped when the file is read.
 */
#include "policies/quota_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REPLAY_CHUNK 100 /* 'U' entries per replay call */

static bool push(fg_qjournal *j, const fg_qjentry *e)
{
    if (j->n == j->cap) {
        size_t cap = j->cap ? 2 * j->cap : 64;
        fg_qjentry *v = realloc(j->v, cap * sizeof *v);
        if (!v)
            return false;
        j->v = v;
        j->cap = cap;
    }
    j->v[j->n++] = *e;
    return true;
}

/* Parses one line (without its '\n'); false if malformed. */
static bool parse_line(const char *line, fg_qjentry *e)
{
    char kind[2], tenant[FG_NAME_MAX + 2], member[FG_QUOTA_MEMBER_MAX + 2];
    long long day, reserved, used, ts;
    char extra;
    memset(e, 0, sizeof *e);
    if (sscanf(line, "%1s %65s %218s %lld %lld %lld %lld %c", kind, tenant, member, &day, &reserved,
               &used, &ts, &extra) != 7)
        return false;
    if ((kind[0] != 'S' && kind[0] != 'U') || !fg_name_valid(tenant, strlen(tenant)) ||
        strlen(member) > FG_QUOTA_MEMBER_MAX || used < 0 || reserved < 0 || day < 0)
        return false;
    e->kind = kind[0];
    snprintf(e->tenant, sizeof e->tenant, "%.64s", tenant);
    snprintf(e->member, sizeof e->member, "%.*s", FG_QUOTA_MEMBER_MAX, member);
    e->day = day;
    e->reserved = reserved;
    e->used = used;
    e->ts_ms = ts;
    return true;
}

fg_err fg_qjournal_open(fg_qjournal *j, const char *path, fg_diag *d)
{
    memset(j, 0, sizeof *j);
    j->fd = -1;
    if (!path || !*path)
        return FG_OK;
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        return fg_diag_set(d, FG_ERR_IO, "quota journal %s: %s", path, strerror(errno));
    /* Read what a previous run left for replay. */
    FILE *f = fdopen(dup(fd), "r");
    if (!f) {
        close(fd);
        return fg_diag_set(d, FG_ERR_IO, "quota journal %s: %s", path, strerror(errno));
    }
    char line[512];
    bool ends_with_newline = true;
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        ends_with_newline = n > 0 && line[n - 1] == '\n';
        if (!ends_with_newline)
            continue; /* torn or overlong: skipped */
        line[n - 1] = '\0';
        fg_qjentry e;
        if (parse_line(line, &e) && !push(j, &e)) {
            fclose(f);
            close(fd);
            free(j->v);
            return fg_diag_set(d, FG_ERR_NOMEM, "quota journal %s: out of memory", path);
        }
    }
    fclose(f);
    if (!ends_with_newline && write(fd, "\n", 1) != 1) {
        /* The next entry would join the torn line; lose nothing else over it. */
    }
    j->fd = fd;
    return FG_OK;
}

void fg_qjournal_close(fg_qjournal *j)
{
    if (j->fd >= 0)
        close(j->fd);
    free(j->v);
    memset(j, 0, sizeof *j);
    j->fd = -1;
}

static void set_stat(struct fg_quota *q)
{
    pthread_mutex_lock(&q->mu);
    q->stats.journal_entries = q->journal.n;
    pthread_mutex_unlock(&q->mu);
}

bool fg_qjournal_append(struct fg_quota *q, const fg_qjentry *e)
{
    fg_qjournal *j = &q->journal;
    if (!push(j, e)) {
        fg_quota_stat_error(q, "quota journal: out of memory, usage lost");
        return false;
    }
    if (j->fd >= 0) {
        char line[512];
        int n = snprintf(line, sizeof line, "%c %s %s %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n",
                         e->kind, e->tenant, e->member, e->day, e->reserved, e->used, e->ts_ms);
        const char *p = line;
        size_t left = (size_t)n;
        while (left > 0) {
            ssize_t w = write(j->fd, p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                char msg[128];
                snprintf(msg, sizeof msg, "quota journal write: %s (kept in memory)", strerror(errno));
                fg_quota_stat_error(q, msg);
                break;
            }
            p += w;
            left -= (size_t)w;
        }
        if (left == 0 && fdatasync(j->fd) != 0)
            fg_quota_stat_error(q, "quota journal fdatasync failed (kept in memory)");
    }
    set_stat(q);
    return true;
}

static int by_tenant_day(const void *a, const void *b)
{
    const fg_qjentry *x = *(const fg_qjentry *const *)a, *y = *(const fg_qjentry *const *)b;
    int c = strcmp(x->tenant, y->tenant);
    if (c)
        return c;
    return (x->day > y->day) - (x->day < y->day);
}

static void settle_cmd(fg_qcmd *c, const fg_qjentry *e)
{
    fg_qcmd_script(c, FG_QSCRIPT_SETTLE, 5);
    fg_qcmd_key(c, e->tenant, "config");
    fg_qcmd_key(c, e->tenant, "responses");
    fg_qcmd_key(c, e->tenant, "tpm");
    fg_qcmd_key_daily(c, e->tenant, e->day);
    fg_qcmd_key(c, e->tenant, "usage:total");
    fg_qcmd_str(c, e->member);
    fg_qcmd_i64(c, e->reserved);
    fg_qcmd_i64(c, e->used);
}

static void replay_cmd_start(fg_qcmd *c, const fg_qjentry *e)
{
    fg_qcmd_script(c, FG_QSCRIPT_REPLAY, 5);
    fg_qcmd_key(c, e->tenant, "config");
    fg_qcmd_key(c, e->tenant, "tpm");
    fg_qcmd_key_daily(c, e->tenant, e->day);
    fg_qcmd_key(c, e->tenant, "usage:total");
    fg_qcmd_key(c, e->tenant, "replayed");
}

bool fg_qjournal_replay(struct fg_quota *q)
{
    fg_qjournal *j = &q->journal;
    if (j->n == 0 || !fg_qconn_up(q))
        return true;

    /* Commands: one per 'S' entry, one per (tenant, day, chunk) of 'U' entries. */
    fg_qjentry **sorted = malloc(j->n * sizeof *sorted);
    fg_qcmd *cmds = calloc(j->n, sizeof *cmds);
    fg_qcmd **ptrs = malloc(j->n * sizeof *ptrs);
    redisReply **rep = malloc(j->n * sizeof *rep);
    if (!sorted || !cmds || !ptrs || !rep) {
        free(sorted);
        free(cmds);
        free(ptrs);
        free(rep);
        fg_quota_stat_error(q, "quota journal replay: out of memory (retried later)");
        return false;
    }
    size_t n_cmds = 0, n_u = 0;
    for (size_t i = 0; i < j->n; i++) {
        if (j->v[i].kind == 'S') {
            fg_qcmd_init(&cmds[n_cmds]);
            settle_cmd(&cmds[n_cmds], &j->v[i]);
            n_cmds++;
        } else {
            sorted[n_u++] = &j->v[i];
        }
    }
    qsort(sorted, n_u, sizeof *sorted, by_tenant_day);
    for (size_t i = 0; i < n_u;) {
        fg_qcmd *c = &cmds[n_cmds++];
        fg_qcmd_init(c);
        replay_cmd_start(c, sorted[i]);
        size_t k = 0;
        const fg_qjentry *first = sorted[i];
        while (i < n_u && k < REPLAY_CHUNK && strcmp(sorted[i]->tenant, first->tenant) == 0 &&
               sorted[i]->day == first->day) {
            fg_qcmd_str(c, sorted[i]->member);
            fg_qcmd_i64(c, sorted[i]->used);
            fg_qcmd_i64(c, sorted[i]->ts_ms);
            i++;
            k++;
        }
    }
    for (size_t i = 0; i < n_cmds; i++)
        ptrs[i] = &cmds[i];

    bool ok = true;
    for (size_t at = 0; ok && at < n_cmds; at += FG_QUOTA_BATCH_MAX) {
        size_t n = n_cmds - at < FG_QUOTA_BATCH_MAX ? n_cmds - at : FG_QUOTA_BATCH_MAX;
        size_t got = fg_qconn_exec(q, ptrs + at, n, rep + at);
        ok = got == n;
        for (size_t i = at; i < at + n; i++) {
            if (rep[i] && rep[i]->type == REDIS_REPLY_ERROR) {
                /* A script error will not go away by retrying: count it and move on. */
                char msg[128];
                snprintf(msg, sizeof msg, "quota journal replay: %s", rep[i]->str);
                fg_quota_stat_error(q, msg);
            }
            if (rep[i])
                freeReplyObject(rep[i]);
        }
    }
    for (size_t i = 0; i < n_cmds; i++)
        fg_qcmd_free(&cmds[i]);
    free(sorted);
    free(cmds);
    free(ptrs);
    free(rep);
    if (!ok)
        return false; /* everything kept: the scripts make a second replay harmless */

    j->n = 0;
    if (j->fd >= 0 && ftruncate(j->fd, 0) != 0)
        fg_quota_stat_error(q, "quota journal: truncate failed after replay");
    set_stat(q);
    return true;
}
