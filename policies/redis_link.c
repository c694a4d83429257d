/* redis_link.c: see redis_link.h.
 *
 * The link keeps the cluster's slot map and one context per master (single
 * and sentinel use node 0 only). A batch is routed command by command, every
 * node's output written before any reply is read (so the round trips to the
 * masters overlap), then replies are read in the order each node got its
 * commands. Redirected commands form the next round; a MOVED means the map
 * is stale, so it is read again once the batch is done (one CLUSTER SLOTS).
 */
#include "policies/redis_link.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define MASTER_NAME_MAX 200

struct fg_rlink {
    fg_rlink_mode mode;
    char (*seeds)[FG_RLINK_ADDR_MAX + 1];
    size_t n_seeds, next_seed;            /* next_seed: where the next connect starts (rotates) */
    char master_name[MASTER_NAME_MAX + 1];
    struct timeval tv;
    bool up;
    fg_rlink_slotmap map;                 /* single and sentinel: addr[0] only */
    redisContext *ctx[FG_RLINK_NODES_MAX];  /* ctx[i] talks to map.addr[i]; NULL until needed */
    bool map_stale;                       /* a MOVED was seen: read the map again */
    fg_rlink_stats stats;
    /* exec scratch, grown to the largest batch */
    int *target;                          /* node of command i this round */
    uint8_t *ask, *hops;
    size_t *pend;
    size_t scratch_cap;
};

/* ---- parsing ---- */

static uint16_t crc16_xmodem(const char *s, size_t n)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)((uint8_t)s[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

int fg_rlink_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return crc16_xmodem(open + 1, (size_t)(close - open - 1)) & (FG_RLINK_SLOTS - 1);
    }
    return crc16_xmodem(key, len) & (FG_RLINK_SLOTS - 1);
}

/* Digits only, value in lo..hi. */
static bool parse_uint(const char *s, size_t n, long lo, long hi, long *out)
{
    if (n == 0 || n > 9)
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* "host:port" with printable host bytes (the host may be empty: "the node you asked"). */
static bool addr_ok(const char *s, size_t n)
{
    if (n == 0 || n > FG_RLINK_ADDR_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] > '~')
            return false;
    const char *colon = NULL;
    for (size_t i = n; i-- > 0;)
        if (s[i] == ':') {
            colon = s + i;
            break;
        }
    long port;
    return colon && parse_uint(colon + 1, n - (size_t)(colon - s) - 1, 1, 65535, &port);
}

bool fg_rlink_parse_redirect(const char *err, size_t len, fg_rlink_redirect *out)
{
    if (!err)
        return false;
    size_t skip;
    if (len > 6 && memcmp(err, "MOVED ", 6) == 0) {
        out->ask = false;
        skip = 6;
    } else if (len > 4 && memcmp(err, "ASK ", 4) == 0) {
        out->ask = true;
        skip = 4;
    } else {
        return false;
    }
    const char *p = err + skip, *end = err + len;
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    long slot;
    if (!sp || !parse_uint(p, (size_t)(sp - p), 0, FG_RLINK_SLOTS - 1, &slot))
        return false;
    const char *a = sp + 1;
    if (!addr_ok(a, (size_t)(end - a)))
        return false;
    out->slot = (int)slot;
    memcpy(out->addr, a, (size_t)(end - a));
    out->addr[end - a] = '\0';
    return true;
}

/* host and port into "host:port" ("[host]:port" for IPv6); false when it does not fit. */
static bool join_addr(char *out, size_t cap, const char *host, size_t hlen, long long port)
{
    if (hlen == 0 || port <= 0 || port > 65535)
        return false;
    for (size_t i = 0; i < hlen; i++)
        if ((unsigned char)host[i] <= ' ' || (unsigned char)host[i] > '~')
            return false;
    bool v6 = memchr(host, ':', hlen) != NULL && host[0] != '[';
    int n = snprintf(out, cap, v6 ? "[%.*s]:%lld" : "%.*s:%lld", (int)(hlen > 300 ? 300 : hlen), host, port);
    return n > 0 && (size_t)n < cap && hlen <= 300 && (size_t)n <= FG_RLINK_ADDR_MAX;
}

int fg_rlink_slotmap_node(fg_rlink_slotmap *m, const char *addr)
{
    for (size_t i = 0; i < m->n_addr; i++)
        if (strcmp(m->addr[i], addr) == 0)
            return (int)i;
    if (m->n_addr == FG_RLINK_NODES_MAX || strlen(addr) > FG_RLINK_ADDR_MAX)
        return -1;
    snprintf(m->addr[m->n_addr], sizeof m->addr[0], "%s", addr);
    return (int)m->n_addr++;
}

static bool fail(char *why, size_t cap, const char *msg)
{
    if (why && cap)
        snprintf(why, cap, "%s", msg);
    return false;
}

bool fg_rlink_parse_slots(const redisReply *r, const char *asked_host, fg_rlink_slotmap *m, char *why, size_t cap)
{
    memset(m->owner, FG_RLINK_NO_OWNER, sizeof m->owner);
    m->n_addr = 0;
    if (r && r->type == REDIS_REPLY_ERROR) {
        snprintf(why, cap, "CLUSTER SLOTS: %.100s", r->str);
        return false;
    }
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return fail(why, cap, "CLUSTER SLOTS: not an array");
    if (r->elements == 0)
        return fail(why, cap, "CLUSTER SLOTS: no slot is assigned yet");
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY)
            return fail(why, cap, "CLUSTER SLOTS: malformed slot range");
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        if (lo < 0 || hi < lo || hi >= FG_RLINK_SLOTS)
            return fail(why, cap, "CLUSTER SLOTS: slot range outside 0..16383");
        const redisReply *mr = e->element[2];
        if (mr->elements < 2 || mr->element[0]->type != REDIS_REPLY_STRING ||
            mr->element[1]->type != REDIS_REPLY_INTEGER)
            return fail(why, cap, "CLUSTER SLOTS: malformed master");
        const char *host = mr->element[0]->str;
        size_t hlen = mr->element[0]->len;
        if (hlen == 0 || (hlen == 1 && host[0] == '?')) { /* the node does not know its own address */
            host = asked_host ? asked_host : "";
            hlen = strlen(host);
        }
        char addr[FG_RLINK_ADDR_MAX + 1];
        if (!join_addr(addr, sizeof addr, host, hlen, mr->element[1]->integer))
            return fail(why, cap, "CLUSTER SLOTS: bad master address");
        int node = fg_rlink_slotmap_node(m, addr);
        if (node < 0)
            return fail(why, cap, "CLUSTER SLOTS: more masters than flashgate supports (64)");
        memset(m->owner + lo, node, (size_t)(hi - lo + 1));
    }
    return true;
}

bool fg_rlink_parse_master(const redisReply *r, char *addr, size_t cap)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return false;
    long port;
    if (!parse_uint(r->element[1]->str, r->element[1]->len, 1, 65535, &port))
        return false;
    return join_addr(addr, cap, r->element[0]->str, r->element[0]->len, port);
}

bool fg_rlink_parse_role_master(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_STRING &&
           r->element[0]->len == 6 && memcmp(r->element[0]->str, "master", 6) == 0;
}

/* ---- sockets ---- */

/* The host part of "host:port" / "[v6]:port" into host (cap bytes); the port, or -1 for a unix path. */
static int split_addr(const char *addr, char *host, size_t cap)
{
    if (addr[0] == '/') {
        snprintf(host, cap, "%s", addr);
        return -1;
    }
    const char *colon = strrchr(addr, ':');
    size_t hlen = colon ? (size_t)(colon - addr) : strlen(addr);
    const char *h = addr;
    if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']') {
        h = addr + 1;
        hlen -= 2;
    }
    if (hlen >= cap)
        hlen = cap - 1;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    if (!colon)
        return 6379;
    long p;
    if (!parse_uint(colon + 1, strlen(colon + 1), 1, 65535, &p))
        return 0;
    return (int)p;
}

/* A blocking context with both timeouts, or NULL with why. */
static redisContext *open_ctx(const fg_rlink_t *l, const char *addr, char *why, size_t cap)
{
    char host[FG_RLINK_ADDR_MAX + 1];
    int port = split_addr(addr, host, sizeof host);
    if (port == 0 || !host[0]) {
        snprintf(why, cap, "%.80s: not host:port", addr);
        return NULL;
    }
    redisContext *c = port < 0 ? redisConnectUnixWithTimeout(host, l->tv) : redisConnectWithTimeout(host, port, l->tv);
    if (!c || c->err) {
        snprintf(why, cap, "connect %.80s: %.80s", addr, c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, l->tv) != REDIS_OK) {
        snprintf(why, cap, "%.80s: cannot set the command timeout", addr);
        redisFree(c);
        return NULL;
    }
    if (port > 0)
        redisEnableKeepAlive(c);
    return c;
}

/* ---- life cycle ---- */

fg_err fg_rlink_create(const fg_rlink_options *o, fg_rlink_t **out, fg_diag *d)
{
    *out = NULL;
    if (!o || o->n_addrs == 0 || !o->addrs)
        return fg_diag_set(d, FG_ERR_INVALID_ARG, "redis: no address given");
    if (o->n_addrs > FG_RLINK_NODES_MAX)
        return fg_diag_set(d, FG_ERR_INVALID_ARG, "redis: %zu addresses, at most %d", o->n_addrs, FG_RLINK_NODES_MAX);
    if (o->mode == FG_RLINK_SINGLE && o->n_addrs != 1)
        return fg_diag_set(d, FG_ERR_INVALID_ARG, "redis: a single server takes one address, got %zu", o->n_addrs);
    if (o->timeout_ms <= 0)
        return fg_diag_set(d, FG_ERR_INVALID_ARG, "redis: timeout_ms must be positive");
    if (o->mode == FG_RLINK_SENTINEL) {
        size_t n = o->master_name ? strlen(o->master_name) : 0;
        if (n == 0 || n > MASTER_NAME_MAX)
            return fg_diag_set(d, FG_ERR_INVALID_ARG, "redis: sentinel needs a master name of 1 to %d bytes",
                               MASTER_NAME_MAX);
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)o->master_name[i] <= ' ' || (unsigned char)o->master_name[i] > '~')
                return fg_diag_set(d, FG_ERR_INVALID_ARG, "redis: the sentinel master name has a space or control byte");
    }
    for (size_t i = 0; i < o->n_addrs; i++) {
        const char *a = o->addrs[i];
        if (!a || !a[0] || strlen(a) > FG_RLINK_ADDR_MAX)
            return fg_diag_set(d, FG_ERR_INVALID_ARG, "redis: address %zu is empty or longer than %d bytes", i,
                               FG_RLINK_ADDR_MAX);
        if (o->mode == FG_RLINK_CLUSTER && a[0] == '/')
            return fg_diag_set(d, FG_ERR_INVALID_ARG, "redis: cluster nodes are host:port, not %s", a);
    }
    fg_rlink_t *l = calloc(1, sizeof *l);
    if (!l || !(l->seeds = calloc(o->n_addrs, sizeof *l->seeds))) {
        free(l);
        return fg_diag_set(d, FG_ERR_NOMEM, "redis: out of memory");
    }
    l->mode = o->mode;
    l->n_seeds = o->n_addrs;
    for (size_t i = 0; i < o->n_addrs; i++)
        snprintf(l->seeds[i], sizeof l->seeds[i], "%s", o->addrs[i]);
    if (o->master_name)
        snprintf(l->master_name, sizeof l->master_name, "%s", o->master_name);
    l->tv.tv_sec = o->timeout_ms / 1000;
    l->tv.tv_usec = (o->timeout_ms % 1000) * 1000;
    *out = l;
    return FG_OK;
}

void fg_rlink_close(fg_rlink_t *l)
{
    for (size_t i = 0; i < FG_RLINK_NODES_MAX; i++)
        if (l->ctx[i]) {
            redisFree(l->ctx[i]);
            l->ctx[i] = NULL;
        }
    l->up = false;
}

void fg_rlink_destroy(fg_rlink_t *l)
{
    if (!l)
        return;
    fg_rlink_close(l);
    free(l->seeds);
    free(l->target);
    free(l->ask);
    free(l->hops);
    free(l->pend);
    free(l);
}

bool fg_rlink_up(const fg_rlink_t *l)
{
    return l && l->up;
}

void fg_rlink_get_stats(const fg_rlink_t *l, fg_rlink_stats *st)
{
    *st = l->stats;
}

/* Puts m in place, keeping the open contexts of masters still in it. */
static void install_map(fg_rlink_t *l, const fg_rlink_slotmap *m)
{
    redisContext *keep[FG_RLINK_NODES_MAX] = {0};
    for (size_t i = 0; i < l->map.n_addr; i++) {
        if (!l->ctx[i])
            continue;
        for (size_t j = 0; j < m->n_addr; j++)
            if (strcmp(l->map.addr[i], m->addr[j]) == 0) {
                keep[j] = l->ctx[i];
                l->ctx[i] = NULL;
                break;
            }
        if (l->ctx[i]) {
            redisFree(l->ctx[i]);
            l->ctx[i] = NULL;
        }
    }
    memcpy(&l->map, m, sizeof *m);
    memcpy(l->ctx, keep, sizeof keep);
    l->stats.map_loads++;
}

/* CLUSTER SLOTS on c (connected to addr) into a fresh map installed in l. */
static bool load_map(fg_rlink_t *l, redisContext *c, const char *addr, char *why, size_t cap)
{
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    if (!r) {
        snprintf(why, cap, "CLUSTER SLOTS from %.80s: %.80s", addr, c->errstr[0] ? c->errstr : "no reply");
        return false;
    }
    fg_rlink_slotmap *m = malloc(sizeof *m);
    char host[FG_RLINK_ADDR_MAX + 1];
    split_addr(addr, host, sizeof host);
    char perr[120] = "out of memory";
    bool ok = m && fg_rlink_parse_slots(r, host, m, perr, sizeof perr);
    freeReplyObject(r);
    if (ok)
        install_map(l, m);
    else
        snprintf(why, cap, "%.80s: %.100s", addr, perr);
    free(m);
    return ok;
}

/* CLUSTER SLOTS from addr; true when the map is installed. */
static bool map_from(fg_rlink_t *l, const char *addr, char *why, size_t cap)
{
    redisContext *c = open_ctx(l, addr, why, cap);
    if (!c)
        return false;
    bool ok = load_map(l, c, addr, why, cap);
    if (ok) {
        /* The node asked is usually a master: keep its connection. */
        for (size_t i = 0; i < l->map.n_addr; i++)
            if (strcmp(l->map.addr[i], addr) == 0 && !l->ctx[i]) {
                l->ctx[i] = c;
                c = NULL;
                break;
            }
    }
    if (c)
        redisFree(c);
    return ok;
}

/* The seeds in turn, then the masters of the last map (the seeds may all be
 * gone while masters found later live on). */
static bool connect_cluster(fg_rlink_t *l, char *why, size_t cap)
{
    for (size_t k = 0; k < l->n_seeds; k++) {
        size_t s = (l->next_seed + k) % l->n_seeds;
        if (map_from(l, l->seeds[s], why, cap)) {
            l->next_seed = s;
            l->map_stale = false;
            return true;
        }
    }
    l->next_seed = (l->next_seed + 1) % l->n_seeds;
    size_t n_known = l->map.n_addr;
    char(*known)[FG_RLINK_ADDR_MAX + 1] = n_known ? malloc(n_known * sizeof *known) : NULL;
    if (!known)
        return false;
    memcpy(known, l->map.addr, n_known * sizeof *known);
    bool ok = false;
    char last[200];
    snprintf(last, sizeof last, "%s", why);
    for (size_t i = 0; i < n_known && !ok; i++)
        ok = map_from(l, known[i], why, cap);
    if (!ok)
        snprintf(why, cap, "%s", last); /* the seeds' failure is the one to report */
    l->map_stale = !ok;
    free(known);
    return ok;
}

/* The master one sentinel names, connected and checked with ROLE. */
static redisContext *ask_sentinel(fg_rlink_t *l, const char *sentinel, char *addr, size_t acap, char *why, size_t cap)
{
    redisContext *s = open_ctx(l, sentinel, why, cap);
    if (!s)
        return NULL;
    redisReply *r = redisCommand(s, "SENTINEL get-master-addr-by-name %s", l->master_name);
    bool named = fg_rlink_parse_master(r, addr, acap);
    if (!named)
        snprintf(why, cap, "sentinel %.80s does not know master %.60s%s%.60s", sentinel, l->master_name,
                 r && r->type == REDIS_REPLY_ERROR ? ": " : "", r && r->type == REDIS_REPLY_ERROR ? r->str : "");
    if (r)
        freeReplyObject(r);
    redisFree(s);
    if (!named)
        return NULL;
    redisContext *m = open_ctx(l, addr, why, cap);
    if (!m)
        return NULL;
    r = redisCommand(m, "ROLE");
    bool master = fg_rlink_parse_role_master(r);
    if (r)
        freeReplyObject(r);
    if (!master) {
        snprintf(why, cap, "sentinel %.80s names %.80s, which is not a master (a failover in progress)", sentinel,
                 addr);
        redisFree(m);
        return NULL;
    }
    l->stats.discoveries++;
    return m;
}

bool fg_rlink_connect(fg_rlink_t *l, char *why, size_t cap)
{
    if (l->up)
        return true;
    fg_rlink_close(l);
    why[0] = '\0';
    if (l->mode == FG_RLINK_CLUSTER) {
        l->up = connect_cluster(l, why, cap);
        return l->up;
    }
    memset(l->map.owner, 0, sizeof l->map.owner);
    l->map.n_addr = 1;
    if (l->mode == FG_RLINK_SINGLE) {
        snprintf(l->map.addr[0], sizeof l->map.addr[0], "%s", l->seeds[0]);
        l->ctx[0] = open_ctx(l, l->seeds[0], why, cap);
    } else {
        for (size_t k = 0; k < l->n_seeds && !l->ctx[0]; k++) {
            size_t s = (l->next_seed + k) % l->n_seeds;
            l->ctx[0] = ask_sentinel(l, l->seeds[s], l->map.addr[0], sizeof l->map.addr[0], why, cap);
            if (l->ctx[0])
                l->next_seed = s; /* ask the one that answered first next time */
        }
    }
    l->up = l->ctx[0] != NULL;
    return l->up;
}

/* ---- commands ---- */

static bool grow_scratch(fg_rlink_t *l, size_t n)
{
    if (n <= l->scratch_cap)
        return true;
    size_t cap = l->scratch_cap ? l->scratch_cap : 64;
    while (cap < n)
        cap *= 2;
    int *t = realloc(l->target, cap * sizeof *t);
    if (t)
        l->target = t;
    uint8_t *a = realloc(l->ask, cap);
    if (a)
        l->ask = a;
    uint8_t *h = realloc(l->hops, cap);
    if (h)
        l->hops = h;
    size_t *p = realloc(l->pend, cap * sizeof *p);
    if (p)
        l->pend = p;
    if (!t || !a || !h || !p)
        return false;
    l->scratch_cap = cap;
    return true;
}

static int route(const fg_rlink_t *l, int slot)
{
    if (l->mode != FG_RLINK_CLUSTER)
        return 0;
    int node = slot >= 0 && slot < FG_RLINK_SLOTS ? l->map.owner[slot] : FG_RLINK_NO_OWNER;
    if (node == FG_RLINK_NO_OWNER)
        node = l->map.owner[0] != FG_RLINK_NO_OWNER ? l->map.owner[0] : 0;
    return node;
}

/* Error replies that say "not now" rather than "this command failed". */
static bool is_unavailable(const redisReply *r)
{
    static const char *const codes[] = {"CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN", "LOADING", "READONLY"};
    if (r->type != REDIS_REPLY_ERROR || !r->str)
        return false;
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        size_t n = strlen(codes[i]);
        if (r->len >= n && memcmp(r->str, codes[i], n) == 0 && (r->len == n || r->str[n] == ' '))
            return true;
    }
    /* A script's write refused on a demoted master: "ERR ... -READONLY ..." in some versions. */
    return strstr(r->str, "READONLY You can't write") != NULL;
}

static bool exec_fail(fg_rlink_t *l, char *why, size_t cap, const char *msg)
{
    snprintf(why, cap, "%s", msg);
    fg_rlink_close(l);
    return false;
}

static const char ASKING[] = "*1\r\n$6\r\nASKING\r\n";

bool fg_rlink_exec(fg_rlink_t *l, const fg_rlink_cmd *cmds, size_t n, redisReply **replies, char *why, size_t cap)
{
    why[0] = '\0';
    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    if (!l->up)
        return fail(why, cap, "not connected");
    if (!grow_scratch(l, n))
        return exec_fail(l, why, cap, "out of memory");
    for (size_t i = 0; i < n; i++) {
        l->target[i] = route(l, cmds[i].slot);
        l->ask[i] = 0;
        l->hops[i] = 0;
        l->pend[i] = i;
    }
    size_t np = n;
    char msg[200];
    while (np > 0) {
        bool used[FG_RLINK_NODES_MAX] = {false};
        for (size_t k = 0; k < np; k++) {
            size_t i = l->pend[k];
            int t = l->target[i];
            if (!l->ctx[t] && !(l->ctx[t] = open_ctx(l, l->map.addr[t], msg, sizeof msg)))
                return exec_fail(l, why, cap, msg);
            if ((l->ask[i] && redisAppendFormattedCommand(l->ctx[t], ASKING, sizeof ASKING - 1) != REDIS_OK) ||
                redisAppendFormattedCommand(l->ctx[t], cmds[i].resp, cmds[i].len) != REDIS_OK)
                return exec_fail(l, why, cap, "out of memory appending a command");
            used[t] = true;
        }
        for (size_t t = 0; t < l->map.n_addr; t++) {
            int done = !used[t];
            while (!done)
                if (redisBufferWrite(l->ctx[t], &done) != REDIS_OK) {
                    snprintf(msg, sizeof msg, "%.80s: %.100s", l->map.addr[t],
                             l->ctx[t]->errstr[0] ? l->ctx[t]->errstr : strerror(errno));
                    return exec_fail(l, why, cap, msg);
                }
        }
        size_t next = 0;
        bool unavailable = false;
        for (size_t k = 0; k < np; k++) {
            size_t i = l->pend[k];
            int t = l->target[i];
            redisContext *c = l->ctx[t];
            void *r = NULL;
            if (l->ask[i]) {
                if (redisGetReply(c, &r) != REDIS_OK || !r)
                    goto lost;
                freeReplyObject(r);
                r = NULL;
            }
            if (redisGetReply(c, &r) != REDIS_OK || !r)
                goto lost;
            redisReply *rep = r;
            fg_rlink_redirect rd;
            if (l->mode == FG_RLINK_CLUSTER && rep->type == REDIS_REPLY_ERROR &&
                fg_rlink_parse_redirect(rep->str, rep->len, &rd)) {
                freeReplyObject(rep);
                if (rd.addr[0] == ':') { /* "MOVED 12 :7001": the host we asked */
                    char host[FG_RLINK_ADDR_MAX + 1], full[FG_RLINK_ADDR_MAX + 1];
                    split_addr(l->map.addr[t], host, sizeof host);
                    long port = strtol(rd.addr + 1, NULL, 10);
                    if (!join_addr(full, sizeof full, host, strlen(host), port))
                        return exec_fail(l, why, cap, "redirect to an address that does not fit");
                    snprintf(rd.addr, sizeof rd.addr, "%s", full);
                }
                int node = fg_rlink_slotmap_node(&l->map, rd.addr);
                if (node < 0 || ++l->hops[i] > FG_RLINK_REDIRECTS_MAX) {
                    snprintf(msg, sizeof msg, "too many redirects (slot %d, last to %.80s)", rd.slot, rd.addr);
                    unavailable = true;
                    continue;
                }
                if (rd.ask) {
                    l->stats.ask++;
                } else {
                    l->stats.moved++;
                    l->map.owner[rd.slot] = (uint8_t)node;
                    l->map_stale = true;
                }
                l->target[i] = node;
                l->ask[i] = rd.ask;
                l->pend[next++] = i;
                continue;
            }
            if (is_unavailable(rep)) {
                snprintf(msg, sizeof msg, "%.80s: %.100s", l->map.addr[t], rep->str);
                freeReplyObject(rep);
                unavailable = true;
                continue;
            }
            replies[i] = rep;
            continue;
        lost:
            snprintf(msg, sizeof msg, "%.80s: %.100s", l->map.addr[t], c->errstr[0] ? c->errstr : strerror(errno));
            return exec_fail(l, why, cap, msg);
        }
        if (unavailable)
            return exec_fail(l, why, cap, msg);
        np = next;
    }
    if (l->map_stale) {
        /* Read the whole map again from a master we just talked to; failing that, retry next time. */
        int t = route(l, -1);
        if (l->ctx[t]) {
            if (load_map(l, l->ctx[t], l->map.addr[t], msg, sizeof msg))
                l->map_stale = false;
            else if (l->ctx[t]->err) /* the replies above stay valid; the link does not */
                return exec_fail(l, why, cap, msg);
        }
    }
    return true;
}
