/* kv_tier.h: the state the disk tier (kv_tier.c, page_tier.c) owns: in the
 * engine, the persist directory, the tenants' disk accounting, the page-file
 * index and the writer thread with its jobs; in each session, its file's
 * generation, its meta blob and its load back from disk. Part of
 * engine_internal.h; not for use outside engine/.
 *
 * Locking: [mu] fields are guarded by engine->mu; [step] fields belong to the
 * step thread; [const] are set at open.
 */
#ifndef FG_KV_TIER_H
#define FG_KV_TIER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/base/list.h"
#include "config/base/name.h"
#include "config/fg_error.h"
#include "engine/engine.h"
#include "engine/kv/session_file.h"

typedef struct fg_save_job fg_save_job;

/* What a kind of writer job does, as libuv's uv_queue_work has it: run on
 * the writer thread (mu not held: it takes mu for bookkeeping), then finish
 * on the step thread when fg_tier_reap collects it [mu] (NULL: nothing to
 * do). The kinds: a session's save, removal and read back (kv_tier.c); a
 * page file's write and read (page_tier.c). */
typedef struct fg_job_kind {
    void (*run)(fg_engine_t *e, fg_save_job *j, fg_diag *d);
    void (*finish)(fg_engine_t *e, fg_save_job *j);
} fg_job_kind;

/* A writer job; the fields a kind does not use stay zero. */
struct fg_save_job {
    fg_list link;                   /* on e->tier.jobs, then on e->tier.done_jobs */
    const fg_job_kind *kind;
    bool from_file;                 /* save: the KV rows come from the file load_name (session on disk) */
    char load_name[FG_NAME_MAX + 1];
    uint8_t *buf;                   /* read: the file */
    size_t len;
    fg_sfile_view v;
    bool spill;                     /* save: release the session's pages when written */
    uint64_t uid, gen;
    int tenant_ix;
    char tenant[FG_NAME_MAX + 1], name[FG_NAME_MAX + 1];
    int32_t *tokens;                /* [n_tokens + n_pending] */
    int n_tokens, n_pending;
    void *meta;
    uint32_t meta_len;
    uint8_t **pages;                /* [n_pages], one reference each, released by the step thread */
    int n_pages;
    uint8_t *state;                 /* save: a copy of the sequence's state (seq_bytes), NULL without;
                                       page write: a copy of the entry's snapshot, NULL without */
    uint64_t key, prev;             /* page: its key and previous key */
    int at;                         /* page: the position of its first token */
    bool replace;                   /* page write: over the key's file without a snapshot (unlisted) */
    uint8_t *rows;                  /* page write: [64][n_layer][row_bytes] copied out of the page (with
                                       per-sequence state: the page as stored) */
    fg_err err;                     /* result */
    char msg[320];
    double seconds;
};

/* A page file on disk (page_tier.c), by tenant and key. */
typedef enum { FG_DPAGE_WRITING, FG_DPAGE_ON_DISK, FG_DPAGE_LOADING } fg_dpage_state;
typedef struct fg_dpage {
    uint64_t key;
    int tenant_ix;
    fg_dpage_state state;
    bool no_room;                   /* its last load found no free page: the next lookup misses */
    bool snap;                      /* the file carries a state snapshot (page_file.h) */
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

/* A session's part. */
typedef struct fg_session_tier {
    void *meta;                     /* [mu] the owner's blob */
    uint32_t meta_len;              /* [mu] */
    uint64_t gen;                   /* [mu] bumped when what a file holds changes */
    uint64_t file_gen;              /* [mu] gen of the newest file written (0: none) */
    uint64_t failed_gen;            /* [mu] gen whose save failed: not retried by spills */
    bool on_disk;                   /* [mu] KV only in the file; hist and todo stay in memory */
    bool delete_file;               /* [mu] fg_session_delete: remove the file when freed */
    int saves_inflight;             /* [mu] writer jobs for it */
    bool save_req;                  /* [mu] fg_session_save: the step thread writes its file */
    uint64_t save_skips;            /* [mu] save requests that queued nothing (busy): the waiter returns */
    uint64_t save_failures;         /* [mu] writes of its file that failed */
    fg_err save_err;                /* [mu] the latest failure's code */
    bool spill_inflight;            /* [mu] */
    char load_name[FG_NAME_MAX + 1]; /* [step] file its KV loads from (a fork's source) */
    bool load_kept;                 /* [step] load_name's session is gone: its file waits for its forks */
    bool load_inflight;             /* [mu] the writer thread is reading its file */
    uint8_t *load_buf;              /* [mu] the file, read and validated, until its KV is in pages */
    fg_sfile_view load_view;        /* [mu] into load_buf */
    fg_err load_err;                /* [mu] the read failed: why */
    char load_msg[320];             /* [mu] */
    double load_seconds;            /* [mu] time the read took */
    double last_used;               /* [step] end of its last response (monotonic seconds) */
} fg_session_tier;

/* The engine's part. */
typedef struct fg_engine_tier {
    bool persist;                   /* [const] persist_dir set (serving mode) */
    char *persist_dir;              /* [const] copy */
    fg_sfile_expect expect;         /* [const] what a session file must match */
    fg_tenant_rec *tenants;         /* [mu] */
    int n_tenants, cap_tenants;
    uint64_t disk_bytes;            /* [mu] all session and page files */
    fg_dpage *dpages;               /* [mu] page files by tenant and key (unordered) */
    int n_dpages, cap_dpages;
    double cold_idle_at;            /* [step] last scan for idle cold cached pages */
    pthread_t writer;
    bool writer_started;
    pthread_cond_t writer_cv;
    bool writer_stop;               /* [mu] */
    fg_list jobs;                   /* [mu] queued for the writer, in order */
    fg_list done_jobs;              /* [mu] run, for the step thread (newest first) */
    const fg_save_job *job_running; /* [mu] the one the writer is on */
    uint64_t jobs_queued, jobs_done;    /* [mu] */
    bool save_all_req;              /* [mu] */
    uint64_t save_all_target;       /* [mu] jobs_queued when save_all's jobs were queued */
    bool save_all_queued;           /* [mu] */
    fg_err save_all_err;            /* [mu] */
    char save_all_msg[320];         /* [mu] */
} fg_engine_tier;

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
/* Index of a tenant name in e->tier.tenants, added when new; -1 when the table is full [mu]. */
int fg_tier_tenant(fg_engine_t *e, const char *name);
/* Queues a save of s (a snapshot; pages by reference) unless its file is
 * current or it is anonymous or on disk [mu]. */
void fg_tier_save(fg_engine_t *e, fg_session_t *s, bool spill);
/* Queues the removal of a session's file [mu]. */
void fg_tier_remove(fg_engine_t *e, const char *tenant, const char *name, int tenant_ix);
/* s's removal, freed with fg_session_delete: its file is removed now unless
 * forks on disk still load from it (load_name), which then keep it
 * (load_kept) until the last of them no longer needs it [mu, step]. */
void fg_tier_remove_owned(fg_engine_t *e, fg_session_t *s);
/* s no longer loads from load_name (loaded, saved its own file, emptied or
 * freed): a kept file no other fork loads from is removed [mu, step]. */
void fg_tier_release_load(fg_engine_t *e, fg_session_t *s);
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
 * (with its snapshot where it has one) unless its key is on disk already,
 * with a snapshot or without one to add [mu]. */
void fg_ptier_spill(fg_engine_t *e, uint32_t id);
/* On a cache miss of the page at position at with prev and tokens: when
 * its key (and those of the following full pages of tokens[0, n_pages *
 * 64)) are on disk, queues their loads. Returns true when the first one is
 * loading (wait for it), false for a plain miss [mu]. */
bool fg_ptier_fetch(fg_engine_t *e, int tenant_ix, int at, uint64_t prev, const int32_t *tokens, int n_pages);
/* Whether the page file of key is being read back [mu]. */
bool fg_ptier_loading(const fg_engine_t *e, int tenant_ix, uint64_t key);
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
/* Frees a job and what it holds (its page references released) [mu]. */
void fg_tier_free_job(fg_engine_t *e, fg_save_job *j);

#endif
