/* backend_impl.h: what a backend implements (engine/backend/backend.h is what the
 * engine calls). Each implementation embeds struct fg_backend first and
 * fills its ops table. Not for use outside engine/. */
#ifndef FG_BACKEND_IMPL_H
#define FG_BACKEND_IMPL_H

#include "engine/backend/backend.h"

typedef struct fg_backend_ops {
    fg_err (*run)(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);
    fg_err (*kv_page_to_host)(fg_backend_t *b, uint8_t *page, fg_diag *diag);
    fg_err (*kv_page_to_device)(fg_backend_t *b, const uint8_t *page, fg_diag *diag);
    void (*close)(fg_backend_t *b);
    /* fg_arch.forward_draft's contract; NULL: the backend cannot draft (FG_ERR_UNSUPPORTED). */
    fg_err (*draft)(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag);
} fg_backend_ops;

struct fg_backend {
    const fg_backend_ops *ops;
    fg_backend_kind kind;
    int max_tokens;
    bool can_draft;      /* draft works: the model has an MTP block and the backend runs it */
};

/* engine/backend/backend_cpu.c */
fg_err fg_backend_cpu_open(const fg_backend_options *o, fg_backend_t **out, fg_diag *diag);
/* engine/backend/cuda/backend_cuda.c (only in CUDA builds) */
fg_err fg_backend_cuda_open(const fg_backend_options *o, fg_backend_t **out, fg_diag *diag);

#endif
