/* client_events.c: client event writers and the server event view (see client_events.h).
 *
 * Writers build a jansson object and dump it compact. Text from people or
 * files goes through fg_proto_buf_put_json_string first, which replaces
 * invalid UTF-8 by U+FFFD the way the server's own writers do, so jansson
 * never refuses a string and the event is always valid.
 */
#include "gateway/client_events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gateway/protocol.h"

/* A JSON string of the bytes s[0..n), invalid UTF-8 replaced. NULL on NOMEM. */
static json_t *text_value(const char *s, size_t n)
{
    fg_proto_buf b;
    fg_proto_buf_init(&b, 0);
    json_t *v = NULL;
    if (fg_proto_buf_put_json_string(&b, s, n) == FG_OK)
        v = json_loadb(b.data + b.pre, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    fg_proto_buf_free(&b);
    return v;
}

/* Dumps and frees root; NULL when root is NULL or on NOMEM. */
static char *finish(json_t *root, bool ok)
{
    char *s = NULL;
    if (root && ok)
        s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    json_decref(root);
    return s;
}

static json_t *event_new(const char *type, const char *event_id, bool *ok)
{
    json_t *root = json_object();
    *ok = root != NULL;
    if (!root)
        return NULL;
    *ok &= json_object_set_new(root, "type", json_string(type)) == 0;
    if (event_id)
        *ok &= json_object_set_new(root, "event_id", text_value(event_id, strlen(event_id))) == 0;
    return root;
}

static bool put_sampling(json_t *obj, const fg_client_sampling *s)
{
    bool ok = true;
    if (!s)
        return ok;
    if (s->has_temperature)
        ok &= json_object_set_new(obj, "temperature", json_real(s->temperature)) == 0;
    if (s->has_top_p)
        ok &= json_object_set_new(obj, "top_p", json_real(s->top_p)) == 0;
    if (s->has_top_k)
        ok &= json_object_set_new(obj, "top_k", json_integer((json_int_t)s->top_k)) == 0;
    if (s->has_min_p)
        ok &= json_object_set_new(obj, "min_p", json_real(s->min_p)) == 0;
    if (s->has_seed)
        ok &= json_object_set_new(obj, "seed", json_integer((json_int_t)s->seed)) == 0;
    if (s->has_max_output_tokens)
        ok &= json_object_set_new(obj, "max_output_tokens", json_integer((json_int_t)s->max_output_tokens)) == 0;
    return ok;
}

char *fg_client_ev_session_create(const char *event_id, const char *instructions, const fg_client_sampling *s)
{
    bool ok;
    json_t *root = event_new("session.create", event_id, &ok);
    if (!root)
        return NULL;
    json_t *sess = json_object();
    ok &= json_object_set_new(root, "session", sess) == 0;
    if (ok && instructions)
        ok &= json_object_set_new(sess, "instructions", text_value(instructions, strlen(instructions))) == 0;
    if (ok)
        ok &= put_sampling(sess, s);
    return finish(root, ok);
}

char *fg_client_ev_session_resume(const char *event_id, const char *session_id, uint64_t last_sequence_number)
{
    bool ok;
    json_t *root = event_new("session.resume", event_id, &ok);
    if (!root)
        return NULL;
    ok &= json_object_set_new(root, "session_id", text_value(session_id, strlen(session_id))) == 0;
    ok &= json_object_set_new(root, "last_sequence_number", json_integer((json_int_t)last_sequence_number)) == 0;
    return finish(root, ok);
}

char *fg_client_ev_session_close(const char *event_id)
{
    bool ok;
    json_t *root = event_new("session.close", event_id, &ok);
    return finish(root, ok);
}

char *fg_client_ev_message(const char *event_id, const char *role, const char *text, size_t len)
{
    bool ok;
    json_t *root = event_new("conversation.item.create", event_id, &ok);
    if (!root)
        return NULL;
    json_t *item = json_object(), *content = json_array(), *part = json_object();
    ok &= json_object_set_new(root, "item", item) == 0;
    ok &= json_object_set_new(part, "type", json_string("input_text")) == 0;
    ok &= json_object_set_new(part, "text", text_value(text, len)) == 0;
    ok &= json_array_append_new(content, part) == 0;
    if (ok) {
        ok &= json_object_set_new(item, "type", json_string("message")) == 0;
        ok &= json_object_set_new(item, "role", json_string(role ? role : "user")) == 0;
        ok &= json_object_set_new(item, "content", content) == 0;
    } else {
        json_decref(content);
    }
    return finish(root, ok);
}

char *fg_client_ev_response_create(const char *event_id, const fg_client_sampling *s)
{
    bool ok;
    json_t *root = event_new("response.create", event_id, &ok);
    if (!root)
        return NULL;
    json_t *resp = json_object();
    ok &= json_object_set_new(root, "response", resp) == 0;
    if (ok)
        ok &= put_sampling(resp, s);
    return finish(root, ok);
}

char *fg_client_ev_response_cancel(const char *event_id)
{
    bool ok;
    json_t *root = event_new("response.cancel", event_id, &ok);
    return finish(root, ok);
}

/* ---- reading ---- */

fg_err fg_client_ev_parse(const char *text, size_t len, fg_client_event_view *ev, fg_diag *diag)
{
    memset(ev, 0, sizeof *ev);
    ev->type = "";
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    if (!root || !json_is_object(root)) {
        if (diag)
            snprintf(diag->msg, sizeof diag->msg, "not a JSON object: %s", root ? "another JSON value" : je.text);
        json_decref(root);
        return FG_ERR_INVALID_ARG;
    }
    ev->root = root;
    const char *t = json_string_value(json_object_get(root, "type"));
    if (t)
        ev->type = t;
    json_t *seq = json_object_get(root, "sequence_number");
    if (json_is_integer(seq) && json_integer_value(seq) >= 0) {
        ev->has_seq = true;
        ev->seq = (uint64_t)json_integer_value(seq);
    }
    return FG_OK;
}

void fg_client_ev_release(fg_client_event_view *ev)
{
    json_decref(ev->root);
    ev->root = NULL;
    ev->type = "";
}

static json_t *lookup(const fg_client_event_view *ev, const char *path)
{
    json_t *v = ev->root;
    char key[64];
    while (v && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof key || !json_is_object(v))
            return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        v = json_object_get(v, key);
        path += n + (dot ? 1 : 0);
    }
    return v;
}

const char *fg_client_ev_str(const fg_client_event_view *ev, const char *path)
{
    return json_string_value(lookup(ev, path));
}

double fg_client_ev_num(const fg_client_event_view *ev, const char *path, double dflt)
{
    json_t *v = lookup(ev, path);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

void fg_client_ev_describe_error(const fg_client_event_view *ev, char *out, size_t cap)
{
    const char *base = NULL;
    if (!strcmp(ev->type, "error"))
        base = "error";
    else if (!strcmp(ev->type, "response.done"))
        base = "response.status_details.error";
    if (cap)
        out[0] = '\0';
    if (!base || !cap)
        return;
    char p[80];
    snprintf(p, sizeof p, "%s.code", base);
    const char *code = fg_client_ev_str(ev, p);
    if (!code)
        return;
    snprintf(p, sizeof p, "%s.message", base);
    const char *msg = fg_client_ev_str(ev, p);
    snprintf(p, sizeof p, "%s.param", base);
    const char *param = fg_client_ev_str(ev, p);
    int n = snprintf(out, cap, "%s: %s", code, msg ? msg : "(no message)");
    if (param && n >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, " (param %s)", param);
    double retry = fg_client_ev_num(ev, "retry_after", -1);
    n = (int)strlen(out);
    if (retry >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, " (retry after %.0f s)", retry);
}

bool fg_client_ev_peek_type(const char *text, size_t len, char *out, size_t cap)
{
    size_t i = 0;
#define SKIP_WS()                                                                  \
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) \
    i++
    SKIP_WS();
    if (i >= len || text[i] != '{')
        return false;
    i++;
    SKIP_WS();
    if (len - i < 6 || memcmp(text + i, "\"type\"", 6))
        return false;
    i += 6;
    SKIP_WS();
    if (i >= len || text[i] != ':')
        return false;
    i++;
    SKIP_WS();
#undef SKIP_WS
    if (i >= len || text[i] != '"')
        return false;
    i++;
    size_t start = i;
    /* event types are plain ASCII names: any escape or odd byte means "parse it" */
    while (i < len && text[i] != '"') {
        unsigned char c = (unsigned char)text[i];
        if (c == '\\' || c < 0x20 || c >= 0x7f)
            return false;
        i++;
    }
    if (i >= len || i - start >= cap)
        return false;
    memcpy(out, text + start, i - start);
    out[i - start] = '\0';
    return true;
}
