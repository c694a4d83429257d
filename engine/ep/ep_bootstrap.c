/* ep_bootstrap.c: the NCCL id exchange through Redis (see ep_bootstrap.h). */
#include "engine/ep/ep_bootstrap.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "config/base/clock.h"

#define POLL_MS 20 /* between looks at a key that is not there yet */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* "host:port", "[v6]:port" or "/unix/path" into a context; NULL when the address is malformed. */
static redisContext *connect_address(const char *addr, struct timeval tv)
{
    if (addr[0] == '/')
        return redisConnectUnixWithTimeout(addr, tv);
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return NULL;
    size_t hlen = (size_t)(colon - addr);
    const char *h = addr;
    if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    char host[256], *end;
    long port = strtol(colon + 1, &end, 10);
    if (hlen == 0 || hlen >= sizeof host || *end != '\0' || port <= 0 || port > 65535)
        return NULL;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    return redisConnectWithTimeout(host, (int)port, tv);
}

/* Runs a command; NULL (with diag set) when Redis failed or answered an error. */
static redisReply *command(redisContext *c, fg_diag *diag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        fg_diag_set(diag, FG_ERR_IO, "bootstrap: redis: %s", c->errstr[0] ? c->errstr : "connection lost");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fg_diag_set(diag, FG_ERR_IO, "bootstrap: redis: %.200s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static fg_err publish(redisContext *c, const fg_ep_bootstrap_options *o, const char *id_key, const char *taken_key,
                      const uint8_t *blob, size_t len, int64_t deadline, fg_diag *diag)
{
    redisReply *r;
    if (!(r = command(c, diag, "DEL %s", taken_key)))
        return FG_ERR_IO;
    freeReplyObject(r);
    if (!(r = command(c, diag, "SET %s %b PX %lld", id_key, blob, len, (long long)o->timeout_ms * 2)))
        return FG_ERR_IO;
    freeReplyObject(r);
    long long taken = 0;
    for (;;) {
        if (!(r = command(c, diag, "GET %s", taken_key)))
            return FG_ERR_IO;
        taken = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
        freeReplyObject(r);
        if (taken >= o->n_nodes - 1 || fg_clock_mono_us() / 1000 >= deadline)
            break;
        sleep_ms(POLL_MS);
    }
    /* Done or given up: leave nothing a later launch could read. */
    if ((r = command(c, diag, "DEL %s %s", id_key, taken_key)))
        freeReplyObject(r);
    if (taken < o->n_nodes - 1)
        return fg_diag_set(diag, FG_ERR_IO,
                           "bootstrap: only %lld of %d other nodes took the id under '%s' within %d ms", taken,
                           o->n_nodes - 1, id_key, o->timeout_ms);
    return FG_OK;
}

static fg_err fetch(redisContext *c, const fg_ep_bootstrap_options *o, const char *id_key, const char *taken_key,
                    uint8_t *blob, size_t len, int64_t deadline, fg_diag *diag)
{
    redisReply *r;
    for (;;) {
        if (!(r = command(c, diag, "GET %s", id_key)))
            return FG_ERR_IO;
        if (r->type == REDIS_REPLY_STRING)
            break;
        freeReplyObject(r);
        if (fg_clock_mono_us() / 1000 >= deadline)
            return fg_diag_set(diag, FG_ERR_IO, "bootstrap: no id under '%s' after %d ms (is node 0 up, with the same "
                               "topology.bootstrap?)", id_key, o->timeout_ms);
        sleep_ms(POLL_MS);
    }
    if ((size_t)r->len != len) {
        fg_err e = fg_diag_set(diag, FG_ERR_INVALID_ARG, "bootstrap: '%s' holds %zu bytes, expected %zu", id_key,
                               (size_t)r->len, len);
        freeReplyObject(r);
        return e;
    }
    memcpy(blob, r->str, len);
    freeReplyObject(r);
    if (!(r = command(c, diag, "INCR %s", taken_key)))
        return FG_ERR_IO;
    freeReplyObject(r);
    if ((r = command(c, diag, "PEXPIRE %s %lld", taken_key, (long long)o->timeout_ms * 2)))
        freeReplyObject(r);
    return FG_OK;
}

fg_err fg_ep_bootstrap_exchange(const fg_ep_bootstrap_options *o, uint8_t *blob, size_t len, fg_diag *diag)
{
    if (!o->redis_address || !o->redis_address[0] || !o->prefix || !o->prefix[0] || o->n_nodes < 1 || o->node < 0 ||
        o->node >= o->n_nodes || o->timeout_ms <= 0 || !blob || len == 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "bootstrap: bad options (node %d of %d, %d ms, %zu bytes)",
                           o->node, o->n_nodes, o->timeout_ms, len);
    if (o->n_nodes == 1)
        return FG_OK; /* nobody to tell */
    char id_key[256], taken_key[256];
    if ((size_t)snprintf(id_key, sizeof id_key, "%s:id", o->prefix) >= sizeof id_key ||
        (size_t)snprintf(taken_key, sizeof taken_key, "%s:taken", o->prefix) >= sizeof taken_key)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "bootstrap: key prefix longer than %zu bytes", sizeof id_key - 8);
    const int64_t deadline = fg_clock_mono_us() / 1000 + o->timeout_ms;
    const int step_ms = o->timeout_ms < 2000 ? o->timeout_ms : 2000; /* one command's limit */
    struct timeval tv = {step_ms / 1000, (step_ms % 1000) * 1000};
    redisContext *c = connect_address(o->redis_address, tv);
    if (!c)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "bootstrap: redis address '%.100s' is not host:port, [v6]:port or "
                           "an absolute socket path", o->redis_address);
    if (c->err) {
        fg_err e = fg_diag_set(diag, FG_ERR_IO, "bootstrap: cannot reach redis at '%.100s': %s", o->redis_address,
                               c->errstr);
        redisFree(c);
        return e;
    }
    redisSetTimeout(c, tv);
    fg_err e = o->node == 0 ? publish(c, o, id_key, taken_key, blob, len, deadline, diag)
                            : fetch(c, o, id_key, taken_key, blob, len, deadline, diag);
    redisFree(c);
    return e;
}
