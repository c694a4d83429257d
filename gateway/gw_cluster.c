/* gw_cluster.c: sessions across instances. With cluster.advertise_url set,
 * every session this instance makes or adopts is registered in the session
 * directory in Redis (policies/session_dir.h) and its lease renewed there by
 * the quota thread. A session.resume of a session not held here asks the
 * directory first:
 *   - another instance holds it, alive: error session_elsewhere, its
 *     error.location naming that instance's advertised url;
 *   - nobody holds it (its holder died, or stopped and gave it back): take
 *     it with the next epoch, read its file from the shared persistence.dir
 *     and go on (gw_resume_restore): a migration, the KV from the file, no
 *     prefill;
 *   - another instance took it between the look and the take: session_taken.
 * The engine asks gw_cluster_fence before each write of a session's file,
 * and the sweep closes sessions whose lease another instance took (their
 * files are left alone: they are that instance's now).
 * Service thread only, except gw_cluster_fence (the engine's writer thread).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"
#include "gateway/log.h"
#include "policies/session_dir.h"

#define LOST_BATCH 64

bool gw_cluster_on(const fg_gateway_t *gw)
{
    return gw->quota && fg_quota_dir_enabled(gw->quota);
}

bool gw_cluster_fence(void *user, const char *tenant_name, const char *name)
{
    fg_gateway_t *gw = user;
    /* gw->quota is set before the service loop starts, so before any session exists */
    if (!gw->quota || fg_quota_dir_may_write(gw->quota, tenant_name, name))
        return true;
    fg_log_at(FG_LOG_WARN, "session_fenced", tenant_name, name, "\"reason\":\"lease_not_held\"");
    return false;
}

void gw_cluster_session_new(gw_session *s)
{
    if (gw_cluster_on(s->gw))
        fg_quota_dir_claim(s->gw->quota, gw_session_tenant(s), s->id, FG_DIR_NEW, 0, NULL, NULL);
}

void gw_cluster_session_gone(gw_session *s, bool keep_file)
{
    if (gw_cluster_on(s->gw))
        fg_quota_dir_release(s->gw->quota, gw_session_tenant(s), s->id, !keep_file);
}

void gw_cluster_restore_failed(fg_gateway_t *gw, int tenant, const char *id, size_t id_len, bool gone)
{
    char name[FG_NAME_MAX + 1];
    if (!gw_cluster_on(gw) || id_len > FG_NAME_MAX)
        return;
    memcpy(name, id, id_len);
    name[id_len] = 0;
    /* Restored meanwhile by another client's resume (its restore is why this one failed): that one holds the lease. */
    if (gw_session_find(gw, name, id_len))
        return;
    fg_quota_dir_release(gw->quota, gw_tenant_at(gw, tenant)->rec.id, name, gone);
}

void gw_cluster_sink_gone(gw_sink *k)
{
    if (k->dir_wait) {
        k->dir_wait->sink = NULL; /* its answer finds nobody: any lease it took goes back */
        k->dir_wait = NULL;
    }
}

/* The wait is over: the sink is read again (if it is still there). */
static gw_sink *wait_end(gw_dir_wait *w)
{
    gw_sink *k = w->sink;
    if (k) {
        k->dir_wait = NULL;
        gw_sink_rx_update(k);
    }
    return k;
}

/* session.resume's refusal: an error event, error.location naming the holder. */
static void ws_refuse(gw_sink *k, gw_dir_wait *w, fg_proto_code code, const fg_dir_result *r, uint32_t retry,
                      const char *msg)
{
    fg_proto_error err;
    fg_proto_error_set(&err, code, code == FG_PROTO_QUOTA_UNAVAILABLE ? NULL : "session_id",
                       w->has_event_id ? w->event_id : NULL, "%s", msg);
    if (r && r->owner[0]) {
        snprintf(err.location_instance, sizeof err.location_instance, "%s", r->owner);
        snprintf(err.location_url, sizeof err.location_url, "%s", r->owner_url);
    }
    gw_sink_error(k, &err, retry);
}

static void ws_adopt(gw_sink *k, gw_dir_wait *w)
{
    gw_resume_restore(k, w->session_id, strlen(w->session_id), w->arg, w->has_event_id ? w->event_id : NULL);
}

static const gw_cluster_ops ws_resume_ops = {ws_adopt, ws_refuse};

__attribute__((format(printf, 6, 7))) static void refuse(gw_dir_wait *w, gw_sink *k, fg_proto_code code,
                                                        const fg_dir_result *r, uint32_t retry, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    w->ops->refuse(k, w, code, r, retry, msg);
}

static void adopt(gw_dir_wait *w, gw_sink *k, const fg_dir_result *r)
{
    fg_log_at(FG_LOG_INFO, r->epoch > 1 ? "session_migrating" : "session_claimed", w->tenant_id, w->session_id,
              "\"epoch\":%llu,\"directory_ms\":%.3f", (unsigned long long)r->epoch,
              (fg_clock_mono_s() - w->started) * 1e3);
    w->ops->adopt(k, w);
}

static void on_take(void *user, const fg_dir_result *r);

static void on_look(void *user, const fg_dir_result *r)
{
    gw_dir_wait *w = user;
    fg_gateway_t *gw = w->gw;
    gw_sink *k = w->sink;
    if (!k) { /* the client left: a lease the look renewed here goes back (nothing of it is resident) */
        if (r->state == FG_DIR_HELD)
            fg_quota_dir_release(gw->quota, w->tenant_id, w->session_id, false);
        free(w);
        return;
    }
    switch (r->state) {
    case FG_DIR_FREE:
        /* Nobody holds it: take it, if nobody else does first. The sink stays unread. */
        fg_quota_dir_claim(gw->quota, w->tenant_id, w->session_id, FG_DIR_TAKE, r->epoch, on_take, w);
        return;
    case FG_DIR_HELD:
        wait_end(w);
        adopt(w, k, r);
        break;
    case FG_DIR_ELSEWHERE:
        wait_end(w);
        fg_log_at(FG_LOG_INFO, "session_redirected", w->tenant_id, w->session_id, "\"owner\":\"%s\",\"epoch\":%llu",
                  r->owner, (unsigned long long)r->epoch);
        refuse(w, k, FG_PROTO_SESSION_ELSEWHERE, r, 0, "the session is held by instance %s: resume there",
               r->owner);
        break;
    default:
        wait_end(w);
        refuse(w, k, FG_PROTO_QUOTA_UNAVAILABLE, NULL, 1, "%s",
               "the session directory cannot be read now (Redis unreachable); retry");
        break;
    }
    free(w);
}

static void on_take(void *user, const fg_dir_result *r)
{
    gw_dir_wait *w = user;
    gw_sink *k = wait_end(w);
    if (!k) {
        if (r->state == FG_DIR_HELD) /* taken for a client that left: given back at once */
            fg_quota_dir_release(w->gw->quota, w->tenant_id, w->session_id, false);
        free(w);
        return;
    }
    if (r->state == FG_DIR_HELD) {
        adopt(w, k, r);
    } else if (r->state == FG_DIR_UNAVAILABLE) {
        refuse(w, k, FG_PROTO_QUOTA_UNAVAILABLE, NULL, 1, "%s",
               "the session directory cannot be read now (Redis unreachable); retry");
    } else {
        fg_log_at(FG_LOG_INFO, "session_adopt_lost", w->tenant_id, w->session_id, "\"owner\":\"%s\"", r->owner);
        refuse(w, k, FG_PROTO_SESSION_TAKEN, r, 0, "another instance (%s) adopted the session first: resume there",
               r->owner[0] ? r->owner : "unknown");
    }
    free(w);
}

void gw_cluster_claim(gw_sink *k, const char *id, size_t id_len, const gw_cluster_ops *ops, uint64_t arg,
                      const char *event_id)
{
    fg_gateway_t *gw = k->gw;
    gw_dir_wait *w = calloc(1, sizeof *w);
    if (w) {
        w->ops = ops;
        w->arg = arg;
        if (event_id) {
            w->has_event_id = true;
            snprintf(w->event_id, sizeof w->event_id, "%s", event_id);
        }
    }
    if (!w || id_len > FG_NAME_MAX || !fg_name_valid(id, id_len)) {
        if (w)
            ops->refuse(k, w, FG_PROTO_SESSION_NOT_FOUND, NULL, 0, "no such session");
        else {
            gw_dir_wait oom = {.ops = ops};
            ops->refuse(k, &oom, FG_PROTO_INTERNAL_ERROR, NULL, 0, "out of memory");
        }
        free(w);
        return;
    }
    w->gw = gw;
    w->sink = k;
    w->tenant = k->tenant;
    snprintf(w->tenant_id, sizeof w->tenant_id, "%s", gw_tenant_at(gw, k->tenant)->rec.id);
    memcpy(w->session_id, id, id_len);
    w->session_id[id_len] = 0;
    w->started = fg_clock_mono_s();
    k->dir_wait = w;
    gw_sink_rx_update(k);
    fg_quota_dir_claim(gw->quota, w->tenant_id, w->session_id, FG_DIR_LOOK, 0, on_look, w);
}

void gw_cluster_resume(gw_sink *k, const char *id, size_t id_len, uint64_t last_seq, const char *event_id)
{
    gw_cluster_claim(k, id, id_len, &ws_resume_ops, last_seq, event_id);
}

bool gw_cluster_holds(gw_session *s)
{
    return !gw_cluster_on(s->gw) || fg_quota_dir_may_write(s->gw->quota, gw_session_tenant(s), s->id);
}

void gw_cluster_moved(gw_session *s, const char *event_id)
{
    fg_log_at(FG_LOG_WARN, "session_moved", gw_session_tenant(s), s->id, NULL);
    if (s->sink) {
        fg_proto_error err;
        fg_proto_error_set(&err, FG_PROTO_SESSION_MOVED, NULL, event_id, "%s",
                           "this instance no longer holds the session's lease (another instance may hold it); "
                           "resume again");
        gw_sink_error(s->sink, &err, 0);
    }
    gw_session_close_kept(s, "moved"); /* a response still running is cancelled with it */
}

void gw_cluster_sweep(fg_gateway_t *gw)
{
    if (!gw_cluster_on(gw))
        return;
    fg_dir_lost lost[LOST_BATCH];
    size_t n;
    while ((n = fg_quota_dir_take_lost(gw->quota, lost, LOST_BATCH)) > 0)
        for (size_t i = 0; i < n; i++) {
            gw_session *s = gw_session_find(gw, lost[i].session, strlen(lost[i].session));
            fg_log_at(FG_LOG_WARN, "session_lease_lost", lost[i].tenant, lost[i].session, "\"resident\":%s",
                      s ? "true" : "false");
            if (!s || strcmp(gw_session_tenant(s), lost[i].tenant) != 0)
                continue;
            gw_cluster_moved(s, NULL);
        }
}
