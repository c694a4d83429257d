/* protocol.c: parsing and validating one client message (docs/protocol.md).
 *
 * A message from the network passes, in order: the size limit, our UTF-8
 * validator, a nesting-depth scan, jansson (duplicate keys rejected, U+0000
 * allowed so that we, not jansson, can name the field that holds one), the
 * object and event checks, then the event's schema. The first failure is the
 * one reported, with the JSON path of the field (the `param`) and the client's
 * event_id when it could be read, so the server answers every bad message with
 * an error event and keeps the connection and the session.
 *
 * Strings in the parsed event point into the jansson tree kept in the event
 * (no copies: a message can carry 1 MiB of text); fg_client_event_free drops
 * it. jansson strings are NUL-terminated, and we reject any that hold U+0000,
 * so every fg_proto_str is also a C string.
 *
 * Rules shared by every field (docs/protocol.md "Conventions"): a JSON null is
 * the same as an absent field; unknown fields are ignored (forward
 * compatibility); integer fields accept a real with an integral value (5.0),
 * since some JSON encoders write every number as a float.
 */
#include "gateway/protocol.h"
#include "gateway/protocol_internal.h"

#include "config/fg_config.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/name.h"

void fg_proto_limits_default(fg_proto_limits *lim)
{
    lim->max_message_bytes = (size_t)1 << 20;
    lim->max_instructions_bytes = FG_CONFIG_MAX_INSTRUCTIONS_BYTES;
    lim->max_text_bytes = (size_t)256 << 10;
    lim->max_output_tokens = 32768;
    lim->max_depth = 32;
}

static const char *const client_type_names[] = {
    [FG_CLIENT_SESSION_CREATE] = "session.create",
    [FG_CLIENT_SESSION_UPDATE] = "session.update",
    [FG_CLIENT_SESSION_RESUME] = "session.resume",
    [FG_CLIENT_ITEM_CREATE] = "conversation.item.create",
    [FG_CLIENT_RESPONSE_CREATE] = "response.create",
    [FG_CLIENT_RESPONSE_CANCEL] = "response.cancel",
    [FG_CLIENT_SESSION_CLOSE] = "session.close",
    [FG_CLIENT_ITEM_RETRIEVE] = "conversation.item.retrieve",
    [FG_CLIENT_ITEM_DELETE] = "conversation.item.delete",
    [FG_CLIENT_ITEM_TRUNCATE] = "conversation.item.truncate",
};
#define N_CLIENT_TYPES (sizeof client_type_names / sizeof client_type_names[0])

const char *fg_client_event_type_name(fg_client_event_type t)
{
    return (unsigned)t < N_CLIENT_TYPES ? client_type_names[t] : NULL;
}

/* ---- the parse context and error helpers ---- */

typedef struct ctx {
    fg_proto_limits lim;
    fg_proto_error *err;
    const char *event_id; /* the client's, once read and valid: every error echoes it */
} ctx;

/* Writes "prefix.key[idx]" (the parts that are present) into out. */
static void path_join(char *out, size_t cap, const char *prefix, const char *key, int idx)
{
    int n = snprintf(out, cap, "%s%s%s", prefix ? prefix : "", prefix && key ? "." : "", key ? key : "");
    if (idx >= 0 && n >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, "[%d]", idx);
}

/* Records the error and returns -1, so validators read `return fail(...)`. */
__attribute__((format(printf, 4, 5))) static int fail(ctx *c, fg_proto_code code, const char *param,
                                                      const char *fmt, ...)
{
    char msg[sizeof c->err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fg_proto_error_set(c->err, code, param, c->event_id, "%s", msg);
    return -1;
}

/* A field, or NULL when absent or null (the two mean the same). */
static json_t *field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

static const char *json_type_word(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        break;
    }
    return "null";
}

/* ---- typed field readers: 0 ok (absent leaves *has false), -1 error ---- */

/* A string of min..max bytes without U+0000. */
static int read_str_value(ctx *c, json_t *v, const char *param, size_t min, size_t max, fg_proto_str *out)
{
    if (!json_is_string(v))
        return fail(c, FG_PROTO_INVALID_TYPE, param, "%s must be a string, got %s", param, json_type_word(v));
    const char *s = json_string_value(v);
    const size_t n = json_string_length(v);
    if (n < min || n > max)
        return fail(c, FG_PROTO_INVALID_VALUE, param, "%s must be %zu..%zu bytes, got %zu", param, min, max, n);
    if (memchr(s, '\0', n))
        return fail(c, FG_PROTO_INVALID_VALUE, param, "%s must not contain U+0000", param);
    out->ptr = s;
    out->len = n;
    return 0;
}

static int read_str(ctx *c, json_t *obj, const char *prefix, const char *key, bool required, size_t min,
                    size_t max, bool *has, fg_proto_str *out)
{
    char param[96];
    path_join(param, sizeof param, prefix, key, -1);
    json_t *v = field(obj, key);
    if (!v) {
        if (required)
            return fail(c, FG_PROTO_MISSING_FIELD, param, "%s is required", param);
        return 0;
    }
    if (read_str_value(c, v, param, min, max, out))
        return -1;
    if (has)
        *has = true;
    return 0;
}

static int read_bool(ctx *c, json_t *obj, const char *prefix, const char *key, bool *has, bool *out)
{
    json_t *v = field(obj, key);
    if (!v)
        return 0;
    char param[96];
    path_join(param, sizeof param, prefix, key, -1);
    if (!json_is_boolean(v))
        return fail(c, FG_PROTO_INVALID_TYPE, param, "%s must be a boolean, got %s", param, json_type_word(v));
    *out = json_is_true(v);
    if (has)
        *has = true;
    return 0;
}

/* A number in [lo, hi]; lo_open/hi_open exclude the bound. */
static int read_num(ctx *c, json_t *obj, const char *prefix, const char *key, double lo, bool lo_open, double hi,
                    bool hi_open, bool *has, double *out)
{
    json_t *v = field(obj, key);
    if (!v)
        return 0;
    char param[96];
    path_join(param, sizeof param, prefix, key, -1);
    if (!json_is_number(v))
        return fail(c, FG_PROTO_INVALID_TYPE, param, "%s must be a number, got %s", param, json_type_word(v));
    const double x = json_number_value(v);
    if ((lo_open ? !(x > lo) : !(x >= lo)) || (hi_open ? !(x < hi) : !(x <= hi)))
        return fail(c, FG_PROTO_INVALID_VALUE, param, "%s must be in %c%g, %g%c, got %.17g", param,
                    lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']', x);
    *out = x;
    *has = true;
    return 0;
}

/* An integer in [lo, hi] (hi <= 2^53), from a JSON integer or an integral real. */
static int read_uint_value(ctx *c, json_t *v, const char *param, uint64_t lo, uint64_t hi, uint64_t *out)
{
    int64_t i;
    if (json_is_integer(v)) {
        i = json_integer_value(v);
    } else if (json_is_real(v)) {
        const double x = json_real_value(v);
        /* Every double of magnitude >= 2^63 is integral (and out of range);
         * checking that first keeps the cast below defined. */
        if (!(x > -9223372036854775808.0 && x < 9223372036854775808.0))
            return fail(c, FG_PROTO_INVALID_VALUE, param, "%s must be in [%llu, %llu], got %.17g", param,
                        (unsigned long long)lo, (unsigned long long)hi, x);
        if ((double)(int64_t)x != x)
            return fail(c, FG_PROTO_INVALID_TYPE, param, "%s must be an integer, got %.17g", param, x);
        i = (int64_t)x;
    } else {
        return fail(c, FG_PROTO_INVALID_TYPE, param, "%s must be an integer, got %s", param, json_type_word(v));
    }
    if (i < 0 || (uint64_t)i < lo || (uint64_t)i > hi)
        return fail(c, FG_PROTO_INVALID_VALUE, param, "%s must be in [%llu, %llu], got %lld", param,
                    (unsigned long long)lo, (unsigned long long)hi, (long long)i);
    *out = (uint64_t)i;
    return 0;
}

static int read_uint(ctx *c, json_t *obj, const char *prefix, const char *key, bool required, uint64_t lo,
                     uint64_t hi, bool *has, uint64_t *out)
{
    char param[96];
    path_join(param, sizeof param, prefix, key, -1);
    json_t *v = field(obj, key);
    if (!v) {
        if (required)
            return fail(c, FG_PROTO_MISSING_FIELD, param, "%s is required", param);
        return 0;
    }
    if (read_uint_value(c, v, param, lo, hi, out))
        return -1;
    if (has)
        *has = true;
    return 0;
}

/* An optional object; *out NULL when absent. */
static int read_obj(ctx *c, json_t *obj, const char *key, bool required, json_t **out)
{
    json_t *v = field(obj, key);
    *out = NULL;
    if (!v) {
        if (required)
            return fail(c, FG_PROTO_MISSING_FIELD, key, "%s is required", key);
        return 0;
    }
    if (!json_is_object(v))
        return fail(c, FG_PROTO_INVALID_TYPE, key, "%s must be an object, got %s", key, json_type_word(v));
    *out = v;
    return 0;
}

/* ---- shared shapes ---- */

/* stop: a string (one stop) or an array of up to 4; each 1..64 bytes. */
static int read_stop(ctx *c, json_t *obj, const char *prefix, fg_proto_sampling *s)
{
    json_t *v = field(obj, "stop");
    if (!v)
        return 0;
    char param[96];
    path_join(param, sizeof param, prefix, "stop", -1);
    if (json_is_string(v)) {
        if (read_str_value(c, v, param, 1, FG_PROTO_MAX_STOP_BYTES, &s->stop[0]))
            return -1;
        s->n_stop = 1;
        s->has_stop = true;
        return 0;
    }
    if (!json_is_array(v))
        return fail(c, FG_PROTO_INVALID_TYPE, param, "%s must be an array of strings, got %s", param,
                    json_type_word(v));
    const size_t n = json_array_size(v);
    if (n > FG_PROTO_MAX_STOP)
        return fail(c, FG_PROTO_INVALID_VALUE, param, "%s holds at most %d strings, got %zu", param,
                    FG_PROTO_MAX_STOP, n);
    for (size_t i = 0; i < n; i++) {
        char ep[96];
        path_join(ep, sizeof ep, prefix, "stop", (int)i);
        if (read_str_value(c, json_array_get(v, i), ep, 1, FG_PROTO_MAX_STOP_BYTES, &s->stop[i]))
            return -1;
    }
    s->n_stop = (uint32_t)n;
    s->has_stop = true;
    return 0;
}

/* max_output_tokens: an integer in [1, limit], or "inf" (= the limit). */
static int read_max_output_tokens(ctx *c, json_t *obj, const char *prefix, fg_proto_sampling *s)
{
    json_t *v = field(obj, "max_output_tokens");
    if (!v)
        return 0;
    char param[96];
    path_join(param, sizeof param, prefix, "max_output_tokens", -1);
    if (json_is_string(v)) {
        if (strcmp(json_string_value(v), "inf") != 0 || json_string_length(v) != 3)
            return fail(c, FG_PROTO_INVALID_VALUE, param, "%s must be an integer or \"inf\"", param);
        s->max_output_tokens = c->lim.max_output_tokens;
    } else {
        uint64_t x;
        if (read_uint_value(c, v, param, 1, c->lim.max_output_tokens, &x))
            return -1;
        s->max_output_tokens = (uint32_t)x;
    }
    s->has_max_output_tokens = true;
    return 0;
}

/* The sampling fields, in the order docs/protocol.md lists them. */
static int read_sampling(ctx *c, json_t *obj, const char *prefix, fg_proto_sampling *s)
{
    uint64_t top_k = 0;
    if (read_num(c, obj, prefix, "temperature", 0, false, 2, false, &s->has_temperature, &s->temperature) ||
        read_num(c, obj, prefix, "top_p", 0, true, 1, false, &s->has_top_p, &s->top_p) ||
        read_uint(c, obj, prefix, "top_k", false, 0, FG_PROTO_MAX_TOP_K, &s->has_top_k, &top_k) ||
        read_num(c, obj, prefix, "min_p", 0, false, 1, true, &s->has_min_p, &s->min_p) ||
        read_uint(c, obj, prefix, "seed", false, 0, FG_PROTO_MAX_SEED, &s->has_seed, &s->seed) ||
        read_max_output_tokens(c, obj, prefix, s) || read_stop(c, obj, prefix, s))
        return -1;
    s->top_k = (uint32_t)top_k;
    return 0;
}

/* ---- events ---- */

/* output_modalities (GA) or modalities (beta): text only. Audio is refused
 * rather than dropped, so a client never waits for audio that cannot come. */
static int read_modalities(ctx *c, json_t *obj, const char *prefix, const char *key)
{
    json_t *v = field(obj, key);
    if (!v)
        return 0;
    char param[96];
    path_join(param, sizeof param, prefix, key, -1);
    if (!json_is_array(v))
        return fail(c, FG_PROTO_INVALID_TYPE, param, "%s must be an array of strings, got %s", param,
                    json_type_word(v));
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *m = json_array_get(v, i);
        char ep[96];
        path_join(ep, sizeof ep, prefix, key, (int)i);
        if (!json_is_string(m))
            return fail(c, FG_PROTO_INVALID_TYPE, ep, "%s must be a string, got %s", ep, json_type_word(m));
        if (!strcmp(json_string_value(m), "audio"))
            return fail(c, FG_PROTO_INVALID_VALUE, ep,
                        "audio output is not supported: flashgate serves a text model; use %s [\"text\"]", key);
        if (strcmp(json_string_value(m), "text") != 0)
            return fail(c, FG_PROTO_INVALID_VALUE, ep, "%s must be \"text\"", ep);
    }
    return 0;
}

/* Compact JSON text of v, kept in ev->owned_[slot]. */
static int keep_json(ctx *c, fg_client_event *ev, int slot, json_t *v, fg_proto_str *out)
{
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!text)
        return fail(c, FG_PROTO_INTERNAL_ERROR, NULL, "out of memory");
    free(ev->owned_[slot]);
    ev->owned_[slot] = text;
    out->ptr = text;
    out->len = strlen(text);
    return 0;
}

/* tools: up to 128 function tools, {"type":"function","name":...}, kept as JSON. */
static int read_tools(ctx *c, json_t *s, fg_client_event *ev, fg_proto_session_params *p)
{
    json_t *v = field(s, "tools");
    if (!v)
        return 0;
    if (!json_is_array(v))
        return fail(c, FG_PROTO_INVALID_TYPE, "session.tools", "session.tools must be an array, got %s",
                    json_type_word(v));
    if (json_array_size(v) > FG_PROTO_MAX_TOOLS)
        return fail(c, FG_PROTO_INVALID_VALUE, "session.tools", "session.tools holds at most %d tools, got %zu",
                    FG_PROTO_MAX_TOOLS, json_array_size(v));
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *t = json_array_get(v, i);
        char tp[96];
        path_join(tp, sizeof tp, "session", "tools", (int)i);
        if (!json_is_object(t))
            return fail(c, FG_PROTO_INVALID_TYPE, tp, "%s must be an object, got %s", tp, json_type_word(t));
        fg_proto_str type = {0}, name = {0};
        if (read_str(c, t, tp, "type", true, 1, 32, NULL, &type))
            return -1;
        if (strcmp(type.ptr, "function") != 0)
            return fail(c, FG_PROTO_INVALID_VALUE, tp, "%s.type must be \"function\" (MCP tools are not supported)",
                        tp);
        if (read_str(c, t, tp, "name", true, 1, FG_PROTO_MAX_ID_BYTES, NULL, &name))
            return -1;
        if (!fg_name_valid(name.ptr, name.len))
            return fail(c, FG_PROTO_INVALID_VALUE, tp, "%s.name may hold only A-Z, a-z, 0-9, _ and -", tp);
    }
    p->has_tools = true;
    return keep_json(c, ev, 0, v, &p->tools);
}

const char *fg_proto_tool_choice_word(fg_proto_tool_choice c)
{
    static const char *const words[] = {"auto", "none", "required"};
    return (unsigned)c < sizeof words / sizeof *words ? words[c] : NULL;
}

/* tool_choice: "auto" | "none" | "required" | {"type":"function","name":...} */
static int read_tool_choice(ctx *c, json_t *s, fg_proto_session_params *p)
{
    json_t *v = field(s, "tool_choice");
    if (!v)
        return 0;
    if (json_is_string(v)) {
        for (int i = 0; i < FG_PROTO_TOOL_CHOICE_FUNCTION; i++)
            if (!strcmp(json_string_value(v), fg_proto_tool_choice_word((fg_proto_tool_choice)i)) &&
                json_string_length(v) == strlen(fg_proto_tool_choice_word((fg_proto_tool_choice)i))) {
                p->has_tool_choice = true;
                p->tool_choice = (fg_proto_tool_choice)i;
                return 0;
            }
        return fail(c, FG_PROTO_INVALID_VALUE, "session.tool_choice",
                    "session.tool_choice must be \"auto\", \"none\", \"required\" or {\"type\":\"function\",\"name\":...}");
    }
    if (!json_is_object(v))
        return fail(c, FG_PROTO_INVALID_TYPE, "session.tool_choice",
                    "session.tool_choice must be a string or an object, got %s", json_type_word(v));
    fg_proto_str type = {0};
    if (read_str(c, v, "session.tool_choice", "type", true, 1, 32, NULL, &type))
        return -1;
    if (strcmp(type.ptr, "function") != 0)
        return fail(c, FG_PROTO_INVALID_VALUE, "session.tool_choice.type",
                    "session.tool_choice.type must be \"function\"");
    if (read_str(c, v, "session.tool_choice", "name", true, 1, FG_PROTO_MAX_ID_BYTES, NULL, &p->tool_choice_name))
        return -1;
    p->has_tool_choice = true;
    p->tool_choice = FG_PROTO_TOOL_CHOICE_FUNCTION;
    return 0;
}

static int parse_session(ctx *c, json_t *root, bool is_create, fg_client_event *ev)
{
    fg_proto_session_params *p = &ev->u.session;
    json_t *s;
    /* session.create may omit the object (all defaults); session.update must say what changes. */
    if (read_obj(c, root, "session", !is_create, &s))
        return -1;
    if (!s)
        return 0;
    fg_proto_str type = {0};
    bool has_type = false;
    if (read_str(c, s, "session", "type", false, 1, 32, &has_type, &type))
        return -1;
    if (has_type && strcmp(type.ptr, "realtime") != 0)
        return fail(c, FG_PROTO_INVALID_VALUE, "session.type",
                    "session.type must be \"realtime\" (transcription sessions are not supported)");
    if (read_str(c, s, "session", "instructions", false, 0, c->lim.max_instructions_bytes, &p->has_instructions,
                 &p->instructions) ||
        read_sampling(c, s, "session", &p->sampling) ||
        read_str(c, s, "session", "model", false, 1, FG_PROTO_MAX_ID_BYTES, &p->has_model, &p->model) ||
        read_modalities(c, s, "session", "output_modalities") || read_modalities(c, s, "session", "modalities") ||
        read_tools(c, s, ev, p) || read_tool_choice(c, s, p))
        return -1;
    if (is_create)
        return read_str(c, s, "session", "fork_from", false, 1, FG_PROTO_MAX_ID_BYTES, &p->has_fork_from,
                        &p->fork_from);
    /* Ignoring it like an unknown field would let a client believe it forked. */
    if (field(s, "fork_from"))
        return fail(c, FG_PROTO_INVALID_VALUE, "session.fork_from", "session.fork_from is only allowed in "
                                                                    "session.create");
    return 0;
}

static int parse_resume(ctx *c, json_t *root, fg_client_event *ev)
{
    return read_str(c, root, NULL, "session_id", true, 1, FG_PROTO_MAX_ID_BYTES, NULL, &ev->u.resume.session_id) ||
                   read_uint(c, root, NULL, "last_sequence_number", true, 0, FG_PROTO_MAX_SEQUENCE, NULL,
                             &ev->u.resume.last_sequence_number) ||
                   read_bool(c, root, NULL, "allow_gap", NULL, &ev->u.resume.allow_gap)
               ? -1
               : 0;
}

/* Matches a string field against names[1..n) (index 0 unused); returns the index. */
static int read_enum(ctx *c, json_t *obj, const char *param_prefix, const char *key, int idx,
                     const char *const *names, int n, int *out)
{
    char param[96];
    path_join(param, sizeof param, param_prefix, key, idx);
    json_t *v = field(obj, key);
    if (!v)
        return fail(c, FG_PROTO_MISSING_FIELD, param, "%s is required", param);
    if (!json_is_string(v))
        return fail(c, FG_PROTO_INVALID_TYPE, param, "%s must be a string, got %s", param, json_type_word(v));
    const char *s = json_string_value(v);
    for (int i = 1; i < n; i++)
        if (strcmp(s, names[i]) == 0 && strlen(names[i]) == json_string_length(v)) {
            *out = i;
            return 0;
        }
    char allowed[160] = "";
    for (int i = 1; i < n; i++)
        snprintf(allowed + strlen(allowed), sizeof allowed - strlen(allowed), "%s\"%s\"", i > 1 ? ", " : "",
                 names[i]);
    return fail(c, FG_PROTO_INVALID_VALUE, param, "%s must be one of %s", param, allowed);
}

static const char *const item_types[] = {"", "message", "function_call", "function_call_output"};
static const char *const roles[] = {"", "system", "user", "assistant"};
static const char *const part_types[] = {"", "input_text", "output_text", "text"};

static int parse_message(ctx *c, json_t *item, const char *pfx, fg_proto_item *it)
{
    int role;
    if (read_enum(c, item, pfx, "role", -1, roles, 4, &role))
        return -1;
    it->role = (fg_proto_role)role;
    char cp[96];
    path_join(cp, sizeof cp, pfx, "content", -1);
    json_t *content = field(item, "content");
    if (!content)
        return fail(c, FG_PROTO_MISSING_FIELD, cp, "%s is required", cp);
    if (!json_is_array(content))
        return fail(c, FG_PROTO_INVALID_TYPE, cp, "%s must be an array, got %s", cp, json_type_word(content));
    const size_t n = json_array_size(content);
    if (n < 1 || n > FG_PROTO_MAX_PARTS)
        return fail(c, FG_PROTO_INVALID_VALUE, cp, "%s must hold 1..%d parts, got %zu", cp, FG_PROTO_MAX_PARTS, n);
    for (size_t i = 0; i < n; i++) {
        json_t *part = json_array_get(content, i);
        char pp[96];
        path_join(pp, sizeof pp, pfx, "content", (int)i);
        if (!json_is_object(part))
            return fail(c, FG_PROTO_INVALID_TYPE, pp, "%s must be an object, got %s", pp, json_type_word(part));
        int pt;
        if (read_enum(c, part, pp, "type", -1, part_types, 4, &pt) ||
            read_str(c, part, pp, "text", true, 0, c->lim.max_text_bytes, NULL, &it->content[i].text))
            return -1;
        it->content[i].type = (fg_proto_part_type)pt;
    }
    it->n_content = (uint32_t)n;
    return 0;
}

/* A function name as tool-calling models and frameworks allow it. */
static int check_function_name(ctx *c, const char *pfx, fg_proto_str name)
{
    char np[96];
    path_join(np, sizeof np, pfx, "name", -1);
    if (!fg_name_valid(name.ptr, name.len))
        return fail(c, FG_PROTO_INVALID_VALUE, np, "%s may hold only A-Z, a-z, 0-9, _ and -", np);
    return 0;
}

/* One item object at pfx ("item", "response.input[2]"). */
static int parse_item_obj(ctx *c, json_t *item, const char *pfx, fg_proto_item *it)
{
    int type;
    if (read_enum(c, item, pfx, "type", -1, item_types, 4, &type))
        return -1;
    it->type = (fg_proto_item_type)type;
    bool has_id = false;
    if (read_str(c, item, pfx, "id", false, 1, FG_PROTO_MAX_ITEM_ID_BYTES, &has_id, &it->id))
        return -1;
    if (has_id && !fg_name_valid(it->id.ptr, it->id.len)) {
        char ip[96];
        path_join(ip, sizeof ip, pfx, "id", -1);
        return fail(c, FG_PROTO_INVALID_VALUE, ip, "%s may hold only A-Z, a-z, 0-9, _ and -", ip);
    }
    const size_t max_text = c->lim.max_text_bytes;
    switch (it->type) {
    case FG_PROTO_ITEM_MESSAGE:
        return parse_message(c, item, pfx, it);
    case FG_PROTO_ITEM_FUNCTION_CALL:
        return read_str(c, item, pfx, "call_id", true, 1, FG_PROTO_MAX_ID_BYTES, NULL, &it->call_id) ||
                       read_str(c, item, pfx, "name", true, 1, FG_PROTO_MAX_ID_BYTES, NULL, &it->name) ||
                       check_function_name(c, pfx, it->name) ||
                       read_str(c, item, pfx, "arguments", true, 0, max_text, NULL, &it->arguments)
                   ? -1
                   : 0;
    case FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT:
        return read_str(c, item, pfx, "call_id", true, 1, FG_PROTO_MAX_ID_BYTES, NULL, &it->call_id) ||
                       read_str(c, item, pfx, "output", true, 0, max_text, NULL, &it->output)
                   ? -1
                   : 0;
    }
    return -1; /* unreachable: read_enum returned a listed type */
}

static int parse_item(ctx *c, json_t *root, fg_client_event *ev)
{
    json_t *item;
    if (read_obj(c, root, "item", true, &item))
        return -1;
    return read_str(c, root, NULL, "previous_item_id", false, 1, FG_PROTO_MAX_ID_BYTES, &ev->has_previous_item_id,
                    &ev->previous_item_id) ||
                   parse_item_obj(c, item, "item", &ev->u.item)
               ? -1
               : 0;
}

/* conversation.item.retrieve / delete / truncate */
static int parse_item_ref(ctx *c, json_t *root, fg_client_event *ev)
{
    if (read_str(c, root, NULL, "item_id", true, 1, FG_PROTO_MAX_ID_BYTES, NULL, &ev->u.item_ref.item_id))
        return -1;
    if (ev->type != FG_CLIENT_ITEM_TRUNCATE)
        return 0;
    uint64_t ci = 0;
    if (read_uint(c, root, NULL, "content_index", true, 0, FG_PROTO_MAX_PARTS - 1, NULL, &ci) ||
        read_uint(c, root, NULL, "audio_end_ms", true, 0, FG_PROTO_MAX_SEQUENCE, NULL, &ev->u.item_ref.audio_end_ms) ||
        read_uint(c, root, NULL, "text_end", false, 0, c->lim.max_text_bytes, &ev->u.item_ref.has_text_end,
                  &ev->u.item_ref.text_end))
        return -1;
    ev->u.item_ref.content_index = (uint32_t)ci;
    return 0;
}

/* response.conversation, input, instructions, metadata (the GA out-of-band response). */
static int parse_response_ga(ctx *c, json_t *r, fg_client_event *ev)
{
    fg_proto_str conv = {0};
    bool has_conv = false;
    if (read_str(c, r, "response", "conversation", false, 1, 16, &has_conv, &conv))
        return -1;
    if (has_conv && strcmp(conv.ptr, "none") != 0 && strcmp(conv.ptr, "auto") != 0)
        return fail(c, FG_PROTO_INVALID_VALUE, "response.conversation",
                    "response.conversation must be \"auto\" or \"none\"");
    ev->u.response.out_of_band = has_conv && !strcmp(conv.ptr, "none");
    json_t *in = field(r, "input");
    if (in) {
        if (!json_is_array(in))
            return fail(c, FG_PROTO_INVALID_TYPE, "response.input", "response.input must be an array, got %s",
                        json_type_word(in));
        if (!ev->u.response.out_of_band)
            return fail(c, FG_PROTO_INVALID_VALUE, "response.input",
                        "response.input needs response.conversation \"none\" (an out-of-band response)");
        if (json_array_size(in) > FG_PROTO_MAX_INPUT)
            return fail(c, FG_PROTO_INVALID_VALUE, "response.input", "response.input holds at most %d items, got %zu",
                        FG_PROTO_MAX_INPUT, json_array_size(in));
        for (size_t i = 0; i < json_array_size(in); i++) {
            json_t *it = json_array_get(in, i);
            char ip[96];
            path_join(ip, sizeof ip, "response", "input", (int)i);
            if (!json_is_object(it))
                return fail(c, FG_PROTO_INVALID_TYPE, ip, "%s must be an object, got %s", ip, json_type_word(it));
            if (parse_item_obj(c, it, ip, &ev->u.response.input[i]))
                return -1;
        }
        ev->u.response.has_input = true;
        ev->u.response.n_input = (uint32_t)json_array_size(in);
    }
    if (read_str(c, r, "response", "instructions", false, 0, c->lim.max_instructions_bytes,
                 &ev->u.response.has_instructions, &ev->u.response.instructions))
        return -1;
    if (ev->u.response.has_instructions && !ev->u.response.out_of_band)
        return fail(c, FG_PROTO_INVALID_VALUE, "response.instructions",
                    "response.instructions needs response.conversation \"none\"; change the session's with "
                    "session.update");
    json_t *md = field(r, "metadata");
    if (md) {
        if (!json_is_object(md))
            return fail(c, FG_PROTO_INVALID_TYPE, "response.metadata", "response.metadata must be an object, got %s",
                        json_type_word(md));
        if (json_object_size(md) > FG_PROTO_MAX_METADATA)
            return fail(c, FG_PROTO_INVALID_VALUE, "response.metadata",
                        "response.metadata holds at most %d keys, got %zu", FG_PROTO_MAX_METADATA,
                        json_object_size(md));
        const char *k;
        json_t *v;
        json_object_foreach(md, k, v) {
            if (!json_is_string(v) || json_string_length(v) > 512 || strlen(k) > 64)
                return fail(c, FG_PROTO_INVALID_VALUE, "response.metadata",
                            "response.metadata maps keys of up to 64 bytes to strings of up to 512");
        }
        ev->u.response.has_metadata = true;
        if (keep_json(c, ev, 1, md, &ev->u.response.metadata))
            return -1;
    }
    return read_modalities(c, r, "response", "output_modalities") || read_modalities(c, r, "response", "modalities");
}

static int parse_response(ctx *c, json_t *root, fg_client_event *ev)
{
    ev->u.response.generate = true;
    json_t *r;
    if (read_obj(c, root, "response", false, &r))
        return -1;
    if (!r)
        return 0;
    return read_bool(c, r, "response", "generate", NULL, &ev->u.response.generate) ||
                   read_sampling(c, r, "response", &ev->u.response.sampling) || parse_response_ga(c, r, ev)
               ? -1
               : 0;
}

/* ---- the message ---- */

/* Nesting depth of the JSON text: brackets outside strings. Checked before
 * jansson so that its recursive descent never goes deeper than max. Returns
 * false when deeper. Runs on text that passed the UTF-8 check; malformed JSON
 * is jansson's to report. */
static bool depth_ok(const char *buf, size_t len, uint32_t max)
{
    uint32_t depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        const char ch = buf[i];
        if (in_str) {
            if (ch == '\\')
                i++; /* the escaped byte cannot end the string */
            else if (ch == '"')
                in_str = false;
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == '[' || ch == '{') {
            if (++depth > max)
                return false;
        } else if ((ch == ']' || ch == '}') && depth) {
            depth--;
        }
    }
    return true;
}

static fg_err load_json(ctx *c, const char *buf, size_t len, json_t **out)
{
    json_error_t je;
    /* JSON_DECODE_ANY: a top-level scalar is valid JSON but not an event, and
     * is reported as invalid_event like an array. */
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &je);
    if (root) {
        *out = root;
        return FG_OK;
    }
    switch (json_error_code(&je)) {
    case json_error_out_of_memory:
        fail(c, FG_PROTO_INTERNAL_ERROR, NULL, "out of memory while parsing the message");
        return FG_ERR_NOMEM;
    case json_error_duplicate_key:
        fail(c, FG_PROTO_INVALID_JSON, NULL, "duplicate object key at byte %d: %s", je.position, je.text);
        break;
    case json_error_numeric_overflow:
        fail(c, FG_PROTO_INVALID_JSON, NULL,
             "number out of range at byte %d (integers must fit 64 bits, reals a double): %s", je.position,
             je.text);
        break;
    default:
        fail(c, FG_PROTO_INVALID_JSON, NULL, "invalid JSON at byte %d: %s", je.position, je.text);
        break;
    }
    return FG_ERR_INVALID_ARG;
}

/* Merges the caller's limits over the defaults: a zero field means "default". */
static void effective_limits(const fg_proto_limits *in, fg_proto_limits *out)
{
    fg_proto_limits_default(out);
    if (!in)
        return;
    if (in->max_message_bytes)
        out->max_message_bytes = in->max_message_bytes;
    if (in->max_instructions_bytes)
        out->max_instructions_bytes = in->max_instructions_bytes;
    if (in->max_text_bytes)
        out->max_text_bytes = in->max_text_bytes;
    if (in->max_output_tokens)
        out->max_output_tokens = in->max_output_tokens;
    if (in->max_depth)
        out->max_depth = in->max_depth;
}

static int parse_event_id(ctx *c, json_t *root, fg_client_event *ev)
{
    json_t *v = field(root, "event_id");
    if (!v)
        return 0;
    if (!json_is_string(v))
        return fail(c, FG_PROTO_INVALID_TYPE, "event_id", "event_id must be a string, got %s", json_type_word(v));
    const size_t n = json_string_length(v);
    if (n > FG_PROTO_MAX_ID_BYTES)
        return fail(c, FG_PROTO_INVALID_VALUE, "event_id", "event_id must be at most %d bytes, got %zu",
                    FG_PROTO_MAX_ID_BYTES, n);
    if (memchr(json_string_value(v), '\0', n))
        return fail(c, FG_PROTO_INVALID_VALUE, "event_id", "event_id must not contain U+0000");
    ev->has_event_id = true;
    ev->event_id.ptr = json_string_value(v);
    ev->event_id.len = n;
    c->event_id = ev->event_id.ptr;
    return 0;
}

/* Quotes at most 48 bytes of a client string in a message, cut at a character
 * boundary (the writers would replace a cut character, but it reads badly). */
static int quote_len(const char *s, size_t n)
{
    size_t k = n < 48 ? n : 48;
    while (k < n && k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    return (int)k;
}

static int parse_root(ctx *c, json_t *root, fg_client_event *ev)
{
    if (!json_is_object(root))
        return fail(c, FG_PROTO_INVALID_EVENT, NULL, "an event must be a JSON object, got %s", json_type_word(root));
    if (parse_event_id(c, root, ev))
        return -1;
    json_t *t = field(root, "type");
    if (!t || !json_is_string(t))
        return fail(c, FG_PROTO_INVALID_EVENT, "type", "an event needs a string type, got %s",
                    t ? json_type_word(t) : "none");
    const char *name = json_string_value(t);
    const size_t name_len = json_string_length(t);
    ev->type = 0;
    for (unsigned i = 1; i < N_CLIENT_TYPES; i++)
        if (strlen(client_type_names[i]) == name_len && memcmp(client_type_names[i], name, name_len) == 0)
            ev->type = (fg_client_event_type)i;
    if (!ev->type)
        return fail(c, FG_PROTO_UNKNOWN_EVENT_TYPE, "type", "unknown event type \"%.*s\"%s",
                    quote_len(name, name_len), name, (size_t)quote_len(name, name_len) < name_len ? "..." : "");
    switch (ev->type) {
    case FG_CLIENT_SESSION_CREATE:
        return parse_session(c, root, true, ev);
    case FG_CLIENT_SESSION_UPDATE:
        return parse_session(c, root, false, ev);
    case FG_CLIENT_SESSION_RESUME:
        return parse_resume(c, root, ev);
    case FG_CLIENT_ITEM_CREATE:
        return parse_item(c, root, ev);
    case FG_CLIENT_ITEM_RETRIEVE:
    case FG_CLIENT_ITEM_DELETE:
    case FG_CLIENT_ITEM_TRUNCATE:
        return parse_item_ref(c, root, ev);
    case FG_CLIENT_RESPONSE_CREATE:
        return parse_response(c, root, ev);
    case FG_CLIENT_RESPONSE_CANCEL:
        return read_str(c, root, NULL, "response_id", false, 1, FG_PROTO_MAX_ID_BYTES,
                        &ev->u.cancel.has_response_id, &ev->u.cancel.response_id);
    case FG_CLIENT_SESSION_CLOSE:
        return 0;
    }
    return -1; /* unreachable */
}

fg_err fg_proto_parse(const char *buf, size_t len, const fg_proto_limits *lim, fg_client_event *out,
                      fg_proto_error *err)
{
    fg_proto_error scratch;
    ctx c = {.err = err ? err : &scratch, .event_id = NULL};
    effective_limits(lim, &c.lim);
    memset(out, 0, sizeof *out);
    if (!buf && len)
        return fg_proto_error_set(c.err, FG_PROTO_INTERNAL_ERROR, NULL, NULL, "no message buffer");
    if (len > c.lim.max_message_bytes)
        return fg_proto_error_set(c.err, FG_PROTO_FRAME_TOO_LARGE, NULL, NULL,
                                  "the message is %zu bytes; the limit is %zu", len, c.lim.max_message_bytes);
    const size_t bad = fg_proto_utf8_check(buf ? buf : "", len);
    if (bad < len)
        return fg_proto_error_set(c.err, FG_PROTO_INVALID_UTF8, NULL, NULL,
                                  "the message is not valid UTF-8 at byte %zu", bad);
    if (!depth_ok(buf ? buf : "", len, c.lim.max_depth))
        return fg_proto_error_set(c.err, FG_PROTO_INVALID_JSON, NULL, NULL, "JSON nesting deeper than %u",
                                  c.lim.max_depth);
    json_t *root = NULL;
    fg_err e = load_json(&c, buf ? buf : "", len, &root);
    if (e)
        return e;
    out->root_ = root;
    if (parse_root(&c, root, out)) {
        fg_client_event_free(out);
        return FG_ERR_INVALID_ARG;
    }
    return FG_OK;
}

void fg_client_event_free(fg_client_event *ev)
{
    if (!ev)
        return;
    json_decref(ev->root_);
    free(ev->owned_[0]);
    free(ev->owned_[1]);
    memset(ev, 0, sizeof *ev);
}
