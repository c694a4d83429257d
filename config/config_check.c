/* config_check.c: the rules a configuration must keep, and the wording of
 * each broken one.
 *
 * Design: per-key rules (type ranges, allowed names, non-empty) come from the
 * schema table through fg_cfg_check(), so the loader, the environment and
 * fg_config_validate() apply the same ones with the same words. Rules that
 * involve the tenant list or more than one key are written out here once.
 * Every message names the key (or variable); none contains a secret: api and
 * admin keys are named by tenant and position. Text that came from a file or
 * the environment goes through fg_cfg_quote() before it reaches a message.
 */
#include "config/config_schema.h"

#include "config/base/name.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- wording helpers ---- */

void fg_cfg_quote(char *out, size_t cap, const char *in)
{
    if (cap == 0)
        return;
    const size_t n = strlen(in);
    const bool cut = n >= cap;
    const size_t keep = !cut ? n : (cap > 4 ? cap - 4 : cap - 1);
    for (size_t i = 0; i < keep; i++) {
        const unsigned char ch = (unsigned char)in[i];
        out[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    size_t o = keep;
    if (cut && cap > 4) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}

/* Optimal-string-alignment distance: insertions, deletions, replacements and
 * swaps of two neighbours each cost 1. Words longer than the buffers get a
 * distance no threshold accepts. */
#define DIST_MAXLEN 95
static size_t edit_distance(const char *a, const char *b)
{
    const size_t la = strlen(a), lb = strlen(b);
    if (la > DIST_MAXLEN || lb > DIST_MAXLEN)
        return SIZE_MAX;
    size_t rows[3][DIST_MAXLEN + 1]; /* i-2, i-1, i */
    size_t *pp = rows[0], *prev = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            const size_t cost = a[i - 1] != b[j - 1];
            size_t v = prev[j - 1] + cost;
            if (prev[j] + 1 < v)
                v = prev[j] + 1;
            if (cur[j - 1] + 1 < v)
                v = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < v)
                v = pp[j - 2] + 1;
            cur[j] = v;
        }
        size_t *t = pp;
        pp = prev;
        prev = cur;
        cur = t;
    }
    return prev[lb];
}

void fg_cfg_suggest_init(fg_cfg_suggest *s, const char *word, char sep)
{
    memset(s, 0, sizeof *s);
    s->word = word;
    s->sep = sep;
    s->best_dist = SIZE_MAX;
}

void fg_cfg_suggest_offer(fg_cfg_suggest *s, const char *candidate)
{
    /* Close: about one edit per six characters, at least one. A word of
     * "server.foo" is three edits from 'server.host' and gets no answer. */
    const size_t limit = 1 + strlen(s->word) / 6;
    const size_t dist = edit_distance(s->word, candidate);
    if (dist <= limit && dist < s->best_dist) {
        s->best_dist = dist;
        fg_cfg_quote(s->best, sizeof s->best, candidate);
    }
    const char *leaf = strchr(candidate, s->sep);
    const size_t lw = strlen(s->word);
    /* A key cut short ('sessions.max_per_conn'): the word is a prefix of
     * the candidate and reaches at least two characters into its leaf. */
    const size_t leaf_start = leaf ? (size_t)(leaf - candidate) + 1 : 0;
    if (!s->prefix_best[0] && lw >= leaf_start + 2 && lw < strlen(candidate) &&
        strncmp(candidate, s->word, lw) == 0)
        fg_cfg_quote(s->prefix_best, sizeof s->prefix_best, candidate);
    /* The right key under the wrong section: the word ends in sep + leaf. */
    if (leaf && !s->leaf_best[0]) {
        const size_t ll = strlen(leaf);
        if (lw > ll && strcmp(s->word + lw - ll, leaf) == 0)
            fg_cfg_quote(s->leaf_best, sizeof s->leaf_best, candidate);
    }
}

const char *fg_cfg_suggest_result(const fg_cfg_suggest *s)
{
    /* one edit beats everything; then a cut-short key, then more edits,
     * then the same key under another section */
    if (s->best[0] && s->best_dist <= 1)
        return s->best;
    if (s->prefix_best[0])
        return s->prefix_best;
    if (s->best[0])
        return s->best;
    return s->leaf_best[0] ? s->leaf_best : NULL;
}

/* ---- per-key rules ---- */

fg_err fg_cfg_parse_enum(const fg_cfg_key *k, const char *where, const char *text, int *out, fg_diag *d)
{
    char allowed[128] = "";
    size_t used = 0;
    for (int i = 0; k->names[i]; i++) {
        if (strcmp(text, k->names[i]) == 0) {
            *out = i;
            return FG_OK;
        }
        const int w = snprintf(allowed + used, sizeof allowed - used, "%s%s", i ? ", " : "", k->names[i]);
        if (w > 0 && (size_t)w < sizeof allowed - used)
            used += (size_t)w;
    }
    char q[48];
    fg_cfg_quote(q, sizeof q, text);
    return fg_diag_set(d, FG_ERR_CONFIG, "%s: '%s' is not allowed; use one of %s", where, q, allowed);
}

fg_err fg_cfg_check(const fg_cfg_key *k, const fg_cfg_value *v, const char *where, fg_diag *d)
{
    switch (k->type) {
    case FG_CFG_BOOL:
    case FG_CFG_STRLIST: return FG_OK;
    case FG_CFG_INT:
        if (v->i < k->min_int || v->i > k->max_int)
            return fg_diag_set(d, FG_ERR_CONFIG, "%s: %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]",
                               where, v->i, k->min_int, k->max_int);
        return FG_OK;
    case FG_CFG_DOUBLE:
        /* written so that NaN fails too */
        if (!isfinite(v->d) || !(v->d >= k->min_double && v->d <= k->max_double))
            return fg_diag_set(d, FG_ERR_CONFIG, "%s: %.15g is out of range [%.15g, %.15g]", where, v->d,
                               k->min_double, k->max_double);
        return FG_OK;
    case FG_CFG_STRING:
        if (!v->s)
            return fg_diag_set(d, FG_ERR_CONFIG, "%s is not set", where);
        if ((k->flags & FG_CFG_NONEMPTY) && !v->s[0])
            return fg_diag_set(d, FG_ERR_CONFIG, "%s must not be empty", where);
        return FG_OK;
    case FG_CFG_ENUM: {
        int n = 0;
        while (k->names[n])
            n++;
        if (v->e < 0 || v->e >= n)
            return fg_diag_set(d, FG_ERR_CONFIG, "%s: %d is not a valid value", where, v->e);
        return FG_OK;
    }
    }
    return fg_diag_set(d, FG_ERR_CONFIG, "%s: unknown value type", where);
}

/* ---- tenants ---- */

/* Why a key (api, admin or dashboard) is unusable, or NULL. Keys travel in
 * HTTP headers, hence printable ASCII without spaces. */
static const char *key_problem(const char *key)
{
    const size_t n = strlen(key);
    if (n < FG_CFG_API_KEY_MIN)
        return "is shorter than 16 characters";
    if (n > FG_CFG_API_KEY_MAX)
        return "is longer than 256 characters";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)key[i] <= 0x20 || (unsigned char)key[i] >= 0x7f)
            return "contains a space or a character outside printable ASCII";
    return NULL;
}

/* One string of the tenant list, for finding duplicates by sorting. */
typedef struct tenant_str {
    const char *s;
    size_t tenant, index;
} tenant_str;

static int tenant_str_cmp(const void *pa, const void *pb)
{
    const tenant_str *a = pa, *b = pb;
    const int c = strcmp(a->s, b->s);
    if (c)
        return c;
    if (a->tenant != b->tenant)
        return a->tenant < b->tenant ? -1 : 1;
    return a->index < b->index ? -1 : (a->index > b->index);
}

/* Of all equal neighbours in the sorted array, the pair whose later member
 * comes first in the file, so that the report does not depend on the sort:
 * returns the index of that later member in v, or SIZE_MAX. */
static size_t first_duplicate(const tenant_str *v, size_t n)
{
    size_t best = SIZE_MAX;
    for (size_t i = 1; i < n; i++) {
        if (strcmp(v[i - 1].s, v[i].s) != 0)
            continue;
        if (best == SIZE_MAX || v[i].tenant < v[best].tenant ||
            (v[i].tenant == v[best].tenant && v[i].index < v[best].index))
            best = i;
    }
    return best;
}

static fg_err check_tenant(const fg_config_tenant *t, size_t ti, fg_diag *d)
{
    char where[64];
    if (!t->id)
        return fg_diag_set(d, FG_ERR_CONFIG, "tenants[%zu]: missing required key 'id'", ti);
    if (!fg_name_valid(t->id, strlen(t->id))) {
        char q[80];
        fg_cfg_quote(q, sizeof q, t->id);
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "tenants[%zu].id: '%s' is not 1 to 64 characters of A-Z a-z 0-9 _ -", ti, q);
    }
    for (size_t i = 0; i < fg_cfg_n_tenant_keys; i++) {
        const fg_cfg_key *k = &fg_cfg_tenant_keys[i];
        snprintf(where, sizeof where, "tenants[%zu].%s", ti, k->path);
        const fg_cfg_value v = fg_cfg_read(k, t);
        const fg_err e = fg_cfg_check(k, &v, where, d);
        if (e)
            return e;
    }
    for (size_t i = 0; i < t->api_keys.count; i++) {
        const char *why = key_problem(t->api_keys.items[i]);
        if (why)
            return fg_diag_set(d, FG_ERR_CONFIG, "tenants[%zu].api_keys[%zu]: an api key of tenant '%s' %s",
                               ti, i, t->id, why);
    }
    return FG_OK;
}

fg_err fg_cfg_check_tenants(const fg_config_tenant *t, size_t n, fg_diag *d)
{
    if (n == 0 || !t)
        return fg_diag_set(d, FG_ERR_CONFIG, "tenants: the list is empty, so no client could connect");
    size_t n_keys = 0;
    for (size_t i = 0; i < n; i++) {
        const fg_err e = check_tenant(&t[i], i, d);
        if (e)
            return e;
        n_keys += t[i].api_keys.count;
    }

    tenant_str *v = malloc((n > n_keys ? n : n_keys) * sizeof *v);
    if (!v)
        return fg_diag_set(d, FG_ERR_NOMEM, "tenants: out of memory checking %zu tenants", n);
    fg_err e = FG_OK;

    for (size_t i = 0; i < n; i++)
        v[i] = (tenant_str){t[i].id, i, 0};
    qsort(v, n, sizeof *v, tenant_str_cmp);
    size_t dup = first_duplicate(v, n);
    if (dup != SIZE_MAX) {
        e = fg_diag_set(d, FG_ERR_CONFIG, "tenants[%zu].id: duplicate tenant id '%s' (also tenants[%zu])",
                        v[dup].tenant, t[v[dup].tenant].id, v[dup - 1].tenant);
        goto out;
    }

    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < t[i].api_keys.count; j++)
            v[m++] = (tenant_str){t[i].api_keys.items[j], i, j};
    qsort(v, m, sizeof *v, tenant_str_cmp);
    dup = first_duplicate(v, m);
    if (dup != SIZE_MAX) {
        const tenant_str *a = &v[dup - 1], *b = &v[dup];
        if (a->tenant == b->tenant)
            e = fg_diag_set(d, FG_ERR_CONFIG, "tenants[%zu].api_keys[%zu]: tenant '%s' lists the same api key twice",
                            b->tenant, b->index, t[b->tenant].id);
        else
            e = fg_diag_set(d, FG_ERR_CONFIG,
                            "tenants[%zu].api_keys[%zu]: an api key of tenant '%s' is also an api key of tenant '%s'",
                            b->tenant, b->index, t[b->tenant].id, t[a->tenant].id);
    }
out:
    free(v);
    return e;
}

/* ---- rules between keys ---- */

/* host:port, [v6]:port or an absolute unix socket path. */
static bool redis_address_ok(const char *a)
{
    if (!strcmp(a, "off"))
        return true; /* no Redis: the config's tenants and keys, no quotas */
    if (a[0] == '\0' || a[0] == '/')
        return true;
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a || !colon[1])
        return false;
    if (a[0] == '[') {
        if (colon[-1] != ']' || colon - a < 3)
            return false;
    } else if (memchr(a, ':', (size_t)(colon - a))) {
        return false; /* a bare IPv6 address: the port would be ambiguous */
    }
    long port = 0;
    for (const char *p = colon + 1; *p; p++) {
        if (*p < '0' || *p > '9' || port > 65535)
            return false;
        port = port * 10 + (*p - '0');
    }
    return port >= 1 && port <= 65535;
}

/* redis.mode against redis.address, redis.nodes and redis.master_name. */
static fg_err check_redis_mode(const fg_config_redis *r, fg_diag *d)
{
    if (r->mode == FG_CONFIG_REDIS_SINGLE) {
        if (r->nodes.count)
            return fg_diag_set(d, FG_ERR_CONFIG,
                               "redis.nodes is for redis.mode sentinel or cluster; with single, set redis.address");
        return FG_OK;
    }
    const char *mode = r->mode == FG_CONFIG_REDIS_SENTINEL ? "sentinel" : "cluster";
    if (r->address[0])
        return fg_diag_set(d, FG_ERR_CONFIG, "redis.address is for redis.mode single; with %s, list redis.nodes",
                           mode);
    if (r->nodes.count == 0 || r->nodes.count > 64)
        return fg_diag_set(d, FG_ERR_CONFIG, "redis.mode %s needs 1 to 64 redis.nodes (%s), %zu given", mode,
                           r->mode == FG_CONFIG_REDIS_SENTINEL ? "the sentinels" : "seed nodes", r->nodes.count);
    for (size_t i = 0; i < r->nodes.count; i++) {
        const char *a = r->nodes.items[i];
        if (!a[0] || a[0] == '/' || !strcmp(a, "off") || strlen(a) > 270 || !redis_address_ok(a))
            return fg_diag_set(d, FG_ERR_CONFIG, "redis.nodes[%zu] must be host:port or [ipv6]:port", i);
    }
    if (r->mode == FG_CONFIG_REDIS_SENTINEL) {
        size_t n = strlen(r->master_name);
        bool ok = n > 0 && n <= 200;
        for (size_t i = 0; ok && i < n; i++)
            ok = (unsigned char)r->master_name[i] > ' ' && (unsigned char)r->master_name[i] <= '~';
        if (!ok)
            return fg_diag_set(d, FG_ERR_CONFIG,
                               "redis.mode sentinel needs redis.master_name: 1 to 200 printable characters, no spaces");
    }
    return FG_OK;
}

/* The tenant one of whose api keys is key, or NULL. Plain comparison: this
 * runs on the configuration, not on what a client sent. */
static const fg_config_tenant *tenant_with_key(const fg_config *c, const char *key)
{
    for (size_t t = 0; t < c->n_tenants; t++)
        for (size_t i = 0; i < c->tenants[t].api_keys.count; i++)
            if (strcmp(c->tenants[t].api_keys.items[i], key) == 0)
                return &c->tenants[t];
    return NULL;
}

static fg_err check_operator_key(const fg_config *c, const char *name, const char *key, fg_diag *d)
{
    if (!key[0])
        return FG_OK;
    const char *why = key_problem(key);
    if (why)
        return fg_diag_set(d, FG_ERR_CONFIG, "%s: the key %s", name, why);
    const fg_config_tenant *t = tenant_with_key(c, key);
    if (t)
        return fg_diag_set(d, FG_ERR_CONFIG, "%s is also an api key of tenant '%s'; use a separate key", name,
                           t->id);
    return FG_OK;
}

/* The topology rules that need no model; the ones that do (no more ranks
 * than experts, replicas evening the ranks out, experts_per_rank matching,
 * a receive capacity of at least one token's rows) run when the engine
 * opens (engine/ep/ep_shard.h, engine/ep/moe_ep.h). */
static fg_err check_topology(const fg_config *c, fg_diag *d)
{
    const fg_config_topology *t = &c->topology;
    const int64_t per_node = t->ranks_per_node ? t->ranks_per_node : t->ranks;
    if (t->ranks % per_node != 0)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "topology.ranks_per_node (%" PRId64 ") does not divide topology.ranks (%" PRId64
                           "): every node runs as many ranks",
                           t->ranks_per_node, t->ranks);
    if (t->node >= t->ranks / per_node)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "topology.node (%" PRId64 ") is outside the %" PRId64 " nodes that topology.ranks (%" PRId64
                           ") / topology.ranks_per_node (%" PRId64 ") make",
                           t->node, t->ranks / per_node, t->ranks, per_node);
    /* With replicas every rank holds experts_per_rank slots, so the experts are slots * ranks - replicas, and
     * every rank must own at least one. */
    if (t->experts_per_rank > 0 && t->redundant_experts > 0 &&
        t->experts_per_rank * t->ranks - t->redundant_experts < t->ranks)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "topology.experts_per_rank (%" PRId64 ") * topology.ranks (%" PRId64 ") = %" PRId64
                           " slots leave fewer than one owned expert per rank next to topology.redundant_experts "
                           "(%" PRId64 ")",
                           t->experts_per_rank, t->ranks, t->experts_per_rank * t->ranks, t->redundant_experts);
    if (t->transport == FG_CONFIG_TRANSPORT_INPROC && per_node != t->ranks)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "topology.transport inproc runs every rank in this process: topology.ranks_per_node "
                           "(%" PRId64 ") must be 0 or topology.ranks (%" PRId64 "); use nccl across nodes",
                           t->ranks_per_node, t->ranks);
    if (t->transport == FG_CONFIG_TRANSPORT_NCCL) {
#ifndef FG_HAVE_NCCL
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "topology.transport is nccl, but this build has no NCCL (CUDA and NCCL were not found when "
                           "it was built); use inproc or a CUDA build");
#endif
        /* One node makes the NCCL id itself; several exchange it through a Redis they all reach. */
        if (per_node < t->ranks && strcmp(c->redis.address, "off") == 0)
            return fg_diag_set(d, FG_ERR_CONFIG,
                               "topology.transport nccl needs Redis to exchange the NCCL id; redis.address is off");
        if (per_node < t->ranks && c->redis.mode != FG_CONFIG_REDIS_SINGLE)
            return fg_diag_set(d, FG_ERR_CONFIG,
                               "topology.transport nccl over several nodes exchanges the NCCL id through one Redis "
                               "server: it needs redis.mode single with redis.address set");
        if (per_node < t->ranks && !*c->redis.address)
            return fg_diag_set(d, FG_ERR_CONFIG,
                               "topology.transport nccl over %" PRId64 " nodes needs Redis to exchange the NCCL id, "
                               "one every node reaches: set redis.address (empty starts a Redis of this process's own)",
                               t->ranks / per_node);
    }
    return FG_OK;
}

fg_err fg_config_validate(const fg_config *c, fg_diag *d)
{
    fg_err e;
    for (size_t i = 0; i < fg_cfg_n_keys; i++) {
        const fg_cfg_value v = fg_cfg_read(&fg_cfg_keys[i], c);
        if ((e = fg_cfg_check(&fg_cfg_keys[i], &v, fg_cfg_keys[i].path, d)))
            return e;
    }
    if ((e = fg_cfg_check_tenants(c->tenants, c->n_tenants, d)))
        return e;

    if (c->model.prefill_chunk > c->model.max_batch_tokens)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "model.prefill_chunk (%" PRId64 ") exceeds model.max_batch_tokens (%" PRId64
                           "): a chunk must fit in one engine step",
                           c->model.prefill_chunk, c->model.max_batch_tokens);
    if (c->model.max_context > 0 && c->sessions.default_max_output_tokens >= c->model.max_context)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "sessions.default_max_output_tokens (%" PRId64 ") must be below model.max_context (%" PRId64
                           "), which also holds the prompt",
                           c->sessions.default_max_output_tokens, c->model.max_context);
    if (c->sessions.output_buffer_hard_bytes < c->sessions.output_buffer_bytes ||
        c->sessions.output_buffer_hard_bytes < c->sessions.resume_buffer_bytes)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "sessions.output_buffer_hard_bytes (%" PRId64 ") is below sessions.output_buffer_bytes (%" PRId64
                           ") or sessions.resume_buffer_bytes (%" PRId64 "): a client that reads would be closed",
                           c->sessions.output_buffer_hard_bytes, c->sessions.output_buffer_bytes,
                           c->sessions.resume_buffer_bytes);
    if (c->sessions.max_instructions_bytes > c->limits.max_frame_bytes)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "sessions.max_instructions_bytes (%" PRId64 ") exceeds limits.max_frame_bytes (%" PRId64
                           "): instructions arrive in one message",
                           c->sessions.max_instructions_bytes, c->limits.max_frame_bytes);
    /* The instructions are part of the settings kept in the session file, whose owner record the
     * engine limits to 64 KiB; 4 KiB stay for the other settings and the history's tokens. */
    if (c->sessions.max_instructions_bytes > FG_CONFIG_MAX_INSTRUCTIONS_BYTES)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "sessions.max_instructions_bytes (%" PRId64 ") exceeds %d: a session's settings must fit "
                           "its session file",
                           c->sessions.max_instructions_bytes, FG_CONFIG_MAX_INSTRUCTIONS_BYTES);

    if ((e = check_operator_key(c, "auth.admin_key", c->auth.admin_key, d)) ||
        (e = check_operator_key(c, "auth.dashboard_key", c->auth.dashboard_key, d)))
        return e;
    if (c->auth.admin_key[0] && strcmp(c->auth.admin_key, c->auth.dashboard_key) == 0)
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "auth.dashboard_key equals auth.admin_key; the dashboard key must not open the admin API");

    if ((e = check_topology(c, d)))
        return e;
    if (!c->server.tls_cert_file[0] != !c->server.tls_key_file[0])
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "server.tls_cert_file and server.tls_key_file go together: set both for TLS, or neither");

    if (*c->cluster.advertise_url) {
        if (!strcmp(c->redis.address, "off"))
            return fg_diag_set(d, FG_ERR_CONFIG,
                               "cluster.advertise_url needs Redis for the session directory; redis.address is off");
        if (!fg_name_valid(c->cluster.instance_id, strlen(c->cluster.instance_id)))
            return fg_diag_set(d, FG_ERR_CONFIG,
                               "cluster.instance_id must be 1 to 64 of A-Z a-z 0-9 _ - when cluster.advertise_url is set");
        for (const char *p = c->cluster.advertise_url; *p; p++)
            if ((unsigned char)*p <= ' ' || (unsigned char)*p > '~' || p - c->cluster.advertise_url >= 254)
                return fg_diag_set(d, FG_ERR_CONFIG,
                                   "cluster.advertise_url must be up to 254 printable characters without spaces");
    }
    if (!redis_address_ok(c->redis.address))
        return fg_diag_set(d, FG_ERR_CONFIG,
                           "redis.address must be host:port, [ipv6]:port, an absolute unix socket path, off, or empty");
    return check_redis_mode(&c->redis, d);
}
