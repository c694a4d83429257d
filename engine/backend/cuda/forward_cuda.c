/* forward_cuda.c: the deepseek2 forward pass on the GPU, step for step the
 * one of engine/model/deepseek2/forward.c (see its header comment for the shapes), with the
 * kernels of kernels/cuda/. Differences that matter for numerics: sums run
 * in other orders (products, attention, the MoE combine), so logits agree
 * with the CPU backend within a tolerance, not bit for bit; cache rows are
 * written with the same conversions as the CPU (same bytes for the same
 * inputs).
 *
 * Per step the host stages the batch description (tokens, positions, each
 * token's row address and page list, the rows that want logits) in pinned
 * memory, copies it over in three transfers, queues every launch on one
 * stream, and waits once for the logits.
 */
#include <stdatomic.h>
#include <string.h>

#include "engine/backend/cuda/backend_cuda_internal.h"
#include "kernels/cpu/mla_attn.h"
#include "kernels/cuda/kv_write.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/mla_attn.cuh"
#include "kernels/cuda/moe_experts.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/vecops.cuh"

/* Offsets of the int arrays inside d_ints / h_ints, each [max_tokens], in the
 * order backend_cuda.c points the fg_device_batch views at them. */
enum { I_TOK, I_POS, I_PAGE0, I_NKV, I_LOGIT_ROW };

/* y[m][t] = W_m x[m][t] for a plain weight (n_mat 1) over n rows. */
static fg_cuda_status mm(cuda_backend *c, const fg_dweight *w, const float *x, int64_t x_stride, int n, float *y,
                         int64_t y_stride)
{
    fg_cuda_matmul_params p = {.wtype = w->type, .w = w->d, .w_mat_bytes = w->mat_bytes, .n_in = w->n_in,
                               .n_out = w->n_out, .n_tok = n, .n_mat = 1, .x = x, .x_stride = x_stride,
                               .y = y, .y_stride = y_stride, .q8_scratch = c->q8};
    return fg_cuda_matmul(&p, &c->launch);
}

static fg_cuda_status norm(cuda_backend *c, float *y, int64_t y_stride, const float *x, int64_t x_stride,
                           const float *w, int n_rows, int n)
{
    fg_cuda_rmsnorm_params p = {.y = y, .y_stride = y_stride, .x = x, .x_stride = x_stride, .w = w,
                                .n_rows = n_rows, .n = n, .eps = c->m->hp.rms_eps};
    return fg_cuda_rmsnorm(&p, &c->launch);
}

static fg_cuda_status add(cuda_backend *c, float *x, const float *y, int64_t n)
{
    fg_cuda_add_params p = {.x = x, .y = y, .n = n};
    return fg_cuda_add(&p, &c->launch);
}

static fg_err attention_block(cuda_backend *c, const fg_dlayer *ly, int il, int n, fg_diag *diag)
{
    const fg_hparams *hp = &c->m->hp;
    const int d = hp->n_embd, H = hp->n_head, L = hp->kv_lora, R = hp->n_rope, nope = hp->n_nope, V = hp->n_v;
    const int qk = nope + R;
    const int *pos = c->d_ints + (size_t)I_POS * c->base.max_tokens;

    TRY(norm(c, c->xn, d, c->x, d, ly->attn_norm, n, d), "attn_norm");
    if (hp->q_lora > 0) {
        TRY(mm(c, &ly->q_a, c->xn, d, n, c->qa, hp->q_lora), "q_a");
        TRY(norm(c, c->qa, hp->q_lora, c->qa, hp->q_lora, ly->q_a_norm, n, hp->q_lora), "q_a_norm");
        TRY(mm(c, &ly->q_b, c->qa, hp->q_lora, n, c->q, (int64_t)H * qk), "q_b");
    } else {
        TRY(mm(c, &ly->q_b, c->xn, d, n, c->q, (int64_t)H * qk), "attn_q");
    }
    TRY(mm(c, &ly->kv_a, c->xn, d, n, c->kva, L + R), "kv_a_mqa");

    /* New cache rows: normalised latent, roped key, stored in the cache format. */
    TRY(norm(c, c->kva, L + R, c->kva, L + R, ly->kv_a_norm, n, L), "kv_a_norm");
    fg_cuda_rope_params rk = {.x = c->kva + L, .tok_stride = L + R, .vec_stride = R, .n_tok = n, .n_vec = 1,
                              .n_dims = R, .pos = pos, .inv_freq = c->d_inv_freq, .mscale = c->rope.mscale};
    TRY(fg_cuda_rope(&rk, &c->launch), "rope k");
    fg_cuda_kv_write_params kw = {.format = c->geo.format, .src = c->kva, .src_stride = L + R, .kv_lora = L,
                                  .n_rope = R, .latent_bytes = c->geo.latent_bytes, .rows = c->d_rows,
                                  .layer_offset = (size_t)il * FG_KV_PAGE_TOKENS * c->geo.row_bytes, .n_tok = n};
    TRY(fg_cuda_kv_write(&kw, &c->launch), "kv write");

    /* Queries: rope part roped in place per head; no-rope part absorbed through k_b per head. */
    fg_cuda_rope_params rq = {.x = c->q + nope, .tok_stride = (int64_t)H * qk, .vec_stride = qk, .n_tok = n,
                              .n_vec = H, .n_dims = R, .pos = pos, .inv_freq = c->d_inv_freq,
                              .mscale = c->rope.mscale};
    TRY(fg_cuda_rope(&rq, &c->launch), "rope q");
    fg_cuda_matmul_params kb = {.wtype = ly->k_b.type, .w = ly->k_b.d, .w_mat_bytes = ly->k_b.mat_bytes,
                                .n_in = nope, .n_out = L, .n_tok = n, .n_mat = H, .x = c->q,
                                .x_stride = (int64_t)H * qk, .x_mat_stride = qk, .y = c->q_lat,
                                .y_stride = (int64_t)H * L, .y_mat_stride = L, .q8_scratch = c->q8};
    TRY(fg_cuda_matmul(&kb, &c->launch), "k_b absorb");

    const int T = c->base.max_tokens;
    fg_cuda_mla_attn_params ap = {.n_tok = n, .n_head = H, .kv_lora = L, .n_rope = R, .scale = c->rope.attn_scale,
                                  .format = c->geo.format, .latent_bytes = c->geo.latent_bytes,
                                  .row_bytes = c->geo.row_bytes,
                                  .layer_offset = (size_t)il * FG_KV_PAGE_TOKENS * c->geo.row_bytes,
                                  .pages = (const uint8_t *const *)c->d_pages,
                                  .tok_page0 = c->d_ints + (size_t)I_PAGE0 * T,
                                  .tok_n_kv = c->d_ints + (size_t)I_NKV * T, .q_lat = c->q_lat, .q_rope = c->q + nope,
                                  .rope_tok_stride = (int64_t)H * qk, .rope_head_stride = qk, .out = c->o_lat};
    TRY(fg_cuda_mla_attn(&ap, &c->launch), "mla attention");

    fg_cuda_matmul_params vb = {.wtype = ly->v_b.type, .w = ly->v_b.d, .w_mat_bytes = ly->v_b.mat_bytes,
                                .n_in = L, .n_out = V, .n_tok = n, .n_mat = H, .x = c->o_lat,
                                .x_stride = (int64_t)H * L, .x_mat_stride = L, .y = c->o,
                                .y_stride = (int64_t)H * V, .y_mat_stride = V, .q8_scratch = c->q8};
    TRY(fg_cuda_matmul(&vb, &c->launch), "v_b expand");
    TRY(mm(c, &ly->attn_out, c->o, (int64_t)H * V, n, c->tmp_d, d), "attn_output");
    TRY(add(c, c->x, c->tmp_d, (int64_t)n * d), "residual");
    return FG_OK;
}

/* SwiGLU over n rows of xn into tmp_d: down(silu(gate(x)) * up(x)). */
static fg_err swiglu(cuda_backend *c, const fg_dweight *gate, const fg_dweight *up, const fg_dweight *down, int n,
                     fg_diag *diag)
{
    const int d = c->m->hp.n_embd, F = gate->n_out;
    TRY(mm(c, gate, c->xn, d, n, c->ff_gate, F), "ffn_gate");
    TRY(mm(c, up, c->xn, d, n, c->ff_up, F), "ffn_up");
    fg_cuda_silu_mul_params sm = {.g = c->ff_gate, .u = c->ff_up, .stride = F, .n_rows = n, .n = F};
    TRY(fg_cuda_silu_mul(&sm, &c->launch), "silu_mul");
    TRY(mm(c, down, c->ff_gate, F, n, c->tmp_d, d), "ffn_down");
    return FG_OK;
}

/* The router on the GPU: sel_ids and sel_w [n][k]. */
static fg_err route(cuda_backend *c, const fg_dlayer *ly, int n, fg_diag *diag)
{
    const fg_hparams *hp = &c->m->hp;
    const int d = hp->n_embd, E = hp->n_expert, K = hp->n_expert_used;
    TRY(mm(c, &ly->router, c->xn, d, n, c->router, E), "router");
    fg_cuda_moe_route_params rp = {.logits = c->router, .bias = ly->exp_probs_b, .n_tok = n, .n_expert = E,
                                   .n_used = K, .gating = hp->gating, .n_group = hp->n_group > 0 ? hp->n_group : 1,
                                   .n_group_used = hp->n_group > 1 ? hp->n_group_used : 1,
                                   .norm = hp->expert_weights_norm, .scale = hp->expert_weights_scale,
                                   .ids = c->sel_ids, .weights = c->sel_w};
    TRY(fg_cuda_moe_route(&rp, &c->launch), "moe route");
    return FG_OK;
}

static fg_err shared_expert(cuda_backend *c, const fg_dlayer *ly, int n, fg_diag *diag)
{
    if (!ly->gate_shexp.d)
        return FG_OK;
    fg_err e = swiglu(c, &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp, n, diag);
    if (e)
        return e;
    TRY(add(c, c->x, c->tmp_d, (int64_t)n * c->m->hp.n_embd), "shared expert residual");
    return FG_OK;
}

/* The MoE layer under expert parallelism: route here, then the routed ids,
 * weights, normalised inputs and residual come down; the exchange
 * (engine/ep/moe_ep.h) sends the rows to the ranks holding their experts (this
 * rank's own through its GPU compute, moe_compute_cuda.c) and adds the
 * weighted results into the residual in the CPU's order; the residual goes
 * back up and the shared expert runs here. An exchange error is kept and the
 * pass goes on, so the peers complete every layer (as engine/model/deepseek2/forward.c). */
static fg_err moe_layer_ep(cuda_backend *c, const fg_dlayer *ly, int n, fg_diag *diag)
{
    const fg_hparams *hp = &c->m->hp;
    const int d = hp->n_embd, K = hp->n_expert_used;
    const int il = (int)(ly - c->layers);
    fg_err e = route(c, ly, n, diag);
    if (e)
        return e;
    const size_t nk = (size_t)n * K, nd = (size_t)n * d;
    cudaStream_t st = c->stream;
    if ((e = fg_cuda_rt(cudaMemcpyAsync(c->h_ids, c->sel_ids, nk * sizeof(int), cudaMemcpyDeviceToHost, st),
                        "download routed ids", diag)) ||
        (e = fg_cuda_rt(cudaMemcpyAsync(c->h_w, c->sel_w, nk * sizeof(float), cudaMemcpyDeviceToHost, st),
                        "download routed weights", diag)) ||
        (e = fg_cuda_rt(cudaMemcpyAsync(c->h_xn, c->xn, nd * sizeof(float), cudaMemcpyDeviceToHost, st),
                        "download expert inputs", diag)) ||
        (e = fg_cuda_rt(cudaMemcpyAsync(c->h_x, c->x, nd * sizeof(float), cudaMemcpyDeviceToHost, st),
                        "download residual", diag)) ||
        (e = fg_cuda_rt(cudaStreamSynchronize(st), "moe layer", diag)))
        return e;
    if (c->pick_sink)
        for (size_t i = 0; i < nk; i++)
            if (c->h_ids[i] >= 0 && c->h_ids[i] < hp->n_expert)
                c->picks[c->h_ids[i]]++;
    c->ep_next = il + 1; /* this layer's exchange runs now, whatever it returns */
    fg_diag xd;
    const fg_err xe = fg_moe_ep_experts(c->ep, il, n, c->h_ids, c->h_w, c->h_xn, c->h_x, &xd);
    if (xe != FG_OK && c->ep_err == FG_OK) {
        c->ep_err = xe;
        c->ep_diag = xd;
    }
    if ((e = fg_cuda_rt(cudaMemcpyAsync(c->x, c->h_x, nd * sizeof(float), cudaMemcpyHostToDevice, st),
                        "upload residual", diag)))
        return e;
    return shared_expert(c, ly, n, diag);
}

/* The MoE layer: route, group the routed slots by expert, the grouped expert
 * SwiGLU, the weighted combine into the residual, then the shared expert.
 * Under expert parallelism: moe_layer_ep. */
static fg_err moe_layer(cuda_backend *c, const fg_dlayer *ly, int n, fg_diag *diag)
{
    if (c->ep)
        return moe_layer_ep(c, ly, n, diag);
    const fg_hparams *hp = &c->m->hp;
    const int d = hp->n_embd, E = hp->n_expert, K = hp->n_expert_used, Fe = ly->gate_exps.n_out;
    fg_err re = route(c, ly, n, diag);
    if (re)
        return re;
    fg_cuda_moe_group_params gp = {.ids = c->sel_ids, .n_tok = n, .n_used = K, .n_expert = E, .seg = c->seg,
                                   .sorted_tok = c->sorted_tok, .slot_pos = c->slot_pos};
    TRY(fg_cuda_moe_group(&gp, &c->launch), "moe group");

    const fg_dweight *w_in[2] = {&ly->gate_exps, &ly->up_exps};
    float *h_out[2] = {c->ex_gate, c->ex_up};
    for (int i = 0; i < 2; i++) {
        fg_cuda_moe_experts_params ep = {.wtype = w_in[i]->type, .w = w_in[i]->d, .w_mat_bytes = w_in[i]->mat_bytes,
                                         .n_in = d, .n_out = Fe, .n_expert = E, .seg = c->seg, .n_slots = n * K,
                                         .slot_row = c->sorted_tok, .x = c->xn, .x_stride = d, .n_rows = n,
                                         .y = h_out[i], .y_stride = Fe, .q8_scratch = c->q8};
        TRY(fg_cuda_moe_experts(&ep, &c->launch), i ? "up_exps" : "gate_exps");
    }
    fg_cuda_silu_mul_params sm = {.g = c->ex_gate, .u = c->ex_up, .stride = Fe, .n_rows = n * K, .n = Fe};
    TRY(fg_cuda_silu_mul(&sm, &c->launch), "experts silu_mul");
    fg_cuda_moe_experts_params dp = {.wtype = ly->down_exps.type, .w = ly->down_exps.d,
                                     .w_mat_bytes = ly->down_exps.mat_bytes, .n_in = Fe, .n_out = d, .n_expert = E,
                                     .seg = c->seg, .n_slots = n * K, .slot_row = NULL, .x = c->ex_gate,
                                     .x_stride = Fe, .n_rows = n * K, .y = c->ex_out, .y_stride = d,
                                     .q8_scratch = c->q8};
    TRY(fg_cuda_moe_experts(&dp, &c->launch), "down_exps");
    fg_cuda_moe_combine_params cp = {.x = c->x, .y = c->ex_out, .weights = c->sel_w, .slot_pos = c->slot_pos,
                                     .n_tok = n, .n_used = K, .d = d};
    TRY(fg_cuda_moe_combine(&cp, &c->launch), "moe combine");
    return shared_expert(c, ly, n, diag);
}

static fg_err ffn_block(cuda_backend *c, const fg_dlayer *ly, int n, fg_diag *diag)
{
    const int d = c->m->hp.n_embd;
    TRY(norm(c, c->xn, d, c->x, d, ly->ffn_norm, n, d), "ffn_norm");
    if (ly->is_moe)
        return moe_layer(c, ly, n, diag);
    fg_err e = swiglu(c, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, n, diag);
    if (e)
        return e;
    TRY(add(c, c->x, c->tmp_d, (int64_t)n * d), "ffn residual");
    return FG_OK;
}

/* The batch description in pinned memory (engine/backend/device_batch.h), then on the
 * device. Grows the page list when the batch's sequences hold more pages than
 * it has room for (the only allocation a step can make). */
static fg_err stage_batch(cuda_backend *c, const int32_t *tokens, const fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    const size_t need = fg_device_batch_pages(seqs, n_seqs);
    if (need > c->cap_pages) {
        uintptr_t *hp = NULL;
        const uint8_t **dp = NULL;
        if (cudaMallocHost((void **)&hp, need * sizeof *hp) != cudaSuccess ||
            cudaMalloc((void **)&dp, need * sizeof *dp) != cudaSuccess) {
            if (hp)
                cudaFreeHost(hp);
            cudaGetLastError();
            return fg_diag_set(diag, FG_ERR_NOMEM, "backend cuda: cannot grow the page list to %zu pages", need);
        }
        cudaStreamSynchronize(c->stream);
        cudaFreeHost(c->h_pages);
        cudaFree((void *)c->d_pages);
        c->h_pages = c->batch.pages = hp;
        c->d_pages = dp;
        c->cap_pages = c->batch.cap_pages = need;
    }
    fg_err e = fg_device_batch_plan(&c->batch, c->kv, (uintptr_t)c->d_kv, tokens, seqs, n_seqs, diag);
    if (e)
        return e;
    const int T = c->base.max_tokens;
    if ((e = fg_cuda_rt(cudaMemcpyAsync(c->d_ints, c->h_ints, 5 * (size_t)T * sizeof(int), cudaMemcpyHostToDevice,
                                        c->stream), "stage batch", diag)) ||
        (e = fg_cuda_rt(cudaMemcpyAsync(c->d_rows, c->h_rows, (size_t)c->batch.n_tok * sizeof(uintptr_t),
                                        cudaMemcpyHostToDevice, c->stream), "stage rows", diag)) ||
        (e = fg_cuda_rt(cudaMemcpyAsync((void *)c->d_pages, c->h_pages, c->batch.n_pages * sizeof(uintptr_t),
                                        cudaMemcpyHostToDevice, c->stream), "stage pages", diag)))
        return e;
    return FG_OK;
}

/* Several backends over one host store (fg_backend_options.kv_versions):
 * every page the batch reads whose host version this device has not seen
 * goes up first (written on another rank's GPU, or changed on the host). */
static fg_err kv_pull(cuda_backend *c, const fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    for (int si = 0; si < n_seqs; si++) {
        const fg_kv_seq *kv = seqs[si].kv;
        const int used = (kv->n_tokens + seqs[si].n_tokens + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
        for (int i = 0; i < used && i < kv->n_pages; i++) {
            const size_t p = fg_kv_store_page_index(c->kv, kv->pages[i]);
            if (p >= c->n_pages || c->kv_seen[p] == c->kv_versions[p])
                continue;
            fg_err e = fg_cuda_rt(cudaMemcpyAsync(c->d_kv + p * c->geo.page_bytes, kv->pages[i], c->geo.page_bytes,
                                                  cudaMemcpyHostToDevice, c->stream), "upload a KV page", diag);
            if (e)
                return e;
            c->kv_seen[p] = c->kv_versions[p];
        }
    }
    return FG_OK;
}

/* After a run: the pages it wrote go back to their host pages, with a new
 * version, so the other ranks' devices fetch them before reading them. */
static fg_err kv_push(cuda_backend *c, const fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    for (int si = 0; si < n_seqs; si++) {
        const fg_kv_seq *kv = seqs[si].kv;
        const int first = kv->n_tokens / FG_KV_PAGE_TOKENS;
        const int end = (kv->n_tokens + seqs[si].n_tokens + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
        for (int i = first; i < end && i < kv->n_pages; i++) {
            const size_t p = fg_kv_store_page_index(c->kv, kv->pages[i]);
            if (p >= c->n_pages)
                continue;
            fg_err e = fg_cuda_rt(cudaMemcpyAsync(kv->pages[i], c->d_kv + p * c->geo.page_bytes, c->geo.page_bytes,
                                                  cudaMemcpyDeviceToHost, c->stream), "write back a KV page", diag);
            if (e)
                return e;
            c->kv_seen[p] = ++c->kv_versions[p];
        }
    }
    return fg_cuda_rt(cudaStreamSynchronize(c->stream), "write back KV pages", diag);
}

/* The pass itself; under expert parallelism c->ep_next says how far the
 * exchanges got when it returns. */
static fg_err forward_pass(cuda_backend *c, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    const fg_hparams *hp = &c->m->hp;
    const int T = c->base.max_tokens;
    int n = 0;
    fg_err e = fg_device_batch_check(tokens, seqs, n_seqs, T, hp->n_vocab, &n, diag);
    if (e)
        return e;
    if (n == 0)
        return FG_OK;

    if (c->kv_versions && (e = kv_pull(c, seqs, n_seqs, diag)))
        return e;
    if ((e = stage_batch(c, tokens, seqs, n_seqs, diag)))
        return e;
    const int nl = c->batch.n_logit_rows;
    const int d = hp->n_embd, V = hp->n_vocab;
    fg_cuda_get_rows_params emb = {.wtype = c->tok_embd.type, .w = c->tok_embd.d, .n_rows = c->tok_embd.n_out,
                                   .n = d, .ids = c->d_ints + (size_t)I_TOK * T, .out = c->x, .n_tok = n};
    TRY(fg_cuda_get_rows(&emb, &c->launch), "token embedding");
    for (int il = 0; il < hp->n_layer; il++) {
        if ((e = attention_block(c, &c->layers[il], il, n, diag)) || (e = ffn_block(c, &c->layers[il], n, diag)))
            return e;
    }
    if (nl > 0) {
        /* Final norm and LM head for the rows that asked for logits: gather them first. */
        fg_cuda_get_rows_params g = {.wtype = FG_WTYPE_F32, .w = c->x, .n_rows = n, .n = d,
                                     .ids = c->d_ints + (size_t)I_LOGIT_ROW * T, .out = c->logit_rows, .n_tok = nl};
        TRY(fg_cuda_get_rows(&g, &c->launch), "gather logit rows");
        TRY(norm(c, c->logit_rows, d, c->logit_rows, d, c->output_norm, nl, d), "output_norm");
        TRY(mm(c, &c->output, c->logit_rows, d, nl, c->logits, V), "output");
        if ((e = fg_cuda_rt(cudaMemcpyAsync(c->h_logits, c->logits, (size_t)nl * V * sizeof(float),
                                            cudaMemcpyDeviceToHost, c->stream), "copy logits", diag)))
            return e;
    }
    if ((e = fg_cuda_rt(cudaStreamSynchronize(c->stream), "forward pass", diag)))
        return e;
    if (c->ep_err != FG_OK) /* the cache rows were written but the sequences do not advance */
        return fg_diag_set(diag, c->ep_err, "%s", c->ep_diag.msg);
    if (c->kv_versions && (e = kv_push(c, seqs, n_seqs, diag)))
        return e;
    int r = 0;
    for (int si = 0; si < n_seqs; si++) {
        for (int j = 0; j < seqs[si].n_logits; j++, r++)
            memcpy(seqs[si].logits + (size_t)j * V, c->h_logits + (size_t)r * V, (size_t)V * sizeof(float));
        seqs[si].kv->n_tokens += seqs[si].n_tokens;
    }
    for (int x = 0; c->pick_sink && x < hp->n_expert; x++) /* counted once the tokens count: a failed run is redone */
        if (c->picks[x])
            atomic_fetch_add_explicit(&c->pick_sink[x], c->picks[x], memory_order_relaxed);
    return FG_OK;
}

fg_err fg_cuda_forward_run(cuda_backend *c, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    c->ep_next = 0;
    c->ep_err = FG_OK;
    if (c->picks)
        memset(c->picks, 0, (size_t)c->m->hp.n_expert * sizeof *c->picks);
    fg_err e = forward_pass(c, tokens, seqs, n_seqs, diag);
    if (!c->ep)
        return e;
    /* The peers exchange with us at every MoE layer, whatever happened here:
     * the layers this pass did not reach take part with no tokens. */
    for (int il = c->ep_next; il < c->m->hp.n_layer; il++) {
        if (!c->m->layers[il].is_moe)
            continue;
        fg_diag xd;
        const fg_err xe = fg_moe_ep_experts(c->ep, il, 0, NULL, NULL, NULL, NULL, &xd);
        if (xe != FG_OK && e == FG_OK)
            e = fg_diag_set(diag, xe, "%s", xd.msg);
    }
    return e;
}
