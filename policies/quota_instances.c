/* quota_instances.c: the cluster view (session_dir.h): this instance's load
 * published once a second, every live instance's read back in the same
 * script call.
 *
 * The owner's thread stores the load to publish (fg_quota_dir_publish) and
 * copies the view (fg_quota_dir_instances) under dir.mu; the quota thread
 * sends the load and replaces the view there. A record read from Redis is
 * network input: it is parsed strictly, and one that does not parse is left
 * out of the view (counted as a Redis error, like any unexpected reply).
 */
#include "policies/quota_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_TTL_PERIODS 3 /* a record outlives this many missed publishes */

size_t fg_dir_record_format(const char *url, const fg_dir_load *l, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %d", url,
                     l->leases, l->sessions, l->streaming, l->kv_used_bytes, l->kv_capacity_bytes,
                     l->tokens_per_s_milli, l->draining ? 1 : 0);
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* One space-terminated (or final) field of s[*at..n) into out; false when empty, too long or
 * not printable ASCII (a NUL would cut the copy short). */
static bool field(const char *s, size_t n, size_t *at, char *out, size_t cap)
{
    size_t b = *at, e = b;
    while (e < n && s[e] != ' ') {
        if ((unsigned char)s[e] < '!' || (unsigned char)s[e] > '~')
            return false;
        e++;
    }
    if (e == b || e - b >= cap)
        return false;
    memcpy(out, s + b, e - b);
    out[e - b] = 0;
    *at = e < n ? e + 1 : e; /* past the single separator */
    return true;
}

/* A decimal integer in 0..INT64_MAX, digits only. */
static bool number(const char *t, uint64_t *v)
{
    if (!t[0] || t[0] == '-' || t[0] == '+')
        return false;
    for (const char *c = t; *c; c++)
        if (*c < '0' || *c > '9')
            return false;
    errno = 0;
    char *end;
    unsigned long long x = strtoull(t, &end, 10);
    if (errno || *end || x > INT64_MAX)
        return false;
    *v = x;
    return true;
}

fg_err fg_dir_record_parse(const char *s, size_t n, fg_dir_instance *out, fg_diag *diag)
{
    static const char *const names[] = {"published_ms", "url",           "leases",
                                        "sessions",     "streaming",     "kv_used_bytes",
                                        "kv_capacity",  "tokens_per_s",  "draining"};
    uint64_t v[9] = {0};
    char tok[FG_DIR_URL_MAX + 1];
    size_t at = 0;
    if (n > FG_DIR_RECORD_MAX)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "instance record: %zu bytes, over %d", n, FG_DIR_RECORD_MAX);
    for (int i = 0; i < 9; i++) {
        if (!field(s, n, &at, tok, sizeof tok))
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "instance record: field %s missing, too long or not printable",
                               names[i]);
        if (i == 1) {
            if (!fg_qdir_url_valid(tok))
                return fg_diag_set(diag, FG_ERR_INVALID_ARG, "instance record: url not printable without spaces");
            snprintf(out->url, sizeof out->url, "%s", tok);
        } else if (!number(tok, &v[i]) || (i == 8 && v[i] > 1)) {
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "instance record: field %s is not %s", names[i],
                               i == 8 ? "0 or 1" : "a decimal integer in 0..2^63-1");
        }
    }
    if (at != n || (n && s[n - 1] == ' '))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "instance record: bytes after the last field");
    out->published_ms = (int64_t)v[0];
    out->load = (fg_dir_load){.leases = v[2],
                              .sessions = v[3],
                              .streaming = v[4],
                              .kv_used_bytes = v[5],
                              .kv_capacity_bytes = v[6],
                              .tokens_per_s_milli = v[7],
                              .draining = v[8] == 1};
    return FG_OK;
}

void fg_quota_dir_publish(fg_quota_t *q, const fg_dir_load *load)
{
    if (!q || !q->dir.on)
        return;
    pthread_mutex_lock(&q->dir.mu);
    q->dir.load = *load;
    pthread_mutex_unlock(&q->dir.mu);
}

size_t fg_quota_dir_instances(fg_quota_t *q, fg_dir_instance *out, size_t max, int64_t *view_age_ms)
{
    if (view_age_ms)
        *view_age_ms = -1;
    if (!q || !q->dir.on)
        return 0;
    pthread_mutex_lock(&q->dir.mu);
    size_t n = q->dir.n_view < max ? q->dir.n_view : max;
    if (n)
        memcpy(out, q->dir.view, n * sizeof *out);
    if (view_age_ms && q->dir.view_mono_us)
        *view_age_ms = (fg_clock_mono_us() - q->dir.view_mono_us) / 1000;
    pthread_mutex_unlock(&q->dir.mu);
    return n;
}

static int by_id(const void *a, const void *b)
{
    return strcmp(((const fg_dir_instance *)a)->id, ((const fg_dir_instance *)b)->id);
}

/* The script's reply into v (FG_DIR_INSTANCES_MAX entries); the count, or -1 when the reply is not the script's. */
static long read_view(struct fg_quota *q, const redisReply *rep, fg_dir_instance *v)
{
    if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 || (rep->elements - 1) % 3 ||
        rep->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    const int64_t now_ms = rep->element[0]->integer;
    size_t n = 0;
    for (size_t i = 1; i + 2 < rep->elements && n < FG_DIR_INSTANCES_MAX; i += 3) {
        const redisReply *id = rep->element[i], *exp = rep->element[i + 1], *rec = rep->element[i + 2];
        fg_dir_instance *d = &v[n];
        memset(d, 0, sizeof *d);
        fg_diag diag;
        if (id->type != REDIS_REPLY_STRING || !fg_name_valid(id->str, id->len) || exp->type != REDIS_REPLY_INTEGER ||
            rec->type != REDIS_REPLY_STRING || fg_dir_record_parse(rec->str, rec->len, d, &diag) != FG_OK) {
            fg_quota_stat_reply_error(q, "dir_publish script (an instance record left out)", rec);
            continue;
        }
        memcpy(d->id, id->str, id->len);
        d->age_ms = now_ms - d->published_ms;
        d->expires_in_ms = exp->integer - now_ms;
        d->self = !strcmp(d->id, q->dir.instance);
        n++;
    }
    qsort(v, n, sizeof *v, by_id);
    return (long)n;
}

void fg_qdir_publish_due(struct fg_quota *q, int64_t now_us)
{
    fg_qdir *d = &q->dir;
    if (!d->on || now_us < d->next_publish_us || !fg_qconn_up(q))
        return;
    d->next_publish_us = now_us + FG_DIR_PUBLISH_MS * 1000LL;
    fg_dir_stats st;
    fg_quota_dir_get_stats(q, &st);
    pthread_mutex_lock(&d->mu);
    fg_dir_load load = d->load;
    pthread_mutex_unlock(&d->mu);
    load.leases = st.held;
    char rec[FG_DIR_RECORD_MAX];
    if (!fg_dir_record_format(d->url, &load, rec, sizeof rec))
        return; /* cannot happen: the url is under FG_DIR_URL_MAX and the numbers under 20 digits each */
    const int min_ttl_ms = MIN_TTL_PERIODS * FG_DIR_PUBLISH_MS;
    const int ttl_ms = d->ttl_ms > min_ttl_ms ? d->ttl_ms : min_ttl_ms;
    fg_qcmd cmd;
    fg_qcmd_init(&cmd);
    fg_qcmd_script(&cmd, FG_QSCRIPT_DIR_PUBLISH, 2);
    fg_qcmd_str(&cmd, "{flashgate:instances}:live");
    fg_qcmd_str(&cmd, "{flashgate:instances}:load");
    fg_qcmd_str(&cmd, d->instance);
    fg_qcmd_i64(&cmd, ttl_ms);
    fg_qcmd_str(&cmd, rec);
    fg_qcmd_i64(&cmd, FG_DIR_INSTANCES_MAX);
    redisReply *rep = fg_qconn_exec1(q, &cmd);
    fg_qcmd_free(&cmd);
    if (!rep)
        return; /* the connection dropped: the view stays as it was read, its age grows */
    fg_dir_instance *v = calloc(FG_DIR_INSTANCES_MAX, sizeof *v);
    long n = v ? read_view(q, rep, v) : -1;
    if (n < 0 && v)
        fg_quota_stat_reply_error(q, "dir_publish script", rep);
    freeReplyObject(rep);
    if (n < 0) {
        free(v);
        return;
    }
    pthread_mutex_lock(&d->mu);
    free(d->view);
    d->view = v;
    d->n_view = (size_t)n;
    d->view_mono_us = fg_clock_mono_us();
    pthread_mutex_unlock(&d->mu);
}
