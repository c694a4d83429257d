/* ep_ranks.h: the expert-parallel ranks of one node (this process, or one
 * engine standing in for a node in a test) that run one engine step
 * together — the serving engine's form of expert parallelism.
 *
 * Each rank is a thread with its own forward pass (scratch), worker pool and
 * end of an in-process transport (or of NCCL, one GPU per rank); the model
 * weights (memory-mapped) and the KV store are shared. The forward pass is
 * the architecture's CPU one (engine/model/arch.h: forward_create, with its
 * routed experts handed to the exchange by forward_set_ep; deepseek2 and
 * deepseek4), or with the cuda backend (deepseek2) one CUDA backend
 * per rank, local rank i on CUDA device i, computing its attention and its
 * experts on that GPU (the exchange still runs on host buffers); then each
 * rank's device holds a copy of the KV pool, and pages move between the
 * devices through the host store (fg_backend_options.kv_versions). Attention is data-parallel: a sequence runs on the
 * rank the caller names (the engine assigns each session one rank for its
 * life, so its KV pages are only ever written by that rank). MoE layers are
 * expert-parallel: each rank computes the experts the shard gives it, for
 * every rank's tokens (engine/ep/moe_ep.h). Local rank 0 runs on the caller's
 * thread.
 *
 * Several nodes: the job's n_ranks are split into nodes of n_local ranks;
 * this object runs ranks first_rank .. first_rank + n_local - 1 and its
 * peers run in other engines (other processes over NCCL, or other engines
 * of this process sharing one in-process group). Every rank of every node
 * must then run the same steps, so each step starts with an agreement round
 * (fg_ep_ranks_round): one all-gather of every rank's token count and a
 * "leaving" flag; the step runs when the total is above zero and nobody
 * leaves, on every node at once, those without tokens joining the MoE
 * exchanges with zero rows.
 *
 * Owns: the rank threads, their forwards, pools, transports and exchange
 * buffers, the placement. Memory is tied to the object; a step allocates
 * nothing.
 * Thread safety: one caller at a time (the engine's step thread, or the
 * direct-mode caller).
 */
#ifndef FG_EP_RANKS_H
#define FG_EP_RANKS_H

#include "config/fg_error.h"
#include "engine/backend/backend.h"
#include "engine/ep/ep_shard.h"
#include "engine/ep/ep_transport.h"
#include "engine/ep/moe_ep.h"
#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"

typedef struct fg_ep_ranks fg_ep_ranks_t;

typedef struct fg_ep_ranks_options {
    int n_ranks;              /* over the whole job (every node) */
    int n_local;              /* ranks this object runs; 0: n_ranks (one node) */
    int first_rank;           /* global id of the first local rank: node * n_local */
    /* In-process transport shared by several nodes of this process (tests):
     * a group of n_ranks made by the caller, outliving this object. NULL:
     * the ranks make their own (then n_local must be n_ranks). */
    fg_ep_inproc_group_t *group;
    int max_tokens;           /* tokens per step over all ranks (one rank may get them all) */
    int n_threads;            /* compute threads over all ranks, split evenly (at least 1 each) */
    fg_isa isa;
    int experts_per_rank;     /* 0: derived; see fg_ep_shard_options */
    int redundant;            /* replica slots over all ranks */
    fg_ep_placement placement;
    int64_t recv_capacity_rows; /* rows a rank receives per exchange round; 0: the worst case (moe_ep.h) */
    const char *hot_experts;  /* heat order for the replicas, see fg_ep_shard_options.hot_list; NULL: id order */
    _Atomic uint64_t *expert_tokens; /* [n_expert] every rank's routed picks per expert id; NULL: not counted */
    /* NULL: the in-process transport. Else the job's ncclUniqueId
     * [FG_EP_NCCL_ID_BYTES]: the ranks talk over NCCL, local rank i on CUDA
     * device i of this node (the compute stays on the CPU; NCCL stages the
     * host buffers through the device). */
    const uint8_t *nccl_id;
    /* Where each rank computes: FG_BACKEND_CPU (0, the default) or
     * FG_BACKEND_CUDA (local rank i on device i; needs kv, the host store the
     * sequences' pages come from). */
    fg_backend_kind backend;
    fg_kv_store_t *kv;
} fg_ep_ranks_options;

/* Every node must be made with the same n_ranks, n_local, max_tokens and
 * placement options. No collective runs here (NCCL: ncclCommInitRank blocks
 * until every rank of the job has joined).
 * Errors: FG_ERR_UNSUPPORTED (a model without routed experts, or an
 * architecture without forward_set_ep), FG_ERR_CONFIG (the placement does not fit the model: see
 * fg_ep_shard_create), FG_ERR_INVALID_ARG (n_ranks outside 1..FG_EP_MAX_RANKS,
 * max_tokens < 1, n_local not dividing n_ranks, first_rank not a node's
 * first, several nodes with neither a group nor an NCCL id, a group of
 * another size, cuda without kv), FG_ERR_UNSUPPORTED and FG_ERR_IO (NCCL: see
 * fg_ep_nccl_transport_create; cuda: no usable GPU for a rank, the message
 * says which, see fg_backend_open), FG_ERR_NOMEM (also: a thread could not
 * start). */
fg_err fg_ep_ranks_create(const fg_arch_model *m, const fg_kv_geometry *geo, const fg_ep_ranks_options *o,
                          fg_ep_ranks_t **out, fg_diag *diag);
void fg_ep_ranks_destroy(fg_ep_ranks_t *r);

/* A host page of the store changed outside the ranks' runs (restored from
 * disk, copied on write): with the cuda backend every rank uploads it before
 * its next read; a no-op on the cpu backend. Call between steps. */
void fg_ep_ranks_page_changed(fg_ep_ranks_t *r, const uint8_t *page);

/* Ranks this object runs (n_local): sequences name them 0 .. count - 1. */
int fg_ep_ranks_count(const fg_ep_ranks_t *r);
/* True when the job has ranks outside this object: steps need rounds. */
bool fg_ep_ranks_multinode(const fg_ep_ranks_t *r);
/* Compute threads of one rank. */
int fg_ep_ranks_threads(const fg_ep_ranks_t *r);
/* The expert exchanges' counters so far (the same on every rank). */
void fg_ep_ranks_exchange_stats(const fg_ep_ranks_t *r, fg_moe_ep_stats *st);

/* Runs one step (one node only: use fg_ep_ranks_round with several):
 * sequence i (its tokens contiguous in tokens, in seqs order) runs on local
 * rank seq_rank[i]; each rank's sequences keep their order. Every
 * rank runs, those without sequences too. Logits land where each seqs[i]
 * asks, caches advance as with the architecture's forward_run.
 * Errors: FG_ERR_INVALID_ARG (a rank out of range, more than max_tokens
 * tokens), and the first error of any rank's forward_run (others may have
 * advanced their sequences). */
fg_err fg_ep_ranks_run(fg_ep_ranks_t *r, const int32_t *tokens, const fg_fwd_seq *seqs, const int *seq_rank,
                       int n_seqs, fg_diag *diag);

/* What an agreement round decided. */
typedef struct fg_ep_round {
    bool stepped;             /* the step ran on every rank of the job */
    int64_t job_tokens;       /* tokens of this step over all nodes */
    int left_node;            /* a node that announced it leaves (the lowest), or -1 */
} fg_ep_round;

/* One agreement round, then the step it agrees on, on every local rank:
 * each rank all-gathers its token count and the leave flag; when no node
 * leaves and the job has tokens, the step runs as fg_ep_ranks_run (local
 * ranks without sequences join the MoE exchanges with zero rows). A node
 * that leaves announces it here and must run no further round; its peers
 * learn it from the same round and must run none either (the job cannot
 * step without it). Collective over the job: every node calls it, each as
 * often as the others. n_seqs may be 0 (an idle node polling its peers).
 * Errors: FG_ERR_INVALID_ARG (as fg_ep_ranks_run; this node then takes part
 * with no tokens, so the peers still complete), FG_ERR_IO (the transport failed: the job is
 * unusable), and the first error of a local rank's forward_run. */
fg_err fg_ep_ranks_round(fg_ep_ranks_t *r, const int32_t *tokens, const fg_fwd_seq *seqs, const int *seq_rank,
                         int n_seqs, bool leave, fg_ep_round *out, fg_diag *diag);

#endif
