/* quota_keys.c: names and values of the quota keys in Redis (the layout is in
 * quota_internal.h and docs/quotas.md) and input validation.
 *
 * Tenant ids are [A-Za-z0-9_-]{1,64}: no '{', '}' or ':', so "{tenant:ID}" is
 * always a well-formed Redis Cluster hash tag and key names cannot collide.
 */
#include "policies/quota_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool fg_quota_valid_key(const char *key)
{
    if (!key)
        return false;
    size_t n = 0;
    for (const char *p = key; *p; p++, n++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p > '~' || n >= FG_QUOTA_KEY_MAX)
            return false; /* printable, no spaces: the journal is one line per entry */
    return n > 0;
}

void fg_qkey(char *buf, const char *tenant, const char *suffix)
{
    snprintf(buf, FG_QUOTA_REDIS_KEY_MAX, "{tenant:%s}:%s", tenant, suffix);
}

void fg_qkey_daily(char *buf, const char *tenant, int64_t day)
{
    time_t t = (time_t)(day * 86400);
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        memset(&tm, 0, sizeof tm);
    snprintf(buf, FG_QUOTA_REDIS_KEY_MAX, "{tenant:%s}:daily:%04d%02d%02d", tenant,
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
}

void fg_qcmd_key(fg_qcmd *c, const char *tenant, const char *suffix)
{
    char key[FG_QUOTA_REDIS_KEY_MAX];
    fg_qkey(key, tenant, suffix);
    fg_qcmd_str(c, key);
}

void fg_qcmd_key_daily(fg_qcmd *c, const char *tenant, int64_t day)
{
    char key[FG_QUOTA_REDIS_KEY_MAX];
    fg_qkey_daily(key, tenant, day);
    fg_qcmd_str(c, key);
}

/* The integer fields of the config hash, in the order of fg_tenant_limits. */
static const char *const LIMIT_FIELDS[] = {
    "max_sessions", "max_responses", "tokens_per_minute", "daily_tokens",
    "max_kv_bytes", "max_context_tokens", "max_output_tokens", "weight",
};

static int64_t *limit_slot(fg_tenant_limits *l, size_t i)
{
    int64_t *slots[] = {&l->max_sessions,     &l->max_responses,      &l->tokens_per_minute,
                        &l->daily_tokens,     &l->max_kv_bytes,       &l->max_context_tokens,
                        &l->max_output_tokens, &l->weight};
    return slots[i];
}

void fg_qcmd_config_fields(fg_qcmd *c, const fg_tenant_record *t)
{
    fg_tenant_limits l = t->limits;
    fg_qcmd_str(c, "name");
    fg_qcmd_str(c, t->name[0] ? t->name : t->id);
    for (size_t i = 0; i < sizeof LIMIT_FIELDS / sizeof *LIMIT_FIELDS; i++) {
        fg_qcmd_str(c, LIMIT_FIELDS[i]);
        fg_qcmd_i64(c, *limit_slot(&l, i));
    }
    fg_qcmd_str(c, "fail_mode");
    fg_qcmd_str(c, t->limits.fail_closed ? "closed" : "open");
}

static int64_t parse_i64(const char *s, size_t n)
{
    char tmp[32];
    if (n == 0 || n >= sizeof tmp)
        return 0;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    char *end;
    long long v = strtoll(tmp, &end, 10);
    return (*end == '\0' && v > 0) ? (int64_t)v : 0; /* garbage or negative: unlimited */
}

void fg_qconfig_parse(const redisReply *h, const char *id, fg_tenant_record *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->id, sizeof out->id, "%s", id);
    snprintf(out->name, sizeof out->name, "%s", id);
    out->limits.weight = 1;
    if (!h || h->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        const redisReply *k = h->element[i], *v = h->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        if (strcmp(k->str, "name") == 0) {
            snprintf(out->name, sizeof out->name, "%.*s", (int)v->len, v->str);
        } else if (strcmp(k->str, "fail_mode") == 0) {
            out->limits.fail_closed = strcmp(v->str, "closed") == 0;
        } else {
            for (size_t f = 0; f < sizeof LIMIT_FIELDS / sizeof *LIMIT_FIELDS; f++)
                if (strcmp(k->str, LIMIT_FIELDS[f]) == 0)
                    *limit_slot(&out->limits, f) = parse_i64(v->str, v->len);
        }
    }
    if (out->limits.weight < 1)
        out->limits.weight = 1;
    if (out->limits.weight > 1000)
        out->limits.weight = 1000;
}

