/* backend.h: where the forward pass runs. One small interface at
 * forward-pass granularity, so the engine, the scheduler and sessions do not
 * change with the device:
 *   - open for a model, a KV geometry and a batch size;
 *   - run one batch (the contract of fg_arch.forward_run, engine/model/arch.h);
 *   - the KV page pool: pages are allocated and freed by the host store
 *     (engine/kv/kv_store.h, reference counts and page tables unchanged); a
 *     backend keeps the resident copy of each page where it computes. The CPU
 *     backend computes in the host pages themselves; the CUDA backend keeps a
 *     device pool mirroring the store page for page, and the host page is the
 *     next tier: kv_page_to_host / kv_page_to_device move one page between them
 *     (for spilling to disk and restoring).
 *
 * Backends: "cpu" (the architecture's forward pass, always built, the
 * reference) and "cuda" (engine/backend/cuda/, deepseek2 only, built when
 * CMake finds nvcc). Expert parallelism plugs in at
 * each backend's MoE layer step (fg_backend_options.ep).
 *
 * Thread safety: a backend belongs to the engine's step thread (or the
 * direct-mode caller); one call at a time.
 */
#ifndef FG_BACKEND_H
#define FG_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/ep/moe_ep.h"
#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"

typedef enum fg_backend_kind {
    FG_BACKEND_CPU = 0,
    FG_BACKEND_CUDA = 1,
} fg_backend_kind;

/* "cpu", "cuda"; NULL when out of range. */
const char *fg_backend_kind_name(fg_backend_kind k);

/* 1 when this build has the backend's code (CUDA: nvcc was found at build time). */
int fg_backend_compiled(fg_backend_kind k);

typedef struct fg_backend_options {
    fg_backend_kind kind;
    const fg_arch_model *model; /* cpu: any architecture (its forward pass); cuda: deepseek2 */
    const fg_kv_geometry *geo;
    fg_kv_store_t *kv;     /* the host page store; its pages are the ones in fg_kv_seq tables */
    int max_tokens;        /* tokens per run, >= 1 */
    /* cpu */
    fg_pool_t *pool;
    fg_isa isa;
    _Atomic uint64_t *expert_tokens; /* [n_expert] routed picks per expert id are added here; NULL: not
                                      * counted (fg_forward_count_experts; the cuda backend counts only under
                                      * expert parallelism, where it downloads the routed ids anyway) */
    /* Expert parallelism: this rank's exchange (engine/ep/moe_ep.h), which must
     * outlive the backend; NULL: the routed experts run here. The cpu backend
     * hands it to its forward pass; the cuda backend routes on the GPU,
     * stages the routed rows through the host and sets its GPU expert
     * compute on it (fg_moe_ep_set_compute; detached again at close). */
    fg_moe_ep_t *ep;
    /* cuda, several backends over one host store (one per rank): [pages of
     * the store] a version per host page, shared by them. Each backend writes
     * the pages it wrote in a run back to the host and bumps their version,
     * and uploads before a run every page whose version it has not seen, so
     * a page written on one GPU (a shared prefix) is read right on another.
     * Whoever changes a host page between runs bumps its version
     * (fg_backend_kv_page_changed). NULL: one backend, no mirroring. */
    uint32_t *kv_versions;
    /* cuda */
    int device;            /* CUDA device ordinal, >= 0 */
} fg_backend_options;

typedef struct fg_backend fg_backend_t;

/* Errors: FG_ERR_UNSUPPORTED (a backend this build lacks, no usable GPU, a
 * GPU architecture without kernels here, a weight type or KV format the
 * backend cannot run; the message says which and what to do),
 * FG_ERR_INVALID_ARG, FG_ERR_MODEL_HPARAM, FG_ERR_NOMEM (host or device). */
fg_err fg_backend_open(const fg_backend_options *o, fg_backend_t **out, fg_diag *diag);
void fg_backend_close(fg_backend_t *b);

fg_backend_kind fg_backend_kind_of(const fg_backend_t *b);
int fg_backend_max_tokens(const fg_backend_t *b);

/* One batch, as fg_arch.forward_run (engine/model/arch.h): writes each token's cache
 * rows, advances kv->n_tokens, fills the requested logits (host memory).
 * Errors: those of forward_run; FG_ERR_IO when the device failed (the
 * message has the CUDA error). */
fg_err fg_backend_run(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);

/* Whether fg_backend_draft works here: the cpu backend on a model whose
 * architecture fills forward_draft (an MTP block); never on cuda. */
bool fg_backend_can_draft(const fg_backend_t *b);

/* Drafts with the model's MTP block, as fg_arch.forward_draft
 * (engine/model/arch.h): for each sequence (n_tokens 1, n_logits 1),
 * tokens[i] follows its cache; logits get the MTP block's prediction of the
 * token after it; a second call before the next fg_backend_run chains one
 * further. The caches are left as they were. Errors: FG_ERR_UNSUPPORTED (no
 * MTP block, or the cuda backend), those of forward_run. */
fg_err fg_backend_draft(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);

/* Copies a page's resident contents into its host page (next tier), or back.
 * No-ops on the CPU backend. Errors: FG_ERR_INVALID_ARG (not a page of the
 * store), FG_ERR_IO (device copy failed). */
fg_err fg_backend_kv_page_to_host(fg_backend_t *b, uint8_t *page, fg_diag *diag);
fg_err fg_backend_kv_page_to_device(fg_backend_t *b, const uint8_t *page, fg_diag *diag);

/* With shared kv_versions: marks a host page changed outside the backends
 * (restored from disk, copied on write), so every backend uploads it before
 * its next read. store: the host store; versions: the shared array. Returns
 * false when page is not one of the store's. */
bool fg_backend_kv_page_changed(fg_kv_store_t *store, uint32_t *versions, const uint8_t *page);

#endif
