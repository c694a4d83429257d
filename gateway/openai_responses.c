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
 * A stored response's final Response object is kept on its session (the
 * newest GW_SAVED_MAX) for GET /v1/responses/{id}; DELETE drops it, and
 * deleting the newest ends the session, which is how a client gives back a
 * stored conversation's KV and its sessions.max_per_tenant slot at once.
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
    bool message_closed; /* its done events are out: a call streams after it */
    char call_id[80], call_item[80], call_name[80]; /* the call streaming now */
} respx;

/* Starts one event: a server-sent event (its name, then the data) or, on a
 * WebSocket, one message; the data's type and number. */
static void ev_begin(gw_oa_call *c, const char *name)
{
    respx *x = c->user;
    if (!c->ws)
        gw_oa_writef(c, "event: %s\ndata: ", name);
    gw_oa_writef(c, "{\"type\":\"%s\",\"sequence_number\":%llu", name, (unsigned long long)x->seq++);
}

static void ev_end(gw_oa_call *c)
{
    if (c->ws)
        gw_oa_lit(c, "}");
    else
        gw_oa_lit(c, "}\n\n");
    gw_oa_event_end(c);
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

/* The request's tool_choice and tools, as it gave them (tools verbatim). */
static void put_tools(gw_oa_call *c, const gw_oa_tools *t)
{
    const char *word = t->has_choice ? fg_proto_tool_choice_word(t->choice) : "auto";
    gw_oa_lit(c, ",\"tool_choice\":");
    if (word) {
        gw_oa_writef(c, "\"%s\"", word);
    } else {
        gw_oa_lit(c, "{\"type\":\"function\",\"name\":");
        put_text(c, t->choice_name, strlen(t->choice_name));
        gw_oa_lit(c, "}");
    }
    gw_oa_lit(c, ",\"tools\":");
    if (t->json)
        gw_oa_write(c, t->json, t->len);
    else
        gw_oa_lit(c, "[]");
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
    gw_oa_lit(c, ",\"text\":{\"format\":{\"type\":\"text\"}}");
    put_tools(c, &x->r.tools);
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
    if (x->message_closed)
        return; /* text after a call: in the response object only (its message item is done) */
    ev_begin(c, "response.output_text.delta");
    gw_oa_writef(c, ",\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,\"delta\":", x->item_id);
    put_text(c, t, n);
    gw_oa_lit(c, ",\"logprobs\":[]");
    ev_end(c);
}

/* Keeps the Response object as the reply shows it (written once, copied), for
 * GET /v1/responses/{id}; the newest GW_SAVED_MAX of a session stay. */
static void put_final_response(gw_oa_call *c, const gw_oa_result *r)
{
    respx *x = c->user;
    gw_session *s = c->sink.session;
    if (!x->r.store || !s)
        return put_response(c, r);
    gw_oa_capture_begin(c);
    put_response(c, r);
    size_t len = 0;
    char *json = gw_oa_capture_end(c, &len);
    if (!json) {
        fg_log_at(FG_LOG_WARN, "response_not_stored", gw_session_tenant(s), s->id, "\"reason\":\"out_of_memory\"");
        return;
    }
    if (s->n_saved == GW_SAVED_MAX) {
        free(s->saved[0].json);
        memmove(s->saved, s->saved + 1, (GW_SAVED_MAX - 1) * sizeof *s->saved);
        s->n_saved--;
    }
    gw_saved *v = s->saved ? s->saved : calloc(GW_SAVED_MAX, sizeof *v);
    if (!v) {
        free(json);
        return;
    }
    s->saved = v;
    v[s->n_saved++] = (gw_saved){.n = s->resp_counter, .json = json, .len = len};
}

/* The message item's done events (output 0), with the text so far. */
static void close_message(gw_oa_call *c, const char *status)
{
    respx *x = c->user;
    x->message_closed = true;
    ev_begin(c, "response.output_text.done");
    gw_oa_writef(c, ",\"item_id\":\"%s\",\"output_index\":0,\"content_index\":0,\"text\":", x->item_id);
    put_text(c, c->text, c->text_len);
    gw_oa_lit(c, ",\"logprobs\":[]");
    ev_end(c);
    part_event(c, "response.content_part.done", true);
    ev_begin(c, "response.output_item.done");
    gw_oa_lit(c, ",\"output_index\":0,\"item\":");
    put_item(c, status, true);
    ev_end(c);
}

/* A function_call output item's event: added (in progress, no arguments) or done (args). */
static void call_item_event(gw_oa_call *c, bool done, unsigned at, const char *id, const char *call_id,
                            const char *name, const char *args, size_t args_len)
{
    ev_begin(c, done ? "response.output_item.done" : "response.output_item.added");
    gw_oa_writef(c, ",\"output_index\":%u,\"item\":{\"type\":\"function_call\",\"id\":", at);
    put_text(c, id, strlen(id));
    gw_oa_lit(c, ",\"call_id\":");
    put_text(c, call_id, strlen(call_id));
    gw_oa_lit(c, ",\"name\":");
    put_text(c, name, strlen(name));
    gw_oa_lit(c, ",\"arguments\":");
    put_text(c, done ? args : "", done ? args_len : 0);
    gw_oa_writef(c, ",\"status\":\"%s\"}", done ? "completed" : "in_progress");
    ev_end(c);
}

/* A call as it streams, after the message item (output 0): its item at
 * output index + 1, its arguments delta by delta, then done. */
static void resp_call(gw_oa_call *c, const gw_oa_call_ev *ev)
{
    respx *x = c->user;
    const unsigned at = ev->index + 1;
    switch (ev->step) {
    case GW_OA_CALL_BEGIN:
        if (!x->message_closed)
            close_message(c, "completed");
        snprintf(x->call_id, sizeof x->call_id, "%s", ev->call_id);
        snprintf(x->call_item, sizeof x->call_item, "%s", ev->item_id);
        snprintf(x->call_name, sizeof x->call_name, "%s", ev->name);
        call_item_event(c, false, at, x->call_item, x->call_id, x->call_name, NULL, 0);
        break;
    case GW_OA_CALL_DELTA:
        ev_begin(c, "response.function_call_arguments.delta");
        gw_oa_lit(c, ",\"item_id\":");
        put_text(c, x->call_item, strlen(x->call_item));
        gw_oa_writef(c, ",\"output_index\":%u,\"delta\":", at);
        gw_oa_write(c, ev->json, ev->len); /* a JSON string already */
        ev_end(c);
        break;
    case GW_OA_CALL_DONE:
        ev_begin(c, "response.function_call_arguments.done");
        gw_oa_lit(c, ",\"item_id\":");
        put_text(c, x->call_item, strlen(x->call_item));
        gw_oa_writef(c, ",\"output_index\":%u,\"arguments\":", at);
        put_text(c, ev->json, ev->len);
        ev_end(c);
        call_item_event(c, true, at, x->call_item, x->call_id, x->call_name, ev->json, ev->len);
        break;
    }
}

static void resp_done(gw_oa_call *c, const gw_oa_result *r)
{
    respx *x = c->user;
    if (!c->streaming) {
        put_final_response(c, r);
        return gw_oa_reply(c);
    }
    if (!x->message_closed)
        close_message(c, r->incomplete ? "incomplete" : "completed");
    size_t i;
    json_t *item;
    if (r->calls && !c->calls_streamed) /* calls that did not stream (none should): whole, after the message */
        json_array_foreach(r->calls, i, item) {
            const json_t *a = json_object_get(item, "arguments");
            const char *id = json_string_value(json_object_get(item, "id"));
            const char *cid = json_string_value(json_object_get(item, "call_id"));
            const char *name = json_string_value(json_object_get(item, "name"));
            gw_oa_call_ev ev = {.step = GW_OA_CALL_BEGIN, .index = (uint32_t)i, .item_id = id ? id : "",
                                .call_id = cid ? cid : "", .name = name ? name : ""};
            resp_call(c, &ev);
            ev = (gw_oa_call_ev){.step = GW_OA_CALL_DONE, .index = (uint32_t)i,
                                 .json = json_string_value(a) ? json_string_value(a) : "", .len = json_string_length(a)};
            resp_call(c, &ev);
        }
    ev_begin(c, r->incomplete ? "response.incomplete" : "response.completed");
    gw_oa_lit(c, ",\"response\":");
    put_final_response(c, r);
    ev_end(c);
    gw_oa_stream_end(c);
}

static void resp_failed(gw_oa_call *c, unsigned status, const char *type, const char *code, const char *param,
                        const char *msg)
{
    if (!c->streaming || c->ws) /* a WebSocket's error event is the same before and after the start */
        return gw_oa_fail(c, status, type, code, param, msg);
    char m[400], p[160];
    ev_begin(c, "error");
    gw_oa_writef(c, ",\"code\":\"%s\",\"message\":%s,\"param\":%s", code, fg_log_str(m, sizeof m, msg),
                 param ? fg_log_str(p, sizeof p, param) : "null");
    ev_end(c);
    gw_oa_stream_end(c);
}

static void resp_free(gw_oa_call *c)
{
    respx *x = c->user;
    gw_resp_req_free(&x->r);
    free(x);
}

static const gw_oa_surface resp_surface = {resp_started, resp_text, resp_done, resp_failed, resp_free, resp_call};

/* The session id and number of a well-formed response id "resp_<32 hex>_<n>". */
static bool parse_response_id(const char *id, char sid[48], uint64_t *n_out)
{
    unsigned long long n = 0;
    int end = 0;
    if (strlen(id) < 5 + 32 + 2 || strncmp(id, "resp_", 5) != 0 || id[37] != '_' || id[38] < '0' || id[38] > '9' ||
        sscanf(id + 38, "%llu%n", &n, &end) != 1 || id[38 + end] != 0)
        return false;
    snprintf(sid, 48, "sess_%.32s", id + 5);
    *n_out = n;
    return true;
}

/* The session named by a response id if it is tenant's, and n; NULL when
 * there is none or it is another tenant's (not found either). */
static gw_session *session_of_response(fg_gateway_t *gw, int tenant, const char *id, uint64_t *n_out)
{
    char sid[48];
    if (!parse_response_id(id, sid, n_out))
        return NULL;
    gw_session *s = gw_session_find(gw, sid, strlen(sid));
    return s && s->tenant == tenant ? s : NULL;
}

/* The session that answered previous_response_id, if it is this tenant's and
 * that response is its newest; else the request is answered (NULL). */
static gw_session *find_previous(fg_gateway_t *gw, gw_oa_call *c, int tenant, const gw_resp_req *r)
{
    const char *id = r->previous_response_id;
    char msg[300];
    uint64_t n = 0;
    gw_session *s = session_of_response(gw, tenant, id, &n);
    if (!s) {
        snprintf(msg, sizeof msg, "Previous response with id '%.100s' not found.", id);
        gw_oa_fail(c, 404, "invalid_request_error", "previous_response_not_found", "previous_response_id", msg);
        return NULL;
    }
    if (s->sink || s->responding || s->quota_pending || s->forks || s->cutting) {
        gw_oa_fail(c, 409, "invalid_request_error", "response_in_progress", "previous_response_id",
                        "the conversation of this response is in use by another request");
        return NULL;
    }
    if (n != s->resp_counter) {
        gw_oa_fail(c, 400, "invalid_request_error", "unsupported_value", "previous_response_id",
                        "only the newest response of a conversation can be continued");
        return NULL;
    }
    const size_t have = s->instructions_len;
    if (r->instructions && (r->instructions_len != have || memcmp(r->instructions, s->instructions, have) != 0)) {
        gw_oa_fail(c, 400, "invalid_request_error", "unsupported_value", "instructions",
                        "with previous_response_id, instructions must be left out or be the same as before "
                        "(changing them would recompute the conversation)");
        return NULL;
    }
    return s;
}

/* ---- previous_response_id of a session another instance held (gw_cluster.c) ---- */

/* The restore of an adopted session ended; w (a copy of the directory's wait) is c's dir_wait meanwhile, so its
 * sink is NULL if the client left. */
static void prev_restored(void *user, gw_session *s, fg_proto_code code, const char *msg)
{
    gw_dir_wait *w = user;
    if (!s)
        gw_cluster_restore_failed(w->gw, w->tenant, w->session_id, strlen(w->session_id),
                                  code == FG_PROTO_SESSION_NOT_FOUND);
    if (!w->sink) {
        if (s)
            gw_session_destroy(s, true);
        free(w);
        return;
    }
    gw_oa_call *c = lws_container_of(w->sink, gw_oa_call, sink);
    c->sink.dir_wait = NULL;
    respx *x = c->user;
    if (!s) {
        char m[300];
        snprintf(m, sizeof m, "Previous response with id '%.100s' not found.", x->r.previous_response_id);
        if (code == FG_PROTO_SESSION_NOT_FOUND)
            gw_oa_fail(c, 404, "invalid_request_error", "previous_response_not_found", "previous_response_id", m);
        else
            gw_oa_fail(c, code == FG_PROTO_SESSION_LOST ? 410 : 500, "server_error", fg_proto_error_code_name(code),
                       "previous_response_id", msg);
        free(w);
        return gw_oa_call_free(c);
    }
    /* Restored from its file, the session knows its newest response number only to within the file's id
     * reservation: the saved conversation is continued (docs/deploy.md, "Sessions across instances"). */
    const uint64_t n = w->arg;
    bool usable = !s->sink && !s->responding && !s->quota_pending && n >= s->resp_floor && n <= s->resp_counter &&
                  (!x->r.instructions || (x->r.instructions_len == s->instructions_len &&
                                          memcmp(x->r.instructions, s->instructions, s->instructions_len) == 0));
    free(w);
    if (!usable) {
        gw_session_destroy(s, true); /* back to its file, untouched */
        gw_oa_fail(c, 400, "invalid_request_error", "unsupported_value", "instructions",
                   "with previous_response_id, instructions must be left out or be the same as before "
                   "(changing them would recompute the conversation)");
        return gw_oa_call_free(c);
    }
    gw_oa_call_continue(c, s);
}

static void prev_adopt(gw_sink *k, gw_dir_wait *w)
{
    gw_oa_call *c = lws_container_of(k, gw_oa_call, sink);
    gw_dir_wait *w2 = malloc(sizeof *w2);
    fg_proto_code code = FG_PROTO_INTERNAL_ERROR;
    char msg[400] = "out of memory";
    if (w2) {
        *w2 = *w;
        w2->sink = k;
        k->dir_wait = w2; /* the client leaving clears w2->sink */
        if (gw_session_restore(k->gw, k->tenant, w->session_id, strlen(w->session_id), prev_restored, w2, &code, msg,
                               sizeof msg))
            return;
        k->dir_wait = NULL;
        free(w2);
    }
    gw_cluster_restore_failed(k->gw, k->tenant, w->session_id, strlen(w->session_id), false);
    gw_oa_fail(c, 500, "server_error", "internal_error", "previous_response_id", msg);
    gw_oa_call_free(c);
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
        char m[300];
        snprintf(m, sizeof m, "Previous response with id '%.100s' not found.", x->r.previous_response_id);
        gw_oa_fail(c, 404, "invalid_request_error", "previous_response_not_found", "previous_response_id", m);
    } else if (r && r->owner[0] && c->req) {
        char m[400], inst[160], url[600], body[1400];
        snprintf(body, sizeof body,
                 "{\"error\":{\"message\":%s,\"type\":\"invalid_request_error\",\"param\":\"previous_response_id\","
                 "\"code\":\"%s\",\"location\":{\"instance_id\":%s,\"url\":%s}}}",
                 fg_log_str(m, sizeof m, msg), fg_proto_error_code_name(code), fg_log_str(inst, sizeof inst, r->owner),
                 fg_log_str(url, sizeof url, r->owner_url));
        gw_http_reply(c->req, 409, body);
        c->req = NULL;
    } else {
        gw_oa_fail(c, code == FG_PROTO_QUOTA_UNAVAILABLE ? 503 : 500, "server_error", fg_proto_error_code_name(code),
                   NULL, msg);
    }
    gw_oa_call_free(c);
}

static const gw_cluster_ops prev_ops = {prev_adopt, prev_refuse};

/* Runs a parsed request (x->r) as the call c, on a new session or the previous response's. */
static void run(fg_gateway_t *gw, gw_oa_call *c, int tenant)
{
    respx *x = c->user;
    char sid[48];
    uint64_t n = 0;
    /* over HTTP, a conversation held nowhere here: the session directory says where, or this instance adopts it */
    const bool held_elsewhere = x->r.previous_response_id && c->req && !c->ws && gw_cluster_on(gw) &&
                                parse_response_id(x->r.previous_response_id, sid, &n) &&
                                !gw_session_find(gw, sid, strlen(sid));
    gw_session *prev = x->r.previous_response_id && !held_elsewhere ? find_previous(gw, c, tenant, &x->r) : NULL;
    if (x->r.previous_response_id && !prev && !held_elsewhere)
        return gw_oa_call_free(c);
    snprintf(c->sink.model, sizeof c->sink.model, "%.64s", x->r.model);
    c->stream = x->r.stream || c->ws;
    c->keep = x->r.store || c->ws; /* a WebSocket keeps a store: false one for itself */
    c->conn_local = c->ws && !x->r.store;
    c->items = x->r.items;
    c->n_items = x->r.n_items;
    c->sampling = x->r.sampling;
    c->tools = &x->r.tools;
    if (held_elsewhere) {
        gw_oa_call_hold(c);
        gw_cluster_claim(&c->sink, sid, strlen(sid), &prev_ops, n, NULL);
    } else if (prev) {
        gw_oa_call_continue(c, prev);
    } else {
        gw_oa_call_start(c, x->r.instructions, x->r.instructions_len);
    }
}

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
    run(gw, c, tenant);
}

void gw_openai_responses_ws(fg_gateway_t *gw, gw_conn *ws, const char *text, size_t len)
{
    respx *x = calloc(1, sizeof *x);
    gw_oa_call *c = x ? gw_oa_call_new_ws(gw, ws, ws->sink.tenant, &resp_surface, x) : NULL;
    if (!c) {
        free(x);
        return gw_rws_error(ws, 500, "server_error", "internal_error", NULL, "out of memory");
    }
    gw_oa_error err;
    if (gw_resp_ws_parse(text, len, &gw->limits, gw_openai_model_id(gw), &x->r, &err) != FG_OK) {
        gw_oa_fail(c, err.status, err.type, err.code, err.param[0] ? err.param : NULL, err.message);
        return gw_oa_call_free(c);
    }
    run(gw, c, ws->sink.tenant);
}

/* The stored response's index in s->saved, or -1. */
static int saved_index(const gw_session *s, uint64_t n)
{
    for (uint32_t i = 0; i < s->n_saved; i++)
        if (s->saved[i].n == n)
            return (int)i;
    return -1;
}

void gw_openai_response_stored(fg_gateway_t *gw, gw_http_req *req, const char *id)
{
    const bool del = !strcmp(gw_http_method(req), "DELETE");
    const int tenant = gw_openai_admit(gw, req, del ? "DELETE" : "GET", 0);
    if (tenant < 0)
        return;
    char msg[300];
    if (strchr(id, '/')) { /* /input_items, /cancel */
        snprintf(msg, sizeof msg, "%.200s is not supported by this server", gw_http_path(req));
        return gw_openai_error(req, 404, "invalid_request_error", "unsupported_endpoint", NULL, msg);
    }
    uint64_t n = 0;
    gw_session *s = session_of_response(gw, tenant, id, &n);
    const int at = s ? saved_index(s, n) : -1;
    if (at < 0) { /* unknown, another tenant's, store: false, deleted, or older than the kept ones */
        snprintf(msg, sizeof msg, "Response with id '%.100s' not found.", id);
        return gw_openai_error(req, 404, "invalid_request_error", "response_not_found", "response_id", msg);
    }
    if (!del)
        return gw_http_reply(req, 200, s->saved[at].json);
    const bool newest = n == s->resp_counter;
    if (newest && (s->sink || s->responding || s->quota_pending))
        return gw_openai_error(req, 409, "invalid_request_error", "response_in_progress", "response_id",
                               "the conversation of this response is in use by another request");
    char body[200], idj[160];
    snprintf(body, sizeof body, "{\"id\":%s,\"object\":\"response.deleted\",\"deleted\":true}",
             fg_log_str(idj, sizeof idj, id));
    if (newest) {
        /* Nothing can continue the conversation any more: its session (KV,
         * slot of sessions.max_per_tenant) ends, its older responses with it. */
        fg_log_at(FG_LOG_INFO, "response_deleted", gw_session_tenant(s), s->id, "\"session_ended\":true");
        gw_session_destroy(s, false);
    } else {
        free(s->saved[at].json);
        memmove(s->saved + at, s->saved + at + 1, (s->n_saved - (uint32_t)at - 1) * sizeof *s->saved);
        s->n_saved--;
    }
    gw_http_reply(req, 200, body);
}
