/* admin.c: the admin HTTP API (docs/admin.md).
 *
 * Every path under /admin/ needs "Authorization: Bearer <auth.admin_key>",
 * compared in constant time; an empty auth.admin_key disables the API (404 for
 * every /admin path). Bodies are JSON objects, validated field by field; every
 * refusal is a 4xx with {"error":{"code","message"[,"field"]}}.
 *
 * Tenant changes go through the quota module (asynchronous, Redis): the
 * request is kept (http.h) and answered from the quota callback. Reads come
 * from the quota module's tenant cache, plus live usage from Redis for one
 * tenant. Sessions are this gateway's. Service thread only.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "config/base/random.h"
#include "gateway/gateway_internal.h"
#include "gateway/http.h"
#include "gateway/log.h"

#define LIMIT_MAX INT64_C(1000000000000000) /* 10^15: any count above is a typo */
#define ADMIN_KEY_RANDOM_BYTES 24            /* 192 bits -> 48 hex digits after "fg-" */
#define DRAIN_DELAY_US (200 * LWS_US_PER_MS) /* lets the 202 reach the client before the drain */

/* ---- replies ---- */

static void reply_json(gw_http_req *req, unsigned status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        gw_http_error(req, 500, "internal_error", "out of memory");
        return;
    }
    gw_http_reply(req, status, text);
    free(text);
}

/* {"error":{"code":code,"message":message,"field":field}} (field when not NULL). */
static void reply_error(gw_http_req *req, unsigned status, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void reply_error(gw_http_req *req, unsigned status, const char *code, const char *field, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *err = json_pack("{s:s, s:s}", "code", code, "message", msg);
    if (err && field)
        json_object_set_new(err, "field", json_string(field));
    reply_json(req, status, err ? json_pack("{s:o}", "error", err) : NULL);
}

static void reply_no_content(gw_http_req *req)
{
    gw_http_reply(req, 204, "");
}

static void reply_unavailable(gw_http_req *req)
{
    reply_error(req, 503, "quota_unavailable", NULL, "%s", "Redis is unreachable: try again later");
}

/* ---- helpers ---- */

static const char *const LIMIT_NAMES[] = {"max_sessions",       "max_responses",      "tokens_per_minute",
                                          "daily_tokens",       "max_kv_bytes",       "max_context_tokens",
                                          "max_output_tokens",  "weight"};
#define N_LIMITS (sizeof LIMIT_NAMES / sizeof *LIMIT_NAMES)

static int64_t *limit_field(fg_tenant_limits *l, size_t i)
{
    int64_t *f[N_LIMITS] = {&l->max_sessions,       &l->max_responses,      &l->tokens_per_minute,
                            &l->daily_tokens,       &l->max_kv_bytes,       &l->max_context_tokens,
                            &l->max_output_tokens,  &l->weight};
    return f[i];
}

static json_t *record_json(const fg_tenant_record *t)
{
    fg_tenant_limits l = t->limits;
    json_t *limits = json_object();
    for (size_t i = 0; i < N_LIMITS; i++)
        json_object_set_new(limits, LIMIT_NAMES[i], json_integer(*limit_field(&l, i)));
    if (l.weight < 1) /* stored as the default */
        json_object_set_new(limits, "weight", json_integer(1));
    return json_pack("{s:s, s:s, s:o, s:s}", "id", t->id, "name", t->name, "limits", limits, "fail_mode",
                     l.fail_closed ? "closed" : "open");
}

/* Parses the request body as a JSON object. Empty bodies are {} when allow_empty.
 * On failure the request has been answered and NULL is returned. */
static json_t *parse_body(gw_http_req *req, bool allow_empty)
{
    size_t len;
    const char *body = gw_http_body(req, &len);
    size_t i = 0;
    while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    if (i == len) {
        if (allow_empty)
            return json_object();
        reply_error(req, 400, "invalid_json", NULL, "%s", "the request needs a JSON object body");
        return NULL;
    }
    json_error_t err;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        reply_error(req, 400, "invalid_json", NULL, "invalid JSON: %s at %d:%d", err.text, err.line, err.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        reply_error(req, 400, "invalid_json", NULL, "%s", "the body must be a JSON object");
        return NULL;
    }
    return root;
}

/* The first member of obj not in allowed (NULL-terminated), or NULL. */
static const char *unknown_member(json_t *obj, const char *const *allowed)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        bool ok = false;
        for (size_t i = 0; allowed[i]; i++)
            if (!strcmp(k, allowed[i]))
                ok = true;
        if (!ok)
            return k;
    }
    return NULL;
}

static void reply_unknown_field(gw_http_req *req, const char *prefix, const char *name)
{
    char field[200];
    snprintf(field, sizeof field, "%s%.150s", prefix, name);
    reply_error(req, 400, "unknown_field", field, "unknown field '%s'", field);
}

/* Fills *t from a tenant body (POST: with "id"; PUT: id from the path). Fields
 * not given take their defaults (a PUT replaces the whole record). Returns
 * false after answering the request. */
static bool tenant_from_json(gw_http_req *req, json_t *root, const char *path_id, fg_tenant_record *t)
{
    static const char *const top[] = {"id", "name", "limits", "fail_mode", NULL};
    const char *bad = unknown_member(root, top);
    if (bad) {
        reply_unknown_field(req, "", bad);
        return false;
    }
    memset(t, 0, sizeof *t);
    json_t *id = json_object_get(root, "id");
    if (path_id) {
        if (id && (!json_is_string(id) || strcmp(json_string_value(id), path_id))) {
            reply_error(req, 400, "invalid_value", "id", "%s", "id in the body differs from the path's");
            return false;
        }
        snprintf(t->id, sizeof t->id, "%s", path_id);
    } else {
        if (!id) {
            reply_error(req, 400, "missing_field", "id", "%s", "id is required");
            return false;
        }
        if (!json_is_string(id) || !fg_name_valid(json_string_value(id), json_string_length(id))) {
            reply_error(req, 400, "invalid_value", "id", "%s", "id must be a string of 1 to 64 of A-Z a-z 0-9 _ -");
            return false;
        }
        snprintf(t->id, sizeof t->id, "%s", json_string_value(id));
    }
    json_t *name = json_object_get(root, "name");
    if (name) {
        const char *s = json_is_string(name) ? json_string_value(name) : NULL;
        size_t n = s ? json_string_length(name) : 0;
        bool ok = s && n >= 1 && n <= FG_TENANT_NAME_MAX && strlen(s) == n;
        for (size_t i = 0; ok && i < n; i++)
            if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
                ok = false;
        if (!ok) {
            reply_error(req, 400, "invalid_value", "name", "name must be a string of 1 to %d bytes without control characters",
                        FG_TENANT_NAME_MAX);
            return false;
        }
        snprintf(t->name, sizeof t->name, "%s", s);
    } else {
        snprintf(t->name, sizeof t->name, "%s", t->id);
    }
    t->limits.weight = 1;
    json_t *limits = json_object_get(root, "limits");
    if (limits) {
        if (!json_is_object(limits)) {
            reply_error(req, 400, "invalid_type", "limits", "%s", "limits must be an object");
            return false;
        }
        const char *k;
        json_t *v;
        json_object_foreach(limits, k, v) {
            size_t i = 0;
            while (i < N_LIMITS && strcmp(k, LIMIT_NAMES[i]))
                i++;
            if (i == N_LIMITS) {
                reply_unknown_field(req, "limits.", k);
                return false;
            }
            char field[64];
            snprintf(field, sizeof field, "limits.%s", LIMIT_NAMES[i]);
            if (!json_is_integer(v)) {
                reply_error(req, 400, "invalid_type", field, "%s must be an integer", field);
                return false;
            }
            json_int_t x = json_integer_value(v);
            const bool weight = !strcmp(LIMIT_NAMES[i], "weight");
            const int64_t lo = weight ? 1 : 0, hi = weight ? 1000 : LIMIT_MAX;
            if (x < lo || x > hi) {
                reply_error(req, 400, "invalid_value", field, "%s must be from %" PRId64 " to %" PRId64 "%s", field, lo,
                            hi, weight ? "" : " (0: unlimited)");
                return false;
            }
            *limit_field(&t->limits, i) = (int64_t)x;
        }
    }
    json_t *fm = json_object_get(root, "fail_mode");
    if (fm) {
        const char *s = json_is_string(fm) ? json_string_value(fm) : "";
        if (strcmp(s, "open") && strcmp(s, "closed")) {
            reply_error(req, 400, "invalid_value", "fail_mode", "%s", "fail_mode must be \"open\" or \"closed\"");
            return false;
        }
        t->limits.fail_closed = !strcmp(s, "closed");
    }
    return true;
}

/* An asynchronous admin call: the request is kept until the callback answers it. */
typedef struct admin_ctx {
    gw_http_req *req;
    fg_gateway_t *gw;
    unsigned ok_status;          /* 200, 201 or 204 */
    fg_tenant_record rec;        /* the record to show (put) */
    char key[96];                /* a new key (key add) */
    int kind;                    /* CTX_* */
} admin_ctx;

enum { CTX_PUT, CTX_CREATE, CTX_DELETE, CTX_KEY_ADD, CTX_KEY_REVOKE };

static admin_ctx *ctx_new(gw_http_req *req, fg_gateway_t *gw, int kind, unsigned ok_status)
{
    admin_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        reply_error(req, 500, "internal_error", NULL, "%s", "out of memory");
        return NULL;
    }
    x->req = req;
    x->gw = gw;
    x->kind = kind;
    x->ok_status = ok_status;
    return x;
}

static void on_admin_done(void *user, const fg_quota_result *r)
{
    admin_ctx *x = user;
    gw_http_req *req = x->req;
    switch (r->verdict) {
    case FG_QUOTA_OK:
        if (x->kind == CTX_PUT || x->kind == CTX_CREATE) {
            reply_json(req, x->ok_status, record_json(&x->rec));
            fg_log_at(FG_LOG_INFO, "admin_tenant_put", x->rec.id, NULL, NULL);
        } else if (x->kind == CTX_KEY_ADD) {
            reply_json(req, 201, json_pack("{s:s, s:s}", "tenant", x->rec.id, "key", x->key));
            fg_log_at(FG_LOG_INFO, "admin_key_added", x->rec.id, NULL, NULL);
        } else {
            reply_no_content(req);
            fg_log_at(FG_LOG_INFO, x->kind == CTX_DELETE ? "admin_tenant_deleted" : "admin_key_revoked",
                      x->rec.id, NULL, NULL);
        }
        break;
    case FG_QUOTA_UNAVAILABLE: reply_unavailable(req); break;
    case FG_QUOTA_UNKNOWN_TENANT: reply_error(req, 404, "tenant_not_found", NULL, "no tenant '%s'", x->rec.id); break;
    case FG_QUOTA_INVALID:
        if (x->kind == CTX_KEY_REVOKE)
            reply_error(req, 404, "key_not_found", "key", "%s", "the tenant has no such key");
        else if (x->kind == CTX_KEY_ADD)
            reply_error(req, 409, "key_conflict", NULL, "%s", "the new key is already bound to a tenant: retry");
        else if (x->kind == CTX_CREATE) /* the record was checked here: it is the tenant that exists */
            reply_error(req, 409, "tenant_exists", "id", "tenant '%s' exists (PUT /admin/tenants/%s replaces it)",
                        x->rec.id, x->rec.id);
        else
            reply_error(req, 400, "invalid_value", NULL, "%s", "the quota module refused the record");
        break;
    default: reply_error(req, 500, "internal_error", NULL, "unexpected quota answer %s", fg_quota_verdict_name(r->verdict));
    }
    explicit_bzero(x->key, sizeof x->key);
    free(x);
}

/* ---- tenants ---- */

static void tenants_list(fg_gateway_t *gw, gw_http_req *req)
{
    size_t n = fg_quota_tenant_list(gw->quota, NULL, 0), got = 0;
    fg_tenant_record *recs = n ? calloc(n, sizeof *recs) : NULL;
    if (n && !recs)
        return reply_error(req, 500, "internal_error", NULL, "%s", "out of memory");
    if (n)
        got = fg_quota_tenant_list(gw->quota, recs, n);
    if (got > n)
        got = n;
    json_t *arr = json_array();
    for (size_t i = 0; i < got; i++)
        json_array_append_new(arr, record_json(&recs[i]));
    free(recs);
    reply_json(req, 200, json_pack("{s:o}", "tenants", arr));
}

static void tenant_put(fg_gateway_t *gw, gw_http_req *req, const char *path_id)
{
    json_t *root = parse_body(req, false);
    if (!root)
        return;
    fg_tenant_record t;
    bool ok = tenant_from_json(req, root, path_id, &t);
    json_decref(root);
    if (!ok)
        return;
    fg_tenant_record old;
    const bool exists = fg_quota_tenant_get(gw->quota, t.id, &old);
    if (!path_id && exists)
        return reply_error(req, 409, "tenant_exists", "id", "tenant '%s' exists (PUT /admin/tenants/%s replaces it)",
                           t.id, t.id);
    admin_ctx *x = ctx_new(req, gw, path_id ? CTX_PUT : CTX_CREATE, path_id ? 200 : 201);
    if (!x)
        return;
    x->rec = t;
    if (path_id)
        fg_quota_tenant_put(gw->quota, &t, on_admin_done, x);
    else /* atomic in Redis: of concurrent creations of one id, one gets 201 */
        fg_quota_tenant_create(gw->quota, &t, on_admin_done, x);
}

static void tenant_delete(fg_gateway_t *gw, gw_http_req *req, const char *id)
{
    fg_tenant_record t;
    if (!fg_quota_tenant_get(gw->quota, id, &t))
        return reply_error(req, 404, "tenant_not_found", NULL, "no tenant '%s'", id);
    admin_ctx *x = ctx_new(req, gw, CTX_DELETE, 204);
    if (!x)
        return;
    x->rec = t;
    fg_quota_tenant_delete(gw->quota, id, on_admin_done, x);
}

/* The tenant's index in this gateway's table, or -1 (no session here yet). */
static int local_tenant(fg_gateway_t *gw, const char *id)
{
    for (int i = 0; i < gw->n_tenants; i++)
        if (!strcmp(gw->tenants[i].rec.id, id))
            return i;
    return -1;
}

typedef struct usage_ctx {
    gw_http_req *req;
    fg_gateway_t *gw;
    fg_tenant_record rec;
} usage_ctx;

static void on_usage(void *user, bool ok, const fg_tenant_usage *u)
{
    usage_ctx *x = user;
    json_t *body = record_json(&x->rec);
    json_t *usage;
    if (ok && u)
        usage = json_pack("{s:I, s:I, s:I, s:I, s:b}", "sessions", (json_int_t)u->sessions, "responses",
                          (json_int_t)u->responses, "tokens_available", (json_int_t)u->tokens_last_minute_capacity_left,
                          "daily_tokens_used", (json_int_t)u->daily_tokens_used, "degraded", u->degraded);
    else
        usage = json_null();
    json_object_set_new(body, "usage", usage);
    int idx = local_tenant(x->gw, x->rec.id);
    json_object_set_new(body, "gateway_sessions", json_integer(idx >= 0 ? x->gw->tenants[idx].sessions : 0));
    /* The engine's count of this tenant's KV: shared pages once, session files on disk. */
    fg_tenant_kv_usage ku;
    if (x->gw->engine && fg_engine_tenant_usage(x->gw->engine, x->rec.id, &ku) == FG_OK)
        json_object_set_new(body, "gateway_kv",
                            json_pack("{s:I, s:I, s:i, s:i}", "resident_kv_bytes", (json_int_t)ku.resident_kv_bytes,
                                      "disk_bytes", (json_int_t)ku.disk_bytes, "sessions_resident",
                                      ku.sessions_resident, "sessions_on_disk", ku.sessions_on_disk));
    else
        json_object_set_new(body, "gateway_kv", json_null());
    reply_json(x->req, 200, body);
    free(x);
}

static void tenant_get(fg_gateway_t *gw, gw_http_req *req, const char *id)
{
    fg_tenant_record t;
    if (!fg_quota_tenant_get(gw->quota, id, &t))
        return reply_error(req, 404, "tenant_not_found", NULL, "no tenant '%s'", id);
    usage_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return reply_error(req, 500, "internal_error", NULL, "%s", "out of memory");
    x->req = req;
    x->gw = gw;
    x->rec = t;
    fg_quota_tenant_usage(gw->quota, id, on_usage, x);
}

/* ---- keys ---- */

static bool random_key(char *out, size_t cap)
{
    unsigned char r[ADMIN_KEY_RANDOM_BYTES];
    if (!fg_random_bytes(r, sizeof r))
        return false;
    static const char hex[] = "0123456789abcdef";
    if (cap < 3 + 2 * sizeof r + 1)
        return false;
    memcpy(out, "fg-", 3);
    for (size_t i = 0; i < sizeof r; i++) {
        out[3 + 2 * i] = hex[r[i] >> 4];
        out[4 + 2 * i] = hex[r[i] & 15];
    }
    out[3 + 2 * sizeof r] = 0;
    explicit_bzero(r, sizeof r);
    return true;
}

/* For endpoints that take no fields: an empty body or {}. Replies and returns
 * false otherwise. */
static bool expect_no_fields(gw_http_req *req)
{
    json_t *root = parse_body(req, true);
    if (!root)
        return false;
    static const char *const none[] = {NULL};
    const char *bad = unknown_member(root, none);
    if (bad)
        reply_unknown_field(req, "", bad);
    json_decref(root);
    return bad == NULL;
}

static void key_add(fg_gateway_t *gw, gw_http_req *req, const char *id)
{
    if (!expect_no_fields(req))
        return;
    fg_tenant_record t;
    if (!fg_quota_tenant_get(gw->quota, id, &t))
        return reply_error(req, 404, "tenant_not_found", NULL, "no tenant '%s'", id);
    admin_ctx *x = ctx_new(req, gw, CTX_KEY_ADD, 201);
    if (!x)
        return;
    x->rec = t;
    if (!random_key(x->key, sizeof x->key)) {
        free(x);
        return reply_error(req, 500, "internal_error", NULL, "%s", "no random bytes");
    }
    fg_quota_key_add(gw->quota, id, x->key, on_admin_done, x);
}

static void key_revoke(fg_gateway_t *gw, gw_http_req *req, const char *id)
{
    json_t *root = parse_body(req, false);
    if (!root)
        return;
    static const char *const allowed[] = {"key", NULL};
    const char *bad = unknown_member(root, allowed);
    if (bad) {
        reply_unknown_field(req, "", bad);
        json_decref(root);
        return;
    }
    json_t *k = json_object_get(root, "key");
    const char *key = json_is_string(k) ? json_string_value(k) : NULL;
    size_t n = key ? json_string_length(k) : 0;
    bool ok = key && n >= 1 && n < 96 && strlen(key) == n;
    for (size_t i = 0; ok && i < n; i++)
        if ((unsigned char)key[i] <= ' ' || (unsigned char)key[i] > '~')
            ok = false;
    if (!ok) {
        json_decref(root);
        return k ? reply_error(req, 400, "invalid_value", "key", "%s", "key must be a string of printable characters")
                 : reply_error(req, 400, "missing_field", "key", "%s", "key is required");
    }
    fg_tenant_record t;
    if (!fg_quota_tenant_get(gw->quota, id, &t)) {
        json_decref(root);
        return reply_error(req, 404, "tenant_not_found", NULL, "no tenant '%s'", id);
    }
    admin_ctx *x = ctx_new(req, gw, CTX_KEY_REVOKE, 204);
    if (x) {
        x->rec = t;
        fg_quota_key_revoke(gw->quota, id, key, on_admin_done, x);
    }
    json_decref(root);
}

/* ---- sessions ---- */

static void sessions_list(fg_gateway_t *gw, gw_http_req *req, const char *id)
{
    fg_tenant_record t;
    int idx = local_tenant(gw, id);
    if (idx < 0 && !fg_quota_tenant_get(gw->quota, id, &t))
        return reply_error(req, 404, "tenant_not_found", NULL, "no tenant '%s'", id);
    json_t *arr = json_array();
    const double now = fg_clock_mono_s();
    for (gw_session *s = gw->sessions; s && idx >= 0; s = s->all_next) {
        if (s->tenant != idx || s->doomed) /* closed, waiting only for gw_disk's worker */
            continue;
        double idle = now - s->last_activity;
        json_array_append_new(arr, json_pack("{s:s, s:b, s:b, s:i, s:f, s:b, s:I, s:I}", "id", s->id, "attached",
                                             s->sink != NULL, "responding", s->responding, "tokens",
                                             fg_session_length(s->es), "idle_seconds",
                                             idle < 0 ? 0.0 : (double)(int64_t)(idle * 1000) / 1000, "on_disk",
                                             fg_session_on_disk(s->es), "draft_tokens", (json_int_t)s->draft_tokens,
                                             "draft_accepted", (json_int_t)s->draft_accepted));
    }
    reply_json(req, 200, json_pack("{s:o}", "sessions", arr));
}

static void session_delete(fg_gateway_t *gw, gw_http_req *req, const char *sid)
{
    gw_session *s = gw_session_find(gw, sid, strlen(sid));
    if (!s)
        return reply_error(req, 404, "session_not_found", NULL, "%s", "no such session on this gateway");
    gw_session_close(s, "evicted");
    reply_no_content(req);
}

/* ---- drain ---- */

static void drain_cb(lws_sorted_usec_list_t *sul)
{
    fg_gateway_t *gw = lws_container_of(sul, fg_gateway_t, admin_drain);
    fg_gateway_request_stop(gw); /* the same drain as SIGTERM */
}

static void drain(fg_gateway_t *gw, gw_http_req *req)
{
    if (!expect_no_fields(req))
        return;
    const bool already = gw->draining || atomic_load(&gw->stop_requested);
    reply_json(req, 202, json_pack("{s:b}", "draining", 1));
    if (!already) {
        fg_log(FG_LOG_INFO, "admin_drain", NULL);
        lws_sul_schedule(gw->ctx, 0, &gw->admin_drain, drain_cb, DRAIN_DELAY_US);
    }
}

/* ---- experts ---- */

typedef struct expert_heat {
    uint64_t tokens;
    int id;
} expert_heat;

/* Hottest first; equal counts in id order, so the answer is stable. */
static int hotter_first(const void *a, const void *b)
{
    const expert_heat *x = a, *y = b;
    if (x->tokens != y->tokens)
        return x->tokens > y->tokens ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* GET /admin/experts: routed (token, expert) picks per expert id since start,
 * and the heat order they suggest, in the form topology.hot_experts takes. */
static void experts_get(fg_gateway_t *gw, gw_http_req *req)
{
    const int n = gw->engine ? fg_engine_expert_tokens(gw->engine, NULL, 0) : 0;
    expert_heat *heat = calloc((size_t)(n > 0 ? n : 1), sizeof *heat);
    uint64_t *tokens = calloc((size_t)(n > 0 ? n : 1), sizeof *tokens);
    char *order = calloc((size_t)(n > 0 ? n : 1), 12); /* up to 10 digits and a comma each */
    json_t *list = json_array();
    if (!heat || !tokens || !order || !list) {
        free(heat);
        free(tokens);
        free(order);
        json_decref(list);
        gw_http_error(req, 500, "internal_error", "out of memory");
        return;
    }
    if (n > 0)
        fg_engine_expert_tokens(gw->engine, tokens, n);
    uint64_t total = 0;
    for (int e = 0; e < n; e++) {
        heat[e] = (expert_heat){.tokens = tokens[e], .id = e};
        total += tokens[e];
        json_array_append_new(list, json_integer((json_int_t)tokens[e]));
    }
    qsort(heat, (size_t)n, sizeof *heat, hotter_first);
    size_t at = 0;
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(order + at, 12, i ? ",%d" : "%d", heat[i].id);
    reply_json(req, 200,
               json_pack("{s:i, s:I, s:I, s:o, s:s}", "experts", n, "ranks", (json_int_t)gw->cfg->topology.ranks,
                         "picks", (json_int_t)total, "tokens", list, "hot_experts", order));
    free(heat);
    free(tokens);
    free(order);
}

/* ---- routing ---- */

static void method_not_allowed(gw_http_req *req, const char *allowed)
{
    reply_error(req, 405, "method_not_allowed", NULL, "use %s", allowed);
}

/* Splits path (after "/admin/") into at most 5 segments; returns the count, or -1 when too many or empty. */
static int split(const char *path, char seg[5][256])
{
    int n = 0;
    const char *p = path;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n == 5 || len == 0 || len >= 256)
            return -1;
        memcpy(seg[n], p, len);
        seg[n][len] = 0;
        n++;
        if (!e)
            break;
        p = e + 1;
        if (!*p) /* trailing slash */
            return -1;
    }
    return n;
}

int gw_admin_route(fg_gateway_t *gw, gw_http_req *req)
{
    const char *path = gw_http_path(req);
    if (strncmp(path, "/admin/", 7) != 0 && strcmp(path, "/admin") != 0)
        return 0;
    const char *admin_key = gw->cfg->auth.admin_key;
    if (!admin_key || !*admin_key) {
        gw_http_error(req, 404, "not_found", "no such endpoint");
        return 1;
    }
    if (!gw_http_key_equal(gw_http_bearer(req), admin_key)) {
        reply_error(req, 401, "unauthorized", NULL, "%s", "missing or wrong admin key (Authorization: Bearer ADMIN_KEY)");
        return 1;
    }
    const char *m = gw_http_method(req);
    char seg[5][256];
    int n = strlen(path) > 7 ? split(path + 7, seg) : 0;
    const bool get = !strcmp(m, "GET"), post = !strcmp(m, "POST"), put = !strcmp(m, "PUT"), del = !strcmp(m, "DELETE");

    if (n == 1 && !strcmp(seg[0], "drain")) {
        if (!post)
            method_not_allowed(req, "POST");
        else
            drain(gw, req);
        return 1;
    }
    if (n >= 1 && !strcmp(seg[0], "tenants") && !gw->quota) {
        reply_unavailable(req);
        return 1;
    }
    if (n == 1 && !strcmp(seg[0], "tenants")) {
        if (get)
            tenants_list(gw, req);
        else if (post)
            tenant_put(gw, req, NULL);
        else
            method_not_allowed(req, "GET or POST");
        return 1;
    }
    if (n >= 2 && !strcmp(seg[0], "tenants")) {
        const char *id = seg[1];
        const bool known = (n == 2) || (n == 3 && !strcmp(seg[2], "keys")) ||
                           (n == 3 && !strcmp(seg[2], "sessions")) ||
                           (n == 4 && !strcmp(seg[2], "keys") && !strcmp(seg[3], "revoke"));
        if (!known) {
            gw_http_error(req, 404, "not_found", "no such endpoint");
            return 1;
        }
        if (!fg_name_valid(id, strlen(id))) {
            reply_error(req, 400, "invalid_id", NULL, "%s", "tenant ids are 1 to 64 of A-Z a-z 0-9 _ -");
            return 1;
        }
        if (n == 2) {
            if (get)
                tenant_get(gw, req, id);
            else if (put)
                tenant_put(gw, req, id);
            else if (del)
                tenant_delete(gw, req, id);
            else
                method_not_allowed(req, "GET, PUT or DELETE");
        } else if (n == 3 && !strcmp(seg[2], "keys")) {
            if (post)
                key_add(gw, req, id);
            else
                method_not_allowed(req, "POST");
        } else if (n == 3) {
            if (get)
                sessions_list(gw, req, id);
            else
                method_not_allowed(req, "GET");
        } else {
            if (post)
                key_revoke(gw, req, id);
            else
                method_not_allowed(req, "POST");
        }
        return 1;
    }
    if (n == 1 && !strcmp(seg[0], "experts")) {
        if (!get)
            method_not_allowed(req, "GET");
        else
            experts_get(gw, req);
        return 1;
    }
    if (n == 2 && !strcmp(seg[0], "sessions")) {
        if (!del)
            method_not_allowed(req, "DELETE");
        else if (!fg_name_valid(seg[1], strlen(seg[1])))
            reply_error(req, 400, "invalid_id", NULL, "%s", "session ids are 1 to 64 of A-Z a-z 0-9 _ -");
        else
            session_delete(gw, req, seg[1]);
        return 1;
    }
    gw_http_error(req, 404, "not_found", "no such endpoint");
    return 1;
}
