/* backend_cpu.c: the CPU backend: the architecture's forward pass
 * (engine/model/arch.h), unchanged, behind the backend table (its MTP
 * drafts too, where the architecture has them). Its KV pages are the host pages, so the tier copies are
 * no-ops. */
#include <stdlib.h>

#include "engine/backend/backend_impl.h"

typedef struct cpu_backend {
    struct fg_backend base; /* first */
    const fg_arch *arch;
    fg_arch_forward_t *fwd;
} cpu_backend;

static fg_err cpu_run(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    cpu_backend *c = (cpu_backend *)b;
    return c->arch->forward_run(c->fwd, tokens, seqs, n_seqs, diag);
}

static fg_err cpu_draft(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    cpu_backend *c = (cpu_backend *)b;
    return c->arch->forward_draft(c->fwd, tokens, seqs, n_seqs, diag);
}

static fg_err cpu_page_to_host(fg_backend_t *b, uint8_t *page, fg_diag *diag) { return FG_OK; }

static fg_err cpu_page_to_device(fg_backend_t *b, const uint8_t *page, fg_diag *diag) { return FG_OK; }

static void cpu_close(fg_backend_t *b)
{
    cpu_backend *c = (cpu_backend *)b;
    c->arch->forward_destroy(c->fwd);
    free(c);
}

static const fg_backend_ops cpu_ops = {cpu_run, cpu_page_to_host, cpu_page_to_device, cpu_close, cpu_draft};

fg_err fg_backend_cpu_open(const fg_backend_options *o, fg_backend_t **out, fg_diag *diag)
{
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c)
        return fg_diag_set(diag, FG_ERR_NOMEM, "cpu backend: out of memory");
    const fg_arch *a = c->arch = o->model->arch;
    if (o->ep && !a->forward_set_ep) {
        free(c);
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "cpu backend: %s has no routed experts to run in parallel",
                           a->name);
    }
    fg_err e = a->forward_create(o->model, o->geo, o->max_tokens, o->pool, o->isa, &c->fwd, diag);
    if (e != FG_OK) {
        free(c);
        return e;
    }
    if (a->forward_count_experts)
        a->forward_count_experts(c->fwd, o->expert_tokens);
    if (o->ep)
        a->forward_set_ep(c->fwd, o->ep);
    c->base = (struct fg_backend){.ops = &cpu_ops, .kind = FG_BACKEND_CPU, .max_tokens = o->max_tokens,
                                 .can_draft = a->forward_draft != NULL};
    *out = &c->base;
    return FG_OK;
}
