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

#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/gguf.h"
#include "engine/kv_store.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
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
    char name[FG_SESSION_NAME_MAX + 1];        /* [const] "" when anonymous */
    char tenant_name[FG_SESSION_NAME_MAX + 1]; /* [const] */
    uint64_t order;                 /* [const] creation order, for scheduling */

    /* [mu] requests from API threads */
    int32_t *in_tok;
    int in_n, in_cap;
    bool respond_req;
    fg_response_params req;
    uint64_t req_id;
    uint64_t next_response_id;
    bool cancel_req;
    bool freed;                     /* the owner let go; the step thread frees */
    bool responding;                /* from respond() until the DONE event is queued */
    bool dirty;                     /* on the engine's dirty list */
    fg_session_t *dirty_next;
    bool ready;                     /* on the engine's ready list */
    fg_session_t *ready_next;
    fg_outq out;
    int length_snapshot;            /* seq.n_tokens as of the last step */
    int64_t committed;              /* tokens in the cache, queued, or sampled: bounded by the context */

    /* [step] */
    fg_kv_seq seq;
    int32_t *todo;                  /* tokens to prefill */
    int todo_n, todo_cap;
    int32_t *hist;                  /* token ids whose KV is in seq, in order */
    int hist_n, hist_cap;
    fg_response resp;
    bool adopted;
    fg_session_t *all_next, *all_prev;
    int batch_tokens;               /* this step: tokens in the batch */
    int batch_logits;               /* this step: 1 when the step samples for it */
};

struct fg_engine {
    fg_engine_options opt;          /* [const] */
    fg_gguf_t *gguf;
    fg_model *model;
    fg_tokenizer_t *tok;
    fg_kv_store_t *kv;
    fg_pool_t *pool;
    fg_forward_t *fwd;
    int n_ctx;
    int max_token_bytes;            /* longest token text, for output-queue room */

    /* serving mode */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    bool stop;                      /* [mu] */
    bool work;                      /* [mu] something changed since the last look */
    fg_session_t *dirty_head;       /* [mu] sessions with requests */
    fg_session_t *ready_head;       /* [mu] sessions with events to poll */
    fg_engine_stats stats;          /* [mu] */
    uint64_t session_order;         /* [mu] */
    bool wake_owner;                /* [mu] events were queued since the last wakeup call */

    /* [step] */
    fg_session_t *all_head;         /* adopted sessions */
    fg_sampler_t *sampler;
    fg_sched_t *sched;
    fg_sched_item *items;           /* [2 * max_batch_tokens] decode then prefill candidates */
    fg_session_t **cand;            /* [2 * max_batch_tokens] */
    fg_fwd_seq *fseqs;              /* [max_batch_tokens] */
    int32_t *btok;                  /* [max_batch_tokens] */
    float *logits;                  /* [max_batch_tokens][n_vocab] */
    char *text_scratch;             /* [FG_MAX_STOP_BYTES + max_token_bytes] */
};

/* engine.c */
/* True when name is 1..FG_SESSION_NAME_MAX bytes of [A-Za-z0-9_-]. */
bool fg_session_name_valid(const char *name);

/* engine_serve.c */
fg_err fg_engine_serve_start(fg_engine_t *e, fg_diag *diag);
void fg_engine_serve_stop(fg_engine_t *e);
fg_err fg_session_serve_init(fg_session_t *s);
void fg_session_serve_release(fg_session_t *s);

#endif
