/* quota_internal.h: what the policies/quota*.c files share. Not a public header.
 *
 * Threads and ownership:
 *   - any thread: the public calls in quota.c push an fg_qreq onto q->in
 *     (under q->mu) and wake the quota thread; fg_quota_poll() takes q->done.
 *   - the quota thread (quota_thread.c) owns the Redis connection (q->conn),
 *     the leases this instance holds (q->tenants), the journal and the
 *     backstops; nothing else touches them.
 *   - the tenant cache (q->cache, q->seeds) is written by the quota thread
 *     and by fg_quota_tenant_seed(), read by the lookups, under q->cache_mu.
 *
 * Redis key layout (docs/quotas.md has the full table):
 *   {tenant:ID}:config        hash: name, weight, fail_mode, and one field per limit
 *   {tenant:ID}:keys          set of hex SHA-256 of the tenant's API keys
 *   {tenant:ID}:sessions      zset: "<instance>:<session id>" -> lease expiry, ms of Redis TIME
 *   {tenant:ID}:responses     zset: "<instance>:<response key>" -> lease expiry, ms
 *   {tenant:ID}:tpm           string: GCRA tat, microseconds of Redis TIME
 *   {tenant:ID}:daily:<YYYYMMDD>  string: tokens counted that UTC day (expires after 2 days)
 *   {tenant:ID}:usage:total   string: lifetime tokens used
 *   {tenant:ID}:replayed      zset: journal entry id -> ms applied (replay idempotence)
 *   flashgate:tenants         set of tenant ids
 *   flashgate:tenants:version counter, INCRed on every admin change
 *   flashgate:keyhash:<sha>   string: the tenant id owning the key with that hex SHA-256
 *   {tenant:ID}:loc:<session> string "<epoch> <instance> <url>": the session's holder (session_dir.h), PX ttl
 *   {tenant:ID}:loc_epochs    hash: session id -> the last directory epoch handed out
 *   {flashgate:instances}:live  zset: instance id -> its record's expiry, ms of Redis TIME (session_dir.h)
 *   {flashgate:instances}:load  hash: instance id -> its record (fg_dir_record_parse)
 * Every script's keys are one tenant's (one Redis Cluster slot); the global
 * flashgate:* keys are only ever touched one key per command.
 */
#ifndef FG_QUOTA_INTERNAL_H
#define FG_QUOTA_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "config/base/clock.h"
#include "policies/backstop.h"
#include "policies/quota.h"
#include "policies/quota_scripts.h"
#include "policies/redis_link.h"
#include "policies/session_dir.h"
#include "policies/sha256.h"

#define FG_QUOTA_KEY_MAX 200       /* bytes of a session id or response key (printable ASCII) */
#define FG_QUOTA_INSTANCE_LEN 16   /* hex digits of an instance id */
#define FG_QUOTA_MEMBER_MAX (FG_QUOTA_INSTANCE_LEN + 1 + FG_QUOTA_KEY_MAX)
#define FG_QUOTA_QUEUE_MAX 65536   /* queued requests before new admissions are refused */
#define FG_QUOTA_BATCH_MAX 512     /* requests pipelined in one round trip */
#define FG_QUOTA_REDIS_KEY_MAX 160 /* bytes of a Redis key name we build */
#define FG_QUOTA_REFRESH_MS 1000   /* tenant cache version check period */
#define FG_QUOTA_FULL_RELOAD_MS 30000 /* full tenant reload even without a version change */
#define FG_QUOTA_BACKOFF_MIN_MS 100
#define FG_QUOTA_BACKOFF_MAX_MS 2000

/* ---- requests ---- */

typedef enum fg_qreq_kind {
    FG_QREQ_SESSION_OPEN,
    FG_QREQ_SESSION_CLOSE,
    FG_QREQ_RESERVE,
    FG_QREQ_SETTLE,
    FG_QREQ_SEED,
    FG_QREQ_PUT,
    FG_QREQ_CREATE,
    FG_QREQ_DELETE,
    FG_QREQ_KEY_ADD,
    FG_QREQ_KEY_REVOKE,
    FG_QREQ_USAGE,
    FG_QREQ_DIR_CLAIM,   /* session_dir.h */
    FG_QREQ_DIR_RELEASE,
} fg_qreq_kind;

/* One call, from the caller's thread through the quota thread and back
 * (lifetime: the call until its callback has run in fg_quota_poll()). */
typedef struct fg_qreq {
    struct fg_qreq *next;
    fg_qreq_kind kind;
    char tenant[FG_NAME_MAX + 1];
    char member[FG_QUOTA_MEMBER_MAX + 1];    /* "<instance>:<key>" (sessions, responses) */
    char key_hash[FG_SHA256_HEX_LEN + 1];    /* key add / revoke */
    int64_t reserve_tokens, used_tokens;     /* tokens */
    int64_t kv_bytes;                        /* bytes */
    int64_t context_tokens, max_output_tokens;
    fg_tenant_record rec;                    /* seed, put, create */
    char (*seed_hashes)[FG_SHA256_HEX_LEN + 1]; /* seed: hex SHA-256 of its keys */
    size_t n_seed_hashes;
    fg_quota_cb cb;
    fg_quota_usage_cb usage_cb;
    fg_dir_cb dir_cb;
    void *user;
    /* the session directory: the session id is in member */
    fg_dir_mode dir_mode;
    uint64_t dir_epoch;                      /* take: the epoch the look saw; release: the one held */
    bool dir_forget;                         /* release: drop the epoch too */
    fg_quota_verdict reject;                 /* set by the caller's side for malformed input:
                                                the quota thread answers it as is */
    /* filled by the quota thread */
    fg_quota_result result;
    bool usage_ok;
    fg_tenant_usage usage;
    fg_dir_result dir;
} fg_qreq;

void fg_qreq_free(fg_qreq *r);
/* Queues r for the quota thread (quota.c; an admission is answered at once when the queue is full). */
void fg_qreq_enqueue(struct fg_quota *q, fg_qreq *r);

/* ---- commands (quota_conn.c) ---- */

/* One Redis command under construction: arguments back to back in buf. */
typedef struct fg_qcmd {
    char *buf;
    size_t len, cap;        /* bytes used, allocated */
    size_t *off;            /* argument i starts at buf + off[i] and is off[i+1] - off[i] long */
    int argc, argv_cap;
    int script;             /* fg_qscript_id for EVALSHA (argument 1 is filled at send), -1 otherwise */
    bool oom;               /* an allocation failed: the command must not be sent */
} fg_qcmd;

void fg_qcmd_init(fg_qcmd *c);
void fg_qcmd_free(fg_qcmd *c);
void fg_qcmd_reset(fg_qcmd *c);
void fg_qcmd_arg(fg_qcmd *c, const char *s, size_t n);
void fg_qcmd_str(fg_qcmd *c, const char *s);
void fg_qcmd_i64(fg_qcmd *c, int64_t v);
/* Starts "EVALSHA <sha of id> <nkeys>": add the keys, then the arguments. */
void fg_qcmd_script(fg_qcmd *c, fg_qscript_id id, int nkeys);

/* ---- the connection (quota_conn.c; quota thread only) ---- */

typedef struct fg_qconn {
    fg_rlink_t *link;                   /* single, sentinel or cluster (redis_link.h) */
    char sha[FG_QSCRIPT__COUNT][41];    /* SHA1 hex of each script, from SCRIPT LOAD */
    int64_t next_attempt_us;            /* CLOCK_MONOTONIC us of the next connect attempt */
    int backoff_ms;                     /* wait after the next failed attempt */
    int64_t connected_us;               /* CLOCK_MONOTONIC us of the last successful connect */
    int64_t clock_offset_us;            /* Redis TIME minus local CLOCK_REALTIME, us */
    bool ever_connected;
    const char **argv;                  /* scratch for redisFormatCommandArgv */
    size_t *argvlen;
    int argv_cap;
    fg_rlink_cmd *rcmds;                /* scratch: one batch formatted for the link */
    size_t rcmds_cap;
} fg_qconn;

struct fg_quota;

/* Connects when disconnected and the backoff has passed: socket with the
 * connect timeout, command timeout, scripts loaded, clock offset measured
 * (one pipelined round trip). True when connected afterwards and this call
 * made the connection. */
bool fg_qconn_connect_if_due(struct fg_quota *q, int64_t now_us);
/* Drops the connection (after an I/O error or timeout) and schedules a reconnect. */
void fg_qconn_drop(struct fg_quota *q, const char *why);
void fg_qconn_close(struct fg_quota *q);
static inline bool fg_qconn_up(const struct fg_quota *q);

/* Sends n commands pipelined in one round trip (plus one more if Redis
 * answers NOSCRIPT: those are sent again as EVAL of the source) and stores
 * each reply (caller frees with freeReplyObject). On a connection failure
 * the connection is dropped and the replies not received stay NULL. Returns
 * the number of replies received. */
size_t fg_qconn_exec(struct fg_quota *q, fg_qcmd *const *cmds, size_t n, redisReply **replies);
/* One command; NULL on a connection failure. */
redisReply *fg_qconn_exec1(struct fg_quota *q, fg_qcmd *cmd);

/* Redis's clock as this instance estimates it (last measured offset). */
int64_t fg_quota_redis_now_us(const struct fg_quota *q);
/* Records Redis TIME seen in a reply (ms) to keep the offset fresh. */
void fg_quota_note_redis_ms(struct fg_quota *q, int64_t redis_ms);

/* ---- leases held and per-tenant thread state ---- */

typedef struct fg_qlease {
    char *member;       /* "<instance>:<key>" */
    uint64_t hash;      /* FNV-1a of member */
    int64_t reserved;   /* responses: tokens charged at reserve */
    int64_t day;        /* responses: UTC day (days since the epoch) charged */
    bool in_redis;      /* responses: lease and charge are in Redis (false: the backstop admitted it) */
    /* directory leases (member "<tenant> <session id>", quota_dir.c) */
    uint64_t epoch;         /* 0: a new session's claim not answered yet */
    int64_t valid_until_us; /* CLOCK_MONOTONIC: writes of its file are allowed until then */
    bool lost;              /* another instance took it: its file is not ours to write */
} fg_qlease;

/* The leases of one kind one tenant holds here: an array (for renewal) with
 * an open-addressing index by member (for settle and close). */
typedef struct fg_qlease_vec {
    fg_qlease *v;
    size_t n, cap;
    uint32_t *slots;    /* linear probing; index into v + 1, 0 = empty */
    size_t n_slots;     /* a power of two, at least 2 * n */
} fg_qlease_vec;

/* quota_leases.c (quota thread only) */
fg_qlease *fg_qlease_find(fg_qlease_vec *v, const char *member);
/* Adds or updates the lease of member; false on NOMEM. */
bool fg_qlease_add(fg_qlease_vec *v, const char *member, int64_t reserved, int64_t day, bool in_redis);
/* Removes the lease of member into *out (caller frees out->member); false if not held. */
bool fg_qlease_take(fg_qlease_vec *v, const char *member, fg_qlease *out);
void fg_qlease_vec_free(fg_qlease_vec *v);

typedef struct fg_qtenant {
    char id[FG_NAME_MAX + 1];
    fg_qlease_vec sessions, responses;
    fg_backstop backstop;
} fg_qtenant;

struct fg_quota;
/* The state of tenant id, or NULL; _get creates it (NULL only when out of memory). */
fg_qtenant *fg_qtenant_find(struct fg_quota *q, const char *id);
fg_qtenant *fg_qtenant_get(struct fg_quota *q, const char *id);
void fg_qtenant_free(fg_qtenant *t);

/* Scratch of one enforcement batch, allocated with the quota (quota thread only). */
typedef struct fg_qslot {
    fg_qreq *r;
    fg_qlease lease;   /* settle: the lease taken from the held set */
    bool has_cmd;      /* a command of this request is in the pipeline */
} fg_qslot;

typedef struct fg_qbatch {
    fg_qslot slot[FG_QUOTA_BATCH_MAX];
    fg_qcmd cmd[FG_QUOTA_BATCH_MAX];       /* buffers kept from batch to batch */
    fg_qcmd *ptr[FG_QUOTA_BATCH_MAX];
    redisReply *rep[FG_QUOTA_BATCH_MAX];
} fg_qbatch;

/* quota_enforce.c: runs n <= FG_QUOTA_BATCH_MAX enforcement requests (one
 * round trip) and finishes them. */
void fg_qenforce_batch(struct fg_quota *q, fg_qreq **reqs, size_t n);

/* ---- the session directory (quota_dir.c) ---- */

typedef struct fg_qdir {
    bool on;                              /* set by fg_quota_dir_enable before any other dir call */
    char instance[FG_NAME_MAX + 1];
    char url[FG_DIR_URL_MAX + 1];
    int ttl_ms;
    pthread_mutex_t mu;                   /* guards the fields below (any thread) */
    fg_qlease_vec held;                   /* leases of this instance, lost ones kept (fencing) */
    fg_dir_lost *lost;                    /* found lost, not yet taken by the owner */
    size_t n_lost, cap_lost;
    fg_dir_stats stats;
    int64_t next_renew_us;                /* quota thread only */
    /* the cluster view (quota_instances.c), under mu */
    fg_dir_load load;                     /* what the next publish sends */
    fg_dir_instance *view;                /* FG_DIR_INSTANCES_MAX entries, replaced by each answer */
    size_t n_view;
    int64_t view_mono_us;                 /* when the view was read; 0: never */
    int64_t next_publish_us;              /* quota thread only */
} fg_qdir;

/* Quota thread: runs n directory requests (one round trip) and finishes them. */
void fg_qdir_batch(struct fg_quota *q, fg_qreq **reqs, size_t n);
/* Quota thread: renews every held lease when due (one call per tenant). */
void fg_qdir_renew_due(struct fg_quota *q, int64_t now_us, bool force);
void fg_qdir_free(struct fg_quota *q);
/* Printable, no spaces, under FG_DIR_URL_MAX bytes (a lease or record splits on spaces). */
bool fg_qdir_url_valid(const char *u);
/* Quota thread: publishes this instance's load and reads the view when due (quota_instances.c). */
void fg_qdir_publish_due(struct fg_quota *q, int64_t now_us);

/* ---- journal (quota_journal.c; quota thread only) ---- */

typedef struct fg_qjentry {
    char kind;                               /* 'S': settle of a reservation held in Redis;
                                                'U': usage admitted by the backstop */
    char tenant[FG_NAME_MAX + 1];
    char member[FG_QUOTA_MEMBER_MAX + 1];    /* 'S': the lease; 'U': a unique entry id */
    int64_t day;                             /* UTC day the tokens count in, days since the epoch */
    int64_t reserved, used;                  /* tokens */
    int64_t ts_ms;                           /* when, ms of (estimated) Redis TIME */
} fg_qjentry;

typedef struct fg_qjournal {
    fg_qjentry *v;
    size_t n, cap;
    int fd;           /* append-only file, -1: memory only */
    uint64_t seq;     /* next 'U' entry number */
} fg_qjournal;

fg_err fg_qjournal_open(fg_qjournal *j, const char *path, fg_diag *d);
void fg_qjournal_close(fg_qjournal *j);
/* Appends in memory and, with a file, writes and fsyncs the line. False on NOMEM. */
bool fg_qjournal_append(struct fg_quota *q, const fg_qjentry *e);
/* Replays every entry (idempotent scripts), then empties the journal and
 * truncates the file. False when the connection failed (entries kept). */
bool fg_qjournal_replay(struct fg_quota *q);

/* ---- tenant cache (quota_cache.c) ---- */

typedef struct fg_qcache_key {
    uint8_t hash[FG_SHA256_BYTES];
    uint32_t tenant;   /* index into tenants */
} fg_qcache_key;

typedef struct fg_qcache {
    fg_tenant_record *tenants;  /* sorted by id */
    size_t n_tenants;
    fg_qcache_key *keys;
    size_t n_keys;
} fg_qcache;

/* A tenant given to fg_quota_tenant_seed() and not yet written to Redis:
 * the cache shows it until Redis has it (so fail-open works from start-up). */
typedef struct fg_qseed {
    struct fg_qseed *next;
    fg_tenant_record rec;
    uint8_t (*hashes)[FG_SHA256_BYTES];
    size_t n_hashes;
} fg_qseed;

void fg_qcache_free(fg_qcache *c);
/* Builds the cache from Redis (one GET when the version is unchanged; else
 * SMEMBERS and one pipelined round trip) and swaps it in. force: reload even
 * when the version did not change. False on a connection failure. */
bool fg_qcache_refresh(struct fg_quota *q, bool force);
/* Rebuilds the cache with the current seeds merged in (after seeding). */
void fg_qcache_merge_seeds(struct fg_quota *q);
/* Copies the record of id; false if unknown. Takes q->cache_mu. */
bool fg_qcache_get(struct fg_quota *q, const char *id, fg_tenant_record *out);

/* ---- admin (quota_admin.c; quota thread) ---- */

void fg_qadmin_handle(struct fg_quota *q, fg_qreq *r);
/* Writes seeds still pending to Redis; false on a connection failure. */
bool fg_qadmin_run_seeds(struct fg_quota *q);

/* ---- keys and names (quota_keys.c) ---- */

bool fg_quota_valid_key(const char *key);  /* session id / response key */
/* "{tenant:ID}:suffix" into buf (FG_QUOTA_REDIS_KEY_MAX bytes). */
void fg_qkey(char *buf, const char *tenant, const char *suffix);
/* "{tenant:ID}:daily:YYYYMMDD" of day (days since the epoch, UTC). */
void fg_qkey_daily(char *buf, const char *tenant, int64_t day);
/* Appends the key fg_qkey / fg_qkey_daily names as a command argument. */
void fg_qcmd_key(fg_qcmd *c, const char *tenant, const char *suffix);
void fg_qcmd_key_daily(fg_qcmd *c, const char *tenant, int64_t day);
/* Field values of a record in the config hash, and back. */
void fg_qcmd_config_fields(fg_qcmd *c, const fg_tenant_record *t);
void fg_qconfig_parse(const redisReply *hgetall, const char *id, fg_tenant_record *out);


/* ---- the quota object ---- */

struct fg_quota {
    /* set by create, read-only after */
    int timeout_ms;               /* connect and command timeout */
    int lease_ttl_ms;
    int expected_instances;
    fg_quota_notify_fn notify;
    void *notify_user;
    char instance[FG_QUOTA_INSTANCE_LEN + 1]; /* random hex, prefixes every lease member */

    pthread_t thread;
    pthread_mutex_t mu;           /* guards: in, done, n_in, stop, stats */
    pthread_cond_t cv;            /* CLOCK_MONOTONIC: wakes the quota thread */
    fg_qreq *in_head, *in_tail;
    size_t n_in;
    fg_qreq *done_head, *done_tail;
    bool stop;
    fg_quota_stats stats;

    pthread_mutex_t cache_mu;     /* guards: cache, seeds */
    fg_qcache cache;
    fg_qseed *seeds;

    /* quota thread only */
    fg_qreq *out_head, *out_tail; /* finished this round, moved to done at its end */
    fg_qbatch *batch;             /* enforcement scratch */
    fg_qconn conn;
    fg_qjournal journal;
    fg_qtenant **tenants;         /* sorted by id */
    size_t n_tenants, cap_tenants;
    char cache_version[32];       /* flashgate:tenants:version of the loaded cache */
    int64_t next_refresh_us, next_full_reload_us, next_renew_us, next_replay_us; /* CLOCK_MONOTONIC */
    bool seeds_pending;           /* a seed request arrived, or a seed failed: run seeds */
    int64_t next_seed_us;         /* not before (an error reply, e.g. Redis still loading) */
    fg_qdir dir;                  /* the session directory (off unless enabled) */
};

static inline bool fg_qconn_up(const struct fg_quota *q)
{
    return fg_rlink_up(q->conn.link);
}

/* quota_thread.c */
void *fg_quota_thread_main(void *arg);
/* Hands a finished request (callback pending) to the owner's fg_quota_poll(). */
void fg_quota_finish(struct fg_quota *q, fg_qreq *r);
/* Counters under q->mu. */
void fg_quota_stat_calls(struct fg_quota *q, uint64_t commands, double ms);
void fg_quota_stat_error(struct fg_quota *q, const char *what);
/* Counts an error reply (or an unexpected one) to `what`. */
void fg_quota_stat_reply_error(struct fg_quota *q, const char *what, const redisReply *r);

#endif
