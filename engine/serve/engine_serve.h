/* engine_serve.h: the state the serving step thread (engine_serve.c) owns:
 * in the engine, the thread, the request and event lists, and the step's
 * buffers; in each session, its requests from API threads, its output queue
 * and its response. Part of engine_internal.h; not for use outside engine/.
 *
 * Locking: [mu] fields are guarded by engine->mu; [step] fields belong to the
 * step thread.
 */
#ifndef FG_ENGINE_SERVE_H
#define FG_ENGINE_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/base/list.h"
#include "config/base/tokens.h"
#include "engine/engine.h"
#include "engine/model/arch.h"
#include "engine/serve/sampler.h"
#include "engine/serve/scheduler.h"
#include "engine/serve/spec.h"

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
    /* speculative decoding (spec.h) */
    int32_t draft[FG_SPEC_MAX_DRAFTS]; /* this step's drafts, fed after next_token */
    int n_draft;
    bool draft_mtp;             /* this step's drafts come from the MTP block (written after the plan) */
    int32_t out[FG_SPEC_MAX_DRAFTS + 1]; /* this step's tokens: accepted drafts, then the one sampled after them */
    int n_out;
    int64_t drafted, accepted;  /* over the response (fg_usage) */
    int spec_fails;             /* verifications in a row that did not pay (spec_verify) */
    int spec_skip;              /* decode steps left without drafts: 2^fails - 1 after a failure */
} fg_response;

/* A full page one prefill of a step computes first: its tenant and chained key. */
typedef struct fg_page_claim {
    uint64_t key;
    int tenant_ix;
} fg_page_claim;

/* A session's part [mu unless marked]. */
typedef struct fg_session_serve {
    /* [mu] requests from API threads */
    fg_tokens in;                   /* input not yet taken by the step thread */
    bool respond_req;
    fg_response_params req;
    uint64_t req_id;
    uint64_t req_order;             /* the request's place in e->serve.session_order, taken when it is made */
    uint64_t next_response_id;
    bool cancel_req;
    /* a cut (fg_session_truncate; the calling thread waits on e->done_cv) */
    bool cut_req;
    int cut_n;                      /* tokens to keep */
    bool cut_done;
    fg_err cut_err;
    bool freed;                     /* the owner let go; the step thread frees */
    bool responding;                /* from respond() until the DONE event is queued */
    fg_list dirty_link;             /* on e->serve.dirty while it has requests for the step thread */
    fg_list ready_link;             /* on e->serve.ready while it has events to poll */
    fg_outq out;
    int length_snapshot;            /* seq.n_tokens as of the last step */
    int64_t committed;              /* tokens in the cache, queued, or sampled: bounded by the context */
    fg_session_t *open_next;        /* [mu] on e->serve.open_head while not freed */

    /* [step] */
    fg_response resp;
    bool adopted;
    fg_list all_link;               /* on e->serve.all while adopted */
    int batch_tokens;               /* this step: tokens in the batch */
    int batch_logits;               /* this step: logits rows the step computes for it (0: none) */
    /* A stateful cache (fg_engine_seq_state) cannot drop rows: before a step
     * with drafts its state is copied to spec_state, and after a partial
     * acceptance it goes back there, and the tokens it then lacks (accepted,
     * and already emitted) run first in the next step, as replay. */
    int32_t replay[FG_SPEC_MAX_DRAFTS + 1];
    int n_replay;
    int batch_replay;               /* this step: of batch_tokens, replayed ones (first) */
    int batch_at;                   /* this step: its first token's index in btok */
    uint8_t *spec_state;            /* fg_kv_state_copy of seq.state, held from the first draft to the response's end */
} fg_session_serve;

/* The engine's part. */
typedef struct fg_engine_serve {
    pthread_t thread;               /* the step thread */
    bool thread_started;
    pthread_cond_t work_cv;         /* wakes the step thread */
    bool stop;                      /* [mu] */
    bool work;                      /* [mu] something changed since the last look */
    fg_list dirty;                  /* [mu] sessions with requests (dirty_link), newest first */
    fg_list ready;                  /* [mu] sessions with events to poll (ready_link), newest first */
    uint64_t session_order;         /* [mu] request counter, counted by fg_session_respond: fg_response.order */
    bool wake_owner;                /* [mu] events were queued since the last wakeup call */

    /* [step] */
    fg_list all;                    /* adopted sessions (all_link), newest first */
    fg_sampler_t *sampler;
    fg_sched_t *sched;
    fg_sched_item *items;           /* [3 * max_batch_tokens] decode, then prefill and draft candidates */
    fg_session_t **cand;            /* [3 * max_batch_tokens] */
    fg_page_claim *claims;          /* [max_batch_tokens] pages the step's prefills will compute first */
    fg_fwd_seq *fseqs;              /* [max_batch_tokens] */
    int32_t *btok;                  /* [step_capacity] */
    float *logits;                  /* [max_batch_tokens][n_vocab] rows of logits (MTP drafts' first, then the step's) */
    int32_t *draft_tok;             /* [max_batch_tokens] MTP drafts: each drafting session's input token */
    fg_fwd_seq *draft_seqs;         /* [max_batch_tokens] */
    fg_session_t **draft_sess;      /* [max_batch_tokens] */
    bool can_draft;                 /* [const] the backend drafts with the model's MTP block */
    char *text_scratch;             /* [FG_MAX_STOP_BYTES + max_token_bytes] */

    fg_session_t *open_head;        /* [mu] sessions not freed (names are unique among them) */
} fg_engine_serve;

#endif
