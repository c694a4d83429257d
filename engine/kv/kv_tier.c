/* kv_tier.c: the disk tier of the serving engine: the writer thread, saves,
 * spills and loads, eviction under memory pressure (prefix sharing and forks
 * are in kv_share.c). See docs/engine.md ("Persistence").
 *
 * The step thread decides and the writer thread writes: a save is a snapshot
 * (a copy of the tokens and meta, and one reference to each KV page), so the
 * step thread never waits for the disk, and a page the session writes later
 * is copied first (it is shared with the snapshot). Finished jobs come back
 * to the step thread (fg_tier_reap), which releases the snapshot and, for a
 * spill, the session's pages. Loads read the file on the step thread.
 *
 * A cache with per-sequence state (deepseek4's window rings and open
 * compressor blocks, fg_engine_seq_state) is saved the same way: the pages
 * by reference, the state copied into the snapshot (it changes in place with
 * every token); a spill releases the state too, and a load puts the file's
 * pages and state back as they were (session_file.h, version 3).
 *
 * Everything here runs under engine->mu unless it says otherwise.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "policies/kv_evict.h"

#define MAX_EVICT 4096 /* candidates considered per relief */

static fg_evict_candidate cand[MAX_EVICT]; /* step thread only */

bool fg_tier_path(const fg_engine_t *e, const char *tenant, const char *name, const char *suffix, char *out,
                  size_t cap)
{
    int n = name ? snprintf(out, cap, "%s/%s/%s%s", e->tier.persist_dir, tenant, name, suffix)
                 : snprintf(out, cap, "%s/%s", e->tier.persist_dir, tenant);
    return n > 0 && (size_t)n < cap;
}

int fg_tier_tenant(fg_engine_t *e, const char *name)
{
    for (int i = 0; i < e->tier.n_tenants; i++)
        if (strcmp(e->tier.tenants[i].name, name) == 0)
            return i;
    if (e->tier.n_tenants >= FG_KV_MAX_OWNERS)
        return -1;
    if (e->tier.n_tenants == e->tier.cap_tenants) {
        int cap = e->tier.cap_tenants ? 2 * e->tier.cap_tenants : 16;
        fg_tenant_rec *t = realloc(e->tier.tenants, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        e->tier.tenants = t;
        e->tier.cap_tenants = cap;
    }
    fg_tenant_rec *t = &e->tier.tenants[e->tier.n_tenants];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->salt = fg_tenant_salt(name);
    return e->tier.n_tenants++;
}

void fg_tier_disk_add(fg_engine_t *e, int tenant_ix, int64_t delta)
{
    e->tier.disk_bytes = (uint64_t)((int64_t)e->tier.disk_bytes + delta);
    if (tenant_ix >= 0 && tenant_ix < e->tier.n_tenants)
        e->tier.tenants[tenant_ix].disk_bytes = (uint64_t)((int64_t)e->tier.tenants[tenant_ix].disk_bytes + delta);
}

static void disk_add(fg_engine_t *e, int tenant_ix, int64_t delta) { fg_tier_disk_add(e, tenant_ix, delta); }

/* The owner's fence (fg_engine_options.persist_fence): may this session's file be touched? */
static bool fence_ok(const fg_engine_t *e, const char *tenant, const char *name)
{
    return !e->opt.persist_fence || e->opt.persist_fence(e->opt.persist_fence_user, tenant, name);
}

/* ---- the writer thread (takes mu only around bookkeeping) ---- */

static int64_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

/* <persist_dir>/<tenant> and the path of j's session file; false when too long. */
static bool session_paths(const fg_engine_t *e, const fg_save_job *j, char *dir, char *path)
{
    return fg_tier_path(e, j->tenant, NULL, "", dir, 4096) && fg_tier_path(e, j->tenant, j->name, ".fgs", path, 4096);
}

/* After a save or a removal, on the writer thread: counted here, so the
 * counters are current when fg_engine_save_all returns. */
static void account(fg_engine_t *e, const fg_save_job *j, const fg_diag *d, bool save)
{
    pthread_mutex_lock(&e->mu);
    if (save) {
        if (j->err == FG_OK)
            e->stats.saves++;
        else
            e->stats.save_errors++;
    }
    if (j->err != FG_OK && e->tier.save_all_err == FG_OK) {
        e->tier.save_all_err = j->err; /* read by a waiting fg_engine_save_all */
        snprintf(e->tier.save_all_msg, sizeof e->tier.save_all_msg, "%s", d->msg);
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- a session's save ---- */


static fg_err save_write(fg_engine_t *e, fg_save_job *j, fg_diag *d)
{
    char dir[4096], path[4096];
    if (!session_paths(e, j, dir, path))
        return fg_diag_set(d, FG_ERR_IO, "session path too long under %s", e->tier.persist_dir);
    if (!fence_ok(e, j->tenant, j->name))
        return fg_diag_set(d, FG_ERR_STATE, "session %s/%s: not written, this instance no longer holds it (fenced)",
                           j->tenant, j->name);
    int64_t old = file_size(path);
    const fg_kv_geometry *geo = &e->tier.expect.geo;
    fg_sfile_view fv = {0};
    if (j->from_file) {
        /* A session on disk whose meta or queued input changed: its rows come from its file. */
        fg_err err = fg_tier_check_file(e, j->tenant, j->load_name, j->tenant_ix, false, &j->buf, &j->len, &fv, d);
        if (err != FG_OK)
            return err;
        /* Rows can be cut at any token; pages with a state only whole (or dropped). */
        bool match = geo->seq_bytes ? fv.n_tokens == j->n_tokens || j->n_tokens == 0 : fv.n_tokens >= j->n_tokens;
        for (int i = 0; match && i < j->n_tokens; i++)
            match = fg_sfile_token(&fv, i) == j->tokens[i];
        if (!match)
            return fg_diag_set(d, FG_ERR_SESSION_CORRUPT, "session %s/%s: the file's history differs from the session's",
                               j->tenant, j->load_name);
        old = file_size(path);
    }
    uint64_t size = fg_sfile_size(geo, j->n_tokens, j->n_pending, j->meta_len);
    if (e->opt.disk_budget_bytes)
        fg_ptier_make_room(e, j->tenant_ix, size > (uint64_t)old ? size - (uint64_t)old : 0); /* sessions before cached pages */
    pthread_mutex_lock(&e->mu);
    bool over = e->opt.disk_budget_bytes && e->tier.disk_bytes - (uint64_t)old + size > e->opt.disk_budget_bytes;
    uint64_t have = e->tier.disk_bytes;
    pthread_mutex_unlock(&e->mu);
    if (over)
        return fg_diag_set(d, FG_ERR_DISK_FULL, "session %s/%s: %llu bytes would pass the disk budget of %llu (%llu used)",
                           j->tenant, j->name, (unsigned long long)size, (unsigned long long)e->opt.disk_budget_bytes,
                           (unsigned long long)have);
    fg_sfile_content c = {.model_identity = e->tier.expect.model_identity, .arch = e->tier.expect.arch,
                          .tenant = j->tenant, .geo = geo, .tokens = j->tokens, .n_tokens = j->n_tokens,
                          .n_pending = j->n_pending, .meta = j->meta, .meta_len = j->meta_len, .pages = j->pages,
                          .rows = j->from_file ? (fv.pages ? fv.pages : fv.rows) : NULL,
                          .state = j->n_tokens ? (j->from_file ? fv.state : j->state) : NULL};
    fg_err err = fg_sfile_write(dir, j->name, &c, d);
    if (err == FG_OK) {
        pthread_mutex_lock(&e->mu);
        disk_add(e, j->tenant_ix, (int64_t)size - old);
        pthread_mutex_unlock(&e->mu);
    }
    return err;
}

static void save_run(fg_engine_t *e, fg_save_job *j, fg_diag *d)
{
    j->err = save_write(e, j, d);
    account(e, j, d, true);
}

/* Another session of s's tenant on disk that loads from the file `name`. */
static bool loads_from(const fg_session_t *o, const fg_session_t *s, const char *name)
{
    return o != s && o->tenant_ix == s->tenant_ix && o->tier.on_disk && strcmp(o->tier.load_name, name) == 0;
}

void fg_tier_remove_owned(fg_engine_t *e, fg_session_t *s)
{
    bool kept = false;
    for (fg_session_t *o = fg_all_first(e); o; o = fg_all_next(e, o))
        if (loads_from(o, s, s->name))
            kept = o->tier.load_kept = true;
    if (!kept)
        fg_tier_remove(e, s->tenant_name, s->name, s->tenant_ix);
}

void fg_tier_release_load(fg_engine_t *e, fg_session_t *s)
{
    if (!s->tier.load_kept)
        return;
    s->tier.load_kept = false;
    for (fg_session_t *o = fg_all_first(e); o; o = fg_all_next(e, o))
        if (o->tier.load_kept && loads_from(o, s, s->tier.load_name))
            return;
    fg_tier_remove(e, s->tenant_name, s->tier.load_name, s->tenant_ix);
}

static fg_session_t *by_uid(fg_engine_t *e, uint64_t uid);
static bool quiet(const fg_session_t *s);

/* A spilled session's memory goes back to the pool: its pages and its state. */
static void release_kv(fg_engine_t *e, fg_session_t *s)
{
    fg_kv_seq_truncate(e->kv, &s->seq, 0);
    fg_kv_seq_drop_state(e->kv, &s->seq);
}

/* Releases the snapshot's hold; a spill whose session did not change since
 * releases the session's pages. */
static void save_finish(fg_engine_t *e, fg_save_job *j)
{
    fg_session_t *s = by_uid(e, j->uid);
    if (!s)
        return;
    s->tier.saves_inflight--;
    if (j->spill)
        s->tier.spill_inflight = false;
    if (j->err != FG_OK) {
        s->tier.failed_gen = j->gen;
        s->tier.save_failures++;
        s->tier.save_err = j->err;
        if (s->serve.out.ev && s->serve.out.ev_count < s->serve.out.ev_cap) {
            fg_outq *q = &s->serve.out;
            q->ev[(q->ev_head + q->ev_count) % q->ev_cap] =
                (fg_event){.type = FG_EVENT_SAVE_FAILED, .error = j->err,
                           .text_off = (q->text_head + q->text_count) % q->text_cap};
            q->ev_count++;
            if (!fg_list_linked(&s->serve.ready_link))
                fg_list_push_front(&e->serve.ready, &s->serve.ready_link);
            e->serve.wake_owner = true;
        }
        return;
    }
    if (j->gen > s->tier.file_gen)
        s->tier.file_gen = j->gen;
    if (j->from_file && s->tier.on_disk) {
        fg_tier_release_load(e, s);
        strcpy(s->tier.load_name, s->name); /* its own file now holds its rows */
    }
    if (j->spill && quiet(s) && s->tier.gen == j->gen && !s->tier.on_disk) {
        release_kv(e, s);
        s->tier.on_disk = true;
        e->stats.spills++;
        e->stats.spill_seconds += j->seconds;
    }
}

static const fg_job_kind save_kind = {save_run, save_finish};

/* ---- a session file's removal ---- */

static void remove_run(fg_engine_t *e, fg_save_job *j, fg_diag *d)
{
    char dir[4096], path[4096];
    if (!session_paths(e, j, dir, path)) {
        j->err = fg_diag_set(d, FG_ERR_IO, "session path too long under %s", e->tier.persist_dir);
    } else if (fence_ok(e, j->tenant, j->name)) {
        int64_t old = file_size(path);
        if (unlink(path) == 0) {
            pthread_mutex_lock(&e->mu);
            disk_add(e, j->tenant_ix, -old);
            pthread_mutex_unlock(&e->mu);
        }
    }
    account(e, j, d, false);
}

static const fg_job_kind remove_kind = {remove_run, NULL};

/* ---- a session file read back (an on-disk session's load) ---- */

static void read_run(fg_engine_t *e, fg_save_job *j, fg_diag *d)
{
    char dir[4096], path[4096];
    if (!session_paths(e, j, dir, path))
        j->err = fg_diag_set(d, FG_ERR_IO, "session path too long under %s", e->tier.persist_dir);
    else
        j->err = fg_tier_check_file(e, j->tenant, j->name, j->tenant_ix, false, &j->buf, &j->len, &j->v, d);
}

/* Hands the file to its session, which fg_tier_load then copies into pages. */
static void read_finish(fg_engine_t *e, fg_save_job *j)
{
    fg_session_t *s = by_uid(e, j->uid);
    if (!s)
        return;
    s->tier.load_inflight = false;
    if (s->tier.on_disk && !s->tier.load_buf) {
        s->tier.load_buf = j->buf;
        s->tier.load_view = j->v;
        j->buf = NULL;
        s->tier.load_err = j->err;
        snprintf(s->tier.load_msg, sizeof s->tier.load_msg, "%s", j->msg);
        s->tier.load_seconds = j->seconds;
    }
}

static const fg_job_kind read_kind = {read_run, read_finish};

/* ---- the writer thread ---- */

static void run_job(fg_engine_t *e, fg_save_job *j)
{
    double t0 = fg_clock_mono_s();
    fg_diag d = {{0}};
    j->err = FG_OK;
    j->kind->run(e, j, &d);
    snprintf(j->msg, sizeof j->msg, "%s", d.msg);
    j->seconds = fg_clock_mono_s() - t0;
}

static void *writer_main(void *arg)
{
    fg_engine_t *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (fg_list_empty(&e->tier.jobs) && !e->tier.writer_stop)
            pthread_cond_wait(&e->tier.writer_cv, &e->mu);
        fg_list *l = fg_list_pop_front(&e->tier.jobs);
        if (!l)
            break;
        fg_save_job *j = fg_list_entry(l, fg_save_job, link);
        e->tier.job_running = j;
        pthread_mutex_unlock(&e->mu);
        run_job(e, j);
        pthread_mutex_lock(&e->mu);
        e->tier.job_running = NULL;
        fg_list_push_front(&e->tier.done_jobs, &j->link);
        e->tier.jobs_done++;
        e->serve.work = true;
        pthread_cond_signal(&e->serve.work_cv);
        pthread_cond_broadcast(&e->done_cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

void fg_tier_free_job(fg_engine_t *e, fg_save_job *j)
{
    free(j->buf);
    free(j->rows);
    for (int i = 0; i < j->n_pages; i++)
        fg_kv_page_release(e->kv, j->pages[i]);
    free(j->pages);
    free(j->state);
    free(j->tokens);
    free(j->meta);
    free(j);
}

void fg_tier_push_job(fg_engine_t *e, fg_save_job *j)
{
    fg_list_push_back(&e->tier.jobs, &j->link);
    e->tier.jobs_queued++;
    pthread_cond_signal(&e->tier.writer_cv);
}

static void push_job(fg_engine_t *e, fg_save_job *j) { fg_tier_push_job(e, j); }

/* ---- open and close ---- */

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Counts session files per tenant and removes temp files left by a crash. */
/* True when the file was last written more than session_file_max_age_seconds ago. */
static bool expired(const fg_engine_t *e, const char *path)
{
    struct stat st;
    const double max_age = e->opt.session_file_max_age_seconds;
    return max_age > 0 && stat(path, &st) == 0 && difftime(time(NULL), st.st_mtime) > max_age;
}

static fg_err scan_dir(fg_engine_t *e, fg_diag *diag)
{
    DIR *top = opendir(e->tier.persist_dir);
    if (!top)
        return fg_diag_set(diag, FG_ERR_IO, "persist_dir %s: %s", e->tier.persist_dir, strerror(errno));
    struct dirent *te;
    while ((te = readdir(top))) {
        if (!fg_name_valid(te->d_name, strlen(te->d_name)))
            continue;
        char dir[4096];
        if (!fg_tier_path(e, te->d_name, NULL, "", dir, sizeof dir))
            continue;
        DIR *sub = opendir(dir);
        if (!sub)
            continue; /* a file, or unreadable: not a tenant directory */
        int ix = fg_tier_tenant(e, te->d_name);
        struct dirent *fe;
        while ((fe = readdir(sub))) {
            char path[4096];
            if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, fe->d_name) >= sizeof path)
                continue;
            if (ends_with(fe->d_name, ".fgs.tmp"))
                unlink(path);
            else if (ends_with(fe->d_name, ".fgs") && ix >= 0 && expired(e, path))
                unlink(path); /* a session idle this long would have expired had the server been running */
            else if (ends_with(fe->d_name, ".fgs") && ix >= 0)
                disk_add(e, ix, file_size(path));
        }
        closedir(sub);
        if (ix >= 0)
            fg_ptier_scan(e, ix, dir);
    }
    closedir(top);
    return FG_OK;
}

static int mkdir_p(const char *path)
{
    char buf[4096];
    if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf)
        return -1;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

fg_err fg_tier_open(fg_engine_t *e, fg_diag *diag)
{
    const fg_kv_geometry *geo = fg_kv_store_geometry(e->kv);
    e->tier.expect = (fg_sfile_expect){.model_identity = e->model->identity, .arch = e->model->arch->name,
                                       .geo = *geo, .max_tokens = e->n_ctx, .n_vocab = e->model->n_vocab};
    pthread_cond_init(&e->done_cv, NULL);
    pthread_cond_init(&e->tier.writer_cv, NULL);
    if (e->opt.prefix_cache && fg_prefix_cache_create(fg_kv_store_pages_total(e->kv), &e->share.pc) != FG_OK)
        return fg_diag_set(diag, FG_ERR_NOMEM, "engine: out of memory for the prefix cache");
    if (fg_tier_tenant(e, "default") < 0)
        return fg_diag_set(diag, FG_ERR_NOMEM, "engine: out of memory for the tenant table");
    if (!e->opt.persist_dir || !e->opt.persist_dir[0])
        return FG_OK;
    e->tier.persist_dir = strdup(e->opt.persist_dir);
    if (!e->tier.persist_dir)
        return fg_diag_set(diag, FG_ERR_NOMEM, "engine: out of memory");
    if (mkdir_p(e->tier.persist_dir) != 0)
        return fg_diag_set(diag, FG_ERR_IO, "cannot create persist_dir %s: %s", e->tier.persist_dir, strerror(errno));
    fg_err err = scan_dir(e, diag);
    if (err != FG_OK)
        return err;
    if (pthread_create(&e->tier.writer, NULL, writer_main, e) != 0)
        return fg_diag_set(diag, FG_ERR_NOMEM, "engine: cannot start the session writer thread");
    e->tier.writer_started = true;
    e->tier.persist = true;
    return FG_OK;
}

void fg_tier_close(fg_engine_t *e)
{
    if (e->tier.writer_started) {
        pthread_mutex_lock(&e->mu);
        e->tier.writer_stop = true;
        pthread_cond_signal(&e->tier.writer_cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->tier.writer, NULL); /* queued jobs are written first */
        e->tier.writer_started = false;
    }
    for (fg_list *l; (l = fg_list_pop_front(&e->tier.done_jobs));)
        fg_tier_free_job(e, fg_list_entry(l, fg_save_job, link));
    e->tier.persist = false; /* later removals unlink directly */
}

void fg_tier_destroy(fg_engine_t *e)
{
    fg_prefix_cache_destroy(e->share.pc, e->kv);
    e->share.pc = NULL;
    fg_ptier_destroy(e);
    free(e->tier.tenants);
    e->tier.tenants = NULL;
    free(e->tier.persist_dir);
    e->tier.persist_dir = NULL;
    pthread_cond_destroy(&e->done_cv);
    pthread_cond_destroy(&e->tier.writer_cv);
}

/* ---- saves ---- */

void fg_tier_save(fg_engine_t *e, fg_session_t *s, bool spill)
{
    if (!e->tier.persist || !s->name[0] || s->serve.freed || (s->tier.gen == s->tier.file_gen && !spill))
        return;
    if (s->tier.on_disk) {
        if (s->tier.gen == s->tier.file_gen || s->tier.load_inflight || s->tier.load_buf)
            return;
        spill = false; /* only its meta or queued input changed: rewrite the file from itself */
    } else if ((int)s->hist.n != s->seq.n_tokens || (fg_engine_seq_state(e) && s->hist.n && !s->seq.state))
        return; /* mid-response: cannot happen for idle sessions */
    if (spill && s->tier.gen == s->tier.file_gen && s->tier.saves_inflight == 0) {
        /* The file on disk is this very state: release the pages without writing again. */
        release_kv(e, s);
        s->tier.on_disk = true;
        e->stats.spills++;
        return;
    }
    fg_save_job *j = calloc(1, sizeof *j);
    int n_pages = s->tier.on_disk ? 0 : (s->hist.n + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    if (!j)
        return;
    j->kind = &save_kind;
    j->from_file = s->tier.on_disk;
    strcpy(j->load_name, s->tier.load_name);
    j->tokens = malloc(((size_t)s->hist.n + (size_t)s->todo.n + 1) * sizeof *j->tokens);
    j->pages = malloc(((size_t)n_pages + 1) * sizeof *j->pages);
    j->meta = s->tier.meta_len ? malloc(s->tier.meta_len) : NULL;
    /* The state changes in place with every token: the snapshot holds a copy. */
    const size_t state_bytes = !s->tier.on_disk && s->hist.n ? fg_kv_store_geometry(e->kv)->seq_bytes : 0;
    j->state = state_bytes ? malloc(state_bytes) : NULL;
    if (!j->tokens || !j->pages || (s->tier.meta_len && !j->meta) || (state_bytes && !j->state)) {
        fg_tier_free_job(e, j);
        return; /* out of memory: the file stays as it was; the next save retries */
    }
    if (s->hist.n) /* an empty session has no arrays: memcpy from NULL is undefined even for 0 bytes */
        memcpy(j->tokens, s->hist.v, (size_t)s->hist.n * sizeof *j->tokens);
    if (s->todo.n)
        memcpy(j->tokens + s->hist.n, s->todo.v, (size_t)s->todo.n * sizeof *j->tokens);
    j->n_tokens = s->hist.n;
    j->n_pending = s->todo.n;
    if (s->tier.meta_len)
        memcpy(j->meta, s->tier.meta, s->tier.meta_len);
    j->meta_len = s->tier.meta_len;
    if (state_bytes)
        memcpy(j->state, s->seq.state, state_bytes);
    for (int i = 0; i < n_pages; i++)
        if (fg_engine_page_to_host(e, s->seq.pages[i], NULL) != FG_OK) {
            fg_tier_free_job(e, j);
            return; /* the device copy failed: the file stays as it was; the next save retries */
        }
    for (int i = 0; i < n_pages; i++) {
        fg_kv_page_retain(e->kv, s->seq.pages[i]);
        j->pages[i] = s->seq.pages[i];
    }
    j->n_pages = n_pages;
    j->uid = s->uid;
    j->gen = s->tier.gen;
    j->spill = spill;
    j->tenant_ix = s->tenant_ix;
    strcpy(j->tenant, s->tenant_name);
    strcpy(j->name, s->name);
    s->tier.saves_inflight++;
    if (spill)
        s->tier.spill_inflight = true;
    push_job(e, j);
}

void fg_tier_remove(fg_engine_t *e, const char *tenant, const char *name, int tenant_ix)
{
    if (!e->tier.persist_dir || !name[0])
        return;
    if (!e->tier.persist) {
        char path[4096];
        if (fence_ok(e, tenant, name) && fg_tier_path(e, tenant, name, ".fgs", path, sizeof path)) {
            int64_t old = file_size(path);
            if (unlink(path) == 0)
                disk_add(e, tenant_ix, -old);
        }
        return;
    }
    fg_save_job *j = calloc(1, sizeof *j);
    if (!j)
        return;
    j->kind = &remove_kind;
    j->tenant_ix = tenant_ix;
    strcpy(j->tenant, tenant);
    strcpy(j->name, name);
    push_job(e, j); /* after any save of the same session: the queue is in order */
}

static fg_session_t *by_uid(fg_engine_t *e, uint64_t uid)
{
    for (fg_session_t *s = fg_all_first(e); s; s = fg_all_next(e, s))
        if (s->uid == uid)
            return s;
    return NULL;
}

/* Its KV is not being written: no admitted response (one that waits for
 * pages may be spilled, or waiting sessions could hold the pool among
 * themselves), no fork in progress. */
static bool quiet(const fg_session_t *s)
{
    return !(s->serve.resp.active && s->serve.resp.admitted) && !s->serve.freed && !s->share.fork_src;
}

void fg_tier_reap(fg_engine_t *e)
{
    const bool any = !fg_list_empty(&e->tier.done_jobs);
    for (fg_list *l; (l = fg_list_pop_front(&e->tier.done_jobs));) {
        fg_save_job *j = fg_list_entry(l, fg_save_job, link);
        if (j->kind->finish)
            j->kind->finish(e, j);
        fg_tier_free_job(e, j);
    }
    if (any)
        pthread_cond_broadcast(&e->done_cv); /* a waiting fg_session_save reads file_gen and save_failures */
}

void fg_tier_save_all(fg_engine_t *e)
{
    for (fg_session_t *s = fg_all_first(e); s; s = fg_all_next(e, s))
        if (!s->serve.resp.active || (s->tier.on_disk && !s->serve.resp.admitted))
            fg_tier_save(e, s, false);
    /* Sessions not adopted yet (on the dirty list) have nothing computed to save. */
}

/* ---- spills ---- */

static bool spillable(const fg_engine_t *e, const fg_session_t *s)
{
    return e->tier.persist && s->name[0] && !s->tier.on_disk && quiet(s) && !s->tier.spill_inflight && s->seq.n_pages > 0 &&
           s->tier.failed_gen != s->tier.gen;
}

void fg_tier_idle(fg_engine_t *e)
{
    if (!e->tier.persist || e->opt.idle_spill_seconds <= 0)
        return;
    double now = fg_clock_mono_s();
    for (fg_session_t *s = fg_all_first(e); s; s = fg_all_next(e, s))
        if (spillable(e, s) && !s->serve.responding && now - s->tier.last_used >= e->opt.idle_spill_seconds)
            fg_tier_save(e, s, true);
    /* Cold cached pages idle as long go to page files too; the scan walks the
     * whole cache, so at most as often as the step loop wakes for idle work. */
    double every = e->opt.idle_spill_seconds / 4 < 1 ? e->opt.idle_spill_seconds / 4 : 1;
    if (!e->share.pc || now - e->tier.cold_idle_at < every)
        return;
    e->tier.cold_idle_at = now;
    int n = fg_prefix_cache_cold(e->share.pc, e->kv, cand, MAX_EVICT, now);
    for (int i = 0; i < n; i++)
        if (cand[i].idle_seconds >= e->opt.idle_spill_seconds) {
            fg_ptier_spill(e, cand[i].id);
            fg_prefix_cache_drop(e->share.pc, e->kv, cand[i].id);
        }
}

void fg_tier_drop_cold(fg_engine_t *e, size_t need)
{
    if (!e->share.pc || fg_kv_store_pages_free(e->kv) >= need)
        return;
    int n = fg_prefix_cache_cold(e->share.pc, e->kv, cand, MAX_EVICT, fg_clock_mono_s());
    fg_kv_evict_order(cand, n);
    for (int i = 0; i < n && fg_kv_store_pages_free(e->kv) < need; i++) {
        if (e->tier.persist)
            fg_ptier_spill(e, cand[i].id); /* its rows are copied out first */
        fg_prefix_cache_drop(e->share.pc, e->kv, cand[i].id);
    }
    fg_share_drop_snapshots(e, need);
}

void fg_tier_relieve(fg_engine_t *e, size_t need_pages, const fg_session_t *except)
{
    static fg_session_t *cand_s[MAX_EVICT];    /* sessions by candidate id */
    double now = fg_clock_mono_s();
    size_t free_pages = fg_kv_store_pages_free(e->kv);
    if (free_pages >= need_pages)
        return;
    /* Cold cached pages first: dropping one loses only a possible future hit (it goes to a page file). */
    fg_tier_drop_cold(e, need_pages);
    free_pages = fg_kv_store_pages_free(e->kv);
    if (free_pages >= need_pages)
        return;
    if (!e->tier.persist)
        return;
    /* Then idle sessions to disk, in the policy's order; spills in flight count as coming. */
    size_t coming = 0;
    int n = 0;
    for (fg_session_t *s = fg_all_first(e); s; s = fg_all_next(e, s)) {
        /* a spill frees the pages its state stands for too */
        const size_t pages = (size_t)s->seq.n_pages + (s->seq.state ? fg_kv_store_state_pages(e->kv) : 0);
        if (s->tier.spill_inflight)
            coming += pages;
        else if (s != except && spillable(e, s) && n < MAX_EVICT) {
            cand_s[n] = s;
            cand[n] = (fg_evict_candidate){.kind = FG_EVICT_SESSION, .idle_seconds = now - s->tier.last_used,
                                           .weight = s->params.weight, .pages = pages, .id = (uint32_t)n};
            n++;
        }
    }
    if (free_pages + coming >= need_pages)
        return;
    fg_kv_evict_order(cand, n);
    int take = fg_kv_evict_take(cand, n, need_pages - free_pages - coming);
    for (int i = 0; i < take; i++)
        fg_tier_save(e, cand_s[cand[i].id], true);
}

/* ---- loads ---- */

static bool damage(fg_err err)
{
    return err == FG_ERR_SESSION_TRUNCATED || err == FG_ERR_SESSION_CORRUPT || err == FG_ERR_SESSION_MODEL ||
           err == FG_ERR_SESSION_VERSION;
}

/* Moves a damaged file aside (<name>.fgs.damaged); it no longer counts as a
 * session file. locked: the caller holds mu. */
static void move_aside(fg_engine_t *e, const char *tenant, const char *name, int tenant_ix, bool locked)
{
    char path[4096], aside[4096];
    if (!fg_tier_path(e, tenant, name, ".fgs", path, sizeof path) ||
        !fg_tier_path(e, tenant, name, ".fgs.damaged", aside, sizeof aside))
        return;
    int64_t size = file_size(path);
    if (rename(path, aside) == 0) {
        if (!locked)
            pthread_mutex_lock(&e->mu);
        disk_add(e, tenant_ix, -size);
        if (!locked)
            pthread_mutex_unlock(&e->mu);
    }
}

bool fg_tier_writing(const fg_engine_t *e, const char *tenant, const char *name)
{
    const fg_save_job *r = e->tier.job_running;
    if (r && strcmp(r->tenant, tenant) == 0 && strcmp(r->name, name) == 0)
        return true;
    for (const fg_list *l = fg_list_first(&e->tier.jobs); l; l = fg_list_next(&e->tier.jobs, l)) {
        const fg_save_job *j = fg_list_entry(l, fg_save_job, link);
        if (strcmp(j->tenant, tenant) == 0 && strcmp(j->name, name) == 0)
            return true;
    }
    return false;
}

fg_err fg_tier_check_file(fg_engine_t *e, const char *tenant, const char *name, int tenant_ix, bool locked,
                          uint8_t **buf, size_t *len, fg_sfile_view *v, fg_diag *diag)
{
    char path[4096];
    *buf = NULL;
    if (!fg_tier_path(e, tenant, name, ".fgs", path, sizeof path))
        return fg_diag_set(diag, FG_ERR_IO, "session path too long under %s", e->tier.persist_dir);
    fg_diag d = {{0}};
    fg_err err = fg_sfile_read(path, fg_sfile_max_size(&e->tier.expect), buf, len, &d);
    if (err == FG_OK)
        err = fg_sfile_parse(*buf, *len, &e->tier.expect, v, &d);
    if (err == FG_OK)
        err = fg_sfile_check_owner(v, tenant, name, &d);
    if (err == FG_OK && v->first_token != 0) /* a history starts at 0: this is a page file renamed */
        err = fg_diag_set(&d, FG_ERR_SESSION_CORRUPT, "its tokens start at %d, not 0", v->first_token);
    if (err != FG_OK) {
        free(*buf);
        *buf = NULL;
        if (damage(err)) {
            move_aside(e, tenant, name, tenant_ix, locked);
            return fg_diag_set(diag, err, "session %s/%s: %s (file moved to %s.fgs.damaged)", tenant, name, d.msg,
                               name);
        }
        return fg_diag_set(diag, err, "session %s/%s: %s", tenant, name, d.msg);
    }
    return FG_OK;
}

static void drop_load(fg_session_t *s)
{
    free(s->tier.load_buf);
    s->tier.load_buf = NULL;
    memset(&s->tier.load_view, 0, sizeof s->tier.load_view);
    s->tier.load_err = FG_OK;
}

/* The end of a load: s holds its n tokens again, resident, and is shared afresh. */
static fg_err loaded(fg_engine_t *e, fg_session_t *s, int n, double t0)
{
    s->seq.n_tokens = n;
    drop_load(s);
    fg_tier_release_load(e, s);
    s->tier.on_disk = false;
    strcpy(s->tier.load_name, s->name);
    s->share.reg_n = 0;
    fg_share_register(e, s);
    e->stats.restores++;
    e->stats.restore_seconds += s->tier.load_seconds + (fg_clock_mono_s() - t0);
    return FG_OK;
}

/* fg_tier_load for a cache with per-sequence state: the file's pages and
 * state go back as they were stored, all of them (a state cannot be cut
 * back: a session that must start over holds no tokens and loads nothing). */
static fg_err load_whole(fg_engine_t *e, fg_session_t *s, double t0, fg_diag *diag)
{
    const int n = s->hist.n;
    const int n_pages = (n + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    const fg_sfile_view v = s->tier.load_view;
    const fg_kv_geometry *geo = &e->tier.expect.geo;
    const size_t need = (size_t)n_pages + (n && !s->seq.state ? fg_kv_store_state_pages(e->kv) : 0);
    if (fg_kv_store_pages_free(e->kv) < need)
        return FG_ERR_KV_FULL; /* the file stays read until pages free up */
    bool match = n == 0 || (v.n_tokens == n && v.state);
    for (int i = 0; match && i < n; i++)
        match = fg_sfile_token(&v, i) == s->hist.v[i];
    if (!match) {
        drop_load(s);
        move_aside(e, s->tenant_name, s->tier.load_name, s->tenant_ix, true);
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "session %s/%s: the file's history or state differs from "
                           "the session's", s->tenant_name, s->tier.load_name);
    }
    fg_kv_seq_truncate(e->kv, &s->seq, 0);
    fg_err err = n ? fg_kv_seq_reserve(e->kv, &s->seq, n) : FG_OK;
    if (err != FG_OK) {
        fg_kv_seq_truncate(e->kv, &s->seq, 0);
        return FG_ERR_KV_FULL; /* out of memory for the table: retried like a full pool */
    }
    for (int k = 0; k < n_pages; k++) {
        memcpy(s->seq.pages[k], fg_sfile_page(&v, geo, k), geo->page_bytes);
        /* Read into the host page: the backend's resident copy follows. */
        if ((err = fg_engine_page_to_device(e, s->seq.pages[k], diag)) != FG_OK) {
            fg_kv_seq_truncate(e->kv, &s->seq, 0);
            drop_load(s);
            return err;
        }
    }
    if (n)
        memcpy(s->seq.state, v.state, geo->seq_bytes); /* its token count is n (fg_sfile_parse) */
    return loaded(e, s, n, t0);
}

fg_err fg_tier_load(fg_engine_t *e, fg_session_t *s, fg_diag *diag)
{
    if (!s->tier.load_buf && s->tier.load_err == FG_OK) {
        /* The writer thread reads and validates the file; the step goes on meanwhile. */
        if (!s->tier.load_inflight) {
            fg_save_job *j = calloc(1, sizeof *j);
            if (!j)
                return FG_ERR_KV_FULL; /* out of memory: retried like a full pool */
            j->kind = &read_kind;
            j->uid = s->uid;
            j->tenant_ix = s->tenant_ix;
            strcpy(j->tenant, s->tenant_name);
            strcpy(j->name, s->tier.load_name);
            s->tier.load_inflight = true;
            push_job(e, j);
        }
        return FG_ERR_BUSY;
    }
    if (s->tier.load_err != FG_OK) {
        fg_err err = fg_diag_set(diag, s->tier.load_err, "%s", s->tier.load_msg);
        drop_load(s);
        return err;
    }
    double t0 = fg_clock_mono_s();
    if (fg_engine_seq_state(e))
        return load_whole(e, s, t0, diag);
    const int n = s->hist.n;
    const int n_pages = (n + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    /* Pages the cache already holds (full pages the session had before it spilled). */
    int hits = 0;
    if (e->share.pc && n >= FG_KV_PAGE_TOKENS && fg_share_page_keys(e, s, n / FG_KV_PAGE_TOKENS - 1))
        for (int k = 0; k < n / FG_KV_PAGE_TOKENS; k++)
            hits += fg_prefix_cache_find(e->share.pc, s->share.phash[k], k ? s->share.phash[k - 1] : 0, s->tenant_ix,
                                         s->hist.v + (size_t)k * FG_KV_PAGE_TOKENS, t0) != NULL;
    if (fg_kv_store_pages_free(e->kv) < (size_t)(n_pages - hits))
        return FG_ERR_KV_FULL; /* the file stays read until pages free up */
    if (fg_kv_seq_grow_table(&s->seq, n_pages) != FG_OK)
        return FG_ERR_KV_FULL; /* out of memory for the table: retried like a full pool */
    const fg_sfile_view v = s->tier.load_view;
    bool match = v.n_tokens >= n;
    for (int i = 0; match && i < n; i++)
        match = fg_sfile_token(&v, i) == s->hist.v[i];
    if (!match) {
        drop_load(s);
        move_aside(e, s->tenant_name, s->tier.load_name, s->tenant_ix, true);
        return fg_diag_set(diag, FG_ERR_SESSION_CORRUPT, "session %s/%s: the file's history differs from the session's",
                           s->tenant_name, s->tier.load_name);
    }
    const fg_kv_geometry *geo = &e->tier.expect.geo;
    fg_kv_seq_truncate(e->kv, &s->seq, 0);
    for (int k = 0; k < n_pages; k++) {
        uint8_t *page = NULL;
        if (e->share.pc && (k + 1) * FG_KV_PAGE_TOKENS <= n && k < s->share.phash_n)
            page = fg_prefix_cache_find(e->share.pc, s->share.phash[k], k ? s->share.phash[k - 1] : 0, s->tenant_ix,
                                        s->hist.v + (size_t)k * FG_KV_PAGE_TOKENS, t0);
        if (page) {
            fg_kv_page_retain(e->kv, page);
        } else {
            page = fg_kv_page_alloc_for(e->kv, s->tenant_ix); /* counted free above */
            int t_end = (k + 1) * FG_KV_PAGE_TOKENS < n ? (k + 1) * FG_KV_PAGE_TOKENS : n;
            for (int t = k * FG_KV_PAGE_TOKENS; t < t_end; t++)
                for (int il = 0; il < geo->n_layer; il++)
                    memcpy(page + ((size_t)il * FG_KV_PAGE_TOKENS + (size_t)(t % FG_KV_PAGE_TOKENS)) * geo->row_bytes,
                           fg_sfile_row(&v, geo, il, t), geo->row_bytes);
            s->seq.pages[s->seq.n_pages++] = page;
            /* Read into the host page: the backend's resident copy follows (cache hits are current already). */
            fg_err err = fg_engine_page_to_device(e, page, diag);
            if (err != FG_OK) {
                fg_kv_seq_truncate(e->kv, &s->seq, 0);
                drop_load(s);
                return err;
            }
            continue;
        }
        s->seq.pages[s->seq.n_pages++] = page;
    }
    return loaded(e, s, n, t0);
}

void fg_tier_lose(fg_engine_t *e, fg_session_t *s)
{
    s->serve.committed -= s->hist.n + s->todo.n;
    s->hist.n = 0;
    s->todo.n = 0;
    s->todo_sampled = false;
    drop_load(s);
    fg_kv_seq_truncate(e->kv, &s->seq, 0);
    fg_share_truncated(s, 0);
    fg_tier_release_load(e, s);
    s->tier.on_disk = false;
    s->serve.length_snapshot = 0;
    strcpy(s->tier.load_name, s->name);
    s->tier.gen++;
    s->tier.file_gen = s->tier.gen; /* nothing to save: the file is gone */
}
