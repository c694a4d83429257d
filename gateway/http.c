/* http.c: the HTTP side of the gateway's protocol callback: the checks at a
 * request's headers, its body, routing, and replies written from the writable
 * callback (headers in one write, the body in the next), so a reply that
 * comes later (after a quota call) is sent the same way as an immediate one.
 * The limits are in http.h and docs/admin.md ("HTTP limits"). */
#include "gateway/http.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gateway/dashboard.h"
#include "gateway/gateway_internal.h"
#include "gateway/http_internal.h"
#include "gateway/log.h"
#include "gateway/metrics.h"
#include "gateway/openai_http.h"
#include "gateway/status.h"

/* A request's life: RECEIVING (headers in, body arriving) -> HANDLING (routed
 * once; a handler holds it) -> REPLYING (reply queued, being written) -> SENT.
 * A refusal (limits, timeout, bad request) goes from RECEIVING straight to
 * REPLYING without being routed. Nothing after the request is parsed
 * (http_internal.h); lws reports a body's end again whenever more bytes come
 * after it, which is ignored, or closes the connection while a handler works. */
typedef enum req_state { REQ_RECEIVING, REQ_HANDLING, REQ_REPLYING, REQ_SENT } req_state;
/* A streamed reply (gw_http_stream_begin) stays REQ_HANDLING, with stream set,
 * until gw_http_stream_end; then REQ_REPLYING until its last bytes are out. */

/* Why a request is refused at its headers. */
typedef struct refusal {
    unsigned status; /* 0: not refused */
    const char *code;
    char message[160];
} refusal;

struct gw_http_req {
    fg_gateway_t *gw;
    struct lws *wsi;        /* NULL once the connection closed (only while HANDLING) */
    req_state state;
    char method[8];
    char path[GW_HTTP_MAX_URI_BYTES + 1];
    char bearer[300];
    size_t content_length;  /* bytes announced; 0: no body */
    char *body;             /* body_cap bytes, counted in gw->http_body_bytes */
    size_t body_len, body_cap;
    lws_sorted_usec_list_t body_timer; /* GW_HTTP_BODY_TIMEOUT_S after the headers */
    refusal refused;        /* refused at its headers: the body is dropped, then this is the answer */
    int body_ends;          /* LWS_CALLBACK_HTTP_BODY_COMPLETION calls */
    /* the reply */
    unsigned status;
    char content_type[48];
    char *reply;            /* LWS_PRE + body */
    size_t reply_len;
    int stage;              /* 0 nothing to write, 1 headers, 2 body */
    /* a streamed reply: bytes appended to reply (after LWS_PRE) as they come */
    bool stream, stream_ended;
    size_t reply_cap;
    void (*on_gone)(void *user); /* the client left before the reply was out */
    void (*on_drain)(void *user); /* a streamed reply's buffered bytes went to lws */
    void *gone_user;
};

#define BODY_FIRST_ALLOC (64u << 10)

fg_gateway_t *gw_http_gateway(const gw_http_req *req) { return req->gw; }
const char *gw_http_method(const gw_http_req *req) { return req->method; }
const char *gw_http_path(const gw_http_req *req) { return req->path; }
const char *gw_http_bearer(const gw_http_req *req) { return req->bearer; }

const char *gw_http_body(const gw_http_req *req, size_t *len)
{
    if (len)
        *len = req->body_len;
    return req->body ? req->body : "";
}

static void body_release(gw_http_req *req)
{
    req->gw->http_body_bytes -= req->body_cap;
    req->body_cap = 0;
}

static void req_free(gw_http_req *req)
{
    lws_sul_cancel(&req->body_timer);
    body_release(req);
    free(req->body);
    free(req->reply);
    free(req);
}

const struct lws_token_limits *gw_http_token_limits(void)
{
    static struct lws_token_limits lim; /* lws keeps the pointer */
    for (int t = 0; t < WSI_TOKEN_COUNT; t++)
        lim.token_limit[t] = GW_HTTP_MAX_HEADER_BYTES;
    static const enum lws_token_indexes uris[] = {WSI_TOKEN_GET_URI,    WSI_TOKEN_POST_URI,   WSI_TOKEN_PUT_URI,
                                                  WSI_TOKEN_PATCH_URI,  WSI_TOKEN_DELETE_URI, WSI_TOKEN_OPTIONS_URI,
                                                  WSI_TOKEN_HEAD_URI,   WSI_TOKEN_CONNECT};
    for (size_t i = 0; i < sizeof uris / sizeof *uris; i++)
        lim.token_limit[uris[i]] = GW_HTTP_MAX_URI_BYTES;
    return &lim;
}

static void stop_receiving(gw_http_req *req, req_state next)
{
    req->state = next;
    lws_sul_cancel(&req->body_timer);
}

static void route(gw_http_req *req);

static void body_timeout(lws_sorted_usec_list_t *sul)
{
    gw_http_req *req = lws_container_of(sul, gw_http_req, body_timer);
    if (req->state != REQ_RECEIVING)
        return;
    char msg[96];
    snprintf(msg, sizeof msg, "the body did not arrive within %d s of the headers", GW_HTTP_BODY_TIMEOUT_S);
    if (req->refused.status)
        gw_http_error(req, req->refused.status, req->refused.code, req->refused.message);
    else
        gw_http_error(req, 408, "request_timeout", msg);
}

/* Content-Length as plain decimal digits (*out 0 when absent); false when malformed. */
static bool content_length(struct lws *wsi, size_t *out)
{
    char v[32];
    *out = 0;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0)
        return true;
    int n = lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_CONTENT_LENGTH);
    if (n <= 0 || n > 16)
        return false;
    size_t x = 0;
    for (int i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        x = x * 10 + (size_t)(v[i] - '0');
    }
    *out = x;
    return true;
}

static bool has_control(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return true;
    return false;
}

static bool refuse(refusal *r, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool refuse(refusal *r, unsigned status, const char *code, const char *fmt, ...)
{
    r->status = status;
    r->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    return true;
}

/* Fills *r when the request is refused at its headers; reads Content-Length
 * into req (first: a refused request's body may still be read and dropped). */
static bool refused_early(gw_http_req *req, struct lws *wsi, const char *uri, size_t len, refusal *r)
{
    if (!content_length(wsi, &req->content_length))
        return refuse(r, 400, "invalid_content_length", "Content-Length must be decimal digits");
    /* lws stops storing a URI at its token limit: one that reaches it was longer */
    if (len + (size_t)lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_URI_ARGS) >= GW_HTTP_MAX_URI_BYTES)
        return refuse(r, 414, "uri_too_long", "the path and query are limited to %d bytes", GW_HTTP_MAX_URI_BYTES - 1);
    for (int t = 0; t < WSI_TOKEN_COUNT; t++)
        if (t != WSI_TOKEN_HTTP_URI_ARGS && lws_hdr_total_length(wsi, (enum lws_token_indexes)t) >= GW_HTTP_MAX_HEADER_BYTES)
            return refuse(r, 431, "headers_too_large", "a header value is limited to %d bytes",
                          GW_HTTP_MAX_HEADER_BYTES - 1);
    /* lws ends the path at a decoded CR or LF and takes the rest of the line
     * for a header: such a request line has no HTTP version left. */
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP) <= 0 || strlen(uri) != len || has_control(uri, len))
        return refuse(r, 400, "invalid_path", "the request line is malformed or its path holds a control character");
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0)
        return refuse(r, 411, "length_required", "send the body with Content-Length (chunked bodies are not supported)");
    if (req->content_length > GW_HTTP_MAX_BODY)
        return refuse(r, 413, "body_too_large", "request bodies are limited to 1 MiB");
    return false;
}

static bool expects_continue(struct lws *wsi)
{
    char expect[32];
    return lws_hdr_copy(wsi, expect, sizeof expect, WSI_TOKEN_HTTP_EXPECT) > 0 && !strcasecmp(expect, "100-continue");
}

/* Answers "Expect: 100-continue" before the body is read. */
static void send_continue(struct lws *wsi)
{
    static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
    unsigned char buf[LWS_PRE + sizeof line];
    memcpy(buf + LWS_PRE, line, sizeof line - 1);
    lws_write(wsi, buf + LWS_PRE, sizeof line - 1, LWS_WRITE_HTTP_HEADERS);
}

gw_http_req *gw_http_begin(fg_gateway_t *gw, struct lws *wsi, const char *uri, size_t len)
{
    gw_http_req *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    req->gw = gw;
    req->wsi = wsi;
    req->state = REQ_RECEIVING;
    gw->metrics.http_requests++;
    static const struct {
        enum lws_token_indexes tok;
        const char *name;
    } methods[] = {{WSI_TOKEN_GET_URI, "GET"},       {WSI_TOKEN_POST_URI, "POST"},
                   {WSI_TOKEN_PUT_URI, "PUT"},       {WSI_TOKEN_PATCH_URI, "PATCH"},
                   {WSI_TOKEN_DELETE_URI, "DELETE"}};
    snprintf(req->method, sizeof req->method, "OTHER");
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (lws_hdr_total_length(wsi, methods[i].tok) > 0) {
            snprintf(req->method, sizeof req->method, "%s", methods[i].name);
            break;
        }
    if (!uri)
        uri = "";
    refusal r = {0};
    if (refused_early(req, wsi, uri, len, &r)) {
        /* A client that sends its body without waiting gets the answer after
         * it (bytes dropped, not kept): one that is still sending would see
         * the close instead of the answer. */
        if (r.status == 400 && !strcmp(r.code, "invalid_content_length"))
            req->content_length = 0;
        if (req->content_length == 0 || expects_continue(wsi)) {
            gw_http_error(req, r.status, r.code, r.message);
            return req;
        }
        req->refused = r;
    } else {
        memcpy(req->path, uri, len);
        req->path[len] = 0;
        char auth[320] = "";
        if (lws_hdr_copy(wsi, auth, sizeof auth, WSI_TOKEN_HTTP_AUTHORIZATION) > 7 && !strncmp(auth, "Bearer ", 7))
            snprintf(req->bearer, sizeof req->bearer, "%.299s", auth + 7);
        if (req->content_length == 0) {
            stop_receiving(req, REQ_HANDLING);
            route(req);
            return req;
        }
        if (expects_continue(wsi))
            send_continue(wsi);
    }
    lws_sul_schedule(lws_get_context(wsi), 0, &req->body_timer, body_timeout,
                     (lws_usec_t)GW_HTTP_BODY_TIMEOUT_S * LWS_US_PER_SEC);
    return req;
}

void gw_http_body_chunk(gw_http_req *req, const void *in, size_t len)
{
    if (req->state != REQ_RECEIVING || !len) /* lws may report an empty chunk with in == NULL */
        return;
    if (req->body_len + len > req->content_length) { /* lws cuts at Content-Length: never */
        gw_http_error(req, 400, "invalid_body", "more body than Content-Length");
        return;
    }
    if (req->refused.status) { /* dropped: only counted */
        req->body_len += len;
        return;
    }
    if (req->body_len + len + 1 > req->body_cap) {
        /* Small bodies (every admin one) in one small buffer; a big one gets its
         * whole Content-Length once its first BODY_FIRST_ALLOC bytes are in. */
        size_t cap = req->body_len + len + 1 <= BODY_FIRST_ALLOC ? BODY_FIRST_ALLOC : req->content_length + 1;
        if (cap > req->content_length + 1)
            cap = req->content_length + 1;
        fg_gateway_t *gw = req->gw;
        if (gw->http_body_bytes - req->body_cap + cap > GW_HTTP_BODY_BUDGET) {
            gw_http_error(req, 503, "busy", "too many request bodies are arriving at once: retry later");
            return;
        }
        char *b = realloc(req->body, cap);
        if (!b) {
            gw_http_error(req, 503, "busy", "out of memory: retry later");
            return;
        }
        gw->http_body_bytes += cap - req->body_cap;
        req->body = b;
        req->body_cap = cap;
    }
    memcpy(req->body + req->body_len, in, len);
    req->body_len += len;
    req->body[req->body_len] = 0;
}

int gw_http_body_done(gw_http_req *req)
{
    /* lws reports the end once (also for POST with Content-Length: 0, routed
     * at its headers), then again whenever bytes follow the request. */
    if (++req->body_ends > 1 && req->state == REQ_HANDLING)
        return -1; /* a pipelining client, while the handler works: its reply frees the request */
    if (req->state != REQ_RECEIVING)
        return 0;
    if (req->body_len != req->content_length) {
        gw_http_error(req, 400, "invalid_body", "the body ended before Content-Length");
        return 0;
    }
    if (req->refused.status) {
        gw_http_error(req, req->refused.status, req->refused.code, req->refused.message);
        return 0;
    }
    stop_receiving(req, REQ_HANDLING);
    route(req);
    return 0;
}

static void healthz(fg_gateway_t *gw, gw_http_req *req)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"status\":\"%s\",\"version\":\"" FG_PROTO_SUBPROTOCOL "\",\"sessions\":%zu,\"connections\":%zu}",
             gw->draining ? "draining" : "ok", gw->n_sessions, gw->n_conns);
    gw_http_reply(req, gw->draining ? 503 : 200, body);
}

bool gw_http_key_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    volatile unsigned char diff = (unsigned char)(la != lb);
    size_t n = la > lb ? la : lb;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < la ? (unsigned char)a[i] : 0, y = i < lb ? (unsigned char)b[i] : 0;
        diff |= (unsigned char)(x ^ y);
    }
    return diff == 0;
}

/* The observation routes' key: none when auth.dashboard_key is empty, else the
 * dashboard key or the admin key as a bearer token. */
static bool observer_authorized(const fg_gateway_t *gw, const gw_http_req *req)
{
    const char *dash = gw->cfg->auth.dashboard_key, *admin = gw->cfg->auth.admin_key;
    if (!dash || !*dash)
        return true;
    /* both compared, so the time does not tell which key matched */
    const bool d = gw_http_key_equal(req->bearer, dash);
    const bool a = admin && *admin && gw_http_key_equal(req->bearer, admin);
    return d || a;
}

static void unauthorized(gw_http_req *req)
{
    gw_http_error(req, 401, "unauthorized",
                  "missing or wrong key (Authorization: Bearer DASHBOARD_KEY or ADMIN_KEY)");
}

static void metrics(fg_gateway_t *gw, gw_http_req *req)
{
    if (!observer_authorized(gw, req))
        return unauthorized(req);
    char *text;
    size_t len;
    if (gw_metrics_render(gw, &text, &len) != FG_OK)
        return gw_http_error(req, 500, "internal_error", "out of memory");
    gw_http_reply_as(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
    free(text);
}

static void status(fg_gateway_t *gw, gw_http_req *req)
{
    if (!observer_authorized(gw, req))
        return unauthorized(req);
    char *json = gw_status_render(gw);
    if (!json)
        return gw_http_error(req, 500, "internal_error", "out of memory");
    gw_http_reply(req, 200, json);
    free(json);
}

/* The page's files. The page itself without the key is answered 401 with the
 * same HTML, which holds no figures and asks for the key; its script and style
 * are plain code, served to anyone. */
static void dashboard(fg_gateway_t *gw, gw_http_req *req)
{
    const char *name = req->path + strlen("/dashboard");
    if (!*name || !strcmp(name, "/"))
        name = "/index.html";
    const gw_dashboard_file *f = gw_dashboard_find(gw->dashboard, name + 1);
    if (!f) {
        if (!gw->dashboard)
            return gw_http_error(req, 503, "dashboard_missing",
                                 "the dashboard's files were not found next to the binary (share/flashgate/dashboard)");
        return gw_http_error(req, 404, "not_found", "no such endpoint");
    }
    const bool page = !strcmp(name, "/index.html");
    gw_http_reply_as(req, page && !observer_authorized(gw, req) ? 401 : 200, f->content_type, f->data, f->len);
}

static void route(gw_http_req *req)
{
    fg_gateway_t *gw = req->gw;
    if (!strcmp(req->path, "/healthz")) {
        if (strcmp(req->method, "GET"))
            return gw_http_error(req, 405, "method_not_allowed", "use GET");
        return healthz(gw, req);
    }
    const bool get = !strcmp(req->method, "GET");
    if (!strcmp(req->path, "/metrics"))
        return get ? metrics(gw, req) : gw_http_error(req, 405, "method_not_allowed", "use GET");
    if (!strcmp(req->path, "/v1/status"))
        return get ? status(gw, req) : gw_http_error(req, 405, "method_not_allowed", "use GET");
    if (!strcmp(req->path, "/dashboard") || !strncmp(req->path, "/dashboard/", 11))
        return get ? dashboard(gw, req) : gw_http_error(req, 405, "method_not_allowed", "use GET");
    if (gw_admin_route(gw, req) || gw_openai_route(gw, req))
        return;
    gw_http_error(req, 404, "not_found", "no such endpoint");
}

void gw_http_reply(gw_http_req *req, unsigned status, const char *json)
{
    gw_http_reply_as(req, status, "application/json", json, strlen(json));
}

void gw_http_reply_as(gw_http_req *req, unsigned status, const char *content_type, const char *body, size_t len)
{
    if (req->state != REQ_RECEIVING && req->state != REQ_HANDLING)
        return; /* answered already */
    if (!req->wsi) { /* the client left while the handler worked: the request is the handler's to free */
        req_free(req);
        return;
    }
    if (req->stream)
        return; /* a streamed reply ends with gw_http_stream_end */
    stop_receiving(req, REQ_REPLYING);
    req->on_gone = req->on_drain = NULL; /* the handler is done with it */
    body_release(req); /* the body is read by now; its memory stays until the request is freed */
    req->reply = malloc(LWS_PRE + len + 1);
    if (!req->reply) {
        lws_set_timeout(req->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
        return;
    }
    memcpy(req->reply + LWS_PRE, body, len);
    req->reply[LWS_PRE + len] = 0;
    snprintf(req->content_type, sizeof req->content_type, "%s", content_type);
    req->reply_len = len;
    req->status = status;
    req->stage = 1;
    lws_callback_on_writable(req->wsi);
}

void gw_http_error(gw_http_req *req, unsigned status, const char *code, const char *message)
{
    char m[300], body[512];
    snprintf(body, sizeof body, "{\"error\":{\"code\":\"%s\",\"message\":%s}}", code, fg_log_str(m, sizeof m, message));
    gw_http_reply(req, status, body);
}


/* The reply's status line and headers: no caching, and the connection closes
 * after it (one request per connection). len: the body's length, or
 * LWS_ILLEGAL_HTTP_CONTENT_LEN for a stream. */
static int write_headers(struct lws *wsi, const gw_http_req *req, lws_filepos_t len)
{
    unsigned char hdr[LWS_PRE + 512], *start = hdr + LWS_PRE, *p = start, *end = hdr + sizeof hdr - 1;
    return lws_add_http_common_headers(wsi, req->status, req->content_type, len, &p, end) ||
           lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL, (const unsigned char *)"no-store", 8, &p,
                                        end) ||
           lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)"close", 5, &p, end) ||
           lws_finalize_write_http_header(wsi, start, &p, end);
}

static int stream_writable(gw_http_req *req)
{
    struct lws *wsi = req->wsi;
    if (req->stage == 1) {
        /* no length: the body ends when the connection closes (one request per connection) */
        if (write_headers(wsi, req, LWS_ILLEGAL_HTTP_CONTENT_LEN))
            return -1;
        req->stage = 2;
        if (req->reply_len || req->stream_ended)
            lws_callback_on_writable(wsi);
        return 0;
    }
    if (req->stage != 2)
        return 0;
    const size_t n = req->reply_len;
    req->reply_len = 0;
    if (req->stream_ended) {
        req->state = REQ_SENT;
        req->stage = 0;
        lws_write(wsi, (unsigned char *)req->reply + LWS_PRE, n, LWS_WRITE_HTTP_FINAL);
        return -1;
    }
    if (n && lws_write(wsi, (unsigned char *)req->reply + LWS_PRE, n, LWS_WRITE_HTTP) < (int)n)
        return -1;
    if (req->on_drain)
        req->on_drain(req->gone_user);
    return 0;
}

size_t gw_http_stream_pending(const gw_http_req *req)
{
    return req->stream ? req->reply_len : 0;
}

void gw_http_stream_begin(gw_http_req *req, unsigned status, const char *content_type)
{
    if (req->state != REQ_HANDLING || req->stream || !req->wsi)
        return;
    body_release(req);
    req->stream = true;
    req->status = status;
    snprintf(req->content_type, sizeof req->content_type, "%s", content_type);
    req->stage = 1;
    lws_callback_on_writable(req->wsi);
}

bool gw_http_stream_write(gw_http_req *req, const char *data, size_t len)
{
    if (!req->stream || req->stream_ended || !req->wsi)
        return false;
    if (LWS_PRE + req->reply_len + len + 1 > req->reply_cap) {
        size_t cap = req->reply_cap ? req->reply_cap : LWS_PRE + 4096;
        while (cap < LWS_PRE + req->reply_len + len + 1)
            cap *= 2;
        char *b = realloc(req->reply, cap);
        if (!b)
            return false;
        req->reply = b;
        req->reply_cap = cap;
    }
    memcpy(req->reply + LWS_PRE + req->reply_len, data, len);
    req->reply_len += len;
    if (req->stage == 2)
        lws_callback_on_writable(req->wsi);
    return true;
}

void gw_http_stream_end(gw_http_req *req)
{
    if (!req->stream || req->stream_ended || !req->wsi)
        return;
    if (!req->reply && !gw_http_stream_write(req, "", 0)) {
        lws_set_timeout(req->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
        req->on_gone = NULL;
        return;
    }
    req->stream_ended = true;
    req->state = REQ_REPLYING;
    req->on_gone = req->on_drain = NULL; /* the handler is done with it */
    if (req->stage == 2)
        lws_callback_on_writable(req->wsi);
}

void gw_http_set_on_gone(gw_http_req *req, void (*fn)(void *user), void *user)
{
    req->on_gone = fn;
    req->gone_user = user;
    if (!fn)
        req->on_drain = NULL; /* the handler lets go of req */
}

void gw_http_set_on_drain(gw_http_req *req, void (*fn)(void *user))
{
    req->on_drain = fn;
}

int gw_http_writable(gw_http_req *req)
{
    struct lws *wsi = req->wsi;
    if (req->stream)
        return stream_writable(req);
    if (req->stage == 1) {
        if (write_headers(wsi, req, (lws_filepos_t)req->reply_len))
            return -1;
        req->stage = 2;
        lws_callback_on_writable(wsi);
        return 0;
    }
    if (req->stage == 2) {
        req->stage = 0;
        req->state = REQ_SENT;
        lws_write(wsi, (unsigned char *)req->reply + LWS_PRE, req->reply_len, LWS_WRITE_HTTP_FINAL);
        return -1; /* one request per connection (http_internal.h): lws sends what is buffered, then closes */
    }
    return 0;
}

void gw_http_closed(gw_http_req *req)
{
    if (req->on_gone && req->state != REQ_SENT) {
        /* the handler is told, lets go of req, and req goes now */
        void (*fn)(void *) = req->on_gone;
        req->on_gone = req->on_drain = NULL;
        fn(req->gone_user);
        req_free(req);
        return;
    }
    if (req->state == REQ_HANDLING) {
        req->wsi = NULL; /* the handler still holds it: freed at its reply */
        return;
    }
    req_free(req);
}
