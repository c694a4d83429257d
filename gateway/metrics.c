/* metrics.c: histograms and the Prometheus text exposition (see metrics.h).
 *
 * The exposition is built per scrape in one growing buffer: scrapes are rare
 * (seconds apart) and off the token path, so the allocation there is fine.
 * Engine and quota histograms arrive as power-of-two buckets (engine.h,
 * quota.h) and are written cumulatively here, as Prometheus wants them.
 */
#include "gateway/metrics.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"
#include "kernels/cpu/mla_attn.h"

const double gw_latency_bounds[GW_LAT_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                  0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0, 120.0};

static const char *const STATUS_NAMES[GW_RESP_N] = {"completed", "incomplete", "cancelled", "failed"};

void gw_hist_observe(gw_hist *h, double seconds)
{
    if (!(seconds >= 0.0)) /* NaN or a clock step backwards */
        seconds = 0.0;
    int i = 0;
    while (i < GW_LAT_BUCKETS && seconds > gw_latency_bounds[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum += seconds;
}

double gw_hist_quantile_delta(const gw_hist *now, const gw_hist *before, double q)
{
    const uint64_t total = now->count - before->count;
    if (!total)
        return 0.0;
    const double want = q * (double)total;
    uint64_t seen = 0;
    for (int i = 0; i < GW_LAT_BUCKETS; i++) {
        seen += now->bucket[i] - before->bucket[i];
        if ((double)seen >= want)
            return gw_latency_bounds[i];
    }
    return gw_latency_bounds[GW_LAT_BUCKETS - 1];
}

void gw_metrics_count_rejection(gw_tenant *t, fg_quota_verdict verdict)
{
    if (t && verdict > FG_QUOTA_OK && verdict <= FG_QUOTA_INVALID)
        t->m.quota_rejections[verdict]++;
}

/* ---- the output buffer ---- */

typedef struct text {
    char *p;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    if (t->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)n;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->oom = true;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

static void family(text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value as the text format wants it: backslash, quote and newline escaped. */
static const char *label(char *buf, size_t cap, const char *s)
{
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '\\' || *s == '"') {
            buf[o++] = '\\';
            buf[o++] = *s;
        } else if (*s == '\n') {
            buf[o++] = '\\';
            buf[o++] = 'n';
        } else {
            buf[o++] = *s;
        }
    }
    buf[o] = 0;
    return buf;
}

static void put_gw_hist(text *t, const char *name, const char *help, const gw_hist *h)
{
    family(t, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < GW_LAT_BUCKETS; i++) {
        cum += h->bucket[i];
        put(t, "%s_bucket{le=\"%g\"} %llu\n", name, gw_latency_bounds[i], (unsigned long long)cum);
    }
    put(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)h->count, name,
        h->sum, name, (unsigned long long)h->count);
}

/* A histogram with power-of-two bounds base * 2^i (counts per bucket, the last one +Inf). */
static void put_pow2_hist(text *t, const char *name, const char *help, const uint64_t *b, int n, double base,
                          double sum)
{
    family(t, name, "histogram", help);
    uint64_t cum = 0;
    double bound = base;
    for (int i = 0; i < n - 1; i++, bound *= 2.0) {
        cum += b[i];
        put(t, "%s_bucket{le=\"%g\"} %llu\n", name, bound, (unsigned long long)cum);
    }
    cum += b[n - 1];
    put(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name, (unsigned long long)cum, name, sum,
        name, (unsigned long long)cum);
}

static void put_value(text *t, const char *name, const char *type, const char *help, double v)
{
    family(t, name, type, help);
    put(t, "%s %.17g\n", name, v);
}

/* ---- tenants ---- */

void gw_metrics_intern_tenants(fg_gateway_t *gw)
{
    fg_tenant_record recs[64];
    if (gw->quota) {
        size_t n = fg_quota_tenant_list(gw->quota, recs, sizeof recs / sizeof *recs);
        for (size_t i = 0; i < n && i < sizeof recs / sizeof *recs; i++) {
            const gw_tenant *known = NULL;
            for (int k = 0; k < gw->n_tenants && !known; k++)
                if (!strcmp(gw->tenants[k].rec.id, recs[i].id))
                    known = &gw->tenants[k];
            if (!known) /* an existing entry keeps its record until its next handshake refreshes it */
                gw_tenant_intern(gw, &recs[i]);
        }
        return;
    }
    for (size_t i = 0; i < gw->cfg->n_tenants; i++) {
        const fg_config_tenant *ct = &gw->cfg->tenants[i];
        bool known = false;
        for (int k = 0; k < gw->n_tenants && !known; k++)
            known = !strcmp(gw->tenants[k].rec.id, ct->id);
        if (known)
            continue;
        fg_tenant_record rec;
        memset(&rec, 0, sizeof rec);
        snprintf(rec.id, sizeof rec.id, "%s", ct->id);
        snprintf(rec.name, sizeof rec.name, "%s", ct->name ? ct->name : ct->id);
        rec.limits.weight = ct->weight;
        rec.limits.fail_closed = ct->fail_mode == FG_CONFIG_FAIL_CLOSED;
        gw_tenant_intern(gw, &rec);
    }
}

/* Resident and on-disk KV bytes of tenant t: the engine's count (shared pages
 * once, spilled sessions on disk only). */
void gw_metrics_tenant_kv(fg_gateway_t *gw, int t, uint64_t *resident_bytes, uint64_t *disk_bytes)
{
    fg_tenant_kv_usage u;
    if (gw->engine && fg_engine_tenant_usage(gw->engine, gw_tenant_at(gw, t)->rec.id, &u) == FG_OK) {
        *resident_bytes = u.resident_kv_bytes;
        *disk_bytes = u.disk_bytes;
        return;
    }
    *resident_bytes = (uint64_t)gw_tenant_kv_bytes(gw, t);
    *disk_bytes = 0;
}

/* ---- the exposition ---- */

static void render_gateway(fg_gateway_t *gw, text *t)
{
    const gw_metrics *m = &gw->metrics;
    put_value(t, "flashgate_connections", "gauge", "Open WebSocket connections.", (double)gw->n_conns);
    put_value(t, "flashgate_connections_opened_total", "counter", "WebSocket connections accepted.",
              (double)m->connections_opened);
    put_value(t, "flashgate_connections_refused_total", "counter",
              "WebSocket upgrades refused (unknown key, draining, connection limit).",
              (double)m->connections_refused);
    put_value(t, "flashgate_http_requests_total", "counter", "Plain HTTP requests (health, admin, metrics, status).",
              (double)m->http_requests);
    put_value(t, "flashgate_draining", "gauge", "1 while the gateway drains before stopping.", gw->draining ? 1 : 0);
    put_value(t, "flashgate_backpressure_pauses_total", "counter",
              "Times a session's generation paused because its client read too slowly.",
              (double)m->backpressure_pauses);
    put_value(t, "flashgate_output_limit_closes_total", "counter",
              "WebSocket connections closed with 1008 because their client did not read (output limits).",
              (double)m->output_limit_closes);

    /* sessions by state per tenant */
    char id[160];
    family(t, "flashgate_sessions", "gauge",
           "Sessions on this gateway by state: streaming (a response in progress), idle_resident (KV in "
           "memory), on_disk (KV spilled to disk).");
    for (int i = 0; i < gw->n_tenants; i++) {
        uint64_t streaming = 0, idle = 0, on_disk = 0;
        for (gw_session *s = gw->sessions; s; s = s->all_next)
            if (s->tenant == i)
                *(s->responding ? &streaming : s->es && fg_session_on_disk(s->es) ? &on_disk : &idle) += 1;
        label(id, sizeof id, gw->tenants[i].rec.id);
        put(t, "flashgate_sessions{tenant=\"%s\",state=\"streaming\"} %llu\n", id, (unsigned long long)streaming);
        put(t, "flashgate_sessions{tenant=\"%s\",state=\"idle_resident\"} %llu\n", id, (unsigned long long)idle);
        put(t, "flashgate_sessions{tenant=\"%s\",state=\"on_disk\"} %llu\n", id, (unsigned long long)on_disk);
    }

    struct {
        const char *name, *help;
        size_t off;
    } const counters[] = {
        {"flashgate_sessions_opened_total", "Sessions created.", offsetof(gw_tenant_counters, sessions_opened)},
        {"flashgate_responses_started_total", "Responses handed to the engine.",
         offsetof(gw_tenant_counters, responses_started)},
        {"flashgate_input_tokens_total", "Input tokens of finished responses (the context each was computed from).",
         offsetof(gw_tenant_counters, input_tokens)},
        {"flashgate_cached_input_tokens_total", "Input tokens found in the KV cache instead of computed.",
         offsetof(gw_tenant_counters, cached_input_tokens)},
        {"flashgate_output_tokens_total", "Output tokens of finished responses.",
         offsetof(gw_tenant_counters, output_tokens)},
        {"flashgate_draft_tokens_total", "Speculative draft tokens verified for finished responses.",
         offsetof(gw_tenant_counters, draft_tokens)},
        {"flashgate_draft_accepted_tokens_total", "Of the draft tokens, accepted (emitted without a step of their own).",
         offsetof(gw_tenant_counters, draft_accepted)},
    };
    for (size_t c = 0; c < sizeof counters / sizeof *counters; c++) {
        family(t, counters[c].name, "counter", counters[c].help);
        for (int i = 0; i < gw->n_tenants; i++) {
            const uint64_t *v = (const uint64_t *)((const char *)&gw->tenants[i].m + counters[c].off);
            put(t, "%s{tenant=\"%s\"} %llu\n", counters[c].name, label(id, sizeof id, gw->tenants[i].rec.id),
                (unsigned long long)*v);
        }
    }
    family(t, "flashgate_responses_finished_total", "counter", "Responses ended, by response.done status.");
    for (int i = 0; i < gw->n_tenants; i++)
        for (int s = 0; s < GW_RESP_N; s++)
            put(t, "flashgate_responses_finished_total{tenant=\"%s\",status=\"%s\"} %llu\n",
                label(id, sizeof id, gw->tenants[i].rec.id), STATUS_NAMES[s],
                (unsigned long long)gw->tenants[i].m.responses_finished[s]);
    family(t, "flashgate_quota_rejections_total", "counter", "Requests refused by a tenant quota, by limit.");
    for (int i = 0; i < gw->n_tenants; i++)
        for (int v = FG_QUOTA_SESSIONS; v <= FG_QUOTA_INVALID; v++)
            put(t, "flashgate_quota_rejections_total{tenant=\"%s\",limit=\"%s\"} %llu\n",
                label(id, sizeof id, gw->tenants[i].rec.id), fg_quota_verdict_name((fg_quota_verdict)v),
                (unsigned long long)gw->tenants[i].m.quota_rejections[v]);
    family(t, "flashgate_tenant_kv_bytes", "gauge", "KV cache bytes of a tenant's sessions, by tier.");
    for (int i = 0; i < gw->n_tenants; i++) {
        uint64_t res, disk;
        gw_metrics_tenant_kv(gw, i, &res, &disk);
        label(id, sizeof id, gw->tenants[i].rec.id);
        put(t, "flashgate_tenant_kv_bytes{tenant=\"%s\",tier=\"resident\"} %llu\n", id, (unsigned long long)res);
        put(t, "flashgate_tenant_kv_bytes{tenant=\"%s\",tier=\"disk\"} %llu\n", id, (unsigned long long)disk);
    }

    put_gw_hist(t, "flashgate_time_to_first_token_seconds",
                "From response.create received to the first output token reaching the gateway.", &m->ttft);
    put_gw_hist(t, "flashgate_inter_token_seconds", "Between consecutive output tokens of one response.",
                &m->inter_token);
    put_gw_hist(t, "flashgate_queue_seconds",
                "From response.create received to the response handed to the engine (quota admission).",
                &m->queue);
    put_gw_hist(t, "flashgate_response_seconds", "From response.create received to response.done (end to end).",
                &m->e2e);
}

static void render_engine(fg_gateway_t *gw, text *t)
{
    fg_engine_stats st;
    memset(&st, 0, sizeof st);
    if (gw->engine)
        fg_engine_get_stats(gw->engine, &st);
    const double page_bytes = (double)gw->kv_bytes_per_token * FG_KV_PAGE_TOKENS;
    put_value(t, "flashgate_engine_steps_total", "counter", "Forward passes (one batch each).", (double)st.steps);
    put_value(t, "flashgate_engine_decode_tokens_total", "counter", "Tokens evaluated as decode steps.",
              (double)st.decode_tokens);
    put_value(t, "flashgate_engine_prefill_tokens_total", "counter", "Prompt tokens evaluated.",
              (double)st.prefill_tokens);
    put_value(t, "flashgate_engine_short_input_tokens_total", "counter",
              "Prompt tokens of inputs shorter than the decompressed form pays for (absorbed-form attention).",
              (double)st.short_input_tokens);
    put_value(t, "flashgate_engine_prompt_only_steps_total", "counter",
              "Steps in which no session decoded, run at model.prefill_alone_tokens.", (double)st.steps_alone);
    family(t, "flashgate_engine_draft_tokens_total", "counter",
           "Speculative draft tokens fed to verification, by source (mtp: the model's MTP block; lookup: "
           "the session's own history).");
    put(t, "flashgate_engine_draft_tokens_total{source=\"mtp\"} %llu\n", (unsigned long long)st.draft_tokens_mtp);
    put(t, "flashgate_engine_draft_tokens_total{source=\"lookup\"} %llu\n",
        (unsigned long long)(st.draft_tokens - st.draft_tokens_mtp));
    put_value(t, "flashgate_engine_draft_accepted_total", "counter", "Of the draft tokens, accepted.",
              (double)st.draft_accepted);
    put_value(t, "flashgate_engine_draft_replayed_total", "counter",
              "Accepted tokens run again after a stateful cache (deepseek4) rolled back a partly rejected "
              "verification.",
              (double)st.draft_replayed);
    family(t, "flashgate_engine_responses", "gauge",
           "Responses in the engine: running, paused (client behind) or waiting for KV pages (queued).");
    put(t, "flashgate_engine_responses{state=\"running\"} %d\n", st.responding - st.paused - st.waiting_kv);
    put(t, "flashgate_engine_responses{state=\"paused\"} %d\n", st.paused);
    put(t, "flashgate_engine_responses{state=\"waiting_kv\"} %d\n", st.waiting_kv);
    put_pow2_hist(t, "flashgate_engine_step_seconds", "Time of one forward pass.", st.step_time_hist,
                  FG_ENGINE_HIST_BUCKETS, FG_ENGINE_STEP_HIST_BASE_S, st.step_seconds);
    put_pow2_hist(t, "flashgate_engine_batch_tokens", "Tokens in one step's batch (decode + prefill).",
                  st.batch_tokens_hist, FG_ENGINE_HIST_BUCKETS, 1.0, (double)(st.decode_tokens + st.prefill_tokens));
    put_pow2_hist(t, "flashgate_engine_batch_sessions", "Sessions in one step's batch.", st.batch_sessions_hist,
                  FG_ENGINE_HIST_BUCKETS, 1.0, (double)st.batch_sessions_sum);

    family(t, "flashgate_kv_pages", "gauge",
           "KV pages (64 tokens each) by tier: resident in use, resident shared by several sessions, resident "
           "held only by the prefix cache.");
    put(t, "flashgate_kv_pages{tier=\"resident\"} %zu\n", st.kv_pages_used);
    put(t, "flashgate_kv_pages{tier=\"resident_shared\"} %zu\n", st.kv_pages_shared);
    put(t, "flashgate_kv_pages{tier=\"resident_prefix_cache\"} %zu\n", st.kv_pages_cached);
    put_value(t, "flashgate_kv_pages_capacity", "gauge", "KV pages the resident pool holds.",
              (double)st.kv_pages_total);
    family(t, "flashgate_kv_bytes", "gauge", "KV cache bytes by tier (resident: pages in use; disk: session files).");
    put(t, "flashgate_kv_bytes{tier=\"resident\"} %.17g\n", (double)st.kv_pages_used * page_bytes);
    put(t, "flashgate_kv_bytes{tier=\"disk\"} %llu\n", (unsigned long long)st.disk_bytes);
    put_value(t, "flashgate_kv_capacity_bytes", "gauge", "Bytes of the resident KV page pool.",
              (double)st.kv_pages_total * page_bytes);
    fg_engine_info ei = {0};
    if (gw->engine)
        fg_engine_get_info(gw->engine, &ei);
    put_value(t, "flashgate_kv_bytes_per_token", "gauge", "KV bytes a token adds (all layers, as stored).",
              (double)ei.kv_bytes_per_token);
    put_value(t, "flashgate_kv_session_fixed_bytes", "gauge",
              "KV bytes a session holds whatever its length (deepseek4: window rings, open compressor blocks).",
              (double)ei.kv_seq_bytes);
    put_value(t, "flashgate_sessions_on_disk", "gauge", "Open sessions whose KV is on disk only.",
              (double)st.sessions_on_disk);
    put_value(t, "flashgate_prefix_cache_lookups_total", "counter", "Full KV pages looked up in the prefix cache.",
              (double)st.prefix_lookups);
    put_value(t, "flashgate_prefix_cache_hits_total", "counter", "Prefix-cache lookups found (shared, not computed).",
              (double)st.prefix_hits);
    put_value(t, "flashgate_prefix_cache_waits_total", "counter",
              "Prefill steps a session sat out to take a page another session of its tenant was computing.",
              (double)st.prefix_waits);
    put_value(t, "flashgate_kv_spills_total", "counter", "Sessions written to disk and released from memory.",
              (double)st.spills);
    put_value(t, "flashgate_kv_restores_total", "counter", "Sessions loaded back from disk.", (double)st.restores);
    put_value(t, "flashgate_kv_page_files_written_total", "counter",
              "Cold shared prefix pages written to page files when evicted from memory.", (double)st.pages_to_disk);
    put_value(t, "flashgate_kv_page_files_read_total", "counter",
              "Page files read back into the prefix cache on a miss.", (double)st.pages_from_disk);
    put_value(t, "flashgate_kv_page_snapshots_written_total", "counter",
              "Of the page files written, those that carry the sequence state snapshot a deepseek4 hit starts from.",
              (double)st.snapshots_to_disk);
    put_value(t, "flashgate_kv_page_snapshots_read_total", "counter",
              "deepseek4 state snapshots read back with their page files.", (double)st.snapshots_from_disk);
    put_value(t, "flashgate_kv_page_files_damaged_total", "counter",
              "Page files found damaged (moved aside; the page was computed instead).", (double)st.page_files_damaged);
    put_value(t, "flashgate_kv_saves_total", "counter", "Session files written.", (double)st.saves);
    put_value(t, "flashgate_kv_save_errors_total", "counter", "Session file writes that failed.",
              (double)st.save_errors);
    put_value(t, "flashgate_kv_spill_seconds_total", "counter", "Time spent writing spilled sessions.",
              st.spill_seconds);
    put_value(t, "flashgate_kv_restore_seconds_total", "counter", "Time spent loading sessions back.",
              st.restore_seconds);
}

static void render_quota(fg_gateway_t *gw, text *t)
{
    fg_quota_stats qs;
    memset(&qs, 0, sizeof qs);
    const bool have = gw->quota != NULL;
    if (have)
        fg_quota_get_stats(gw->quota, &qs);
    put_value(t, "flashgate_redis_enabled", "gauge", "1 when quotas are kept in Redis (redis.address is not off).",
              have ? 1 : 0);
    put_value(t, "flashgate_redis_up", "gauge", "1 while the quota thread's Redis connection is up.",
              qs.connected ? 1 : 0);
    put_value(t, "flashgate_quota_degraded", "gauge",
              "1 while Redis is enabled but unreachable: tenants fail open (local backstop) or closed.",
              have && !qs.connected ? 1 : 0);
    put_value(t, "flashgate_redis_commands_total", "counter", "Redis commands sent.", (double)qs.calls);
    put_value(t, "flashgate_redis_errors_total", "counter", "Redis errors (connection, timeout, error replies).",
              (double)qs.errors);
    put_value(t, "flashgate_redis_reconnects_total", "counter", "Redis reconnections.", (double)qs.reconnects);
    fg_redis_local_stats rl;
    fg_redis_local_get_stats(gw->redis_local, &rl);
    put_value(t, "flashgate_redis_local_running", "gauge",
              "1 while the redis-server flashgate started for itself runs (0 without one).", rl.running ? 1 : 0);
    put_value(t, "flashgate_redis_local_restarts_total", "counter",
              "Times that redis-server was started again after it died.", (double)rl.restarts);
    put_pow2_hist(t, "flashgate_redis_round_trip_seconds", "Time of one pipelined exchange with Redis.", qs.rtt_hist,
                  FG_QUOTA_RTT_BUCKETS, FG_QUOTA_RTT_BASE_S, qs.rtt_seconds_sum);
    put_value(t, "flashgate_quota_degraded_decisions_total", "counter",
              "Session opens and reservations decided locally while Redis was unreachable.", (double)qs.degraded);
    put_value(t, "flashgate_quota_journal_entries", "gauge", "Usage entries waiting for replay into Redis.",
              (double)qs.journal_entries);
    fg_dir_stats ds;
    fg_quota_dir_get_stats(gw->quota, &ds); /* zeros without a directory */
    put_value(t, "flashgate_session_dir_enabled", "gauge",
              "1 when the session directory is on (cluster.advertise_url set).", gw_cluster_on(gw) ? 1 : 0);
    put_value(t, "flashgate_session_dir_leases", "gauge", "Session leases this instance holds in the directory.",
              (double)ds.held);
    put_value(t, "flashgate_session_dir_claims_total", "counter",
              "Directory claims sent (new sessions, looks and takes of resumed ones).", (double)ds.claims);
    put_value(t, "flashgate_session_dir_renewals_total", "counter", "Directory renewal calls (one per tenant and period).",
              (double)ds.renewals);
    put_value(t, "flashgate_session_dir_releases_total", "counter", "Directory leases given back.",
              (double)ds.releases);
    put_value(t, "flashgate_session_dir_lost_total", "counter",
              "Leases found taken by another instance (this one was paused or cut off past the lease).",
              (double)ds.lost);
    put_value(t, "flashgate_session_dir_fenced_total", "counter",
              "Session file writes refused because this instance no longer holds the lease.", (double)ds.fenced);
    char id[160];
    family(t, "flashgate_tenant_fail_closed", "gauge",
           "1 when the tenant refuses new work while Redis is unreachable, 0 when it fails open.");
    for (int i = 0; i < gw->n_tenants; i++)
        put(t, "flashgate_tenant_fail_closed{tenant=\"%s\"} %d\n", label(id, sizeof id, gw->tenants[i].rec.id),
            gw->tenants[i].rec.limits.fail_closed ? 1 : 0);
}

fg_err gw_metrics_render(fg_gateway_t *gw, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    text t = {.cap = 32768};
    t.p = malloc(t.cap);
    if (!t.p)
        return FG_ERR_NOMEM;
    t.p[0] = 0;
    gw_metrics_intern_tenants(gw);
    family(&t, "flashgate_build_info", "gauge", "Always 1; the protocol version as a label.");
    put(&t, "flashgate_build_info{protocol=\"" FG_PROTO_SUBPROTOCOL "\"} 1\n");
    render_gateway(gw, &t);
    render_engine(gw, &t);
    render_quota(gw, &t);
    if (t.oom) {
        free(t.p);
        return FG_ERR_NOMEM;
    }
    *out = t.p;
    *len = t.len;
    return FG_OK;
}
