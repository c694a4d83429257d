/* quota_cache.c: the local copy of every tenant record and API key hash.
 *
 * Authentication and the limits the quota thread needs without a round trip
 * (fail mode, backstop shares, the checks that need no shared state) read
 * this cache. The quota thread refreshes it: every second one GET of
 * flashgate:tenants:version (INCRed by every admin change), and only when it
 * changed (or every 30 s, or after an admin change here) the full load:
 * SMEMBERS flashgate:tenants, then HGETALL {tenant:ID}:config and SMEMBERS
 * {tenant:ID}:keys for every tenant in one pipelined round trip.
 *
 * The cache is replaced whole (built aside, swapped under q->cache_mu), so a
 * lookup sees either the old or the new set. Seeded tenants that Redis does
 * not hold yet are merged in, so a gateway started while Redis is down
 * still knows its configured tenants.
 */
#include "policies/quota_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A cache under construction: tenants with their key hashes. */
typedef struct build_tenant {
    fg_tenant_record rec;
    uint8_t (*hashes)[FG_SHA256_BYTES];
    size_t n_hashes, cap_hashes;
} build_tenant;

typedef struct builder {
    build_tenant *v;
    size_t n, cap;
    bool oom;
} builder;

static build_tenant *build_add(builder *b, const fg_tenant_record *rec)
{
    if (b->oom)
        return NULL;
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 16;
        build_tenant *v = realloc(b->v, cap * sizeof *v);
        if (!v) {
            b->oom = true;
            return NULL;
        }
        b->v = v;
        b->cap = cap;
    }
    build_tenant *t = &b->v[b->n++];
    memset(t, 0, sizeof *t);
    t->rec = *rec;
    return t;
}

static void build_hash(builder *b, build_tenant *t, const uint8_t h[FG_SHA256_BYTES])
{
    if (b->oom || !t)
        return;
    if (t->n_hashes == t->cap_hashes) {
        size_t cap = t->cap_hashes ? 2 * t->cap_hashes : 4;
        uint8_t(*v)[FG_SHA256_BYTES] = realloc(t->hashes, cap * sizeof *v);
        if (!v) {
            b->oom = true;
            return;
        }
        t->hashes = v;
        t->cap_hashes = cap;
    }
    memcpy(t->hashes[t->n_hashes++], h, FG_SHA256_BYTES);
}

static void build_free(builder *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->v[i].hashes);
    free(b->v);
    memset(b, 0, sizeof *b);
}

static bool build_has(const builder *b, const char *id)
{
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->v[i].rec.id, id) == 0)
            return true;
    return false;
}

static int by_id(const void *a, const void *b)
{
    return strcmp(((const build_tenant *)a)->rec.id, ((const build_tenant *)b)->rec.id);
}

/* Adds the seeds not in b. Caller holds q->cache_mu. */
static void build_seeds(struct fg_quota *q, builder *b)
{
    for (fg_qseed *s = q->seeds; s; s = s->next) {
        if (build_has(b, s->rec.id))
            continue;
        build_tenant *t = build_add(b, &s->rec);
        for (size_t k = 0; k < s->n_hashes; k++)
            build_hash(b, t, s->hashes[k]);
    }
}

/* Turns b into a cache (tenants sorted by id); false on NOMEM. */
static bool build_finish(builder *b, fg_qcache *out)
{
    memset(out, 0, sizeof *out);
    if (b->oom)
        return false;
    if (b->n)
        qsort(b->v, b->n, sizeof *b->v, by_id);
    size_t n_keys = 0;
    for (size_t i = 0; i < b->n; i++)
        n_keys += b->v[i].n_hashes;
    out->tenants = malloc((b->n ? b->n : 1) * sizeof *out->tenants);
    out->keys = malloc((n_keys ? n_keys : 1) * sizeof *out->keys);
    if (!out->tenants || !out->keys) {
        fg_qcache_free(out);
        return false;
    }
    for (size_t i = 0; i < b->n; i++) {
        out->tenants[i] = b->v[i].rec;
        for (size_t k = 0; k < b->v[i].n_hashes; k++) {
            memcpy(out->keys[out->n_keys].hash, b->v[i].hashes[k], FG_SHA256_BYTES);
            out->keys[out->n_keys].tenant = (uint32_t)i;
            out->n_keys++;
        }
    }
    out->n_tenants = b->n;
    return true;
}

void fg_qcache_free(fg_qcache *c)
{
    free(c->tenants);
    free(c->keys);
    memset(c, 0, sizeof *c);
}

/* Swaps in a new cache; caller holds q->cache_mu. */
static void swap_in(struct fg_quota *q, fg_qcache *fresh)
{
    fg_qcache old = q->cache;
    q->cache = *fresh;
    fg_qcache_free(&old);
}

void fg_qcache_merge_seeds(struct fg_quota *q)
{
    builder b = {0};
    pthread_mutex_lock(&q->cache_mu);
    for (size_t i = 0; i < q->cache.n_tenants; i++)
        build_add(&b, &q->cache.tenants[i]);
    for (size_t k = 0; k < q->cache.n_keys; k++)
        build_hash(&b, b.oom ? NULL : &b.v[q->cache.keys[k].tenant], q->cache.keys[k].hash);
    build_seeds(q, &b);
    fg_qcache fresh;
    if (build_finish(&b, &fresh))
        swap_in(q, &fresh);
    pthread_mutex_unlock(&q->cache_mu);
    build_free(&b);
}

static bool reply_string(const redisReply *r, char *out, size_t cap)
{
    if (!r)
        return false;
    if (r->type == REDIS_REPLY_NIL) {
        snprintf(out, cap, "0");
        return true;
    }
    if (r->type != REDIS_REPLY_STRING)
        return false;
    snprintf(out, cap, "%.*s", (int)r->len, r->str);
    return true;
}

bool fg_qcache_refresh(struct fg_quota *q, bool force)
{
    if (!fg_qconn_up(q))
        return false;
    char version[sizeof q->cache_version];
    fg_qcmd cmd;
    fg_qcmd_init(&cmd);
    fg_qcmd_str(&cmd, "GET");
    fg_qcmd_str(&cmd, "flashgate:tenants:version");
    if (!force) {
        redisReply *r = fg_qconn_exec1(q, &cmd);
        bool same = r && reply_string(r, version, sizeof version) && strcmp(version, q->cache_version) == 0;
        if (r)
            freeReplyObject(r);
        if (!r || same) {
            fg_qcmd_free(&cmd);
            return r != NULL;
        }
    }

    /* Version and ids in one round trip. */
    fg_qcmd members;
    fg_qcmd_init(&members);
    fg_qcmd_str(&members, "SMEMBERS");
    fg_qcmd_str(&members, "flashgate:tenants");
    fg_qcmd *first[2] = {&cmd, &members};
    redisReply *r0[2];
    size_t got = fg_qconn_exec(q, first, 2, r0);
    fg_qcmd_free(&cmd);
    fg_qcmd_free(&members);
    if (got != 2 || !reply_string(r0[0], version, sizeof version) || r0[1]->type != REDIS_REPLY_ARRAY) {
        for (int i = 0; i < 2; i++)
            if (r0[i])
                freeReplyObject(r0[i]);
        if (got == 2)
            fg_quota_stat_error(q, "tenant cache: unexpected reply to GET/SMEMBERS");
        return got == 2;
    }

    /* Every tenant's config and keys, one pipelined round trip. */
    size_t n = r0[1]->elements;
    fg_qcmd *cmds = calloc(2 * n + 1, sizeof *cmds);
    fg_qcmd **ptrs = calloc(2 * n + 1, sizeof *ptrs);
    redisReply **rep = calloc(2 * n + 1, sizeof *rep);
    bool ok = cmds && ptrs && rep;
    size_t n_valid = 0;
    char (*ids)[FG_NAME_MAX + 1] = ok ? calloc(n + 1, sizeof *ids) : NULL;
    ok = ok && ids;
    for (size_t i = 0; ok && i < n; i++) {
        const redisReply *e = r0[1]->element[i];
        if (e->type != REDIS_REPLY_STRING || !fg_name_valid(e->str, strlen(e->str)))
            continue;
        snprintf(ids[n_valid], sizeof ids[n_valid], "%s", e->str);
        char key[FG_QUOTA_REDIS_KEY_MAX];
        fg_qcmd *h = &cmds[2 * n_valid], *k = &cmds[2 * n_valid + 1];
        fg_qcmd_init(h);
        fg_qcmd_init(k);
        fg_qkey(key, ids[n_valid], "config");
        fg_qcmd_str(h, "HGETALL");
        fg_qcmd_str(h, key);
        fg_qkey(key, ids[n_valid], "keys");
        fg_qcmd_str(k, "SMEMBERS");
        fg_qcmd_str(k, key);
        ptrs[2 * n_valid] = h;
        ptrs[2 * n_valid + 1] = k;
        n_valid++;
    }
    freeReplyObject(r0[0]);
    freeReplyObject(r0[1]);
    size_t n_cmds = 2 * n_valid;
    for (size_t at = 0; ok && at < n_cmds; at += 2 * FG_QUOTA_BATCH_MAX) {
        size_t m = n_cmds - at < 2 * FG_QUOTA_BATCH_MAX ? n_cmds - at : 2 * FG_QUOTA_BATCH_MAX;
        ok = fg_qconn_exec(q, ptrs + at, m, rep + at) == m;
    }

    builder b = {0};
    for (size_t i = 0; ok && i < n_valid; i++) {
        const redisReply *h = rep[2 * i], *k = rep[2 * i + 1];
        if (h->type != REDIS_REPLY_ARRAY || h->elements == 0)
            continue; /* in the index but deleted meanwhile */
        fg_tenant_record rec;
        fg_qconfig_parse(h, ids[i], &rec);
        build_tenant *t = build_add(&b, &rec);
        for (size_t j = 0; k->type == REDIS_REPLY_ARRAY && j < k->elements; j++) {
            uint8_t hash[FG_SHA256_BYTES];
            if (k->element[j]->type == REDIS_REPLY_STRING && fg_sha256_from_hex(k->element[j]->str, hash))
                build_hash(&b, t, hash);
        }
    }
    for (size_t i = 0; rep && i < n_cmds; i++)
        if (rep[i])
            freeReplyObject(rep[i]);
    for (size_t i = 0; cmds && i < n_cmds; i++)
        fg_qcmd_free(&cmds[i]);
    free(cmds);
    free(ptrs);
    free(rep);
    free(ids);
    if (!ok) {
        build_free(&b);
        if (fg_qconn_up(q))
            fg_quota_stat_error(q, "tenant cache: out of memory loading tenants");
        return fg_qconn_up(q);
    }

    pthread_mutex_lock(&q->cache_mu);
    build_seeds(q, &b);
    fg_qcache fresh;
    bool built = build_finish(&b, &fresh);
    if (built)
        swap_in(q, &fresh);
    pthread_mutex_unlock(&q->cache_mu);
    build_free(&b);
    if (!built) {
        fg_quota_stat_error(q, "tenant cache: out of memory");
        return true;
    }
    snprintf(q->cache_version, sizeof q->cache_version, "%s", version);
    q->next_full_reload_us = fg_clock_mono_us() + FG_QUOTA_FULL_RELOAD_MS * 1000LL;
    return true;
}

static int record_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const fg_tenant_record *)elem)->id);
}

bool fg_qcache_get(struct fg_quota *q, const char *id, fg_tenant_record *out)
{
    pthread_mutex_lock(&q->cache_mu);
    const fg_tenant_record *t =
        q->cache.n_tenants ? bsearch(id, q->cache.tenants, q->cache.n_tenants, sizeof *q->cache.tenants, record_cmp)
                           : NULL;
    if (t && out)
        *out = *t;
    pthread_mutex_unlock(&q->cache_mu);
    return t != NULL;
}
