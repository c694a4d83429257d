/* backend_cpu.c: the CPU backend: engine/model/deepseek2/forward.c, unchanged, behind the
 * backend table. Its KV pages are the host pages, so the tier copies are
 * no-ops. */
#include <stdlib.h>

#include "engine/backend/backend_impl.h"

typedef struct cpu_backend {
    struct fg_backend base; /* first */
    fg_forward_t *fwd;
} cpu_backend;

static fg_err cpu_run(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    return fg_forward_run(((cpu_backend *)b)->fwd, tokens, seqs, n_seqs, diag);
}

static fg_err cpu_page_to_host(fg_backend_t *b, uint8_t *page, fg_diag *diag) { return FG_OK; }

static fg_err cpu_page_to_device(fg_backend_t *b, const uint8_t *page, fg_diag *diag) { return FG_OK; }

static void cpu_close(fg_backend_t *b)
{
    cpu_backend *c = (cpu_backend *)b;
    fg_forward_destroy(c->fwd);
    free(c);
}

static const fg_backend_ops cpu_ops = {cpu_run, cpu_page_to_host, cpu_page_to_device, cpu_close};

fg_err fg_backend_cpu_open(const fg_backend_options *o, fg_backend_t **out, fg_diag *diag)
{
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c)
        return fg_diag_set(diag, FG_ERR_NOMEM, "cpu backend: out of memory");
    fg_err e = fg_forward_create(o->model, o->geo, o->max_tokens, o->pool, o->isa, &c->fwd, diag);
    if (e != FG_OK) {
        free(c);
        return e;
    }
    fg_forward_count_experts(c->fwd, o->expert_tokens);
    if (o->ep)
        fg_forward_set_ep(c->fwd, o->ep);
    c->base = (struct fg_backend){.ops = &cpu_ops, .kind = FG_BACKEND_CPU, .max_tokens = o->max_tokens};
    *out = &c->base;
    return FG_OK;
}
