/* quota.h: tenant quotas in Redis, shared by every gateway instance.
 *
 * Tenants (name, weight, limits, fail mode) and their API keys (stored as
 * SHA-256 hashes) live in Redis under hash-tagged keys "{tenant:ID}:..." so a
 * tenant's keys share one Redis Cluster slot. Limits are enforced by Lua
 * scripts on Redis's clock (loaded once, called by SHA), so every gateway
 * agrees: concurrent sessions and responses are leases that expire unless
 * renewed (a crashed gateway's leases age out); tokens per minute is GCRA;
 * the daily budget resets at UTC midnight.
 *
 * Redis is touched per session open/close, per response (reserve at
 * response.create, settle at response.done) and per lease renewal (batched),
 * never per generated token.
 *
 * Threads: one quota thread owns the Redis link (redis_link.h: a single
 * server, a Sentinel-discovered master or a Redis Cluster; connect and
 * command timeouts, reconnecting with backoff). Every call below is
 * non-blocking and thread-safe: requests are queued to the quota thread;
 * results come back through a queue that the owner drains with
 * fg_quota_poll() on its own thread after the notify callback fires (the
 * gateway's callback calls lws_cancel_service()).
 *
 * Redis unreachable: each tenant follows its fail mode. "open" (default)
 * admits within a local per-instance backstop (the tenant's limits divided by
 * an expected instance count) and journals usage; "closed" refuses new
 * sessions and responses with FG_QUOTA_UNAVAILABLE while running responses
 * finish. When Redis returns, the journal is replayed so totals are right.
 */
#ifndef FG_QUOTA_H
#define FG_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/base/name.h"
#include "config/fg_error.h"
#include "policies/redis_link.h"

typedef struct fg_quota fg_quota_t;

/* Limits of one tenant; 0 means unlimited for every count. */
typedef struct fg_tenant_limits {
    int64_t max_sessions;        /* concurrent sessions */
    int64_t max_responses;       /* concurrent responses */
    int64_t tokens_per_minute;   /* input + output tokens, GCRA over a 60 s window */
    int64_t daily_tokens;        /* input + output tokens per UTC day */
    int64_t max_kv_bytes;        /* resident KV cache bytes (checked at response start) */
    int64_t max_context_tokens;  /* per session */
    int64_t max_output_tokens;   /* per response */
    int64_t weight;              /* scheduling weight 1..1000 (default 1) */
    bool fail_closed;            /* when Redis is unreachable: refuse (true) or admit within the backstop */
} fg_tenant_limits;

#define FG_TENANT_NAME_MAX 128

typedef struct fg_tenant_record {
    char id[FG_NAME_MAX + 1];
    char name[FG_TENANT_NAME_MAX + 1];
    fg_tenant_limits limits;
} fg_tenant_record;

/* Why a request was refused. */
typedef enum fg_quota_verdict {
    FG_QUOTA_OK = 0,
    FG_QUOTA_SESSIONS,           /* concurrent sessions */
    FG_QUOTA_RESPONSES,          /* concurrent responses */
    FG_QUOTA_TOKENS_PER_MINUTE,
    FG_QUOTA_DAILY_TOKENS,
    FG_QUOTA_KV_BYTES,
    FG_QUOTA_CONTEXT,            /* the session would exceed max_context_tokens */
    FG_QUOTA_OUTPUT,             /* max_output_tokens above the tenant's limit */
    FG_QUOTA_UNAVAILABLE,        /* Redis unreachable and the tenant fails closed */
    FG_QUOTA_UNKNOWN_TENANT,
    FG_QUOTA_INVALID,            /* a malformed tenant id, session id, response key or record,
                                    or an API key that belongs to another tenant */
} fg_quota_verdict;

/* Stable snake_case name of a verdict ("tokens_per_minute"). */
const char *fg_quota_verdict_name(fg_quota_verdict v);

/* One limit's state, for the protocol's rate_limits.updated. */
typedef struct fg_quota_limit_state {
    const char *name;            /* "tokens_per_minute", "daily_tokens", "sessions", "responses" */
    int64_t limit, remaining;
    double reset_seconds;
} fg_quota_limit_state;

#define FG_QUOTA_MAX_STATES 4

/* The answer to one request, handed to its callback on the owner's thread. */
typedef struct fg_quota_result {
    fg_quota_verdict verdict;
    double retry_after;          /* seconds until a retry can succeed: exact for tokens per
                                    minute, to UTC midnight for the daily budget, a 1 s hint for
                                    sessions, responses and KV bytes; 0 when waiting cannot help */
    bool degraded;               /* decided locally: Redis was unreachable */
    int n_states;
    fg_quota_limit_state states[FG_QUOTA_MAX_STATES];
} fg_quota_result;

typedef void (*fg_quota_cb)(void *user, const fg_quota_result *r);
typedef void (*fg_quota_notify_fn)(void *user);

typedef struct fg_quota_options {
    fg_rlink_mode redis_mode;    /* single (redis_address), sentinel or cluster (redis_nodes) */
    const char *redis_address;   /* single: "host:port" or "/path/to/socket" */
    const char *const *redis_nodes; /* sentinel: the sentinels; cluster: seed nodes ("host:port") */
    size_t n_redis_nodes;
    const char *redis_master_name; /* sentinel: the master's name */
    int timeout_ms;              /* connect and command timeout */
    int lease_ttl_ms;            /* leases expire this long after the last renewal (default 30000) */
    int expected_instances;      /* divides limits into the local fail-open backstop (default 1) */
    const char *journal_path;    /* fail-open usage journal (NULL: in memory only) */
    fg_quota_notify_fn notify;   /* called from the quota thread when results are ready (and from
                                    the calling thread when a call is refused at once: queue full) */
    void *notify_user;
} fg_quota_options;

/* Starts the quota thread; connecting happens in the background (an
 * unreachable Redis is not an error here). Errors: FG_ERR_INVALID_ARG, FG_ERR_NOMEM. */
fg_err fg_quota_create(const fg_quota_options *o, fg_quota_t **out, fg_diag *diag);
/* Flushes pending settlements (bounded by the timeout), stops the thread.
 * Leases still held are not released (they expire after lease_ttl_ms, as a
 * crashed gateway's would): close sessions first for a clean stop. Answers
 * not yet polled are dropped without running their callbacks. */
void fg_quota_destroy(fg_quota_t *q);

/* Runs the callbacks of every finished request on the calling thread. */
void fg_quota_poll(fg_quota_t *q);

/* ---- tenants and keys (admin) ---- */

/* Writes the tenant only if it does not exist yet (config seeding). */
void fg_quota_tenant_seed(fg_quota_t *q, const fg_tenant_record *t, const char *const *api_keys, size_t n_keys);
/* Creates or replaces; callback verdict FG_QUOTA_OK or FG_QUOTA_UNAVAILABLE. */
void fg_quota_tenant_put(fg_quota_t *q, const fg_tenant_record *t, fg_quota_cb cb, void *user);
/* Creates only if the tenant does not exist, atomically in Redis (of several
 * concurrent creations of one id, across gateways, one succeeds); callback
 * verdict FG_QUOTA_OK, FG_QUOTA_INVALID when the tenant exists or the record
 * is malformed, or FG_QUOTA_UNAVAILABLE. */
void fg_quota_tenant_create(fg_quota_t *q, const fg_tenant_record *t, fg_quota_cb cb, void *user);
void fg_quota_tenant_delete(fg_quota_t *q, const char *tenant_id, fg_quota_cb cb, void *user);
void fg_quota_key_add(fg_quota_t *q, const char *tenant_id, const char *api_key, fg_quota_cb cb, void *user);
void fg_quota_key_revoke(fg_quota_t *q, const char *tenant_id, const char *api_key, fg_quota_cb cb, void *user);

/* Local, non-blocking lookups from the tenant cache the quota thread keeps
 * fresh (refreshed every second and after each admin change on this instance). */
bool fg_quota_tenant_by_key(fg_quota_t *q, const char *api_key, fg_tenant_record *out);
bool fg_quota_tenant_get(fg_quota_t *q, const char *tenant_id, fg_tenant_record *out);
/* Copies up to max tenant records; returns the number of tenants. */
size_t fg_quota_tenant_list(fg_quota_t *q, fg_tenant_record *out, size_t max);

/* ---- enforcement ---- */

/* A session lease (concurrent sessions). */
void fg_quota_session_open(fg_quota_t *q, const char *tenant_id, const char *session_id, fg_quota_cb cb, void *user);
void fg_quota_session_close(fg_quota_t *q, const char *tenant_id, const char *session_id);

/* At response.create: a response lease plus a token reservation (prompt +
 * max output) against tokens per minute and the daily budget; kv_bytes is the
 * tenant's resident KV now (checked against max_kv_bytes); context_tokens the
 * session's length after this response at most. */
void fg_quota_response_reserve(fg_quota_t *q, const char *tenant_id, const char *response_key,
                               int64_t reserve_tokens, int64_t kv_bytes, int64_t context_tokens,
                               int64_t max_output_tokens, fg_quota_cb cb, void *user);
/* At response.done: settles to the tokens actually used and releases the lease.
 * The reservation charged at reserve is what is settled (reserved_tokens is
 * the caller's copy of it). Journaled when Redis cannot take it. */
void fg_quota_response_settle(fg_quota_t *q, const char *tenant_id, const char *response_key,
                              int64_t reserved_tokens, int64_t used_tokens);

/* Live usage of a tenant, read from Redis (admin API). */
typedef struct fg_tenant_usage {
    int64_t sessions, responses;             /* live leases (degraded: this instance's only) */
    int64_t tokens_last_minute_capacity_left; /* tokens reservable now; -1: no limit or degraded */
    int64_t daily_tokens_used;               /* today (UTC); -1 when degraded */
    bool degraded;                           /* Redis unreachable: this instance's view */
} fg_tenant_usage;
typedef void (*fg_quota_usage_cb)(void *user, bool ok, const fg_tenant_usage *u);
void fg_quota_tenant_usage(fg_quota_t *q, const char *tenant_id, fg_quota_usage_cb cb, void *user);

/* ---- health ---- */

#define FG_QUOTA_RTT_BUCKETS 16
#define FG_QUOTA_RTT_BASE_S 0.0001 /* the first round-trip bucket's bound, seconds */

typedef struct fg_quota_stats {
    bool connected;
    uint64_t calls, errors, reconnects;  /* calls: Redis commands sent */
    uint64_t round_trips;        /* pipelined exchanges with Redis (one may carry many calls) */
    uint64_t journal_entries;    /* usage waiting for replay */
    uint64_t degraded;           /* session opens and reserves decided locally (Redis unreachable) */
    uint64_t redirects;          /* Redis Cluster MOVED and ASK replies followed */
    uint64_t master_discoveries; /* masters found through Sentinel */
    double last_call_ms;         /* duration of the last round trip */
    /* round-trip times: counts per bucket (not cumulative), bucket i <=
     * FG_QUOTA_RTT_BASE_S * 2^i seconds, the last bucket the rest */
    uint64_t rtt_hist[FG_QUOTA_RTT_BUCKETS];
    double rtt_seconds_sum;
    char last_error[128];        /* the last Redis problem, "" if none */
} fg_quota_stats;
void fg_quota_get_stats(fg_quota_t *q, fg_quota_stats *st);

#endif
