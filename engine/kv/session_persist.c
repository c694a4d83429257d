/* session_persist.c: the persistence calls of engine.h (fork, meta, restore,
 * save, save_all, delete, on_disk, tenant usage). They run on the caller's thread
 * and hand work that touches pages to the step thread (engine_serve.c,
 * kv_tier.c). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

_Static_assert(FG_SFILE_META_MAX == FG_SESSION_META_MAX, "the file holds any blob the API accepts");

static const char *tenant_or_default(const char *t) { return t ? t : "default"; }

fg_err fg_session_fork(fg_session_t *src, const fg_session_params *p, fg_session_t **out, fg_diag *diag)
{
    fg_engine_t *e = src->e;
    *out = NULL;
    if (!e->opt.serve)
        return fg_diag_set(diag, FG_ERR_STATE, "fg_session_fork needs a serving engine");
    fg_session_params sp = p ? *p : (fg_session_params){.weight = 1};
    if (strcmp(tenant_or_default(sp.tenant_name), src->tenant_name) != 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "a fork stays in its source's tenant %s", src->tenant_name);
    fg_session_t *s;
    fg_err err = fg_session_alloc(e, &sp, &s);
    if (err != FG_OK)
        return fg_diag_set(diag, err, "fork: %s", err == FG_ERR_INVALID_ARG ? "bad session parameters" : fg_err_describe(err));
    pthread_mutex_lock(&e->mu);
    bool busy = src->serve.responding;
    pthread_mutex_unlock(&e->mu);
    if (busy) {
        fg_session_dealloc(s);
        return fg_diag_set(diag, FG_ERR_BUSY, "the source session has a response in progress");
    }
    s->share.fork_src = src;
    if ((err = fg_session_serve_init(s)) != FG_OK) {
        fg_session_dealloc(s);
        return fg_diag_set(diag, err, "a session named %s is open", sp.name ? sp.name : "");
    }
    pthread_mutex_lock(&e->mu);
    while (!s->share.fork_done)
        pthread_cond_wait(&e->done_cv, &e->mu);
    err = s->share.fork_err;
    s->share.fork_src = NULL;
    pthread_mutex_unlock(&e->mu);
    if (err != FG_OK) {
        fg_session_free(s);
        return fg_diag_set(diag, err, "fork: %s", fg_err_describe(err));
    }
    *out = s;
    return FG_OK;
}

fg_err fg_session_set_meta(fg_session_t *s, const void *meta, size_t len, fg_diag *diag)
{
    fg_engine_t *e = s->e;
    if (len > FG_SESSION_META_MAX)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "meta of %zu bytes exceeds %d", len, FG_SESSION_META_MAX);
    if (len && !meta)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "meta is NULL");
    void *copy = NULL;
    if (len && !(copy = malloc(len)))
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory for %zu bytes of meta", len);
    if (len)
        memcpy(copy, meta, len);
    if (e->opt.serve)
        pthread_mutex_lock(&e->mu);
    free(s->tier.meta);
    s->tier.meta = copy;
    s->tier.meta_len = (uint32_t)len;
    s->tier.gen++;
    if (e->opt.serve)
        pthread_mutex_unlock(&e->mu);
    return FG_OK;
}

size_t fg_session_get_meta(fg_session_t *s, void *buf, size_t cap)
{
    fg_engine_t *e = s->e;
    if (e->opt.serve)
        pthread_mutex_lock(&e->mu);
    size_t n = s->tier.meta_len;
    if (buf && cap)
        memcpy(buf, s->tier.meta, n < cap ? n : cap);
    if (e->opt.serve)
        pthread_mutex_unlock(&e->mu);
    return n;
}

fg_err fg_session_restore(fg_engine_t *e, const fg_session_params *p, fg_session_t **out, fg_diag *diag)
{
    *out = NULL;
    if (!e->opt.serve)
        return fg_diag_set(diag, FG_ERR_STATE, "fg_session_restore needs a serving engine");
    if (!e->tier.persist_dir)
        return fg_diag_set(diag, FG_ERR_STATE, "no persist_dir: sessions are not saved");
    if (!p || !p->name)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "fg_session_restore needs a session name");
    fg_session_t *s;
    fg_err err = fg_session_alloc(e, p, &s);
    if (err != FG_OK)
        return fg_diag_set(diag, err, "restore: %s", err == FG_ERR_INVALID_ARG ? "bad session name or parameters"
                                                                              : fg_err_describe(err));
    pthread_mutex_lock(&e->mu);
    for (fg_session_t *o = e->serve.open_head; o; o = o->serve.open_next)
        if (o->tenant_ix == s->tenant_ix && strcmp(o->name, s->name) == 0) {
            pthread_mutex_unlock(&e->mu);
            fg_session_dealloc(s);
            return fg_diag_set(diag, FG_ERR_STATE, "session %s/%s is open", p->tenant_name ? p->tenant_name : "default",
                               p->name);
        }
    /* A save of the same name still queued (its session just freed) lands first. */
    while (fg_tier_writing(e, s->tenant_name, s->name))
        pthread_cond_wait(&e->done_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    uint8_t *buf;
    size_t len;
    fg_sfile_view v;
    err = fg_tier_check_file(e, s->tenant_name, s->name, s->tenant_ix, false, &buf, &len, &v, diag);
    if (err != FG_OK) {
        fg_session_dealloc(s);
        return err;
    }
    int n = v.n_tokens, m = v.n_pending;
    s->hist.v = malloc(((size_t)n + 1) * sizeof *s->hist.v);
    s->todo.v = malloc(((size_t)m + 1) * sizeof *s->todo.v);
    s->tier.meta = v.meta_len ? malloc(v.meta_len) : NULL;
    if (!s->hist.v || !s->todo.v || (v.meta_len && !s->tier.meta)) {
        free(buf);
        fg_session_dealloc(s);
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory restoring %s", p->name);
    }
    for (int i = 0; i < n; i++)
        s->hist.v[i] = fg_sfile_token(&v, i);
    for (int i = 0; i < m; i++)
        s->todo.v[i] = fg_sfile_token(&v, n + i);
    s->hist.n = n;
    s->hist.cap = n + 1;
    s->todo.n = m;
    s->todo.cap = m + 1;
    if (v.meta_len)
        memcpy(s->tier.meta, v.meta, v.meta_len);
    s->tier.meta_len = v.meta_len;
    free(buf);
    /* The KV stays in the file until the session gets work. */
    s->tier.on_disk = true;
    s->serve.committed = n + m;
    s->serve.length_snapshot = n;
    s->tier.gen = s->tier.file_gen = 1;
    if ((err = fg_session_serve_init(s)) != FG_OK) {
        fg_session_dealloc(s);
        return fg_diag_set(diag, err, "session %s is open", p->name);
    }
    *out = s;
    return FG_OK;
}

fg_err fg_engine_save_all(fg_engine_t *e, fg_diag *diag)
{
    if (!e->opt.serve || !e->tier.persist)
        return FG_OK;
    pthread_mutex_lock(&e->mu);
    e->tier.save_all_err = FG_OK;
    e->tier.save_all_msg[0] = 0;
    e->tier.save_all_queued = false;
    e->tier.save_all_req = true;
    e->serve.work = true;
    pthread_cond_signal(&e->serve.work_cv);
    while (!e->tier.save_all_queued || e->tier.jobs_done < e->tier.save_all_target)
        pthread_cond_wait(&e->done_cv, &e->mu);
    fg_err err = e->tier.save_all_err;
    if (err != FG_OK)
        fg_diag_set(diag, err, "%s", e->tier.save_all_msg);
    pthread_mutex_unlock(&e->mu);
    return err;
}

fg_err fg_session_save(fg_session_t *s, fg_diag *diag)
{
    fg_engine_t *e = s->e;
    if (!e->opt.serve || !e->tier.persist || !s->name[0])
        return fg_diag_set(diag, FG_ERR_STATE, "fg_session_save needs a named session of a serving engine with "
                                               "persist_dir");
    pthread_mutex_lock(&e->mu);
    if (s->serve.responding) {
        pthread_mutex_unlock(&e->mu);
        return fg_diag_set(diag, FG_ERR_BUSY, "session %s has a response in progress", s->name);
    }
    /* The step thread may fold queued input in first (a later gen); any write from want on will do. */
    const uint64_t want = s->tier.gen, failures = s->tier.save_failures, skips = s->tier.save_skips;
    if (s->tier.file_gen < want) {
        s->tier.save_req = true;
        fg_serve_mark_dirty(e, s);
        while (s->tier.file_gen < want && s->tier.save_failures == failures && s->tier.save_skips == skips)
            pthread_cond_wait(&e->done_cv, &e->mu);
    }
    fg_err err = s->tier.file_gen >= want ? FG_OK : s->tier.save_failures != failures ? s->tier.save_err : FG_ERR_BUSY;
    pthread_mutex_unlock(&e->mu);
    if (err != FG_OK)
        fg_diag_set(diag, err, "session %s/%s: its file was not written (%s)", s->tenant_name, s->name,
                    err == FG_ERR_BUSY ? "busy" : fg_err_describe(err));
    return err;
}

bool fg_session_on_disk(fg_session_t *s)
{
    fg_engine_t *e = s->e;
    if (!e->opt.serve)
        return false;
    pthread_mutex_lock(&e->mu);
    bool d = s->tier.on_disk;
    pthread_mutex_unlock(&e->mu);
    return d;
}

void fg_session_delete(fg_session_t *s)
{
    if (!s)
        return;
    fg_engine_t *e = s->e;
    if (e->opt.serve) {
        pthread_mutex_lock(&e->mu);
        s->tier.delete_file = true;
        pthread_mutex_unlock(&e->mu);
    }
    fg_session_free(s);
}

fg_err fg_engine_tenant_usage(fg_engine_t *e, const char *tenant_name, fg_tenant_kv_usage *u)
{
    memset(u, 0, sizeof *u);
    const char *t = tenant_or_default(tenant_name);
    if (!fg_name_valid(t, strlen(t)))
        return FG_ERR_INVALID_ARG;
    if (!e->opt.serve)
        return FG_OK;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->tier.n_tenants; i++)
        if (strcmp(e->tier.tenants[i].name, t) == 0) {
            u->resident_kv_bytes = (uint64_t)fg_kv_owner_pages(e->kv, i) * fg_kv_store_geometry(e->kv)->page_bytes;
            u->disk_bytes = e->tier.tenants[i].disk_bytes;
            for (fg_session_t *s = e->serve.open_head; s; s = s->serve.open_next)
                if (s->tenant_ix == i) {
                    u->sessions_on_disk += s->tier.on_disk;
                    u->sessions_resident += !s->tier.on_disk;
                }
            break;
        }
    pthread_mutex_unlock(&e->mu);
    return FG_OK;
}
