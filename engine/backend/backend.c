/* backend.c: choosing a backend by kind, and the calls through its table. */
#include "engine/backend/backend.h"

#include "engine/backend/backend_impl.h"
#include "engine/engine.h"

_Static_assert(FG_ENGINE_BACKEND_CPU == (int)FG_BACKEND_CPU && FG_ENGINE_BACKEND_CUDA == (int)FG_BACKEND_CUDA,
               "engine.h backend values");

const char *fg_backend_kind_name(fg_backend_kind k)
{
    switch (k) {
    case FG_BACKEND_CPU:
        return "cpu";
    case FG_BACKEND_CUDA:
        return "cuda";
    }
    return NULL;
}

int fg_backend_compiled(fg_backend_kind k)
{
#ifdef FG_HAVE_CUDA
    if (k == FG_BACKEND_CUDA)
        return 1;
#endif
    return k == FG_BACKEND_CPU;
}

fg_err fg_backend_open(const fg_backend_options *o, fg_backend_t **out, fg_diag *diag)
{
    *out = NULL;
    if (o->max_tokens < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "max batch tokens must be >= 1");
    switch (o->kind) {
    case FG_BACKEND_CPU:
        return fg_backend_cpu_open(o, out, diag);
    case FG_BACKEND_CUDA:
#ifdef FG_HAVE_CUDA
        return fg_backend_cuda_open(o, out, diag);
#else
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "backend cuda: this flashgate was built without CUDA (no nvcc at build time); "
                           "set model.backend to cpu, or rebuild with -DFG_CUDA=ON on a machine with the CUDA toolkit");
#endif
    }
    return fg_diag_set(diag, FG_ERR_INVALID_ARG, "unknown backend %d", (int)o->kind);
}

void fg_backend_close(fg_backend_t *b)
{
    if (b)
        b->ops->close(b);
}

fg_backend_kind fg_backend_kind_of(const fg_backend_t *b) { return b->kind; }

int fg_backend_max_tokens(const fg_backend_t *b) { return b->max_tokens; }

fg_err fg_backend_run(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    return b->ops->run(b, tokens, seqs, n_seqs, diag);
}

bool fg_backend_can_draft(const fg_backend_t *b) { return b->can_draft && b->ops->draft; }

fg_err fg_backend_draft(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    if (!fg_backend_can_draft(b))
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           b->kind == FG_BACKEND_CUDA
                               ? "backend cuda: no MTP drafts (speculative decoding falls back to prompt lookup)"
                               : "the model has no MTP block to draft with (speculative decoding uses prompt lookup)");
    return b->ops->draft(b, tokens, seqs, n_seqs, diag);
}

fg_err fg_backend_kv_page_to_host(fg_backend_t *b, uint8_t *page, fg_diag *diag)
{
    return b->ops->kv_page_to_host(b, page, diag);
}

fg_err fg_backend_kv_page_to_device(fg_backend_t *b, const uint8_t *page, fg_diag *diag)
{
    return b->ops->kv_page_to_device(b, page, diag);
}

bool fg_backend_kv_page_changed(fg_kv_store_t *store, uint32_t *versions, const uint8_t *page)
{
    const size_t i = page ? fg_kv_store_page_index(store, page) : (size_t)-1;
    if (i >= fg_kv_store_pages_total(store))
        return false;
    versions[i]++;
    return true;
}
