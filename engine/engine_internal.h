/* engine_internal.h: the engine's and sessions' private state. Each part
 * that owns state declares it in its own header, as a sub-struct of
 * fg_engine and of fg_session: the step thread (engine/serve/engine_serve.h),
 * the disk tier (engine/kv/kv_tier.h) and prefix sharing
 * (engine/kv/kv_share.h); what stays here is who a session is, its cache,
 * and the engine's model, store and threads. Not for use outside engine/.
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
#include "engine/kv/kv_share.h"
#include "engine/kv/kv_tier.h"
#include "engine/kv/prefix_cache.h"
#include "engine/kv/session_file.h"
#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "engine/serve/engine_serve.h"
#include "engine/serve/sampler.h"
#include "engine/serve/scheduler.h"
#include "engine/serve/spec.h"
#include "kernels/cpu/pool.h"

struct fg_session {
    /* [const] who it is */
    fg_engine_t *e;
    fg_session_params params;       /* name and tenant_name point at the copies below */
    char name[FG_NAME_MAX + 1];        /* "" when anonymous */
    char tenant_name[FG_NAME_MAX + 1];
    int tenant_ix;                  /* index in e->tier.tenants: KV page owner, hash salt */
    uint64_t uid;                   /* engine-unique, names it in writer jobs */
    int ep_rank;                    /* expert parallelism: the rank its KV and attention live on */

    /* [step] its cache, which every part reads */
    fg_kv_seq seq;                  /* empty while on disk */
    fg_tokens todo;                 /* tokens to prefill */
    fg_tokens hist;                 /* token ids whose KV is in seq, in order */
    bool todo_sampled;              /* todo[0] is the last response's sampled token (forks keep it) */

    fg_session_serve serve;         /* requests, output queue, response (engine/serve/engine_serve.h) */
    fg_session_tier tier;           /* files, saves, spills, loads (engine/kv/kv_tier.h) */
    fg_session_share share;         /* page keys, prefix-cache state, forks (engine/kv/kv_share.h) */
};

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

    /* Serving mode: one lock for the state of every part marked [mu]. */
    pthread_mutex_t mu;
    pthread_cond_t done_cv;         /* forks, save_all and the writer report here */
    fg_engine_stats stats;          /* [mu] counted by every part */
    uint64_t next_uid;              /* [mu] */

    fg_engine_serve serve;          /* the step thread (engine/serve/engine_serve.h) */
    fg_engine_tier tier;            /* the disk tier and its writer thread (engine/kv/kv_tier.h) */
    fg_engine_share share;          /* prefix sharing (engine/kv/kv_share.h) */
};

/* The first adopted session (newest first), and the one after s; NULL at the
 * end. s stays valid while it is visited: free a session only outside such a
 * walk [step]. */
static inline fg_session_t *fg_all_first(const fg_engine_t *e)
{
    fg_list *l = fg_list_first(&e->serve.all);
    return l ? fg_list_entry(l, fg_session_t, serve.all_link) : NULL;
}
static inline fg_session_t *fg_all_next(const fg_engine_t *e, const fg_session_t *s)
{
    fg_list *l = fg_list_next(&e->serve.all, &s->serve.all_link);
    return l ? fg_list_entry(l, fg_session_t, serve.all_link) : NULL;
}

/* engine.c: one forward pass over seqs[n], the sequences of sessions[n],
 * through the plain pass or the expert-parallel ranks. Errors: as
 * fg_forward_run / fg_ep_ranks_run. */
fg_err fg_engine_forward(fg_engine_t *e, const int32_t *tokens, fg_fwd_seq *seqs, fg_session_t *const *sessions,
                         int n, fg_diag *diag);

/* engine.c: MTP drafts (fg_backend_draft) for seqs[n]; whether the engine
 * has them (a backend that drafts; none under expert parallelism). Errors:
 * FG_ERR_UNSUPPORTED, those of the backend. */
bool fg_engine_can_draft(const fg_engine_t *e);
fg_err fg_engine_draft(fg_engine_t *e, const int32_t *tokens, fg_fwd_seq *seqs, int n, fg_diag *diag);

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

/* Whether the model's cache has per-sequence state besides its pages
 * (deepseek4's window rings and open compressor blocks). Such a sequence
 * cannot be cut back: it recomputes from the start where a deepseek2
 * session would drop its last rows. The prefix cache shares its pages in
 * whole units with state snapshots and forks copy its state (kv_share.c).
 * Its session files hold its pages and state (session_file.h, version 3). */
static inline bool fg_engine_seq_state(const fg_engine_t *e) { return fg_kv_store_geometry(e->kv)->seq_bytes != 0; }
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
/* Puts s on the dirty list and wakes the step thread [mu]. */
void fg_serve_mark_dirty(fg_engine_t *e, fg_session_t *s);
void fg_session_serve_release(fg_session_t *s);

#endif
