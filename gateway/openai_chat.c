/* openai_chat.c: POST /v1/chat/completions (openai_chat.h): the request
 * parsed (openai_req.c), run as a call on a new session (openai_sink.c) with
 * the leading system messages as instructions and the others as items, and
 * the reply written as one chat.completion or as chat.completion.chunk
 * server-sent events ending in "data: [DONE]". The session goes with the
 * request; a later request that repeats this one's prefix finds its full KV
 * pages in the engine's per-tenant prefix cache, which usage reports as
 * prompt_tokens_details.cached_tokens. Service thread only. */
#include "gateway/openai_chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/log.h"
#include "gateway/openai_http.h"
#include "gateway/openai_req.h"
#include "gateway/openai_sink.h"

typedef struct chat {
    gw_chat_req r;
    char id[48];        /* "chatcmpl-..." */
} chat;

/* data: {"id":...,"object":"chat.completion.chunk",...,"choices":[...]} with
 * one choice whose delta is delta_head + content (text) and finish_reason,
 * or no choice (the usage chunk, usage given). */
static void send_chunk(gw_oa_call *c, const char *delta_head, const char *text, size_t n, const char *finish,
                       const char *usage)
{
    chat *ch = c->user;
    char id[160], model[160];
    gw_oa_writef(c,
                 "data: {\"id\":%s,\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":%s,"
                 "\"system_fingerprint\":null,\"choices\":[",
                 fg_log_str(id, sizeof id, ch->id), (long long)c->created, fg_log_str(model, sizeof model, ch->r.model));
    if (delta_head) {
        gw_oa_writef(c, "{\"index\":0,\"delta\":{%s", delta_head);
        if (text) {
            size_t len;
            const char *j = gw_oa_json_text(c, text, n, &len);
            gw_oa_lit(c, "\"content\":");
            gw_oa_write(c, j, len);
        }
        gw_oa_writef(c, "},\"logprobs\":null,\"finish_reason\":%s%s%s}", finish ? "\"" : "", finish ? finish : "null",
                     finish ? "\"" : "");
    }
    gw_oa_lit(c, "]");
    if (ch->r.include_usage)
        gw_oa_writef(c, ",\"usage\":%s", usage ? usage : "null");
    gw_oa_lit(c, "}\n\n");
}

static void chat_started(gw_oa_call *c)
{
    if (!c->stream)
        return;
    gw_oa_stream_begin(c);
    send_chunk(c, "\"role\":\"assistant\",", "", 0, NULL, NULL);
}

static void chat_text(gw_oa_call *c, const char *t, size_t n)
{
    send_chunk(c, "", t, n, NULL, NULL);
}

/* The reply's calls in Chat Completions' shape: [{"index"?, "id", "type", "function": {"name", "arguments"}}]
 * (index: streamed deltas). Malloc'd JSON text, NULL when none (or out of memory). */
static char *tool_calls(const json_t *calls, bool with_index)
{
    json_t *a = json_array(), *item;
    size_t i;
    json_array_foreach(calls, i, item) {
        json_t *f = json_pack("{s:O,s:O}", "name", json_object_get(item, "name"), "arguments",
                              json_object_get(item, "arguments"));
        json_t *tc = json_pack("{s:O,s:s,s:o}", "id", json_object_get(item, "call_id"), "type", "function",
                               "function", f);
        if (tc && with_index)
            json_object_set_new(tc, "index", json_integer((json_int_t)i));
        if (a && tc)
            json_array_append_new(a, tc);
    }
    char *out = a && json_array_size(a) ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return out;
}

/* A chunk whose delta is {"tool_calls": ...}: its head, then the caller's
 * tool_calls array, then its tail. */
static void tool_chunk_begin(gw_oa_call *c)
{
    chat *ch = c->user;
    gw_oa_writef(c, "data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":", ch->id,
                 (long long)c->created);
    size_t ml;
    const char *m = gw_oa_json_text(c, ch->r.model, strlen(ch->r.model), &ml);
    gw_oa_write(c, m, ml);
    gw_oa_lit(c, ",\"system_fingerprint\":null,\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":");
}

static void tool_chunk_end(gw_oa_call *c)
{
    chat *ch = c->user;
    gw_oa_lit(c, "},\"logprobs\":null,\"finish_reason\":null}]");
    if (ch->r.include_usage)
        gw_oa_lit(c, ",\"usage\":null");
    gw_oa_lit(c, "}\n\n");
}

/* A call as it streams: its first chunk names it, the next ones carry
 * pieces of its arguments (delta.tool_calls[].function.arguments). */
static void chat_call(gw_oa_call *c, const gw_oa_call_ev *ev)
{
    if (ev->step == GW_OA_CALL_DONE)
        return; /* the finish chunk says "tool_calls" */
    size_t len;
    tool_chunk_begin(c);
    gw_oa_writef(c, "[{\"index\":%u", (unsigned)ev->index);
    if (ev->step == GW_OA_CALL_BEGIN) {
        const char *j = gw_oa_json_text(c, ev->call_id, strlen(ev->call_id), &len);
        gw_oa_lit(c, ",\"id\":");
        gw_oa_write(c, j, len);
        j = gw_oa_json_text(c, ev->name, strlen(ev->name), &len);
        gw_oa_lit(c, ",\"type\":\"function\",\"function\":{\"name\":");
        gw_oa_write(c, j, len);
        gw_oa_lit(c, ",\"arguments\":\"\"}}]");
    } else {
        gw_oa_lit(c, ",\"function\":{\"arguments\":");
        gw_oa_write(c, ev->json, ev->len); /* a JSON string already */
        gw_oa_lit(c, "}}]");
    }
    tool_chunk_end(c);
}

static void chat_done(gw_oa_call *c, const gw_oa_result *r)
{
    chat *ch = c->user;
    const char *finish = r->calls ? "tool_calls" : r->incomplete ? "length" : "stop";
    char u[320];
    snprintf(u, sizeof u,
             "{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld,"
             "\"prompt_tokens_details\":{\"cached_tokens\":%lld},\"completion_tokens_details\":{\"reasoning_tokens\":0}}",
             (long long)r->input_tokens, (long long)r->output_tokens, (long long)(r->input_tokens + r->output_tokens),
             (long long)r->cached_tokens);
    if (c->streaming) {
        char *tc = r->calls && !c->calls_streamed ? tool_calls(r->calls, true) : NULL;
        if (tc) { /* calls that did not stream (none should): each whole, in one delta */
            tool_chunk_begin(c);
            gw_oa_write(c, tc, strlen(tc));
            tool_chunk_end(c);
            free(tc);
        }
        send_chunk(c, "", NULL, 0, finish, NULL);
        if (ch->r.include_usage)
            send_chunk(c, NULL, NULL, 0, NULL, u);
        gw_oa_lit(c, "data: [DONE]\n\n");
        gw_http_stream_end(c->req);
        return;
    }
    char *tc = r->calls ? tool_calls(r->calls, false) : NULL;
    size_t len;
    const char *content = tc && !c->text_len ? "null" : gw_oa_json_text(c, c->text, c->text_len, &len);
    if (tc && !c->text_len)
        len = 4;
    char head[512], tail[512], id[160], model[160];
    const int h = snprintf(head, sizeof head,
                           "{\"id\":%s,\"object\":\"chat.completion\",\"created\":%lld,\"model\":%s,"
                           "\"system_fingerprint\":null,\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                           "\"content\":",
                           fg_log_str(id, sizeof id, ch->id), (long long)c->created,
                           fg_log_str(model, sizeof model, ch->r.model));
    const int t = snprintf(tail, sizeof tail,
                           ",\"refusal\":null},\"logprobs\":null,\"finish_reason\":\"%s\"}],\"usage\":%s}", finish, u);
    static const char calls_key[] = ",\"tool_calls\":";
    const size_t tl = tc ? sizeof calls_key - 1 + strlen(tc) : 0;
    char *body = malloc((size_t)h + len + tl + (size_t)t + 1);
    if (!body) {
        free(tc);
        return gw_openai_error(c->req, 500, "server_error", "internal_error", NULL, "out of memory");
    }
    memcpy(body, head, (size_t)h);
    memcpy(body + h, content, len);
    if (tc) {
        memcpy(body + h + len, calls_key, sizeof calls_key - 1);
        memcpy(body + h + len + sizeof calls_key - 1, tc, tl - (sizeof calls_key - 1));
    }
    memcpy(body + h + len + tl, tail, (size_t)t + 1);
    gw_http_reply(c->req, 200, body);
    free(body);
    free(tc);
}

static void chat_failed(gw_oa_call *c, unsigned status, const char *type, const char *code, const char *param,
                        const char *msg)
{
    if (!c->streaming)
        return gw_openai_error(c->req, status, type, code, param, msg);
    /* the status is out already: the error is the stream's last event */
    char m[400], p[160];
    gw_oa_writef(c, "data: {\"error\":{\"message\":%s,\"type\":\"%s\",\"param\":%s,\"code\":\"%s\"}}\n\n",
                 fg_log_str(m, sizeof m, msg), type, param ? fg_log_str(p, sizeof p, param) : "null", code);
    gw_http_stream_end(c->req);
}

static void chat_free(gw_oa_call *c)
{
    chat *ch = c->user;
    gw_chat_req_free(&ch->r);
    free(ch);
}

static const gw_oa_surface chat_surface = {chat_started, chat_text, chat_done, chat_failed, chat_free, chat_call};

void gw_openai_chat(fg_gateway_t *gw, gw_http_req *req)
{
    const int tenant = gw_openai_admit(gw, req, "POST", 1);
    if (tenant < 0)
        return;
    chat *ch = calloc(1, sizeof *ch);
    gw_oa_call *c = ch ? gw_oa_call_new(gw, req, tenant, &chat_surface, ch) : NULL;
    if (!c) {
        free(ch);
        return gw_openai_error(req, 500, "server_error", "internal_error", NULL, "out of memory");
    }
    size_t len;
    const char *body = gw_http_body(req, &len);
    gw_oa_error err;
    if (gw_chat_parse(body, len, &gw->limits, gw_openai_model_id(gw), &ch->r, &err) != FG_OK) {
        gw_openai_error(req, err.status, err.type, err.code, err.param[0] ? err.param : NULL, err.message);
        return gw_oa_call_free(c);
    }
    snprintf(c->sink.model, sizeof c->sink.model, "%.64s", ch->r.model);
    c->stream = ch->r.stream;
    c->items = ch->r.items;
    c->n_items = ch->r.n_items;
    c->sampling = ch->r.sampling;
    c->tools = &ch->r.tools;
    gw_oa_call_start(c, ch->r.instructions, ch->r.instructions_len);
    if (c->sink.session)
        snprintf(ch->id, sizeof ch->id, "chatcmpl-%s", c->sink.session->id + 5);
    else
        snprintf(ch->id, sizeof ch->id, "chatcmpl-0");
}
