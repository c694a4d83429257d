/* openai_responses.c: POST /v1/responses (openai_responses.h): the request
 * parsed (openai_req.c) and run as a call (openai_sink.c), on a new session
 * or, with previous_response_id, on the session that answered that response:
 * its KV holds the whole conversation, so only the new input is computed
 * (usage.input_tokens_details.cached_tokens). A stored response (store, the
 * default) keeps its session detached until the next call continues it or the
 * idle timeout (sessions.idle_timeout_s) ends it; store: false ends it with
 * the request. Response ids name their session: "resp_<session>_<n>", n the
 * session's response number; only the newest response of a session can be
 * continued, and another tenant's is not found (404), as OpenAI answers.
 * Streamed as the Responses events (response.created ... response.completed).
 * Service thread only. */
#include "gateway/openai_responses.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/log.h"
#include "gateway/openai_http.h"
#include "gateway/openai_req.h"
#include "gateway/openai_sink.h"

typedef struct respx {
    gw_resp_req r;
    char id[80];         /* "resp_<32 hex>_<n>" */
    char item_id[80];    /* "msg_<32 hex>_<n>" */
    uint64_t seq;        /* the next sequence_number of the stream */
} respx;

/* Starts one server-sent event: its name and the data's type and number. */
static void ev_begin(gw_oa_call *c, const char *name)
{
    respx *x = c->user;
    gw_oa_writef(c, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%llu", name, name,
                 (unsigned long long)x->seq++);
}

static void ev_end(gw_oa_call *c)
{
    gw_oa_lit(c, "}\n\n");
}

static void put_text(gw_oa_call *c, const char *t, size_t n)
{
    size_t len;
    const char *j = gw_oa_json_text(c, t, n, &len);
    gw_oa_write(c, j, len);
}

/* The output message item; text NULL: no content yet. */
static void put_item(gw_oa_call *c, const char *status, bool with_text)
{
    respx *x = c->user;
    gw_oa_writef(c, "{\"id\":\"%s\",\"type\":\"message\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", x->item_id,
                 status);
    if (with_text) {
        gw_oa_lit(c, "{\"type\":\"output_text\",\"text\":");
        put_text(c, c->text, c->text_len);
        gw_oa_lit(c, ",\"annotations\":[],\"logprobs\":[]}");
    }
    gw_oa_lit(c, "]}");
}

/* A function_call output item of the session's response.done (args: with its arguments). */
static void put_call(gw_oa_call *c, const json_t *item, const char *status, bool args)
{
    const char *keys[] = {"id", "call_id", "name"};
    gw_oa_lit(c, "{\"type\":\"function_call\"");
    for (int k = 0; k < 3; k++) {
        const json_t *v = json_object_get(item, keys[k]);
        gw_oa_writef(c, ",\"%s\":", keys[k]);
        put_text(c, json_string_value(v) ? json_string_value(v) : "", json_string_length(v));
    }
    const json_t *a = json_object_get(item, "arguments");
    gw_oa_lit(c, ",\"arguments\":");
    put_text(c, args && json_string_value(a) ? json_string_value(a) : "", args ? json_string_length(a) : 0);
    gw_oa_writef(c, ",\"status\":\"%s\"}", status);
}

static void put_number_or_null(gw_oa_call *c, const char *name, bool has, double v)
{
    if (has)
        gw_oa_writef(c, ",\"%s\":%.17g", name, v);
    else
        gw_oa_writef(c, ",\"%s\":null", name);
}

/* The Response object; r NULL: in progress (no output, no usage). */
static void put_response(gw_oa_call *c, const gw_oa_result *r)
{
    respx *x = c->user;
    const char *status = !r ? "in_progress" : r->incomplete ? "incomplete" : "completed";
    gw_oa_writef(c, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"background\":false,"
                 "\"error\":null,\"incomplete_details\":",
                 x->id, (long long)c->created, status);
    if (r && r->incomplete)
        gw_oa_writef(c, "{\"reason\":\"%s\"}",
                     r->reason && !strcmp(r->reason, "max_output_tokens") ? "max_output_tokens" : "max_output_tokens");
    else
        gw_oa_lit(c, "null");
    gw_oa_lit(c, ",\"instructions\":");
    if (x->r.instructions)
        put_text(c, x->r.instructions, x->r.instructions_len);
    else
        gw_oa_lit(c, "null");
    if (c->sampling.has_max_output_tokens)
        gw_oa_writef(c, ",\"max_output_tokens\":%u", c->sampling.max_output_tokens);
    else
        gw_oa_lit(c, ",\"max_output_tokens\":null");
    char model[160];
    gw_oa_writef(c, ",\"model\":%s,\"output\":[", fg_log_str(model, sizeof model, x->r.model));
    if (r)
        put_item(c, r->incomplete ? "incomplete" : "completed", true);
    size_t i;
    json_t *item;
    if (r && r->calls)
        json_array_foreach(r->calls, i, item) {
            gw_oa_lit(c, ",");
            put_call(c, item, "completed", true);
        }
    gw_oa_lit(c, "],\"parallel_tool_calls\":true,\"previous_response_id\":");
    if (x->r.previous_response_id)
        put_text(c, x->r.previous_response_id, strlen(x->r.previous_response_id));
    else
        gw_oa_lit(c, "null");
    gw_oa_writef(c, ",\"reasoning\":{\"effort\":null,\"summary\":null},\"store\":%s", x->r.store ? "true" : "false");
    put_number_or_null(c, "temperature", c->sampling.has_temperature, c->sampling.temperature);
    gw_oa_lit(c, ",\"text\":{\"format\":{\"type\":\"text\"}},\"tool_choice\":\"auto\",\"tools\":[]");
    put_number_or_null(c, "top_p", c->sampling.has_top_p, c->sampling.top_p);
    gw_oa_lit(c, ",\"truncation\":\"disabled\",\"usage\":");
    if (r)
        gw_oa_writef(c,
                     "{\"input_tokens\":%lld,\"input_tokens_details\":{\"cached_tokens\":%lld,\"cache_write_tokens\":0},"
                     "\"output_tokens\":%lld,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%lld}",
                     (long long)r->input_tokens, (long long)r->cached_tokens, (long long)r->output_tokens,
                     (long long)(r->input_tokens + r->output_tokens));
    else
        gw_oa_lit(c, "null");
    gw_oa_lit(c, ",\"metadata\":{}}");
}

static void part_event(gw_oa_call *c, const char *name, bool with_text)
{
    respx *x = c->user;
    ev_begin(c, name);
    gw_oa_writef(c, ",\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":",
                 x->item_id);
    put_text(c, with_text ? c->text : "", with_text ? c->text_len : 0);
    gw_oa_lit(c, ",\"annotations\":[],\"logprobs\":[]}");
    ev_end(c);
}

static void resp_started(gw_oa_call *c)
{
    respx *x = c->user;
    gw_session *s = c->sink.session;
    /* the session layer numbered this response: its id names both */
    snprintf(x->id, sizeof x->id, "resp_%s_%llu", s->id + 5, (unsigned long long)s->resp_counter);
    snprintf(x->item_id, sizeof x->item_id, "msg_%s_%llu", s->id + 5, (unsigned long long)s->resp_counter);
    if (!c->stream)
        return;
    gw_oa_stream_begin(c);
    static const char *const heads[] = {"response.created", "response.in_progress"};
    for (int i = 0; i < 2; i++) {
        ev_begin(c, heads[i]);
        gw_oa_lit(c, ",\"response\":");
        put_response(c, NULL);
        ev_end(c);
    }
    ev_begin(c, "response.output_item.added");
    gw_oa_lit(c, ",\"output_index\":0,\"item\":");
    put_item(c, "in_progress", false);
    ev_end(c);
    part_event(c, "response.content_part.added", false);
}

static void resp_text(gw_oa_call *c, const char *t, size_t n)
{
    respx *x = c->user;
    ev_begin(c, "response.output_text.delta");
    gw_oa_writef(c, ",\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,\"delta\":", x->item_id);
    put_text(c, t, n);
    gw_oa_lit(c, ",\"logprobs\":[]");
    ev_end(c);
}

static void resp_done(gw_oa_call *c, const gw_oa_result *r)
{
    respx *x = c->user;
    if (!c->streaming) {
        put_response(c, r);
        return gw_oa_reply(c);
    }
    ev_begin(c, "response.output_text.done");
    gw_oa_writef(c, ",\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,\"text\":", x->item_id);
    put_text(c, c->text, c->text_len);
    gw_oa_lit(c, ",\"logprobs\":[]");
    ev_end(c);
    part_event(c, "response.content_part.done", true);
    ev_begin(c, "response.output_item.done");
    gw_oa_lit(c, ",\"output_index\":0,\"item\":");
    put_item(c, r->incomplete ? "incomplete" : "completed", true);
    ev_end(c);
    size_t i;
    json_t *item;
    if (r->calls)
        json_array_foreach(r->calls, i, item) { /* each call after the message, its arguments in one delta */
            const json_t *id = json_object_get(item, "id"), *a = json_object_get(item, "arguments");
            const unsigned at = (unsigned)i + 1;
            ev_begin(c, "response.output_item.added");
            gw_oa_writef(c, ",\"output_index\":%u,\"item\":", at);
            put_call(c, item, "in_progress", false);
            ev_end(c);
            for (int done = 0; done < 2; done++) {
                ev_begin(c, done ? "response.function_call_arguments.done" : "response.function_call_arguments.delta");
                gw_oa_lit(c, ",\"item_id\":");
                put_text(c, json_string_value(id), json_string_length(id));
                gw_oa_writef(c, ",\"output_index\":%u,\"%s\":", at, done ? "arguments" : "delta");
                put_text(c, json_string_value(a), json_string_length(a));
                ev_end(c);
            }
            ev_begin(c, "response.output_item.done");
            gw_oa_writef(c, ",\"output_index\":%u,\"item\":", at);
            put_call(c, item, "completed", true);
            ev_end(c);
        }
    ev_begin(c, r->incomplete ? "response.incomplete" : "response.completed");
    gw_oa_lit(c, ",\"response\":");
    put_response(c, r);
    ev_end(c);
    gw_http_stream_end(c->req);
}

static void resp_failed(gw_oa_call *c, unsigned status, const char *type, const char *code, const char *param,
                        const char *msg)
{
    if (!c->streaming)
        return gw_openai_error(c->req, status, type, code, param, msg);
    char m[400], p[160];
    ev_begin(c, "error");
    gw_oa_writef(c, ",\"code\":\"%s\",\"message\":%s,\"param\":%s", code, fg_log_str(m, sizeof m, msg),
                 param ? fg_log_str(p, sizeof p, param) : "null");
    ev_end(c);
    gw_http_stream_end(c->req);
}

static void resp_free(gw_oa_call *c)
{
    respx *x = c->user;
    gw_resp_req_free(&x->r);
    free(x);
}

static const gw_oa_surface resp_surface = {resp_started, resp_text, resp_done, resp_failed, resp_free};

/* The session id and response number named by a response id "resp_<32 hex>_<n>"; false when malformed. */
static bool parse_response_id(const char *id, char sid[48], unsigned long long *n)
{
    int end = 0;
    if (strlen(id) < 5 + 32 + 2 || strncmp(id, "resp_", 5) != 0 || id[37] != '_' ||
        sscanf(id + 38, "%llu%n", n, &end) != 1 || id[38 + end] != 0)
        return false;
    snprintf(sid, 48, "sess_%.32s", id + 5);
    return true;
}

static void not_found(gw_http_req *req, const char *id)
{
    char msg[300];
    snprintf(msg, sizeof msg, "Previous response with id '%.100s' not found.", id);
    gw_openai_error(req, 404, "invalid_request_error", "previous_response_not_found", "previous_response_id", msg);
}

/* Whether s (found or restored) can continue previous_response_id's response n; else the request is answered. */
static bool previous_usable(gw_http_req *req, gw_session *s, const gw_resp_req *r, unsigned long long n)
{
    if (s->sink || s->responding || s->quota_pending) {
        gw_openai_error(req, 409, "invalid_request_error", "response_in_progress", "previous_response_id",
                        "the conversation of this response is in use by another request");
        return false;
    }
    /* Restored from a file (a migration, a restart), the session knows its newest response
     * number only to within the file's id reservation: the saved conversation is continued. */
    bool restored_range = s->resp_restored && s->resp_counter == s->resp_restored && n >= s->resp_floor &&
                          n <= s->resp_counter;
    if (n != s->resp_counter && !restored_range) {
        gw_openai_error(req, 400, "invalid_request_error", "unsupported_value", "previous_response_id",
                        "only the newest response of a conversation can be continued");
        return false;
    }
    const size_t have = s->instructions_len;
    if (r->instructions && (r->instructions_len != have || memcmp(r->instructions, s->instructions, have) != 0)) {
        gw_openai_error(req, 400, "invalid_request_error", "unsupported_value", "instructions",
                        "with previous_response_id, instructions must be left out or be the same as before "
                        "(changing them would recompute the conversation)");
        return false;
    }
    return true;
}

/* The session that answered previous_response_id, if it is this tenant's and
 * that response is its newest; else the request is answered (NULL). */
static gw_session *find_previous(fg_gateway_t *gw, gw_http_req *req, int tenant, const gw_resp_req *r)
{
    char sid[48];
    unsigned long long n = 0;
    gw_session *s = parse_response_id(r->previous_response_id, sid, &n) ? gw_session_find(gw, sid, strlen(sid)) : NULL;
    if (!s || s->tenant != tenant) { /* another tenant's is not found either */
        not_found(req, r->previous_response_id);
        return NULL;
    }
    return previous_usable(req, s, r, n) ? s : NULL;
}

/* ---- previous_response_id of a session another instance held (gw_cluster.c) ---- */

static void prev_adopt(gw_sink *k, gw_dir_wait *w)
{
    gw_oa_call *c = lws_container_of(k, gw_oa_call, sink);
    respx *x = c->user;
    fg_proto_code code;
    char msg[400];
    gw_session *s = gw_session_restore(k->gw, k->tenant, w->session_id, strlen(w->session_id), &code, msg, sizeof msg);
    if (!s) {
        gw_cluster_restore_failed(k->gw, k->tenant, w->session_id, strlen(w->session_id),
                                  code == FG_PROTO_SESSION_NOT_FOUND);
        if (code == FG_PROTO_SESSION_NOT_FOUND)
            not_found(c->req, x->r.previous_response_id);
        else
            gw_openai_error(c->req, code == FG_PROTO_SESSION_LOST ? 410 : 500, "server_error",
                            fg_proto_error_code_name(code), "previous_response_id", msg);
        return gw_oa_call_free(c);
    }
    if (!previous_usable(c->req, s, &x->r, w->arg)) {
        gw_session_destroy(s, true); /* back to its file, untouched */
        return gw_oa_call_free(c);
    }
    gw_oa_call_continue(c, s);
}

/* 409 (session_elsewhere, session_taken) with error.location, as docs/protocol.md "HTTP APIs" has it. */
static void prev_refuse(gw_sink *k, gw_dir_wait *w, fg_proto_code code, const fg_dir_result *r, uint32_t retry,
                        const char *msg)
{
    (void)w;
    (void)retry;
    gw_oa_call *c = lws_container_of(k, gw_oa_call, sink);
    respx *x = c->user;
    if (code == FG_PROTO_SESSION_NOT_FOUND) {
        not_found(c->req, x->r.previous_response_id);
    } else if (r && r->owner[0]) {
        char m[400], inst[160], url[600], body[1400];
        snprintf(body, sizeof body,
                 "{\"error\":{\"message\":%s,\"type\":\"invalid_request_error\",\"param\":\"previous_response_id\","
                 "\"code\":\"%s\",\"location\":{\"instance_id\":%s,\"url\":%s}}}",
                 fg_log_str(m, sizeof m, msg), fg_proto_error_code_name(code), fg_log_str(inst, sizeof inst, r->owner),
                 fg_log_str(url, sizeof url, r->owner_url));
        gw_http_reply(c->req, 409, body);
    } else {
        gw_openai_error(c->req, code == FG_PROTO_QUOTA_UNAVAILABLE ? 503 : 500, "server_error",
                        fg_proto_error_code_name(code), NULL, msg);
    }
    gw_oa_call_free(c);
}

static const gw_cluster_ops prev_ops = {prev_adopt, prev_refuse};

void gw_openai_responses(fg_gateway_t *gw, gw_http_req *req)
{
    const int tenant = gw_openai_admit(gw, req, "POST", 1);
    if (tenant < 0)
        return;
    respx *x = calloc(1, sizeof *x);
    gw_oa_call *c = x ? gw_oa_call_new(gw, req, tenant, &resp_surface, x) : NULL;
    if (!c) {
        free(x);
        return gw_openai_error(req, 500, "server_error", "internal_error", NULL, "out of memory");
    }
    size_t len;
    const char *body = gw_http_body(req, &len);
    gw_oa_error err;
    if (gw_resp_parse(body, len, &gw->limits, gw_openai_model_id(gw), &x->r, &err) != FG_OK) {
        gw_openai_error(req, err.status, err.type, err.code, err.param[0] ? err.param : NULL, err.message);
        return gw_oa_call_free(c);
    }
    char sid[48];
    unsigned long long n = 0;
    bool held_elsewhere = x->r.previous_response_id && gw_cluster_on(gw) &&
                          parse_response_id(x->r.previous_response_id, sid, &n) && !gw_session_find(gw, sid, strlen(sid));
    gw_session *prev = x->r.previous_response_id && !held_elsewhere ? find_previous(gw, req, tenant, &x->r) : NULL;
    if (x->r.previous_response_id && !prev && !held_elsewhere)
        return gw_oa_call_free(c);
    snprintf(c->sink.model, sizeof c->sink.model, "%.64s", x->r.model);
    c->stream = x->r.stream;
    c->keep = x->r.store;
    c->items = x->r.items;
    c->n_items = x->r.n_items;
    c->sampling = x->r.sampling;
    c->tools = &x->r.tools;
    if (held_elsewhere) { /* not here: the session directory says where, or this instance adopts it */
        gw_oa_call_hold(c);
        gw_cluster_claim(&c->sink, sid, strlen(sid), &prev_ops, n, NULL);
    } else if (prev) {
        gw_oa_call_continue(c, prev);
    } else {
        gw_oa_call_start(c, x->r.instructions, x->r.instructions_len);
    }
}
