/* conn.c: one WebSocket connection: assembling client messages, the
 * per-connection limits, handing client events to the session layer
 * (session_cmd.h) as the connection's sink, and writing server events (one
 * lws_write per writable callback). Service thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/bytes.h"
#include "gateway/gateway_internal.h"
#include "gateway/log.h"
#include "gateway/openai_sink.h"

/* Seconds a connection closed for its output limit has to take the close
 * frame before it is dropped without one (it may not read at all). */
#define LIMIT_CLOSE_GRACE_S 5

void gw_conn_request_write(gw_conn *c)
{
    lws_callback_on_writable(c->wsi);
}

void gw_conn_push_text(gw_conn *c, const char *text, size_t len)
{
    if (c->closing && c->close_code == FG_PROTO_CLOSE_POLICY)
        return; /* closed for not reading: nothing more is queued for it */
    if (!gw_ring_push(&c->own, 0, text, len)) {
        fg_log(FG_LOG_ERROR, "event_dropped", "\"reason\":\"out_of_memory\"");
        return;
    }
    gw_conn_request_write(c);
    gw_conn_output_changed(c);
}

void gw_conn_push_own(gw_conn *c)
{
    fg_gateway_t *gw = c->sink.gw;
    gw_conn_push_text(c, fg_proto_buf_text(&gw->scratch), gw->scratch.len);
}

/* Bytes of events queued for the client and not yet handed to lws: the
 * connection's own, its session's unsent ones and the delta text not yet an event. */
static size_t unsent_bytes(const gw_conn *c)
{
    const gw_session *s = c->sink.session;
    return c->own.bytes + (s ? s->unsent_bytes + s->pending_len : 0);
}

void gw_conn_rx_update(gw_conn *c)
{
    const gw_session *s = c->sink.session;
    /* a client whose events pile up is not read either: its requests would queue more */
    bool pause = c->over_soft || (s && (s->output_paused || s->quota_pending || s->forks || s->cutting)) ||
                 c->sink.resume_wait || c->sink.fork_wait || c->sink.dir_wait ||
                 (c->closing && c->close_code == FG_PROTO_CLOSE_POLICY);
    if (c->rx_paused != pause) {
        c->rx_paused = pause;
        lws_rx_flow_control(c->wsi, pause ? 0 : 1);
    }
}

/* The client does not read: it is closed with 1008. Its queued events go, a
 * response in progress is cancelled (its KV and quota reservation released
 * by the engine's response.done), and the session is detached, resumable with
 * what its resume buffer keeps. */
static void close_for_output_limit(gw_conn *c, const char *limit)
{
    fg_gateway_t *gw = c->sink.gw;
    gw_session *s = c->sink.session;
    const gw_tenant *t = gw_tenant_at(gw, c->sink.tenant);
    fg_log_at(FG_LOG_WARN, "slow_client_closed", t ? t->rec.id : NULL, s ? s->id : NULL,
              "\"limit\":\"%s\",\"unsent_bytes\":%zu", limit, unsent_bytes(c));
    gw->metrics.output_limit_closes++;
    c->closing = true;
    c->close_code = FG_PROTO_CLOSE_POLICY;
    lws_sul_cancel(&c->limit_timer);
    if (s) {
        if (s->responding) {
            s->cancel_reason = "slow_client";
            gw_session_cancel(s); /* its response.done (cancelled) goes to the resume buffer */
        }
        gw_session_detach(s);
    }
    gw_ring_free(&c->own);
    gw_conn_rx_update(c);
    gw_conn_request_write(c); /* the close frame, once the socket takes it */
    lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LIMIT_CLOSE_GRACE_S);
}

static void on_limit_timer(lws_sorted_usec_list_t *sul)
{
    gw_conn *c = lws_container_of(sul, gw_conn, limit_timer);
    if (c->closing)
        return;
    close_for_output_limit(c, c->past_hard ? "hard" : "soft");
}

void gw_conn_output_changed(gw_conn *c)
{
    const fg_config_sessions *cfg = &c->sink.gw->cfg->sessions;
    if (c->past_hard || (c->closing && c->close_code == FG_PROTO_CLOSE_POLICY))
        return; /* its close is scheduled, or under way */
    const size_t queued = unsent_bytes(c), soft = (size_t)cfg->output_buffer_bytes;
    if (queued > (size_t)cfg->output_buffer_hard_bytes) {
        /* at once, but out of this call: its caller may still use the session */
        c->past_hard = c->over_soft = true;
        lws_sul_schedule(lws_get_context(c->wsi), 0, &c->limit_timer, on_limit_timer, 1);
    } else {
        /* above the soft limit until the client has read half of it: not read, and timed */
        const bool over = c->over_soft ? queued * 2 > soft : queued > soft;
        if (over && !c->over_soft)
            lws_sul_schedule(lws_get_context(c->wsi), 0, &c->limit_timer, on_limit_timer,
                             (lws_usec_t)cfg->output_buffer_soft_s * LWS_US_PER_SEC);
        else if (!over && c->over_soft)
            lws_sul_cancel(&c->limit_timer);
        c->over_soft = over;
    }
    gw_conn_rx_update(c);
}

/* The connection's own queue (sequence number 0, or a closed session's last events). */
static void sink_push(gw_sink *k, uint64_t seq, const char *json, size_t len)
{
    gw_conn *c = lws_container_of(k, gw_conn, sink);
    if (c->closing && c->close_code == FG_PROTO_CLOSE_POLICY)
        return; /* closed for not reading: nothing more is queued for it */
    if (!gw_ring_push(&c->own, seq, json, len))
        fg_log(FG_LOG_ERROR, "event_dropped", "\"reason\":\"out_of_memory\"");
}

static void sink_request_write(gw_sink *k)
{
    gw_conn_request_write(lws_container_of(k, gw_conn, sink));
}

static void sink_output_changed(gw_sink *k)
{
    gw_conn_output_changed(lws_container_of(k, gw_conn, sink));
}

static void sink_rx_update(gw_sink *k)
{
    gw_conn_rx_update(lws_container_of(k, gw_conn, sink));
}

const gw_sink_ops gw_conn_sink_ops = {sink_push, sink_request_write, sink_output_changed, sink_rx_update};

static void fail(gw_conn *c, const fg_client_event *ev, fg_proto_code code, const char *param, const char *fmt,
                 const char *detail)
{
    fg_proto_error err;
    fg_proto_error_set(&err, code, param, ev && ev->has_event_id ? ev->event_id.ptr : NULL, fmt, detail);
    gw_sink_error(&c->sink, &err, 0);
}

void gw_conn_on_open(gw_conn *c, const char *session_event)
{
    fg_gateway_t *gw = c->sink.gw;
    c->bucket = (double)gw->cfg->limits.message_burst;
    c->bucket_time = fg_clock_mono_s();
    c->all_next = gw->conns;
    if (gw->conns)
        gw->conns->all_prev = c;
    gw->conns = c;
    gw->n_conns++;
    gw->metrics.connections_opened++;
    if (c->sink.ga) { /* OpenAI's flow: the session exists at once, session.created is the first event */
        fg_client_event ev = {.type = FG_CLIENT_SESSION_CREATE};
        fg_proto_error err;
        /* a client secret's settings, checked when it was minted: a session.update's fields */
        if (session_event && fg_proto_parse(session_event, strlen(session_event), &gw->limits, &ev, &err) != FG_OK)
            ev = (fg_client_event){.type = FG_CLIENT_SESSION_CREATE}; /* cannot happen: then without them */
        ev.type = FG_CLIENT_SESSION_CREATE;
        gw_cmd_dispatch(&c->sink, &ev);
        fg_client_event_free(&ev);
    }
}

void gw_conn_on_close(gw_conn *c)
{
    fg_gateway_t *gw = c->sink.gw;
    lws_sul_cancel(&c->limit_timer);
    gw_cmd_sink_gone(&c->sink);
    gw_cluster_sink_gone(&c->sink); /* a resume waiting on the directory goes on without it */
    if (c->sink.session)
        gw_session_detach(c->sink.session); /* the session outlives the socket */
    if (c->rws)
        gw_rws_on_close(c);
    free(c->rx);
    gw_ring_free(&c->own);
    if (c->all_prev)
        c->all_prev->all_next = c->all_next;
    else if (gw->conns == c)
        gw->conns = c->all_next;
    if (c->all_next)
        c->all_next->all_prev = c->all_prev;
    gw->n_conns--;
}

/* ---- settings ---- */

/* The client's sampling fields over settings: a session's (session.create,
 * update) or a copy of them for one response (response.create). */
/* Token bucket: messages_per_second sustained, message_burst at once. */
static bool rate_ok(gw_conn *c)
{
    const fg_config *cfg = c->sink.gw->cfg;
    double now = fg_clock_mono_s();
    c->bucket += (now - c->bucket_time) * cfg->limits.messages_per_second;
    if (c->bucket > (double)cfg->limits.message_burst)
        c->bucket = (double)cfg->limits.message_burst;
    c->bucket_time = now;
    if (c->bucket >= 1.0) {
        c->bucket -= 1.0;
        return true;
    }
    if (now - c->last_rate_error >= 1.0) { /* at most one such error per second */
        c->last_rate_error = now;
        fg_proto_error err;
        fg_proto_error_set(&err, FG_PROTO_RATE_LIMITED, NULL, NULL, "more than %g messages per second",
                           cfg->limits.messages_per_second);
        uint32_t retry = (uint32_t)(1.0 / cfg->limits.messages_per_second + 0.999);
        gw_sink_error(&c->sink, &err, retry ? retry : 1);
    }
    return false;
}

/* A whole message's buffer, once handled: a big one is not kept per idle connection. */
static void trim_rx(gw_conn *c)
{
    if (c->rx_cap > 16384) {
        free(c->rx);
        c->rx = NULL;
        c->rx_cap = 0;
    }
}

void gw_conn_on_receive(gw_conn *c, const void *in, size_t len)
{
    fg_gateway_t *gw = c->sink.gw;
    if (c->closing && c->close_code == FG_PROTO_CLOSE_POLICY)
        return; /* closed for not reading: what it still sends is not answered */
    if (lws_is_first_fragment(c->wsi)) {
        c->rx_len = 0;
        c->rx_too_big = false;
        c->rx_binary = lws_frame_is_binary(c->wsi);
    }
    if (!c->rx_too_big && !c->rx_binary) {
        if (c->rx_len + len > gw->limits.max_message_bytes) {
            c->rx_too_big = true; /* the rest of this message is read and dropped */
        } else if (!fg_bytes_append(&c->rx, &c->rx_len, &c->rx_cap, in, len)) {
            c->rx_too_big = true;
        }
    }
    if (!lws_is_final_fragment(c->wsi) || lws_remaining_packet_payload(c->wsi) > 0)
        return;
    /* A whole message. */
    if (!rate_ok(c))
        return;
    if (c->rx_binary)
        return fail(c, NULL, FG_PROTO_BINARY_NOT_SUPPORTED, NULL, "%s", "binary messages are not supported");
    if (c->rx_too_big) {
        char msg[64];
        snprintf(msg, sizeof msg, "%zu bytes", gw->limits.max_message_bytes);
        return fail(c, NULL, FG_PROTO_FRAME_TOO_LARGE, NULL, "messages are limited to %s", msg);
    }
    if (gw->draining)
        return fail(c, NULL, FG_PROTO_SHUTTING_DOWN, NULL, "%s", "the server is shutting down");
    if (c->rws) {
        gw_rws_on_message(c, c->rx, c->rx_len);
        trim_rx(c);
        return;
    }
    fg_client_event ev;
    fg_proto_error err;
    fg_err e = fg_proto_parse(c->rx, c->rx_len, &gw->limits, &ev, &err);
    trim_rx(c);
    if (e != FG_OK) {
        gw_sink_error(&c->sink, &err, 0);
        return;
    }
    gw_cmd_dispatch(&c->sink, &ev);
    fg_client_event_free(&ev);
}

/* ---- writing ---- */

static int write_event(gw_conn *c, const gw_event *e)
{
    int n = lws_write(c->wsi, (unsigned char *)e->buf + LWS_PRE, e->len, LWS_WRITE_TEXT);
    return n < (int)e->len ? -1 : 0;
}

int gw_conn_on_writable(gw_conn *c)
{
    fg_gateway_t *gw = c->sink.gw;
    if (c->own.count) {
        int rc = write_event(c, gw_ring_at(&c->own, 0));
        gw_ring_drop_oldest(&c->own);
        if (rc)
            return -1;
        gw_conn_request_write(c);
        gw_conn_output_changed(c);
        if (c->rws_call)
            gw_oa_call_wake(c->rws_call); /* a response that waited for the client to read goes on */
        return 0;
    }
    gw_session *s = c->sink.session;
    if (s) {
        gw_session_flush_delta(s); /* every token since the last write, in one frame */
        for (uint32_t i = 0; i < s->ring.count; i++) {
            const gw_event *e = gw_ring_at(&s->ring, i);
            if (e->seq <= s->sent_seq)
                continue;
            if (write_event(c, e))
                return -1;
            gw_session_sent(s, e);
            if (s->output_paused && s->unsent_bytes * 2 <= (size_t)gw->cfg->sessions.output_buffer_bytes &&
                s->unsent_events * 4 <= (uint32_t)gw->cfg->sessions.resume_buffer_events) {
                s->output_paused = false; /* the client caught up: let the engine go on */
                gw_session_drain_engine(s);
            }
            gw_conn_output_changed(c);
            if (s->unsent_events || s->pending_len || c->closing)
                gw_conn_request_write(c); /* more to write, or the close frame */
            return 0;
        }
    }
    if (c->closing) {
        lws_close_reason(c->wsi, (enum lws_close_status)c->close_code, NULL, 0);
        return -1;
    }
    return 0;
}
