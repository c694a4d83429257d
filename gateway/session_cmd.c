/* session_cmd.c: the session commands of every transport (session_cmd.h):
 * session.create/update/resume, items, response.create/cancel, session.close.
 * A command answers into the session's ring through gw_emit_*, or into the
 * sink's own queue before a session exists; quota calls and restores answer
 * later, the session found again by id (it may be gone by then). Service
 * thread only. */
#include "gateway/session_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/random.h"
#include "gateway/gateway_internal.h"
#include "gateway/gw_disk.h"
#include "gateway/log.h"

void gw_sink_error(gw_sink *k, const fg_proto_error *err, uint32_t retry_after)
{
    fg_gateway_t *gw = k->gw;
    gw_session *s = k->session;
    uint64_t seq = s ? gw_session_take_seq(s) : 0;
    uint64_t evt = s ? ++s->evt_counter : ++k->evt_counter;
    if (fg_proto_write_error(&gw->scratch, seq, evt, err, retry_after) != FG_OK)
        return;
    if (s) {
        gw_session_push(s, seq);
    } else {
        k->ops->push(k, 0, fg_proto_buf_text(&gw->scratch), gw->scratch.len);
        gw_sink_request_write(k);
        gw_sink_output_changed(k);
    }
}

static void fail(gw_sink *k, const fg_client_event *ev, fg_proto_code code, const char *param, const char *fmt,
                 const char *detail)
{
    fg_proto_error err;
    fg_proto_error_set(&err, code, param, ev && ev->has_event_id ? ev->event_id.ptr : NULL, fmt, detail);
    gw_sink_error(k, &err, 0);
}

static void apply_sampling(gw_settings *set, const fg_proto_sampling *p)
{
    if (p->has_temperature)
        set->temperature = p->temperature;
    if (p->has_top_p)
        set->top_p = p->top_p;
    if (p->has_top_k)
        set->top_k = p->top_k;
    if (p->has_min_p)
        set->min_p = p->min_p;
    if (p->has_seed) {
        set->has_seed = true;
        set->seed = p->seed;
    }
    if (p->has_max_output_tokens)
        set->max_output_tokens = p->max_output_tokens;
    if (p->has_stop) {
        set->n_stop = p->n_stop;
        for (uint32_t i = 0; i < p->n_stop; i++)
            snprintf(set->stop[i], sizeof set->stop[i], "%s", p->stop[i].ptr);
    }
}

/* Whether the tools and tool_choice the session would have after p can be
 * used; fails the event when not (s: the session as it stands). */
static bool tools_ok(gw_sink *k, const fg_client_event *ev, const gw_session *s, const fg_proto_session_params *p)
{
    if (!p->has_tools && !p->has_tool_choice)
        return true;
    const char *tools = p->has_tools ? p->tools.ptr : s->tools;
    size_t len = p->has_tools ? p->tools.len : s->tools ? strlen(s->tools) : 0;
    fg_proto_tool_choice choice = p->has_tool_choice ? p->tool_choice : s->tool_choice;
    const char *name = p->has_tool_choice ? (choice == FG_PROTO_TOOL_CHOICE_FUNCTION ? p->tool_choice_name.ptr : "")
                                          : s->tool_choice_name;
    const char *field = NULL;
    fg_diag d = {{0}};
    if (gw_tools_check(k->gw, tools, len, choice, name, &field, &d) == FG_OK)
        return true;
    fail(k, ev, FG_PROTO_INVALID_VALUE, field, "%s", d.msg);
    return false;
}

/* Whether p changes what the head renders of the tools (the same tools again keep the KV). */
static bool tools_change(const gw_session *s, const fg_proto_session_params *p)
{
    const bool tools = p->has_tools && (!s->tools || strlen(s->tools) != p->tools.len ||
                                        memcmp(s->tools, p->tools.ptr, p->tools.len) != 0);
    const bool none_before = s->tool_choice == FG_PROTO_TOOL_CHOICE_NONE;
    const bool none_after = p->has_tool_choice ? p->tool_choice == FG_PROTO_TOOL_CHOICE_NONE : none_before;
    return tools || none_before != none_after;
}

/* The GA session's model (shown back), tools (rendered in the head) and tool_choice. */
static bool apply_ga(gw_session *s, const fg_proto_session_params *p)
{
    if (p->has_model)
        snprintf(s->model, sizeof s->model, "%s", p->model.ptr);
    if (p->has_tools) {
        char *t = malloc(p->tools.len + 1);
        if (!t)
            return false;
        memcpy(t, p->tools.ptr, p->tools.len + 1);
        free(s->tools);
        s->tools = t;
    }
    if (p->has_tool_choice) {
        s->tool_choice = p->tool_choice;
        snprintf(s->tool_choice_name, sizeof s->tool_choice_name, "%s",
                 p->tool_choice == FG_PROTO_TOOL_CHOICE_FUNCTION ? p->tool_choice_name.ptr : "");
    }
    return true;
}

static bool set_instructions(gw_session *s, const fg_proto_str *in)
{
    char *copy = malloc(in->len + 1);
    if (!copy)
        return false;
    memcpy(copy, in->ptr, in->len + 1);
    free(s->instructions);
    s->instructions = copy;
    s->instructions_len = in->len;
    return true;
}

/* Appends tokens to the engine session; maps its errors to protocol codes. */
static fg_proto_code append_tokens(gw_session *s, const int32_t *t, size_t n)
{
    fg_diag d;
    fg_err e = fg_session_append(s->es, t, (int)n, &d);
    if (e == FG_OK)
        s->new_input += (int64_t)n;
    return gw_engine_code(e);
}

/* Prefills the head (BOS and instructions) and the conversation into a fresh engine session. */
static fg_proto_code rebuild_engine_session(gw_session *s)
{
    fg_tokens head = {0};
    fg_diag d;
    if (gw_session_head(s, &head, &d) != FG_OK) {
        fg_tokens_free(&head);
        return FG_PROTO_INTERNAL_ERROR;
    }
    fg_proto_code code = append_tokens(s, head.v, head.n);
    if (code == FG_PROTO_OK && s->conv.n)
        code = append_tokens(s, s->conv.v, s->conv.n);
    fg_tokens_free(&head);
    return code;
}

static void send_session_event(gw_session *s, int kind)
{
    fg_gateway_t *gw = s->gw;
    fg_proto_session_info info;
    gw_session_info(s, &info);
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em,
                 kind == 0   ? fg_proto_write_session_created(&gw->scratch, em.seq, em.evt, &info)
                 : kind == 1 ? fg_proto_write_session_updated(&gw->scratch, em.seq, em.evt, &info)
                             : fg_proto_write_session_resumed(&gw->scratch, em.seq, em.evt, &info));
}

/* ---- client events ---- */

/* Ends a session.create that cannot go on: the session was never shown to
 * the client, so the error carries sequence number 0. */
static void create_failed(gw_sink *k, gw_session *s, fg_proto_code code, const char *param, const char *event_id,
                          const char *msg, uint32_t retry_after)
{
    gw_session_destroy(s, false);
    fg_proto_error err;
    fg_proto_error_set(&err, code, param, event_id, "%s", msg);
    gw_sink_error(k, &err, retry_after);
}

/* The second half of session.create, once the quota lease is held (or there is no quota). */
static void create_complete(gw_sink *k, gw_session *s, const char *event_id)
{
    /* A fork or restore holds its cache already; a pending rebuild runs at the first response. */
    fg_proto_code code = s->cache_built || s->rebuild ? FG_PROTO_OK : rebuild_engine_session(s);
    if (code != FG_PROTO_OK)
        return create_failed(k, s, code, code == FG_PROTO_CONTEXT_LENGTH_EXCEEDED ? "session.instructions" : NULL,
                             event_id, "the instructions do not fit the model's context", 0);
    send_session_event(s, 0);
    gw_tenant_at(k->gw, s->tenant)->m.sessions_opened++;
    fg_log_at(FG_LOG_INFO, "session_created", gw_session_tenant(s), s->id, NULL);
}

/* A pending quota call, found again by session id: the session may be gone by the answer. */
typedef struct quota_ctx {
    fg_gateway_t *gw;
    char session_id[48];
    char event_id[FG_PROTO_MAX_ID_BYTES + 1];
    bool has_event_id;
    fg_response_params rp;   /* response.create: the engine parameters */
    bool generate;
    bool resume;             /* session.open for a session restored from disk: answer session.resumed */
} quota_ctx;

static quota_ctx *quota_ctx_new_id(gw_session *s, const char *event_id)
{
    quota_ctx *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->gw = s->gw;
    snprintf(q->session_id, sizeof q->session_id, "%s", s->id);
    if (event_id) {
        q->has_event_id = true;
        snprintf(q->event_id, sizeof q->event_id, "%s", event_id);
    }
    return q;
}

static quota_ctx *quota_ctx_new(gw_session *s, const fg_client_event *ev)
{
    return quota_ctx_new_id(s, ev->has_event_id ? ev->event_id.ptr : NULL);
}

/* Protocol code and param for a quota refusal. */
static fg_proto_code quota_code(fg_quota_verdict v, const char **param)
{
    *param = NULL;
    switch (v) {
    case FG_QUOTA_SESSIONS: return FG_PROTO_TOO_MANY_SESSIONS;
    case FG_QUOTA_RESPONSES:
    case FG_QUOTA_TOKENS_PER_MINUTE: return FG_PROTO_RATE_LIMIT_EXCEEDED;
    case FG_QUOTA_DAILY_TOKENS: return FG_PROTO_INSUFFICIENT_QUOTA;
    case FG_QUOTA_KV_BYTES: return FG_PROTO_KV_UNAVAILABLE;
    case FG_QUOTA_CONTEXT: return FG_PROTO_CONTEXT_LENGTH_EXCEEDED;
    case FG_QUOTA_OUTPUT: *param = "response.max_output_tokens"; return FG_PROTO_INVALID_VALUE;
    case FG_QUOTA_UNAVAILABLE: return FG_PROTO_QUOTA_UNAVAILABLE;
    default: return FG_PROTO_INTERNAL_ERROR;
    }
}

/* What a refused session lease says: its verdict in words. */
static const char *refusal_message(fg_quota_verdict v, char *buf, size_t cap)
{
    switch (v) {
    case FG_QUOTA_SESSIONS: return "the tenant's concurrent-session quota is reached";
    case FG_QUOTA_UNAVAILABLE: return "quotas cannot be checked now (Redis unreachable)";
    default:
        snprintf(buf, cap, "the quota service refused the session (%s)", fg_quota_verdict_name(v));
        return buf;
    }
}

static uint32_t retry_seconds(double s)
{
    return s <= 0 ? 0 : s < 1 ? 1 : (uint32_t)(s + 0.999);
}

/* retry_after of a quota refusal as the protocol has it: none for the codes
 * without one (too_many_sessions, invalid_value, context_length_exceeded), at
 * least 1 s for the others (quota_unavailable's verdict carries 0). */
static uint32_t quota_retry(const fg_quota_result *r)
{
    const char *param;
    switch (quota_code(r->verdict, &param)) {
    case FG_PROTO_RATE_LIMIT_EXCEEDED:
    case FG_PROTO_INSUFFICIENT_QUOTA:
    case FG_PROTO_KV_UNAVAILABLE:
    case FG_PROTO_QUOTA_UNAVAILABLE: {
        uint32_t s = retry_seconds(r->retry_after);
        return s ? s : 1;
    }
    default: return 0;
    }
}

static void on_session_lease(void *user, const fg_quota_result *r)
{
    quota_ctx *q = user;
    gw_session *s = gw_session_find(q->gw, q->session_id, strlen(q->session_id));
    if (!s) { /* gone meanwhile: give the lease back */
        free(q);
        return;
    }
    s->quota_pending = false;
    gw_sink *k = s->sink;
    if (r->verdict == FG_QUOTA_OK) {
        s->leased = true;
        if (k) {
            gw_sink_rx_update(k);
            if (q->resume)
                send_session_event(s, 2);
            else
                create_complete(k, s, q->has_event_id ? q->event_id : NULL);
        } else {
            gw_session_destroy(s, q->resume); /* the client left before its session existed */
        }
    } else if (k && q->resume) {
        /* A restored session refused by the quota: it goes back to disk, untouched. */
        const char *param;
        fg_proto_code code = quota_code(r->verdict, &param);
        gw_session_destroy(s, true);
        fg_proto_error err;
        char msg[128];
        fg_proto_error_set(&err, code, param, q->has_event_id ? q->event_id : NULL, "%s",
                           refusal_message(r->verdict, msg, sizeof msg));
        gw_sink_error(k, &err, quota_retry(r));
        gw_sink_rx_update(k);
    } else if (k) {
        gw_metrics_count_rejection(gw_tenant_at(q->gw, s->tenant), r->verdict);
        const char *param;
        fg_proto_code code = quota_code(r->verdict, &param);
        char msg[128];
        create_failed(k, s, code, param, q->has_event_id ? q->event_id : NULL,
                      refusal_message(r->verdict, msg, sizeof msg), quota_retry(r));
        gw_sink_rx_update(k);
    } else {
        gw_session_destroy(s, q->resume);
    }
    free(q);
}

/* The engine session of a session.create could not be made: a fork whose
 * source's file turned out damaged is session_lost (logged), the rest as the
 * engine's code has it. k NULL: the client left, only the log. */
static void create_engine_failed(gw_sink *k, const fg_client_event *ev, gw_session *src, fg_err e, const fg_diag *d)
{
    fg_proto_code code = src ? gw_engine_code(e) : FG_PROTO_INTERNAL_ERROR;
    if (code == FG_PROTO_SESSION_LOST) /* the source was on disk and its file is damaged */
        fg_log_at(FG_LOG_ERROR, "session_lost", gw_session_tenant(src), src->id, "\"error\":\"%s\"", fg_err_name(e));
    const char *param = src ? "session.fork_from" : NULL;
    if (k)
        fail(k, ev, code == FG_PROTO_SESSION_NOT_FOUND ? FG_PROTO_INTERNAL_ERROR : code, param, "%s",
             code == FG_PROTO_SESSION_LOST ? d->msg : "cannot create a session");
}

/* session.create once its engine session s exists (src: the session it forks,
 * or NULL): src's conversation and settings, then the event's, the tools'
 * check, the attach and the quota lease. The one path of a fork made at once
 * and of one made on gw_disk's worker. */
static void create_with(gw_sink *k, const fg_client_event *ev, gw_session *src, gw_session *s)
{
    fg_gateway_t *gw = k->gw;
    const fg_proto_session_params *p = &ev->u.session;
    if (src) {
        fg_proto_str ins = {src->instructions ? src->instructions : "", src->instructions_len};
        set_instructions(s, &ins);
        s->set = src->set;
        fg_tokens_push(&s->conv, src->conv.v, src->conv.n);
        s->restored_tail = src->restored_tail;
        s->restored_n = src->restored_n;
        gw_items_copy(&s->items, &src->items);
        s->tool_choice = src->tool_choice;
        memcpy(s->tool_choice_name, src->tool_choice_name, sizeof s->tool_choice_name);
        if (src->tools)
            s->tools = strdup(src->tools);
        /* src's head changed while the worker forked it (an item deleted, say): the fork
         * holds the cache as it was, so it is prefilled again at its first response */
        if (src->rebuild && s->cache_built)
            s->rebuild = true;
        /* The engine's fork holds src's conversation (its cache and the token its last
         * response sampled) but not src's queued input: the items src received since its
         * last response follow, from the conversation. */
        size_t queued = (size_t)src->new_input <= src->conv.n ? (size_t)src->new_input : 0;
        if (s->cache_built && queued &&
            append_tokens(s, s->conv.v + s->conv.n - queued, queued) != FG_PROTO_OK) {
            gw_session_destroy(s, false);
            return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "cannot copy the session's queued items");
        }
    }
    if (p->has_instructions && s->cache_built && s->conv.n) {
        s->rebuild = true; /* new instructions over the shared history: prefilled again at the first response */
    }
    if (p->has_instructions && !set_instructions(s, &p->instructions)) {
        gw_session_destroy(s, false);
        return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "out of memory");
    }
    apply_sampling(&s->set, &p->sampling);
    s->ga = k->ga;
    s->beta = k->ga && k->beta;
    snprintf(s->model, sizeof s->model, "%.64s", k->model[0] ? k->model : gw->model_id);
    if (!tools_ok(k, ev, s, p)) {
        gw_session_destroy(s, false);
        return;
    }
    if (!apply_ga(s, p)) {
        gw_session_destroy(s, false);
        return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "out of memory");
    }
    gw_session_attach(s, k, 0);
    quota_ctx *q = gw->quota ? quota_ctx_new(s, ev) : NULL;
    if (!q)
        return create_complete(k, s, ev->has_event_id ? ev->event_id.ptr : NULL);
    s->quota_pending = true; /* session.created waits for the lease */
    gw_sink_rx_update(k);
    fg_quota_session_open(gw->quota, gw_tenant_at(gw, s->tenant)->rec.id, s->id, on_session_lease, q);
}

/* A session.create with fork_from: gw_disk's worker makes the engine's fork
 * (fg_session_fork waits for the engine's step thread, and for a source on
 * disk may read its file), and the create goes on in on_forked.
 * The client's event does not outlive its dispatch, so it is copied, its
 * strings into blob. Meanwhile neither the forking client nor the source's
 * is read, and the source starts no response and is not freed (src->forks). */
struct gw_fork_wait {
    gw_sink *k;                     /* NULL once the client left */
    gw_session *src;
    gw_session *s;                  /* prepared: in no table until the fork is back */
    fg_client_event ev;             /* the session.create */
    char *blob;
};

static void fork_wait_free(struct gw_fork_wait *w)
{
    free(w->blob);
    free(w);
}

/* Copies ev (a session.create) into w, its strings into w->blob. */
static bool keep_event(struct gw_fork_wait *w, const fg_client_event *ev)
{
    w->ev = *ev;
    fg_proto_session_params *p = &w->ev.u.session;
    fg_proto_str *strs[6 + FG_PROTO_MAX_STOP] = {&w->ev.event_id, &p->instructions, &p->model,
                                                 &p->tools,       &p->tool_choice_name, &p->fork_from};
    size_t n = 6, bytes = 0;
    for (uint32_t i = 0; i < p->sampling.n_stop && i < FG_PROTO_MAX_STOP; i++)
        strs[n++] = &p->sampling.stop[i];
    for (size_t i = 0; i < n; i++)
        bytes += strs[i]->len + 1;
    char *at = w->blob = malloc(bytes);
    if (!at)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!strs[i]->ptr)
            continue; /* not given */
        memcpy(at, strs[i]->ptr, strs[i]->len);
        at[strs[i]->len] = 0;
        strs[i]->ptr = at;
        at += strs[i]->len + 1;
    }
    return true;
}

/* The worker's fork, on the service thread: session.create goes on as if the
 * fork had been made at once, unless the client left, the server began to
 * stop or the tenant's sessions filled up meanwhile. */
static void on_forked(void *user, fg_session_t *es, fg_err e, const fg_diag *diag)
{
    struct gw_fork_wait *w = user;
    gw_sink *k = w->k;
    gw_session *src = w->src;
    fg_gateway_t *gw = src->gw;
    gw_tenant *t = gw_tenant_at(gw, w->s->tenant);
    fg_diag d = *diag;
    if (k) {
        k->fork_wait = NULL;
        gw_sink_rx_update(k);
    }
    const bool stopping = gw->draining, full = t->sessions >= gw->cfg->sessions.max_per_tenant;
    gw_session *s = NULL;
    if (k && !stopping && !full) {
        s = gw_session_made(w->s, es, e, &e, &d);
    } else {
        if (es)
            fg_session_delete(es); /* never shown to a client: its file (if any) goes too */
        free(w->s);
    }
    if (s)
        create_with(k, &w->ev, src, s);
    else if (e != FG_OK && e != FG_ERR_UNSUPPORTED)
        create_engine_failed(k, &w->ev, src, e, &d);
    else if (k && stopping)
        fail(k, &w->ev, FG_PROTO_SHUTTING_DOWN, NULL, "%s", "the server is shutting down");
    else if (k) {
        gw_metrics_count_rejection(t, FG_QUOTA_SESSIONS); /* others were opened meanwhile */
        fail(k, &w->ev, FG_PROTO_TOO_MANY_SESSIONS, NULL, "%s", "the tenant's session limit is reached");
    }
    fg_log_at(FG_LOG_DEBUG, "session_fork_done", gw_session_tenant(src), src->id, "\"error\":\"%s\",\"client\":%s",
              fg_err_name(e), k ? "true" : "false");
    if (--src->forks == 0) {
        if (src->sink)
            gw_sink_rx_update(src->sink);
        if (src->doomed && !src->restoring) /* closed meanwhile */
            gw_session_destroy(src, src->doomed_keep_file);
    }
    fork_wait_free(w);
}

static void fork_on_worker(gw_sink *k, const fg_client_event *ev, gw_session *src)
{
    fg_gateway_t *gw = k->gw;
    fg_session_params sp;
    struct gw_fork_wait *w = calloc(1, sizeof *w);
    if (!w || !keep_event(w, ev) || !(w->s = gw_session_prepare(gw, k->tenant, NULL, &sp)) ||
        gw_disk_fork(gw->disk, src->es, &sp, on_forked, w) != FG_OK) {
        if (w) {
            free(w->s);
            fork_wait_free(w);
        }
        return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "out of memory");
    }
    w->k = k;
    w->src = src;
    src->forks++;
    k->fork_wait = w;
    gw_sink_rx_update(k);
    if (src->sink) /* its next response.create waits: a response would change what is forked */
        gw_sink_rx_update(src->sink);
    fg_log_at(FG_LOG_DEBUG, "session_fork_started", gw_session_tenant(src), src->id, "\"fork\":\"%s\"", w->s->id);
}

static void on_session_create(gw_sink *k, const fg_client_event *ev)
{
    fg_gateway_t *gw = k->gw;
    const fg_proto_session_params *p = &ev->u.session;
    if (k->session || k->dir_wait)
        return fail(k, ev, FG_PROTO_SESSION_EXISTS, NULL, "%s", "this connection already has a session");
    if (gw->draining)
        return fail(k, ev, FG_PROTO_SHUTTING_DOWN, NULL, "%s", "the server is shutting down");
    gw_session *src = NULL;
    if (p->has_fork_from) {
        src = gw_session_find(gw, p->fork_from.ptr, p->fork_from.len);
        if (!src || src->tenant != k->tenant)
            return fail(k, ev, FG_PROTO_SESSION_NOT_FOUND, "session.fork_from", "%s", "no such session");
        /* a response waiting for its quota's answer is in progress too (as response.create has it) */
        if (src->responding || src->quota_pending)
            return fail(k, ev, FG_PROTO_RESPONSE_IN_PROGRESS, "session.fork_from", "%s",
                        "the session to fork has a response in progress");
        if (src->cutting)
            return fail(k, ev, FG_PROTO_RESPONSE_IN_PROGRESS, "session.fork_from", "%s",
                        "the session to fork is having its conversation cut; retry once that is answered");
    }
    if (gw_tenant_at(gw, k->tenant)->sessions >= gw->cfg->sessions.max_per_tenant) {
        gw_metrics_count_rejection(gw_tenant_at(gw, k->tenant), FG_QUOTA_SESSIONS); /* this gateway's own cap */
        return fail(k, ev, FG_PROTO_TOO_MANY_SESSIONS, NULL, "%s", "the tenant's session limit is reached");
    }
    if (p->has_instructions && p->instructions.len > (size_t)gw->cfg->sessions.max_instructions_bytes)
        return fail(k, ev, FG_PROTO_INVALID_VALUE, "session.instructions", "%s",
                    "instructions are longer than the server allows");
    /* The engine makes a fork on its step thread, between steps: waiting for that here
     * would hold every connection for up to a step, so gw_disk's worker waits. */
    if (src && gw_session_forkable(src) && gw->disk)
        return fork_on_worker(k, ev, src);
    fg_diag d = {{0}};
    fg_err e;
    gw_session *s = gw_session_new(gw, k->tenant, src, &e, &d);
    if (!s)
        return create_engine_failed(k, ev, src, e, &d);
    create_with(k, ev, src, s);
}

static void on_session_update(gw_sink *k, const fg_client_event *ev)
{
    gw_session *s = k->session;
    const fg_proto_session_params *p = &ev->u.session;
    if (!tools_ok(k, ev, s, p))
        return;
    if (tools_change(s, p))
        s->rebuild = true; /* the head holds the tool declarations: prefilled again */
    if (p->has_instructions) {
        if (p->instructions.len > (size_t)k->gw->cfg->sessions.max_instructions_bytes)
            return fail(k, ev, FG_PROTO_INVALID_VALUE, "session.instructions", "%s",
                        "instructions are longer than the server allows");
        if (!set_instructions(s, &p->instructions))
            return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "out of memory");
        s->rebuild = true; /* the head changed: the whole conversation is prefilled again */
    }
    apply_sampling(&s->set, &p->sampling);
    if (!apply_ga(s, p))
        return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "out of memory");
    gw_session_store_meta(s);
    send_session_event(s, 1);
}

/* A session.resume waiting for its session file (gw_persist.c, off this thread). */
struct gw_resume_wait {
    gw_sink *k;                     /* NULL once the client left */
    fg_gateway_t *gw;
    int tenant;
    char session_id[48];            /* for the session directory (gw_cluster.c) when the restore fails */
    uint64_t last_seq;              /* the client's last_sequence_number */
    bool has_event_id;
    char event_id[FG_PROTO_MAX_ID_BYTES + 1];
};

void gw_cmd_sink_gone(gw_sink *k)
{
    if (k->resume_wait)
        k->resume_wait->k = NULL; /* the restore finishes; its session goes back to disk */
    k->resume_wait = NULL;
    if (k->fork_wait)
        k->fork_wait->k = NULL; /* the fork finishes; its engine session is deleted then */
    k->fork_wait = NULL;
}

static void resume_refused(gw_sink *k, const struct gw_resume_wait *w, fg_proto_code code, const char *param,
                           const char *msg)
{
    fg_proto_error err;
    fg_proto_error_set(&err, code, param, w->has_event_id ? w->event_id : NULL, "%s", msg);
    gw_sink_error(k, &err, 0);
}

/* The restore's end: the session joins the client that asked for it. */
static void on_restored(void *user, gw_session *s, fg_proto_code code, const char *msg)
{
    struct gw_resume_wait *w = user;
    gw_sink *k = w->k;
    fg_gateway_t *gw = w->gw;
    if (!s) /* the lease taken for it goes back (its epoch too when there is no such session) */
        gw_cluster_restore_failed(gw, w->tenant, w->session_id, strlen(w->session_id),
                                  code == FG_PROTO_SESSION_NOT_FOUND);
    if (!k) { /* the client left meanwhile */
        if (s)
            gw_session_destroy(s, true);
        free(w);
        return;
    }
    k->resume_wait = NULL;
    gw_sink_rx_update(k);
    if (!s) {
        resume_refused(k, w, code, code == FG_PROTO_INTERNAL_ERROR ? NULL : "session_id", msg);
    } else if (gw_tenant_at(gw, k->tenant)->sessions > gw->cfg->sessions.max_per_tenant) {
        gw_session_destroy(s, true); /* others were opened while it was read */
        resume_refused(k, w, FG_PROTO_TOO_MANY_SESSIONS, NULL, "the tenant's session limit is reached");
    } else {
        if (w->last_seq >= s->next_seq)
            s->next_seq = w->last_seq + 1;
        gw_session_attach(s, k, s->next_seq - 1);
        quota_ctx *q = gw->quota ? calloc(1, sizeof *q) : NULL;
        if (!q) {
            send_session_event(s, 2);
        } else {
            q->gw = gw;
            snprintf(q->session_id, sizeof q->session_id, "%s", s->id);
            q->has_event_id = w->has_event_id;
            memcpy(q->event_id, w->event_id, sizeof q->event_id);
            q->resume = true;
            s->quota_pending = true; /* session.resumed waits for the lease */
            gw_sink_rx_update(k);
            fg_quota_session_open(gw->quota, gw_tenant_at(gw, s->tenant)->rec.id, s->id, on_session_lease, q);
        }
    }
    free(w);
}

void gw_resume_restore(gw_sink *k, const char *id, size_t id_len, uint64_t last_seq, const char *event_id)
{
    fg_gateway_t *gw = k->gw;
    fg_proto_error err;
    if (gw_tenant_at(gw, k->tenant)->sessions >= gw->cfg->sessions.max_per_tenant) {
        gw_cluster_restore_failed(gw, k->tenant, id, id_len, false);
        fg_proto_error_set(&err, FG_PROTO_TOO_MANY_SESSIONS, NULL, event_id, "%s",
                           "the tenant's session limit is reached");
        return gw_sink_error(k, &err, 0);
    }
    struct gw_resume_wait *w = calloc(1, sizeof *w);
    if (!w) {
        gw_cluster_restore_failed(gw, k->tenant, id, id_len, false);
        fg_proto_error_set(&err, FG_PROTO_INTERNAL_ERROR, NULL, event_id, "%s", "out of memory");
        return gw_sink_error(k, &err, 0);
    }
    *w = (struct gw_resume_wait){.k = k, .gw = gw, .tenant = k->tenant, .last_seq = last_seq,
                                 .has_event_id = event_id != NULL};
    snprintf(w->session_id, sizeof w->session_id, "%.*s", (int)(id_len < sizeof w->session_id ? id_len : 0), id);
    if (event_id)
        snprintf(w->event_id, sizeof w->event_id, "%s", event_id);
    fg_proto_code code;
    char msg[400];
    if (!gw_session_restore(gw, k->tenant, id, id_len, on_restored, w, &code, msg, sizeof msg)) {
        free(w);
        gw_cluster_restore_failed(gw, k->tenant, id, id_len, code == FG_PROTO_SESSION_NOT_FOUND);
        fg_proto_error_set(&err, code, code == FG_PROTO_INTERNAL_ERROR ? NULL : "session_id", event_id, "%s", msg);
        return gw_sink_error(k, &err, 0);
    }
    k->resume_wait = w;
    gw_sink_rx_update(k);
}

/* session.resume of a session this process does not hold: restored from its
 * file (after a restart, or from another instance's: gw_cluster.c asks the
 * session directory first). Nothing is replayed (the resume buffer is not
 * saved); numbering continues above both the saved number and the client's. */
static void resume_from_disk(gw_sink *k, const fg_client_event *ev)
{
    const fg_proto_str *id = &ev->u.resume.session_id;
    const char *event_id = ev->has_event_id ? ev->event_id.ptr : NULL;
    if (gw_cluster_on(k->gw))
        return gw_cluster_resume(k, id->ptr, id->len, ev->u.resume.last_sequence_number, event_id);
    gw_resume_restore(k, id->ptr, id->len, ev->u.resume.last_sequence_number, event_id);
}

static void on_session_resume(gw_sink *k, const fg_client_event *ev)
{
    fg_gateway_t *gw = k->gw;
    if (k->session || k->dir_wait)
        return fail(k, ev, FG_PROTO_SESSION_EXISTS, NULL, "%s", "this connection already has a session");
    gw_session *s = gw_session_find(gw, ev->u.resume.session_id.ptr, ev->u.resume.session_id.len);
    if (s && s->tenant != k->tenant) /* the same answer for another tenant's session */
        return fail(k, ev, FG_PROTO_SESSION_NOT_FOUND, "session_id", "%s", "no such session");
    if (!s)
        return resume_from_disk(k, ev);
    if (s->restoring)
        return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "this session is being restored; retry");
    const uint64_t last = ev->u.resume.last_sequence_number, newest = s->next_seq - 1;
    if (last > newest)
        return fail(k, ev, FG_PROTO_INVALID_VALUE, "last_sequence_number", "%s",
                    "last_sequence_number is newer than the session's newest event");
    uint64_t oldest = s->ring.count ? gw_ring_at(&s->ring, 0)->seq : s->next_seq;
    if (last + 1 < oldest && !ev->u.resume.allow_gap)
        return fail(k, ev, FG_PROTO_SEQUENCE_EXPIRED, "last_sequence_number", "%s",
                    "some events after last_sequence_number have left the resume buffer");
    gw_session_attach(s, k, last);
    send_session_event(s, 2);
}

static void on_item_create(gw_sink *k, const fg_client_event *ev)
{
    gw_session *s = k->session;
    fg_proto_item item = ev->u.item;
    const char *last = gw_items_last_id(&s->items);
    if (ev->has_previous_item_id && (!last || strcmp(ev->previous_item_id.ptr, last) != 0))
        return fail(k, ev, FG_PROTO_INVALID_VALUE, "previous_item_id", "%s",
                    "items are appended: previous_item_id must be the last item's id (or left out)");
    char id[FG_PROTO_MAX_ID_BYTES + 1] = "";
    size_t at = 0;
    if (s->ga && item.id.len) { /* GA: the client may name its items; v1 ids are always the server's */
        for (size_t i = 0; i < s->items.n; i++)
            if (!strcmp(s->items.v[i].id, item.id.ptr))
                return fail(k, ev, FG_PROTO_INVALID_VALUE, "item.id", "%s", "an item with this id exists already");
        snprintf(id, sizeof id, "%s", item.id.ptr);
    }
    fg_tokens t = {0};
    fg_template_tail tail = gw_session_tail(s);
    if (fg_template_item(k->gw->tok, &tail, &item, &t) != FG_OK) {
        fg_tokens_free(&t);
        return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "cannot tokenize the item");
    }
    fg_proto_code code = s->rebuild ? FG_PROTO_OK : append_tokens(s, t.v, t.n);
    /* During a response the item follows its output (the engine queues it the same way);
     * an out-of-band response runs elsewhere, so the item goes in at once. */
    const bool deferred = s->responding && !s->resp_oob;
    at = deferred ? GW_ITEM_DEFERRED : s->conv.n;
    if (code == FG_PROTO_OK && fg_tokens_push(deferred ? &s->deferred : &s->conv, t.v, t.n) != FG_OK)
        code = FG_PROTO_INTERNAL_ERROR;
    const size_t n_tok = t.n;
    fg_tokens_free(&t);
    if (code != FG_PROTO_OK)
        return fail(k, ev, code, code == FG_PROTO_CONTEXT_LENGTH_EXCEEDED ? "item" : NULL, "%s",
                    code == FG_PROTO_CONTEXT_LENGTH_EXCEEDED ? "the item does not fit the model's context"
                                                             : "cannot add the item");
    if (!id[0]) /* numbered once the item is in: a refused item takes no id */
        snprintf(id, sizeof id, "item_%llu", (unsigned long long)++s->item_counter);
    char prev[FG_PROTO_MAX_ID_BYTES + 1] = "";
    if (last)
        snprintf(prev, sizeof prev, "%s", last);
    item.id = (fg_proto_str){id, strlen(id)};
    if (!gw_items_push(&s->items, &item, id, at, n_tok, false))
        fg_log_at(FG_LOG_ERROR, "item_not_kept", gw_session_tenant(s), s->id, "\"reason\":\"out_of_memory\"");
    if (s->ga && s->items.n && !strcmp(s->items.v[s->items.n - 1].id, id))
        return gw_ga_item_added(s, &s->items.v[s->items.n - 1], last ? prev : NULL);
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_item_added(&k->gw->scratch, em.seq, em.evt, &item));
}

static uint64_t random_seed(void)
{
    const uint64_t v = fg_random_seed();
    return v & ((UINT64_C(1) << 53) - 1);
}

/* Sends rate_limits.updated with the quota's view at response start. */
static void send_rate_limits(gw_session *s, const fg_quota_result *r)
{
    fg_proto_rate_limit rl[FG_QUOTA_MAX_STATES];
    size_t n = 0;
    for (int i = 0; i < r->n_states && n < FG_QUOTA_MAX_STATES; i++) {
        const fg_quota_limit_state *st = &r->states[i];
        /* the protocol names the per-minute token limit "tokens" */
        const char *name = st->name && !strcmp(st->name, "tokens_per_minute") ? "tokens" : st->name;
        if (!name)
            continue;
        rl[n++] = (fg_proto_rate_limit){name, (uint64_t)(st->limit > 0 ? st->limit : 0),
                                        (uint64_t)(st->remaining > 0 ? st->remaining : 0), st->reset_seconds};
    }
    if (!n)
        return;
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_rate_limits(&s->gw->scratch, em.seq, em.evt, rl, n));
}

/* The second half of response.create, once the quota admitted it (or there is no quota). */
/* An out-of-band response that will not run: its engine session goes. */
static void drop_oob(gw_session *s)
{
    if (s->oob_es)
        fg_session_delete(s->oob_es);
    s->oob_es = NULL;
    s->resp_oob = false;
    free(s->resp_metadata);
    s->resp_metadata = NULL;
}

static void respond_complete(gw_session *s, fg_response_params *rp, const char *event_id, const fg_quota_result *qr)
{
    fg_gateway_t *gw = s->gw;
    gw_sink *k = s->sink;
    fg_proto_error err;
    fg_diag d = {{0}};
    fg_proto_code code = FG_PROTO_OK;
    const char *msg = NULL;
    /* an out-of-band response runs in its own engine session; the conversation is untouched */
    fg_session_t *target = s->resp_oob ? s->oob_es : s->es;
    const size_t item_start = s->conv.n;
    if (rp->generate) {
        fg_tokens t = {0};
        fg_template_tail tail = s->resp_oob ? s->oob_tail : gw_session_tail(s);
        code = fg_template_reply(gw->tok, &tail, &t) == FG_OK ? FG_PROTO_OK : FG_PROTO_INTERNAL_ERROR;
        /* A forced tool call's opening: prompt for the engine, but the reply's tokens in the conversation
         * (in the message item's range), as the next turn's rendering of the assistant turn writes them. */
        const fg_tokens *pre = gw_tools_prefix(s);
        if (code == FG_PROTO_OK && pre && fg_tokens_push(&t, pre->v, pre->n) != FG_OK)
            code = FG_PROTO_INTERNAL_ERROR;
        /* The marker and a token to generate fit, or nothing is appended: a refusal leaves the session as it was. */
        if (code == FG_PROTO_OK && (size_t)fg_session_room(target) < t.n + 1)
            code = FG_PROTO_CONTEXT_LENGTH_EXCEEDED;
        else if (code == FG_PROTO_OK && s->resp_oob)
            code = gw_engine_code(fg_session_append(target, t.v, (int)t.n, &d));
        else if (code == FG_PROTO_OK)
            code = append_tokens(s, t.v, t.n);
        if (code == FG_PROTO_OK && !s->resp_oob) /* the reply closes its own turn; items added meanwhile follow it */
            fg_tokens_push(&s->conv, t.v, t.n);
        fg_tokens_free(&t);
        msg = "no room left in the model's context for a reply";
    }
    if (code == FG_PROTO_OK) {
        gw_session_store_meta(s); /* saved with the cache once this response completes */
        fg_err e = fg_session_respond(target, rp, &s->engine_response, &d);
        code = gw_engine_code(e);
        msg = d.msg;
    }
    if (code != FG_PROTO_OK) {
        if (gw->quota && s->reserved) /* give the reservation back */
            fg_quota_response_settle(gw->quota, gw_tenant_at(gw, s->tenant)->rec.id, s->quota_key, s->reserved, 0);
        s->reserved = 0;
        drop_oob(s);
        if (k) {
            fg_proto_error_set(&err, code, NULL, event_id, "%s", msg);
            gw_sink_error(k, &err, 0);
        }
        return;
    }
    if (!s->resp_oob) /* the session's own queued input is not consumed by an out-of-band response */
        s->new_input = 0;
    s->responding = true;
    gw->n_generated += rp->generate;
    s->resp_tokens = 0;
    s->resp_last_token_at = 0;
    gw_hist_observe(&gw->metrics.queue, fg_clock_mono_s() - s->resp_created_at);
    gw_tenant_at(gw, s->tenant)->m.responses_started++;
    snprintf(s->resp_id, sizeof s->resp_id, "resp_%llu", (unsigned long long)++s->resp_counter);
    snprintf(s->item_id, sizeof s->item_id, "item_%llu", (unsigned long long)++s->item_counter);
    memset(&s->carry, 0, sizeof s->carry);
    s->pending_len = s->out_len = 0;
    s->resp_max_output = (uint32_t)rp->max_tokens;
    gw_emit em = gw_emit_next(s);
    if (s->ga) {
        const fg_proto_response_ga ga = {.conversation_id = s->resp_oob ? NULL : s->id, .metadata = s->resp_metadata,
                                         .max_output_tokens = s->resp_max_output};
        gw_emit_push(s, em, fg_proto_write_response_created_ga(&gw->scratch, em.seq, em.evt, s->resp_id, &ga));
    } else {
        gw_emit_push(s, em, fg_proto_write_response_created(&gw->scratch, em.seq, em.evt, s->resp_id));
    }
    if (qr)
        send_rate_limits(s, qr);
    if (rp->generate && s->ga) {
        gw_ga_response_begin(s, item_start);
    } else if (rp->generate) { /* the assistant message the deltas fill, empty for now */
        fg_proto_item out = {.type = FG_PROTO_ITEM_MESSAGE, .id = {s->item_id, strlen(s->item_id)},
                             .role = FG_PROTO_ROLE_ASSISTANT, .n_content = 1};
        out.content[0] = (fg_proto_part){FG_PROTO_PART_OUTPUT_TEXT, {"", 0}};
        em = gw_emit_next(s);
        gw_emit_push(s, em, fg_proto_write_item_added(&gw->scratch, em.seq, em.evt, &out));
    }
    if (rp->generate)
        gw_tools_prefill(s); /* the forced call's opening, as if the model wrote it */
}

static void on_reserved(void *user, const fg_quota_result *r)
{
    quota_ctx *q = user;
    fg_gateway_t *gw = q->gw;
    gw_session *s = gw_session_find(gw, q->session_id, strlen(q->session_id));
    if (!s) {
        free(q);
        return; /* the session closed meanwhile; its destroy settled the reservation */
    }
    s->quota_pending = false;
    const char *event_id = q->has_event_id ? q->event_id : NULL;
    if (r->verdict == FG_QUOTA_OK) {
        respond_complete(s, &q->rp, event_id, r);
    } else {
        s->reserved = 0;
        drop_oob(s);
        if (s->sink) {
            const char *param;
            fg_proto_code code = quota_code(r->verdict, &param);
            char msg[160];
            snprintf(msg, sizeof msg, "over the tenant's %s quota%s", fg_quota_verdict_name(r->verdict),
                     r->degraded ? " (local backstop: Redis unreachable)" : "");
            fg_proto_error err;
            fg_proto_error_set(&err, code, param, event_id, "%s", msg);
            gw_sink_error(s->sink, &err, quota_retry(r));
        }
        gw_metrics_count_rejection(gw_tenant_at(gw, s->tenant), r->verdict);
        fg_log_at(FG_LOG_INFO, "quota_rejected", gw_session_tenant(s), s->id, "\"limit\":\"%s\"",
                  fg_quota_verdict_name(r->verdict));
    }
    if (s->sink)
        gw_sink_rx_update(s->sink);
    free(q);
}

/* Appends to the out-of-band engine session. */
static fg_proto_code oob_append(gw_session *s, const int32_t *t, size_t n)
{
    fg_diag d;
    fg_err e = fg_session_append(s->oob_es, t, (int)n, &d);
    if (e == FG_OK)
        s->oob_input += (int64_t)n;
    return gw_engine_code(e);
}

/* The engine parameters of an out-of-band session: anonymous, never saved. */
static void oob_params(gw_session *s, fg_session_params *sp)
{
    const gw_tenant *t = gw_tenant_at(s->gw, s->tenant);
    int64_t w = t->rec.limits.weight;
    *sp = (fg_session_params){.tenant = (uint32_t)s->tenant, .weight = w < 1 ? 1 : w > 1000 ? 1000 : (int)w,
                              .user = s, .name = NULL, .tenant_name = t->rec.id};
}

/* Whether an out-of-band response's context is a fork of the session: no
 * input or instructions of its own, and the session's cache is its
 * conversation. */
static bool oob_forks(const gw_session *s, const fg_client_event *ev)
{
    return !ev->u.response.has_input && !ev->u.response.has_instructions && !s->rebuild && s->conv_known;
}

/* A fork made (es, e) as an out-of-band context: the items queued since the
 * session's last response follow (the fork holds the cache, not them). */
static fg_proto_code oob_forked(gw_session *s, fg_session_t *es)
{
    s->oob_es = es;
    s->oob_tail = gw_session_tail(s); /* the reply follows the session's conversation */
    size_t queued = (size_t)s->new_input <= s->conv.n ? (size_t)s->new_input : 0;
    return queued ? oob_append(s, s->conv.v + s->conv.n - queued, queued) : FG_PROTO_OK;
}

/* The context of an out-of-band response: with input, the instructions (the
 * response's or the session's) and those items alone; without, a fork of the
 * session (its cache shared; on gw_disk's worker, see oob_on_worker, where
 * there is one) or, where the engine cannot fork, a copy prefilled again.
 * Discarded at response.done. */
static fg_proto_code open_oob(gw_session *s, const fg_client_event *ev, bool try_fork)
{
    fg_gateway_t *gw = s->gw;
    fg_session_params sp;
    oob_params(s, &sp);
    fg_diag d = {{0}};
    s->resp_oob = true;
    s->oob_input = 0;
    fg_session_t *es = NULL;
    fg_err e = try_fork && oob_forks(s, ev) ? fg_session_fork(s->es, &sp, &es, &d) : FG_ERR_UNSUPPORTED;
    if (e == FG_OK)
        return oob_forked(s, es);
    s->oob_es = NULL;
    if (fg_session_create(gw->engine, &sp, &s->oob_es) != FG_OK) {
        s->oob_es = NULL;
        return FG_PROTO_INTERNAL_ERROR;
    }
    const bool own = ev->u.response.has_instructions;
    const char *ins = own ? ev->u.response.instructions.ptr : s->instructions ? s->instructions : "";
    fg_tokens tok = {0};
    fg_proto_code code = (own ? fg_template_head(gw->tok, ins, ev->u.response.instructions.len, &tok)
                              : gw_session_head(s, &tok, &d)) == FG_OK
                             ? FG_PROTO_OK
                             : FG_PROTO_INTERNAL_ERROR;
    if (code == FG_PROTO_OK)
        code = oob_append(s, tok.v, tok.n);
    s->oob_tail = FG_TEMPLATE_TAIL_NONE;
    if (code == FG_PROTO_OK && !ev->u.response.has_input && s->conv.n) {
        code = oob_append(s, s->conv.v, s->conv.n);
        s->oob_tail = gw_session_tail(s);
    }
    for (uint32_t i = 0; code == FG_PROTO_OK && i < ev->u.response.n_input; i++) {
        tok.n = 0;
        code = fg_template_item(gw->tok, &s->oob_tail, &ev->u.response.input[i], &tok) == FG_OK ? oob_append(s, tok.v, tok.n)
                                                                                  : FG_PROTO_INTERNAL_ERROR;
    }
    fg_tokens_free(&tok);
    return code;
}

static void respond_with(gw_session *s, const gw_settings *set, bool generate, const char *event_id);

/* An out-of-band context that could not be made: the response does not run. */
static void oob_failed(gw_session *s, fg_proto_code code, const char *event_id)
{
    drop_oob(s);
    if (!s->sink)
        return;
    fg_proto_error err;
    fg_proto_error_set(&err, code, code == FG_PROTO_CONTEXT_LENGTH_EXCEEDED ? "response.input" : NULL, event_id, "%s",
                       code == FG_PROTO_CONTEXT_LENGTH_EXCEEDED ? "the response's context does not fit the model's"
                                                                : "cannot make the out-of-band response's context");
    gw_sink_error(s->sink, &err, 0);
}

/* An out-of-band response whose fork of the session gw_disk's worker makes
 * (fg_session_fork waits for the engine's step): the response goes on in
 * on_oob_forked. Meanwhile the session is a fork's source (s->forks): its
 * client is not read, so its later events follow the response's, in order. */
typedef struct oob_wait {
    gw_session *s;
    gw_settings set;                /* the response's settings */
    bool generate;
    bool has_event_id;
    char event_id[FG_PROTO_MAX_ID_BYTES + 1];
} oob_wait;

static void on_oob_forked(void *user, fg_session_t *es, fg_err e, const fg_diag *diag)
{
    (void)diag;
    oob_wait *w = user;
    gw_session *s = w->s;
    const char *event_id = w->has_event_id ? w->event_id : NULL;
    --s->forks;
    if (s->sink)
        gw_sink_rx_update(s->sink);
    fg_log_at(FG_LOG_DEBUG, "session_oob_fork_done", gw_session_tenant(s), s->id, "\"error\":\"%s\"", fg_err_name(e));
    if (s->doomed) { /* closed meanwhile: the fork goes with it */
        if (es)
            fg_session_delete(es);
        if (s->forks == 0 && !s->restoring && !s->cutting)
            gw_session_destroy(s, s->doomed_keep_file);
        free(w);
        return;
    }
    fg_proto_code code = FG_PROTO_OK;
    if (s->gw->draining) { /* the drain began meanwhile: no new response */
        if (es)
            fg_session_delete(es);
        drop_oob(s);
        if (s->sink) {
            fg_proto_error err;
            fg_proto_error_set(&err, FG_PROTO_SHUTTING_DOWN, NULL, event_id, "%s", "the server is shutting down");
            gw_sink_error(s->sink, &err, 0);
        }
        free(w);
        return;
    }
    if (e == FG_OK)
        code = oob_forked(s, es);
    else if (e == FG_ERR_UNSUPPORTED || e == FG_ERR_BUSY) /* no fork: a copy prefilled again */
        code = open_oob(s, &(fg_client_event){0}, false);
    else
        code = FG_PROTO_INTERNAL_ERROR;
    if (code != FG_PROTO_OK)
        oob_failed(s, code, event_id);
    else
        respond_with(s, &w->set, w->generate, event_id);
    free(w);
}

static void oob_on_worker(gw_session *s, const gw_settings *set, bool generate, const char *event_id)
{
    fg_session_params sp;
    oob_params(s, &sp);
    oob_wait *w = calloc(1, sizeof *w);
    if (w) {
        *w = (oob_wait){.s = s, .set = *set, .generate = generate, .has_event_id = event_id != NULL};
        if (event_id)
            snprintf(w->event_id, sizeof w->event_id, "%s", event_id);
    }
    s->resp_oob = true;
    s->oob_input = 0;
    if (!w || gw_disk_fork(s->gw->disk, s->es, &sp, on_oob_forked, w) != FG_OK) {
        free(w);
        return oob_failed(s, FG_PROTO_INTERNAL_ERROR, event_id);
    }
    s->forks++;
    if (s->sink)
        gw_sink_rx_update(s->sink);
    fg_log_at(FG_LOG_DEBUG, "session_oob_fork_started", gw_session_tenant(s), s->id, NULL);
}

static void on_response_create(gw_sink *k, const fg_client_event *ev)
{
    fg_gateway_t *gw = k->gw;
    gw_session *s = k->session;
    if (s->responding || s->quota_pending)
        return fail(k, ev, FG_PROTO_RESPONSE_IN_PROGRESS, NULL, "%s", "a response is already in progress");
    /* its client is not read meanwhile: this is an event read before that, or another transport's */
    if (s->forks)
        return fail(k, ev, FG_PROTO_RESPONSE_IN_PROGRESS, NULL, "%s",
                    "the session is being forked from its file; retry once the fork's session.created is sent");
    if (s->cutting)
        return fail(k, ev, FG_PROTO_RESPONSE_IN_PROGRESS, NULL, "%s",
                    "the session's conversation is being cut; retry once the item's answer is sent");
    if (gw->draining)
        return fail(k, ev, FG_PROTO_SHUTTING_DOWN, NULL, "%s", "the server is shutting down");
    if (!gw_cluster_holds(s)) /* its lease lapsed (this instance was paused or cut off): another may serve it */
        return gw_cluster_moved(s, ev->has_event_id ? ev->event_id.ptr : NULL);
    s->resp_created_at = fg_clock_mono_s();
    if (ev->u.response.has_metadata && !(s->resp_metadata = strdup(ev->u.response.metadata.ptr)))
        return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "out of memory");
    gw_settings set = s->set; /* the session's, under this response's overrides */
    apply_sampling(&set, &ev->u.response.sampling);
    const char *event_id = ev->has_event_id ? ev->event_id.ptr : NULL;
    if (ev->u.response.out_of_band && oob_forks(s, ev) && gw->disk)
        return oob_on_worker(s, &set, ev->u.response.generate, event_id);
    if (ev->u.response.out_of_band) {
        fg_proto_code code = open_oob(s, ev, true);
        if (code != FG_PROTO_OK)
            return oob_failed(s, code, event_id);
    } else if (s->rebuild) {
        if (!s->conv_known)
            return fail(k, ev, FG_PROTO_SESSION_LOST, NULL, "%s",
                        "this session was restored without its token history, so its instructions cannot change; "
                        "start a new session");
        /* Checked before anything is replaced: a refusal leaves the session, and its file, as they were. */
        if (!gw_session_rebuild_fits(s, ev->u.response.generate))
            return fail(k, ev, FG_PROTO_CONTEXT_LENGTH_EXCEEDED, NULL, "%s",
                        "the conversation does not fit the model's context");
        /* The old file stays until the new session of the same name writes its own. */
        fg_session_free(s->es);
        const gw_tenant *t = gw_tenant_at(gw, s->tenant);
        int64_t w = t->rec.limits.weight;
        fg_session_params sp = {.tenant = (uint32_t)s->tenant, .weight = w < 1 ? 1 : w > 1000 ? 1000 : (int)w,
                                .user = s, .name = s->id, .tenant_name = t->rec.id};
        if (fg_session_create(gw->engine, &sp, &s->es) != FG_OK) {
            /* the name may not be free yet: an anonymous session works, unsaved until the next rebuild */
            sp.name = NULL;
            if (fg_session_create(gw->engine, &sp, &s->es) != FG_OK) {
                s->es = NULL;
                fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "out of memory");
                return gw_session_close(s, "evicted");
            }
            fg_log_at(FG_LOG_WARN, "session_unnamed", gw_session_tenant(s), s->id, NULL);
        }
        s->rebuild = false;
        fg_proto_code code = rebuild_engine_session(s);
        if (code != FG_PROTO_OK)
            return fail(k, ev, code, NULL, "%s", "the conversation does not fit the model's context");
    }
    respond_with(s, &set, ev->u.response.generate, event_id);
}

/* The rest of response.create once its context is ready: the engine's
 * parameters from set, then the quota's reservation or the response. */
static void respond_with(gw_session *s, const gw_settings *sset, bool generate, const char *event_id)
{
    fg_gateway_t *gw = s->gw;
    gw_settings set = *sset;
    fg_response_params rp = {.generate = generate};
    rp.sampling.temperature = (float)set.temperature;
    rp.sampling.top_p = (float)set.top_p;
    rp.sampling.top_k = (int)set.top_k;
    rp.sampling.min_p = (float)set.min_p;
    rp.sampling.seed = set.has_seed ? set.seed : random_seed();
    rp.max_tokens = set.max_output_tokens > (uint32_t)gw->n_ctx ? gw->n_ctx : (int)set.max_output_tokens; /* "inf": until the context is full */
    rp.n_stop = (int)set.n_stop;
    _Static_assert(sizeof rp.stop == sizeof set.stop, "stop strings: one layout");
    memcpy(rp.stop, set.stop, sizeof rp.stop);
    if (!gw_tools_begin(s, &rp)) {
        drop_oob(s);
        if (s->sink) {
            fg_proto_error err;
            fg_proto_error_set(&err, FG_PROTO_INTERNAL_ERROR, NULL, event_id, "%s", "out of memory");
            gw_sink_error(s->sink, &err, 0);
        }
        return;
    }
    if (rp.generate && gw->n_generated < gw->n_scripts) { /* debug.scripted_output: tests only */
        rp.script = gw->scripts[gw->n_generated].v;
        rp.n_script = (int)gw->scripts[gw->n_generated].n;
    }
    quota_ctx *q = gw->quota ? quota_ctx_new_id(s, event_id) : NULL;
    if (!q)
        return respond_complete(s, &rp, event_id, NULL);
    /* Reserve all the work the response can do, so that admitting many at once cannot pass the
     * limit: the input to prefill (the session's new items, or all an out-of-band session was
     * given), the reply marker as this vocabulary spells it and a forced call's opening, the
     * previous reply's last token (sampled, never fed back until now) and the whole output
     * budget; response.done settles to what was used. */
    q->rp = rp;
    const int64_t out_budget = rp.generate ? rp.max_tokens : 0;
    s->reserved = (s->resp_oob ? s->oob_input : s->new_input) + 1 + out_budget;
    if (rp.generate) {
        fg_tokens reply = {0};
        fg_template_tail tail = s->resp_oob ? s->oob_tail : gw_session_tail(s); /* only counted here */
        s->reserved += fg_template_reply(gw->tok, &tail, &reply) == FG_OK ? (int64_t)reply.n : 8;
        fg_tokens_free(&reply);
        const fg_tokens *pre = gw_tools_prefix(s);
        s->reserved += pre ? (int64_t)pre->n : 0;
    }
    snprintf(s->quota_key, sizeof s->quota_key, "%s:%llu", s->id, (unsigned long long)s->resp_counter + 1);
    s->quota_pending = true;
    if (s->sink)
        gw_sink_rx_update(s->sink);
    fg_quota_response_reserve(gw->quota, gw_tenant_at(gw, s->tenant)->rec.id, s->quota_key, s->reserved,
                              gw_tenant_kv_bytes(gw, s->tenant),
                              (s->conv_known ? (int64_t)s->conv.n : fg_session_length(s->es) + s->new_input) +
                                  out_budget,
                              out_budget,
                              on_reserved, q);
}

static void on_response_cancel(gw_sink *k, const fg_client_event *ev)
{
    gw_session *s = k->session;
    const bool named = ev->u.cancel.has_response_id;
    if (!s->responding || (named && strcmp(ev->u.cancel.response_id.ptr, s->resp_id) != 0))
        return fail(k, ev, FG_PROTO_NO_RESPONSE_IN_PROGRESS, named ? "response_id" : NULL, "%s",
                    named ? "that response is not in progress" : "no response is in progress");
    gw_session_cancel(s); /* response.done (cancelled) follows from the engine */
}

static void close_as(gw_session *s, const char *reason, bool keep_file)
{
    fg_gateway_t *gw = s->gw;
    gw_sink *k = s->sink;
    if (!k) { /* detached: nobody to tell */
        fg_log_at(FG_LOG_INFO, "session_closed", gw_session_tenant(s), s->id, "\"reason\":\"%s\"", reason);
        gw_session_destroy(s, keep_file);
        return;
    }
    /* The session goes now: its unwritten events, then session.closed (its last
     * number), move to the sink's own queue, in order. */
    gw_session_flush_delta(s);
    if (s->responding) { /* the response ends with the session */
        fg_proto_response_done d = {.id = s->resp_id, .status = FG_PROTO_RESPONSE_CANCELLED,
                                    .reason = "session_closed", .usage = {.output_tokens = s->resp_tokens}};
        gw_emit em = gw_emit_next(s);
        gw_emit_push(s, em, fg_proto_write_response_done(&gw->scratch, em.seq, em.evt, &d));
    }
    for (uint32_t i = 0; i < s->ring.count; i++) {
        const gw_event *e = gw_ring_at(&s->ring, i);
        if (e->seq > s->sent_seq)
            k->ops->push(k, e->seq, e->buf + LWS_PRE, e->len);
    }
    uint64_t seq = gw_session_take_seq(s), evt = ++s->evt_counter;
    if (fg_proto_write_session_closed(&gw->scratch, seq, evt, s->id, reason) == FG_OK)
        k->ops->push(k, seq, fg_proto_buf_text(&gw->scratch), gw->scratch.len);
    fg_log_at(FG_LOG_INFO, "session_closed", gw_session_tenant(s), s->id, "\"reason\":\"%s\"", reason);
    gw_session_destroy(s, keep_file);
    gw_sink_request_write(k);
    gw_sink_output_changed(k);
}

void gw_session_close(gw_session *s, const char *reason)
{
    close_as(s, reason, false);
}

void gw_session_close_kept(gw_session *s, const char *reason)
{
    close_as(s, reason, true);
}

static void on_session_close(gw_sink *k, const fg_client_event *ev)
{
    (void)ev;
    gw_session_close(k->session, "client_requested"); /* and its file goes */
}

void gw_cmd_dispatch(gw_sink *k, const fg_client_event *ev)
{
    if (k->resume_wait) /* read before the reading paused: the restore answers first */
        return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "a session.resume is in progress on this connection");
    if (k->fork_wait) /* the same: the fork answers first */
        return fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "%s", "a session.create is in progress on this connection");
    if (!k->session && ev->type != FG_CLIENT_SESSION_CREATE && ev->type != FG_CLIENT_SESSION_RESUME)
        return fail(k, ev, FG_PROTO_NO_SESSION, NULL, "%s", "send session.create or session.resume first");
    if (k->session)
        k->session->last_activity = fg_clock_mono_s();
    switch (ev->type) {
    case FG_CLIENT_SESSION_CREATE: on_session_create(k, ev); break;
    case FG_CLIENT_SESSION_UPDATE: on_session_update(k, ev); break;
    case FG_CLIENT_SESSION_RESUME: on_session_resume(k, ev); break;
    case FG_CLIENT_ITEM_CREATE: on_item_create(k, ev); break;
    case FG_CLIENT_RESPONSE_CREATE: on_response_create(k, ev); break;
    case FG_CLIENT_RESPONSE_CANCEL: on_response_cancel(k, ev); break;
    case FG_CLIENT_SESSION_CLOSE: on_session_close(k, ev); break;
    case FG_CLIENT_ITEM_RETRIEVE:
    case FG_CLIENT_ITEM_DELETE:
    case FG_CLIENT_ITEM_TRUNCATE: gw_ga_item_command(k, ev); break;
    }
}

