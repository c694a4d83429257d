/* openai_chat.c: POST /v1/chat/completions on the session layer. Each request
 * is a session of its tenant (the same lease, reservation and metrics as a
 * realtime session, through session_cmd.h) whose sink is the HTTP request:
 * session.create with the leading system messages as instructions, the other
 * messages as items, one response.create with the request's sampling; the
 * reply streams as chat.completion.chunk server-sent events or comes back as
 * one chat.completion, and the session goes with the request. A later request
 * whose messages repeat this one's prefix finds its full KV pages in the
 * engine's per-tenant prefix cache (usage.prompt_tokens_details.cached_tokens).
 *
 * The sink's calls come from inside the session layer (an event being
 * pushed), so they only copy the reply's new text and schedule a step; the
 * step (a zero-delay timer on the service thread) reads the session's events
 * and acts on them. Service thread only. */
#include "gateway/openai_chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/gateway_internal.h"
#include "gateway/log.h"
#include "gateway/openai_http.h"
#include "gateway/openai_req.h"

typedef enum chat_state { CHAT_CREATING, CHAT_RESPONDING, CHAT_DONE } chat_state;

typedef struct gw_chat {
    gw_sink sink;              /* the session layer's view of this request */
    gw_http_req *req;          /* NULL once the client left */
    gw_chat_req r;
    chat_state state;
    bool streaming;            /* the SSE headers are out */
    lws_sorted_usec_list_t step;
    gw_ring own;               /* events outside the session (an error before it exists) */
    char id[48];               /* "chatcmpl-..." */
    int64_t created;           /* seconds since the epoch */
    char *text;                /* the reply so far */
    size_t text_len, text_cap;
    size_t taken;              /* bytes of the session's out_text copied into text */
    size_t streamed;           /* bytes of text sent as chunks */
    fg_proto_buf esc;          /* a JSON string being written (reused: no allocation per chunk once grown) */
} gw_chat;

/* ---- replies ---- */

static void reply_error(gw_chat *ch, unsigned status, const char *type, const char *code, const char *param,
                        const char *msg)
{
    if (!ch->req)
        return;
    if (!ch->streaming)
        return gw_openai_error(ch->req, status, type, code, param, msg);
    /* the status is out already: the error is the stream's last event */
    char m[400], p[160], body[800];
    int n = snprintf(body, sizeof body,
                     "data: {\"error\":{\"message\":%s,\"type\":\"%s\",\"param\":%s,\"code\":\"%s\"}}\n\n",
                     fg_log_str(m, sizeof m, msg), type, param ? fg_log_str(p, sizeof p, param) : "null", code);
    gw_http_stream_write(ch->req, body, (size_t)n);
    gw_http_stream_end(ch->req);
}

/* Writes {"id":...,"object":"chat.completion.chunk",...,"choices":[...]} with
 * the delta's JSON (or no choice: the usage chunk) and the usage (or null). */
static void send_chunk(gw_chat *ch, const char *delta_head, const char *text, size_t n, const char *finish,
                       const char *usage)
{
    char head[512], id[160], model[160];
    int h = snprintf(head, sizeof head,
                     "data: {\"id\":%s,\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":%s,"
                     "\"system_fingerprint\":null,\"choices\":[",
                     fg_log_str(id, sizeof id, ch->id), (long long)ch->created,
                     fg_log_str(model, sizeof model, ch->r.model));
    gw_http_stream_write(ch->req, head, (size_t)h);
    if (delta_head) {
        gw_http_stream_write(ch->req, "{\"index\":0,\"delta\":{", 20);
        gw_http_stream_write(ch->req, delta_head, strlen(delta_head));
        if (text) {
            ch->esc.len = 0;
            if (fg_proto_buf_put_json_string(&ch->esc, text, n) == FG_OK) {
                gw_http_stream_write(ch->req, "\"content\":", 10);
                gw_http_stream_write(ch->req, ch->esc.data + ch->esc.pre, ch->esc.len);
            }
        }
        char tail[96];
        h = snprintf(tail, sizeof tail, "},\"logprobs\":null,\"finish_reason\":%s%s%s}", finish ? "\"" : "",
                     finish ? finish : "null", finish ? "\"" : "");
        gw_http_stream_write(ch->req, tail, (size_t)h);
    }
    gw_http_stream_write(ch->req, "]", 1);
    if (ch->r.include_usage) {
        gw_http_stream_write(ch->req, ",\"usage\":", 9);
        gw_http_stream_write(ch->req, usage ? usage : "null", strlen(usage ? usage : "null"));
    }
    gw_http_stream_write(ch->req, "}\n\n", 3);
}

static void stream_text(gw_chat *ch)
{
    if (!ch->streaming || ch->streamed >= ch->text_len)
        return;
    /* deltas end on a character boundary: the session layer's text is whole characters */
    send_chunk(ch, "", ch->text + ch->streamed, ch->text_len - ch->streamed, NULL, NULL);
    ch->streamed = ch->text_len;
}

/* response.done: the completion, in full or as the stream's last chunks. */
static void finish_ok(gw_chat *ch, json_t *resp)
{
    json_t *usage = json_object_get(resp, "usage");
    const json_int_t in = json_integer_value(json_object_get(usage, "input_tokens"));
    const json_int_t out = json_integer_value(json_object_get(usage, "output_tokens"));
    const json_int_t cached =
        json_integer_value(json_object_get(json_object_get(usage, "input_token_details"), "cached_tokens"));
    const char *status = json_string_value(json_object_get(resp, "status"));
    const char *finish = status && !strcmp(status, "incomplete") ? "length" : "stop";
    char u[256];
    snprintf(u, sizeof u,
             "{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld,"
             "\"prompt_tokens_details\":{\"cached_tokens\":%lld},\"completion_tokens_details\":{\"reasoning_tokens\":0}}",
             (long long)in, (long long)out, (long long)(in + out), (long long)cached);
    if (ch->streaming) {
        stream_text(ch);
        send_chunk(ch, "", NULL, 0, finish, NULL);
        if (ch->r.include_usage)
            send_chunk(ch, NULL, NULL, 0, NULL, u);
        gw_http_stream_write(ch->req, "data: [DONE]\n\n", 14);
        gw_http_stream_end(ch->req);
        return;
    }
    /* the text as the session layer writes it: bytes that are not UTF-8 become U+FFFD */
    ch->esc.len = 0;
    if (fg_proto_buf_put_json_string(&ch->esc, ch->text ? ch->text : "", ch->text_len) != FG_OK)
        return reply_error(ch, 500, "server_error", "internal_error", NULL, "out of memory");
    char head[512], tail[512], id[160], model[160];
    const int h = snprintf(head, sizeof head,
                           "{\"id\":%s,\"object\":\"chat.completion\",\"created\":%lld,\"model\":%s,"
                           "\"system_fingerprint\":null,\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                           "\"content\":",
                           fg_log_str(id, sizeof id, ch->id), (long long)ch->created,
                           fg_log_str(model, sizeof model, ch->r.model));
    const int n = snprintf(tail, sizeof tail,
                           ",\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"%s\"}],\"usage\":%s}", finish, u);
    char *text = malloc((size_t)h + ch->esc.len + (size_t)n + 1);
    if (!text)
        return reply_error(ch, 500, "server_error", "internal_error", NULL, "out of memory");
    memcpy(text, head, (size_t)h);
    memcpy(text + h, ch->esc.data + ch->esc.pre, ch->esc.len);
    memcpy(text + h + ch->esc.len, tail, (size_t)n + 1);
    gw_http_reply(ch->req, 200, text);
    free(text);
}

/* An error event of the session layer, as OpenAI's status and body. */
static void finish_error(gw_chat *ch, json_t *e)
{
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *param = json_string_value(json_object_get(e, "param"));
    code = code ? code : "internal_error";
    const fg_proto_code c = fg_proto_error_code_from_name(code);
    unsigned status = 500;
    const char *type = "server_error";
    switch (c) {
    case FG_PROTO_TOO_MANY_SESSIONS:
    case FG_PROTO_RATE_LIMITED:
    case FG_PROTO_RATE_LIMIT_EXCEEDED: status = 429, type = "rate_limit_error"; break;
    case FG_PROTO_INSUFFICIENT_QUOTA: status = 429, type = "insufficient_quota"; break;
    case FG_PROTO_KV_UNAVAILABLE:
    case FG_PROTO_QUOTA_UNAVAILABLE:
    case FG_PROTO_SHUTTING_DOWN: status = 503; break;
    case FG_PROTO_CONTEXT_LENGTH_EXCEEDED:
    case FG_PROTO_INVALID_VALUE: status = 400, type = "invalid_request_error", param = param ? param : "messages"; break;
    default: break;
    }
    reply_error(ch, status, type, code, param, msg ? msg : "the request failed");
}

/* ---- the request's life ---- */

static void chat_free(gw_chat *ch)
{
    gw_session *s = ch->sink.session;
    if (s)
        gw_session_destroy(s, false); /* a response still running is cancelled with it, its reservation settled */
    lws_sul_cancel(&ch->step);
    gw_ring_free(&ch->own);
    gw_chat_req_free(&ch->r);
    fg_proto_buf_free(&ch->esc);
    free(ch->text);
    free(ch);
}

static void chat_finish(gw_chat *ch)
{
    ch->state = CHAT_DONE;
    if (ch->req)
        gw_http_set_on_gone(ch->req, NULL, NULL);
    chat_free(ch);
}

static void on_gone(void *user)
{
    gw_chat *ch = user;
    ch->req = NULL;
    chat_free(ch);
}

/* The session exists: the messages go in as items, then the response. */
static bool start_response(gw_chat *ch)
{
    gw_session *s = ch->sink.session;
    for (size_t i = 0; i < ch->r.n_items; i++) {
        fg_client_event ev = {.type = FG_CLIENT_ITEM_CREATE, .u.item = ch->r.items[i]};
        const size_t before = s->items.n;
        gw_cmd_dispatch(&ch->sink, &ev);
        if (s->items.n == before)
            return false; /* refused: its error event follows */
    }
    fg_client_event ev = {.type = FG_CLIENT_RESPONSE_CREATE, .u.response = {.generate = true}};
    gw_cmd_dispatch(&ch->sink, &ev);
    ch->state = CHAT_RESPONDING;
    return true;
}

/* One event of the session layer; false when the request ended. */
static bool on_event(gw_chat *ch, const char *json, size_t len)
{
    static const char head[] = "{\"type\":\"";
    if (len < sizeof head || memcmp(json, head, sizeof head - 1) != 0)
        return true;
    const char *type = json + sizeof head - 1;
#define IS(t) (!strncmp(type, t "\"", sizeof t))
    if (IS("session.created"))
        return ch->state != CHAT_CREATING || start_response(ch) || true;
    if (IS("response.created")) {
        if (ch->r.stream && !ch->streaming && ch->req) {
            gw_http_stream_begin(ch->req, 200, "text/event-stream");
            ch->streaming = true;
            send_chunk(ch, "\"role\":\"assistant\",", "", 0, NULL, NULL);
        }
        return true;
    }
    if (!IS("response.done") && !IS("error"))
        return true;
#undef IS
    json_t *o = json_loadb(json, len, 0, NULL);
    if (!o) {
        reply_error(ch, 500, "server_error", "internal_error", NULL, "out of memory");
    } else if (type[0] == 'e') {
        finish_error(ch, json_object_get(o, "error"));
    } else {
        json_t *resp = json_object_get(o, "response");
        const char *status = json_string_value(json_object_get(resp, "status"));
        json_t *details = json_object_get(resp, "status_details");
        if (status && (!strcmp(status, "completed") || !strcmp(status, "incomplete")))
            finish_ok(ch, resp);
        else if (status && !strcmp(status, "failed"))
            finish_error(ch, json_object_get(details, "error"));
        else
            reply_error(ch, 503, "server_error", "response_cancelled", NULL, "the response was cancelled");
    }
    json_decref(o);
    chat_finish(ch);
    return false;
}

static void step(lws_sorted_usec_list_t *sul)
{
    gw_chat *ch = lws_container_of(sul, gw_chat, step);
    while (ch->own.count) {
        const gw_event *e = gw_ring_at(&ch->own, 0);
        char *copy = strndup(e->buf + LWS_PRE, e->len);
        gw_ring_drop_oldest(&ch->own);
        const bool go_on = copy ? on_event(ch, copy, strlen(copy)) : true;
        free(copy);
        if (!go_on)
            return;
    }
    gw_session *s = ch->sink.session;
    if (!s)
        return;
    stream_text(ch);
    gw_session_flush_delta(s); /* its text is in ch->text already */
    for (;;) {
        const gw_event *e = NULL;
        for (uint32_t i = 0; i < s->ring.count && !e; i++)
            if (gw_ring_at(&s->ring, i)->seq > s->sent_seq)
                e = gw_ring_at(&s->ring, i);
        if (!e)
            break;
        const bool interesting = e->len > 9 && (!strncmp(e->buf + LWS_PRE + 9, "session.created\"", 16) ||
                                                !strncmp(e->buf + LWS_PRE + 9, "response.", 9) ||
                                                !strncmp(e->buf + LWS_PRE + 9, "error\"", 6));
        char *copy = interesting ? strndup(e->buf + LWS_PRE, e->len) : NULL;
        gw_session_sent(s, e);
        if (interesting && !copy) {
            reply_error(ch, 500, "server_error", "internal_error", NULL, "out of memory");
            return chat_finish(ch);
        }
        const bool go_on = copy ? on_event(ch, copy, e->len) : true;
        free(copy);
        if (!go_on)
            return;
    }
    if (s->output_paused) { /* every event is taken: the engine goes on */
        s->output_paused = false;
        gw_session_drain_engine(s);
    }
}

static void schedule(gw_chat *ch)
{
    if (ch->state != CHAT_DONE)
        lws_sul_schedule(ch->sink.gw->ctx, 0, &ch->step, step, 1);
}

/* The reply's new text, copied while the session still holds it (out_text is
 * reset once response.done is queued). */
static void take_text(gw_chat *ch)
{
    gw_session *s = ch->sink.session;
    if (!s || s->out_len <= ch->taken)
        return;
    const size_t n = s->out_len - ch->taken;
    if (ch->text_len + n + 1 > ch->text_cap) {
        size_t cap = ch->text_cap ? ch->text_cap * 2 : 1024;
        while (cap < ch->text_len + n + 1)
            cap *= 2;
        char *b = realloc(ch->text, cap);
        if (!b)
            return;
        ch->text = b;
        ch->text_cap = cap;
    }
    memcpy(ch->text + ch->text_len, s->out_text + ch->taken, n);
    ch->text_len += n;
    ch->text[ch->text_len] = 0;
    ch->taken = s->out_len;
}

static void sink_push(gw_sink *k, uint64_t seq, const char *json, size_t len)
{
    gw_chat *ch = lws_container_of(k, gw_chat, sink);
    if (!gw_ring_push(&ch->own, seq, json, len))
        fg_log(FG_LOG_ERROR, "event_dropped", "\"reason\":\"out_of_memory\"");
    schedule(ch);
}

static void sink_request_write(gw_sink *k)
{
    gw_chat *ch = lws_container_of(k, gw_chat, sink);
    take_text(ch);
    schedule(ch);
}

static void sink_nothing(gw_sink *k)
{
    (void)k; /* the request is read already; its stream is bounded by the response */
}

static const gw_sink_ops chat_sink_ops = {sink_push, sink_request_write, sink_nothing, sink_nothing};

void gw_openai_chat(fg_gateway_t *gw, gw_http_req *req)
{
    if (strcmp(gw_http_method(req), "POST") != 0)
        return gw_openai_error(req, 405, "invalid_request_error", "method_not_allowed", NULL, "use POST");
    const int tenant = gw_tenant_by_key(gw, gw_http_bearer(req));
    if (tenant < 0)
        return gw_openai_error(req, 401, "invalid_request_error", "invalid_api_key", NULL,
                               "missing or unknown API key (Authorization: Bearer KEY)");
    if (gw->draining)
        return gw_openai_error(req, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
    gw_chat *ch = calloc(1, sizeof *ch);
    if (!ch)
        return gw_openai_error(req, 500, "server_error", "internal_error", NULL, "out of memory");
    size_t len;
    const char *body = gw_http_body(req, &len);
    gw_oa_error err;
    if (gw_chat_parse(body, len, &gw->limits, gw_openai_model_id(gw), &ch->r, &err) != FG_OK) {
        gw_openai_error(req, err.status, err.type, err.code, err.param[0] ? err.param : NULL, err.message);
        gw_chat_req_free(&ch->r);
        free(ch);
        return;
    }
    ch->sink = (gw_sink){.ops = &chat_sink_ops, .gw = gw, .tenant = tenant};
    snprintf(ch->sink.model, sizeof ch->sink.model, "%.64s", ch->r.model);
    ch->req = req;
    ch->created = (int64_t)time(NULL);
    fg_proto_buf_init(&ch->esc, 0);
    gw_http_set_on_gone(req, on_gone, ch);
    fg_client_event ev = {.type = FG_CLIENT_SESSION_CREATE};
    ev.u.session.sampling = ch->r.sampling;
    if (ch->r.instructions_len) {
        ev.u.session.has_instructions = true;
        ev.u.session.instructions = (fg_proto_str){ch->r.instructions, ch->r.instructions_len};
    }
    gw_cmd_dispatch(&ch->sink, &ev);
    if (ch->sink.session)
        snprintf(ch->id, sizeof ch->id, "chatcmpl-%s", ch->sink.session->id + 5);
    schedule(ch); /* session.created (or its error) is queued, or comes with the quota's answer */
}
