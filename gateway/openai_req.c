/* openai_req.c: POST /v1/chat/completions bodies (openai_req.h). One
 * validation pipeline: every field is checked for its type and range, and the
 * first bad one is returned with its JSON path; nothing is clamped. Fields
 * OpenAI has that flashgate cannot honour (n > 1, logprobs, JSON
 * response formats, audio) are refused with 400 rather than dropped. */
#include "gateway/openai_req.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/name.h"
#include "gateway/tool_decl.h"

static fg_err refuse(gw_oa_error *err, unsigned status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static fg_err refuse(gw_oa_error *err, unsigned status, const char *code, const char *param, const char *fmt, ...)
{
    err->status = status;
    err->type = status == 404 && !strcmp(code, "model_not_found") ? "invalid_request_error"
                : status >= 500                                   ? "server_error"
                                                                  : "invalid_request_error";
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return status == 500 ? FG_ERR_NOMEM : FG_ERR_INVALID_ARG;
}

static fg_err wrong_type(gw_oa_error *err, const char *param, const char *want)
{
    return refuse(err, 400, "invalid_type", param, "%s must be %s", param, want);
}

/* A number field in [lo, hi] (lo_open: lo itself excluded). */
static fg_err number_in(json_t *v, const char *param, double lo, bool lo_open, double hi, double *out,
                        gw_oa_error *err)
{
    if (!json_is_number(v))
        return wrong_type(err, param, "a number");
    const double x = json_number_value(v);
    if (!(x >= lo) || (lo_open && x == lo) || !(x <= hi))
        return refuse(err, 400, "invalid_value", param, "%s must be in %s%g, %g]", param, lo_open ? "(" : "[", lo, hi);
    *out = x;
    return FG_OK;
}

static fg_err integer_in(json_t *v, const char *param, json_int_t lo, json_int_t hi, json_int_t *out,
                         gw_oa_error *err)
{
    if (!json_is_integer(v))
        return wrong_type(err, param, "an integer");
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return refuse(err, 400, "invalid_value", param, "%s must be in [%lld, %lld]", param, (long long)lo,
                      (long long)hi);
    *out = x;
    return FG_OK;
}

static fg_err parse_stop(json_t *v, fg_proto_sampling *s, gw_oa_error *err)
{
    if (json_is_null(v))
        return FG_OK;
    json_t *one[1] = {v};
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > FG_PROTO_MAX_STOP)
            return refuse(err, 400, "invalid_value", "stop", "stop holds at most %d strings", FG_PROTO_MAX_STOP);
    } else if (!json_is_string(v)) {
        return wrong_type(err, "stop", "a string or an array of strings");
    }
    s->has_stop = true;
    s->n_stop = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_array(v) ? json_array_get(v, i) : one[0];
        char p[32];
        snprintf(p, sizeof p, json_is_array(v) ? "stop[%zu]" : "stop", i);
        if (!json_is_string(x))
            return wrong_type(err, p, "a string");
        const size_t len = json_string_length(x);
        if (len < 1 || len > FG_PROTO_MAX_STOP_BYTES || strlen(json_string_value(x)) != len)
            return refuse(err, 400, "invalid_value", p, "a stop string is 1..%d bytes without NUL",
                          FG_PROTO_MAX_STOP_BYTES);
        s->stop[i] = (fg_proto_str){json_string_value(x), len};
    }
    return FG_OK;
}

/* A message's content: a string, or an array of {"type":"text","text":...} parts. */
static fg_err parse_content(json_t *c, const char *list, size_t i, fg_proto_item *it, const fg_proto_limits *lim,
                            gw_oa_error *err)
{
    char p[64];
    snprintf(p, sizeof p, "%s[%zu].content", list, i);
    const fg_proto_part_type pt = it->role == FG_PROTO_ROLE_ASSISTANT ? FG_PROTO_PART_OUTPUT_TEXT
                                                                      : FG_PROTO_PART_INPUT_TEXT;
    if (json_is_string(c)) {
        it->n_content = 1;
        it->content[0] = (fg_proto_part){pt, {json_string_value(c), json_string_length(c)}};
    } else if (json_is_array(c)) {
        const size_t n = json_array_size(c);
        if (n < 1 || n > FG_PROTO_MAX_PARTS)
            return refuse(err, 400, "invalid_value", p, "%s holds 1..%d parts", p, FG_PROTO_MAX_PARTS);
        for (size_t k = 0; k < n; k++) {
            json_t *part = json_array_get(c, k), *type = json_object_get(part, "type");
            json_t *text = json_object_get(part, "text");
            snprintf(p, sizeof p, "%s[%zu].content[%zu]", list, i, k);
            if (!json_is_object(part))
                return wrong_type(err, p, "an object");
            const char *ts = json_string_value(type);
            if (!ts || (strcmp(ts, "text") && strcmp(ts, "input_text") && strcmp(ts, "output_text")))
                return refuse(err, 400, "invalid_value", p,
                              "only text content parts are supported (type \"text\", \"input_text\", \"output_text\")");
            snprintf(p, sizeof p, "%s[%zu].content[%zu].text", list, i, k);
            if (!json_is_string(text))
                return wrong_type(err, p, "a string");
            it->content[k] = (fg_proto_part){pt, {json_string_value(text), json_string_length(text)}};
        }
        it->n_content = (uint32_t)n;
    } else {
        return wrong_type(err, p, "a string or an array of text parts");
    }
    for (uint32_t k = 0; k < it->n_content; k++) {
        const fg_proto_str t = it->content[k].text;
        if (t.len > lim->max_text_bytes)
            return refuse(err, 400, "invalid_value", p, "a message's text is limited to %zu bytes", lim->max_text_bytes);
        if (strlen(t.ptr) != t.len)
            return refuse(err, 400, "invalid_value", p, "text must not contain NUL characters");
    }
    return FG_OK;
}

static bool join_instructions(gw_chat_req *r, const fg_proto_item *it)
{
    for (uint32_t k = 0; k < it->n_content; k++) {
        const fg_proto_str t = it->content[k].text;
        const size_t sep = r->instructions_len ? 2 : 0;
        char *b = realloc(r->instructions, r->instructions_len + sep + t.len + 1);
        if (!b)
            return false;
        memcpy(b + r->instructions_len, "\n\n", sep);
        memcpy(b + r->instructions_len + sep, t.ptr, t.len);
        r->instructions_len += sep + t.len;
        b[r->instructions_len] = 0;
        r->instructions = b;
    }
    return true;
}

/* tools and tool_choice (both shapes, gateway/tool_decl.h), checked together. */
static fg_err parse_tools(json_t *o, gw_oa_tools *t, gw_oa_error *err)
{
    json_t *tv = json_object_get(o, "tools"), *cv = json_object_get(o, "tool_choice");
    fg_tool_set set = {0};
    fg_diag d = {{0}};
    fg_err e = fg_tool_set_parse(tv, &set, &d);
    if (e != FG_OK) {
        char p[96];
        const char *colon = strchr(d.msg, ':');
        snprintf(p, sizeof p, "%.*s", colon ? (int)(colon - d.msg) : 5, colon ? d.msg : "tools");
        return refuse(err, 400, e == FG_ERR_UNSUPPORTED ? "unsupported_value" : "invalid_value", p, "%s", d.msg);
    }
    fg_tool_choice c;
    e = fg_tool_choice_parse(cv, &c, &d);
    if (e == FG_OK)
        e = fg_tool_choice_check(&set, &c, &d);
    const uint32_t n = set.n;
    fg_tool_set_free(&set);
    if (e != FG_OK)
        return refuse(err, 400, e == FG_ERR_UNSUPPORTED ? "unsupported_value" : "invalid_value", "tool_choice", "%s",
                      d.msg);
    if (cv && !json_is_null(cv)) {
        t->has_choice = true;
        t->choice = fg_tool_choice_to_proto(&c);
        snprintf(t->choice_name, sizeof t->choice_name, "%s", c.mode == FG_TOOL_CHOICE_NAMED ? c.name : "");
    }
    if (n) {
        if (!(t->json = json_dumps(tv, JSON_COMPACT)))
            return refuse(err, 500, "internal_error", NULL, "out of memory");
        t->len = strlen(t->json);
    }
    return FG_OK;
}

/* A string field of a tool item: its text (no NUL), or an error naming p. */
static fg_err str_field(json_t *m, const char *key, const char *list, size_t i, const char *sub, size_t max,
                        fg_proto_str *out, gw_oa_error *err)
{
    char p[96];
    snprintf(p, sizeof p, "%s[%zu]%s.%s", list, i, sub, key);
    json_t *v = json_object_get(m, key);
    if (!v || json_is_null(v))
        return refuse(err, 400, "missing_required_parameter", p, "%s is required", p);
    if (!json_is_string(v))
        return wrong_type(err, p, "a string");
    if (strlen(json_string_value(v)) != json_string_length(v) || json_string_length(v) > max)
        return refuse(err, 400, "invalid_value", p, "%s must be at most %zu bytes without NUL characters", p, max);
    /* ids and names: what the session layer's own items allow */
    const bool is_name = !strcmp(key, "name"), is_id = strstr(key, "id") != NULL;
    if ((is_name && !fg_name_valid(json_string_value(v), json_string_length(v))) ||
        (is_id && json_string_length(v) == 0))
        return refuse(err, 400, "invalid_value", p, "%s must be %s", p,
                      is_name ? "1 to 64 of [A-Za-z0-9_-]" : "a non-empty string");
    *out = (fg_proto_str){json_string_value(v), json_string_length(v)};
    return FG_OK;
}

/* A message's role; false when it is none of OpenAI's text roles. */
static fg_err parse_role(json_t *role, const char *p, fg_proto_role *out, gw_oa_error *err)
{
    if (!role)
        return refuse(err, 400, "missing_required_parameter", p, "%s is required", p);
    if (!json_is_string(role))
        return wrong_type(err, p, "a string");
    const char *rs = json_string_value(role);
    if (!strcmp(rs, "system") || !strcmp(rs, "developer"))
        *out = FG_PROTO_ROLE_SYSTEM;
    else if (!strcmp(rs, "user"))
        *out = FG_PROTO_ROLE_USER;
    else if (!strcmp(rs, "assistant"))
        *out = FG_PROTO_ROLE_ASSISTANT;
    else if (!strcmp(rs, "function"))
        return refuse(err, 400, "unsupported_value", p, "the deprecated \"function\" role is not supported; use \"tool\"");
    else
        return refuse(err, 400, "invalid_value", p,
                      "role must be one of \"system\", \"developer\", \"user\", \"assistant\", \"tool\"");
    return FG_OK;
}

static fg_err parse_messages(json_t *msgs, gw_chat_req *r, const fg_proto_limits *lim, gw_oa_error *err)
{
    if (!msgs)
        return refuse(err, 400, "missing_required_parameter", "messages", "messages is required");
    if (!json_is_array(msgs))
        return wrong_type(err, "messages", "an array");
    const size_t n = json_array_size(msgs);
    if (n < 1 || n > GW_CHAT_MAX_MESSAGES)
        return refuse(err, 400, "invalid_value", "messages", "messages holds 1..%d messages", GW_CHAT_MAX_MESSAGES);
    size_t n_items = n; /* an assistant message's tool calls are items of their own */
    for (size_t i = 0; i < n; i++) {
        json_t *calls = json_object_get(json_array_get(msgs, i), "tool_calls");
        n_items += json_is_array(calls) ? json_array_size(calls) : 0;
    }
    if (n_items > 4 * GW_CHAT_MAX_MESSAGES)
        return refuse(err, 400, "invalid_value", "messages", "messages hold too many tool calls");
    if (!(r->items = calloc(n_items, sizeof *r->items)))
        return refuse(err, 500, "internal_error", NULL, "out of memory");
    bool leading = true; /* system messages before any other are the instructions */
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(msgs, i), *role = json_object_get(m, "role");
        char p[48];
        snprintf(p, sizeof p, "messages[%zu]", i);
        if (!json_is_object(m))
            return wrong_type(err, p, "an object");
        snprintf(p, sizeof p, "messages[%zu].role", i);
        fg_proto_item it = {.type = FG_PROTO_ITEM_MESSAGE};
        if (json_is_string(role) && !strcmp(json_string_value(role), "tool")) { /* a tool's output */
            fg_proto_item o = {.type = FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT};
            fg_err e = str_field(m, "tool_call_id", "messages", i, "", FG_PROTO_MAX_ID_BYTES, &o.call_id, err);
            if (!e)
                e = str_field(m, "content", "messages", i, "", lim->max_text_bytes, &o.output, err);
            if (e)
                return e;
            leading = false;
            r->items[r->n_items++] = o;
            continue;
        }
        fg_err e = parse_role(role, p, &it.role, err);
        if (e)
            return e;
        json_t *calls = json_object_get(m, "tool_calls");
        const bool has_calls = calls && !json_is_null(calls);
        if (has_calls && (it.role != FG_PROTO_ROLE_ASSISTANT || !json_is_array(calls)))
            return refuse(err, 400, "invalid_value", "tool_calls", "tool_calls is an array on assistant messages");
        json_t *c = json_object_get(m, "content");
        snprintf(p, sizeof p, "messages[%zu].content", i);
        if ((!c || json_is_null(c)) && !has_calls)
            return refuse(err, 400, "missing_required_parameter", p, "%s is required", p);
        if (c && !json_is_null(c) && (e = parse_content(c, "messages", i, &it, lim, err)))
            return e;
        if (has_calls) { /* the text (if any), then each call as a function_call item */
            if (c && !json_is_null(c) && it.n_content && it.content[0].text.len)
                r->items[r->n_items++] = it;
            size_t j;
            json_t *tc;
            json_array_foreach(calls, j, tc) {
                char sub[48];
                snprintf(sub, sizeof sub, ".tool_calls[%zu]", j);
                json_t *f = json_object_get(tc, "function");
                fg_proto_item call = {.type = FG_PROTO_ITEM_FUNCTION_CALL};
                if (!json_is_object(tc) || !json_is_object(f))
                    return refuse(err, 400, "invalid_value", "tool_calls",
                                  "messages[%zu]%s must be {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                                  "\"arguments\"}}", i, sub);
                if ((e = str_field(tc, "id", "messages", i, sub, FG_PROTO_MAX_ID_BYTES, &call.call_id, err)))
                    return e;
                snprintf(sub, sizeof sub, ".tool_calls[%zu].function", j);
                if ((e = str_field(f, "name", "messages", i, sub, 64, &call.name, err)) ||
                    (e = str_field(f, "arguments", "messages", i, sub, lim->max_text_bytes, &call.arguments, err)))
                    return e;
                r->items[r->n_items++] = call;
            }
            leading = false;
            continue;
        }
        if (it.role == FG_PROTO_ROLE_SYSTEM && leading) {
            if (!join_instructions(r, &it))
                return refuse(err, 500, "internal_error", NULL, "out of memory");
            continue;
        }
        leading = false;
        r->items[r->n_items++] = it;
    }
    if (r->n_items == 0)
        return refuse(err, 400, "invalid_value", "messages", "messages needs a message that is not a system message");
    return FG_OK;
}

/* Fields OpenAI has that would change the answer and that flashgate cannot
 * honour: refused, not ignored. */
static fg_err refuse_unsupported(json_t *o, gw_oa_error *err)
{
    json_t *v;
    if ((v = json_object_get(o, "functions")) && !json_is_null(v))
        return refuse(err, 400, "unsupported_parameter", "functions", "functions are not supported");
    if ((v = json_object_get(o, "n")) && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return refuse(err, 400, "unsupported_value", "n", "only n = 1 is supported");
    if ((v = json_object_get(o, "logprobs")) && json_is_true(v))
        return refuse(err, 400, "unsupported_parameter", "logprobs", "logprobs are not supported");
    if ((v = json_object_get(o, "audio")) && !json_is_null(v))
        return refuse(err, 400, "unsupported_parameter", "audio", "audio output is not supported");
    if ((v = json_object_get(o, "modalities")) && !json_is_null(v)) {
        size_t i;
        json_t *x;
        if (!json_is_array(v))
            return wrong_type(err, "modalities", "an array");
        json_array_foreach(v, i, x) if (!json_is_string(x) || strcmp(json_string_value(x), "text"))
            return refuse(err, 400, "unsupported_value", "modalities", "only the \"text\" modality is supported");
    }
    if ((v = json_object_get(o, "response_format")) && !json_is_null(v)) {
        json_t *t = json_object_get(v, "type");
        if (!json_is_object(v) || !json_is_string(t) || strcmp(json_string_value(t), "text"))
            return refuse(err, 400, "unsupported_value", "response_format",
                          "only response_format {\"type\":\"text\"} is supported");
    }
    return FG_OK;
}

static fg_err parse_sampling(json_t *o, const fg_proto_limits *lim, fg_proto_sampling *s, gw_oa_error *err)
{
    json_t *v;
    fg_err e;
    if ((v = json_object_get(o, "temperature")) && !json_is_null(v)) {
        if ((e = number_in(v, "temperature", 0, false, 2, &s->temperature, err)))
            return e;
        s->has_temperature = true;
    }
    if ((v = json_object_get(o, "top_p")) && !json_is_null(v)) {
        if ((e = number_in(v, "top_p", 0, true, 1, &s->top_p, err)))
            return e;
        s->has_top_p = true;
    }
    json_int_t x;
    /* max_completion_tokens is the current name; max_tokens the deprecated one */
    static const char *const maxes[] = {"max_tokens", "max_completion_tokens"};
    for (int i = 0; i < 2; i++)
        if ((v = json_object_get(o, maxes[i])) && !json_is_null(v)) {
            if ((e = integer_in(v, maxes[i], 1, (json_int_t)lim->max_output_tokens, &x, err)))
                return e;
            s->has_max_output_tokens = true;
            s->max_output_tokens = (uint32_t)x;
        }
    if ((v = json_object_get(o, "seed")) && !json_is_null(v)) {
        if ((e = integer_in(v, "seed", 0, (json_int_t)FG_PROTO_MAX_SEED, &x, err)))
            return e;
        s->has_seed = true;
        s->seed = (uint64_t)x;
    }
    if ((v = json_object_get(o, "stop")) && (e = parse_stop(v, s, err)))
        return e;
    return FG_OK;
}

/* The body as an object with the served model; FG_OK with *o set (owned by the caller). */
static fg_err parse_head(const char *body, size_t len, const char *model_id, json_t **o_out, const char **model_out,
                         gw_oa_error *err)
{
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    *o_out = o;
    if (!o)
        return refuse(err, 400, "invalid_json", NULL, "the body is not valid JSON: %s (at byte %d)", je.text,
                      je.position);
    if (!json_is_object(o))
        return wrong_type(err, "body", "a JSON object");
    json_t *model = json_object_get(o, "model");
    if (!model)
        return refuse(err, 400, "missing_required_parameter", "model", "model is required");
    if (!json_is_string(model))
        return wrong_type(err, "model", "a string");
    if (strcmp(json_string_value(model), model_id) != 0)
        return refuse(err, 404, "model_not_found", "model", "The model '%.64s' does not exist; this server serves '%s'",
                      json_string_value(model), model_id);
    *model_out = json_string_value(model);
    return FG_OK;
}

static fg_err parse_bool(json_t *o, const char *name, bool *out, gw_oa_error *err)
{
    json_t *v = json_object_get(o, name);
    if (!v || json_is_null(v))
        return FG_OK;
    if (!json_is_boolean(v))
        return wrong_type(err, name, "a boolean");
    *out = json_is_true(v);
    return FG_OK;
}

fg_err gw_chat_parse(const char *body, size_t len, const fg_proto_limits *lim, const char *model_id, gw_chat_req *out,
                     gw_oa_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    json_t *o;
    fg_err e = parse_head(body, len, model_id, &o, &out->model, err);
    out->root_ = o;
    if (e || (e = refuse_unsupported(o, err)) || (e = parse_sampling(o, lim, &out->sampling, err)) ||
        (e = parse_bool(o, "stream", &out->stream, err)) || (e = parse_tools(o, &out->tools, err)))
        return e;
    json_t *v;
    if ((v = json_object_get(o, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return wrong_type(err, "stream_options", "an object");
        if (!out->stream)
            return refuse(err, 400, "invalid_value", "stream_options", "stream_options is only allowed with stream: true");
        json_t *u = json_object_get(v, "include_usage");
        if (u && !json_is_null(u) && !json_is_boolean(u))
            return wrong_type(err, "stream_options.include_usage", "a boolean");
        out->include_usage = json_is_true(u);
    }
    return parse_messages(json_object_get(o, "messages"), out, lim, err);
}

void gw_chat_req_free(gw_chat_req *r)
{
    free(r->tools.json);
    free(r->instructions);
    free(r->items);
    if (r->root_)
        json_decref(r->root_);
    memset(r, 0, sizeof *r);
}

/* ---- POST /v1/responses ---- */

/* input: a string (one user message) or message items ({"type":"message"} or
 * the easy form without a type). */
static fg_err parse_input(json_t *in, gw_resp_req *r, const fg_proto_limits *lim, gw_oa_error *err)
{
    if (!in)
        return refuse(err, 400, "missing_required_parameter", "input", "input is required");
    const size_t n = json_is_array(in) ? json_array_size(in) : 1;
    if (!json_is_string(in) && !json_is_array(in))
        return wrong_type(err, "input", "a string or an array of input items");
    if (n < 1 || n > GW_CHAT_MAX_MESSAGES)
        return refuse(err, 400, "invalid_value", "input", "input holds 1..%d items", GW_CHAT_MAX_MESSAGES);
    if (!(r->items = calloc(n, sizeof *r->items)))
        return refuse(err, 500, "internal_error", NULL, "out of memory");
    if (json_is_string(in)) {
        fg_proto_item *it = &r->items[r->n_items++];
        *it = (fg_proto_item){.type = FG_PROTO_ITEM_MESSAGE, .role = FG_PROTO_ROLE_USER};
        fg_err e = parse_content(in, "input", 0, it, lim, err);
        if (e)
            snprintf(err->param, sizeof err->param, "input");
        return e;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(in, i), *type = json_object_get(m, "type");
        char p[48];
        snprintf(p, sizeof p, "input[%zu]", i);
        if (!json_is_object(m))
            return wrong_type(err, p, "an object");
        const char *ts = json_is_string(type) ? json_string_value(type) : "";
        if (!strcmp(ts, "function_call_output") || !strcmp(ts, "function_call")) {
            fg_proto_item *it = &r->items[r->n_items];
            const bool out = !strcmp(ts, "function_call_output");
            *it = (fg_proto_item){.type = out ? FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT : FG_PROTO_ITEM_FUNCTION_CALL};
            fg_err e = str_field(m, "call_id", "input", i, "", FG_PROTO_MAX_ID_BYTES, &it->call_id, err);
            if (!e && out)
                e = str_field(m, "output", "input", i, "", lim->max_text_bytes, &it->output, err);
            if (!e && !out && !(e = str_field(m, "name", "input", i, "", 64, &it->name, err)))
                e = str_field(m, "arguments", "input", i, "", lim->max_text_bytes, &it->arguments, err);
            if (e)
                return e;
            r->n_items++;
            continue;
        }
        if (type && (!json_is_string(type) || strcmp(json_string_value(type), "message") != 0)) {
            snprintf(p, sizeof p, "input[%zu].type", i);
            if (!json_is_string(type))
                return wrong_type(err, p, "a string");
            return refuse(err, 400, "unsupported_value", p,
                          "only message, function_call and function_call_output input items are supported (not "
                          "\"%.48s\")",
                          json_string_value(type));
        }
        fg_proto_item *it = &r->items[r->n_items];
        *it = (fg_proto_item){.type = FG_PROTO_ITEM_MESSAGE};
        snprintf(p, sizeof p, "input[%zu].role", i);
        fg_err e = parse_role(json_object_get(m, "role"), p, &it->role, err);
        if (e)
            return e;
        json_t *c = json_object_get(m, "content");
        snprintf(p, sizeof p, "input[%zu].content", i);
        if (!c || json_is_null(c))
            return refuse(err, 400, "missing_required_parameter", p, "%s is required", p);
        if ((e = parse_content(c, "input", i, it, lim, err)))
            return e;
        r->n_items++;
    }
    return FG_OK;
}

fg_err gw_resp_parse(const char *body, size_t len, const fg_proto_limits *lim, const char *model_id, gw_resp_req *out,
                     gw_oa_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->store = true;
    json_t *o;
    fg_err e = parse_head(body, len, model_id, &o, &out->model, err);
    out->root_ = o;
    if (e || (e = parse_bool(o, "stream", &out->stream, err)) || (e = parse_bool(o, "store", &out->store, err)))
        return e;
    json_t *v;
    if ((e = parse_tools(o, &out->tools, err)))
        return e;
    if ((v = json_object_get(o, "background")) && json_is_true(v))
        return refuse(err, 400, "unsupported_parameter", "background", "background responses are not supported");
    if ((v = json_object_get(o, "conversation")) && !json_is_null(v))
        return refuse(err, 400, "unsupported_parameter", "conversation",
                      "conversations are not supported; continue with previous_response_id");
    if ((v = json_object_get(o, "text")) && !json_is_null(v)) {
        json_t *f = json_object_get(v, "format"), *t = json_object_get(f, "type");
        if (!json_is_object(v) || (f && !json_is_null(f) && (!json_is_string(t) || strcmp(json_string_value(t), "text"))))
            return refuse(err, 400, "unsupported_value", "text.format", "only the text format {\"type\":\"text\"} is supported");
    }
    if ((v = json_object_get(o, "temperature")) && !json_is_null(v)) {
        if ((e = number_in(v, "temperature", 0, false, 2, &out->sampling.temperature, err)))
            return e;
        out->sampling.has_temperature = true;
    }
    if ((v = json_object_get(o, "top_p")) && !json_is_null(v)) {
        if ((e = number_in(v, "top_p", 0, true, 1, &out->sampling.top_p, err)))
            return e;
        out->sampling.has_top_p = true;
    }
    if ((v = json_object_get(o, "max_output_tokens")) && !json_is_null(v)) {
        json_int_t x;
        if ((e = integer_in(v, "max_output_tokens", 1, (json_int_t)lim->max_output_tokens, &x, err)))
            return e;
        out->sampling.has_max_output_tokens = true;
        out->sampling.max_output_tokens = (uint32_t)x;
    }
    if ((v = json_object_get(o, "instructions")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return wrong_type(err, "instructions", "a string");
        if (strlen(json_string_value(v)) != json_string_length(v))
            return refuse(err, 400, "invalid_value", "instructions", "instructions must not contain NUL characters");
        out->instructions = json_string_value(v);
        out->instructions_len = json_string_length(v);
    }
    if ((v = json_object_get(o, "previous_response_id")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return wrong_type(err, "previous_response_id", "a string");
        out->previous_response_id = json_string_value(v);
    }
    return parse_input(json_object_get(o, "input"), out, lim, err);
}

fg_err gw_resp_ws_parse(const char *text, size_t len, const fg_proto_limits *lim, const char *model_id,
                        gw_resp_req *out, gw_oa_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    json_error_t je;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return refuse(err, 400, "invalid_json", NULL, "the message is not valid JSON: %s (at byte %d)", je.text,
                      je.position);
    json_t *t = json_object_get(o, "type");
    fg_err e = !json_is_object(o) ? wrong_type(err, "body", "a JSON object")
               : !t               ? refuse(err, 400, "missing_required_parameter", "type", "type is required")
               : !json_is_string(t) ? wrong_type(err, "type", "a string")
               : strcmp(json_string_value(t), "response.create")
                   ? refuse(err, 400, "invalid_value", "type",
                            "the Responses WebSocket mode takes \"response.create\" events only, not '%.64s'",
                            json_string_value(t))
                   : FG_OK;
    json_decref(o); /* parsed again as the body it holds: one request per message, not per token */
    if (e != FG_OK)
        return e;
    e = gw_resp_parse(text, len, lim, model_id, out, err);
    out->stream = true;
    return e;
}

void gw_resp_req_free(gw_resp_req *r)
{
    free(r->tools.json);
    free(r->items);
    if (r->root_)
        json_decref(r->root_);
    memset(r, 0, sizeof *r);
}

fg_err gw_secret_parse(const char *body, size_t len, const fg_proto_limits *lim, const char *model_id,
                       gw_secret_req *out, gw_oa_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->ttl_s = GW_SECRET_TTL_DEFAULT_S;
    json_error_t je;
    json_t *o = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &je) : json_object();
    fg_err e = FG_OK;
    if (!o) {
        if (len) /* else: out of memory */
            return refuse(err, 400, "invalid_json", NULL, "the body is not valid JSON: %s (at byte %d)", je.text,
                          je.position);
        return refuse(err, 500, "internal_error", NULL, "out of memory");
    }
    json_t *ea = json_object_get(o, "expires_after"), *sess = json_object_get(o, "session"), *v;
    if (!json_is_object(o)) {
        e = wrong_type(err, "body", "a JSON object");
        goto out;
    }
    if (ea && !json_is_null(ea)) {
        if (!json_is_object(ea)) {
            e = wrong_type(err, "expires_after", "an object");
            goto out;
        }
        if ((v = json_object_get(ea, "anchor")) && !json_is_null(v) &&
            (!json_is_string(v) || strcmp(json_string_value(v), "created_at"))) {
            e = refuse(err, 400, "invalid_value", "expires_after.anchor", "expires_after.anchor must be \"created_at\"");
            goto out;
        }
        json_int_t x;
        if ((v = json_object_get(ea, "seconds")) && !json_is_null(v)) {
            if ((e = integer_in(v, "expires_after.seconds", GW_SECRET_TTL_MIN_S, GW_SECRET_TTL_MAX_S, &x, err)))
                goto out;
            out->ttl_s = (uint32_t)x;
        }
    }
    if (!sess || json_is_null(sess)) {
        sess = json_object();
    } else if (!json_is_object(sess)) {
        e = wrong_type(err, "session", "an object");
        goto out;
    } else {
        json_incref(sess);
        json_t *t = json_object_get(sess, "type");
        if (t && !json_is_null(t) && (!json_is_string(t) || strcmp(json_string_value(t), "realtime"))) {
            e = refuse(err, 400, "unsupported_value", "session.type",
                       "only realtime sessions are served (session.type \"realtime\"); transcription is not");
            json_decref(sess);
            goto out;
        }
        json_t *m = json_object_get(sess, "model");
        if (m && !json_is_null(m) && (!json_is_string(m) || strcmp(json_string_value(m), model_id))) {
            e = json_is_string(m) ? refuse(err, 404, "model_not_found", "session.model",
                                           "The model '%.64s' does not exist; this server serves '%s'",
                                           json_string_value(m), model_id)
                                  : wrong_type(err, "session.model", "a string");
            json_decref(sess);
            goto out;
        }
        /* checked now by the realtime parser, as the session.update it becomes at connect */
        json_t *ev = json_pack("{s:s, s:O}", "type", "session.update", "session", sess);
        out->session_event = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
        json_decref(ev);
        fg_client_event parsed = {0};
        fg_proto_error pe;
        fg_err pr = out->session_event ? fg_proto_parse(out->session_event, strlen(out->session_event), lim, &parsed, &pe)
                                       : FG_ERR_NOMEM;
        fg_client_event_free(&parsed);
        if (pr != FG_OK) {
            json_decref(sess);
            e = pr == FG_ERR_NOMEM ? refuse(err, 500, "internal_error", NULL, "out of memory")
                                   : refuse(err, 400, fg_proto_error_code_name(pe.code), pe.param[0] ? pe.param : "session",
                                            "%s", pe.message);
            goto out;
        }
    }
    if (!sess || json_object_set_new(sess, "type", json_string("realtime")) ||
        json_object_set_new(sess, "model", json_string(model_id)) || !(out->session_json = json_dumps(sess, JSON_COMPACT)))
        e = refuse(err, 500, "internal_error", NULL, "out of memory");
    json_decref(sess);
out:
    json_decref(o);
    return e;
}

void gw_secret_req_free(gw_secret_req *r)
{
    free(r->session_event);
    free(r->session_json);
    memset(r, 0, sizeof *r);
}
