/* http_internal.h: what server.c's protocol callback calls in http.c. */
#ifndef FG_GATEWAY_HTTP_INTERNAL_H
#define FG_GATEWAY_HTTP_INTERNAL_H

#include <libwebsockets.h>
#include <stdbool.h>

#include "gateway/http.h"

/* A new request (LWS_CALLBACK_HTTP); NULL on out of memory. */
gw_http_req *gw_http_begin(fg_gateway_t *gw, struct lws *wsi, const char *uri);
bool gw_http_has_body(const gw_http_req *req);
void gw_http_body_chunk(gw_http_req *req, const void *in, size_t len);
/* Routes a complete request. */
void gw_http_dispatch(gw_http_req *req);
/* LWS_CALLBACK_HTTP_WRITEABLE: -1 close, 0 more to come, 1 the reply is written:
 * free the request (gw_http_finished), then call lws_http_transaction_completed,
 * which may run other callbacks on this connection. */
int gw_http_writable(gw_http_req *req);
/* The connection closed: frees the request, or orphans it while a handler holds it. */
void gw_http_closed(gw_http_req *req);
/* The request finished normally (after gw_http_writable returned 1). */
void gw_http_finished(gw_http_req *req);

#endif
