/* engine.c: opening a model, sessions, and direct-mode evaluation (see engine.h). */
#include "engine/engine.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "engine/ep/ep_bootstrap.h"

void fg_engine_options_default(fg_engine_options *o)
{
    memset(o, 0, sizeof *o);
    o->kv_format = -1;
    o->kv_budget_bytes = (size_t)1 << 30;
    o->max_batch_tokens = 256;
    o->prefill_chunk = 128;
    o->prefill_alone_tokens = 512;
    o->event_capacity = 64;
    o->speculative = false;
    o->spec_drafts = 2; /* docs/benchmarks.md, "Speculative decoding" */
    o->text_capacity = 2048;
    o->prefix_cache = true;
}

/* The job's ncclUniqueId: made here with one node; with several, node 0
 * makes it and publishes it through Redis, the others read it. */
static fg_err nccl_job_id(const fg_engine_options *o, int n_nodes, uint8_t id[FG_EP_NCCL_ID_BYTES], fg_diag *diag)
{
    fg_err err;
    if (o->ep_node == 0 && (err = fg_ep_nccl_unique_id(id, diag)))
        return err;
    if (n_nodes == 1)
        return FG_OK;
    fg_ep_bootstrap_options bo = {.redis_address = o->ep_bootstrap_redis, .prefix = o->ep_bootstrap_prefix,
                                  .node = o->ep_node, .n_nodes = n_nodes,
                                  .timeout_ms = o->ep_bootstrap_timeout_ms > 0 ? o->ep_bootstrap_timeout_ms : 60000};
    fg_diag d;
    if ((err = fg_ep_bootstrap_exchange(&bo, id, FG_EP_NCCL_ID_BYTES, &d)))
        return fg_diag_set(diag, err, "NCCL id exchange (topology.bootstrap %s): %s", o->ep_bootstrap_prefix, d.msg);
    return FG_OK;
}

fg_err fg_engine_open(const fg_engine_options *o, fg_engine_t **out, fg_diag *diag)
{
    *out = NULL;
    if (!o->model_path)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "no model path given");
    if (o->max_batch_tokens < 1 || o->max_batch_tokens > 65536)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "max_batch_tokens %d outside [1, 65536]", o->max_batch_tokens);
    if (o->max_context < 0 || o->n_threads < 0 || o->n_threads > 1024)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "max_context or n_threads out of range");
    if (o->ep_ranks < 0 || o->ep_ranks > FG_EP_MAX_RANKS || o->ep_experts_per_rank < 0 || o->ep_redundant < 0 ||
        o->ep_recv_capacity_rows < 0 ||
        o->ep_placement < FG_EP_CONTIGUOUS || o->ep_placement > FG_EP_STRIDED || o->ep_transport < 0 ||
        o->ep_transport > 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "expert-parallel options out of range");
    const int per_node = o->ep_ranks_per_node ? o->ep_ranks_per_node : o->ep_ranks;
    if (o->ep_ranks_per_node < 0 || o->ep_node < 0 ||
        (o->ep_ranks > 1 && (o->ep_ranks % per_node != 0 || o->ep_node >= o->ep_ranks / per_node)))
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.ranks_per_node (%d) must divide topology.ranks (%d) and topology.node (%d) be one "
                           "of the nodes they make",
                           o->ep_ranks_per_node, o->ep_ranks, o->ep_node);
    const bool nodes = o->ep_ranks > 1 && per_node < o->ep_ranks;
    if (nodes && !o->serve)
        return fg_diag_set(diag, FG_ERR_STATE,
                           "expert parallelism over %d nodes needs serving mode: every step is agreed between the "
                           "nodes, and direct mode has no step loop",
                           o->ep_ranks / per_node);
    if (nodes && o->ep_transport == 0 && !o->ep_group)
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.transport inproc runs every rank in this process: topology.ranks_per_node (%d) "
                           "must be 0 or topology.ranks (%d); use nccl across nodes",
                           o->ep_ranks_per_node, o->ep_ranks);
    if (o->ep_transport == 1 && o->ep_ranks > 1 && !fg_ep_nccl_available())
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "topology.transport nccl: this build has no NCCL (CUDA and NCCL were not found when it was "
                           "built)");
    if (nodes && o->ep_transport == 1 && (!o->ep_bootstrap_redis || !*o->ep_bootstrap_redis ||
                                          !o->ep_bootstrap_prefix || !*o->ep_bootstrap_prefix))
        return fg_diag_set(diag, FG_ERR_CONFIG,
                           "topology.transport nccl over %d nodes needs a Redis address (redis.address) and "
                           "topology.bootstrap to exchange the NCCL id",
                           o->ep_ranks / per_node);
    if ((o->backend != FG_ENGINE_BACKEND_CPU && o->backend != FG_ENGINE_BACKEND_CUDA) || o->gpu_device < 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "backend %d or gpu_device %d out of range", o->backend,
                           o->gpu_device);
    if (o->prefill_alone_tokens < 0 || o->prefill_alone_tokens > 65536)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "prefill_alone_tokens %d outside [0, 65536]",
                           o->prefill_alone_tokens);
    if (o->serve && (o->prefill_chunk < 1 || o->event_capacity < 4 || o->event_capacity > (1 << 20) ||
                     o->text_capacity < 64 || o->text_capacity > (1 << 26)))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "prefill_chunk, event_capacity or text_capacity out of range");
    if (o->serve && o->speculative && (o->spec_drafts < 1 || o->spec_drafts > FG_SPEC_MAX_DRAFTS))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "spec_drafts %d outside [1, %d]", o->spec_drafts,
                           FG_SPEC_MAX_DRAFTS);
    if (!fg_isa_supported(o->isa))
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "instruction set %s is not available on this CPU",
                           fg_isa_name(o->isa));
    fg_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return fg_diag_set(diag, FG_ERR_NOMEM, "engine: out of memory");
    fg_list_init(&e->serve.all);
    fg_list_init(&e->serve.dirty);
    fg_list_init(&e->serve.ready);
    fg_list_init(&e->tier.jobs);
    fg_list_init(&e->tier.done_jobs);
    e->opt = *o;
    e->step_capacity = o->serve && o->prefill_alone_tokens > o->max_batch_tokens ? o->prefill_alone_tokens
                                                                                 : o->max_batch_tokens;
    fg_err err;
    if ((err = fg_gguf_open_file(o->model_path, &e->gguf, diag)))
        goto fail;
    if ((err = fg_arch_load(e->gguf, &e->model, diag)))
        goto fail;
    if ((err = fg_tokenizer_create(e->gguf, &e->tok, diag)))
        goto fail;
    const fg_arch_model *m = e->model;
    const fg_arch *arch = m->arch;
    if (fg_tokenizer_vocab_size(e->tok) > m->n_vocab) {
        err = fg_diag_set(diag, FG_ERR_TOKENIZER, "tokenizer has %d tokens but the embedding only %d rows",
                          fg_tokenizer_vocab_size(e->tok), m->n_vocab);
        goto fail;
    }
    e->n_ctx = o->max_context > 0 && o->max_context < m->n_ctx_train ? o->max_context : m->n_ctx_train;

    const fg_kv_format fmt = o->kv_format < 0 ? arch->cache_default(m) : (fg_kv_format)o->kv_format;
    fg_kv_geometry geo;
    if ((err = arch->cache(m, fmt, &geo, diag)))
        goto fail;
    /* A cache with per-sequence state (deepseek4) shares pages in units of
     * geo.share_tokens with state snapshots (kv_share.c) and forks with a
     * copy of the state; its session files hold its pages and state
     * (session_file.h, version 3): fg_engine_seq_state. */
    if ((err = fg_kv_store_create(&geo, o->kv_budget_bytes, &e->kv, diag)))
        goto fail;
    int nth = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (m->n_expert > 0 && !(e->expert_tokens = calloc((size_t)m->n_expert, sizeof *e->expert_tokens))) {
        err = fg_diag_set(diag, FG_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    if (o->ep_ranks > 1) {
        /* Each rank has its own forward pass (the architecture's) and share of the threads. */
        fg_ep_ranks_options eo = {.n_ranks = o->ep_ranks, .n_local = per_node, .first_rank = o->ep_node * per_node,
                                  .group = o->ep_transport == 0 ? o->ep_group : NULL,
                                  .max_tokens = e->step_capacity, .n_threads = nth,
                                  .isa = o->isa, .experts_per_rank = o->ep_experts_per_rank,
                                  .redundant = o->ep_redundant, .placement = (fg_ep_placement)o->ep_placement,
                                  .recv_capacity_rows = o->ep_recv_capacity_rows,
                                  .hot_experts = o->ep_hot_experts, .expert_tokens = e->expert_tokens,
                                  .backend = (fg_backend_kind)o->backend, .kv = e->kv};
        uint8_t nccl_id[FG_EP_NCCL_ID_BYTES];
        if (o->ep_transport == 1) {
            if ((err = nccl_job_id(o, o->ep_ranks / per_node, nccl_id, diag)))
                goto fail;
            eo.nccl_id = nccl_id;
        }
        if ((err = fg_ep_ranks_create(m, &geo, &eo, &e->ep, diag)))
            goto fail;
        e->ep_nodes = fg_ep_ranks_multinode(e->ep);
        e->seq_rank = calloc((size_t)o->max_batch_tokens, sizeof *e->seq_rank);
        if (!e->seq_rank) {
            err = fg_diag_set(diag, FG_ERR_NOMEM, "engine: out of memory");
            goto fail;
        }
    } else {
        if (o->ep_experts_per_rank || o->ep_redundant || (o->ep_hot_experts && *o->ep_hot_experts)) {
            /* one rank: still say when the numbers do not fit */
            fg_ep_shard_t *shard;
            fg_ep_shard_options so = {.n_expert = m->n_expert, .n_ranks = 1,
                                      .experts_per_rank = o->ep_experts_per_rank, .redundant = o->ep_redundant,
                                      .hot_list = o->ep_hot_experts};
            if ((err = fg_ep_shard_create(&so, &shard, diag)))
                goto fail;
            fg_ep_shard_destroy(shard);
        }
        e->pool = fg_pool_create(nth);
        if (!e->pool) {
            err = fg_diag_set(diag, FG_ERR_NOMEM, "cannot start %d worker threads", nth);
            goto fail;
        }
        fg_backend_options bo = {.kind = (fg_backend_kind)o->backend, .model = e->model, .geo = &geo, .kv = e->kv,
                                 .max_tokens = e->step_capacity, .pool = e->pool, .isa = o->isa,
                                 .expert_tokens = e->expert_tokens, .device = o->gpu_device};
        if ((err = fg_backend_open(&bo, &e->backend, diag)))
            goto fail;
    }
    for (int id = 0; id < fg_tokenizer_vocab_size(e->tok); id++) {
        const char *p;
        size_t n = 0;
        /* with render_special: a response may keep control tokens' text */
        if (fg_tokenizer_token_bytes(e->tok, id, true, &p, &n) == FG_OK && (int)n > e->max_token_bytes)
            e->max_token_bytes = (int)n;
    }
    if (o->serve && (err = fg_engine_serve_start(e, diag)))
        goto fail;

    *out = e;
    return FG_OK;
fail:
    fg_engine_close(e);
    return err;
}

void fg_engine_close(fg_engine_t *e)
{
    if (!e)
        return;
    fg_engine_serve_stop(e);
    fg_backend_close(e->backend);
    fg_ep_ranks_destroy(e->ep);
    free(e->seq_rank);
    free((void *)e->expert_tokens);
    fg_pool_destroy(e->pool);
    fg_kv_store_destroy(e->kv);
    fg_tokenizer_destroy(e->tok);
    fg_arch_free(e->model);
    fg_gguf_close(e->gguf);
    free(e);
}

int fg_engine_expert_tokens(const fg_engine_t *e, uint64_t *out, int cap)
{
    const int n = e->model->n_expert;
    for (int i = 0; i < n && i < cap && e->expert_tokens; i++)
        out[i] = atomic_load_explicit(&e->expert_tokens[i], memory_order_relaxed);
    return n;
}

void fg_engine_get_info(const fg_engine_t *e, fg_engine_info *info)
{
    const fg_arch_model *m = e->model;
    const fg_kv_geometry *geo = fg_kv_store_geometry(e->kv);
    *info = (fg_engine_info){
        .n_vocab = m->n_vocab,
        .n_ctx = e->n_ctx,
        .n_layer = m->n_layer,
        .n_embd = m->n_embd,
        .kv_format = geo->format,
        .kv_bytes_per_token = geo->bytes_per_token,
        .kv_page_bytes = geo->page_bytes,
        .kv_seq_bytes = geo->seq_bytes,
        .kv_pages_total = fg_kv_store_pages_total(e->kv),
        .weight_bytes_total = e->model->weight_bytes_total,
        .weight_bytes_active = e->model->weight_bytes_active,
        .n_threads = e->ep ? fg_ep_ranks_count(e->ep) * fg_ep_ranks_threads(e->ep) : fg_pool_size(e->pool),
        .isa = e->opt.isa == FG_ISA_AUTO ? fg_isa_best() : e->opt.isa,
        .backend = e->backend ? fg_backend_kind_name(fg_backend_kind_of(e->backend))
                              : fg_backend_kind_name((fg_backend_kind)e->opt.backend), /* ranks: the option's */
        .model_identity = e->model->identity,
    };
}

const fg_tokenizer_t *fg_engine_tokenizer(const fg_engine_t *e) { return e->tok; }

fg_err fg_engine_chat_template(const fg_engine_t *e, const char **ptr, size_t *len)
{
    fg_gguf_str s;
    *ptr = NULL;
    *len = 0;
    fg_err err = fg_gguf_get_str(e->gguf, "tokenizer.chat_template", &s);
    if (err == FG_OK) {
        *ptr = s.ptr;
        *len = (size_t)s.len;
    }
    return err;
}

fg_err fg_session_alloc(fg_engine_t *e, const fg_session_params *params, fg_session_t **out)
{
    *out = NULL;
    fg_session_params p = params ? *params : (fg_session_params){.weight = 1};
    if (p.weight < 1 || p.weight > 1000 || p.priority < -1000 || p.priority > 1000)
        return FG_ERR_INVALID_ARG;
    if ((p.name && !fg_name_valid(p.name, strlen(p.name))) ||
        (p.tenant_name && !fg_name_valid(p.tenant_name, strlen(p.tenant_name))))
        return FG_ERR_INVALID_ARG;
    fg_session_t *s = calloc(1, sizeof *s);
    if (!s)
        return FG_ERR_NOMEM;
    s->e = e;
    fg_list_init(&s->serve.all_link);
    fg_list_init(&s->serve.dirty_link);
    fg_list_init(&s->serve.ready_link);
    s->params = p;
    s->ep_rank = e->ep ? (int)(atomic_fetch_add(&e->ep_next_rank, 1u) % (unsigned)fg_ep_ranks_count(e->ep)) : 0;
    /* The names are copied: the caller's strings need not outlive the call. */
    if (p.name) {
        strcpy(s->name, p.name);
        s->params.name = s->name;
    }
    strcpy(s->tenant_name, p.tenant_name ? p.tenant_name : "default");
    s->params.tenant_name = s->tenant_name;
    strcpy(s->tier.load_name, s->name);
    s->share.miss_at = -1;
    s->share.load_k = -1;
    if (e->opt.serve) {
        pthread_mutex_lock(&e->mu);
        s->tenant_ix = fg_tier_tenant(e, s->tenant_name);
        s->uid = ++e->next_uid;
        pthread_mutex_unlock(&e->mu);
        if (s->tenant_ix < 0) {
            free(s);
            return FG_ERR_NOMEM; /* more tenants than the KV store can count */
        }
    }
    fg_kv_seq_init(&s->seq, e->n_ctx);
    s->seq.owner = s->tenant_ix;
    *out = s;
    return FG_OK;
}

void fg_session_dealloc(fg_session_t *s)
{
    fg_kv_seq_free(s->e->kv, &s->seq);
    fg_tokens_free(&s->serve.in);
    fg_tokens_free(&s->todo);
    fg_tokens_free(&s->hist);
    free(s->share.phash);
    free(s->tier.meta);
    free(s->tier.load_buf);
    free(s->serve.out.ev);
    free(s->serve.out.text);
    free(s);
}

fg_err fg_session_create(fg_engine_t *e, const fg_session_params *params, fg_session_t **out)
{
    fg_session_t *s;
    fg_err err = fg_session_alloc(e, params, &s);
    if (err != FG_OK)
        return err;
    if (e->opt.serve && (err = fg_session_serve_init(s)) != FG_OK) {
        fg_session_dealloc(s);
        return err;
    }
    *out = s;
    return FG_OK;
}

void fg_session_free(fg_session_t *s)
{
    if (!s)
        return;
    if (s->e->opt.serve) {
        fg_session_serve_release(s); /* the step thread frees it */
        return;
    }
    fg_session_dealloc(s);
}

/* Under expert parallelism the host pages are current after every step (the
 * cpu ranks compute in them; cuda ranks write theirs back), so a page needs
 * no copy to the host; one changed on the host is re-read by every cuda rank. */
fg_err fg_engine_page_to_host(fg_engine_t *e, uint8_t *page, fg_diag *diag)
{
    return e->backend ? fg_backend_kv_page_to_host(e->backend, page, diag) : FG_OK;
}

fg_err fg_engine_page_to_device(fg_engine_t *e, const uint8_t *page, fg_diag *diag)
{
    if (e->ep)
        fg_ep_ranks_page_changed(e->ep, page);
    return e->backend ? fg_backend_kv_page_to_device(e->backend, page, diag) : FG_OK;
}

int fg_session_length(const fg_session_t *s)
{
    if (!s->e->opt.serve)
        return s->seq.n_tokens;
    pthread_mutex_lock(&s->e->mu);
    int n = s->serve.length_snapshot;
    pthread_mutex_unlock(&s->e->mu);
    return n;
}

/* fg_session_eval of sampled (decode) tokens, or of an input, whose length decides its form. */
static fg_err session_eval(fg_session_t *s, const int32_t *tokens, int n, float *logits, bool logits_all,
                           bool sampled, fg_diag *diag)
{
    fg_engine_t *e = s->e;
    if (e->opt.serve)
        return fg_diag_set(diag, FG_ERR_STATE, "fg_session_eval is for direct mode; this engine is serving");
    if (n < 0 || (n > 0 && !tokens))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "bad token list");
    if (n == 0)
        return FG_OK;
    const int start = s->seq.n_tokens;
    if (n > s->seq.max_tokens - start)
        return fg_diag_set(diag, FG_ERR_CONTEXT_FULL, "%d + %d tokens exceed the context of %d", start, n,
                           s->seq.max_tokens);
    const int V = e->model->n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return fg_diag_set(diag, FG_ERR_TOKEN_ID, "token id %d at index %d outside the vocabulary [0, %d)",
                               tokens[i], i, V);
    fg_err err = fg_kv_seq_reserve(e->kv, &s->seq, start + n);
    if (err != FG_OK) {
        fg_kv_seq_truncate(e->kv, &s->seq, start);
        return fg_diag_set(diag, err, "cannot hold %d tokens: %s", start + n, fg_err_describe(err));
    }
    const int chunk = e->opt.max_batch_tokens;
    for (int done = 0; done < n;) {
        int m = n - done < chunk ? n - done : chunk;
        bool last = done + m == n;
        fg_fwd_seq fs = {.kv = &s->seq, .n_tokens = m, .n_logits = 0, .logits = NULL,
                         .absorbed = sampled || n < FG_SHORT_INPUT};
        if (logits && logits_all) {
            fs.n_logits = m;
            fs.logits = logits + (size_t)done * V;
        } else if (logits && last) {
            fs.n_logits = 1;
            fs.logits = logits;
        }
        err = fg_engine_forward(e, tokens + done, &fs, &s, 1, diag);
        if (err != FG_OK) {
            fg_kv_seq_truncate(e->kv, &s->seq, start);
            return err;
        }
        done += m;
    }
    return FG_OK;
}

fg_err fg_session_eval(fg_session_t *s, const int32_t *tokens, int n, float *logits, bool logits_all,
                       fg_diag *diag)
{
    return session_eval(s, tokens, n, logits, logits_all, false, diag);
}

fg_err fg_session_eval_sampled(fg_session_t *s, int32_t token, float *logits, fg_diag *diag)
{
    return session_eval(s, &token, 1, logits, false, true, diag);
}

fg_err fg_engine_forward(fg_engine_t *e, const int32_t *tokens, fg_fwd_seq *seqs, fg_session_t *const *sessions,
                         int n, fg_diag *diag)
{
    if (!e->ep)
        return fg_backend_run(e->backend, tokens, seqs, n, diag);
    for (int i = 0; i < n; i++)
        e->seq_rank[i] = sessions[i]->ep_rank;
    return fg_ep_ranks_run(e->ep, tokens, seqs, e->seq_rank, n, diag);
}

bool fg_engine_can_draft(const fg_engine_t *e) { return e->backend && fg_backend_can_draft(e->backend); }

fg_err fg_engine_draft(fg_engine_t *e, const int32_t *tokens, fg_fwd_seq *seqs, int n, fg_diag *diag)
{
    if (!e->backend)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "no MTP drafts under expert parallelism");
    return fg_backend_draft(e->backend, tokens, seqs, n, diag);
}

fg_err fg_engine_round(fg_engine_t *e, const int32_t *tokens, fg_fwd_seq *seqs, fg_session_t *const *sessions, int n,
                       bool leave, fg_ep_round *out, fg_diag *diag)
{
    for (int i = 0; i < n; i++)
        e->seq_rank[i] = sessions[i]->ep_rank;
    return fg_ep_ranks_round(e->ep, tokens, seqs, e->seq_rank, n, leave, out, diag);
}
