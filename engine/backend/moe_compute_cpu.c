/* moe_compute_cpu.c: the routed experts of one rank on the CPU (see
 * moe_compute.h). Each slot's rows are gathered into one contiguous block
 * and run through the same matrix kernels, in the same order and batch
 * sizes, as the expert-parallel path always has, so results are bit for bit
 * those of before the interface existed (test_ep_logits checks them against
 * the single-rank forward).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/backend/moe_compute.h"

typedef struct cpu_compute {
    fg_moe_compute base;    /* first */
    const fg_arch_model *m;
    fg_pool_t *pool;
    fg_isa isa;
    int d, F;
    int64_t max_rows;
    float *xe;              /* [max_rows][d] one expert's gathered rows */
    float *ff_gate, *ff_up; /* [max_rows][F] */
    float *ye;              /* [max_rows][d] */
    void *mm_scratch;
} cpu_compute;

static void matmul(cpu_compute *c, const fg_weight *w, int64_t mat, const float *x, int n, float *y)
{
    const uint8_t *data = (const uint8_t *)w->data + (size_t)mat * w->mat_bytes;
    /* Cannot fail: types and shapes were validated at model load. */
    (void)fg_matmul(c->pool, c->isa, w->type, data, w->n_in, w->n_out, x, n, y, c->mm_scratch);
}

static fg_err cpu_run(fg_moe_compute *base, int il, const fg_moe_rows *r, fg_diag *diag)
{
    cpu_compute *c = (cpu_compute *)base;
    const int d = c->d;
    fg_arch_experts ly;
    if (!c->m->arch->layer_experts(c->m, il, &ly))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert compute: layer %d has no routed experts", il);
    for (int s = 0; s < r->n_slots; s++) {
        const int begin = r->seg[s], m = r->seg[s + 1] - begin, e = r->expert[s];
        if (m == 0)
            continue;
        if (m > c->max_rows)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert %d: %d rows in one round, room for %lld", e, m,
                               (long long)c->max_rows);
        for (int j = 0; j < m; j++)
            memcpy(c->xe + (size_t)j * d, r->x + (size_t)r->row[begin + j] * r->x_stride, (size_t)d * sizeof(float));
        matmul(c, ly.gate, e, c->xe, m, c->ff_gate);
        matmul(c, ly.up, e, c->xe, m, c->ff_up);
        for (int j = 0; j < m; j++)
            ly.act(c->isa, c->ff_gate + (size_t)j * c->F, c->ff_up + (size_t)j * c->F, c->F, ly.clamp);
        matmul(c, ly.down, e, c->ff_gate, m, c->ye);
        for (int j = 0; j < m; j++)
            memcpy(r->y + (size_t)r->row[begin + j] * d, c->ye + (size_t)j * d, (size_t)d * sizeof(float));
    }
    return FG_OK;
}

static void *alloc64(size_t n, int *failed)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        *failed = 1;
        return NULL;
    }
    return p;
}

fg_err fg_moe_compute_cpu_create(const fg_arch_model *m, int64_t max_rows, fg_pool_t *pool, fg_isa isa,
                                 fg_moe_compute **out, fg_diag *diag)
{
    *out = NULL;
    if (max_rows < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert compute: %lld rows per expert, at least 1",
                           (long long)max_rows);
    if (!m->arch->layer_experts)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert compute: %s models have no routed experts",
                           m->arch->name);
    cpu_compute *c = calloc(1, sizeof *c);
    if (!c)
        return fg_diag_set(diag, FG_ERR_NOMEM, "expert compute: out of memory");
    c->base.run = cpu_run;
    c->m = m;
    c->pool = pool;
    c->isa = isa;
    c->d = m->n_embd;
    c->F = m->n_ff_exp;
    c->max_rows = max_rows;
    const size_t rows = (size_t)max_rows, d = (size_t)c->d, F = (size_t)c->F, fl = sizeof(float);
    int failed = 0;
    c->xe = alloc64(rows * d * fl, &failed);
    c->ff_gate = alloc64(rows * F * fl, &failed);
    c->ff_up = alloc64(rows * F * fl, &failed);
    c->ye = alloc64(rows * d * fl, &failed);
    size_t mm = 0;
    for (int il = 0; il < m->n_layer_run; il++) {
        fg_arch_experts ly;
        if (!m->arch->layer_experts(m, il, &ly))
            continue;
        const fg_weight *ws[] = {ly.gate, ly.up, ly.down};
        for (int i = 0; i < 3; i++) {
            size_t b = fg_matmul_scratch_bytes(ws[i]->type, ws[i]->n_in, max_rows);
            mm = b > mm ? b : mm;
        }
    }
    c->mm_scratch = alloc64(mm, &failed);
    if (failed) {
        fg_moe_compute_cpu_destroy(&c->base);
        return fg_diag_set(diag, FG_ERR_NOMEM, "expert compute: cannot allocate buffers for %lld rows",
                           (long long)max_rows);
    }
    *out = &c->base;
    return FG_OK;
}

void fg_moe_compute_cpu_destroy(fg_moe_compute *base)
{
    if (!base)
        return;
    cpu_compute *c = (cpu_compute *)base;
    free(c->xe);
    free(c->ff_gate);
    free(c->ff_up);
    free(c->ye);
    free(c->mm_scratch);
    free(c);
}

int fg_moe_rows_by_expert(const fg_moe_rows *r, int n_expert, int max_rows, int *slot_of, int *seg, int *slot_row,
                          fg_diag *diag)
{
    for (int e = 0; e < n_expert; e++)
        slot_of[e] = -1;
    for (int s = 0; s < r->n_slots; s++) {
        const int e = r->expert[s];
        if (e < 0 || e >= n_expert || slot_of[e] >= 0) {
            fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert compute: slot %d holds expert %d (out of range or twice)",
                        s, e);
            return -1;
        }
        slot_of[e] = s;
    }
    int p = 0;
    for (int e = 0; e < n_expert; e++) {
        seg[e] = p;
        const int s = slot_of[e];
        if (s < 0)
            continue;
        for (int q = r->seg[s]; q < r->seg[s + 1]; q++) {
            if (p >= max_rows || r->row[q] < 0 || r->row[q] >= r->n_rows) {
                fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert compute: bad grouping (%d rows, room for %d)",
                            r->n_rows, max_rows);
                return -1;
            }
            slot_row[p++] = r->row[q];
        }
    }
    seg[n_expert] = p;
    return p;
}
