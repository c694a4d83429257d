/* backend_cuda_internal.h: the CUDA backend's state, shared by
 * backend_cuda.c (device, weights, KV pool, tiers) and forward_cuda.c (the
 * forward pass). Not for use outside engine/backend/cuda/.
 *
 * Device memory, sized at open (nothing is allocated per step, except the
 * batch page list growing past its initial capacity):
 *   weights: every tensor of the model copied once (the GGUF stays mapped);
 *   KV pool: fg_kv_store_pages_total pages, page i mirroring host page i;
 *   scratch: activations for max_tokens tokens, as engine/model/deepseek2/forward.c has.
 * Thread safety: the engine's step thread (or the direct-mode caller).
 */
#ifndef FG_BACKEND_CUDA_INTERNAL_H
#define FG_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "engine/backend/backend_impl.h"
#include "engine/backend/device_batch.h"
#include "engine/backend/moe_compute.h"
#include "engine/model/rope.h"
#include "kernels/cuda/launch_check.h"

/* A weight on the device: n_mat matrices [n_out][n_in] of type, mat_bytes apart. */
typedef struct fg_dweight {
    const void *d;
    int type;
    int n_in, n_out, n_mat;
    size_t mat_bytes;
} fg_dweight;

typedef struct fg_dlayer {
    const float *attn_norm, *q_a_norm, *kv_a_norm, *ffn_norm, *exp_probs_b;
    fg_dweight q_a, q_b, kv_a, k_b, v_b, attn_out;
    bool is_moe;
    fg_dweight ffn_gate, ffn_up, ffn_down;
    fg_dweight router, gate_exps, up_exps, down_exps, gate_shexp, up_shexp, down_shexp;
} fg_dlayer;

typedef struct cuda_backend {
    struct fg_backend base; /* first */
    const fg_model *m;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    int device;
    fg_cuda_launch launch;  /* sm and stream of every launch */
    cudaStream_t stream;
    fg_rope rope;

    void **allocs;          /* every device allocation, freed at close */
    int n_allocs, cap_allocs;

    /* weights */
    fg_dweight tok_embd, output;
    const float *output_norm;
    fg_dlayer *layers;      /* [n_layer] host table of device pointers */
    double *d_inv_freq;     /* [n_rope / 2] */

    /* KV pool: page i of the host store <-> d_kv + i * page_bytes */
    uint8_t *d_kv;
    size_t n_pages;

    /* scratch, for T = max_tokens tokens (shapes as engine/model/deepseek2/forward.c) */
    float *x, *xn, *qa, *q, *kva, *q_lat, *o_lat, *o, *tmp_d, *ff_gate, *ff_up;
    float *router, *sel_w;  /* [T][E], [T][k] */
    int *sel_ids, *seg, *sorted_tok, *slot_pos; /* [T][k], [E+1], [T*k], [T*k] */
    float *ex_gate, *ex_up; /* [T*k][n_ff_exp] */
    float *ex_out;          /* [T*k][d] */
    float *logit_rows;      /* [T][d] */
    float *logits;          /* [T][V] */
    void *q8;               /* Q8_0 activation scratch, q8_bytes */
    size_t q8_bytes;

    /* per batch: ints [5][T] (tokens, positions, first page, n_kv, logit rows), row
     * addresses [T] and the page list [cap_pages], staged in pinned host memory */
    int *d_ints, *h_ints;
    uint8_t **d_rows;
    uintptr_t *h_rows;
    const uint8_t **d_pages;
    uintptr_t *h_pages;
    size_t cap_pages;
    fg_device_batch batch;  /* views of h_ints, h_rows, h_pages */
    float *h_logits;        /* [T][V] pinned */

    /* expert parallelism (NULL ep: none). Per MoE layer the routed ids and
     * weights, the normalised inputs and the residual come to the host, the
     * exchange adds the routed experts into the residual there, and it goes
     * back up (forward_cuda.c moe_layer_ep). */
    fg_moe_ep_t *ep;
    struct fg_moe_compute *ep_compute; /* this GPU's expert compute, set on ep */
    int *h_ids;             /* [T][k] pinned */
    float *h_w;             /* [T][k] pinned */
    float *h_xn, *h_x;      /* [T][d] pinned */
    int ep_next;            /* [per run] first layer whose exchange has not run */
    fg_err ep_err;          /* [per run] the first exchange error */
    fg_diag ep_diag;
    uint64_t *picks;        /* [E] routed picks of this run (under expert parallelism) */
    _Atomic uint64_t *pick_sink; /* [E] where a run adds them; NULL: not counted */

    /* several backends over one host store (fg_backend_options.kv_versions) */
    uint32_t *kv_versions;  /* [n_pages] shared; NULL: this backend alone */
    uint32_t *kv_seen;      /* [n_pages] the version of each page this device holds */
} cuda_backend;

/* moe_compute_cuda.c: the routed experts of this rank's slots on this GPU
 * (engine/backend/moe_compute.h), for the exchange ep: device buffers for its
 * receive capacity. Errors: FG_ERR_NOMEM (device or pinned host memory). */
fg_err fg_cuda_moe_compute_create(cuda_backend *c, const fg_moe_ep_t *ep, struct fg_moe_compute **out,
                                  fg_diag *diag);
void fg_cuda_moe_compute_destroy(struct fg_moe_compute *mc);

/* forward_cuda.c */
fg_err fg_cuda_forward_run(cuda_backend *c, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);

/* A CUDA runtime result as an fg_err with the runtime's message (FG_ERR_IO),
 * or FG_OK. what names the step. */
fg_err fg_cuda_rt(cudaError_t e, const char *what, fg_diag *diag);
/* A launcher status as an fg_err: FG_ERR_INVALID_ARG (shape, pointer, type),
 * FG_ERR_UNSUPPORTED (architecture), FG_ERR_IO (launch failed), or FG_OK. */
fg_err fg_cuda_launched(fg_cuda_status s, const char *op, fg_diag *diag);
/* Returns fg_cuda_launched's error of a launch from the enclosing function
 * (which has an fg_diag *diag). */
#define TRY(expr, op)                                                \
    do {                                                             \
        fg_err try_err_ = fg_cuda_launched((expr), (op), diag);      \
        if (try_err_ != FG_OK)                                       \
            return try_err_;                                         \
    } while (0)

#endif
