/* status.c: the sampled history and the /v1/status document (see status.h).
 *
 * A sample keeps what the dashboard plots: output tokens per second, TTFT and
 * inter-token latency quantiles over the interval (from the histogram deltas,
 * so as coarse as its buckets), KV bytes by tier, sessions by state and per
 * tenant, queue depth and quota rejections. The ring is fixed-size and filled
 * in place: sampling allocates nothing.
 */
#include "gateway/status.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/gateway_internal.h"
#include "gateway/metrics.h"
#include "kernels/cpu/mla_attn.h"
#include "policies/session_dir.h"

typedef struct sample {
    double t;                       /* unix seconds */
    float tokens_per_s;             /* output tokens per second over the interval */
    float ttft_p50, ttft_p95;       /* seconds, over the interval; 0 when none */
    float itl_p50, itl_p95;
    double kv_resident_bytes, kv_disk_bytes;
    uint32_t streaming, idle, on_disk, queued, connections;
    uint32_t quota_rejections;      /* in the interval */
    uint32_t tenant_sessions[GW_STATUS_TENANTS];
    uint8_t redis_up;               /* 1 up, 0 down, 2 not used */
} sample;

struct gw_status {
    sample ring[GW_STATUS_SAMPLES];
    int head, count;                /* the oldest sample, and how many */
    double started;                 /* monotonic seconds at create */
    double last_mono;               /* the previous sample's time; 0 before the first */
    uint64_t last_tokens, last_rejections;
    gw_hist ttft_prev, itl_prev;
};

gw_status *gw_status_create(void)
{
    gw_status *st = calloc(1, sizeof *st);
    if (st)
        st->started = fg_clock_mono_s();
    return st;
}

void gw_status_destroy(gw_status *st) { free(st); }

static uint64_t total_rejections(const fg_gateway_t *gw)
{
    uint64_t n = 0;
    for (int i = 0; i < gw->n_tenants; i++)
        for (int v = 0; v <= FG_QUOTA_INVALID; v++)
            n += gw->tenants[i].m.quota_rejections[v];
    return n;
}

/* Figures that a sample and the "now" part share. */
typedef struct live {
    fg_engine_stats es;
    uint32_t streaming, idle, quota_pending;
    int redis;                      /* 1 up, 0 down, -1 not used */
} live;

static void read_live(fg_gateway_t *gw, live *l)
{
    memset(l, 0, sizeof *l);
    if (gw->engine)
        fg_engine_get_stats(gw->engine, &l->es);
    for (gw_session *s = gw->sessions; s; s = s->all_next) {
        *(s->responding ? &l->streaming : &l->idle) += 1;
        l->quota_pending += s->quota_pending;
    }
    l->redis = -1;
    if (gw->quota) {
        fg_quota_stats qs;
        fg_quota_get_stats(gw->quota, &qs);
        l->redis = qs.connected ? 1 : 0;
    }
}

static double resident_bytes(const fg_gateway_t *gw, const fg_engine_stats *es)
{
    return (double)es->kv_pages_used * (double)gw->kv_bytes_per_token * FG_KV_PAGE_TOKENS;
}

void gw_status_sample(fg_gateway_t *gw)
{
    gw_status *st = gw->status;
    if (!st)
        return;
    gw_metrics_intern_tenants(gw);
    const double now = fg_clock_mono_s();
    live l;
    read_live(gw, &l);
    const gw_metrics *m = &gw->metrics;
    const uint64_t rej = total_rejections(gw);
    sample *s = &st->ring[(st->head + st->count) % GW_STATUS_SAMPLES];
    if (st->count == GW_STATUS_SAMPLES) { /* full: overwrite the oldest */
        s = &st->ring[st->head];
        st->head = (st->head + 1) % GW_STATUS_SAMPLES;
    } else {
        st->count++;
    }
    memset(s, 0, sizeof *s);
    s->t = fg_clock_real_s();
    const double dt = st->last_mono > 0 ? now - st->last_mono : 0;
    if (dt > 0) {
        s->tokens_per_s = (float)((double)(m->output_tokens - st->last_tokens) / dt);
        s->quota_rejections = (uint32_t)(rej - st->last_rejections);
    }
    s->ttft_p50 = (float)gw_hist_quantile_delta(&m->ttft, &st->ttft_prev, 0.5);
    s->ttft_p95 = (float)gw_hist_quantile_delta(&m->ttft, &st->ttft_prev, 0.95);
    s->itl_p50 = (float)gw_hist_quantile_delta(&m->inter_token, &st->itl_prev, 0.5);
    s->itl_p95 = (float)gw_hist_quantile_delta(&m->inter_token, &st->itl_prev, 0.95);
    s->kv_resident_bytes = resident_bytes(gw, &l.es);
    s->kv_disk_bytes = (double)l.es.disk_bytes;
    s->streaming = l.streaming;
    s->idle = l.idle;
    s->on_disk = (uint32_t)(l.es.sessions_on_disk > 0 ? l.es.sessions_on_disk : 0);
    s->queued = (uint32_t)(l.es.waiting_kv > 0 ? l.es.waiting_kv : 0) + l.quota_pending;
    s->connections = (uint32_t)gw->n_conns;
    for (int i = 0; i < gw->n_tenants && i < GW_STATUS_TENANTS; i++)
        s->tenant_sessions[i] = (uint32_t)(gw->tenants[i].sessions > 0 ? gw->tenants[i].sessions : 0);
    s->redis_up = (uint8_t)(l.redis < 0 ? 2 : l.redis);
    st->last_mono = now;
    st->last_tokens = m->output_tokens;
    st->last_rejections = rej;
    st->ttft_prev = m->ttft;
    st->itl_prev = m->inter_token;
}

void gw_status_publish(fg_gateway_t *gw)
{
    if (!gw_cluster_on(gw))
        return;
    live l;
    read_live(gw, &l);
    const gw_status *st = gw->status;
    const sample *last = st && st->count ? &st->ring[(st->head + st->count - 1) % GW_STATUS_SAMPLES] : NULL;
    fg_dir_load load = {
        .sessions = l.streaming + l.idle,
        .streaming = l.streaming,
        .kv_used_bytes = (uint64_t)resident_bytes(gw, &l.es),
        .kv_capacity_bytes =
            (uint64_t)((double)l.es.kv_pages_total * (double)gw->kv_bytes_per_token * FG_KV_PAGE_TOKENS),
        .tokens_per_s_milli = last && last->tokens_per_s > 0 ? (uint64_t)llround(last->tokens_per_s * 1000.0) : 0,
        .draining = gw->draining,
    };
    fg_quota_dir_publish(gw->quota, &load);
}

/* ---- the document ---- */

static double round3(double v) { return isfinite(v) ? round(v * 1000.0) / 1000.0 : 0.0; }

typedef double (*sample_field)(const sample *s);
#define FIELD(name, expr) \
    static double name(const sample *s) { return (double)(expr); }
FIELD(f_t, s->t)
FIELD(f_tps, s->tokens_per_s)
FIELD(f_ttft50, s->ttft_p50)
FIELD(f_ttft95, s->ttft_p95)
FIELD(f_itl50, s->itl_p50)
FIELD(f_itl95, s->itl_p95)
FIELD(f_kvres, s->kv_resident_bytes)
FIELD(f_kvdisk, s->kv_disk_bytes)
FIELD(f_streaming, s->streaming)
FIELD(f_idle, s->idle)
FIELD(f_on_disk, s->on_disk)
FIELD(f_queued, s->queued)
FIELD(f_conns, s->connections)
FIELD(f_rej, s->quota_rejections)
#undef FIELD

/* msg with each word that starts with '/' (a unix socket's path, up to the
 * next space or ':') replaced by "local": the document can be public
 * (docs/metrics.md), and a path tells about the host. */
static void without_paths(const char *msg, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; msg[i] && o + 1 < cap;) {
        if (msg[i] == '/' && (i == 0 || msg[i - 1] == ' ')) {
            while (msg[i] && msg[i] != ' ' && msg[i] != ':')
                i++;
            for (const char *r = "local"; *r && o + 1 < cap; r++)
                out[o++] = *r;
            continue;
        }
        out[o++] = msg[i++];
    }
    out[o] = 0;
}

static json_t *series(const gw_status *st, sample_field f)
{
    json_t *a = json_array();
    for (int i = 0; a && i < st->count; i++)
        json_array_append_new(a, json_real(round3(f(&st->ring[(st->head + i) % GW_STATUS_SAMPLES]))));
    return a;
}

static json_t *tenant_series(const gw_status *st, int t)
{
    json_t *a = json_array();
    for (int i = 0; a && i < st->count; i++)
        json_array_append_new(a, json_integer(st->ring[(st->head + i) % GW_STATUS_SAMPLES].tenant_sessions[t]));
    return a;
}

static json_t *tenants_json(fg_gateway_t *gw)
{
    json_t *arr = json_array();
    for (int i = 0; arr && i < gw->n_tenants; i++) {
        const gw_tenant *t = &gw->tenants[i];
        uint32_t streaming = 0;
        for (gw_session *s = gw->sessions; s; s = s->all_next)
            streaming += s->tenant == i && s->responding;
        uint64_t res, disk, rej = 0;
        gw_metrics_tenant_kv(gw, i, &res, &disk);
        json_t *by_limit = json_object();
        for (int v = FG_QUOTA_SESSIONS; v <= FG_QUOTA_INVALID; v++) {
            rej += t->m.quota_rejections[v];
            if (t->m.quota_rejections[v])
                json_object_set_new(by_limit, fg_quota_verdict_name((fg_quota_verdict)v),
                                    json_integer((json_int_t)t->m.quota_rejections[v]));
        }
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:I, s:I, s:s}", "id", t->rec.id,
                           "name", t->rec.name, "sessions", t->sessions, "streaming", (int)streaming,
                           "responses_started", (json_int_t)t->m.responses_started, "input_tokens",
                           (json_int_t)t->m.input_tokens, "cached_input_tokens", (json_int_t)t->m.cached_input_tokens,
                           "output_tokens", (json_int_t)t->m.output_tokens, "draft_tokens",
                           (json_int_t)t->m.draft_tokens, "draft_accepted", (json_int_t)t->m.draft_accepted,
                           "sessions_opened",
                           (json_int_t)t->m.sessions_opened, "quota_rejections", (json_int_t)rej,
                           "quota_rejections_by_limit", by_limit, "kv_resident_bytes", (json_int_t)res,
                           "kv_disk_bytes", (json_int_t)disk, "fail_mode",
                           t->rec.limits.fail_closed ? "closed" : "open"));
    }
    return arr;
}

/* Every live instance as the last publish read the directory (session_dir.h). */
static json_t *cluster_json(fg_gateway_t *gw)
{
    if (!gw_cluster_on(gw))
        return json_pack("{s:b, s:n, s:n, s:[]}", "enabled", 0, "instance_id", "view_age_ms", "instances");
    fg_dir_instance *v = calloc(FG_DIR_INSTANCES_MAX, sizeof *v);
    int64_t age = -1;
    size_t n = v ? fg_quota_dir_instances(gw->quota, v, FG_DIR_INSTANCES_MAX, &age) : 0;
    json_t *arr = json_array();
    uint64_t sessions = 0, streaming = 0, leases = 0, tps_milli = 0;
    json_t *self = json_null();
    for (size_t i = 0; arr && i < n; i++) {
        const fg_dir_instance *d = &v[i];
        if (d->self) {
            json_decref(self);
            self = json_string(d->id);
        }
        sessions += d->load.sessions;
        streaming += d->load.streaming;
        leases += d->load.leases;
        tps_milli += d->load.tokens_per_s_milli;
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:b, s:I, s:I, s:b, s:I, s:I, s:I, s:I, s:I, s:f}", "instance_id", d->id,
                           "url", d->url, "self", d->self, "age_ms", (json_int_t)d->age_ms, "expires_in_ms",
                           (json_int_t)d->expires_in_ms, "draining", d->load.draining, "leases",
                           (json_int_t)d->load.leases, "sessions", (json_int_t)d->load.sessions, "streaming",
                           (json_int_t)d->load.streaming, "kv_used_bytes", (json_int_t)d->load.kv_used_bytes,
                           "kv_capacity_bytes", (json_int_t)d->load.kv_capacity_bytes, "tokens_per_s",
                           round3((double)d->load.tokens_per_s_milli / 1000.0)));
    }
    free(v);
    json_t *view_age = age < 0 ? json_null() : json_integer((json_int_t)age);
    return json_pack("{s:b, s:o, s:o, s:i, s:I, s:I, s:I, s:f, s:o}", "enabled", 1, "instance_id", self,
                     "view_age_ms", view_age, "instance_count", (int)n, "sessions",
                     (json_int_t)sessions, "streaming", (json_int_t)streaming, "leases", (json_int_t)leases,
                     "tokens_per_s", round3((double)tps_milli / 1000.0), "instances", arr ? arr : json_array());
}

char *gw_status_render(fg_gateway_t *gw)
{
    gw_metrics_intern_tenants(gw);
    const gw_status *st = gw->status;
    live l;
    read_live(gw, &l);
    const gw_metrics *m = &gw->metrics;
    const sample *last = st && st->count ? &st->ring[(st->head + st->count - 1) % GW_STATUS_SAMPLES] : NULL;

    fg_quota_stats qs;
    memset(&qs, 0, sizeof qs);
    if (gw->quota)
        fg_quota_get_stats(gw->quota, &qs);
    char last_error[sizeof qs.last_error];
    without_paths(qs.last_error, last_error, sizeof last_error);
    json_t *redis = json_pack("{s:b, s:b, s:b, s:I, s:I, s:f, s:I, s:s}", "enabled", gw->quota != NULL, "up",
                              qs.connected, "degraded", gw->quota && !qs.connected, "commands", (json_int_t)qs.calls,
                              "errors", (json_int_t)qs.errors, "last_round_trip_ms", round3(qs.last_call_ms),
                              "journal_entries", (json_int_t)qs.journal_entries, "last_error", last_error);

    const double page_bytes = (double)gw->kv_bytes_per_token * FG_KV_PAGE_TOKENS;
    fg_engine_info ei = {0};
    if (gw->engine)
        fg_engine_get_info(gw->engine, &ei);
    /* deepseek4: bytes per token (rounded up to whole bytes per page) and the fixed
     * state per session, which the pages in use include (kv_store.h) */
    json_t *kv = json_pack("{s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "resident_bytes",
                           resident_bytes(gw, &l.es), "disk_bytes", (double)l.es.disk_bytes, "capacity_bytes",
                           (double)l.es.kv_pages_total * page_bytes, "pages_used", (json_int_t)l.es.kv_pages_used,
                           "pages_total", (json_int_t)l.es.kv_pages_total, "pages_shared",
                           (json_int_t)l.es.kv_pages_shared, "prefix_lookups", (json_int_t)l.es.prefix_lookups,
                           "prefix_hits", (json_int_t)l.es.prefix_hits, "spills", (json_int_t)l.es.spills,
                           "restores", (json_int_t)l.es.restores, "bytes_per_token",
                           (json_int_t)ei.kv_bytes_per_token, "session_fixed_bytes", (json_int_t)ei.kv_seq_bytes);

    uint64_t out_tokens = 0, in_tokens = 0, cached = 0, started = 0, finished = 0;
    for (int i = 0; i < gw->n_tenants; i++) {
        const gw_tenant_counters *c = &gw->tenants[i].m;
        out_tokens += c->output_tokens;
        in_tokens += c->input_tokens;
        cached += c->cached_input_tokens;
        started += c->responses_started;
        for (int s = 0; s < GW_RESP_N; s++)
            finished += c->responses_finished[s];
    }
    const int queued = (l.es.waiting_kv > 0 ? l.es.waiting_kv : 0) + (int)l.quota_pending;
    json_t *now = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f}", "connections",
        (int)gw->n_conns, "sessions_streaming", (int)l.streaming, "sessions_idle_resident", (int)l.idle,
        "sessions_on_disk", l.es.sessions_on_disk, "queue_depth", queued, "tokens_per_s",
        last ? round3(last->tokens_per_s) : 0.0, "generated_tokens", (json_int_t)m->output_tokens, "output_tokens",
        (json_int_t)out_tokens, "input_tokens", (json_int_t)in_tokens, "cached_input_tokens", (json_int_t)cached,
        "responses_started", (json_int_t)started, "responses_finished", (json_int_t)finished, "quota_rejections",
        (json_int_t)total_rejections(gw), "engine_steps", (json_int_t)l.es.steps, "ttft_p50_s",
        last ? round3(last->ttft_p50) : 0.0, "ttft_p95_s", last ? round3(last->ttft_p95) : 0.0, "itl_p50_s",
        last ? round3(last->itl_p50) : 0.0, "itl_p95_s", last ? round3(last->itl_p95) : 0.0);

    json_t *ser = json_object();
    if (st && ser) {
        static const struct {
            const char *name;
            sample_field f;
        } fields[] = {{"t", f_t},
                      {"tokens_per_s", f_tps},
                      {"ttft_p50_s", f_ttft50},
                      {"ttft_p95_s", f_ttft95},
                      {"itl_p50_s", f_itl50},
                      {"itl_p95_s", f_itl95},
                      {"kv_resident_bytes", f_kvres},
                      {"kv_disk_bytes", f_kvdisk},
                      {"sessions_streaming", f_streaming},
                      {"sessions_idle_resident", f_idle},
                      {"sessions_on_disk", f_on_disk},
                      {"queue_depth", f_queued},
                      {"connections", f_conns},
                      {"quota_rejections", f_rej}};
        for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
            json_object_set_new(ser, fields[i].name, series(st, fields[i].f));
        json_t *ts = json_object();
        for (int i = 0; ts && i < gw->n_tenants && i < GW_STATUS_TENANTS; i++)
            json_object_set_new(ts, gw->tenants[i].rec.id, tenant_series(st, i));
        json_object_set_new(ser, "tenant_sessions", ts);
    }
    json_t *doc = json_pack("{s:s, s:f, s:f, s:b, s:i, s:o, s:o, s:o, s:o, s:o, s:o}", "version", FG_PROTO_SUBPROTOCOL,
                            "time", round3(fg_clock_real_s()), "uptime_s", st ? round3(fg_clock_mono_s() - st->started) : 0.0,
                            "draining", gw->draining, "sample_interval_s", 1, "now", now, "kv", kv, "redis", redis,
                            "tenants", tenants_json(gw), "cluster", cluster_json(gw), "series",
                            ser ? ser : json_object());
    if (!doc)
        return NULL;
    char *text = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(13));
    json_decref(doc);
    return text;
}
