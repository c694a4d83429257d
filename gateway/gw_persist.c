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
 * Service thread only. */
#include <stdio.h>
#include <string.h>

#include "gateway/gateway_internal.h"
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

void gw_session_store_meta(gw_session *s)
{
    fg_gateway_t *gw = s->gw;
    if (!gw->meta_buf || !s->es)
        return;
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
    m.rebuild = s->rebuild;
    /* The record's tokens must be what the saved cache holds after the head:
     * conv minus the input queued since (not part of the file). A restore
     * compares the lengths and trusts the tokens only when they match. */
    int len = fg_session_length(s->es);
    m.cached_tokens = len > 0 ? (uint32_t)len : 0;
    size_t queued = s->new_input > 0 ? (size_t)s->new_input : 0;
    m.conv_known = s->conv_known && (s->rebuild || queued <= s->conv.n);
    m.conv = (fg_tokens){s->conv.v, s->rebuild ? s->conv.n : s->conv.n - (m.conv_known ? queued : 0), s->conv.cap};
    size_t n;
    fg_diag d;
    fg_err e = fg_session_meta_encode(&m, gw->meta_buf, FG_SESSION_META_MAX_BYTES, &n, &d);
    if (e == FG_OK)
        e = fg_session_set_meta(s->es, gw->meta_buf, n, &d);
    if (e != FG_OK && e != FG_ERR_UNSUPPORTED)
        fg_log_at(FG_LOG_WARN, "session_meta_failed", gw_session_tenant(s), s->id, "\"error\":\"%s\"", fg_err_name(e));
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

gw_session *gw_session_restore(fg_gateway_t *gw, int tenant, const char *id, size_t id_len, fg_proto_code *code,
                               char *msg, size_t msg_cap)
{
    char name[sizeof(((gw_session *)0)->id)];
    const char *tenant_id = gw_tenant_at(gw, tenant)->rec.id;
    *code = FG_PROTO_SESSION_NOT_FOUND;
    snprintf(msg, msg_cap, "no such session");
    if (!gw->engine || !gw->meta_buf || !valid_id(id, id_len))
        return NULL;
    memcpy(name, id, id_len);
    name[id_len] = 0;
    fg_diag d = {{0}};
    fg_err e;
    gw_session *s = gw_session_new(gw, tenant, NULL, name, &e, &d);
    if (!s) {
        if (e == FG_ERR_NOT_FOUND || e == FG_ERR_UNSUPPORTED)
            return NULL;
        *code = gw_engine_code(e);
        if (*code == FG_PROTO_SESSION_LOST) {
            snprintf(msg, msg_cap, "session %s cannot be restored (%s): %s", name, fg_err_name(e), d.msg);
            fg_log_at(FG_LOG_ERROR, "session_lost", tenant_id, name, "\"error\":\"%s\"", fg_err_name(e));
        } else {
            *code = FG_PROTO_INTERNAL_ERROR;
            snprintf(msg, msg_cap, "session %s cannot be read now (%s); retry later", name, fg_err_name(e));
            fg_log_at(FG_LOG_ERROR, "session_restore_failed", tenant_id, name, "\"error\":\"%s\"", fg_err_name(e));
        }
        return NULL;
    }
    /* The engine's file is sound; now our record in it. */
    fg_session_t *es = s->es;
    size_t n = fg_session_get_meta(es, gw->meta_buf, FG_SESSION_META_MAX_BYTES);
    fg_session_meta m;
    e = n > FG_SESSION_META_MAX_BYTES ? FG_ERR_INVALID_ARG : fg_session_meta_decode(gw->meta_buf, n, &m, &d);
    if (e == FG_OK && strcmp(m.tenant, tenant_id) != 0) {
        fg_session_meta_free(&m);
        e = fg_diag_set(&d, FG_ERR_INVALID_ARG, "the record names another tenant");
    }
    if (e != FG_OK) {
        /* Kept on disk (an older or newer gateway may read it); this one cannot. */
        gw_session_destroy(s, true);
        *code = e == FG_ERR_NOMEM ? FG_PROTO_INTERNAL_ERROR : FG_PROTO_SESSION_LOST;
        snprintf(msg, msg_cap, "session %s cannot be restored: its gateway record is unusable (%s)", name,
                 n ? d.msg : "missing");
        fg_log_at(FG_LOG_ERROR, "session_lost", tenant_id, name, "\"error\":\"meta\"");
        return NULL;
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
    fg_tokens_free(&head);
    fg_session_meta_free(&m);
    /* The file must hold a reservation above the ids this run hands out
     * before the first of them, or a second crash would hand them out again.
     * A restore reads the whole file on this thread already; the write is of
     * the same size. */
    gw_session_store_meta(s);
    e = fg_session_save(es, &d);
    if (e != FG_OK) /* the session goes on; only a second crash before its next save could repeat ids */
        fg_log_at(FG_LOG_WARN, "session_save_failed", tenant_id, s->id, "\"error\":\"%s\",\"when\":\"restore\"",
                  fg_err_name(e));
    fg_log_at(FG_LOG_INFO, "session_restored", tenant_id, s->id, "\"tokens\":%d,\"history_known\":%s,\"on_disk\":%s",
              len, s->conv_known ? "true" : "false", fg_session_on_disk(es) ? "true" : "false");
    return s;
}

bool gw_session_rebuild_fits(gw_session *s, bool generate)
{
    fg_gateway_t *gw = s->gw;
    fg_tokens head = {0}, reply = {0};
    fg_diag d;
    bool ok = gw_session_head(s, &head, &d) == FG_OK &&
              (!generate || fg_template_reply(gw->tok, &reply) == FG_OK);
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
