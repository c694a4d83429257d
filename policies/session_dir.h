/* session_dir.h: the session location directory in Redis: which gateway
 * instance holds which session, so that a resume reaching another instance is
 * redirected to the holder, or, when the holder is gone, migrated (the
 * session's file read from the persistence directory the instances share).
 *
 * Each session has a lease "{tenant:ID}:loc:<session id>" (value "<epoch>
 * <instance> <url>", expiring lease_ttl after its last renewal) and an epoch
 * in "{tenant:ID}:loc_epochs" (never expiring while the session lives, so
 * every new holder gets a higher epoch than any before it). Both keys carry
 * the tenant's hash tag like the quota keys (one Redis Cluster slot).
 *
 * The directory rides on the quota module (its thread and Redis connection):
 * claims are asynchronous like the quota calls and answer through
 * fg_quota_poll() on the owner's thread; renewals of every held lease go out
 * every lease_ttl / 3, one script call per tenant.
 *
 * Fencing: fg_quota_dir_may_write() (any thread: the engine's writer thread
 * calls it before each write of a session's file) says whether this instance
 * can still be sure it holds the session: its lease is not known lost, and
 * less than 3/4 of lease_ttl has passed (this host's monotonic clock) since
 * the last claim or renewal was sent. A lease is taken over only after it
 * expired in Redis, which is at least lease_ttl after that send, so a write
 * allowed here starts a quarter of the ttl before any other instance can own
 * the session (docs/deploy.md, "Sessions across instances", has the
 * assumptions: clocks that run at the same rate, a write that takes less than
 * lease_ttl / 4).
 */
#ifndef FG_SESSION_DIR_H
#define FG_SESSION_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/base/name.h"
#include "policies/quota.h"

#define FG_DIR_URL_MAX 255

typedef struct fg_dir_options {
    const char *instance_id;     /* this instance's name in the directory ([A-Za-z0-9_-], unique) */
    const char *advertise_url;   /* where clients reach it ("ws://10.0.0.5:8080"; printable, no spaces) */
    int lease_ttl_ms;            /* a lease expires this long after its last renewal */
} fg_dir_options;

/* Turns the directory on (before any other dir call; once). Errors:
 * FG_ERR_INVALID_ARG (an id or url the rules above refuse, a ttl outside
 * 300..3600000 ms), FG_ERR_NOMEM. */
fg_err fg_quota_dir_enable(fg_quota_t *q, const fg_dir_options *o, fg_diag *diag);
bool fg_quota_dir_enabled(const fg_quota_t *q);

typedef enum fg_dir_state {
    FG_DIR_FREE = 0,             /* look: nobody holds the session (epoch: the last one handed out, 0: none) */
    FG_DIR_HELD = 1,             /* this instance holds it now, with epoch */
    FG_DIR_ELSEWHERE = 2,        /* another live instance holds it: owner, owner_url, epoch */
    FG_DIR_LOST_RACE = 3,        /* take: another instance took it since the look (owner set if it still holds it) */
    FG_DIR_UNAVAILABLE = 4,      /* Redis unreachable, or the request was malformed */
} fg_dir_state;

typedef struct fg_dir_result {
    fg_dir_state state;
    uint64_t epoch;
    char owner[FG_NAME_MAX + 1];
    char owner_url[FG_DIR_URL_MAX + 1];
} fg_dir_result;

typedef void (*fg_dir_cb)(void *user, const fg_dir_result *r);

typedef enum fg_dir_mode {
    FG_DIR_NEW,                  /* a session just made here (a fresh random id): take it, no answer needed */
    FG_DIR_LOOK,                 /* who holds it? (held by this instance already: renewed, FG_DIR_HELD) */
    FG_DIR_TAKE,                 /* take it if still free with the epoch a look saw: exactly one taker wins */
} fg_dir_mode;

/* Asks the directory about tenant's session; cb (may be NULL for FG_DIR_NEW)
 * runs in fg_quota_poll(). expect_epoch: FG_DIR_TAKE's, from the look. On
 * FG_DIR_HELD this instance keeps the lease renewed until fg_quota_dir_release. */
void fg_quota_dir_claim(fg_quota_t *q, const char *tenant_id, const char *session_id, fg_dir_mode mode,
                        uint64_t expect_epoch, fg_dir_cb cb, void *user);
/* Gives the lease back (the session leaves this instance): forget also drops
 * its epoch (the session is gone for good: closed, expired). */
void fg_quota_dir_release(fg_quota_t *q, const char *tenant_id, const char *session_id, bool forget);

/* Any thread. Whether this instance may write the session's file now (see
 * the top comment). A session this instance never claimed is allowed (its
 * file is not in the directory: written before the directory was on). */
bool fg_quota_dir_may_write(fg_quota_t *q, const char *tenant_id, const char *session_id);

/* Sessions whose lease a renewal found taken by another instance since the
 * last call: up to max "tenant\0session" pairs copied into out. Returns the
 * count; the owner drops them (their file is the new holder's now). */
typedef struct fg_dir_lost {
    char tenant[FG_NAME_MAX + 1];
    char session[FG_NAME_MAX + 1];
} fg_dir_lost;
size_t fg_quota_dir_take_lost(fg_quota_t *q, fg_dir_lost *out, size_t max);

typedef struct fg_dir_stats {
    uint64_t held;               /* leases held now */
    uint64_t claims, renewals, releases; /* Redis script calls of each kind */
    uint64_t fenced;             /* writes refused by fg_quota_dir_may_write */
    uint64_t lost;               /* leases found taken by another instance */
} fg_dir_stats;
void fg_quota_dir_get_stats(fg_quota_t *q, fg_dir_stats *st);

/* ---- the cluster view: every live instance and its load ----
 *
 * Each instance publishes its load once a second (FG_DIR_PUBLISH_MS) into
 * "{flashgate:instances}:load" (hash: instance id -> its record) with its
 * expiry in "{flashgate:instances}:live" (zset: instance id -> ms of Redis
 * TIME), both under one hash tag (one Redis Cluster slot). A record lives
 * max(lease_ttl, 3 publish periods) after its last publish, as long as the
 * instance's session leases can outlive it; the same script call that
 * publishes drops the expired records and reads the live ones, so the view
 * costs one Redis call per instance per second. */

#define FG_DIR_PUBLISH_MS 1000
#define FG_DIR_INSTANCES_MAX 64  /* instances in one view (past it: the soonest to expire) */
#define FG_DIR_RECORD_MAX 512    /* bytes of one published record */

typedef struct fg_dir_load {
    uint64_t leases;             /* session leases held in the directory (filled by policies) */
    uint64_t sessions;           /* open sessions: resident and on disk */
    uint64_t streaming;          /* responses decoding now */
    uint64_t kv_used_bytes;      /* resident KV in use, bytes */
    uint64_t kv_capacity_bytes;  /* the resident KV pool, bytes */
    uint64_t tokens_per_s_milli; /* output tokens per second over the last second, x 1000 */
    bool draining;               /* stopping: takes no new sessions */
} fg_dir_load;

typedef struct fg_dir_instance {
    char id[FG_NAME_MAX + 1];
    char url[FG_DIR_URL_MAX + 1];
    int64_t published_ms;        /* Redis TIME of its last publish, ms since the epoch */
    int64_t age_ms;              /* since that publish, when the view was read */
    int64_t expires_in_ms;       /* until it leaves the view unless it publishes again */
    bool self;                   /* this instance */
    fg_dir_load load;
} fg_dir_instance;

/* Any thread. The load this instance publishes from the next period on (its
 * leases field is ignored: the directory's count is sent). */
void fg_quota_dir_publish(fg_quota_t *q, const fg_dir_load *load);

/* Any thread. Copies the view the last publish read (up to max instances,
 * sorted by id) into out; returns the count, 0 before the first answer or
 * with the directory off. *view_age_ms (may be NULL): ms since that read,
 * this host's monotonic clock; -1 when there is none. */
size_t fg_quota_dir_instances(fg_quota_t *q, fg_dir_instance *out, size_t max, int64_t *view_age_ms);

/* A record as stored: "<published_ms> <url> <leases> <sessions> <streaming>
 * <kv_used> <kv_capacity> <tokens_per_s_milli> <draining 0|1>", decimal
 * integers, single spaces. format: the part after "<published_ms> " (the
 * publish script puts Redis's time in front); returns its length, 0 when it
 * does not fit. parse: the whole record (read from Redis: any bytes) into
 * out's url, published_ms and load; FG_ERR_INVALID_ARG (diag says which field) otherwise. */
size_t fg_dir_record_format(const char *url, const fg_dir_load *l, char *out, size_t cap);
fg_err fg_dir_record_parse(const char *s, size_t n, fg_dir_instance *out, fg_diag *diag);

#endif
