/* http.h: plain HTTP requests on the gateway's port (everything that is not the
 * WebSocket upgrade): GET /healthz here, the admin API (admin.c), and the
 * observation routes: GET /metrics (metrics.c), GET /v1/status (status.c) and
 * the dashboard page under /dashboard (dashboard.c). Those three need the
 * dashboard key or the admin key as a bearer token when auth.dashboard_key is
 * set (docs/metrics.md).
 *
 * A request may be answered at once or later (after an asynchronous quota
 * call): the handler keeps the gw_http_req and calls gw_http_reply exactly
 * once. If the client went away meanwhile the reply is dropped and the request
 * freed then. Service thread only.
 */
#ifndef FG_GATEWAY_HTTP_H
#define FG_GATEWAY_HTTP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct fg_gateway fg_gateway_t;
typedef struct gw_http_req gw_http_req;

#define GW_HTTP_MAX_BODY (1u << 20) /* request bodies above this get 413 */

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

/* Compares two keys in constant time (the time depends on the lengths only). */
bool gw_http_key_equal(const char *a, const char *b);

/* The admin API (admin.c): returns 1 when the path is an admin path (the
 * request is then answered, now or later), 0 otherwise. */
int gw_admin_route(fg_gateway_t *gw, gw_http_req *req);

#endif
