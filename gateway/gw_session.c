/* gw_session.c: the gateway's sessions: the id table, resume buffers, and the
 * translation of engine events into protocol events.
 *
 * Output path: TOKEN events append text to `pending` (through the UTF-8
 * carry); the text becomes one response.output_text.delta event when the
 * connection can take a write (so a slow step rate or a fast client both get
 * one frame per write), when the response ends, or at once when no connection
 * is attached (so the resume buffer holds it). Events stay in the ring after
 * they are written, for replay.
 *
 * Backpressure: when a connection falls behind (unsent bytes above
 * sessions.output_buffer_bytes, or half the ring's event count unsent) the
 * session stops draining the engine, whose bounded queue then pauses the
 * generation; the drain resumes once the client has read half of it. Nothing
 * an attached client was not sent is dropped; a client that does not read at
 * all meets the output limits instead (conn.c: close 1008). The resume buffer
 * keeps, besides the unsent events, the newest sent ones up to its byte and
 * event limits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "config/base/bytes.h"
#include "config/base/hash64.h"
#include "config/base/random.h"
#include "gateway/chat_template.h"
#include "gateway/gateway_internal.h"
#include "gateway/tool_decl.h"
#include "gateway/log.h"

/* ---- the table ---- */

static size_t hash_id(const char *id, size_t len)
{
    return (size_t)fg_fnv1a64(id, len);
}

gw_session *gw_session_find(fg_gateway_t *gw, const char *id, size_t len)
{
    for (gw_session *s = gw->table[hash_id(id, len) % gw->table_size]; s; s = s->hash_next)
        if (strlen(s->id) == len && memcmp(s->id, id, len) == 0)
            return s->doomed ? NULL : s; /* destroyed, waiting only for the worker to let it go */
    return NULL;
}

static void make_id(char *out)
{
    unsigned char r[16];
    while (!fg_random_bytes(r, sizeof r)) {
    }
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "sess_", 5);
    for (int i = 0; i < 16; i++) {
        out[5 + 2 * i] = hex[r[i] >> 4];
        out[6 + 2 * i] = hex[r[i] & 15];
    }
    out[37] = 0;
}

/* The engine's parameters of s: named by its id and tenant (the engine's session file is <tenant>/<id>.fgs). */
static void engine_params(const gw_session *s, fg_session_params *sp)
{
    const gw_tenant *t = gw_tenant_at(s->gw, s->tenant);
    int64_t w = t->rec.limits.weight;
    *sp = (fg_session_params){.tenant = (uint32_t)s->tenant, .weight = w < 1 ? 1 : w > 1000 ? 1000 : (int)w,
                              .user = (void *)s, .name = s->id, .tenant_name = t->rec.id};
}

gw_session *gw_session_prepare(fg_gateway_t *gw, int tenant, const char *id, fg_session_params *sp)
{
    gw_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->gw = gw;
    s->tenant = tenant;
    s->conv_known = true;
    if (id)
        snprintf(s->id, sizeof s->id, "%s", id);
    else
        do
            make_id(s->id);
        while (gw_session_find(gw, s->id, strlen(s->id)));
    engine_params(s, sp);
    return s;
}

void gw_session_adopt(gw_session *s, fg_session_t *es)
{
    fg_gateway_t *gw = s->gw;
    s->es = es;
    s->set.temperature = 1.0;
    s->set.top_p = 1.0;
    s->set.max_output_tokens = (uint32_t)gw->cfg->sessions.default_max_output_tokens;
    s->next_seq = 1;
    s->resp_item = SIZE_MAX;
    s->last_activity = fg_clock_mono_s();
    size_t b = hash_id(s->id, strlen(s->id)) % gw->table_size;
    s->hash_next = gw->table[b];
    gw->table[b] = s;
    s->all_next = gw->sessions;
    if (gw->sessions)
        gw->sessions->all_prev = s;
    gw->sessions = s;
    gw->n_sessions++;
    gw_tenant_at(gw, s->tenant)->sessions++;
}

bool gw_session_forkable(const gw_session *src)
{
    /* Without the token history, or with an instructions change pending, a fork is prefilled again. */
    return !src->rebuild && src->conv_known;
}

gw_session *gw_session_new(fg_gateway_t *gw, int tenant, gw_session *fork_src, fg_err *err, fg_diag *diag)
{
    fg_session_params sp;
    gw_session *s = gw_session_prepare(gw, tenant, NULL, &sp);
    if (!s) {
        *err = fg_diag_set(diag, FG_ERR_NOMEM, "out of memory");
        return NULL;
    }
    fg_session_t *es = NULL;
    fg_err e = fork_src && gw_session_forkable(fork_src) ? fg_session_fork(fork_src->es, &sp, &es, diag)
                                                         : FG_ERR_UNSUPPORTED;
    return gw_session_made(s, es, e, err, diag);
}

gw_session *gw_session_made(gw_session *s, fg_session_t *es, fg_err e, fg_err *err, fg_diag *diag)
{
    /* A fork shares the source's cached pages; its queued input is appended after.
     * Without engine forks (or without a fork) the session starts empty. */
    s->cache_built = e == FG_OK;
    if (e == FG_ERR_UNSUPPORTED) {
        fg_session_params sp;
        engine_params(s, &sp);
        e = fg_session_create(s->gw->engine, &sp, &es);
    }
    if (e != FG_OK) {
        free(s);
        *err = e;
        if (e == FG_ERR_NOMEM || e == FG_ERR_INVALID_ARG || e == FG_ERR_STATE)
            fg_diag_set(diag, e, "engine session: %s", fg_err_describe(e));
        return NULL;
    }
    gw_session_adopt(s, es);
    gw_cluster_session_new(s); /* a restored one holds its lease already (gw_cluster.c asked for it) */
    return s;
}

void gw_session_destroy(gw_session *s, bool keep_file)
{
    fg_gateway_t *gw = s->gw;
    if (s->restoring || s->forks || s->cutting) { /* the worker holds its engine session: freed when it hands it back */
        s->doomed = true;
        s->doomed_keep_file = keep_file;
        if (s->sink)
            gw_session_detach(s);
        return;
    }
    gw_cluster_session_gone(s, keep_file);
    if (s->sink)
        gw_session_detach(s);
    if (s->es && keep_file) /* none after a failed rebuild */
        fg_session_free(s->es);
    else if (s->es)
        fg_session_delete(s->es);
    gw_session **p = &gw->table[hash_id(s->id, strlen(s->id)) % gw->table_size];
    while (*p && *p != s)
        p = &(*p)->hash_next;
    if (*p)
        *p = s->hash_next;
    if (s->all_prev)
        s->all_prev->all_next = s->all_next;
    else
        gw->sessions = s->all_next;
    if (s->all_next)
        s->all_next->all_prev = s->all_prev;
    gw->n_sessions--;
    gw_tenant *t = gw_tenant_at(gw, s->tenant);
    t->sessions--;
    if (gw->quota && s->leased)
        fg_quota_session_close(gw->quota, t->rec.id, s->id);
    if (gw->quota && s->reserved) /* a response the engine will not finish now */
        fg_quota_response_settle(gw->quota, t->rec.id, s->quota_key, s->reserved, (int64_t)s->resp_tokens);
    if (s->oob_es)
        fg_session_delete(s->oob_es);
    gw_items_free(&s->items);
    free(s->tools);
    gw_tools_free(s);
    free(s->resp_metadata);
    for (uint32_t i = 0; i < s->n_saved; i++)
        free(s->saved[i].json);
    free(s->saved);
    gw_ring_free(&s->ring);
    fg_tokens_free(&s->conv);
    fg_tokens_free(&s->deferred);
    free(s->instructions);
    free(s->pending);
    free(s->out_text);
    free(s);
}

/* ---- events ---- */

uint64_t gw_session_take_seq(gw_session *s)
{
    return s->next_seq++;
}

void gw_emit_push(gw_session *s, gw_emit em, fg_err written)
{
    const char *beta = written == FG_OK && s->beta ? gw_ga_beta_name(fg_proto_buf_text(&s->gw->scratch)) : NULL;
    if (beta)
        written = fg_proto_buf_rename_type(&s->gw->scratch, beta);
    if (written == FG_OK)
        gw_session_push(s, em.seq);
    else
        fg_log_at(FG_LOG_ERROR, "event_dropped", gw_session_tenant(s), s->id, "\"reason\":\"out_of_memory\"");
}

void gw_session_cancel(gw_session *s)
{
    fg_session_cancel(s->resp_oob && s->oob_es ? s->oob_es : s->es);
}

/* The resume buffer's limits: events already sent (all of them while
 * detached) leave, oldest first, past sessions.resume_buffer_events or
 * sessions.resume_buffer_bytes; the newest event always stays. Unsent events
 * of an attached client never leave: the output limits bound those. */
static void trim_resume_buffer(gw_session *s)
{
    const fg_config_sessions *cfg = &s->gw->cfg->sessions;
    gw_ring *r = &s->ring;
    while (r->count > 1) {
        const gw_event *old = gw_ring_at(r, 0);
        const bool unsent = old->seq > s->sent_seq;
        if (s->sink && unsent)
            break;
        const size_t kept = s->sink ? r->bytes - s->unsent_bytes : r->bytes;
        if (kept <= (size_t)cfg->resume_buffer_bytes && r->count <= (uint32_t)cfg->resume_buffer_events)
            break;
        if (unsent) { /* detached: it leaves the resume buffer unsent */
            s->unsent_bytes -= old->len;
            s->unsent_events--;
        }
        gw_ring_drop_oldest(r);
    }
}

void gw_session_push(gw_session *s, uint64_t seq)
{
    fg_gateway_t *gw = s->gw;
    if (!gw_ring_push(&s->ring, seq, fg_proto_buf_text(&gw->scratch), gw->scratch.len)) {
        fg_log_at(FG_LOG_ERROR, "event_dropped", gw_session_tenant(s), s->id, "\"reason\":\"out_of_memory\"");
        return;
    }
    s->unsent_bytes += gw->scratch.len;
    s->unsent_events++;
    trim_resume_buffer(s);
    if (s->sink) {
        gw_sink_request_write(s->sink);
        gw_sink_output_changed(s->sink);
    }
}

void gw_session_sent(gw_session *s, const gw_event *e)
{
    s->sent_seq = e->seq;
    s->unsent_bytes -= e->len;
    s->unsent_events--;
    trim_resume_buffer(s);
}

void gw_session_info(const gw_session *s, fg_proto_session_info *info)
{
    memset(info, 0, sizeof *info);
    info->id = s->id;
    info->instructions = (fg_proto_str){s->instructions ? s->instructions : "", s->instructions_len};
    info->temperature = s->set.temperature;
    info->top_p = s->set.top_p;
    info->min_p = s->set.min_p;
    info->top_k = s->set.top_k;
    info->has_seed = s->set.has_seed;
    info->seed = s->set.seed;
    info->max_output_tokens = s->set.max_output_tokens;
    info->n_stop = s->set.n_stop;
    for (uint32_t i = 0; i < s->set.n_stop; i++)
        info->stop[i] = (fg_proto_str){s->set.stop[i], strlen(s->set.stop[i])};
    info->ga = s->ga;
    info->model = s->model;
    info->tools = s->tools;
    info->tool_choice = s->tool_choice;
    info->tool_choice_name = s->tool_choice_name;
}

void gw_session_flush_delta(gw_session *s)
{
    if (s->pending_len == 0)
        return;
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_text_delta(&s->gw->scratch, em.seq, em.evt, s->resp_id, s->item_id, s->pending,
                                  s->pending_len));
    s->pending_len = 0;
}

void gw_session_add_text(gw_session *s, const char *bytes, size_t n)
{
    char tmp[512 + 3], shown[3 * (512 + 3)];
    while (n > 0) {
        size_t k = n > 512 ? 512 : n;
        size_t m = fg_proto_utf8_carry_feed(&s->carry, bytes, k, tmp);
        m = fg_proto_utf8_replace(tmp, m, shown);
        fg_bytes_append(&s->pending, &s->pending_len, &s->pending_cap, shown, m);
        fg_bytes_append(&s->out_text, &s->out_len, &s->out_cap, shown, m);
        bytes += k;
        n -= k;
    }
}

/* Released text: through the tool-call parser when the response may call tools. */
static void reply_text(gw_session *s, const char *bytes, size_t n)
{
    if (gw_tools_on(s))
        gw_tools_text(s, bytes, n);
    else
        gw_session_add_text(s, bytes, n);
}

/* Metrics of a finished response (metrics.h). */
static void record_done(gw_session *s, fg_proto_response_status status, const fg_usage *u)
{
    gw_tenant_counters *m = &gw_tenant_at(s->gw, s->tenant)->m;
    const gw_resp_status st = status == FG_PROTO_RESPONSE_COMPLETED    ? GW_RESP_COMPLETED
                              : status == FG_PROTO_RESPONSE_INCOMPLETE ? GW_RESP_INCOMPLETE
                              : status == FG_PROTO_RESPONSE_CANCELLED  ? GW_RESP_CANCELLED
                                                                       : GW_RESP_FAILED;
    m->responses_finished[st]++;
    m->input_tokens += (uint64_t)(u->input_tokens > 0 ? u->input_tokens : 0);
    m->cached_input_tokens += (uint64_t)(u->cached_tokens > 0 ? u->cached_tokens : 0);
    m->output_tokens += (uint64_t)(u->output_tokens > 0 ? u->output_tokens : 0);
    m->draft_tokens += (uint64_t)(u->draft_tokens > 0 ? u->draft_tokens : 0);
    m->draft_accepted += (uint64_t)(u->draft_accepted > 0 ? u->draft_accepted : 0);
    s->draft_tokens += (uint64_t)(u->draft_tokens > 0 ? u->draft_tokens : 0);
    s->draft_accepted += (uint64_t)(u->draft_accepted > 0 ? u->draft_accepted : 0);
    gw_hist_observe(&s->gw->metrics.e2e, fg_clock_mono_s() - s->resp_created_at);
}

static void finish_response(gw_session *s, const fg_event *ev)
{
    if (gw_tools_on(s))
        gw_tools_end(s, ev->finish == FG_FINISH_EOS || ev->finish == FG_FINISH_STOP);
    char tail[3];
    size_t m = fg_proto_utf8_carry_flush(&s->carry, tail);
    if (m) {
        fg_bytes_append(&s->pending, &s->pending_len, &s->pending_cap, tail, m);
        fg_bytes_append(&s->out_text, &s->out_len, &s->out_cap, tail, m);
    }
    gw_session_flush_delta(s);

    fg_proto_item out = {.type = FG_PROTO_ITEM_MESSAGE, .id = {s->item_id, strlen(s->item_id)},
                         .role = FG_PROTO_ROLE_ASSISTANT, .n_content = 1};
    out.content[0] = (fg_proto_part){FG_PROTO_PART_OUTPUT_TEXT, {s->out_text ? s->out_text : "", s->out_len}};
    fg_proto_response_done d = {.id = s->resp_id, .output = &out, .n_output = ev->usage.output_tokens > 0 ? 1 : 0,
                                .usage = {(uint64_t)ev->usage.input_tokens, (uint64_t)ev->usage.cached_tokens,
                                          (uint64_t)ev->usage.output_tokens}};
    /* GA: the output item is shown whenever the response had one (its status says how it ended) */
    const bool ga_item = s->ga && s->resp_item != SIZE_MAX;
    const fg_proto_response_ga ga = {.conversation_id = s->resp_oob ? NULL : s->id, .metadata = s->resp_metadata,
                                     .max_output_tokens = s->resp_max_output};
    if (s->ga) {
        d.ga = &ga;
        d.n_output = ga_item ? 1 : 0;
    }
    fg_proto_item outs[1 + 32];
    uint32_t n_calls = gw_tools_output(s, outs + 1, 32);
    if (n_calls) { /* the message, then the calls */
        d.output = outs;
        d.n_output = 1 + n_calls;
    }
    switch (ev->finish) {
    case FG_FINISH_EOS:
    case FG_FINISH_STOP:
    case FG_FINISH_PREFILLED:
        d.status = FG_PROTO_RESPONSE_COMPLETED;
        break;
    case FG_FINISH_LENGTH:
        d.status = FG_PROTO_RESPONSE_INCOMPLETE;
        d.reason = "max_output_tokens";
        break;
    case FG_FINISH_CONTEXT:
        d.status = FG_PROTO_RESPONSE_INCOMPLETE;
        d.reason = "context_length";
        break;
    case FG_FINISH_CANCELLED:
        d.status = FG_PROTO_RESPONSE_CANCELLED;
        d.reason = s->cancel_reason ? s->cancel_reason : "client_cancelled";
        break;
    case FG_FINISH_ERROR:
        d.status = FG_PROTO_RESPONSE_FAILED;
        d.error_code = ev->error == FG_ERR_KV_FULL ? FG_PROTO_KV_UNAVAILABLE : gw_engine_code(ev->error);
        d.error_message = ev->error == FG_ERR_KV_FULL ? "the server's KV cache is full; retry later"
                          : d.error_code == FG_PROTO_SESSION_LOST
                              ? "the session's saved state could not be loaded back; its conversation is gone"
                              : "the engine failed this response";
        if (d.error_code == FG_PROTO_SESSION_LOST) {
            /* The engine emptied the session: the next response starts again from the instructions. */
            fg_log_at(FG_LOG_ERROR, "session_lost", gw_session_tenant(s), s->id, "\"error\":\"%s\"",
                      fg_err_name(ev->error));
            s->conv.n = 0;
            s->deferred.n = 0;
            s->rebuild = true;
            s->conv_known = true;
        }
        break;
    }
    if (ga_item) {
        out.status = d.status == FG_PROTO_RESPONSE_COMPLETED ? "completed" : "incomplete";
        gw_ga_response_end(s, out.status);
    }
    if (d.output == outs)
        outs[0] = out; /* with its status */
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_response_done(&s->gw->scratch, em.seq, em.evt, &d));
    record_done(s, d.status, &ev->usage);
    if (s->gw->quota && s->reserved) {
        /* work done: the new input prefilled plus the output */
        int64_t used = ev->usage.input_tokens - ev->usage.cached_tokens + ev->usage.output_tokens;
        fg_quota_response_settle(s->gw->quota, gw_tenant_at(s->gw, s->tenant)->rec.id, s->quota_key, s->reserved,
                                 used);
    }
    s->reserved = 0;
    s->responding = false;
    s->out_len = 0;
    s->cancel_reason = NULL;
    s->last_activity = fg_clock_mono_s();
    if (s->resp_oob) { /* the discarded fork or context: the conversation is as it was */
        fg_session_delete(s->oob_es);
        s->oob_es = NULL;
        s->resp_oob = false;
    }
    free(s->resp_metadata);
    s->resp_metadata = NULL;
    s->resp_item = SIZE_MAX;
    /* Items added during the response come after its output, as in the engine. */
    gw_items_place_deferred(s, s->conv.n);
    fg_tokens_push(&s->conv, s->deferred.v, s->deferred.n);
    s->deferred.n = 0;
    gw_session_store_meta(s); /* the settings and history as of this response, for the next save */
    fg_log_at(FG_LOG_DEBUG, "response_done", gw_session_tenant(s), s->id,
           "\"response\":\"%s\",\"finish\":%d,\"input_tokens\":%lld,\"cached_tokens\":%lld,"
           "\"output_tokens\":%lld",
           s->resp_id, (int)ev->finish, (long long)ev->usage.input_tokens, (long long)ev->usage.cached_tokens,
           (long long)ev->usage.output_tokens);
}

/* The session file could not be written: the client hears it, the session goes on. */
static void report_save_failed(gw_session *s, fg_err e)
{
    fg_log_at(FG_LOG_WARN, "session_save_failed", gw_session_tenant(s), s->id, "\"error\":\"%s\"", fg_err_name(e));
    fg_proto_error err;
    fg_proto_error_set(&err, FG_PROTO_PERSIST_FAILED, NULL, NULL, "session %s was not saved: %s", s->id,
                       e == FG_ERR_DISK_FULL ? "the disk (or the server's disk budget) is full"
                                             : "an I/O error writing its file");
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_error(&s->gw->scratch, em.seq, em.evt, &err, 0));
}

/* An attached client is behind when its unsent output passes the buffer
 * limit or half the resume buffer. (A detached session never is: its oldest
 * events leave the buffer instead, so it cannot hold a response forever.) */
static bool behind(const gw_session *s)
{
    const fg_config *cfg = s->gw->cfg;
    return s->sink && (s->unsent_bytes + s->pending_len > (size_t)cfg->sessions.output_buffer_bytes ||
                       s->unsent_events * 2 > (uint32_t)cfg->sessions.resume_buffer_events);
}

void gw_session_drain_engine(gw_session *s)
{
    fg_event ev[32];
    char text[8192];
    while (!s->output_paused) {
        /* an out-of-band response runs in its own engine session */
        fg_session_t *src = s->resp_oob && s->oob_es ? s->oob_es : s->es;
        int n = fg_session_poll(src, ev, 32, text, sizeof text);
        if (n <= 0 && src != s->es)
            n = fg_session_poll(s->es, ev, 32, text, sizeof text); /* its save reports */
        if (n <= 0)
            break;
        for (int i = 0; i < n; i++) {
            if (ev[i].type == FG_EVENT_TOKEN) {
                const double now = fg_clock_mono_s();
                gw_metrics *m = &s->gw->metrics;
                if (s->resp_last_token_at > 0)
                    gw_hist_observe(&m->inter_token, now - s->resp_last_token_at);
                else
                    gw_hist_observe(&m->ttft, now - s->resp_created_at);
                s->resp_last_token_at = now;
                m->output_tokens++;
                if (!s->resp_oob)
                    fg_tokens_push(&s->conv, &ev[i].token, 1);
                s->resp_tokens++;
                reply_text(s, text + ev[i].text_off, ev[i].text_len);
            } else if (ev[i].type == FG_EVENT_DONE) {
                reply_text(s, text + ev[i].text_off, ev[i].text_len);
                finish_response(s, &ev[i]);
            } else if (ev[i].type == FG_EVENT_SAVE_FAILED) {
                report_save_failed(s, ev[i].error);
            } else if (ev[i].type == FG_EVENT_WAITING) {
                fg_log_at(FG_LOG_INFO, "response_waiting", gw_session_tenant(s), s->id, "\"reason\":\"kv_full\"");
            }
        }
        if (!s->sink)
            gw_session_flush_delta(s); /* nobody will ask for a write: keep it for replay */
        if (behind(s)) {
            s->output_paused = true;
            s->gw->metrics.backpressure_pauses++;
            gw_sink_rx_update(s->sink); /* and stop reading it: its requests would queue more output */
            fg_log_at(FG_LOG_DEBUG, "output_paused", gw_session_tenant(s), s->id, "\"unsent_bytes\":%zu",
                   s->unsent_bytes + s->pending_len);
        }
    }
    if (s->sink && (s->pending_len || s->unsent_events))
        gw_sink_request_write(s->sink);
    if (s->sink) /* the delta text not yet an event counts too */
        gw_sink_output_changed(s->sink);
}

/* ---- attach and detach ---- */

void gw_session_attach(gw_session *s, gw_sink *k, uint64_t last_seq)
{
    fg_gateway_t *gw = s->gw;
    if (s->sink && s->sink != k) {
        gw_sink *old = s->sink;
        gw_session_detach(s);
        if (fg_proto_write_session_closed(&gw->scratch, 0, ++old->evt_counter, s->id, "resumed_elsewhere") == FG_OK) {
            old->ops->push(old, 0, fg_proto_buf_text(&gw->scratch), gw->scratch.len);
            gw_sink_request_write(old);
            gw_sink_output_changed(old);
        }
    }
    s->sink = k;
    k->session = s;
    s->sent_seq = last_seq;
    s->unsent_bytes = 0;
    s->unsent_events = 0;
    for (uint32_t i = 0; i < s->ring.count; i++) {
        const gw_event *e = gw_ring_at(&s->ring, i);
        if (e->seq > last_seq) {
            s->unsent_bytes += e->len;
            s->unsent_events++;
        }
    }
    s->last_activity = fg_clock_mono_s();
    gw_sink_request_write(k);
    gw_sink_output_changed(k); /* the replay counts against the output limits */
}

void gw_session_detach(gw_session *s)
{
    if (s->sink) {
        gw_sink *k = s->sink;
        k->session = NULL;
        s->sink = NULL;
        gw_sink_rx_update(k);
    }
    if (s->output_paused) { /* nobody to wait for now: go on, into the resume buffer */
        s->output_paused = false;
        gw_session_drain_engine(s);
    }
    s->last_activity = fg_clock_mono_s();
    gw_session_flush_delta(s);
    trim_resume_buffer(s); /* what the client was not sent now counts against the resume buffer */
}

void gw_sessions_sweep(fg_gateway_t *gw)
{
    const double now = fg_clock_mono_s(), idle = (double)gw->cfg->sessions.idle_timeout_s;
    gw_session *next;
    for (gw_session *s = gw->sessions; s; s = next) {
        next = s->all_next;
        if (!s->sink && !s->responding && !s->doomed && now - s->last_activity > idle) {
            fg_log_at(FG_LOG_INFO, "session_expired", gw_session_tenant(s), s->id, NULL);
            gw_session_destroy(s, false); /* expired: its file goes too */
        }
    }
}

/* Parses the session's tools JSON into set (empty for none). */
static fg_err tools_load(const char *tools, size_t len, fg_tool_set *set, fg_diag *diag)
{
    *set = (fg_tool_set){0};
    if (!tools)
        return FG_OK;
    json_error_t je;
    json_t *j = json_loadb(tools, len, 0, &je);
    if (!j)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session.tools: %s", je.text);
    fg_err e = fg_tool_set_parse(j, set, diag);
    json_decref(j);
    return e;
}

fg_err gw_tools_check(const fg_gateway_t *gw, const char *tools, size_t len, fg_proto_tool_choice choice,
                      const char *choice_name, const char **field, fg_diag *diag)
{
    fg_tool_set set;
    *field = "session.tools";
    fg_err e = tools_load(tools, len, &set, diag);
    if (e != FG_OK)
        return e;
    const fg_tool_choice c = fg_tool_choice_from_proto(choice, choice_name);
    e = fg_tool_choice_check(&set, &c, diag);
    if (e != FG_OK)
        *field = "session.tool_choice";
    fg_chat_family f;
    fg_diag fd;
    if (e == FG_OK && set.n && fg_chat_family_detect(NULL, 0, gw->tok, &f, &fd) != FG_OK)
        e = fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                        "this model's vocabulary has no DeepSeek chat markers, so tools cannot be written into its "
                        "prompt (%s)",
                        fd.msg);
    else if (e == FG_OK && set.n && f != FG_CHAT_DEEPSEEK_V3 && f != FG_CHAT_DEEPSEEK_V4)
        e = fg_diag_set(diag, FG_ERR_UNSUPPORTED, "tools with the %s prompt format: its tool calls are not parsed yet",
                        fg_chat_family_name(f));
    fg_tool_set_free(&set);
    return e;
}

fg_err gw_session_head(const gw_session *s, fg_tokens *out, fg_diag *diag)
{
    const fg_gateway_t *gw = s->gw;
    const char *ins = s->instructions ? s->instructions : "";
    fg_tool_set set = {0};
    fg_err e = s->tool_choice == FG_PROTO_TOOL_CHOICE_NONE
                   ? FG_OK
                   : tools_load(s->tools, s->tools ? strlen(s->tools) : 0, &set, diag);
    if (e != FG_OK || !set.n) {
        fg_tool_set_free(&set);
        return e != FG_OK ? e : fg_template_head(gw->tok, ins, s->instructions_len, out);
    }
    /* The head with tools is the rendered system turn: B{instructions}{tool block}. */
    fg_chat_family f;
    e = fg_chat_family_detect(NULL, 0, gw->tok, &f, diag);
    if (e == FG_OK && f != FG_CHAT_DEEPSEEK_V3 && f != FG_CHAT_DEEPSEEK_V4)
        e = fg_diag_set(diag, FG_ERR_UNSUPPORTED, "tools with the %s prompt format: its tool calls are not parsed yet",
                        fg_chat_family_name(f));
    fg_chat_msg m = {.role = FG_CHAT_SYSTEM, .content = {ins, s->instructions_len}};
    fg_chat_conv c = {.msgs = &m, .n_msgs = 1, .tools = set.tools, .n_tools = set.n};
    fg_chat_prompt p = {0};
    if (e == FG_OK)
        e = fg_chat_render(f, &c, gw->tok, &p, diag);
    if (e == FG_OK)
        e = fg_chat_encode(gw->tok, &p, out);
    fg_chat_prompt_free(&p);
    fg_tool_set_free(&set);
    return e;
}
