/* client.h: a WebSocket client transport for flashgate's protocol, on libwebsockets.
 *
 * Owns the client side of the wire below the JSON: one lws context (the loop)
 * and any number of WebSocket connections on it, each with an outgoing message
 * queue and reassembly of fragmented incoming messages. It knows nothing of
 * events or sessions (client_events.h does); flashgate-cli and tests build on it.
 *
 * Threads: one thread owns a loop and everything on it: it calls
 * fg_client_loop_service() and every fg_client_conn_* function, and the
 * handlers run on it. The only call allowed from other threads is
 * fg_client_loop_wake(), which makes a blocked fg_client_loop_service() return.
 *
 * Lifetimes: a connection lives from fg_client_conn_open() to
 * fg_client_conn_free(). Its on_close handler runs exactly once (also when the
 * connection never opened); fg_client_conn_free() may be called from on_close
 * or any time later, or earlier to abandon an open connection (it is then
 * dropped and on_close does not run). Destroying the loop drops every
 * connection still on it without calling handlers; free them after.
 */
#ifndef FG_GATEWAY_CLIENT_H
#define FG_GATEWAY_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/base/clock.h"
#include "config/fg_error.h"

typedef struct fg_client_loop fg_client_loop_t;
typedef struct fg_client_conn fg_client_conn_t;

/* A parsed ws:// or wss:// URL. */
typedef struct fg_client_url {
    bool tls;           /* wss:// */
    char host[256];     /* a name or an address; IPv6 without brackets */
    int port;           /* explicit, else 80 (ws) or 443 (wss) */
    char path[1024];    /* starts with '/'; query string kept */
    char host_header[300]; /* "host" or "host:port" when the port is not the default */
} fg_client_url;

/* Parses "ws://host[:port][/path]" or "wss://...". A missing path is "/".
 * Errors: FG_ERR_INVALID_ARG (diag says what is wrong). */
fg_err fg_client_url_parse(const char *url, fg_client_url *out, fg_diag *diag);

typedef struct fg_client_loop_opts {
    unsigned tick_ms;     /* the longest fg_client_loop_service() blocks; 0 = 50 ms */
    int lws_log_level;    /* lws log bits (LLL_*); 0 = none */
    unsigned max_conns;   /* expected concurrent connections, sizes lws tables; 0 = small */
} fg_client_loop_opts;

/* Creates a loop (an lws context without a listening socket). opts may be NULL.
 * Errors: FG_ERR_NOMEM, FG_ERR_IO (lws refused to start; diag). */
fg_err fg_client_loop_create(const fg_client_loop_opts *opts, fg_client_loop_t **out, fg_diag *diag);
/* Drops every connection still open (no handlers run) and frees the loop. NULL is a no-op. */
void fg_client_loop_destroy(fg_client_loop_t *loop);
/* Runs one service cycle: waits for socket activity, a wake or the tick, and
 * runs the handlers of what happened. */
void fg_client_loop_service(fg_client_loop_t *loop);
/* Makes the current or next fg_client_loop_service() return soon. Any thread. */
void fg_client_loop_wake(fg_client_loop_t *loop);

/* How a connection ended; passed to on_close. */
typedef struct fg_client_close_info {
    bool was_open;        /* the WebSocket handshake had completed */
    bool local;           /* we closed or dropped it */
    int http_status;      /* handshake refused: the server's HTTP status (401, 503, ...); 0 if none */
    int close_code;       /* the server's close frame code (1000, 1001, ...); 0 = no close frame */
    char reason[200];     /* lws's connect error, or the close frame's reason text; may be "" */
} fg_client_close_info;

typedef struct fg_client_handlers {
    /* The handshake completed (101). Optional. */
    void (*on_open)(fg_client_conn_t *c, void *user);
    /* One whole message (fragments joined), NUL-terminated at text[len]. binary:
     * it was a binary message. text is valid only during the call. */
    void (*on_message)(fg_client_conn_t *c, void *user, const char *text, size_t len, bool binary);
    /* The connection ended or never opened. Runs once. */
    void (*on_close)(fg_client_conn_t *c, void *user, const fg_client_close_info *info);
} fg_client_handlers;

typedef struct fg_client_conn_opts {
    const fg_client_url *url;
    const char *api_key;      /* sent as "Authorization: Bearer <key>"; NULL or "" = no header */
    const char *subprotocol;  /* offered Sec-WebSocket-Protocol; NULL = "flashgate.v1", "" = none */
    fg_client_handlers handlers;
    void *user;               /* passed to the handlers */
    size_t max_message_bytes; /* larger incoming messages end the connection; 0 = 64 MiB */
} fg_client_conn_opts;

/* Starts connecting; the handlers report the outcome. Connection failures are
 * reported through on_close (possibly before this returns), not as an error.
 * Errors: FG_ERR_NOMEM, FG_ERR_INVALID_ARG (a key with CR/LF, a TLS URL while
 * lws lacks TLS). */
fg_err fg_client_conn_open(fg_client_loop_t *loop, const fg_client_conn_opts *opts, fg_client_conn_t **out,
                           fg_diag *diag);
/* Queues one message (copied); sent in order once the connection is open.
 * Errors: FG_ERR_NOMEM; FG_ERR_STATE when the connection is closing or closed. */
fg_err fg_client_conn_send(fg_client_conn_t *c, const char *data, size_t len, bool binary);
/* Sends what is queued, then a close frame with this code (1000 if 0); the
 * server's answer ends the connection (on_close, local). */
void fg_client_conn_close(fg_client_conn_t *c, int code);
/* Ends the connection at once, without a close frame, as a network failure
 * would (the TCP connection is shut down; queued messages are discarded). */
void fg_client_conn_drop(fg_client_conn_t *c);
/* True between on_open and the start of closing. */
bool fg_client_conn_is_open(const fg_client_conn_t *c);
/* True once on_close has run (or the connection was never opened). */
bool fg_client_conn_is_closed(const fg_client_conn_t *c);
/* Messages queued and not yet handed to the socket. */
size_t fg_client_conn_pending(const fg_client_conn_t *c);
/* Frees c; an open connection is dropped first without running on_close. NULL is a no-op. */
void fg_client_conn_free(fg_client_conn_t *c);

#endif
