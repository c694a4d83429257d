/* openai_sink.c: an OpenAI HTTP call as a session's sink (openai_sink.h).
 * The session layer calls the sink from inside an event being pushed, so the
 * sink only copies the reply's new text and schedules a step; the step (a
 * zero-delay timer on the service thread) reads the session's events in
 * order and acts: session.created -> the items and response.create;
 * response.created -> the surface starts; the text as it grows; response.done
 * or an error -> the surface answers, and the call ends: the session goes, or
 * (a stored response) stays detached for the next call to continue. The quota
 * lease, reservation and metrics are the session layer's, as for a realtime
 * session. Service thread only. */
#include "gateway/openai_sink.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/base/bytes.h"
#include "gateway/log.h"
#include "gateway/openai_http.h"
#include "gateway/openai_req.h"

enum { CALL_IDLE, CALL_CREATING, CALL_RESPONDING, CALL_DONE };

void gw_oa_write(gw_oa_call *c, const char *bytes, size_t n)
{
    if (c->capturing_ && !fg_bytes_append(&c->cap_, &c->cap_len_, &c->cap_cap_, bytes, n))
        c->cap_failed_ = true;
    if (!c->req && !c->ws)
        return;
    if (c->streaming && c->req)
        gw_http_stream_write(c->req, bytes, n);
    else if (!fg_bytes_append(&c->body_, &c->body_len_, &c->body_cap_, bytes, n)) /* a whole reply being built */
        c->body_failed_ = true;
}

void gw_oa_capture_begin(gw_oa_call *c)
{
    c->capturing_ = true;
    c->cap_failed_ = false;
    c->cap_len_ = 0;
}

char *gw_oa_capture_end(gw_oa_call *c, size_t *len)
{
    c->capturing_ = false;
    if (c->cap_failed_ || !c->cap_)
        return NULL;
    char *out = c->cap_;
    *len = c->cap_len_;
    c->cap_ = NULL;
    c->cap_len_ = c->cap_cap_ = 0;
    return out;
}

void gw_oa_reply(gw_oa_call *c)
{
    if (!c->req)
        return;
    if (c->body_failed_ || !c->body_)
        return gw_openai_error(c->req, 500, "server_error", "internal_error", NULL, "out of memory");
    gw_http_reply(c->req, 200, c->body_);
}

void gw_oa_writef(gw_oa_call *c, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        gw_oa_write(c, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

const char *gw_oa_json_text(gw_oa_call *c, const char *text, size_t n, size_t *len)
{
    c->esc.len = 0;
    if (fg_proto_buf_put_json_string(&c->esc, text ? text : "", text ? n : 0) != FG_OK) {
        *len = 2;
        return "\"\"";
    }
    *len = c->esc.len;
    return c->esc.data + c->esc.pre;
}

void gw_oa_stream_begin(gw_oa_call *c)
{
    if (c->req && !c->streaming)
        gw_http_stream_begin(c->req, 200, "text/event-stream");
    if (c->req || c->ws)
        c->streaming = true;
}

void gw_oa_event_end(gw_oa_call *c)
{
    if (!c->ws)
        return; /* HTTP: the bytes are on the stream already */
    if (c->body_failed_ || !c->body_len_)
        fg_log(FG_LOG_ERROR, "event_dropped", "\"reason\":\"out_of_memory\"");
    else
        gw_conn_push_text(c->ws, c->body_, c->body_len_);
    c->body_len_ = 0;
    c->body_failed_ = false;
}

void gw_oa_stream_end(gw_oa_call *c)
{
    if (c->req)
        gw_http_stream_end(c->req); /* a WebSocket stays open for the next response.create */
}

void gw_oa_fail(gw_oa_call *c, unsigned status, const char *type, const char *code, const char *param, const char *msg)
{
    if (c->req)
        return gw_openai_error(c->req, status, type, code, param, msg);
    if (!c->ws)
        return;
    c->body_len_ = 0; /* nothing of an event is left half written */
    gw_rws_error(c->ws, status, type, code, param, msg); /* the mode's error event: the HTTP answer's status and error */
}

/* ---- the call's end ---- */

void gw_oa_call_free(gw_oa_call *c)
{
    gw_cluster_sink_gone(&c->sink); /* a wait on the session directory finds nobody */
    gw_session *s = c->sink.session;
    if (s && c->keep && c->state_ == CALL_DONE && !s->responding) {
        gw_session_detach(s); /* stored: the next call continues it, or the idle sweep ends it */
        if (c->ws)
            gw_conn_keep_unstored(c->ws, s, c->conn_local);
    } else if (s) {
        gw_session_destroy(s, false); /* a response still running is cancelled with it, its reservation settled */
    }
    if (c->ws)
        c->ws->rws_call = NULL;
    lws_sul_cancel(&c->step_);
    gw_ring_free(&c->own_);
    fg_proto_buf_free(&c->esc);
    if (c->surface->free)
        c->surface->free(c);
    free(c->text);
    free(c->body_);
    free(c->cap_);
    free(c);
}

static void on_gone(void *user)
{
    gw_oa_call *c = user;
    c->req = NULL;
    c->ws = NULL;
    c->keep = false; /* the client never saw the reply: nothing to continue */
    gw_oa_call_free(c);
}

void gw_oa_call_gone(gw_oa_call *c)
{
    c->ws->rws_call = NULL;
    on_gone(c);
}

static void call_fail(gw_oa_call *c, unsigned status, const char *type, const char *code, const char *param,
                      const char *msg)
{
    c->keep = false;
    c->state_ = CALL_DONE;
    if (c->req)
        gw_http_set_on_gone(c->req, NULL, NULL);
    if (c->req || c->ws)
        c->surface->failed(c, status, type, code, param, msg);
    gw_oa_call_free(c);
}

/* An error event of the session layer, as OpenAI's status and type. */
static void fail_with(gw_oa_call *c, json_t *e)
{
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *param = json_string_value(json_object_get(e, "param"));
    code = code ? code : "internal_error";
    if (param && !strncmp(param, "session.", 8))
        param += 8; /* the session's settings are the request's own fields here */
    unsigned status = 500;
    const char *type = "server_error";
    switch (fg_proto_error_code_from_name(code)) {
    case FG_PROTO_TOO_MANY_SESSIONS:
    case FG_PROTO_RATE_LIMITED:
    case FG_PROTO_RATE_LIMIT_EXCEEDED: status = 429, type = "rate_limit_error"; break;
    case FG_PROTO_INSUFFICIENT_QUOTA: status = 429, type = "insufficient_quota"; break;
    case FG_PROTO_KV_UNAVAILABLE:
    case FG_PROTO_QUOTA_UNAVAILABLE:
    case FG_PROTO_SHUTTING_DOWN: status = 503; break;
    case FG_PROTO_CONTEXT_LENGTH_EXCEEDED:
    case FG_PROTO_INVALID_VALUE: status = 400, type = "invalid_request_error"; break;
    default: break;
    }
    call_fail(c, status, type, code, param, msg ? msg : "the request failed");
}

static void finish(gw_oa_call *c, json_t *resp)
{
    const char *status = json_string_value(json_object_get(resp, "status"));
    json_t *details = json_object_get(resp, "status_details");
    if (!status || (strcmp(status, "completed") && strcmp(status, "incomplete"))) {
        if (status && !strcmp(status, "failed"))
            return fail_with(c, json_object_get(details, "error"));
        return call_fail(c, 503, "server_error", "response_cancelled", NULL, "the response was cancelled");
    }
    json_t *usage = json_object_get(resp, "usage");
    gw_oa_result r = {
        .input_tokens = json_integer_value(json_object_get(usage, "input_tokens")),
        .output_tokens = json_integer_value(json_object_get(usage, "output_tokens")),
        .cached_tokens =
            json_integer_value(json_object_get(json_object_get(usage, "input_token_details"), "cached_tokens")),
        .incomplete = !strcmp(status, "incomplete"),
        .reason = json_string_value(json_object_get(details, "reason")),
    };
    json_t *calls = json_array(), *item;
    size_t i;
    json_array_foreach(json_object_get(resp, "output"), i, item) {
        const char *t = json_string_value(json_object_get(item, "type"));
        const char *st = json_string_value(json_object_get(item, "status"));
        if (calls && t && !strcmp(t, "function_call") && st && !strcmp(st, "completed"))
            json_array_append(calls, item);
    }
    r.calls = calls && json_array_size(calls) ? calls : NULL;
    c->state_ = CALL_DONE;
    if (c->req)
        gw_http_set_on_gone(c->req, NULL, NULL);
    if (c->req || c->ws) {
        if (c->streaming && c->streamed_ < c->text_len)
            c->surface->text(c, c->text + c->streamed_, c->text_len - c->streamed_);
        c->streamed_ = c->text_len;
        c->surface->done(c, &r);
    }
    json_decref(calls);
    gw_oa_call_free(c);
}

/* ---- the steps ---- */

/* The session is there: the request's items go in, then the response. */
static void start_response(gw_oa_call *c)
{
    gw_session *s = c->sink.session;
    for (size_t i = 0; i < c->n_items; i++) {
        fg_client_event ev = {.type = FG_CLIENT_ITEM_CREATE, .u.item = c->items[i]};
        const size_t before = s->items.n;
        gw_cmd_dispatch(&c->sink, &ev);
        if (s->items.n == before)
            return; /* refused: its error event follows */
    }
    fg_client_event ev = {.type = FG_CLIENT_RESPONSE_CREATE, .u.response = {.generate = true}};
    ev.u.response.sampling = c->sampling;
    c->state_ = CALL_RESPONDING;
    gw_cmd_dispatch(&c->sink, &ev);
}

/* One event of the session layer; false when the call ended. */
static bool on_event(gw_oa_call *c, const char *json, size_t len)
{
    static const char head[] = "{\"type\":\"";
    if (len < sizeof head || memcmp(json, head, sizeof head - 1) != 0)
        return true;
    const char *type = json + sizeof head - 1;
#define IS(t) (!strncmp(type, t "\"", sizeof t))
    if (IS("session.created")) {
        if (c->state_ == CALL_CREATING)
            start_response(c);
        return true;
    }
    if (IS("response.created")) {
        if (c->req || c->ws)
            c->surface->started(c);
        return true;
    }
    if (!IS("response.done") && !IS("error"))
        return true;
    const bool error = IS("error");
#undef IS
    json_t *o = json_loadb(json, len, JSON_ALLOW_NUL, NULL); /* a reply may hold NUL characters */
    if (!o)
        call_fail(c, 500, "server_error", "internal_error", NULL, "out of memory");
    else if (error)
        fail_with(c, json_object_get(o, "error"));
    else
        finish(c, json_object_get(o, "response"));
    json_decref(o);
    return false;
}

/* What the step needs of an event: 0 nothing (a delta: its text is taken
 * already), 1 its type (session.created, response.created), 2 all of it
 * (response.done, error: parsed once per response), 3 a tool call's
 * progress (for a surface that streams calls). */
static int wanted(const char *json, size_t len)
{
    static const char head[] = "{\"type\":\"";
    const size_t h = sizeof head - 1;
    if (len <= h + 16 || memcmp(json, head, h) != 0)
        return 0;
    const char *t = json + h;
    if (!strncmp(t, "session.created\"", 16) || !strncmp(t, "response.created\"", 17))
        return 1;
    if (!strncmp(t, "response.function_call_arguments.", 33))
        return 3;
    if (!strncmp(t, "response.output_item.added\"", 27))
        return memmem(json, len, "\"type\":\"function_call\"", sizeof "\"type\":\"function_call\"" - 1) ? 3 : 0;
    return !strncmp(t, "response.done\"", 14) || !strncmp(t, "error\"", 6) ? 2 : 0;
}

/* A tool call's event of the session, to the surface: a delta's arguments
 * are copied out of the event as the JSON string it holds (the writer puts
 * "delta" last: the string runs to the closing brace); the start and the end
 * (once per call) are parsed. */
static void call_event(gw_oa_call *c, const char *json, size_t len)
{
    static const char key[] = ",\"delta\":\"";
    static const char delta[] = "{\"type\":\"response.function_call_arguments.delta\"";
    if (!strncmp(json, delta, sizeof delta - 1)) {
        const char *d = memmem(json, len, key, sizeof key - 1);
        if (!d || !c->calls_streamed || json[len - 1] != '}')
            return;
        d += sizeof key - 2; /* the opening quote */
        gw_oa_call_ev ev = {.step = GW_OA_CALL_DELTA, .index = c->calls_streamed - 1, .json = d,
                            .len = (size_t)(json + len - 1 - d)};
        return c->surface->call(c, &ev);
    }
    json_t *o = json_loadb(json, len, JSON_ALLOW_NUL, NULL);
    const char *type = json_string_value(json_object_get(o, "type"));
    if (type && !strcmp(type, "response.output_item.added")) {
        json_t *it = json_object_get(o, "item");
        const char *id = json_string_value(json_object_get(it, "id")), *cid = json_string_value(json_object_get(it, "call_id"));
        const char *name = json_string_value(json_object_get(it, "name"));
        if (id && cid && name) {
            gw_oa_call_ev ev = {.step = GW_OA_CALL_BEGIN, .index = c->calls_streamed++, .item_id = id,
                                .call_id = cid, .name = name};
            c->surface->call(c, &ev);
        }
    } else if (type && !strcmp(type, "response.function_call_arguments.done") && c->calls_streamed) {
        json_t *a = json_object_get(o, "arguments");
        gw_oa_call_ev ev = {.step = GW_OA_CALL_DONE, .index = c->calls_streamed - 1,
                            .json = json_string_value(a) ? json_string_value(a) : "", .len = json_string_length(a)};
        c->surface->call(c, &ev);
    }
    json_decref(o);
}

static void schedule(gw_oa_call *c);

static void on_drain(void *user)
{
    schedule(user);
}

static void step(lws_sorted_usec_list_t *sul)
{
    gw_oa_call *c = lws_container_of(sul, gw_oa_call, step_);
    while (c->own_.count) {
        const gw_event *e = gw_ring_at(&c->own_, 0);
        char *copy = strndup(e->buf + LWS_PRE, e->len);
        const size_t len = e->len;
        gw_ring_drop_oldest(&c->own_);
        if (copy && !on_event(c, copy, len)) {
            free(copy);
            return;
        }
        free(copy);
    }
    gw_session *s = c->sink.session;
    if (!s)
        return;
    /* A client behind on its stream: its events wait in the session, which
     * then pauses the engine (gw_session.c, "behind"); on_drain comes back. */
    const size_t limit = (size_t)c->sink.gw->cfg->sessions.output_buffer_bytes;
    if (c->streaming && ((c->req && gw_http_stream_pending(c->req) > limit) || (c->ws && c->ws->own.bytes > limit)))
        return;
    if (c->streaming && c->streamed_ < c->text_len) {
        c->surface->text(c, c->text + c->streamed_, c->text_len - c->streamed_);
        c->streamed_ = c->text_len;
    }
    gw_session_flush_delta(s); /* its text is in c->text already */
    for (;;) {
        const gw_event *e = NULL;
        for (uint32_t i = 0; i < s->ring.count && !e; i++)
            if (gw_ring_at(&s->ring, i)->seq > s->sent_seq)
                e = gw_ring_at(&s->ring, i);
        if (!e)
            break;
        /* taken before it is acted on: acting may add events, or end the session */
        const size_t len = e->len;
        const int want = wanted(e->buf + LWS_PRE, len);
        char head[48];
        const size_t hlen = len < sizeof head - 1 ? len : sizeof head - 1;
        memcpy(head, e->buf + LWS_PRE, hlen);
        head[hlen] = 0;
        if (want == 3) { /* written to the client before the event may leave the ring */
            if (c->streaming && (c->req || c->ws) && c->surface->call)
                call_event(c, e->buf + LWS_PRE, len);
            gw_session_sent(s, e);
            continue;
        }
        char *copy = want == 2 ? strndup(e->buf + LWS_PRE, len) : NULL;
        gw_session_sent(s, e);
        if (want == 2 && !copy)
            return call_fail(c, 500, "server_error", "internal_error", NULL, "out of memory");
        const bool go_on = want == 2 ? on_event(c, copy, len) : want == 1 ? on_event(c, head, hlen) : true;
        free(copy);
        if (!go_on)
            return;
    }
    if (s->output_paused) { /* every event is taken: the engine goes on */
        s->output_paused = false;
        gw_session_drain_engine(s);
    }
}

static void schedule(gw_oa_call *c)
{
    if (c->state_ != CALL_DONE)
        lws_sul_schedule(c->sink.gw->ctx, 0, &c->step_, step, 1);
}

/* The reply's new text, copied while the session holds it (out_text is reset
 * once response.done is queued). */
static void take_text(gw_oa_call *c)
{
    gw_session *s = c->sink.session;
    if (!s || c->state_ != CALL_RESPONDING || s->out_len <= c->taken_)
        return;
    if (fg_bytes_append(&c->text, &c->text_len, &c->text_cap_, s->out_text + c->taken_, s->out_len - c->taken_))
        c->taken_ = s->out_len;
}

static void sink_push(gw_sink *k, uint64_t seq, const char *json, size_t len)
{
    gw_oa_call *c = lws_container_of(k, gw_oa_call, sink);
    if (!gw_ring_push(&c->own_, seq, json, len))
        fg_log(FG_LOG_ERROR, "event_dropped", "\"reason\":\"out_of_memory\"");
    schedule(c);
}

static void sink_request_write(gw_sink *k)
{
    gw_oa_call *c = lws_container_of(k, gw_oa_call, sink);
    take_text(c);
    schedule(c);
}

static void sink_nothing(gw_sink *k)
{
    (void)k; /* the request is read already; its reply is bounded by the response */
}

static const gw_sink_ops call_sink_ops = {sink_push, sink_request_write, sink_nothing, sink_nothing};

gw_oa_call *gw_oa_call_new(fg_gateway_t *gw, gw_http_req *req, int tenant, const gw_oa_surface *surface, void *user)
{
    gw_oa_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->sink = (gw_sink){.ops = &call_sink_ops, .gw = gw, .tenant = tenant};
    c->req = req;
    c->surface = surface;
    c->user = user;
    c->created = (int64_t)time(NULL);
    fg_proto_buf_init(&c->esc, 0);
    return c;
}

/* The request's tools into a session's settings (checked again there: the vocabulary). */
static void set_tools(gw_oa_call *c, fg_proto_session_params *p)
{
    const gw_oa_tools *t = c->tools;
    if (!t)
        return;
    if (t->json) {
        p->has_tools = true;
        p->tools = (fg_proto_str){t->json, t->len};
    }
    /* a request's own (absent: "auto"), not the conversation's last: a continued one is not forced again */
    p->has_tool_choice = true;
    p->tool_choice = t->has_choice ? t->choice : FG_PROTO_TOOL_CHOICE_AUTO;
    p->tool_choice_name = (fg_proto_str){t->choice_name, strlen(t->choice_name)};
}

gw_oa_call *gw_oa_call_new_ws(fg_gateway_t *gw, gw_conn *ws, int tenant, const gw_oa_surface *surface, void *user)
{
    gw_oa_call *c = gw_oa_call_new(gw, NULL, tenant, surface, user);
    if (c) {
        c->ws = ws;
        ws->rws_call = c;
    }
    return c;
}

void gw_oa_call_wake(gw_oa_call *c)
{
    schedule(c);
}

/* The client's end of the call learns of its leaving and of its reading. */
static void watch_client(gw_oa_call *c)
{
    if (!c->req)
        return; /* a WebSocket connection tells the call itself (gw_oa_call_gone, gw_oa_call_wake) */
    gw_http_set_on_gone(c->req, on_gone, c);
    gw_http_set_on_drain(c->req, on_drain);
}

void gw_oa_call_start(gw_oa_call *c, const char *instructions, size_t len)
{
    watch_client(c);
    c->state_ = CALL_CREATING;
    fg_client_event ev = {.type = FG_CLIENT_SESSION_CREATE};
    if (instructions && len) {
        ev.u.session.has_instructions = true;
        ev.u.session.instructions = (fg_proto_str){instructions, len};
    }
    set_tools(c, &ev.u.session);
    gw_cmd_dispatch(&c->sink, &ev);
    schedule(c); /* session.created (or its error) is queued, or comes with the quota's answer */
}

void gw_oa_call_hold(gw_oa_call *c)
{
    gw_http_set_on_gone(c->req, on_gone, c);
}

void gw_oa_call_continue(gw_oa_call *c, gw_session *s)
{
    watch_client(c);
    gw_session_attach(s, &c->sink, s->next_seq - 1); /* nothing to replay */
    s->last_activity = fg_clock_mono_s();
    if (c->tools) { /* this request's tools and tool_choice, as a session.update */
        fg_client_event ev = {.type = FG_CLIENT_SESSION_UPDATE};
        set_tools(c, &ev.u.session);
        gw_cmd_dispatch(&c->sink, &ev);
    }
    start_response(c);
    schedule(c);
}
