/* engine_internal.h: the engine's and sessions' private state, shared by
 * engine.c (open, close, direct mode) and engine_serve.c (step thread and the
 * serving API). Not for use outside engine/.
 *
 * Locking (serving mode): fields marked [mu] are guarded by engine->mu; fields
 * marked [step] belong to the step thread alone; [const] never change after
 * the session is created.
 */
#ifndef FG_ENGINE_INTERNAL_H
#define FG_ENGINE_INTERNAL_H

#include <pthread.h>

#include "config/base/clock.h"
#include "config/base/list.h"
#include "config/base/tokens.h"
#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "engine/ep/ep_ranks.h"
#include "engine/kv/kv_store.h"
#include "engine/kv/prefix_cache.h"
#include "engine/kv/session_file.h"
#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "engine/serve/sampler.h"
#include "engine/serve/scheduler.h"
#include "kernels/cpu/pool.h"

/* A session's bounded output queue: events plus the bytes of their text. */
typedef struct fg_outq {
    fg_event *ev;      /* [ev_cap] ring */
    int ev_cap, ev_head, ev_count;
    char *text;        /* [text_cap] ring */
    uint32_t text_cap, text_head, text_count;
} fg_outq;

/* One response in progress [step]. */
typedef struct fg_response {
    bool active;
    uint64_t id;
    fg_response_params p;
    uint64_t rng;
    int generated;
    int64_t cached_tokens;      /* in the KV when the response started */
    int64_t input_tokens;       /* history + new input at the start */
    bool have_next;             /* next_token sampled, not yet evaluated */
    bool input_absorbed;        /* its input is shorter than FG_SHORT_INPUT: absorbed-form attention */
    int32_t next_token;
    char hold[FG_MAX_STOP_BYTES];  /* text held back: could be the start of a stop string */
    int hold_len;
    bool waiting_reported;
    bool admitted;              /* its pages are reserved */
    bool considered;            /* admission pass bookkeeping */
    uint64_t order;             /* request order: the oldest waiting response is admitted first */
} fg_response;

struct fg_session {
    fg_engine_t *e;                 /* [const] */
    fg_session_params params;       /* [const]; name and tenant_name point at the copies below */
    char name[FG_NAME_MAX + 1];        /* [const] "" when anonymous */
    char tenant_name[FG_NAME_MAX + 1]; /* [const] */
    int ep_rank;                    /* [const] expert parallelism: the rank its KV and attention live on */

    /* [mu] requests from API threads */
    fg_tokens in;                   /* input not yet taken by the step thread */
    bool respond_req;
    fg_response_params req;
    uint64_t req_id;
    uint64_t next_response_id;
    bool cancel_req;
    bool freed;                     /* the owner let go; the step thread frees */
    bool responding;                /* from respond() until the DONE event is queued */
    fg_list dirty_link;             /* on e->dirty while it has requests for the step thread */
    fg_list ready_link;             /* on e->ready while it has events to poll */
    fg_outq out;
    int length_snapshot;            /* seq.n_tokens as of the last step */
    int64_t committed;              /* tokens in the cache, queued, or sampled: bounded by the context */

    /* [step] */
    fg_kv_seq seq;                  /* empty while on_disk */
    fg_tokens todo;                 /* tokens to prefill */
    fg_tokens hist;                 /* token ids whose KV is in seq, in order */
    fg_response resp;
    bool adopted;
    fg_list all_link;               /* on e->all while adopted */
    int batch_tokens;               /* this step: tokens in the batch */
    int batch_logits;               /* this step: 1 when the step samples for it */

    /* persistence and sharing */
    int tenant_ix;                  /* [const] index in e->tenants: KV page owner, hash salt */
    uint64_t uid;                   /* [const] engine-unique, names it in writer jobs */
    fg_session_t *open_next;        /* [mu] on e->open_head while not freed */
    void *meta;                     /* [mu] the owner's blob */
    uint32_t meta_len;              /* [mu] */
    uint64_t gen;                   /* [mu] bumped when what a file holds changes */
    uint64_t file_gen;              /* [mu] gen of the newest file written (0: none) */
    uint64_t failed_gen;            /* [mu] gen whose save failed: not retried by spills */
    bool on_disk;                   /* [mu] KV only in the file; hist and todo stay in memory */
    bool delete_file;               /* [mu] fg_session_delete: remove the file when freed */
    int saves_inflight;             /* [mu] writer jobs for it */
    bool spill_inflight;            /* [mu] */
    char load_name[FG_NAME_MAX + 1]; /* [step] file its KV loads from (a fork's source) */
    bool load_inflight;             /* [mu] the writer thread is reading its file */
    uint8_t *load_buf;              /* [mu] the file, read and validated, until its KV is in pages */
    fg_sfile_view load_view;        /* [mu] into load_buf */
    fg_err load_err;                /* [mu] the read failed: why */
    char load_msg[320];             /* [mu] */
    double load_seconds;            /* [mu] time the read took */
    double last_used;               /* [step] end of its last response (monotonic seconds) */
    uint64_t *phash;                /* [step] keys of its full pages [phash_cap] */
    int phash_n, phash_cap;         /* [step] valid keys, room */
    int reg_n;                      /* [step] full pages offered to the prefix cache */
    int miss_at;                    /* [step] token count of the last prefix miss (-1 none) */
    bool todo_sampled;              /* [step] todo[0] is the last response's sampled token (forks keep it) */
    /* fork (the forking thread waits on e->done_cv) */
    fg_session_t *fork_src;         /* [mu] */
    bool fork_done;                 /* [mu] */
    fg_err fork_err;                /* [mu] */
};

/* A writer job: save a snapshot, or remove a file. */
typedef struct fg_save_job {
    struct fg_save_job *next;
    bool remove;                    /* unlink the file instead of writing it */
    bool read;                      /* read and validate the file (a load back) instead */
    bool from_file;                 /* save: the KV rows come from the file load_name (session on disk) */
    char load_name[FG_NAME_MAX + 1];
    uint8_t *buf;                   /* read: the file */
    size_t len;
    fg_sfile_view v;
    bool spill;                     /* release the session's pages when written */
    uint64_t uid, gen;
    int tenant_ix;
    char tenant[FG_NAME_MAX + 1], name[FG_NAME_MAX + 1];
    int32_t *tokens;                /* [n_tokens + n_pending] */
    int n_tokens, n_pending;
    void *meta;
    uint32_t meta_len;
    uint8_t **pages;                /* [n_pages], one reference each, released by the step thread */
    int n_pages;
    bool page;                      /* a page file (page_tier.c): write rows, or read with read */
    uint64_t key, prev;             /* page: its key and previous key */
    uint8_t *rows;                  /* page write: [64][n_layer][row_bytes] copied out of the page */
    fg_err err;                     /* result */
    char msg[320];
    double seconds;
} fg_save_job;

/* A page file on disk (page_tier.c), by tenant and key. */
/* A full page one prefill of a step computes first: its tenant and chained key. */
typedef struct fg_page_claim {
    uint64_t key;
    int tenant_ix;
} fg_page_claim;

typedef enum { FG_DPAGE_WRITING, FG_DPAGE_ON_DISK, FG_DPAGE_LOADING } fg_dpage_state;
typedef struct fg_dpage {
    uint64_t key;
    int tenant_ix;
    fg_dpage_state state;
    bool no_room;                   /* its last load found no free page: the next lookup misses */
    uint64_t bytes;                 /* counted in disk_bytes while listed (ON_DISK, LOADING) */
    double born;                    /* when written (mtime at open): oldest go first */
} fg_dpage;

/* Per tenant: disk bytes and session counts [mu]; resident bytes come from
 * the KV store's owner counts. */
typedef struct fg_tenant_rec {
    char name[FG_NAME_MAX + 1];
    uint64_t salt;
    uint64_t disk_bytes;
    int sessions_resident, sessions_on_disk;
} fg_tenant_rec;

struct fg_engine {
    fg_engine_options opt;          /* [const] */
    int step_capacity;              /* [const] most tokens of one step: max_batch_tokens, or a
                                     * larger prefill_alone_tokens in serving mode */
    fg_gguf_t *gguf;
    fg_arch_model *model;           /* its architecture: model->arch */
    fg_tokenizer_t *tok;
    fg_kv_store_t *kv;
    fg_pool_t *pool;
    fg_backend_t *backend;          /* runs the forward pass (cpu or cuda); NULL with expert parallelism */
    fg_ep_ranks_t *ep;              /* expert parallelism: this node's ranks; NULL without */
    bool ep_nodes;                  /* [const] the job has other nodes: every step is agreed in a round */
    bool ep_down;                   /* [step] a node left (or the transport failed): no more rounds */
    int ep_left_node;               /* [step] which node left (-1: the transport failed) */
    bool ep_peers_busy;             /* [step] the last round stepped: the next one follows at once */
    int *seq_rank;                  /* [max_batch_tokens] rank of each sequence of a step (with ep) */
    _Atomic uint64_t *expert_tokens; /* [n_expert] routed picks per expert id, added by every forward */
    _Atomic unsigned ep_next_rank;  /* round-robin rank for the next session */
    int n_ctx;
    int max_token_bytes;            /* longest token text, for output-queue room */

    /* serving mode */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    bool stop;                      /* [mu] */
    bool work;                      /* [mu] something changed since the last look */
    fg_list dirty;                  /* [mu] sessions with requests (dirty_link), newest first */
    fg_list ready;                  /* [mu] sessions with events to poll (ready_link), newest first */
    fg_engine_stats stats;          /* [mu] */
    uint64_t session_order;         /* [mu] request counter: fg_response.order */
    bool wake_owner;                /* [mu] events were queued since the last wakeup call */

    /* [step] */
    fg_list all;                    /* adopted sessions (all_link), newest first */
    fg_sampler_t *sampler;
    fg_sched_t *sched;
    fg_sched_item *items;           /* [2 * max_batch_tokens] decode then prefill candidates */
    fg_session_t **cand;            /* [2 * max_batch_tokens] */
    fg_page_claim *claims;          /* [max_batch_tokens] pages the step's prefills will compute first */
    fg_fwd_seq *fseqs;              /* [max_batch_tokens] */
    int32_t *btok;                  /* [step_capacity] */
    float *logits;                  /* [max_batch_tokens][n_vocab] */
    char *text_scratch;             /* [FG_MAX_STOP_BYTES + max_token_bytes] */

    /* persistence and sharing */
    bool persist;                   /* [const] persist_dir set (serving mode) */
    char *persist_dir;              /* [const] copy */
    fg_sfile_expect expect;         /* [const] what a session file must match */
    fg_prefix_cache_t *pc;          /* [step] NULL when prefix_cache is off */
    fg_tenant_rec *tenants;         /* [mu] */
    int n_tenants, cap_tenants;
    uint64_t disk_bytes;            /* [mu] all session and page files */
    fg_dpage *dpages;               /* [mu] page files by tenant and key (unordered) */
    double cold_idle_at;            /* [step] last scan for idle cold cached pages */
    int n_dpages, cap_dpages;
    uint64_t next_uid;              /* [mu] */
    fg_session_t *open_head;        /* [mu] sessions not freed (names are unique among them) */
    pthread_cond_t done_cv;         /* forks, save_all and the writer report here */
    pthread_t writer;
    bool writer_started;
    pthread_cond_t writer_cv;
    bool writer_stop;               /* [mu] */
    fg_save_job *job_head, *job_tail;   /* [mu] queued for the writer */
    fg_save_job *done_jobs;         /* [mu] written, for the step thread */
    const fg_save_job *job_running; /* [mu] the one the writer is on */
    uint64_t jobs_queued, jobs_done;    /* [mu] */
    bool save_all_req;              /* [mu] */
    uint64_t save_all_target;       /* [mu] jobs_queued when save_all's jobs were queued */
    bool save_all_queued;           /* [mu] */
    fg_err save_all_err;            /* [mu] */
    char save_all_msg[320];         /* [mu] */
};

/* The first adopted session (newest first), and the one after s; NULL at the
 * end. s stays valid while it is visited: free a session only outside such a
 * walk [step]. */
static inline fg_session_t *fg_all_first(const fg_engine_t *e)
{
    fg_list *l = fg_list_first(&e->all);
    return l ? fg_list_entry(l, fg_session_t, all_link) : NULL;
}
static inline fg_session_t *fg_all_next(const fg_engine_t *e, const fg_session_t *s)
{
    fg_list *l = fg_list_next(&e->all, &s->all_link);
    return l ? fg_list_entry(l, fg_session_t, all_link) : NULL;
}

/* engine.c: one forward pass over seqs[n], the sequences of sessions[n],
 * through the plain pass or the expert-parallel ranks. Errors: as
 * fg_forward_run / fg_ep_ranks_run. */
fg_err fg_engine_forward(fg_engine_t *e, const int32_t *tokens, fg_fwd_seq *seqs, fg_session_t *const *sessions,
                         int n, fg_diag *diag);

/* engine.c: with several nodes, an agreement round over this node's batch
 * of n sessions (n may be 0) and the step it agrees on; see
 * fg_ep_ranks_round. Collective over the nodes: the step thread only. */
fg_err fg_engine_round(fg_engine_t *e, const int32_t *tokens, fg_fwd_seq *seqs, fg_session_t *const *sessions, int n,
                       bool leave, fg_ep_round *out, fg_diag *diag);

/* engine.c */
/* A KV page's resident copy where the backend computes (device memory on
 * cuda) to its host page before the host reads the page (saves, copy-on-write
 * sources), and back after the host wrote it (loads, copies). No-ops on the
 * CPU backend. Step thread. Errors: FG_ERR_IO (device copy failed). */
fg_err fg_engine_page_to_host(fg_engine_t *e, uint8_t *page, fg_diag *diag);
fg_err fg_engine_page_to_device(fg_engine_t *e, const uint8_t *page, fg_diag *diag);

/* Allocates a session (not yet known to the step thread). Errors:
 * FG_ERR_INVALID_ARG, FG_ERR_NOMEM. */
fg_err fg_session_alloc(fg_engine_t *e, const fg_session_params *params, fg_session_t **out);
void fg_session_dealloc(fg_session_t *s);

/* engine_serve.c */
fg_err fg_engine_serve_start(fg_engine_t *e, fg_diag *diag);
void fg_engine_serve_stop(fg_engine_t *e);
/* Hands a session to the step thread. FG_ERR_STATE: its name is open. */
fg_err fg_session_serve_init(fg_session_t *s);
void fg_session_serve_release(fg_session_t *s);

/* kv_tier.c: the disk tier and prefix sharing, on the step thread unless said. */
/* Opens persist_dir (scan, temp files removed) and starts the writer; at open. */
fg_err fg_tier_open(fg_engine_t *e, fg_diag *diag);
/* Stops the writer (queued jobs are written first); later removals unlink directly. */
void fg_tier_close(fg_engine_t *e);
/* Frees the prefix cache (releasing its pages) and the tables; after the sessions. */
void fg_tier_destroy(fg_engine_t *e);
/* Reads and validates <persist_dir>/<tenant>/<name>.fgs into *buf (the caller
 * frees it). A damaged file is moved aside; diag names the session. locked:
 * the caller holds mu (else it is taken for the disk accounting). */
fg_err fg_tier_check_file(fg_engine_t *e, const char *tenant, const char *name, int tenant_ix, bool locked,
                          uint8_t **buf, size_t *len, fg_sfile_view *v, fg_diag *diag);
/* True while a write or removal of that session's file is queued or running [mu]. */
bool fg_tier_writing(const fg_engine_t *e, const char *tenant, const char *name);
/* Index of a tenant name in e->tenants, added when new; -1 when the table is full [mu]. */
int fg_tier_tenant(fg_engine_t *e, const char *name);
/* Queues a save of s (a snapshot; pages by reference) unless its file is
 * current or it is anonymous or on disk [mu]. */
void fg_tier_save(fg_engine_t *e, fg_session_t *s, bool spill);
/* Queues the removal of a session's file [mu]. */
void fg_tier_remove(fg_engine_t *e, const char *tenant, const char *name, int tenant_ix);
/* Applies finished writer jobs: releases snapshots, spills, counts, reports failures [mu]. */
void fg_tier_reap(fg_engine_t *e);
/* Spills sessions idle for idle_spill_seconds [mu]. */
void fg_tier_idle(fg_engine_t *e);
/* Queues saves for fg_engine_save_all [mu]. */
void fg_tier_save_all(fg_engine_t *e);
/* Frees cold cached pages, then starts spills, aiming for need_pages free
 * pages; `except` is not spilled [mu]. */
void fg_tier_relieve(fg_engine_t *e, size_t need_pages, const fg_session_t *except);
/* Loads an on-disk session's KV back. The file is read and validated on the
 * writer thread first: FG_ERR_BUSY while that runs (try again when woken).
 * FG_ERR_KV_FULL: not enough pages now (retry after relieving);
 * FG_ERR_SESSION_* / NOT_FOUND / IO: the file is unusable (moved aside when
 * damaged; the caller empties the session) [mu]. */
fg_err fg_tier_load(fg_engine_t *e, fg_session_t *s, fg_diag *diag);
/* Empties a session whose file was lost [mu]. */
void fg_tier_lose(fg_engine_t *e, fg_session_t *s);
/* <persist_dir>/<tenant> and the file path of a session; false when too long. */
bool fg_tier_path(const fg_engine_t *e, const char *tenant, const char *name, const char *suffix, char *out,
                  size_t cap);

/* page_tier.c: page files of cold cached pages (see docs/engine.md). */
/* Lists the page files under <tenant dir>/pages (bytes into disk_bytes) and
 * removes temp files; at open. */
void fg_ptier_scan(fg_engine_t *e, int tenant_ix, const char *tenant_dir);
/* Before the cache drops entry id under pressure: queues a page file of it
 * unless its key is on disk already [mu]. */
void fg_ptier_spill(fg_engine_t *e, uint32_t id);
/* On a cache miss of the page with prev and tokens: when its key (and those
 * of the following full pages of tokens[0, n_pages * 64)) are on disk,
 * queues their loads. Returns true when the first one is loading (wait for
 * it), false for a plain miss [mu]. */
bool fg_ptier_fetch(fg_engine_t *e, int tenant_ix, uint64_t prev, const int32_t *tokens, int n_pages);
/* The writer thread's part of a page job (takes mu only for bookkeeping). */
void fg_ptier_run(fg_engine_t *e, fg_save_job *j, fg_diag *d);
/* The step thread's part of a finished page job [mu]. */
void fg_ptier_reap(fg_engine_t *e, fg_save_job *j);
/* Writer thread, mu not held: removes the tenant's oldest page files until
 * need more bytes fit the disk budget (or none is left). */
void fg_ptier_make_room(fg_engine_t *e, int tenant_ix, uint64_t need);
/* Frees the page index. */
void fg_ptier_destroy(fg_engine_t *e);
/* Drops cold cached pages, least recently used first (to page files when
 * persisting), until need pages are free [mu]. */
void fg_tier_drop_cold(fg_engine_t *e, size_t need);
/* Adds delta bytes to the tenant's and the engine's disk count [mu]. */
void fg_tier_disk_add(fg_engine_t *e, int tenant_ix, int64_t delta);
/* Queues a job for the writer thread [mu]. */
void fg_tier_push_job(fg_engine_t *e, fg_save_job *j);

/* kv_share.c */
/* Makes the keys of s's pages 0..upto valid (from its history); false when
 * the history is shorter or out of memory [step]. */
bool fg_share_page_keys(fg_engine_t *e, fg_session_t *s, int upto);
/* Takes prefix-cache hits for the next full pages of s's input. Returns
 * true when the next page is being loaded from its page file: the caller
 * may wait (it is woken when done) or compute it [mu]. */
bool fg_share_attach_hits(fg_engine_t *e, fg_session_t *s);
/* The key of the page a prefill of s computes next, when it is a full page
 * starting at a page boundary that the prefix cache could share; false
 * otherwise [mu]. */
bool fg_share_next_key(fg_engine_t *e, fg_session_t *s, uint64_t *key);
/* Offers s's newly full pages to the prefix cache [mu]. */
void fg_share_register(fg_engine_t *e, fg_session_t *s);
/* After s's cache was cut to n tokens: forgets keys of pages past it. */
void fg_share_truncated(fg_session_t *s, int n_tokens);
/* Makes a fork of src in dst (both adopted, src idle) [mu]. */
fg_err fg_share_fork(fg_engine_t *e, fg_session_t *dst, fg_session_t *src);

#endif
