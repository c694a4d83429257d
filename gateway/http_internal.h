/* http_internal.h: what server.c calls in http.c: the HTTP cases of the
 * protocol callback, and the limits the lws context is created with.
 *
 * One request per connection: every reply ends with "connection: close" and
 * the connection closes once it is written. libwebsockets 4.1.6 misparses a
 * request with a body that was read together with the one before it (it
 * takes that request's own header bytes for its body, then reports "body
 * complete" in a loop that never returns), so nothing after the first request
 * on a connection is ever parsed. Service thread only.
 */
#ifndef FG_GATEWAY_HTTP_INTERNAL_H
#define FG_GATEWAY_HTTP_INTERNAL_H

#include <libwebsockets.h>
#include <stdbool.h>

#include "gateway/http.h"

/* Per-token limits for the lws context: the URI at GW_HTTP_MAX_URI_BYTES,
 * every known header at GW_HTTP_MAX_HEADER_BYTES (lws cuts a longer one there,
 * and gw_http_begin answers 414 or 431). */
const struct lws_token_limits *gw_http_token_limits(void);

/* LWS_CALLBACK_HTTP: the headers are in. Returns the connection's request
 * (answered at once when refused, or when it has no body), or NULL to close
 * the connection (out of memory). uri/len: the callback's in/len. */
gw_http_req *gw_http_begin(fg_gateway_t *gw, struct lws *wsi, const char *uri, size_t len);
/* LWS_CALLBACK_HTTP_BODY: ignored unless the body is still being received. */
void gw_http_body_chunk(gw_http_req *req, const void *in, size_t len);
/* LWS_CALLBACK_HTTP_BODY_COMPLETION: routes the request the first time; later
 * ones (bytes after the request) are ignored, or return -1 to close the
 * connection while a handler works (its reply then frees the request). */
int gw_http_body_done(gw_http_req *req);
/* LWS_CALLBACK_HTTP_WRITEABLE: 0 more to write (or nothing yet), -1 close
 * the connection (the reply is written, or writing failed). */
int gw_http_writable(gw_http_req *req);
/* LWS_CALLBACK_CLOSED_HTTP: frees the request, or, while a handler holds it,
 * leaves it to that handler's reply (which then frees it). */
void gw_http_closed(gw_http_req *req);

#endif
