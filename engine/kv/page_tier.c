/* page_tier.c: cold shared pages move to disk instead of being dropped.
 *
 * When the prefix cache lets a cold page go under memory pressure, its rows
 * are copied out (so the pool page is free at once) and the writer thread
 * writes <persist_dir>/<tenant>/pages/<key hex>.fgp (page_file.h). An index
 * of the keys on disk, per tenant, is kept in memory (rebuilt by the scan at
 * open). On a later cache miss whose key is listed, the writer thread reads
 * and validates the file and the step thread copies it into a fresh pool
 * page listed in the cache, where the waiting session finds it: the step
 * thread never touches the disk. Page files are immutable (a key names its
 * content), so a page read back keeps its file and is not written again when
 * it goes cold once more. They count in the tenant's disk bytes; when a write
 * would pass disk_budget_bytes the tenant's oldest page files are removed
 * first, and a page that still does not fit is dropped as before. A damaged
 * file is moved aside (<key>.fgp.damaged) and the page is computed again.
 *
 * A cache with state (deepseek4) writes an entry's state snapshot into its
 * page file (page_file.h) and reads it back with the page, charged to the
 * tenant like any snapshot (fg_kv_state_copy), so a prefix hit, which needs
 * both, survives the entry leaving memory. The one change a page file gets:
 * a file without a snapshot is replaced by one with it when its page goes
 * cold again carrying one (a session left it there meanwhile).
 *
 * Runs under engine->mu unless it says otherwise.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "engine/kv/page_file.h"

static int find(const fg_engine_t *e, int tenant_ix, uint64_t key)
{
    for (int i = 0; i < e->tier.n_dpages; i++)
        if (e->tier.dpages[i].key == key && e->tier.dpages[i].tenant_ix == tenant_ix)
            return i;
    return -1;
}

static fg_dpage *add(fg_engine_t *e, int tenant_ix, uint64_t key)
{
    if (e->tier.n_dpages == e->tier.cap_dpages) {
        int cap = e->tier.cap_dpages ? 2 * e->tier.cap_dpages : 64;
        fg_dpage *p = realloc(e->tier.dpages, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        e->tier.dpages = p;
        e->tier.cap_dpages = cap;
    }
    fg_dpage *d = &e->tier.dpages[e->tier.n_dpages++];
    *d = (fg_dpage){.key = key, .tenant_ix = tenant_ix, .state = FG_DPAGE_WRITING};
    return d;
}

/* Unlists entry i, uncounting its bytes when it was on disk. */
static void unlist(fg_engine_t *e, int i)
{
    if (e->tier.dpages[i].state != FG_DPAGE_WRITING)
        fg_tier_disk_add(e, e->tier.dpages[i].tenant_ix, -(int64_t)e->tier.dpages[i].bytes);
    e->tier.dpages[i] = e->tier.dpages[--e->tier.n_dpages];
}

static bool page_path(const fg_engine_t *e, int tenant_ix, uint64_t key, const char *suffix, char *out, size_t cap)
{
    char hex[17];
    fg_pfile_name(key, hex);
    int n = snprintf(out, cap, "%s/%s/pages/%s%s", e->tier.persist_dir, e->tier.tenants[tenant_ix].name, hex, suffix);
    return n > 0 && (size_t)n < cap;
}

void fg_ptier_destroy(fg_engine_t *e)
{
    free(e->tier.dpages);
    e->tier.dpages = NULL;
    e->tier.n_dpages = e->tier.cap_dpages = 0;
}

void fg_ptier_scan(fg_engine_t *e, int tenant_ix, const char *tenant_dir)
{
    char dir[4096];
    if ((size_t)snprintf(dir, sizeof dir, "%s/pages", tenant_dir) >= sizeof dir)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return; /* no page files yet */
    struct dirent *fe;
    while ((fe = readdir(d))) {
        char path[4096];
        struct stat st;
        uint64_t key;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, fe->d_name) >= sizeof path)
            continue;
        size_t n = strlen(fe->d_name);
        if (n > 8 && strcmp(fe->d_name + n - 8, ".fgp.tmp") == 0) {
            unlink(path); /* left by a crash */
            continue;
        }
        if (!fg_pfile_parse_name(fe->d_name, &key) || stat(path, &st) != 0 || find(e, tenant_ix, key) >= 0)
            continue;
        fg_dpage *p = add(e, tenant_ix, key);
        if (!p)
            break;
        const fg_kv_geometry *geo = &e->tier.expect.geo;
        p->state = FG_DPAGE_ON_DISK;
        p->snap = geo->seq_bytes && (uint64_t)st.st_size == fg_pfile_size(geo, true); /* read back: checked */
        p->bytes = (uint64_t)st.st_size;
        p->born = (double)st.st_mtime;
        fg_tier_disk_add(e, tenant_ix, (int64_t)p->bytes);
    }
    closedir(d);
}

/* The two kinds of page job (fg_job_kind): a page file's write, and its read
 * back; run on the writer thread, finish on the step thread. */
static void write_run(fg_engine_t *e, fg_save_job *j, fg_diag *d);
static void write_finish(fg_engine_t *e, fg_save_job *j);
static void read_run(fg_engine_t *e, fg_save_job *j, fg_diag *d);
static void read_finish(fg_engine_t *e, fg_save_job *j);
static const fg_job_kind write_kind = {write_run, write_finish};
static const fg_job_kind read_kind = {read_run, read_finish};

/* ---- step thread ---- */

static bool damage(fg_err err)
{
    return err == FG_ERR_SESSION_TRUNCATED || err == FG_ERR_SESSION_CORRUPT || err == FG_ERR_SESSION_MODEL ||
           err == FG_ERR_SESSION_VERSION;
}


void fg_ptier_spill(fg_engine_t *e, uint32_t id)
{
    fg_prefix_entry x;
    if (!fg_prefix_cache_entry(e->share.pc, id, &x))
        return;
    const fg_kv_geometry *geo = &e->tier.expect.geo;
    bool snap = x.snap && !(e->opt.disk_budget_bytes && fg_pfile_size(geo, true) > e->opt.disk_budget_bytes);
    const int on = find(e, x.tenant, x.key);
    /* On disk already (a key names its content) or being written or read, unless a snapshot is to be added. */
    const bool replace = on >= 0 && snap && !e->tier.dpages[on].snap && e->tier.dpages[on].state == FG_DPAGE_ON_DISK;
    if ((on >= 0 && !replace) || (e->opt.disk_budget_bytes && fg_pfile_size(geo, snap) > e->opt.disk_budget_bytes))
        return;
    if (fg_engine_page_to_host(e, x.page, NULL) != FG_OK)
        return; /* the device copy failed: the page is dropped as without a disk tier */
    fg_save_job *j = calloc(1, sizeof *j);
    if (!j)
        return;
    /* A cache with state keeps its page as stored (session_file.h, version 3). */
    const bool whole = geo->seq_bytes != 0;
    j->tokens = malloc(FG_KV_PAGE_TOKENS * sizeof *j->tokens);
    j->rows = malloc(whole ? geo->page_bytes : FG_KV_PAGE_TOKENS * geo->bytes_per_token);
    j->state = snap ? malloc(geo->seq_bytes) : NULL; /* the cache frees its own when it drops the entry */
    if (replace && j->tokens && j->rows && j->state)
        unlist(e, on); /* the file is replaced: counted again when written */
    fg_dpage *d = j->tokens && j->rows && (j->state || !snap) ? add(e, x.tenant, x.key) : NULL;
    if (!d) {
        fg_tier_free_job(e, j);
        return; /* out of memory: dropped as without a disk tier */
    }
    memcpy(j->tokens, x.tokens, FG_KV_PAGE_TOKENS * sizeof *j->tokens);
    if (snap)
        memcpy(j->state, x.snap, geo->seq_bytes);
    /* Pages hold [layer][token] rows; files [token][layer]. */
    uint8_t *dst = j->rows;
    if (whole)
        memcpy(dst, x.page, geo->page_bytes);
    else
        for (int t = 0; t < FG_KV_PAGE_TOKENS; t++)
            for (int il = 0; il < geo->n_layer; il++, dst += geo->row_bytes)
                memcpy(dst, x.page + ((size_t)il * FG_KV_PAGE_TOKENS + (size_t)t) * geo->row_bytes, geo->row_bytes);
    j->kind = &write_kind;
    j->key = x.key;
    j->prev = x.prev;
    j->at = x.at;
    j->replace = replace;
    j->n_tokens = FG_KV_PAGE_TOKENS;
    j->tenant_ix = x.tenant;
    strcpy(j->tenant, e->tier.tenants[x.tenant].name);
    fg_tier_push_job(e, j);
}

bool fg_ptier_fetch(fg_engine_t *e, int tenant_ix, int at, uint64_t prev, const int32_t *tokens, int n_pages)
{
    const uint64_t salt = e->tier.tenants[tenant_ix].salt;
    bool wait = false;
    for (int k = 0; k < n_pages; k++) {
        const int32_t *tk = tokens + (size_t)k * FG_KV_PAGE_TOKENS;
        uint64_t key = fg_page_key(prev, salt, tk);
        int i = find(e, tenant_ix, key);
        if (i < 0 || e->tier.dpages[i].state == FG_DPAGE_WRITING)
            break;
        fg_dpage *d = &e->tier.dpages[i];
        if (d->no_room) {
            d->no_room = false; /* its last load found the pool full: computed this time */
            break;
        }
        if (d->state == FG_DPAGE_ON_DISK &&
            (k == 0 || !fg_prefix_cache_find(e->share.pc, key, prev, tenant_ix, tk, fg_clock_mono_s()))) {
            fg_save_job *j = calloc(1, sizeof *j);
            if (!j)
                break;
            j->kind = &read_kind;
            j->key = key;
            j->at = at + k * FG_KV_PAGE_TOKENS;
            j->tenant_ix = tenant_ix;
            strcpy(j->tenant, e->tier.tenants[tenant_ix].name);
            d->state = FG_DPAGE_LOADING;
            fg_tier_push_job(e, j);
        }
        if (k == 0)
            wait = d->state == FG_DPAGE_LOADING;
        prev = key;
    }
    return wait;
}

bool fg_ptier_loading(const fg_engine_t *e, int tenant_ix, uint64_t key)
{
    const int i = find(e, tenant_ix, key);
    return i >= 0 && e->tier.dpages[i].state == FG_DPAGE_LOADING;
}

/* A page file written: listed as on disk (or dropped when the write failed). */
static void write_finish(fg_engine_t *e, fg_save_job *j)
{
    int i = find(e, j->tenant_ix, j->key);
    if (i < 0)
        return;
    fg_dpage *d = &e->tier.dpages[i];
    if (j->err != FG_OK) {
        unlist(e, i); /* over the budget or a failed write: dropped as without a disk tier */
        return;
    }
    d->state = FG_DPAGE_ON_DISK;
    d->snap = j->state != NULL;
    d->bytes = fg_pfile_size(&e->tier.expect.geo, d->snap);
    d->born = fg_clock_mono_s();
    e->stats.pages_to_disk++;
    e->stats.snapshots_to_disk += d->snap;
}

/* A page file's snapshot onto its listed entry, charged to the tenant (without free pages for it: none). */
static void snapshot_back(fg_engine_t *e, const fg_save_job *j)
{
    if (j->v.state && !fg_prefix_cache_snapshot(e->share.pc, j->key) &&
        fg_prefix_cache_set_snapshot(e->share.pc, e->kv, j->key, j->v.state))
        e->stats.snapshots_from_disk++;
}

/* A page file read: its rows go into a fresh pool page offered to the prefix
 * cache, with the snapshot it carries. */
static void read_finish(fg_engine_t *e, fg_save_job *j)
{
    int i = find(e, j->tenant_ix, j->key);
    if (i < 0)
        return;
    fg_dpage *d = &e->tier.dpages[i];
    if (j->err != FG_OK) {
        if (damage(j->err))
            e->stats.page_files_damaged++;
        unlist(e, i); /* damaged (moved aside) or gone: the page is computed again */
        return;
    }
    d->state = FG_DPAGE_ON_DISK;
    const fg_kv_geometry *geo = &e->tier.expect.geo;
    int32_t tk[FG_KV_PAGE_TOKENS];
    for (int t = 0; t < FG_KV_PAGE_TOKENS; t++)
        tk[t] = fg_sfile_token(&j->v, t);
    if (!e->share.pc)
        return;
    if (fg_prefix_cache_find(e->share.pc, j->key, j->prev, j->tenant_ix, tk, fg_clock_mono_s())) {
        snapshot_back(e, j); /* computed meanwhile; a session may not have left its snapshot */
        return;
    }
    /* may list more page files: the index moves */
    fg_tier_drop_cold(e, 1 + (j->v.state ? fg_kv_store_state_pages(e->kv) : 0));
    if ((i = find(e, j->tenant_ix, j->key)) < 0)
        return;
    d = &e->tier.dpages[i];
    uint8_t *page = fg_kv_store_pages_free(e->kv) ? fg_kv_page_alloc_for(e->kv, j->tenant_ix) : NULL;
    if (!page) {
        d->no_room = true;
        return;
    }
    if (j->v.pages)
        memcpy(page, fg_sfile_page(&j->v, geo, 0), geo->page_bytes);
    else
        for (int t = 0; t < FG_KV_PAGE_TOKENS; t++)
            for (int il = 0; il < geo->n_layer; il++)
                memcpy(page + ((size_t)il * FG_KV_PAGE_TOKENS + (size_t)t) * geo->row_bytes,
                       fg_sfile_row(&j->v, geo, il, t), geo->row_bytes);
    if (fg_engine_page_to_device(e, page, NULL) == FG_OK &&
        fg_prefix_cache_insert(e->share.pc, e->kv, j->key, j->prev, j->tenant_ix, tk, j->at, page,
                               fg_clock_mono_s())) {
        e->stats.pages_from_disk++;
        snapshot_back(e, j); /* without room for it the page is listed alone: no hit ends there */
    } else {
        d->no_room = true;
    }
    fg_kv_page_release(e->kv, page); /* the cache holds it now (or nobody) */
}

/* ---- writer thread ---- */

void fg_ptier_make_room(fg_engine_t *e, int tenant_ix, uint64_t need)
{
    for (;;) {
        pthread_mutex_lock(&e->mu);
        int oldest = -1;
        if (e->tier.disk_bytes + need > e->opt.disk_budget_bytes)
            for (int i = 0; i < e->tier.n_dpages; i++)
                if (e->tier.dpages[i].tenant_ix == tenant_ix && e->tier.dpages[i].state == FG_DPAGE_ON_DISK &&
                    (oldest < 0 || e->tier.dpages[i].born < e->tier.dpages[oldest].born))
                    oldest = i;
        char path[4096];
        bool ok = oldest >= 0 && page_path(e, tenant_ix, e->tier.dpages[oldest].key, FG_PFILE_SUFFIX, path, sizeof path);
        if (oldest >= 0)
            unlist(e, oldest);
        pthread_mutex_unlock(&e->mu);
        if (oldest < 0)
            return;
        if (ok)
            unlink(path);
    }
}

/* The tenant's directory, the page file's path and where a damaged one goes,
 * and the tenant's salt; false when a path is too long. */
static bool job_paths(fg_engine_t *e, const fg_save_job *j, char *dir, char *path, char *aside, uint64_t *salt)
{
    pthread_mutex_lock(&e->mu); /* the tenant table may grow meanwhile */
    bool ok = fg_tier_path(e, j->tenant, NULL, "", dir, 4096) &&
              page_path(e, j->tenant_ix, j->key, FG_PFILE_SUFFIX, path, 4096) &&
              page_path(e, j->tenant_ix, j->key, FG_PFILE_SUFFIX ".damaged", aside, 4096);
    *salt = e->tier.tenants[j->tenant_ix].salt;
    pthread_mutex_unlock(&e->mu);
    return ok;
}

static void read_run(fg_engine_t *e, fg_save_job *j, fg_diag *d)
{
    char dir[4096], path[4096], aside[4096], hex[17];
    uint64_t salt;
    fg_pfile_name(j->key, hex);
    if (!job_paths(e, j, dir, path, aside, &salt)) {
        j->err = fg_diag_set(d, FG_ERR_IO, "page path too long under %s", e->tier.persist_dir);
        return;
    }
    const fg_kv_geometry *geo = &e->tier.expect.geo;
    j->err = fg_sfile_read(path, fg_pfile_size(geo, geo->seq_bytes != 0), &j->buf, &j->len, d);
    if (j->err == FG_OK)
        j->err = fg_sfile_parse(j->buf, j->len, &e->tier.expect, &j->v, d);
    if (j->err == FG_OK)
        j->err = fg_sfile_check_owner(&j->v, j->tenant, hex, d);
    if (j->err == FG_OK)
        j->err = fg_pfile_check(&j->v, geo, j->key, salt, j->at, &j->prev, d);
    if (damage(j->err))
        rename(path, aside); /* counted by the step thread (stats.page_files_damaged) */
}

static void write_run(fg_engine_t *e, fg_save_job *j, fg_diag *d)
{
    char dir[4096], path[4096], aside[4096], hex[17];
    uint64_t salt;
    fg_pfile_name(j->key, hex);
    if (!job_paths(e, j, dir, path, aside, &salt)) {
        j->err = fg_diag_set(d, FG_ERR_IO, "page path too long under %s", e->tier.persist_dir);
        return;
    }
    const fg_kv_geometry *geo = &e->tier.expect.geo;
    uint64_t size = fg_pfile_size(geo, j->state != NULL);
    if (e->opt.disk_budget_bytes) {
        fg_ptier_make_room(e, j->tenant_ix, size);
        pthread_mutex_lock(&e->mu);
        bool over = e->tier.disk_bytes + size > e->opt.disk_budget_bytes;
        pthread_mutex_unlock(&e->mu);
        if (over) {
            j->err = fg_diag_set(d, FG_ERR_DISK_FULL, "page %s: over the disk budget", hex);
            if (j->replace)
                unlink(path); /* the older file is no longer listed nor counted */
            return;
        }
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        j->err = fg_diag_set(d, FG_ERR_IO, "mkdir %s: %s", dir, strerror(errno));
        return;
    }
    char pages_dir[4096];
    if ((size_t)snprintf(pages_dir, sizeof pages_dir, "%s/pages", dir) >= sizeof pages_dir) {
        j->err = fg_diag_set(d, FG_ERR_IO, "page path too long under %s", dir);
        return;
    }
    uint8_t meta[FG_PFILE_META_BYTES];
    fg_pfile_meta(meta, j->key, j->prev, salt);
    fg_sfile_content c = {.model_identity = e->tier.expect.model_identity, .arch = e->tier.expect.arch,
                          .tenant = j->tenant, .geo = geo,
                          .tokens = j->tokens, .n_tokens = FG_KV_PAGE_TOKENS, .meta = meta, .meta_len = sizeof meta,
                          .rows = j->rows, .state = j->state, .first_token = geo->seq_bytes ? j->at : 0};
    j->err = fg_sfile_write_as(pages_dir, hex, FG_PFILE_SUFFIX, &c, d);
    if (j->err != FG_OK && j->replace)
        unlink(path);
    if (j->err == FG_OK) {
        pthread_mutex_lock(&e->mu);
        fg_tier_disk_add(e, j->tenant_ix, (int64_t)size);
        pthread_mutex_unlock(&e->mu);
    }
}
