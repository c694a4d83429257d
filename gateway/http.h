/* http.h: plain HTTP requests on the gateway's port (everything that is not the
 * WebSocket upgrade): GET /healthz here, the admin API (admin.c), and the
 * observation routes: GET /metrics (metrics.c), GET /v1/status (status.c) and
 * the dashboard page under /dashboard (dashboard.c). Those three need the
 * dashboard key or the admin key as a bearer token when auth.dashboard_key is
 * set (docs/metrics.md).
 *
 * A request is routed exactly once, when it is whole (headers, then its
 * Content-Length body), and answered at once or later (after an asynchronous
 * quota call): the handler keeps the gw_http_req and calls gw_http_reply (or
 * gw_http_error) once; later calls are ignored. The connection owns the
 * request: if the client goes away before the handler replies, the reply is
 * dropped and frees the request; a request that was never routed is freed
 * with its connection. Service thread only.
 */
#ifndef FG_GATEWAY_HTTP_H
#define FG_GATEWAY_HTTP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct fg_gateway fg_gateway_t;
typedef struct gw_http_req gw_http_req;

/* Limits on what a client may send (docs/admin.md, "HTTP limits"). */
#define GW_HTTP_MAX_BODY (1u << 20)          /* bytes of one request body; above: 413 */
#define GW_HTTP_BODY_BUDGET (64u << 20)      /* bytes buffered for all bodies being received; above: 503 */
#define GW_HTTP_MAX_URI_BYTES 4096           /* bytes of the decoded path; at or above: 414 */
#define GW_HTTP_MAX_HEADER_BYTES 4096        /* bytes of one known header's value; at or above: 431 */
#define GW_HTTP_HEADER_SPACE (16u << 10)     /* the lws header buffer: a header block beyond it is closed unanswered */
#define GW_HTTP_HEADER_TIMEOUT_S 10          /* first byte to the end of the headers; then closed (by lws) */
#define GW_HTTP_BODY_TIMEOUT_S 30            /* end of the headers to the end of the body; then 408 */

fg_gateway_t *gw_http_gateway(const gw_http_req *req);
/* "GET", "POST", "PUT", "PATCH", "DELETE" or "OTHER" */
const char *gw_http_method(const gw_http_req *req);
/* The path without the query string. */
const char *gw_http_path(const gw_http_req *req);
/* Body bytes (NUL-terminated), empty for GET. */
const char *gw_http_body(const gw_http_req *req, size_t *len);
/* The bearer token of the Authorization header, or "" (valid until the reply). */
const char *gw_http_bearer(const gw_http_req *req);

/* Sends status and a JSON body (copied), then ends the request. */
void gw_http_reply(gw_http_req *req, unsigned status, const char *json);
/* Sends status and a body of len bytes (copied) with that Content-Type, then ends the request. */
void gw_http_reply_as(gw_http_req *req, unsigned status, const char *content_type, const char *body, size_t len);
/* Sends {"error":{"code":code,"message":message}} with status. */
void gw_http_error(gw_http_req *req, unsigned status, const char *code, const char *message);

/* A streamed reply (server-sent events): the status and content type go out
 * at once, without a length; bytes follow as the handler writes them (buffered,
 * one write per writable callback); the connection closes after
 * gw_http_stream_end. A handler that holds a request over time sets on_gone:
 * called once if the client leaves before the reply is out, after which req is
 * freed and must not be touched; never called after gw_http_reply or
 * gw_http_stream_end. gw_http_stream_write returns false when the bytes were
 * not queued (out of memory, or not streaming). */
void gw_http_stream_begin(gw_http_req *req, unsigned status, const char *content_type);
bool gw_http_stream_write(gw_http_req *req, const char *data, size_t len);
void gw_http_stream_end(gw_http_req *req);
void gw_http_set_on_gone(gw_http_req *req, void (*fn)(void *user), void *user);
/* Bytes of a streamed reply not yet handed to lws (the client is that far behind). */
size_t gw_http_stream_pending(const gw_http_req *req);
/* fn(user of on_gone) after each write of a streamed reply's bytes to lws; cleared with on_gone
 * (set to NULL, or at the reply's end). */
void gw_http_set_on_drain(gw_http_req *req, void (*fn)(void *user));

/* Compares two keys in constant time (the time depends on the lengths only). */
bool gw_http_key_equal(const char *a, const char *b);

/* The admin API (admin.c): returns 1 when the path is an admin path (the
 * request is then answered, now or later), 0 otherwise. */
int gw_admin_route(fg_gateway_t *gw, gw_http_req *req);

#endif
