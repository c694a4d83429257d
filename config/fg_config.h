/* fg_config.h: flashgate's configuration — one JSON file, environment
 * overrides, and the checks between them.
 *
 * The order of a start-up is: fg_config_init_defaults(), then
 * fg_config_load_file() (the file overlays the defaults key by key), then
 * fg_config_apply_env() (FLASHGATE_<SECTION>_<KEY> overlays the result), then
 * fg_config_validate() (cross-field rules). Every key, its type, default,
 * range and meaning lives in one schema table (config/config_schema.c);
 * fg_config_print_reference() prints it, and docs/config.md is that text.
 *
 * Ownership: an fg_config owns its strings, lists and tenant array (defaults
 * point at static storage); fg_config_free() releases them. Do not copy an
 * fg_config by assignment and free both copies.
 *
 * Thread safety: a loaded config is read-only and may be read from any thread;
 * loading into one config must not overlap with readers of it.
 */
#ifndef FG_CONFIG_H
#define FG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/fg_error.h"

/* Most bytes of instructions a session may hold: its settings travel in the
 * session file's owner record (64 KiB at most), with room for the rest. */
#define FG_CONFIG_MAX_INSTRUCTIONS_BYTES 61440

/* Enum-valued keys store the index of the value in the schema's list of
 * names, so the order here is the order of the names there. */
typedef enum fg_config_kv_format {
    FG_CONFIG_KV_AUTO, /* the engine chooses for the model and backend */
    FG_CONFIG_KV_F32,
    FG_CONFIG_KV_F16,
    FG_CONFIG_KV_INT8,
    FG_CONFIG_KV_FP8,
    FG_CONFIG_KV_FP4,
} fg_config_kv_format;

typedef enum fg_config_backend {
    FG_CONFIG_BACKEND_CPU,
    FG_CONFIG_BACKEND_CUDA,
} fg_config_backend;

/* Ordered by severity, so `level <= FG_CONFIG_LOG_INFO` reads naturally. */
typedef enum fg_config_log_level {
    FG_CONFIG_LOG_DEBUG,
    FG_CONFIG_LOG_INFO,
    FG_CONFIG_LOG_WARN,
    FG_CONFIG_LOG_ERROR,
} fg_config_log_level;

/* How experts are laid out over ranks (topology.placement). */
typedef enum fg_config_placement {
    FG_CONFIG_PLACEMENT_CONTIGUOUS, /* rank r owns experts [r*E/R, (r+1)*E/R) */
    FG_CONFIG_PLACEMENT_STRIDED,    /* rank r owns experts e with e % R == r */
} fg_config_placement;

/* How expert-parallel ranks talk (topology.transport). */
typedef enum fg_config_transport {
    FG_CONFIG_TRANSPORT_INPROC, /* threads of this process */
    FG_CONFIG_TRANSPORT_NCCL,   /* one rank per GPU over NCCL (CUDA builds) */
} fg_config_transport;

/* A list of NUL-terminated strings. */
typedef enum fg_config_fail_mode {
    FG_CONFIG_FAIL_OPEN,   /* Redis unreachable: admit within a local backstop */
    FG_CONFIG_FAIL_CLOSED, /* Redis unreachable: refuse new sessions and responses */
} fg_config_fail_mode;

typedef struct fg_config_strlist {
    const char *const *items;
    size_t count;
} fg_config_strlist;

typedef struct fg_config_tenant {
    const char *id;             /* [A-Za-z0-9_-]{1,64}, unique */
    const char *name;           /* display name; the id when not given */
    fg_config_strlist api_keys; /* secrets: never log them */
    int64_t weight;             /* scheduling share, 1..1000 */
    int64_t priority;           /* -10..10, higher first */
    /* quota limits seeded into Redis when the tenant is not there yet; 0 = unlimited */
    int64_t max_sessions;       /* concurrent sessions */
    int64_t max_responses;      /* concurrent responses */
    int64_t tokens_per_minute;  /* input + output tokens */
    int64_t daily_tokens;       /* input + output tokens per UTC day */
    int64_t max_kv_bytes;       /* resident KV cache bytes */
    int64_t max_context_tokens; /* per session */
    int64_t max_output_tokens;  /* per response */
    fg_config_fail_mode fail_mode;
} fg_config_tenant;

typedef struct fg_config_server {
    const char *host;
    int64_t port;
    int64_t max_connections;
    int64_t drain_timeout_s;        /* seconds */
    const char *tls_cert_file;      /* PEM certificate (chain); "" = plain TCP only */
    const char *tls_key_file;       /* PEM private key of tls_cert_file */
    bool tls_allow_plain;           /* with TLS: the same port also answers plain HTTP/WebSocket */
} fg_config_server;

typedef struct fg_config_model {
    const char *path;
    fg_config_kv_format kv_format;
    int64_t kv_budget_bytes;        /* bytes */
    int64_t threads;                /* 0: one per online CPU */
    int64_t max_batch_tokens;       /* tokens per engine step */
    int64_t max_context;            /* tokens per session; 0: the model's */
    int64_t prefill_chunk;          /* prompt tokens per session per step */
    int64_t prefill_alone_tokens;   /* prompt tokens of a step that decodes nothing; 0: as any step */
    bool speculative;               /* speculative decoding on */
    int64_t speculative_drafts;     /* most draft tokens per session and step */
    fg_config_backend backend;
} fg_config_model;

typedef struct fg_config_sessions {
    int64_t idle_timeout_s;         /* seconds */
    int64_t resume_buffer_events;   /* server events kept per session */
    int64_t resume_buffer_bytes;    /* bytes of events kept per session, beyond the unsent */
    int64_t max_per_tenant;
    int64_t output_buffer_bytes;    /* bytes per connection: soft limit on unsent events */
    int64_t output_buffer_hard_bytes; /* bytes per connection: hard limit on unsent events */
    int64_t output_buffer_soft_s;   /* seconds above the soft limit before the close */
    int64_t default_max_output_tokens;
    int64_t max_instructions_bytes; /* bytes; 0: instructions refused */
} fg_config_sessions;

typedef struct fg_config_limits {
    int64_t max_frame_bytes;        /* bytes */
    double messages_per_second;     /* per connection, sustained */
    int64_t message_burst;          /* messages above the sustained rate */
} fg_config_limits;

typedef struct fg_config_auth {
    const char *admin_key;          /* secret; "" disables the admin API */
    const char *dashboard_key;      /* secret; "" asks no key */
    bool api_key_in_subprotocol;    /* a tenant's API key accepted as openai-insecure-api-key.KEY */
} fg_config_auth;

typedef struct fg_config_log {
    fg_config_log_level level;
} fg_config_log;

/* How Redis is deployed (the order of policies/redis_link.h's fg_rlink_mode). */
typedef enum fg_config_redis_mode {
    FG_CONFIG_REDIS_SINGLE,
    FG_CONFIG_REDIS_SENTINEL,
    FG_CONFIG_REDIS_CLUSTER,
} fg_config_redis_mode;

typedef struct fg_config_redis {
    fg_config_redis_mode mode;
    const char *address;            /* single: "host:port", "/unix/socket", or "": start our own */
    fg_config_strlist nodes;        /* sentinel: the sentinels; cluster: seed nodes ("host:port") */
    const char *master_name;        /* sentinel: the monitored master's name */
    int64_t timeout_ms;             /* milliseconds */
} fg_config_redis;

typedef struct fg_config_persistence {
    const char *dir;
    int64_t idle_spill_s;           /* seconds; 0: spill only under memory pressure */
    int64_t disk_budget_bytes;      /* bytes of session files; 0: unlimited */
} fg_config_persistence;

/* Several instances sharing one Redis and one persistence.dir: the session
 * directory (docs/deploy.md, "Sessions across instances"). */
typedef struct fg_config_cluster {
    const char *instance_id;        /* this instance's name in the directory; "" with advertise_url "" */
    const char *advertise_url;      /* where clients reach this instance; "": the directory is off */
    int64_t lease_ttl_ms;           /* milliseconds a session's lease outlives its holder's last renewal */
} fg_config_cluster;

/* Test and debug settings: a server in production leaves them empty. */
typedef struct fg_config_debug {
    /* The k-th generating response the server starts emits the tokens of item k (its
     * text tokenized with the vocabulary, chat and tool markers as their
     * special ids) instead of the sampled ones; empty: off. */
    fg_config_strlist scripted_output;
    /* A session restore waits until this file exists (tests hold one in progress); "": off. */
    const char *restore_gate_file;
} fg_config_debug;

typedef struct fg_config_topology {
    int64_t ranks;                  /* expert-parallel ranks over all nodes; 1: no expert parallelism */
    int64_t ranks_per_node;         /* ranks this process runs; 0: all of them */
    int64_t node;                   /* this process's node index: its ranks start at node * ranks_per_node */
    int64_t experts_per_rank;       /* expert slots per rank, replicas included; 0: derived from the model */
    int64_t redundant_experts;      /* replica slots over all ranks; with the experts, a multiple of ranks */
    int64_t recv_capacity_rows;     /* rows a rank receives per expert exchange round; 0: the worst case */
    const char *hot_experts;        /* replica heat order, "17,3,250" hottest first; "": id order */
    fg_config_placement placement;
    fg_config_transport transport;
    const char *bootstrap;          /* Redis key prefix of the NCCL id exchange */
    int64_t bootstrap_timeout_ms;   /* milliseconds */
} fg_config_topology;

typedef struct fg_config {
    fg_config_server server;
    fg_config_model model;
    fg_config_topology topology;
    fg_config_sessions sessions;
    fg_config_limits limits;
    fg_config_auth auth;
    fg_config_log log;
    fg_config_redis redis;
    fg_config_persistence persistence;
    fg_config_cluster cluster;
    fg_config_debug debug;
    const fg_config_tenant *tenants;
    size_t n_tenants;
} fg_config;

/* Sets every key to its built-in default (one tenant "default"). Allocates
 * nothing, so it cannot fail; c need not be initialised before. */
void fg_config_init_defaults(fg_config *c);

/* Reads the JSON file at path and overlays it on c: keys present in the file
 * replace c's values, keys absent keep them; a "tenants" array replaces the
 * whole tenant list. Each value is checked against its type and range, and
 * the tenant list against its rules (fg_config_validate() still has to run
 * for the rules between keys).
 * On error c is unchanged, and the message starts with the path.
 * Errors: FG_ERR_IO (cannot open or read, or larger than 16 MiB),
 * FG_ERR_CONFIG (empty, not UTF-8 JSON — with line:column —, a top level
 * that is not an object, an unknown key — with the closest known one —, a
 * wrong type, a value out of range, a bad tenant), FG_ERR_NOMEM. */
fg_err fg_config_load_file(fg_config *c, const char *path, fg_diag *d);

/* As fg_config_load_file() on len bytes of JSON text (need not be
 * NUL-terminated; json may be NULL when len is 0).
 * Errors: FG_ERR_CONFIG, FG_ERR_NOMEM. */
fg_err fg_config_load_string(fg_config *c, const char *json, size_t len, fg_diag *d);

/* Overlays environment variables on c: FLASHGATE_<SECTION>_<KEY> sets
 * section.key, the path upper-cased with '.' turned into '_' (so
 * FLASHGATE_SERVER_PORT=9000 sets server.port). Values parse by type:
 * integers strictly (decimal, optional '-', nothing else), booleans as
 * true/false/1/0, numbers as decimals, enums as one of their names, lists
 * comma-separated. envp is a NULL-terminated "NAME=value" array such as
 * environ (NULL: none); a name given twice takes its last value. Variables
 * without the FLASHGATE_ prefix are ignored, and so is FLASHGATE_CONFIG (the
 * binary reads it as the file's path). The tenant list cannot be set here.
 * On error c is unchanged; the message names the variable.
 * Errors: FG_ERR_CONFIG (unknown FLASHGATE_ variable, unparsable or out of
 * range value), FG_ERR_NOMEM. */
fg_err fg_config_apply_env(fg_config *c, char *const *envp, fg_diag *d);

/* Checks every value against the schema again (a config may have been built
 * in code) and the rules between keys: prefill_chunk within
 * max_batch_tokens, instructions within a frame, output tokens within the
 * context, key lengths, no key shared between tenants or with the admin and
 * dashboard keys, a usable redis.address, at least one tenant.
 * Errors: FG_ERR_CONFIG (the message names the key or keys). */
fg_err fg_config_validate(const fg_config *c, fg_diag *d);

/* Frees what c owns and leaves c holding the defaults again (so a second
 * free is harmless). */
void fg_config_free(fg_config *c);

/* True when every key and every tenant of a and b are equal (strings by
 * content); lets a reload tell whether anything changed. */
bool fg_config_equal(const fg_config *a, const fg_config *b);

/* Writes the reference of every key — type, default, range or allowed
 * values, environment variable, meaning — as Markdown that also reads as
 * plain text (`flashgate --help-config`; docs/config.md embeds it). */
void fg_config_print_reference(FILE *f);

/* The tenant one of whose api_keys equals api_key, or NULL (also for NULL or
 * ""). Compares against every key of every tenant without stopping early and
 * without data-dependent branches on key bytes, so the time taken does not
 * reveal how much of a key matched. Key lengths are not treated as secret. */
const fg_config_tenant *fg_config_find_tenant_by_key(const fg_config *c, const char *api_key);

#endif
