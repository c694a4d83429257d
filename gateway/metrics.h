/* metrics.h: the gateway's own counters and latency histograms, and the
 * Prometheus text exposition (format 0.0.4) of them together with the
 * engine's and the quota module's figures (docs/metrics.md lists every family).
 *
 * Recording: every gw_metrics and gw_tenant_counters field is written and read
 * on the service thread only (the lws loop records connections, responses,
 * tokens and latencies; the scrape runs there too), so an observation is a few
 * plain additions with no lock and no allocation. Engine and quota figures are
 * copied out of their modules (one short lock each) at scrape time.
 *
 * Tenant labels name only tenants this gateway knows (configured or stored in
 * Redis, tenants.h): bounded. Session ids are never labels.
 */
#ifndef FG_GATEWAY_METRICS_H
#define FG_GATEWAY_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "policies/quota.h"

typedef struct fg_gateway fg_gateway_t;

/* Latency histogram buckets, upper bounds in seconds (+Inf implied after the last). */
#define GW_LAT_BUCKETS 16
extern const double gw_latency_bounds[GW_LAT_BUCKETS];

/* A histogram over gw_latency_bounds. Counts are per bucket (not cumulative);
 * bucket[GW_LAT_BUCKETS] counts observations above the last bound. */
typedef struct gw_hist {
    uint64_t bucket[GW_LAT_BUCKETS + 1];
    uint64_t count;
    double sum;            /* seconds */
} gw_hist;

/* Records one observation (seconds). No allocation, no lock: service thread. */
void gw_hist_observe(gw_hist *h, double seconds);
/* The q-quantile (0..1) of the observations in (now - before), bucket by
 * bucket, as the upper bound of the bucket it falls in (the last finite bound
 * for the +Inf bucket); 0 when there were none. */
double gw_hist_quantile_delta(const gw_hist *now, const gw_hist *before, double q);

/* How a response ended, as response.done's status. */
typedef enum gw_resp_status {
    GW_RESP_COMPLETED = 0,
    GW_RESP_INCOMPLETE,
    GW_RESP_CANCELLED,
    GW_RESP_FAILED,
    GW_RESP_N
} gw_resp_status;

/* Per-tenant counters, kept in the tenant table (tenants.h). */
typedef struct gw_tenant_counters {
    uint64_t sessions_opened;
    uint64_t responses_started;
    uint64_t responses_finished[GW_RESP_N];
    uint64_t input_tokens;                 /* response.done usage: context computed from */
    uint64_t cached_input_tokens;          /* of which found in the KV cache */
    uint64_t output_tokens;
    uint64_t draft_tokens;                 /* response.done usage: speculative drafts verified */
    uint64_t draft_accepted;               /* of which accepted (part of output_tokens) */
    uint64_t quota_rejections[FG_QUOTA_INVALID + 1]; /* by fg_quota_verdict (index 0 unused) */
} gw_tenant_counters;

/* Gateway-wide counters and histograms. */
typedef struct gw_metrics {
    uint64_t connections_opened;           /* WebSocket connections accepted */
    uint64_t connections_refused;          /* upgrades refused (bad key, draining, full) */
    uint64_t http_requests;                /* plain HTTP requests routed */
    uint64_t backpressure_pauses;          /* sessions paused because their client was behind */
    uint64_t output_limit_closes;          /* connections closed with 1008 for not reading */
    uint64_t output_tokens;                /* tokens as the gateway forwards them (all tenants) */
    gw_hist ttft;                          /* response.create received -> first output token */
    gw_hist inter_token;                   /* between two output tokens of one response */
    gw_hist queue;                         /* response.create received -> handed to the engine */
    gw_hist e2e;                           /* response.create received -> response.done */
} gw_metrics;

typedef struct gw_tenant gw_tenant;
/* Counts a refusal of tenant t (may be NULL: ignored) by verdict (out-of-range verdicts ignored). */
void gw_metrics_count_rejection(gw_tenant *t, fg_quota_verdict verdict);

/* Writes the whole exposition into a new malloc'd NUL-terminated string
 * (*len bytes). Service thread. Errors: FG_ERR_NOMEM. */
fg_err gw_metrics_render(fg_gateway_t *gw, char **text, size_t *len);

/* Per-tenant KV bytes by tier for tenant index t: the one place these are read
 * (see metrics.c). */
void gw_metrics_tenant_kv(fg_gateway_t *gw, int t, uint64_t *resident_bytes, uint64_t *disk_bytes);

/* Interns every tenant the configuration or the quota cache knows, so each
 * has its series from the start (zeros) rather than from its first session. */
void gw_metrics_intern_tenants(fg_gateway_t *gw);

#endif
