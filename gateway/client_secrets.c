/* client_secrets.c: the store of browser client secrets (client_secrets.h).
 * A flat array: a few thousand entries at most, looked up once per
 * handshake, every entry compared in constant time so the lookup's time
 * says nothing about how close a guess came. */
#include "gateway/client_secrets.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/random.h"
#include "gateway/http.h"

typedef struct gw_secret {
    char value[GW_SECRET_LEN + 1];
    double expires;                 /* monotonic seconds */
    char *api_key;                  /* checked again at each use */
    char *session_event;            /* NULL: none */
    gw_secret_use use;              /* what gw_secrets_find hands out */
} gw_secret;

struct gw_secrets {
    gw_secret *v;
    size_t n;
};

gw_secrets *gw_secrets_new(void)
{
    gw_secrets *st = calloc(1, sizeof *st);
    if (st && !(st->v = calloc(GW_SECRETS_MAX, sizeof *st->v))) {
        free(st);
        return NULL;
    }
    return st;
}

static void drop(gw_secrets *st, size_t i)
{
    free(st->v[i].api_key);
    free(st->v[i].session_event);
    st->v[i] = st->v[--st->n]; /* order does not matter */
}

void gw_secrets_sweep(gw_secrets *st, double now_mono)
{
    for (size_t i = st->n; i-- > 0;)
        if (st->v[i].expires <= now_mono)
            drop(st, i);
}

void gw_secrets_free(gw_secrets *st)
{
    if (!st)
        return;
    while (st->n)
        drop(st, st->n - 1);
    free(st->v);
    free(st);
}

size_t gw_secrets_count(const gw_secrets *st)
{
    return st ? st->n : 0;
}

fg_err gw_secrets_mint(gw_secrets *st, int tenant, const char *api_key, double now_mono, uint32_t ttl_s,
                       const char *session_event, char *value)
{
    gw_secrets_sweep(st, now_mono);
    size_t mine = 0;
    for (size_t i = 0; i < st->n; i++)
        mine += st->v[i].use.tenant == tenant;
    if (st->n >= GW_SECRETS_MAX || mine >= GW_SECRETS_PER_TENANT)
        return FG_ERR_BUSY;
    unsigned char r[16];
    if (!fg_random_bytes(r, sizeof r))
        return FG_ERR_IO;
    gw_secret *s = &st->v[st->n];
    memset(s, 0, sizeof *s);
    memcpy(s->value, GW_SECRET_PREFIX, 3);
    for (int i = 0; i < 16; i++)
        snprintf(s->value + 3 + 2 * i, 3, "%02x", r[i]);
    s->api_key = strdup(api_key);
    s->session_event = session_event ? strdup(session_event) : NULL;
    if (!s->api_key || (session_event && !s->session_event)) {
        free(s->api_key);
        free(s->session_event);
        return FG_ERR_NOMEM;
    }
    s->expires = now_mono + (double)ttl_s;
    s->use = (gw_secret_use){tenant, s->api_key, s->session_event};
    st->n++;
    memcpy(value, s->value, GW_SECRET_LEN + 1);
    return FG_OK;
}

const gw_secret_use *gw_secrets_find(const gw_secrets *st, const char *value, double now_mono)
{
    const gw_secret *hit = NULL;
    for (size_t i = 0; st && i < st->n; i++)
        if (gw_http_key_equal(st->v[i].value, value) && st->v[i].expires > now_mono)
            hit = &st->v[i];
    return hit ? &hit->use : NULL;
}
