/* backend_cuda.c: the CUDA backend's life cycle: finding a usable GPU,
 * copying the weights, the device KV pool mirroring the host store, the
 * scratch, and the page copies between the device and the host tier. The
 * forward pass itself is forward_cuda.c.
 *
 * Every failure at open is an error with a message, never an abort: no GPU
 * or no driver (FG_ERR_UNSUPPORTED), a GPU this build has no kernels for
 * (FG_ERR_UNSUPPORTED), a model beyond the kernels' limits
 * (FG_ERR_UNSUPPORTED), device memory short (FG_ERR_NOMEM).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/cuda/backend_cuda_internal.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/mla_attn.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/rope.cuh"

fg_err fg_cuda_rt(cudaError_t e, const char *what, fg_diag *diag)
{
    if (e == cudaSuccess)
        return FG_OK;
    return fg_diag_set(diag, FG_ERR_IO, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

fg_err fg_cuda_launched(fg_cuda_status s, const char *op, fg_diag *diag)
{
    switch (s) {
    case FG_CUDA_OK:
        return FG_OK;
    case FG_CUDA_BAD_ARCH:
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "cuda: %s: no kernels for this GPU architecture", op);
    case FG_CUDA_LAUNCH_FAILED: /* the launcher consumed the runtime's error code */
        return fg_diag_set(diag, FG_ERR_IO, "cuda: %s: the CUDA runtime rejected the launch", op);
    default:
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "cuda: %s: rejected before launch (%s)", op,
                           fg_cuda_status_name(s));
    }
}

static void *dev_alloc(cuda_backend *c, size_t bytes, int *failed)
{
    if (*failed)
        return NULL;
    if (c->n_allocs == c->cap_allocs) {
        int cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        void **a = realloc(c->allocs, (size_t)cap * sizeof *a);
        if (!a) {
            *failed = 1;
            return NULL;
        }
        c->allocs = a;
        c->cap_allocs = cap;
    }
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        *failed = 1;
        return NULL;
    }
    c->allocs[c->n_allocs++] = p;
    return p;
}

static const void *dev_upload(cuda_backend *c, const void *host, size_t bytes, int *failed)
{
    void *d = dev_alloc(c, bytes, failed);
    if (d && cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        *failed = 1;
    return d;
}

static fg_dweight upload_weight(cuda_backend *c, const fg_weight *w, int *failed)
{
    fg_dweight d = {.type = w->type, .n_in = (int)w->n_in, .n_out = (int)w->n_out, .n_mat = (int)w->n_mat,
                    .mat_bytes = w->mat_bytes};
    if (w->data)
        d.d = dev_upload(c, w->data, w->mat_bytes * (size_t)w->n_mat, failed);
    return d;
}

static const float *upload_vec(cuda_backend *c, const float *v, int n, int *failed)
{
    return v ? dev_upload(c, v, (size_t)n * sizeof(float), failed) : NULL;
}

/* The largest Q8_0 activation scratch any product of the pass needs. */
static size_t q8_need(const fg_dweight *w, int rows, int n_mat)
{
    return w->d ? fg_cuda_matmul_scratch_bytes(w->type, w->n_in, rows, n_mat) : 0;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* The model's widths against the kernels' fixed limits. */
static fg_err check_limits(const fg_hparams *hp, fg_diag *diag)
{
    if (hp->kv_lora > FG_CUDA_MLA_MAX_LATENT || hp->n_rope > FG_CUDA_MLA_MAX_ROPE ||
        hp->n_head > FG_CUDA_MLA_MAX_HEADS)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "backend cuda: attention widths kv_lora %d, rope %d, heads %d exceed the kernels' %d, %d, %d",
                           hp->kv_lora, hp->n_rope, hp->n_head, FG_CUDA_MLA_MAX_LATENT, FG_CUDA_MLA_MAX_ROPE,
                           FG_CUDA_MLA_MAX_HEADS);
    if (hp->n_expert > FG_CUDA_MOE_MAX_EXPERTS || hp->n_expert_used > FG_CUDA_MOE_MAX_USED ||
        hp->n_group > FG_CUDA_MOE_MAX_GROUPS)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "backend cuda: %d experts, %d used, %d groups exceed the kernels' %d, %d, %d", hp->n_expert,
                           hp->n_expert_used, hp->n_group, FG_CUDA_MOE_MAX_EXPERTS, FG_CUDA_MOE_MAX_USED,
                           FG_CUDA_MOE_MAX_GROUPS);
    if (hp->n_rope > FG_CUDA_ROPE_MAX_DIMS)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "backend cuda: rope dims %d over %d", hp->n_rope,
                           FG_CUDA_ROPE_MAX_DIMS);
    return FG_OK;
}

static void cuda_close(fg_backend_t *b)
{
    cuda_backend *c = (cuda_backend *)b;
    cudaSetDevice(c->device);
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->ep && c->ep_compute) /* the exchange outlives us: it must not call into freed buffers */
        fg_moe_ep_set_compute(c->ep, NULL);
    fg_cuda_moe_compute_destroy(c->ep_compute);
    void *pinned[] = {c->h_ids, c->h_w, c->h_xn, c->h_x};
    for (size_t i = 0; i < sizeof pinned / sizeof *pinned; i++)
        if (pinned[i])
            cudaFreeHost(pinned[i]);
    free(c->picks);
    free(c->kv_seen);
    for (int i = 0; i < c->n_allocs; i++)
        cudaFree(c->allocs[i]);
    cudaFree(c->d_pages);
    if (c->h_ints)
        cudaFreeHost(c->h_ints);
    if (c->h_rows)
        cudaFreeHost(c->h_rows);
    if (c->h_pages)
        cudaFreeHost(c->h_pages);
    if (c->h_logits)
        cudaFreeHost(c->h_logits);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c->allocs);
    free(c->layers);
    free(c);
}

/* The current device is per host thread: a backend may be opened on one
 * thread and run on another (the engine's step thread, an expert-parallel
 * rank's thread), and several backends of a process sit on several devices. */
static fg_err use_device(const cuda_backend *c, fg_diag *diag)
{
    return fg_cuda_rt(cudaSetDevice(c->device), "select the device", diag);
}

static fg_err page_of(cuda_backend *c, const uint8_t *page, size_t *index, fg_diag *diag)
{
    *index = page ? fg_kv_store_page_index(c->kv, page) : (size_t)-1;
    if (!page || *index >= c->n_pages)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "backend cuda: not a page of this KV store");
    return FG_OK;
}

/* Copies one host page of the KV store to its device copy or back. */
static fg_err copy_page(cuda_backend *c, uint8_t *page, bool to_device, fg_diag *diag)
{
    size_t i;
    fg_err e = page_of(c, page, &i, diag);
    if (!e)
        e = use_device(c, diag);
    if (e)
        return e;
    uint8_t *dev = c->d_kv + i * c->geo.page_bytes;
    return fg_cuda_rt(cudaMemcpy(to_device ? dev : page, to_device ? page : dev, c->geo.page_bytes,
                                 to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost),
                      to_device ? "copy a KV page to the device" : "copy a KV page to the host", diag);
}

static fg_err cuda_page_to_host(fg_backend_t *b, uint8_t *page, fg_diag *diag)
{
    return copy_page((cuda_backend *)b, page, false, diag);
}

static fg_err cuda_page_to_device(fg_backend_t *b, const uint8_t *page, fg_diag *diag)
{
    return copy_page((cuda_backend *)b, (uint8_t *)page, true, diag); /* read only when to_device */
}

static fg_err cuda_run(fg_backend_t *b, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    cuda_backend *c = (cuda_backend *)b;
    fg_err e = use_device(c, diag);
    if (e != FG_OK && c->ep) { /* the peers still exchange with us: fg_cuda_forward_run takes part with no tokens */
        fg_diag ignored;
        (void)fg_cuda_forward_run(c, tokens, seqs, 0, &ignored);
        return e;
    }
    return e ? e : fg_cuda_forward_run(c, tokens, seqs, n_seqs, diag);
}

/* No MTP drafts on the GPU (draft NULL: fg_backend_draft answers FG_ERR_UNSUPPORTED). */
static const fg_backend_ops cuda_ops = {cuda_run, cuda_page_to_host, cuda_page_to_device, cuda_close, NULL};

/* A usable device: present, and one this build has kernels for. */
static fg_err pick_device(int device, int *sm, fg_diag *diag)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        const char *why = e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports 0 devices";
        cudaGetLastError(); /* clear the sticky error for later callers */
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "backend cuda: no usable CUDA GPU on this machine (%s); set model.backend to cpu", why);
    }
    if (device >= count)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "backend cuda: device %d asked for, %d present", device, count);
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "backend cuda: cannot query device %d: %s", device,
                           cudaGetErrorString(e));
    *sm = prop.major * 10 + prop.minor;
    if (!fg_cuda_arch_supported(*sm))
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "backend cuda: %s is sm_%d; this build has kernels for sm_90a (Hopper) and sm_100a/sm_103a "
                           "(Blackwell datacenter) only",
                           prop.name, *sm);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "backend cuda: cannot use device %d: %s", device,
                           cudaGetErrorString(e));
    return FG_OK;
}

/* Expert parallelism: the host staging of a MoE layer, the picks, and this
 * GPU's expert compute set on the exchange. */
static fg_err open_ep(cuda_backend *c, const fg_backend_options *o, fg_diag *diag)
{
    const fg_hparams *hp = &c->m->hp;
    const size_t T = (size_t)o->max_tokens, K = (size_t)(hp->n_expert_used > 0 ? hp->n_expert_used : 1);
    const size_t d = (size_t)hp->n_embd;
    if (cudaMallocHost((void **)&c->h_ids, T * K * sizeof(int)) != cudaSuccess ||
        cudaMallocHost((void **)&c->h_w, T * K * sizeof(float)) != cudaSuccess ||
        cudaMallocHost((void **)&c->h_xn, T * d * sizeof(float)) != cudaSuccess ||
        cudaMallocHost((void **)&c->h_x, T * d * sizeof(float)) != cudaSuccess ||
        !(c->picks = calloc((size_t)(hp->n_expert > 0 ? hp->n_expert : 1), sizeof *c->picks))) {
        cudaGetLastError();
        return fg_diag_set(diag, FG_ERR_NOMEM, "backend cuda: cannot allocate the expert-parallel staging for %d "
                           "tokens", o->max_tokens);
    }
    c->pick_sink = o->expert_tokens;
    fg_err err = fg_cuda_moe_compute_create(c, o->ep, &c->ep_compute, diag);
    if (err)
        return err;
    c->ep = o->ep;
    fg_moe_ep_set_compute(o->ep, c->ep_compute);
    return FG_OK;
}

/* The CUDA kernels compute with F32, F16, BF16 and Q8_0 weights, and MXFP4
 * routed experts (as V4's converter writes them; kernels/cuda/matmul.cuh); a
 * model with other block types (the K-quants, ...) runs on the CPU. */
static fg_err check_types(const fg_model *m, fg_diag *diag)
{
    for (int il = -1; il < m->hp.n_layer; il++) {
        const fg_layer *L = il >= 0 ? &m->layers[il] : NULL;
        const fg_weight *ws[] = {
            L ? &L->q_a : &m->tok_embd, L ? &L->q_b : &m->output, L ? &L->kv_a : NULL, L ? &L->k_b : NULL,
            L ? &L->v_b : NULL, L ? &L->attn_out : NULL, L ? &L->ffn_gate : NULL, L ? &L->ffn_up : NULL,
            L ? &L->ffn_down : NULL, L ? &L->router : NULL, L ? &L->gate_exps : NULL, L ? &L->up_exps : NULL,
            L ? &L->down_exps : NULL, L ? &L->gate_shexp : NULL, L ? &L->up_shexp : NULL,
            L ? &L->down_shexp : NULL,
        };
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            const fg_weight *w = ws[i];
            if (!w || !w->data)
                continue;
            const bool routed = L && (w == &L->gate_exps || w == &L->up_exps || w == &L->down_exps);
            if (w->type != FG_WTYPE_F32 && w->type != FG_WTYPE_F16 && w->type != FG_WTYPE_BF16 &&
                w->type != FG_WTYPE_Q8_0 && !(routed && w->type == FG_WTYPE_MXFP4))
            {
                char where[32] = "the embedding or head";
                if (L)
                    snprintf(where, sizeof where, "layer %d", il);
                return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                                   "backend cuda: %s has a %s weight; the CUDA kernels compute with f32, f16, bf16, "
                                   "q8_0 (and mxfp4 routed experts): set model.backend to cpu",
                                   where, fg_ggml_type_name((uint32_t)w->type));
            }
        }
    }
    return FG_OK;
}

fg_err fg_backend_cuda_open(const fg_backend_options *o, fg_backend_t **out, fg_diag *diag)
{
    const fg_model *m = fg_deepseek2_of(o->model);
    if (!m)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "backend cuda: runs deepseek2 models only, not %s; set "
                           "model.backend to cpu", o->model->arch->name);
    const fg_hparams *hp = &m->hp;
    int sm = 0;
    fg_err err = pick_device(o->device, &sm, diag);
    if (err)
        return err;
    if ((err = check_limits(hp, diag)) || (err = check_types(m, diag)))
        return err;
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c)
        return fg_diag_set(diag, FG_ERR_NOMEM, "backend cuda: out of memory");
    c->base = (struct fg_backend){.ops = &cuda_ops, .kind = FG_BACKEND_CUDA, .max_tokens = o->max_tokens};
    c->m = m;
    c->geo = *o->geo;
    c->kv = o->kv;
    c->device = o->device;
    if ((err = fg_rope_init(&c->rope, hp, diag)))
        goto fail;
    if ((err = fg_cuda_rt(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "create a stream", diag)))
        goto fail;
    c->launch = (fg_cuda_launch){.sm = sm, .stream = (struct CUstream_st *)c->stream};

    int failed = 0;
    c->tok_embd = upload_weight(c, &m->tok_embd, &failed);
    c->output = m->output.data == m->tok_embd.data ? c->tok_embd : upload_weight(c, &m->output, &failed);
    c->output_norm = upload_vec(c, m->output_norm, hp->n_embd, &failed);
    c->layers = calloc((size_t)hp->n_layer, sizeof *c->layers);
    if (!c->layers)
        failed = 1;
    for (int il = 0; il < hp->n_layer && !failed; il++) {
        const fg_layer *ly = &m->layers[il];
        fg_dlayer *dl = &c->layers[il];
        dl->attn_norm = upload_vec(c, ly->attn_norm, hp->n_embd, &failed);
        dl->q_a_norm = upload_vec(c, ly->q_a_norm, hp->q_lora, &failed);
        dl->kv_a_norm = upload_vec(c, ly->kv_a_norm, hp->kv_lora, &failed);
        dl->ffn_norm = upload_vec(c, ly->ffn_norm, hp->n_embd, &failed);
        dl->exp_probs_b = upload_vec(c, ly->exp_probs_b, hp->n_expert, &failed);
        dl->is_moe = ly->is_moe;
        const fg_weight *src[] = {&ly->q_a, &ly->q_b, &ly->kv_a, &ly->k_b, &ly->v_b, &ly->attn_out,
                                  &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, &ly->router, &ly->gate_exps,
                                  &ly->up_exps, &ly->down_exps, &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp};
        fg_dweight *dst[] = {&dl->q_a, &dl->q_b, &dl->kv_a, &dl->k_b, &dl->v_b, &dl->attn_out,
                             &dl->ffn_gate, &dl->ffn_up, &dl->ffn_down, &dl->router, &dl->gate_exps,
                             &dl->up_exps, &dl->down_exps, &dl->gate_shexp, &dl->up_shexp, &dl->down_shexp};
        for (size_t i = 0; i < sizeof src / sizeof *src; i++)
            *dst[i] = upload_weight(c, src[i], &failed);
    }
    double inv_freq[FG_ROPE_MAX_DIMS / 2];
    for (int i = 0; i < hp->n_rope / 2; i++)
        inv_freq[i] = c->rope.inv_freq[i];
    c->d_inv_freq = (double *)dev_upload(c, inv_freq, (size_t)(hp->n_rope / 2) * sizeof(double), &failed);
    if (failed) {
        err = fg_diag_set(diag, FG_ERR_NOMEM, "backend cuda: cannot copy the weights (%.1f GiB) to the device",
                          (double)m->base.weight_bytes_total / (1 << 30));
        goto fail;
    }

    c->n_pages = fg_kv_store_pages_total(o->kv);
    c->d_kv = dev_alloc(c, c->n_pages * c->geo.page_bytes, &failed);
    if (failed) {
        err = fg_diag_set(diag, FG_ERR_NOMEM, "backend cuda: cannot allocate the KV pool (%zu pages, %.1f GiB); "
                          "lower model.kv_budget_bytes", c->n_pages, (double)(c->n_pages * c->geo.page_bytes) / (1 << 30));
        goto fail;
    }

    const size_t T = (size_t)o->max_tokens, d = (size_t)hp->n_embd, H = (size_t)hp->n_head;
    const size_t L = (size_t)hp->kv_lora, R = (size_t)hp->n_rope, qk = (size_t)(hp->n_nope + hp->n_rope);
    const size_t V = (size_t)hp->n_vocab, E = (size_t)(hp->n_expert > 0 ? hp->n_expert : 1);
    const size_t K = (size_t)(hp->n_expert_used > 0 ? hp->n_expert_used : 1);
    const size_t F = max_sz((size_t)hp->n_ff, (size_t)hp->n_ff_exp * max_sz(1, (size_t)hp->n_expert_shared));
    const size_t Fe = max_sz(1, (size_t)hp->n_ff_exp), fl = sizeof(float);
    c->x = dev_alloc(c, T * d * fl, &failed);
    c->xn = dev_alloc(c, T * d * fl, &failed);
    c->qa = dev_alloc(c, T * max_sz(1, (size_t)hp->q_lora) * fl, &failed);
    c->q = dev_alloc(c, T * H * qk * fl, &failed);
    c->kva = dev_alloc(c, T * (L + R) * fl, &failed);
    c->q_lat = dev_alloc(c, T * H * L * fl, &failed);
    c->o_lat = dev_alloc(c, T * H * L * fl, &failed);
    c->o = dev_alloc(c, T * H * (size_t)hp->n_v * fl, &failed);
    c->tmp_d = dev_alloc(c, T * d * fl, &failed);
    c->ff_gate = dev_alloc(c, T * F * fl, &failed);
    c->ff_up = dev_alloc(c, T * F * fl, &failed);
    c->router = dev_alloc(c, T * E * fl, &failed);
    c->sel_w = dev_alloc(c, T * K * fl, &failed);
    c->sel_ids = dev_alloc(c, T * K * sizeof(int), &failed);
    c->seg = dev_alloc(c, (E + 1) * sizeof(int), &failed);
    c->sorted_tok = dev_alloc(c, T * K * sizeof(int), &failed);
    c->slot_pos = dev_alloc(c, T * K * sizeof(int), &failed);
    c->ex_gate = dev_alloc(c, T * K * Fe * fl, &failed);
    c->ex_up = dev_alloc(c, T * K * Fe * fl, &failed);
    c->ex_out = dev_alloc(c, T * K * d * fl, &failed);
    c->logit_rows = dev_alloc(c, T * d * fl, &failed);
    c->logits = dev_alloc(c, T * V * fl, &failed);
    c->d_ints = dev_alloc(c, 5 * T * sizeof(int), &failed);
    c->d_rows = dev_alloc(c, T * sizeof(uint8_t *), &failed);

    size_t q8 = max_sz(q8_need(&c->output, (int)T, 1), 0);
    for (int il = 0; il < hp->n_layer; il++) {
        const fg_dlayer *dl = &c->layers[il];
        const fg_dweight *plain[] = {&dl->q_a, &dl->q_b, &dl->kv_a, &dl->attn_out, &dl->ffn_gate, &dl->ffn_up,
                                     &dl->ffn_down, &dl->router, &dl->gate_shexp, &dl->up_shexp, &dl->down_shexp};
        for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
            q8 = max_sz(q8, q8_need(plain[i], (int)T, 1));
        q8 = max_sz(q8, q8_need(&dl->k_b, (int)T, (int)H));
        q8 = max_sz(q8, q8_need(&dl->v_b, (int)T, (int)H));
        q8 = max_sz(q8, q8_need(&dl->gate_exps, (int)T, 1));
        q8 = max_sz(q8, q8_need(&dl->up_exps, (int)T, 1));
        q8 = max_sz(q8, q8_need(&dl->down_exps, (int)(T * K), 1));
    }
    c->q8_bytes = q8;
    c->q8 = dev_alloc(c, q8, &failed);
    c->cap_pages = c->n_pages + T;
    if (!failed && cudaMalloc((void **)&c->d_pages, c->cap_pages * sizeof(uint8_t *)) != cudaSuccess)
        failed = 1;
    if (!failed && (cudaMallocHost((void **)&c->h_ints, 5 * T * sizeof(int)) != cudaSuccess ||
                    cudaMallocHost((void **)&c->h_rows, T * sizeof(uint8_t *)) != cudaSuccess ||
                    cudaMallocHost((void **)&c->h_pages, c->cap_pages * sizeof(uint8_t *)) != cudaSuccess ||
                    cudaMallocHost((void **)&c->h_logits, T * V * fl) != cudaSuccess))
        failed = 1;
    if (failed) {
        err = fg_diag_set(diag, FG_ERR_NOMEM, "backend cuda: cannot allocate scratch for %d tokens", o->max_tokens);
        goto fail;
    }
    if (o->ep && (err = open_ep(c, o, diag)))
        goto fail;
    if (o->kv_versions) {
        c->kv_versions = o->kv_versions;
        if (!(c->kv_seen = calloc(c->n_pages ? c->n_pages : 1, sizeof *c->kv_seen))) {
            err = fg_diag_set(diag, FG_ERR_NOMEM, "backend cuda: out of memory");
            goto fail;
        }
    }
    _Static_assert(sizeof(int) == sizeof(int32_t) && sizeof(uintptr_t) == sizeof(uint8_t *), "batch layout");
    c->batch = (fg_device_batch){.tok = c->h_ints, .pos = c->h_ints + T, .page0 = c->h_ints + 2 * T,
                                 .n_kv = c->h_ints + 3 * T, .logit_row = c->h_ints + 4 * T, .rows = c->h_rows,
                                 .pages = c->h_pages, .cap_pages = c->cap_pages, .max_tokens = o->max_tokens};
    *out = &c->base;
    return FG_OK;
fail:
    cudaGetLastError();
    cuda_close(&c->base);
    return err;
}
