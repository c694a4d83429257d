/* gw_persist.c: the gateway's side of session files. The engine writes a
 * named session's file (its KV and our record) after each response, before a
 * spill and at shutdown; here the gateway keeps its record current
 * (session_meta.h), restores a session a client resumes after a restart, and
 * turns the engine's persistence errors into protocol codes.
 *
 * Ids (evt_, item_, resp_) are never handed out twice, crashes included: a
 * record does not hold the id counters but a reservation above them
 * (ID_RESERVE more), so the file written at the end of a response covers the
 * ids that response and the events after it use; a restored session starts
 * at the reservation and writes a new one before it hands out any id.
 * A restore's file reads and writes run on gw_disk's worker; everything here
 * runs on the service thread. */
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "gateway/gateway_internal.h"
#include "gateway/gw_disk.h"
#include "gateway/log.h"
#include "gateway/session_meta.h"

/* Ids a record covers beyond the counters when it is made: more than one
 * response of the largest context makes, with the events around it. */
#define ID_RESERVE (UINT64_C(1) << 20)

fg_proto_code gw_engine_code(fg_err e)
{
    switch (e) {
    case FG_OK: return FG_PROTO_OK;
    case FG_ERR_CONTEXT_FULL: return FG_PROTO_CONTEXT_LENGTH_EXCEEDED;
    case FG_ERR_INVALID_ARG: return FG_PROTO_INVALID_VALUE;
    case FG_ERR_NOT_FOUND: return FG_PROTO_SESSION_NOT_FOUND;
    case FG_ERR_SESSION_TRUNCATED:
    case FG_ERR_SESSION_CORRUPT:
    case FG_ERR_SESSION_MODEL:
    case FG_ERR_SESSION_VERSION: return FG_PROTO_SESSION_LOST;
    case FG_ERR_DISK_FULL: return FG_PROTO_PERSIST_FAILED;
    case FG_ERR_BUSY: return FG_PROTO_RESPONSE_IN_PROGRESS;
    case FG_ERR_KV_FULL: return FG_PROTO_KV_UNAVAILABLE;
    default: return FG_PROTO_INTERNAL_ERROR;
    }
}

/* Our record of s into gw->meta_buf (*n bytes): rebuild, the engine cache's
 * length, and the tokens of conv the saved cache holds after the head
 * (conv_n of them; conv_known false: not known). */
static fg_err encode_meta(gw_session *s, bool rebuild, int cached, bool conv_known, size_t conv_n, size_t *n,
                          fg_diag *d)
{
    fg_gateway_t *gw = s->gw;
    fg_session_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.tenant, sizeof m.tenant, "%s", gw_tenant_at(gw, s->tenant)->rec.id);
    m.instructions = s->instructions ? s->instructions : "";
    m.instructions_len = s->instructions_len;
    m.temperature = s->set.temperature;
    m.top_p = s->set.top_p;
    m.min_p = s->set.min_p;
    m.top_k = s->set.top_k;
    m.has_seed = s->set.has_seed;
    m.seed = s->set.seed;
    m.max_output_tokens = s->set.max_output_tokens;
    m.n_stop = s->set.n_stop;
    memcpy(m.stop, s->set.stop, sizeof m.stop);
    m.next_seq = s->next_seq;
    m.evt_counter = s->evt_counter + ID_RESERVE;
    m.item_counter = s->item_counter + ID_RESERVE;
    m.resp_counter = s->resp_counter + ID_RESERVE;
    m.rebuild = rebuild;
    m.cached_tokens = cached > 0 ? (uint32_t)cached : 0;
    m.conv_known = conv_known;
    m.conv = (fg_tokens){s->conv.v, conv_n, s->conv.cap};
    m.tail = gw_items_tail_at(s, conv_n);
    return fg_session_meta_encode(&m, gw->meta_buf, FG_SESSION_META_MAX_BYTES, n, d);
}

void gw_session_store_meta(gw_session *s)
{
    fg_gateway_t *gw = s->gw;
    if (!gw->meta_buf || !s->es)
        return;
    /* The record's tokens must be what the saved cache holds after the head:
     * conv minus the input queued since (not part of the file). A restore
     * compares the lengths and trusts the tokens only when they match. */
    size_t queued = s->new_input > 0 ? (size_t)s->new_input : 0;
    const bool known = s->conv_known && (s->rebuild || queued <= s->conv.n);
    size_t n;
    fg_diag d;
    fg_err e = encode_meta(s, s->rebuild, fg_session_length(s->es), known,
                           s->rebuild ? s->conv.n : s->conv.n - (known ? queued : 0), &n, &d);
    if (e == FG_OK)
        e = fg_session_set_meta(s->es, gw->meta_buf, n, &d);
    if (e != FG_OK && e != FG_ERR_UNSUPPORTED)
        fg_log_at(FG_LOG_WARN, "session_meta_failed", gw_session_tenant(s), s->id, "\"error\":\"%s\"", fg_err_name(e));
}

const uint8_t *gw_session_meta_cut(gw_session *s, int cached, size_t conv_n, size_t *len)
{
    fg_diag d;
    if (!s->gw->meta_buf || encode_meta(s, false, cached, s->conv_known, conv_n, len, &d) != FG_OK)
        return NULL;
    return s->gw->meta_buf;
}

static bool valid_id(const char *id, size_t len)
{
    return len < sizeof(((gw_session *)0)->id) && fg_name_valid(id, len);
}

/* Applies a decoded record to a restored session. */
static void apply_meta(gw_session *s, fg_session_meta *m)
{
    free(s->instructions);
    s->instructions = (char *)m->instructions; /* ownership moves */
    s->instructions_len = m->instructions_len;
    m->instructions = NULL;
    s->set.temperature = m->temperature;
    s->set.top_p = m->top_p;
    s->set.min_p = m->min_p;
    s->set.top_k = m->top_k;
    s->set.has_seed = m->has_seed;
    s->set.seed = m->seed;
    s->set.max_output_tokens = m->max_output_tokens;
    s->set.n_stop = m->n_stop;
    memcpy(s->set.stop, m->stop, sizeof s->set.stop);
    s->next_seq = m->next_seq;
    s->evt_counter = m->evt_counter; /* the reservations: above every id handed out under this record */
    s->item_counter = m->item_counter;
    s->resp_counter = m->resp_counter;
    s->resp_restored = m->resp_counter;
    s->resp_floor = m->resp_counter > ID_RESERVE ? m->resp_counter - ID_RESERVE : 0;
    s->rebuild = m->rebuild;
}

/* A restore under way: the session prepared for the engine, and whom to tell. */
typedef struct restore {
    gw_session *s;
    gw_restore_done done;
    void *user;
    int len;                        /* the restored cache's tokens (for the log) */
} restore;

static void restore_fail(restore *r, gw_session *s, fg_proto_code code, const char *msg)
{
    r->done(r->user, s, code, msg);
    free(r);
}

/* The id reservation is on disk (or could not be written: logged): the session is the caller's. */
static void on_saved(void *user, fg_session_t *es_unused, fg_err e, const fg_diag *d)
{
    (void)es_unused;
    (void)d;
    restore *r = user;
    gw_session *s = r->s;
    const char *tenant_id = gw_session_tenant(s);
    s->restoring = false;
    if (s->doomed) { /* closed meanwhile (evicted, or the server stops) */
        gw_session_destroy(s, s->doomed_keep_file);
        return restore_fail(r, NULL, FG_PROTO_SESSION_NOT_FOUND, "the session was closed while it was restored");
    }
    if (e != FG_OK) /* the session goes on; only a second crash before its next save could repeat ids */
        fg_log_at(FG_LOG_WARN, "session_save_failed", tenant_id, s->id, "\"error\":\"%s\",\"when\":\"restore\"",
                  fg_err_name(e));
    fg_log_at(FG_LOG_INFO, "session_restored", tenant_id, s->id, "\"tokens\":%d,\"history_known\":%s,\"on_disk\":%s",
              r->len, s->conv_known ? "true" : "false", fg_session_on_disk(s->es) ? "true" : "false");
    restore_fail(r, s, FG_PROTO_OK, NULL);
}

/* The engine's answer, on the service thread: our record from the file, then
 * the new id reservation written (on the worker again) before the caller may
 * hand out an id. */
static void on_restored(void *user, fg_session_t *es, fg_err e, const fg_diag *dd)
{
    restore *r = user;
    gw_session *s = r->s;
    fg_gateway_t *gw = s->gw;
    const char *tenant_id = gw_tenant_at(gw, s->tenant)->rec.id;
    char msg[720], name[sizeof s->id];
    if (!es) {
        memcpy(name, s->id, sizeof name);
        free(s); /* never entered in the table */
        if (e == FG_ERR_NOT_FOUND || e == FG_ERR_UNSUPPORTED)
            return restore_fail(r, NULL, FG_PROTO_SESSION_NOT_FOUND, "no such session");
        fg_proto_code code = gw_engine_code(e);
        if (code == FG_PROTO_SESSION_LOST) {
            snprintf(msg, sizeof msg, "session %s cannot be restored (%s): %s", name, fg_err_name(e), dd->msg);
            fg_log_at(FG_LOG_ERROR, "session_lost", tenant_id, name, "\"error\":\"%s\"", fg_err_name(e));
        } else {
            code = FG_PROTO_INTERNAL_ERROR;
            snprintf(msg, sizeof msg, "session %s cannot be read now (%s); retry later", name, fg_err_name(e));
            fg_log_at(FG_LOG_ERROR, "session_restore_failed", tenant_id, name, "\"error\":\"%s\"", fg_err_name(e));
        }
        return restore_fail(r, NULL, code, msg);
    }
    gw_session_adopt(s, es);
    s->cache_built = true;
    /* The engine's file is sound; now our record in it. */
    fg_diag d = {{0}};
    size_t n = fg_session_get_meta(es, gw->meta_buf, FG_SESSION_META_MAX_BYTES);
    fg_session_meta m;
    e = n > FG_SESSION_META_MAX_BYTES ? FG_ERR_INVALID_ARG : fg_session_meta_decode(gw->meta_buf, n, &m, &d);
    if (e == FG_OK && strcmp(m.tenant, tenant_id) != 0) {
        fg_session_meta_free(&m);
        e = fg_diag_set(&d, FG_ERR_INVALID_ARG, "the record names another tenant");
    }
    if (e != FG_OK) {
        /* Kept on disk (an older or newer gateway may read it); this one cannot. */
        snprintf(msg, sizeof msg, "session %s cannot be restored: its gateway record is unusable (%s)", s->id,
                 n ? d.msg : "missing");
        fg_log_at(FG_LOG_ERROR, "session_lost", tenant_id, s->id, "\"error\":\"meta\"");
        gw_session_destroy(s, true);
        return restore_fail(r, NULL, e == FG_ERR_NOMEM ? FG_PROTO_INTERNAL_ERROR : FG_PROTO_SESSION_LOST, msg);
    }
    apply_meta(s, &m);
    /* The history's tokens are known when the cache is exactly the head and them (or all
     * but the last: the token a response sampled last is evaluated with the next input). */
    fg_tokens head = {0};
    int len = fg_session_length(es);
    s->conv_known = false;
    if (m.conv_known &&
        (m.rebuild || (gw_session_head(s, &head, &d) == FG_OK &&
                       ((size_t)len == head.n + m.conv.n || (size_t)len + 1 == head.n + m.conv.n)))) {
        s->conv = m.conv; /* ownership moves */
        m.conv = (fg_tokens){0};
        s->conv_known = true;
    }
    /* the next item follows the restored history (no items hold it) */
    s->restored_tail = m.tail;
    s->restored_n = s->conv.n;
    fg_tokens_free(&head);
    fg_session_meta_free(&m);
    r->len = len;
    s->restoring = true;
    /* The file must hold a reservation above the ids this run hands out
     * before the first of them, or a second crash would hand them out again:
     * written on the worker too (the same size as the file just read). */
    gw_session_store_meta(s);
    if (!gw->disk || gw_disk_save(gw->disk, es, on_saved, r) != FG_OK) {
        fg_diag none = {{0}};
        on_saved(r, NULL, FG_ERR_NOMEM, &none);
    }
}

bool gw_session_restore(fg_gateway_t *gw, int tenant, const char *id, size_t id_len, gw_restore_done done,
                        void *user, fg_proto_code *code, char *msg, size_t msg_cap)
{
    char name[sizeof(((gw_session *)0)->id)];
    *code = FG_PROTO_SESSION_NOT_FOUND;
    snprintf(msg, msg_cap, "no such session");
    if (!gw->engine || !gw->meta_buf || !gw->disk || !valid_id(id, id_len))
        return false;
    memcpy(name, id, id_len);
    name[id_len] = 0;
    fg_session_params sp;
    restore *r = calloc(1, sizeof *r);
    gw_session *s = r ? gw_session_prepare(gw, tenant, name, &sp) : NULL;
    if (!s || gw_disk_restore(gw->disk, gw->engine, &sp, on_restored, r) != FG_OK) {
        free(s);
        free(r);
        *code = FG_PROTO_INTERNAL_ERROR;
        snprintf(msg, msg_cap, "out of memory");
        return false;
    }
    *r = (restore){.s = s, .done = done, .user = user};
    fg_log_at(FG_LOG_DEBUG, "session_restore_started", gw_tenant_at(gw, tenant)->rec.id, name, NULL);
    return true;
}

bool gw_session_rebuild_fits(gw_session *s, bool generate)
{
    fg_gateway_t *gw = s->gw;
    fg_tokens head = {0}, reply = {0};
    fg_diag d;
    fg_template_tail tail = gw_session_tail(s); /* only counted here */
    bool ok = gw_session_head(s, &head, &d) == FG_OK &&
              (!generate || fg_template_reply(gw->tok, &tail, &reply) == FG_OK);
    size_t need = head.n + s->conv.n + (generate ? reply.n + 1 : 0);
    fg_tokens_free(&head);
    fg_tokens_free(&reply);
    return ok && need <= (size_t)gw->n_ctx;
}

int64_t gw_tenant_kv_bytes(fg_gateway_t *gw, int tenant)
{
    fg_tenant_kv_usage u;
    if (fg_engine_tenant_usage(gw->engine, gw_tenant_at(gw, tenant)->rec.id, &u) == FG_OK)
        return (int64_t)u.resident_kv_bytes;
    int64_t tokens = 0; /* an engine without the count: its sessions' lengths */
    for (gw_session *s = gw->sessions; s; s = s->all_next)
        if (s->tenant == tenant)
            tokens += fg_session_length(s->es);
    return tokens * (int64_t)gw->kv_bytes_per_token;
}
