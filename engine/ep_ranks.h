/* ep_ranks.h: N in-process expert-parallel ranks that run one engine step
 * together — the serving engine's CPU form of expert parallelism.
 *
 * Each rank is a thread with its own forward pass (scratch), worker pool and
 * end of an in-process transport (or of NCCL, one GPU per rank, to check the
 * NCCL path on one node); the model weights (memory-mapped) and the
 * KV store are shared. Attention is data-parallel: a sequence runs on the
 * rank the caller names (the engine assigns each session one rank for its
 * life, so its KV pages are only ever written by that rank). MoE layers are
 * expert-parallel: each rank computes the experts the shard gives it, for
 * every rank's tokens (engine/moe_ep.h). Rank 0 runs on the caller's thread.
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
#include "engine/ep_shard.h"
#include "engine/forward.h"
#include "engine/kv_store.h"
#include "engine/model.h"
#include "engine/moe_ep.h"

typedef struct fg_ep_ranks fg_ep_ranks_t;

typedef struct fg_ep_ranks_options {
    int n_ranks;
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
     * [FG_EP_NCCL_ID_BYTES]: the ranks talk over NCCL, rank i on CUDA device
     * i of this node (one node; the compute stays on the CPU). */
    const uint8_t *nccl_id;
} fg_ep_ranks_options;

/* Errors: FG_ERR_CONFIG (the placement does not fit the model: see
 * fg_ep_shard_create), FG_ERR_INVALID_ARG (n_ranks outside 1..FG_EP_MAX_RANKS,
 * max_tokens < 1), FG_ERR_UNSUPPORTED and FG_ERR_IO (NCCL: see
 * fg_ep_nccl_transport_create), FG_ERR_NOMEM (also: a thread could not start). */
fg_err fg_ep_ranks_create(const fg_model *m, const fg_kv_geometry *geo, const fg_ep_ranks_options *o,
                          fg_ep_ranks_t **out, fg_diag *diag);
void fg_ep_ranks_destroy(fg_ep_ranks_t *r);

int fg_ep_ranks_count(const fg_ep_ranks_t *r);
/* Compute threads of one rank. */
int fg_ep_ranks_threads(const fg_ep_ranks_t *r);
/* The expert exchanges' counters so far (the same on every rank). */
void fg_ep_ranks_exchange_stats(const fg_ep_ranks_t *r, fg_moe_ep_stats *st);

/* Runs one step: sequence i (its tokens contiguous in tokens, in seqs order)
 * runs on rank seq_rank[i]; each rank's sequences keep their order. Every
 * rank runs, those without sequences too. Logits land where each seqs[i]
 * asks, caches advance as with fg_forward_run.
 * Errors: FG_ERR_INVALID_ARG (a rank out of range, more than max_tokens
 * tokens), and the first error of any rank's fg_forward_run (others may have
 * advanced their sequences). */
fg_err fg_ep_ranks_run(fg_ep_ranks_t *r, const int32_t *tokens, const fg_fwd_seq *seqs, const int *seq_rank,
                       int n_seqs, fg_diag *diag);

#endif
