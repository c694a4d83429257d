/* client.c: the WebSocket client transport (see client.h).
 *
 * Design: one lws context per loop with a single client protocol whose
 * callback finds its fg_client_conn through the wsi's opaque user pointer.
 * Nulling that pointer detaches a connection from its wsi, so a connection can
 * be freed while lws still holds the wsi. End-of-connection notices are not
 * delivered from inside lws callbacks: they are queued and delivered by
 * fg_client_loop_service() after lws_service() returns, so that an on_close
 * handler may free its connection, or open new ones, without re-entering lws.
 * A repeating lws timer (the tick) bounds how long one service cycle blocks:
 * lws 4.1 ignores lws_service()'s timeout and waits for the next timer.
 */
#include "gateway/client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <libwebsockets.h>

#include "config/base/bytes.h"
#include "gateway/protocol.h"

#define CLIENT_DEFAULT_MAX_MESSAGE ((size_t)64 << 20)

/* One queued outgoing message: LWS_PRE bytes of headroom, then the payload. */
typedef struct out_msg {
    struct out_msg *next;
    size_t len;
    bool binary;
    unsigned char buf[]; /* LWS_PRE + len */
} out_msg;

typedef enum conn_state {
    CONN_CONNECTING,
    CONN_OPEN,
    CONN_CLOSING, /* close or drop asked; waiting for lws to end the wsi */
    CONN_CLOSED,  /* the wsi is gone; on_close delivered or queued */
} conn_state;

struct fg_client_conn {
    fg_client_loop_t *loop;
    struct lws *wsi;            /* NULL once lws has let go of it */
    conn_state state;
    fg_client_handlers h;
    void *user;
    fg_client_url url;
    char *auth;                 /* "Bearer <key>", or NULL */
    char subprotocol[128];      /* "" = offer none */
    /* outgoing */
    out_msg *out_head, *out_tail;
    size_t n_out;
    int close_code;             /* a close frame to send after the queue; 0 = none asked */
    /* incoming message being reassembled */
    char *rx;
    size_t rx_len, rx_cap, rx_max;
    /* how it ended */
    fg_client_close_info info;
    bool notify_queued;         /* on the loop's list of on_close notices to deliver */
    bool notified;              /* on_close ran (or will never run) */
    fg_client_conn_t *all_prev, *all_next;
    fg_client_conn_t *notify_next;
};

struct fg_client_loop {
    struct lws_context *ctx;
    lws_sorted_usec_list_t tick;
    lws_usec_t tick_us;
    bool destroying;            /* lws_context_destroy is running: no handlers */
    fg_client_conn_t *all;      /* every connection on the loop */
    fg_client_conn_t *notify_head, *notify_tail;
};

/* ---- URL ---- */

static fg_err url_fail(fg_diag *diag, const char *url, const char *why)
{
    if (diag)
        snprintf(diag->msg, sizeof diag->msg, "bad URL \"%.200s\": %s", url, why);
    return FG_ERR_INVALID_ARG;
}

fg_err fg_client_url_parse(const char *url, fg_client_url *out, fg_diag *diag)
{
    memset(out, 0, sizeof *out);
    const char *p;
    if (!strncmp(url, "ws://", 5)) {
        p = url + 5;
    } else if (!strncmp(url, "wss://", 6)) {
        p = url + 6;
        out->tls = true;
    } else {
        return url_fail(diag, url, "must start with ws:// or wss://");
    }
    const char *host = p, *host_end;
    if (*p == '[') { /* [v6addr] */
        host = p + 1;
        host_end = strchr(host, ']');
        if (!host_end)
            return url_fail(diag, url, "unterminated [IPv6 address]");
        p = host_end + 1;
    } else {
        while (*p && *p != ':' && *p != '/' && *p != '?')
            p++;
        host_end = p;
    }
    size_t hl = (size_t)(host_end - host);
    if (hl == 0)
        return url_fail(diag, url, "no host");
    if (hl >= sizeof out->host)
        return url_fail(diag, url, "host too long");
    memcpy(out->host, host, hl);
    out->host[hl] = '\0';
    for (size_t i = 0; i < hl; i++)
        if ((unsigned char)out->host[i] <= ' ' || out->host[i] == '@')
            return url_fail(diag, url, "bad character in host (user info is not supported)");

    bool explicit_port = false;
    out->port = out->tls ? 443 : 80;
    if (*p == ':') {
        p++;
        long port = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 6) {
            port = port * 10 + (*p++ - '0');
            digits++;
        }
        if (!digits || port < 1 || port > 65535)
            return url_fail(diag, url, "port must be 1..65535");
        out->port = (int)port;
        explicit_port = true;
    }
    if (*p && *p != '/' && *p != '?')
        return url_fail(diag, url, "unexpected character after the host");
    int n;
    if (*p == '/')
        n = snprintf(out->path, sizeof out->path, "%s", p);
    else
        n = snprintf(out->path, sizeof out->path, "/%s", p);
    if (n < 0 || (size_t)n >= sizeof out->path)
        return url_fail(diag, url, "path too long");
    for (const char *q = out->path; *q; q++)
        if ((unsigned char)*q <= ' ')
            return url_fail(diag, url, "space or control character in the path");

    bool v6 = strchr(out->host, ':') != NULL;
    int default_port = out->tls ? 443 : 80;
    if (explicit_port && out->port != default_port)
        n = snprintf(out->host_header, sizeof out->host_header, v6 ? "[%s]:%d" : "%s:%d", out->host, out->port);
    else
        n = snprintf(out->host_header, sizeof out->host_header, v6 ? "[%s]" : "%s", out->host);
    if (n < 0 || (size_t)n >= sizeof out->host_header)
        return url_fail(diag, url, "host too long");
    return FG_OK;
}

/* ---- connections: internal ---- */

static void out_queue_clear(fg_client_conn_t *c)
{
    out_msg *m = c->out_head;
    while (m) {
        out_msg *next = m->next;
        free(m);
        m = next;
    }
    c->out_head = c->out_tail = NULL;
    c->n_out = 0;
}

/* The wsi is ending: detach from it and queue the on_close notice. */
static void conn_finish(fg_client_conn_t *c)
{
    if (c->state == CONN_CLOSED)
        return;
    if (c->wsi)
        lws_set_opaque_user_data(c->wsi, NULL);
    c->wsi = NULL;
    c->state = CONN_CLOSED;
    out_queue_clear(c);
    fg_client_loop_t *loop = c->loop;
    if (loop->destroying || c->notified)
        return;
    c->notify_queued = true;
    c->notify_next = NULL;
    if (loop->notify_tail)
        loop->notify_tail->notify_next = c;
    else
        loop->notify_head = c;
    loop->notify_tail = c;
}

static void notify_unlink(fg_client_conn_t *c)
{
    fg_client_loop_t *loop = c->loop;
    fg_client_conn_t *prev = NULL;
    for (fg_client_conn_t *it = loop->notify_head; it; prev = it, it = it->notify_next) {
        if (it != c)
            continue;
        if (prev)
            prev->notify_next = it->notify_next;
        else
            loop->notify_head = it->notify_next;
        if (loop->notify_tail == c)
            loop->notify_tail = prev;
        break;
    }
    c->notify_queued = false;
}

static void note_http_status(fg_client_conn_t *c, struct lws *wsi)
{
    if (c->info.http_status)
        return;
    unsigned int st = lws_http_client_http_response(wsi);
    if (st) {
        c->info.http_status = (int)st;
        return;
    }
    /* The status line's code, while the header table is still attached. */
    char line[16];
    if (lws_hdr_copy(wsi, line, (int)sizeof line, WSI_TOKEN_HTTP) > 0)
        c->info.http_status = atoi(line);
}

static int rx_append(fg_client_conn_t *c, const void *in, size_t len)
{
    if (c->rx_len + len > c->rx_max)
        return -1;
    return fg_bytes_append(&c->rx, &c->rx_len, &c->rx_cap, in, len) ? 0 : -1;
}

static int client_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    (void)user;
    fg_client_conn_t *c = lws_get_opaque_user_data(wsi);
    if (!c)
        return 0;
    if (!c->wsi && c->state != CONN_CLOSED)
        c->wsi = wsi; /* callbacks can run before lws_client_connect_via_info returns */
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
        if (!c->auth)
            break;
        unsigned char **p = (unsigned char **)in, *end = *p + len;
        if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, (const unsigned char *)c->auth,
                                         (int)strlen(c->auth), p, end))
            return -1;
        break;
    }
    case LWS_CALLBACK_ESTABLISHED_CLIENT_HTTP: /* a non-101 answer to the upgrade, on some lws versions */
        note_http_status(c, wsi);
        break;
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        note_http_status(c, wsi);
        if (!c->info.reason[0])
            snprintf(c->info.reason, sizeof c->info.reason, "%.*s", in ? (int)len : 0, in ? (const char *)in : "");
        if (!c->info.reason[0])
            snprintf(c->info.reason, sizeof c->info.reason, "connection failed");
        conn_finish(c);
        break;
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        c->info.was_open = true;
        c->info.http_status = 101;
        if (c->state == CONN_CONNECTING)
            c->state = CONN_OPEN;
        if (c->h.on_open && c->state == CONN_OPEN)
            c->h.on_open(c, c->user);
        /* on_open may have freed or closed c: look again */
        c = lws_get_opaque_user_data(wsi);
        if (c && (c->out_head || c->close_code))
            lws_callback_on_writable(wsi);
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE: {
        if (c->state != CONN_OPEN && c->state != CONN_CLOSING)
            break;
        if (rx_append(c, in, len)) {
            snprintf(c->info.reason, sizeof c->info.reason, "incoming message larger than %zu bytes", c->rx_max);
            c->info.local = true;
            return -1;
        }
        if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi))
            break;
        bool binary = lws_frame_is_binary(wsi) != 0;
        size_t n = c->rx_len;
        c->rx_len = 0;
        if (!c->rx && rx_append(c, "", 0)) /* an empty message: still give a NUL-terminated buffer */
            return -1;
        if (c->h.on_message)
            c->h.on_message(c, c->user, c->rx, n, binary);
        break;
    }
    case LWS_CALLBACK_CLIENT_WRITEABLE: {
        out_msg *m = c->out_head;
        if (m) {
            c->out_head = m->next;
            if (!c->out_head)
                c->out_tail = NULL;
            c->n_out--;
            int w = lws_write(wsi, m->buf + LWS_PRE, m->len, m->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
            free(m);
            if (w < 0) {
                snprintf(c->info.reason, sizeof c->info.reason, "write failed");
                return -1;
            }
            if (c->out_head || c->close_code)
                lws_callback_on_writable(wsi);
            break;
        }
        if (c->close_code) {
            c->info.local = true;
            lws_close_reason(wsi, (enum lws_close_status)c->close_code, NULL, 0);
            return -1;
        }
        break;
    }
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len >= 2) {
            const unsigned char *b = in;
            c->info.close_code = (b[0] << 8) | b[1];
            snprintf(c->info.reason, sizeof c->info.reason, "%.*s", (int)(len - 2), (const char *)in + 2);
        } else {
            c->info.close_code = 1005; /* a close frame without a code */
        }
        break;
    case LWS_CALLBACK_CLIENT_CLOSED:
    case LWS_CALLBACK_WSI_DESTROY:
        conn_finish(c);
        break;
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols client_protocols[] = {
    /* rx_buffer_size: lws allocates it per connection; 4 KiB keeps 10,000
     * connections cheap, and larger messages arrive in several callbacks. */
    {"flashgate-client", client_callback, 0, 4096, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- loop ---- */

static void tick_cb(lws_sorted_usec_list_t *sul)
{
    fg_client_loop_t *loop = lws_container_of(sul, fg_client_loop_t, tick);
    lws_sul_schedule(loop->ctx, 0, &loop->tick, tick_cb, loop->tick_us);
}

fg_err fg_client_loop_create(const fg_client_loop_opts *opts, fg_client_loop_t **out, fg_diag *diag)
{
    *out = NULL;
    fg_client_loop_opts o = {0};
    if (opts)
        o = *opts;
    fg_client_loop_t *loop = calloc(1, sizeof *loop);
    if (!loop)
        return FG_ERR_NOMEM;
    loop->tick_us = (lws_usec_t)(o.tick_ms ? o.tick_ms : 50) * 1000;
    lws_set_log_level(o.lws_log_level, NULL);

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = client_protocols;
    info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.user = loop;
    info.connect_timeout_secs = 15;
    info.timeout_secs = 30; /* the handshake and the close handshake */
    /* Header tables are held only during the handshake; more of them lets a
     * large ramp of connections handshake in parallel. */
    unsigned pool = o.max_conns > 32 ? (o.max_conns < 4096 ? o.max_conns : 4096) : 32;
    info.max_http_header_pool2 = pool;
    loop->ctx = lws_create_context(&info);
    if (!loop->ctx) {
        if (diag)
            snprintf(diag->msg, sizeof diag->msg, "libwebsockets could not create a client context");
        free(loop);
        return FG_ERR_IO;
    }
    lws_sul_schedule(loop->ctx, 0, &loop->tick, tick_cb, loop->tick_us);
    *out = loop;
    return FG_OK;
}

void fg_client_loop_service(fg_client_loop_t *loop)
{
    lws_service(loop->ctx, 0);
    /* Deliver on_close notices outside lws callbacks. Handlers may free their
     * connection or open new ones (which may queue further notices). */
    while (loop->notify_head) {
        fg_client_conn_t *c = loop->notify_head;
        loop->notify_head = c->notify_next;
        if (!loop->notify_head)
            loop->notify_tail = NULL;
        c->notify_queued = false;
        c->notified = true;
        fg_client_close_info info = c->info; /* the handler may free c */
        if (c->h.on_close)
            c->h.on_close(c, c->user, &info);
    }
}

void fg_client_loop_wake(fg_client_loop_t *loop)
{
    lws_cancel_service(loop->ctx);
}

void fg_client_loop_destroy(fg_client_loop_t *loop)
{
    if (!loop)
        return;
    loop->destroying = true;
    lws_sul_cancel(&loop->tick);
    /* Detach every connection first: lws closes their wsis during destroy. */
    for (fg_client_conn_t *c = loop->all; c; c = c->all_next) {
        if (c->wsi)
            lws_set_opaque_user_data(c->wsi, NULL);
        c->wsi = NULL;
        c->state = CONN_CLOSED;
        c->notified = true;
        c->notify_queued = false;
        out_queue_clear(c);
    }
    loop->notify_head = loop->notify_tail = NULL;
    lws_context_destroy(loop->ctx);
    /* Connections outlive the loop until freed; make them forget it. */
    for (fg_client_conn_t *c = loop->all, *next; c; c = next) {
        next = c->all_next;
        c->loop = NULL;
        c->all_prev = c->all_next = NULL;
    }
    free(loop);
}

/* ---- connections ---- */

fg_err fg_client_conn_open(fg_client_loop_t *loop, const fg_client_conn_opts *opts, fg_client_conn_t **out,
                           fg_diag *diag)
{
    *out = NULL;
#if !defined(LWS_WITH_TLS)
    if (opts->url->tls) {
        if (diag)
            snprintf(diag->msg, sizeof diag->msg, "wss:// needs libwebsockets built with TLS");
        return FG_ERR_INVALID_ARG;
    }
#endif
    const char *key = opts->api_key;
    if (key && (strchr(key, '\r') || strchr(key, '\n'))) {
        if (diag)
            snprintf(diag->msg, sizeof diag->msg, "the API key contains a line break");
        return FG_ERR_INVALID_ARG;
    }
    const char *sp = opts->subprotocol ? opts->subprotocol : FG_PROTO_SUBPROTOCOL;
    fg_client_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return FG_ERR_NOMEM;
    if (strlen(sp) >= sizeof c->subprotocol) {
        free(c);
        if (diag)
            snprintf(diag->msg, sizeof diag->msg, "subprotocol name too long");
        return FG_ERR_INVALID_ARG;
    }
    strcpy(c->subprotocol, sp);
    if (key && *key) {
        size_t n = strlen(key) + sizeof "Bearer ";
        c->auth = malloc(n);
        if (!c->auth) {
            free(c);
            return FG_ERR_NOMEM;
        }
        snprintf(c->auth, n, "Bearer %s", key);
    }
    c->loop = loop;
    c->h = opts->handlers;
    c->user = opts->user;
    c->url = *opts->url;
    c->rx_max = opts->max_message_bytes ? opts->max_message_bytes : CLIENT_DEFAULT_MAX_MESSAGE;
    c->state = CONN_CONNECTING;
    c->all_next = loop->all;
    if (loop->all)
        loop->all->all_prev = c;
    loop->all = c;

    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = loop->ctx;
    ci.address = c->url.host;
    ci.port = c->url.port;
    ci.ssl_connection = c->url.tls ? LCCSCF_USE_SSL : 0;
    ci.path = c->url.path;
    ci.host = c->url.host_header;
    ci.origin = c->url.host_header;
    ci.protocol = c->subprotocol[0] ? c->subprotocol : NULL;
    ci.local_protocol_name = client_protocols[0].name;
    ci.opaque_user_data = c;
    *out = c;
    /* lws may report a failure through the callback before this returns (the
     * notice is then queued); a NULL return without one is reported here.
     * (No ci.pwsi: lws would keep a pointer into c past its free.) */
    struct lws *wsi = lws_client_connect_via_info(&ci);
    if (wsi && c->state != CONN_CLOSED)
        c->wsi = wsi;
    if (!wsi && c->state != CONN_CLOSED) {
        if (!c->info.reason[0])
            snprintf(c->info.reason, sizeof c->info.reason, "could not start connecting to %.150s:%d", c->url.host,
                     c->url.port);
        conn_finish(c);
    }
    return FG_OK;
}

fg_err fg_client_conn_send(fg_client_conn_t *c, const char *data, size_t len, bool binary)
{
    if (c->state != CONN_CONNECTING && c->state != CONN_OPEN)
        return FG_ERR_STATE;
    if (c->close_code)
        return FG_ERR_STATE;
    out_msg *m = malloc(sizeof *m + LWS_PRE + len);
    if (!m)
        return FG_ERR_NOMEM;
    m->next = NULL;
    m->len = len;
    m->binary = binary;
    if (len)
        memcpy(m->buf + LWS_PRE, data, len);
    if (c->out_tail)
        c->out_tail->next = m;
    else
        c->out_head = m;
    c->out_tail = m;
    c->n_out++;
    if (c->state == CONN_OPEN && c->wsi)
        lws_callback_on_writable(c->wsi);
    return FG_OK;
}

void fg_client_conn_close(fg_client_conn_t *c, int code)
{
    if (c->state == CONN_CLOSED || c->close_code)
        return;
    c->close_code = code ? code : LWS_CLOSE_STATUS_NORMAL;
    c->info.local = true;
    if (c->state == CONN_OPEN && c->wsi) {
        c->state = CONN_CLOSING;
        lws_callback_on_writable(c->wsi);
    } else if (c->state == CONN_CONNECTING) {
        fg_client_conn_drop(c); /* nothing to close politely yet */
    }
}

void fg_client_conn_drop(fg_client_conn_t *c)
{
    if (c->state == CONN_CLOSED)
        return;
    c->info.local = true;
    c->state = CONN_CLOSING;
    out_queue_clear(c);
    if (!c->wsi)
        return;
    /* Shut the TCP connection down now, so nothing more (no close frame) can
     * be written, then let lws reap the wsi at its next service. */
    lws_sockfd_type fd = lws_get_socket_fd(c->wsi);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

bool fg_client_conn_is_open(const fg_client_conn_t *c)
{
    return c->state == CONN_OPEN;
}

bool fg_client_conn_is_closed(const fg_client_conn_t *c)
{
    return c->state == CONN_CLOSED;
}

size_t fg_client_conn_pending(const fg_client_conn_t *c)
{
    return c->n_out;
}

void fg_client_conn_free(fg_client_conn_t *c)
{
    if (!c)
        return;
    c->notified = true; /* no on_close from here on */
    if (c->loop) {
        if (c->state != CONN_CLOSED) {
            struct lws *wsi = c->wsi;
            fg_client_conn_drop(c);
            if (wsi)
                lws_set_opaque_user_data(wsi, NULL);
            c->wsi = NULL;
            c->state = CONN_CLOSED;
        }
        if (c->notify_queued)
            notify_unlink(c);
        fg_client_loop_t *loop = c->loop;
        if (c->all_prev)
            c->all_prev->all_next = c->all_next;
        else if (loop->all == c)
            loop->all = c->all_next;
        if (c->all_next)
            c->all_next->all_prev = c->all_prev;
    }
    out_queue_clear(c);
    free(c->rx);
    free(c->auth);
    free(c);
}
