/* engine.h: flashgate's inference engine, the one header other modules use.
 *
 * An engine owns a model (GGUF, memory-mapped), its tokenizer, the paged KV
 * store, a worker pool and the forward pass. A session is one conversation's
 * sequence: its KV pages and length. Many sessions share one engine.
 *
 * Two modes, chosen at open:
 *  - direct (serve = false): fg_session_eval() runs tokens through the model
 *    on the calling thread and returns logits. For tools, benchmarks and
 *    numerics tests; calls on one engine must not overlap.
 *  - serving (serve = true): the engine runs its own step thread. Any thread
 *    may append input, start and cancel responses, and poll a session's
 *    bounded output queue. Each step forms one batch from every session with
 *    work (decode tokens first, then prefill chunks, shared across tenants by
 *    weight) and runs one forward pass for all of it. After a step that
 *    produced events the engine calls the owner's wakeup callback (from the
 *    step thread; the gateway passes one that calls lws_cancel_service()), and
 *    fg_engine_take_ready() names the sessions that have something to read.
 *    A session whose output queue is full pauses until it is read; nothing is
 *    dropped. When the KV pool is full, cold cached pages are dropped and idle
 *    named sessions spill to disk (with persist_dir); until pages free up, new
 *    work waits (the session gets a WAITING event naming the reason).
 *    Full pages are shared between sessions of one tenant with the same
 *    prefix (copy-on-write; see "persistence, forks, tenants" below).
 *
 * Thread safety: open/close from one thread. In serving mode every fg_session_*
 * call is thread-safe; a session must not be used after fg_session_free().
 */
#ifndef FG_ENGINE_H
#define FG_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/base/name.h"
#include "config/fg_error.h"
#include "engine/serve/sampler.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/matmul.h"

typedef struct fg_engine fg_engine_t;
typedef struct fg_session fg_session_t;

typedef void (*fg_engine_wakeup_fn)(void *user);

/* Where the forward pass runs (fg_engine_options.backend; engine/backend/backend.h). */
enum { FG_ENGINE_BACKEND_CPU = 0, FG_ENGINE_BACKEND_CUDA = 1 };

typedef struct fg_engine_options {
    const char *model_path;
    int kv_format;           /* fg_kv_format, or -1: FP4 when the widths allow it, else F16 */
    size_t kv_budget_bytes;  /* KV page pool size; default 1 GiB */
    int max_batch_tokens;    /* tokens per forward pass (step budget); default 256 */
    int n_threads;           /* 0: one per online CPU */
    int max_context;         /* per session; 0: the model's context_length */
    fg_isa isa;              /* FG_ISA_AUTO unless testing a kernel path */
    int backend;             /* FG_ENGINE_BACKEND_CPU (default) or FG_ENGINE_BACKEND_CUDA */
    int gpu_device;          /* cuda backend: device ordinal; default 0 */
    /* serving mode */
    bool serve;
    fg_engine_wakeup_fn wakeup;
    void *wakeup_user;
    int prefill_chunk;       /* max prompt tokens of one session per step; default 128 */
    int prefill_alone_tokens; /* a step with no token to decode takes up to this many prompt
                               * tokens (at least max_batch_tokens), one session up to all of
                               * them; 0: max_batch_tokens and prefill_chunk as in any step;
                               * default 512 */
    /* speculative decoding (docs/engine.md, "Speculative decoding"): a
     * decoding session feeds up to spec_drafts proposed tokens after its
     * sampled one, verified in the same forward pass; greedy output is
     * that of plain decoding token for token, sampled output has the same
     * distribution. Drafts come from the model's MTP block where the
     * backend runs it, and from prompt lookup (the session's own history) */
    bool speculative;        /* default false (docs/benchmarks.md: where it pays) */
    int spec_drafts;         /* most drafts per session and step, 1..16; default 2 */
    int event_capacity;      /* output queue events per session; default 64 */
    int text_capacity;       /* output queue text bytes per session; default 2048 */
    /* expert parallelism (docs/parallel.md): 0 or 1 rank runs every expert
     * in one forward pass; N > 1 runs N ranks, each session's attention on
     * one rank (assigned round robin at creation), the routed experts
     * sharded over all of them */
    int ep_ranks;
    int ep_experts_per_rank; /* expert slots per rank, replicas included; 0: derived */
    int ep_redundant;        /* replica slots over all ranks; experts + replicas a multiple of ep_ranks */
    int ep_placement;        /* 0 contiguous, 1 strided */
    int ep_transport;        /* 0 in-process (threads); 1 NCCL (local rank i on CUDA device i; compute on cpu) */
    /* several nodes (one engine each; docs/parallel.md, "Several nodes"):
     * this engine runs ranks ep_node * ep_ranks_per_node onwards and serves
     * its own sessions on them; every step is agreed with the other nodes */
    int ep_ranks_per_node;   /* 0: every rank here (one node) */
    int ep_node;             /* this engine's node, in [0, ep_ranks / ep_ranks_per_node) */
    /* in-process transport over several nodes (tests: several engines of one
     * process as nodes): a group of ep_ranks every node's engine shares,
     * outliving them; NULL: the engine's ranks make their own (one node) */
    struct fg_ep_inproc_group *ep_group;
    /* NCCL over several nodes: where node 0 publishes the NCCL id (engine/ep/ep_bootstrap.h) */
    const char *ep_bootstrap_redis;   /* Redis address */
    const char *ep_bootstrap_prefix;  /* key prefix, one per launch */
    int ep_bootstrap_timeout_ms;      /* 0: 60000 */
    int64_t ep_recv_capacity_rows; /* rows a rank receives per exchange round; 0: the worst case (moe_ep.h) */
    const char *ep_hot_experts;    /* replica heat order, "5,0,9" hottest first (engine/ep/ep_shard.h); NULL: id order */
    /* persistence and sharing (see docs/engine.md, "Persistence") */
    const char *persist_dir;     /* NULL or "": no disk tier (no files, no spills) */
    bool prefix_cache;           /* default true: full pages shared by chained hash within a tenant */
    double idle_spill_seconds;   /* idle named sessions and cold cached pages move to disk after this; 0: only under pressure */
    uint64_t disk_budget_bytes;  /* session files in all; 0: unlimited; a write past it fails FG_ERR_DISK_FULL */
    double session_file_max_age_seconds; /* at open, session files not written for longer are deleted; 0: kept */
    /* Asked on the writer thread before each write or removal of a session's
     * file (fencing between instances that share persist_dir: the gateway's
     * session directory); false refuses it: a save fails with FG_ERR_STATE as a
     * failed write does, a removal leaves the file. NULL: always allowed. */
    bool (*persist_fence)(void *user, const char *tenant_name, const char *name);
    void *persist_fence_user;
} fg_engine_options;

void fg_engine_options_default(fg_engine_options *o);

/* Errors: FG_ERR_IO and FG_ERR_GGUF_* (file), FG_ERR_MODEL_* (contents),
 * FG_ERR_TOKENIZER, FG_ERR_KV_FORMAT, FG_ERR_INVALID_ARG (options),
 * FG_ERR_CONFIG (an expert placement that does not fit the model, naming the
 * topology key), FG_ERR_UNSUPPORTED (ISA; the NCCL transport in a build
 * without NCCL; backend cuda in a build without CUDA, on a machine without a
 * usable GPU, or with expert parallelism, with a message saying which),
 * FG_ERR_STATE (several nodes without serving mode: direct mode has no step
 * loop to agree steps in), FG_ERR_IO (NCCL bootstrap or communicator),
 * FG_ERR_NOMEM. Several nodes over NCCL: blocks until every node has opened
 * (or the bootstrap times out). With persist_dir
 * set, the directory is created if missing, its session files are counted per
 * tenant (disk_bytes) and leftover temporary files are removed; FG_ERR_IO when
 * it cannot be created or read. */
fg_err fg_engine_open(const fg_engine_options *o, fg_engine_t **out, fg_diag *diag);
/* Serving mode: stops the step thread (in-flight responses end unreported)
 * and frees every session still open. Several nodes: first announces the
 * leave in one last agreement round (which waits for the other nodes' next
 * round, at most their idle wait away); the other nodes' responses then end
 * with FG_ERR_STATE. */
void fg_engine_close(fg_engine_t *e);

typedef struct fg_engine_info {
    int n_vocab;
    int n_ctx;                   /* max tokens per session */
    int n_layer;
    int n_embd;
    fg_kv_format kv_format;
    size_t kv_bytes_per_token;   /* the growing part over all layers, as stored (rounded up: deepseek4's page
                                    holds 64 tokens' share exactly, kv_page_bytes / 64) */
    size_t kv_page_bytes;        /* one page: FG_KV_PAGE_TOKENS tokens */
    size_t kv_seq_bytes;         /* fixed per session besides pages (deepseek4: window rings and open
                                    compressor blocks; deepseek2: 0) */
    size_t kv_pages_total;
    uint64_t weight_bytes_total;
    uint64_t weight_bytes_active; /* weight bytes read per decoded token */
    int n_threads;
    fg_isa isa;
    const char *backend;          /* "cpu" or "cuda" */
    const char *model_identity;   /* hash of the GGUF header */
} fg_engine_info;

void fg_engine_get_info(const fg_engine_t *e, fg_engine_info *info);
const fg_tokenizer_t *fg_engine_tokenizer(const fg_engine_t *e);
/* The GGUF's tokenizer.chat_template (gateway/chat_template.h picks the prompt
 * format from it), valid until fg_engine_close; not NUL-terminated.
 * Errors: FG_ERR_NOT_FOUND (no such key), FG_ERR_GGUF_KEY_TYPE (not a string). */
fg_err fg_engine_chat_template(const fg_engine_t *e, const char **ptr, size_t *len);

#define FG_ENGINE_HIST_BUCKETS 16
#define FG_ENGINE_STEP_HIST_BASE_S 0.0005 /* the first step-time bucket's bound, seconds */

/* Counters since open (serving mode), read consistently under the engine lock. */
typedef struct fg_engine_stats {
    uint64_t steps;
    uint64_t decode_tokens;        /* tokens evaluated as decode steps */
    uint64_t prefill_tokens;       /* prompt tokens evaluated */
    uint64_t short_input_tokens;   /* of which in inputs shorter than FG_SHORT_INPUT (absorbed form) */
    uint64_t sampled_tokens;       /* tokens produced for responses */
    double step_seconds;           /* total time inside forward passes */
    uint64_t steps_alone;          /* steps of prompt tokens only, at prefill_alone_tokens */
    int sessions;                  /* open */
    int responding;                /* with a response in progress */
    int paused;                    /* responding but held by a full output queue */
    int waiting_kv;                /* responding but waiting for KV pages */
    size_t kv_pages_used;
    size_t kv_pages_total;
    /* KV tiers and prefix sharing (filled by the persistence layer) */
    size_t kv_pages_shared;        /* resident pages with more than one holder */
    size_t kv_pages_cached;        /* resident pages held only by the prefix cache, and the pages its
                                    * state snapshots hold (deepseek4) */
    uint64_t prefix_lookups;       /* full pages looked up in the prefix cache */
    uint64_t prefix_hits;          /* of which found: shared instead of computed */
    uint64_t prefix_waits;         /* prefill steps a session sat out because another session of its
                                    * tenant was computing the same page in that step */
    uint64_t spills;               /* sessions written to disk and released from memory */
    uint64_t restores;             /* sessions loaded back from disk */
    uint64_t pages_to_disk;        /* cold cached pages written as page files when evicted */
    uint64_t pages_from_disk;      /* page files read back into the prefix cache on a miss */
    uint64_t page_files_damaged;   /* page files found damaged (moved aside, the page computed) */
    uint64_t snapshots_to_disk;    /* of pages_to_disk, those written with their state snapshot (deepseek4) */
    uint64_t snapshots_from_disk;  /* state snapshots read back with their page files onto cached pages */
    uint64_t saves;                /* session files written (end of turn, spill, shutdown) */
    uint64_t save_errors;          /* writes that failed (disk full, I/O) */
    double spill_seconds;          /* total time writing spilled sessions */
    double restore_seconds;        /* total time loading sessions back */
    int sessions_on_disk;          /* open sessions whose KV is on disk only */
    uint64_t disk_bytes;           /* bytes of session and page files under the persistence dir */
    /* Per-step histograms (counts per bucket, not cumulative; the last bucket
     * counts the rest): step time, bucket i <= FG_ENGINE_STEP_HIST_BASE_S * 2^i
     * seconds; batch tokens and batch sessions, bucket i <= 2^i. */
    uint64_t step_time_hist[FG_ENGINE_HIST_BUCKETS];
    uint64_t batch_tokens_hist[FG_ENGINE_HIST_BUCKETS];
    uint64_t batch_sessions_hist[FG_ENGINE_HIST_BUCKETS];
    uint64_t batch_sessions_sum;   /* sessions over all steps (batch tokens sum: decode + prefill) */
    /* speculative decoding: drafts fed to verification, by source, and of them accepted (emitted
     * without a step of their own); replayed: accepted tokens run again after a stateful cache
     * (deepseek4) was rolled back to before a partly rejected verification */
    uint64_t draft_tokens;
    uint64_t draft_tokens_mtp;     /* of draft_tokens, from the MTP block (the rest: prompt lookup) */
    uint64_t draft_accepted;
    uint64_t draft_replayed;
} fg_engine_stats;

void fg_engine_get_stats(fg_engine_t *e, fg_engine_stats *st);

/* Routed (token, expert) picks per expert id since open, summed over the
 * MoE layers and every rank (the cpu backend and in-process ranks count; the
 * cuda backend does not): how hot each expert is, for topology.hot_experts.
 * Fills out[0 .. min(cap, n_expert)); returns n_expert (0: a dense model).
 * Any thread; each count is read on its own (relaxed), so counts of a step in
 * progress may be partly in. */
int fg_engine_expert_tokens(const fg_engine_t *e, uint64_t *out, int cap);

/* ---- sessions ---- */

#define FG_SESSION_META_MAX 65536  /* bytes of an owner's meta blob */

typedef struct fg_session_params {
    uint32_t tenant;   /* scheduling group (the quota layer maps tenants to ids) */
    int weight;        /* the tenant's share of each step, 1..1000 (default 1) */
    int priority;      /* within a tenant, higher is scheduled first */
    void *user;        /* the owner's pointer, returned by fg_engine_take_ready */
    /* Copied at create. name: the session's stable id, 1..64 of [A-Za-z0-9_-];
     * NULL: anonymous, never written to disk. tenant_name: 1..64 of
     * [A-Za-z0-9_-], NULL means "default"; names the directory
     * <persist_dir>/<tenant_name>/ and salts the page hashes, so pages are
     * never shared across tenants. */
    const char *name;
    const char *tenant_name;
} fg_session_params;

/* params may be NULL (tenant 0, weight 1, anonymous, tenant "default").
 * Errors: FG_ERR_NOMEM, FG_ERR_INVALID_ARG (weight, priority or a name out of
 * range), FG_ERR_STATE (a session of that name and tenant is open). */
fg_err fg_session_create(fg_engine_t *e, const fg_session_params *params, fg_session_t **out);
/* Direct mode: releases the pages now. Serving mode: the session is detached
 * at once (no more events, no more calls) and freed by the step thread. Its
 * session file (if any) stays on disk. */
void fg_session_free(fg_session_t *s);
/* Like fg_session_free, and removes the session's file (explicit close, expiry). */
void fg_session_delete(fg_session_t *s);
/* Tokens in the session's cache (direct mode; in serving mode a snapshot). */
int fg_session_length(const fg_session_t *s);

/* Inputs (of one fg_session_eval, or one response's new tokens) shorter than
 * this attend in the absorbed MLA form, as decode tokens do; longer ones in
 * the decompressed form, which expands every cached row once per step for
 * all of the input's tokens there and only pays off over enough of them
 * (docs/benchmarks.md, "Short inputs"). Decided by the input's length, never
 * by how it is cut into steps, so results do not depend on the batching. */
#define FG_SHORT_INPUT 64

/* Direct mode only. Appends n input tokens: runs them through the model (in
 * chunks of max_batch_tokens) and stores their KV. logits: NULL, or [vocab] for the
 * last token, or [n][vocab] when logits_all. On error the session is unchanged.
 * Errors: FG_ERR_CONTEXT_FULL, FG_ERR_KV_FULL, FG_ERR_TOKEN_ID,
 * FG_ERR_INVALID_ARG, FG_ERR_STATE (serving mode). */
fg_err fg_session_eval(fg_session_t *s, const int32_t *tokens, int n, float *logits, bool logits_all,
                       fg_diag *diag);
/* Direct mode only. Appends one token that the model sampled (a decode
 * step): its attention runs in the absorbed form, as a served decode does.
 * logits: NULL or [vocab]. Errors: as fg_session_eval. */
fg_err fg_session_eval_sampled(fg_session_t *s, int32_t token, float *logits, fg_diag *diag);

/* Keeps the first n tokens of the session's cache and drops the rest: the
 * KV rows from n on (pages no longer needed go back; a page another holder
 * shares, a fork or the prefix cache, is copied before the session writes
 * it again, never written in place) and, in serving mode, every input token
 * queued and not yet prefilled, the token the last response sampled
 * included. The next input then continues the sequence at n. n at or past
 * the cache's length keeps the whole cache (serving mode: only the queue
 * goes). Serving mode: the cut is made on the step thread and this call
 * waits for it (up to a step). A session whose KV is on disk is cut in
 * place: its load back, and a rewrite of its file, take the first n rows.
 * The session's file is stale until its next save (fg_session_save writes
 * it at once). Errors: FG_ERR_INVALID_ARG (n < 0), FG_ERR_BUSY (a response
 * is in progress), FG_ERR_UNSUPPORTED (a cache with per-sequence state,
 * deepseek4's, cut anywhere but at 0 or past its length: that state cannot
 * be rewound; the session is unchanged). */
fg_err fg_session_truncate(fg_session_t *s, int n, fg_diag *diag);

/* ---- serving mode ---- */

#define FG_MAX_STOPS 4
#define FG_MAX_STOP_BYTES 64

typedef struct fg_response_params {
    fg_sampling sampling;
    int max_tokens;                     /* >= 1 when generating */
    bool generate;                      /* false: only prefill the pending input */
    bool keep_control;                  /* released text includes control tokens' text (DeepSeek's
                                           tool markers, EOS) for a parser; false: they release none */
    int n_stop;
    char stop[FG_MAX_STOPS][FG_MAX_STOP_BYTES + 1]; /* NUL-terminated, 1..64 bytes */
    /* Test and debug only (the gateway's debug.scripted_output): the k-th
     * generated token is script[k] instead of the sampled one while k <
     * n_script; every forward pass still runs and the sampler still draws.
     * The ids must stay valid until the response's DONE. NULL/0: off. */
    const int32_t *script;
    int n_script;
    bool no_drafts;                     /* decode without speculation (its output is the same either way) */
} fg_response_params;

typedef enum fg_event_type {
    FG_EVENT_TOKEN = 1,   /* a generated token, and the text it releases */
    FG_EVENT_DONE,        /* the response ended: finish, usage, last text */
    FG_EVENT_WAITING,     /* the response waits; error says why (FG_ERR_KV_FULL) */
    FG_EVENT_SAVE_FAILED, /* the session file could not be written (error: FG_ERR_DISK_FULL
                             or FG_ERR_IO); the session stays resident and usable */
} fg_event_type;

typedef enum fg_finish {
    FG_FINISH_EOS = 1,    /* the model produced EOS */
    FG_FINISH_STOP,       /* a stop string matched (its text is not released) */
    FG_FINISH_LENGTH,     /* max_tokens reached */
    FG_FINISH_CANCELLED,  /* fg_session_cancel */
    FG_FINISH_PREFILLED,  /* generate = false: the input is in the cache */
    FG_FINISH_CONTEXT,    /* the context is full */
    FG_FINISH_ERROR,      /* see error */
} fg_finish;

typedef struct fg_usage {
    int64_t input_tokens;   /* context the response was computed from (history + new input) */
    int64_t cached_tokens;  /* of which already in the KV cache at the start */
    int64_t output_tokens;  /* generated */
    int64_t draft_tokens;   /* speculative drafts verified for it */
    int64_t draft_accepted; /* of which accepted (part of output_tokens) */
} fg_usage;

typedef struct fg_event {
    fg_event_type type;
    uint64_t response_id;
    int32_t token;          /* TOKEN */
    uint32_t text_off;      /* TOKEN and DONE: released text, in the poll's text buffer */
    uint32_t text_len;
    fg_finish finish;       /* DONE */
    fg_err error;           /* DONE with FG_FINISH_ERROR, WAITING */
    fg_usage usage;         /* DONE */
} fg_event;

/* Queues input tokens; they are prefilled by the next response.
 * Errors: FG_ERR_TOKEN_ID, FG_ERR_CONTEXT_FULL (cache + queued input would
 * exceed the context), FG_ERR_NOMEM, FG_ERR_STATE (direct mode). */
fg_err fg_session_append(fg_session_t *s, const int32_t *tokens, int n, fg_diag *diag);

/* Tokens that fg_session_append still accepts: the context minus the cache,
 * the queued input and a sampled token not yet evaluated (a snapshot). A
 * generating fg_session_respond needs at least 1 left after its input. */
int fg_session_room(fg_session_t *s);

/* Starts a response over the queued input (and the cached history).
 * Errors: FG_ERR_BUSY (a response is in progress), FG_ERR_INVALID_ARG (bad
 * parameters, or nothing to respond to), FG_ERR_STATE (direct mode). */
fg_err fg_session_respond(fg_session_t *s, const fg_response_params *p, uint64_t *response_id, fg_diag *diag);

/* Ends the response in progress at the next step (DONE, CANCELLED); no-op without one. */
void fg_session_cancel(fg_session_t *s);

/* Pops up to max events; their text is copied into text[0..text_cap) and the
 * events point into it. Stops early when the next event's text would not fit.
 * Returns the number of events. */
int fg_session_poll(fg_session_t *s, fg_event *ev, int max, char *text, size_t text_cap);

/* True while the session has a response in progress (not yet DONE-polled or not). */
bool fg_session_responding(fg_session_t *s);

/* Writes the user pointers of up to max sessions that have events to poll and
 * clears their ready mark. Returns the count. */
int fg_engine_take_ready(fg_engine_t *e, void **users, int max);

/* ---- persistence, forks, tenants ----
 *
 * With persist_dir set (serving mode), a named session's file
 * <persist_dir>/<tenant_name>/<name>.fgs is rewritten atomically (temp file,
 * fsync, rename, fsync of the directory) after every completed response and
 * before the session spills to disk, on a writer thread against a snapshot.
 * A failed write leaves the session resident, counts save_errors and queues a
 * FG_EVENT_SAVE_FAILED event. A spilled session that gets work is loaded back
 * before it runs; if its file turns out damaged then, the response ends with
 * DONE, FG_FINISH_ERROR and the FG_ERR_SESSION_* code, and the session is
 * empty. */

/* A new session whose cache starts as src's cached tokens, sharing its pages
 * copy-on-write. Input queued in src but not yet prefilled is not part of it.
 * Works on a source whose KV is on disk: the fork loads from src's file, which
 * a later fg_session_delete of src keeps until no fork needs it any more.
 * p: as for fg_session_create; its tenant_name must equal src's. Errors: FG_ERR_INVALID_ARG (other tenant, bad
 * params), FG_ERR_BUSY (src has a response in progress), FG_ERR_STATE (direct
 * mode, or the name is open), FG_ERR_NOMEM, FG_ERR_SESSION_* (src's file was
 * damaged when loaded back). */
fg_err fg_session_fork(fg_session_t *src, const fg_session_params *p, fg_session_t **out, fg_diag *diag);

/* The owner's blob saved in the session file with the KV (at most
 * FG_SESSION_META_MAX bytes; FG_ERR_INVALID_ARG above). len 0 clears it.
 * Errors: FG_ERR_INVALID_ARG, FG_ERR_NOMEM. */
fg_err fg_session_set_meta(fg_session_t *s, const void *meta, size_t len, fg_diag *diag);
/* Copies up to cap bytes of the blob into buf; returns its full length. */
size_t fg_session_get_meta(fg_session_t *s, void *buf, size_t cap);

/* Opens the session saved as <persist_dir>/<tenant_name>/<name>.fgs (p->name
 * required). The whole file is validated before this returns (magic, format
 * version, model identity, KV cache format, sizes, checksum); the session
 * then continues exactly as if it had never left. Errors: FG_ERR_NOT_FOUND,
 * FG_ERR_SESSION_TRUNCATED, FG_ERR_SESSION_CORRUPT, FG_ERR_SESSION_MODEL,
 * FG_ERR_SESSION_VERSION, FG_ERR_IO, FG_ERR_INVALID_ARG (params), FG_ERR_STATE
 * (a session of that name is open, persist_dir unset, or direct mode). On a
 * damage error the file is renamed to <name>.fgs.damaged and diag names the
 * session and what is wrong. */
fg_err fg_session_restore(fg_engine_t *e, const fg_session_params *p, fg_session_t **out, fg_diag *diag);

/* Blocking: writes every named session whose file is not current and waits
 * for the writer (for shutdown, after responses have drained). Tries every
 * session; returns the first error (FG_ERR_DISK_FULL, FG_ERR_IO), FG_OK
 * without persist_dir. */
fg_err fg_engine_save_all(fg_engine_t *e, fg_diag *diag);

/* Blocking: writes the session's file now when its state (meta, history,
 * queued input) changed since the last write, and waits for the writer. For
 * a record that must be on disk before its owner goes on (the gateway's id
 * reservation after a restore). Errors: FG_ERR_STATE (anonymous session, no
 * persist_dir, direct mode), FG_ERR_BUSY (a response in progress, or the
 * session's KV is being loaded back: nothing written), FG_ERR_DISK_FULL,
 * FG_ERR_IO (the write failed; the session stays usable). */
fg_err fg_session_save(fg_session_t *s, fg_diag *diag);

/* Snapshot: true when the session's KV is on disk only. */
bool fg_session_on_disk(fg_session_t *s);

typedef struct fg_tenant_kv_usage {
    uint64_t resident_kv_bytes;  /* resident pages held by its sessions or cached for it, each counted once */
    uint64_t disk_bytes;         /* its session and page files, including ones found at open */
    int sessions_resident;
    int sessions_on_disk;
} fg_tenant_kv_usage;

/* Thread-safe. tenant_name NULL means "default". An unknown tenant reads as
 * zeros. Errors: FG_ERR_INVALID_ARG (a bad name). */
fg_err fg_engine_tenant_usage(fg_engine_t *e, const char *tenant_name, fg_tenant_kv_usage *u);

#endif
