/* http.c: the HTTP side of the gateway's protocol callback: request bodies,
 * routing, and replies written from the writable callback (headers in one
 * write, the body in the next), so a reply that comes later (after a quota
 * call) is sent the same way as an immediate one. */
#include "gateway/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/dashboard.h"
#include "gateway/gateway_internal.h"
#include "gateway/http_internal.h"
#include "gateway/log.h"
#include "gateway/metrics.h"
#include "gateway/status.h"

struct gw_http_req {
    fg_gateway_t *gw;
    struct lws *wsi;        /* NULL once the connection closed */
    char method[8];
    char path[512];
    char bearer[300];
    char *body;
    size_t body_len;
    bool body_too_big;
    bool chunked;           /* Transfer-Encoding: lws 4.1 gives no end of body for it here: refused */
    /* the reply */
    bool replied;
    unsigned status;
    char content_type[48];
    char *reply;            /* LWS_PRE + body */
    size_t reply_len;
    int stage;              /* 0 nothing to write, 1 headers, 2 body */
};

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

static void req_free(gw_http_req *req)
{
    free(req->body);
    free(req->reply);
    free(req);
}

gw_http_req *gw_http_begin(fg_gateway_t *gw, struct lws *wsi, const char *uri)
{
    gw_http_req *req = calloc(1, sizeof *req);
    if (!req)
        return NULL;
    req->gw = gw;
    req->wsi = wsi;
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
    snprintf(req->path, sizeof req->path, "%s", uri ? uri : "");
    char *q = strchr(req->path, '?');
    if (q)
        *q = 0;
    req->chunked = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0;
    char auth[320] = "";
    if (lws_hdr_copy(wsi, auth, sizeof auth, WSI_TOKEN_HTTP_AUTHORIZATION) > 7 && !strncmp(auth, "Bearer ", 7))
        snprintf(req->bearer, sizeof req->bearer, "%.299s", auth + 7);
    return req;
}

bool gw_http_has_body(const gw_http_req *req)
{
    /* Without Content-Length (curl -X POST with no data, or a chunked body, which
     * is refused) lws reports no body completion: dispatch at once. */
    if (req->chunked || (req->wsi && lws_hdr_total_length(req->wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0))
        return false;
    return !strcmp(req->method, "POST") || !strcmp(req->method, "PUT") || !strcmp(req->method, "PATCH");
}

void gw_http_body_chunk(gw_http_req *req, const void *in, size_t len)
{
    if (!len) /* lws may report an empty chunk with in == NULL */
        return;
    if (req->body_too_big || req->body_len + len > GW_HTTP_MAX_BODY) {
        req->body_too_big = true;
        return;
    }
    char *b = realloc(req->body, req->body_len + len + 1);
    if (!b) {
        req->body_too_big = true;
        return;
    }
    memcpy(b + req->body_len, in, len);
    req->body = b;
    req->body_len += len;
    b[req->body_len] = 0;
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

void gw_http_dispatch(gw_http_req *req)
{
    fg_gateway_t *gw = req->gw;
    gw->metrics.http_requests++;
    if (req->chunked)
        return gw_http_error(req, 411, "length_required", "send the body with Content-Length (chunked bodies are not supported)");
    if (req->body_too_big)
        return gw_http_error(req, 413, "body_too_large", "request bodies are limited to 1 MiB");
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
    if (gw_admin_route(gw, req))
        return;
    gw_http_error(req, 404, "not_found", "no such endpoint");
}

void gw_http_reply(gw_http_req *req, unsigned status, const char *json)
{
    gw_http_reply_as(req, status, "application/json", json, strlen(json));
}

void gw_http_reply_as(gw_http_req *req, unsigned status, const char *content_type, const char *body, size_t len)
{
    if (req->replied)
        return;
    req->replied = true;
    if (!req->wsi) { /* the client left while we worked */
        req_free(req);
        return;
    }
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

int gw_http_writable(gw_http_req *req)
{
    struct lws *wsi = req->wsi;
    if (req->stage == 1) {
        unsigned char hdr[LWS_PRE + 512], *start = hdr + LWS_PRE, *p = start, *end = hdr + sizeof hdr - 1;
        if (lws_add_http_common_headers(wsi, req->status, req->content_type, (lws_filepos_t)req->reply_len, &p,
                                        end) ||
            lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL, (const unsigned char *)"no-store", 8,
                                         &p, end) ||
            lws_finalize_write_http_header(wsi, start, &p, end))
            return -1;
        req->stage = 2;
        lws_callback_on_writable(wsi);
        return 0;
    }
    if (req->stage == 2) {
        req->stage = 0;
        if (lws_write(wsi, (unsigned char *)req->reply + LWS_PRE, req->reply_len, LWS_WRITE_HTTP_FINAL) !=
            (int)req->reply_len)
            return -1;
        return 1; /* the caller frees the request, then completes the transaction */
    }
    return 0;
}

void gw_http_closed(gw_http_req *req)
{
    if (req->replied && req->stage == 0) {
        req_free(req);
        return;
    }
    if (req->replied) { /* reply written halfway: nothing more to do */
        req_free(req);
        return;
    }
    req->wsi = NULL; /* the handler still holds it: freed at its reply */
}

void gw_http_finished(gw_http_req *req)
{
    req_free(req);
}
