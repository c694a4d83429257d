/* server.c: the libwebsockets context, the protocol callback, the HTTP routes,
 * the service loop, the idle sweep and the graceful drain.
 *
 * Threads: everything here runs on the service thread, except
 * fg_gateway_wakeup and fg_gateway_request_stop, which only call
 * lws_cancel_service() (documented as safe from other threads). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/client_secrets.h"
#include "gateway/dashboard.h"
#include "gateway/gw_disk.h"
#include "gateway/gateway_internal.h"
#include "gateway/http_internal.h"
#include "gateway/log.h"
#include "gateway/openai_http.h"
#include "gateway/status.h"
#include "gateway/session_meta.h"

#define SESSION_BUCKETS 65536
#define SWEEP_US (1 * LWS_US_PER_SEC)
#define DRAIN_SWEEP_US (100 * LWS_US_PER_MS)

/* Per-connection storage: WebSocket state, or an HTTP response being written. */
typedef struct gw_pss {
    gw_conn conn;
    int tenant;             /* from the handshake, before ESTABLISHED */
    bool ga;                /* the OpenAI GA flow: a session at once (see subprotocol_mode) */
    bool beta;              /* OpenAI-Beta: realtime=v1: the beta event names */
    char model[FG_PROTO_MAX_ID_BYTES + 1]; /* the handshake's ?model=, or "" */
    char secret[GW_SECRET_LEN + 1]; /* the client secret it authenticated with, or "": its session settings */
    bool rws;               /* upgraded on /v1/responses: the Responses WebSocket mode (openai_ws.c) */
    gw_http_req *http;      /* the connection's HTTP request (owned: freed at CLOSED_HTTP) */
} gw_pss;

static fg_gateway_t *gateway_of(struct lws *wsi)
{
    return lws_context_user(lws_get_context(wsi));
}

/* A Realtime beta client (OpenAI-Beta: realtime=v1, as the beta SDKs send it) gets
 * the beta event names on a GA connection. */
static bool beta_client(struct lws *wsi)
{
    char v[128];
    int n = lws_hdr_custom_copy(wsi, v, sizeof v, "openai-beta:", 12);
    return n > 0 && strstr(v, "realtime=v1") != NULL;
}

/* ---- the handshake ---- */

/* ---- subprotocols ---- */

#define INSECURE_KEY_PREFIX "openai-insecure-api-key."

/* Calls fn on each name of the offered Sec-WebSocket-Protocol list (split at
 * commas, spaces trimmed) until it returns true; false when none did. */
static bool each_offer(struct lws *wsi, bool (*fn)(const char *name, size_t n, void *u), void *u)
{
    char list[1024];
    int len = lws_hdr_copy(wsi, list, sizeof list, WSI_TOKEN_PROTOCOL);
    for (int i = 0; len > 0 && i < len;) {
        while (i < len && (list[i] == ' ' || list[i] == ','))
            i++;
        int j = i;
        while (j < len && list[j] != ',')
            j++;
        int k = j;
        while (k > i && list[k - 1] == ' ')
            k--;
        if (k > i && fn(list + i, (size_t)(k - i), u))
            return true;
        i = j;
    }
    return false;
}

static bool is_known(const char *name, size_t n, void *u)
{
    (void)u;
    return (n == strlen(FG_PROTO_SUBPROTOCOL) && !memcmp(name, FG_PROTO_SUBPROTOCOL, n)) ||
           (n == strlen(FG_PROTO_GA_SUBPROTOCOL) && !memcmp(name, FG_PROTO_GA_SUBPROTOCOL, n));
}

/* Browsers cannot set headers: OpenAI's browser clients put the key in the list. */
static bool insecure_key(const char *name, size_t n, void *u)
{
    const size_t p = strlen(INSECURE_KEY_PREFIX);
    if (n <= p || memcmp(name, INSECURE_KEY_PREFIX, p) != 0 || n - p >= 300)
        return false;
    snprintf(u, 300, "%.*s", (int)(n - p), name + p);
    return true;
}

/* An offer that names no subprotocol we speak is answered 400 with what we
 * speak (lws would close the TCP connection without an HTTP answer). */
static bool offer_refused(struct lws *wsi)
{
    return lws_hdr_total_length(wsi, WSI_TOKEN_PROTOCOL) > 0 && !each_offer(wsi, is_known, NULL);
}

/* The OpenAI GA flow (a session at connect, session.created first) for the
 * "realtime" subprotocol, and for a connection that offers none but names a
 * model in its query, as OpenAI's SDKs do; flashgate.v1 offered, or neither,
 * keeps v1's explicit session.create / session.resume. */
static bool subprotocol_mode_ga(struct lws *wsi, char *model, size_t cap)
{
    char buf[FG_PROTO_MAX_ID_BYTES + 8];
    const char *m = lws_get_urlarg_by_name(wsi, "model=", buf, (int)sizeof buf);
    snprintf(model, cap, "%s", m && fg_proto_utf8_valid(m, strlen(m)) ? m : "");
    const struct lws_protocols *p = lws_get_protocol(wsi);
    if (p && p->name && !strcmp(p->name, FG_PROTO_GA_SUBPROTOCOL))
        return true;
    return lws_hdr_total_length(wsi, WSI_TOKEN_PROTOCOL) <= 0 && m != NULL;
}

/* ---- the handshake ---- */

/* The tenant of a credential: a client secret (client_secrets.h: live, and
 * its minting key still valid; *secret gets its value) or, where allowed, an
 * API key. -1: unknown, expired or revoked. */
static int tenant_of(fg_gateway_t *gw, const char *key, bool api_key_ok, char *secret)
{
    if (!strncmp(key, GW_SECRET_PREFIX, strlen(GW_SECRET_PREFIX))) {
        const gw_secret_use *u = gw_secrets_find(gw->secrets, key, fg_clock_mono_s());
        const int t = u ? gw_tenant_by_key(gw, u->api_key) : -1;
        if (t >= 0 && t == u->tenant) {
            snprintf(secret, GW_SECRET_LEN + 1, "%s", key);
            return t;
        }
        return -1;
    }
    return api_key_ok ? gw_tenant_by_key(gw, key) : -1;
}

/* Checks path, drain state and credential (the Authorization header: an API
 * key or a client secret; else the browser clients' subprotocol entry: a
 * client secret, or an API key with auth.api_key_in_subprotocol); fills
 * *tenant, secret and *rws (the Responses WebSocket mode on /v1/responses,
 * which takes an API key in the Authorization header only, as OpenAI's).
 * Returns the HTTP status to refuse with, or 0. */
static unsigned check_upgrade(struct lws *wsi, fg_gateway_t *gw, int *tenant, char *secret, bool *rws)
{
    char uri[256] = "", auth[512] = "", key[300] = "";
    if (lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) <= 0)
        return 404;
    *rws = !strcmp(uri, GW_RESPONSES_WS_PATH);
    if (!*rws && strcmp(uri, FG_PROTO_PATH) != 0)
        return 404;
    if (gw->draining || !gw->engine)
        return 503;
    bool in_list = false;
    if (lws_hdr_copy(wsi, auth, sizeof auth, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 && !strncmp(auth, "Bearer ", 7))
        snprintf(key, sizeof key, "%.299s", auth + 7);
    else if (!(in_list = each_offer(wsi, insecure_key, key)))
        return 401;
    if (*rws && (in_list || !strncmp(key, GW_SECRET_PREFIX, strlen(GW_SECRET_PREFIX))))
        return 401;
    int t = tenant_of(gw, key, !in_list || gw->cfg->auth.api_key_in_subprotocol, secret);
    if (t < 0)
        return 401;
    if (gw->n_conns >= (size_t)gw->cfg->server.max_connections)
        return 503;
    *tenant = t;
    return 0;
}

/* Answers a refused upgrade with an HTTP/1.1 status and a JSON body
 * (lws_return_http_status writes an HTTP/1.0 status line that some WebSocket
 * clients reject instead of reporting the status). */
static void refuse_upgrade(struct lws *wsi, unsigned status)
{
    const char *reason = status == 401   ? "Unauthorized"
                         : status == 404 ? "Not Found"
                         : status == 400 ? "Bad Request"
                                         : "Service Unavailable";
    const char *code = status == 401   ? "unauthorized"
                       : status == 404 ? "not_found"
                       : status == 400 ? "unsupported_subprotocol"
                                       : "unavailable";
    const char *msg = status == 401   ? "missing or unknown API key (Authorization: Bearer KEY)"
                      : status == 404 ? "the WebSocket endpoints are " FG_PROTO_PATH " and " GW_RESPONSES_WS_PATH
                      : status == 400 ? "none of the offered subprotocols is supported"
                                      : "the server is draining or at its connection limit";
    char body[384];
    /* OpenAI's error shape (type, code, message, param), and what we speak */
    int blen = snprintf(body, sizeof body,
                        "{\"error\":{\"type\":\"%s\",\"code\":\"%s\",\"message\":\"%s\",\"param\":%s}%s}",
                        status == 503 ? "server_error" : "invalid_request_error", code, msg,
                        status == 400 ? "\"Sec-WebSocket-Protocol\"" : "null",
                        status == 400 ? ",\"supported\":[\"" FG_PROTO_SUBPROTOCOL "\",\"" FG_PROTO_GA_SUBPROTOCOL "\"]"
                                      : "");
    unsigned char buf[LWS_PRE + 768];
    char *p = (char *)buf + LWS_PRE;
    int n = snprintf(p, sizeof buf - LWS_PRE,
                     "HTTP/1.1 %u %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s"
                     "connection: close\r\n\r\n%s",
                     status, reason, blen, status == 401 ? "www-authenticate: Bearer\r\n" : "", body);
    if (n > 0 && n < (int)(sizeof buf - LWS_PRE))
        lws_write(wsi, (unsigned char *)p, (size_t)n, LWS_WRITE_HTTP_HEADERS);
}

/* ---- draining ---- */

static void drain_step(fg_gateway_t *gw)
{
    for (gw_conn *c = gw->conns; c; c = c->all_next) {
        if (c->closing || (c->sink.session && c->sink.session->responding) || c->rws_call)
            continue; /* its response.done comes first */
        fg_proto_error err;
        fg_proto_error_set(&err, FG_PROTO_SHUTTING_DOWN, NULL, NULL, "%s", "the server is shutting down");
        gw_session *s = c->sink.session;
        uint64_t seq = s ? gw_session_take_seq(s) : 0;
        if (fg_proto_write_error(&gw->scratch, seq, s ? ++s->evt_counter : ++c->sink.evt_counter, &err, 0) == FG_OK) {
            if (s)
                gw_session_push(s, seq);
            else
                gw_conn_push_own(c);
        }
        c->closing = true;
        c->close_code = FG_PROTO_CLOSE_GOING_AWAY;
        gw_conn_request_write(c);
    }
    if (gw->n_conns == 0 || fg_clock_mono_s() > gw->drain_deadline) {
        if (gw->n_conns)
            fg_log(FG_LOG_WARN, "drain_timeout", "\"connections\":%zu", gw->n_conns);
        gw->done = true;
        lws_cancel_service(gw->ctx);
    }
}

static void begin_drain(fg_gateway_t *gw)
{
    if (gw->draining)
        return;
    gw->draining = true;
    gw->drain_deadline = fg_clock_mono_s() + (double)gw->cfg->server.drain_timeout_s;
    int cancelled = 0;
    for (gw_session *s = gw->sessions; s; s = s->all_next)
        if (s->responding) {
            s->cancel_reason = "server_shutdown";
            gw_session_cancel(s); /* each ends with response.done (cancelled) */
            cancelled++;
        }
    fg_log(FG_LOG_INFO, "draining", "\"connections\":%zu,\"responses_cancelled\":%d", gw->n_conns, cancelled);
    drain_step(gw);
}

static void sweep_cb(lws_sorted_usec_list_t *sul)
{
    fg_gateway_t *gw = lws_container_of(sul, fg_gateway_t, sweep);
    gw_sessions_sweep(gw);
    gw_cluster_sweep(gw);
    gw_secrets_sweep(gw->secrets, fg_clock_mono_s());
    if (!gw->draining) /* once a second: the dashboard's history (status.h) */
        gw_status_sample(gw);
    gw_status_publish(gw); /* draining too: the cluster view shows it */
    if (gw->draining)
        drain_step(gw);
    lws_sul_schedule(gw->ctx, 0, &gw->sweep, sweep_cb, gw->draining ? DRAIN_SWEEP_US : SWEEP_US);
}

/* The engine has events, or a stop was requested. */
static void on_wakeup(fg_gateway_t *gw)
{
    if (atomic_load(&gw->stop_requested))
        begin_drain(gw);
    if (gw->quota)
        fg_quota_poll(gw->quota); /* quota answers continue session.create and response.create */
    if (gw->disk)
        gw_disk_poll(gw->disk); /* restored sessions continue their session.resume */
    if (!gw->engine)
        return;
    void *ready[256];
    int n;
    while ((n = fg_engine_take_ready(gw->engine, ready, 256)) > 0)
        for (int i = 0; i < n; i++)
            gw_session_drain_engine(ready[i]);
    if (gw->draining)
        drain_step(gw);
}

/* ---- the protocol callback ---- */

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
    gw_pss *pss = user;
    fg_gateway_t *gw;
    switch (reason) {
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
        if (offer_refused(wsi)) {
            gateway_of(wsi)->metrics.connections_refused++;
            refuse_upgrade(wsi, 400);
            return -1;
        }
        return 0;
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
        gw = gateway_of(wsi);
        int tenant = -1;
        char secret[GW_SECRET_LEN + 1] = "";
        bool rws = false;
        unsigned status = check_upgrade(wsi, gw, &tenant, secret, &rws);
        if (status) {
            gw->metrics.connections_refused++;
            refuse_upgrade(wsi, status);
            return -1;
        }
        if (!pss)
            return -1;
        pss->tenant = tenant;
        memcpy(pss->secret, secret, sizeof secret);
        pss->rws = rws;
        pss->ga = !rws && subprotocol_mode_ga(wsi, pss->model, sizeof pss->model);
        pss->beta = beta_client(wsi);
        return 0;
    }
    case LWS_CALLBACK_ESTABLISHED:
        gw = gateway_of(wsi);
        memset(&pss->conn, 0, sizeof pss->conn);
        pss->conn.sink.ops = &gw_conn_sink_ops;
        pss->conn.sink.gw = gw;
        pss->conn.wsi = wsi;
        pss->conn.sink.tenant = pss->tenant;
        pss->conn.sink.ga = pss->ga;
        pss->conn.sink.beta = pss->beta;
        pss->conn.rws = pss->rws;
        snprintf(pss->conn.sink.model, sizeof pss->conn.sink.model, "%s", pss->model);
        /* lws 4.1.6 drops a connection for some framing violations (a control
         * frame longer than 125 bytes) without a reason, and so without a close
         * frame: with this one preset it sends 1002. Every close of ours sets
         * its own code; a peer's close is answered with its own payload. */
        lws_close_reason(wsi, LWS_CLOSE_STATUS_PROTOCOL_ERR, NULL, 0);
        {
            /* a client secret minted with session settings: the session at connect starts with them */
            const gw_secret_use *u = pss->secret[0] ? gw_secrets_find(gw->secrets, pss->secret, fg_clock_mono_s()) : NULL;
            gw_conn_on_open(&pss->conn, u ? u->session_event : NULL);
        }
        return 0;
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        /* A close payload is empty or starts with a 2-byte code; lws echoes a
         * 1-byte one as it is (RFC 6455 5.5.1): answer it with 1002 instead. */
        if (len == 1) {
            lws_close_reason(wsi, LWS_CLOSE_STATUS_PROTOCOL_ERR, NULL, 0);
            return -1;
        }
        return 0;
    /* A refused handshake gets CLOSED without ESTABLISHED: conn.sink.gw is still NULL. */
    case LWS_CALLBACK_RECEIVE:
        if (pss && pss->conn.sink.gw)
            gw_conn_on_receive(&pss->conn, in, len);
        return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        return pss && pss->conn.sink.gw ? gw_conn_on_writable(&pss->conn) : 0;
    case LWS_CALLBACK_CLOSED:
        if (pss && pss->conn.sink.gw) {
            gw_conn_on_close(&pss->conn);
            pss->conn.sink.gw = NULL;
        }
        return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        gw = gateway_of(wsi);
        if (gw)
            on_wakeup(gw);
        return 0;
    case LWS_CALLBACK_HTTP:
        if (!pss || pss->http) /* one request per connection (http_internal.h) */
            return -1;
        pss->http = gw_http_begin(gateway_of(wsi), wsi, in, len);
        return pss->http ? 0 : -1;
    case LWS_CALLBACK_HTTP_BODY:
        if (pss && pss->http)
            gw_http_body_chunk(pss->http, in, len);
        return 0;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
        return pss && pss->http ? gw_http_body_done(pss->http) : 0;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        return pss && pss->http ? gw_http_writable(pss->http) : 0;
    case LWS_CALLBACK_CLOSED_HTTP:
        if (pss && pss->http) { /* NULL pss: a connection that never finished a request (closed at shutdown) */
            gw_http_closed(pss->http);
            pss->http = NULL;
        }
        return 0;
    default:
        return 0;
    }
}

static const struct lws_protocols protocols[] = {
    /* First, so that a client offering no subprotocol gets v1; also serves plain HTTP. */
    {FG_PROTO_SUBPROTOCOL, callback, sizeof(gw_pss), 4096, 0, NULL, 0}, /* rx per read; messages are reassembled */
    {FG_PROTO_GA_SUBPROTOCOL, callback, sizeof(gw_pss), 4096, 0, NULL, 0}, /* OpenAI's browser clients */
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void lws_log_bridge(int level, const char *line)
{
    char msg[600];
    size_t n = strlen(line);
    char trimmed[512];
    snprintf(trimmed, sizeof trimmed, "%.*s", (int)(n && line[n - 1] == '\n' ? n - 1 : n), line);
    fg_log(level == LLL_ERR ? FG_LOG_ERROR : FG_LOG_WARN, "lws", "\"message\":%s",
           fg_log_str(msg, sizeof msg, trimmed));
}

/* ---- public ---- */

void fg_gateway_engine_options(const fg_config *cfg, fg_gateway_t *gw, fg_engine_options *o)
{
    static const int kv_formats[] = {-1, FG_KV_F32, FG_KV_F16, FG_KV_INT8, FG_KV_FP8, FG_KV_FP4};
    fg_engine_options_default(o);
    o->model_path = cfg->model.path;
    o->kv_format = kv_formats[cfg->model.kv_format];
    o->kv_budget_bytes = (size_t)cfg->model.kv_budget_bytes;
    o->max_batch_tokens = (int)cfg->model.max_batch_tokens;
    o->n_threads = (int)cfg->model.threads;
    o->backend = cfg->model.backend == FG_CONFIG_BACKEND_CUDA ? FG_ENGINE_BACKEND_CUDA : FG_ENGINE_BACKEND_CPU;
    o->max_context = (int)cfg->model.max_context;
    o->prefill_chunk = (int)cfg->model.prefill_chunk;
    o->prefill_alone_tokens = (int)cfg->model.prefill_alone_tokens;
    o->speculative = cfg->model.speculative;
    o->spec_drafts = (int)cfg->model.speculative_drafts;
    o->ep_ranks = (int)cfg->topology.ranks;
    o->ep_experts_per_rank = (int)cfg->topology.experts_per_rank;
    o->ep_redundant = (int)cfg->topology.redundant_experts;
    o->ep_placement = cfg->topology.placement == FG_CONFIG_PLACEMENT_STRIDED ? 1 : 0;
    o->ep_transport = cfg->topology.transport == FG_CONFIG_TRANSPORT_NCCL ? 1 : 0;
    o->ep_ranks_per_node = (int)cfg->topology.ranks_per_node;
    o->ep_node = (int)cfg->topology.node;
    o->ep_bootstrap_redis = cfg->redis.address; /* several nodes: the config check asks for a shared one */
    o->ep_bootstrap_prefix = cfg->topology.bootstrap;
    o->ep_bootstrap_timeout_ms = (int)cfg->topology.bootstrap_timeout_ms;
    o->ep_recv_capacity_rows = cfg->topology.recv_capacity_rows;
    o->ep_hot_experts = cfg->topology.hot_experts;
    o->serve = true;
    o->wakeup = fg_gateway_wakeup;
    o->wakeup_user = gw;
    /* Session files under <persistence.dir>/tenants/<tenant>/<id>.fgs, apart from the
     * Redis directories and quota journals that share persistence.dir. */
    snprintf(gw->persist_dir, sizeof gw->persist_dir, "%s/tenants", cfg->persistence.dir);
    o->persist_dir = gw->persist_dir;
    o->idle_spill_seconds = (double)cfg->persistence.idle_spill_s;
    o->disk_budget_bytes = (uint64_t)cfg->persistence.disk_budget_bytes;
    /* A file untouched for the idle timeout belongs to a session that would have
     * expired (and lost its file) had this server been running: not resumable. */
    o->session_file_max_age_seconds = (double)cfg->sessions.idle_timeout_s;
    /* Instances sharing persistence.dir write a session's file only while they hold its lease. */
    o->persist_fence = gw_cluster_fence;
    o->persist_fence_user = gw;
}

fg_err fg_gateway_create(const fg_config *cfg, fg_gateway_t **out, fg_diag *diag)
{
    *out = NULL;
    fg_gateway_t *gw = calloc(1, sizeof *gw);
    if (!gw)
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory");
    gw->cfg = cfg;
    gw->table_size = SESSION_BUCKETS;
    gw->table = calloc(gw->table_size, sizeof *gw->table);
    gw->meta_buf = malloc(FG_SESSION_META_MAX_BYTES);
    gw->secrets = gw_secrets_new();
    if (!gw->table || !gw->meta_buf || !gw->secrets) {
        fg_gateway_destroy(gw);
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory");
    }
    fg_proto_limits_default(&gw->limits);
    gw->limits.max_message_bytes = (size_t)cfg->limits.max_frame_bytes;
    gw->limits.max_instructions_bytes = (size_t)cfg->sessions.max_instructions_bytes;
    fg_proto_buf_init(&gw->scratch, LWS_PRE);
    gw_openai_model_id_init(gw);
    gw->status = gw_status_create();
    gw->dashboard = gw_dashboard_load();
    atomic_init(&gw->stop_requested, false);

    lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_bridge);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = (int)cfg->server.port;
    info.iface = cfg->server.host;
    info.protocols = protocols;
    info.user = gw;
    /* No LWS_SERVER_OPTION_VALIDATE_UTF8: invalid UTF-8 gets an error event, not a close.
     * lws binds every interface for an IPv4 literal when IPv6 is on: keep it to the address asked for. */
    struct in_addr v4;
    if (cfg->server.host && inet_pton(AF_INET, cfg->server.host, &v4) == 1)
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
    info.timeout_secs = 30;
    info.timeout_secs_ah_idle = GW_HTTP_HEADER_TIMEOUT_S;
    info.max_http_header_data = GW_HTTP_HEADER_SPACE;
    info.token_limits = gw_http_token_limits();
    if (cfg->server.tls_cert_file && cfg->server.tls_cert_file[0]) {
        /* https:// and wss:// on the same port; plain ones too unless tls_allow_plain is off */
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
        info.ssl_cert_filepath = cfg->server.tls_cert_file;
        info.ssl_private_key_filepath = cfg->server.tls_key_file;
        /* HTTP/1.1 only: the HTTP replies and refusals are written as HTTP/1.1 (http_internal.h) */
        info.alpn = "http/1.1";
        if (cfg->server.tls_allow_plain)
            info.options |= LWS_SERVER_OPTION_ALLOW_NON_SSL_ON_SSL_PORT | LWS_SERVER_OPTION_ALLOW_HTTP_ON_HTTPS_LISTENER;
    }
    info.ka_time = 60; /* TCP keepalive finds dead peers of detached sessions */
    info.ka_probes = 3;
    info.ka_interval = 10;
    gw->ctx = lws_create_context(&info);
    if (!gw->ctx) {
        fg_gateway_destroy(gw);
        return fg_diag_set(diag, FG_ERR_IO, "cannot listen on %s:%lld (address in use or not available%s)",
                           cfg->server.host, (long long)cfg->server.port,
                           cfg->server.tls_cert_file && cfg->server.tls_cert_file[0]
                               ? ", or server.tls_cert_file / tls_key_file cannot be loaded"
                               : "");
    }
    /* session restores (and their saves), forks and cuts run on a worker: the service thread
     * never waits for a file or for the engine's step */
    const char *gate = cfg->debug.restore_gate_file;
    if (!(gw->disk = gw_disk_new(gw->ctx, gate))) {
        fg_gateway_destroy(gw);
        return fg_diag_set(diag, FG_ERR_NOMEM, "cannot start the session-file worker");
    }
    if (gate && gate[0])
        fg_log_at(FG_LOG_WARN, "restore_gate_file", NULL, NULL,
                  "\"note\":\"debug.restore_gate_file is set: session restores, forks and cuts wait for a file; "
                  "for tests only\"");
    gw->vhost = lws_get_vhost_by_name(gw->ctx, "default");
    gw->port = gw->vhost ? lws_get_vhost_listen_port(gw->vhost) : (int)cfg->server.port;
    lws_sul_schedule(gw->ctx, 0, &gw->sweep, sweep_cb, SWEEP_US);
    *out = gw;
    return FG_OK;
}

void fg_gateway_set_engine(fg_gateway_t *gw, fg_engine_t *engine)
{
    fg_engine_info info;
    fg_engine_get_info(engine, &info);
    gw->engine = engine;
    gw->tok = fg_engine_tokenizer(engine);
    gw->n_ctx = info.n_ctx;
    gw->kv_bytes_per_token = info.kv_bytes_per_token;
    /* debug.scripted_output (tests only): each text's ids, markers as their special ids */
    const fg_config_strlist *so = &gw->cfg->debug.scripted_output;
    if (so->count && (gw->scripts = calloc(so->count, sizeof *gw->scripts))) {
        for (size_t i = 0; i < so->count; i++) {
            size_t len = strlen(so->items[i]), n = 0;
            fg_tokenizer_encode(gw->tok, so->items[i], len, false, true, NULL, 0, &n);
            if (n && fg_tokens_reserve(&gw->scripts[i], n) == 0 &&
                fg_tokenizer_encode(gw->tok, so->items[i], len, false, true, gw->scripts[i].v, n, &n) == FG_OK)
                gw->scripts[i].n = n;
        }
        gw->n_scripts = so->count;
        fg_log_at(FG_LOG_WARN, "scripted_output", NULL, NULL,
                  "\"texts\":%zu,\"note\":\"debug.scripted_output is set: responses generate the configured "
                  "text, not the model's; for tests only\"",
                  so->count);
    }
}

void fg_gateway_set_quota(fg_gateway_t *gw, fg_quota_t *quota)
{
    gw->quota = quota;
}

#define REDIS_WATCH_US (200 * LWS_US_PER_MS)

static void redis_watch_cb(lws_sorted_usec_list_t *sul)
{
    fg_gateway_t *gw = lws_container_of(sul, fg_gateway_t, redis_watch);
    fg_redis_local_check(gw->redis_local, fg_clock_mono_s());
    lws_sul_schedule(gw->ctx, 0, &gw->redis_watch, redis_watch_cb, REDIS_WATCH_US);
}

void fg_gateway_set_redis_local(fg_gateway_t *gw, fg_redis_local_t *r)
{
    gw->redis_local = r;
    if (r)
        lws_sul_schedule(gw->ctx, 0, &gw->redis_watch, redis_watch_cb, REDIS_WATCH_US);
}

void fg_gateway_wakeup(void *gateway)
{
    fg_gateway_t *gw = gateway;
    if (gw && gw->ctx)
        lws_cancel_service(gw->ctx);
}

int fg_gateway_port(const fg_gateway_t *gw) { return gw->port; }

fg_err fg_gateway_run(fg_gateway_t *gw)
{
    while (!gw->done)
        if (lws_service(gw->ctx, 0) < 0)
            return FG_ERR_IO;
    return FG_OK;
}

void fg_gateway_request_stop(fg_gateway_t *gw)
{
    atomic_store(&gw->stop_requested, true);
    lws_cancel_service(gw->ctx);
}

fg_err fg_gateway_save_sessions(fg_gateway_t *gw, fg_diag *diag)
{
    if (!gw->engine)
        return FG_OK;
    for (gw_session *s = gw->sessions; s; s = s->all_next)
        gw_session_store_meta(s); /* counters and settings as the drain left them */
    fg_diag d = {{0}};
    fg_err e = fg_engine_save_all(gw->engine, &d);
    if (e == FG_ERR_UNSUPPORTED) {
        /* The shutdown goes on, but the operator must learn which sessions it loses. */
        char m[sizeof d.msg * 2];
        fg_log(FG_LOG_WARN, "sessions_not_saved", "\"reason\":%s", fg_log_str(m, sizeof m, d.msg));
        return FG_OK;
    }
    if (e != FG_OK && diag)
        *diag = d;
    fg_engine_stats st;
    fg_engine_get_stats(gw->engine, &st);
    fg_log(e == FG_OK ? FG_LOG_INFO : FG_LOG_ERROR, "sessions_saved",
           "\"sessions\":%zu,\"saves\":%llu,\"save_errors\":%llu,\"error\":\"%s\"", gw->n_sessions,
           (unsigned long long)st.saves, (unsigned long long)st.save_errors, e == FG_OK ? "" : fg_err_name(e));
    return e;
}

void fg_gateway_close_sessions(fg_gateway_t *gw)
{
    /* first the worker: no restore or save runs on a session freed here or on the
     * engine closed after; the restores it finishes join the table, then go too */
    gw_disk_free(gw->disk);
    gw->disk = NULL;
    while (gw->sessions)
        gw_session_destroy(gw->sessions, true); /* their files stay for the next start */
}

void fg_gateway_destroy(fg_gateway_t *gw)
{
    if (!gw)
        return;
    if (gw->sessions && gw->engine)
        fg_gateway_close_sessions(gw);
    if (gw->ctx)
        lws_context_destroy(gw->ctx); /* closes every connection (their CLOSED callbacks run) */
    gw_disk_free(gw->disk); /* restores still under way end here, their clients gone */
    fg_proto_buf_free(&gw->scratch);
    for (size_t i = 0; i < gw->n_scripts; i++)
        fg_tokens_free(&gw->scripts[i]);
    free(gw->scripts);
    gw_status_destroy(gw->status);
    gw_dashboard_free(gw->dashboard);
    free(gw->table);
    free(gw->meta_buf);
    gw_secrets_free(gw->secrets);
    gw_tenants_free(gw);
    free(gw);
}
