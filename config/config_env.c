/* config_env.c: environment overrides, FLASHGATE_<SECTION>_<KEY>=value.
 *
 * Design: a variable's name is its key's path upper-cased with '.' turned
 * into '_' (sections hold no '_', so the mapping is one-to-one), matched by
 * walking the schema table. Like the file loader it stages every value and
 * commits only when all variables are good, so a bad one leaves the config
 * unchanged. A FLASHGATE_ variable that names no key is an error (with the
 * closest name) rather than silently ignored: a typo in a deployment's
 * environment should stop the start, not run with the default.
 */
#include "config/config_schema.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ENV_PREFIX "FLASHGATE_"
#define ENV_PREFIX_LEN (sizeof ENV_PREFIX - 1)

/* The variable name (after the prefix) for a key path: "server.port" ->
 * "SERVER_PORT". */
static void env_suffix(char *out, size_t cap, const char *path)
{
    size_t o = 0;
    for (const char *p = path; *p && o + 1 < cap; p++)
        out[o++] = *p == '.' ? '_' : (*p >= 'a' && *p <= 'z') ? (char)(*p - 'a' + 'A') : *p;
    out[o] = '\0';
}

/* ---- values ---- */

static bool parse_int(const char *s, int64_t *out)
{
    const char *p = s;
    const bool neg = *p == '-';
    if (neg)
        p++;
    if (!*p)
        return false;
    uint64_t v = 0;
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        const unsigned digit = (unsigned)(*p - '0');
        if (v > (limit - digit) / 10)
            return false; /* does not fit in 64 bits */
        v = v * 10 + digit;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool parse_double(const char *s, double *out)
{
    /* strtod would skip leading blanks and take "inf", "nan" and hex;
     * a plain decimal is asked for, so anything else is refused. */
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '+' || *p == 'e' || *p == 'E'))
            return false;
    if (!*s)
        return false;
    char *end;
    const double v = strtod(s, &end);
    if (*end || !isfinite(v))
        return false;
    *out = v;
    return true;
}

/* Comma-separated items, blanks around each item dropped; "" is the empty
 * list, an empty item is an error. */
static fg_err parse_list(const char *var, const char *s, fg_config_strlist *out, fg_diag *d)
{
    size_t n = 0;
    if (*s) {
        n = 1;
        for (const char *p = s; *p; p++)
            n += *p == ',';
    }
    const char **items = calloc(n ? n : 1, sizeof *items);
    if (!items)
        return fg_diag_set(d, FG_ERR_NOMEM, "%s: out of memory", var);
    fg_err e = FG_OK;
    const char *p = s;
    for (size_t i = 0; i < n && !e; i++) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *b = p, *q = end;
        while (b < q && (*b == ' ' || *b == '\t'))
            b++;
        while (q > b && (q[-1] == ' ' || q[-1] == '\t'))
            q--;
        if (b == q)
            e = fg_diag_set(d, FG_ERR_CONFIG, "%s: item %zu of the comma-separated list is empty", var, i + 1);
        else if (!(items[i] = strndup(b, (size_t)(q - b))))
            e = fg_diag_set(d, FG_ERR_NOMEM, "%s: out of memory", var);
        p = *end ? end + 1 : end;
    }
    if (e) {
        for (size_t i = 0; i < n; i++)
            free((void *)items[i]);
        free(items);
        return e;
    }
    *out = (fg_config_strlist){items, n};
    return FG_OK;
}

fg_err fg_cfg_parse_env(const fg_cfg_key *k, const char *var, const char *text, fg_cfg_value *out, fg_diag *d)
{
    memset(out, 0, sizeof *out);
    /* A secret's value never goes into a message. */
    char shown[48];
    if (k->flags & FG_CFG_SECRET)
        snprintf(shown, sizeof shown, "the value");
    else {
        char q[40];
        fg_cfg_quote(q, sizeof q, text);
        snprintf(shown, sizeof shown, "'%s'", q);
    }
    switch (k->type) {
    case FG_CFG_BOOL:
        if (strcmp(text, "true") == 0 || strcmp(text, "1") == 0)
            out->b = true;
        else if (strcmp(text, "false") == 0 || strcmp(text, "0") == 0)
            out->b = false;
        else
            return fg_diag_set(d, FG_ERR_CONFIG, "%s: %s is not a boolean (true, false, 1 or 0)", var, shown);
        return FG_OK;
    case FG_CFG_INT:
        if (!parse_int(text, &out->i))
            return fg_diag_set(d, FG_ERR_CONFIG, "%s: %s is not an integer (decimal digits, optional '-')", var,
                               shown);
        return FG_OK;
    case FG_CFG_DOUBLE:
        if (!parse_double(text, &out->d))
            return fg_diag_set(d, FG_ERR_CONFIG, "%s: %s is not a decimal number", var, shown);
        return FG_OK;
    case FG_CFG_STRING:
        if (!(out->s = strdup(text)))
            return fg_diag_set(d, FG_ERR_NOMEM, "%s: out of memory", var);
        return FG_OK;
    case FG_CFG_ENUM: return fg_cfg_parse_enum(k, var, text, &out->e, d);
    case FG_CFG_STRLIST: return parse_list(var, text, &out->list, d);
    }
    return fg_diag_set(d, FG_ERR_CONFIG, "%s: unknown value type", var);
}

/* ---- variables ---- */

static fg_err unknown_variable(const char *name, size_t name_len, fg_diag *d)
{
    char var[96], suffix_buf[96];
    char *copy = strndup(name, name_len);
    if (!copy)
        return fg_diag_set(d, FG_ERR_NOMEM, "out of memory reading the environment");
    fg_cfg_quote(var, sizeof var, copy);
    const char *suffix = copy + ENV_PREFIX_LEN;

    fg_err e;
    if (strcmp(suffix, "TENANTS") == 0 || strncmp(suffix, "TENANTS_", 8) == 0) {
        e = fg_diag_set(d, FG_ERR_CONFIG,
                        "%s: the tenant list cannot be set from the environment; put it in the config file", var);
    } else {
        fg_cfg_suggest s;
        fg_cfg_suggest_init(&s, suffix, '_');
        for (size_t i = 0; i < fg_cfg_n_keys; i++) {
            env_suffix(suffix_buf, sizeof suffix_buf, fg_cfg_keys[i].path);
            fg_cfg_suggest_offer(&s, suffix_buf);
        }
        const char *hint = fg_cfg_suggest_result(&s);
        if (hint)
            e = fg_diag_set(d, FG_ERR_CONFIG, "unknown variable %s (did you mean " ENV_PREFIX "%s?)", var, hint);
        else
            e = fg_diag_set(d, FG_ERR_CONFIG, "unknown variable %s: no config key has this name", var);
    }
    free(copy);
    return e;
}

/* Index of the key whose variable is name[0, len), or -1. */
static long find_env_key(const char *name, size_t len)
{
    char suffix[96];
    for (size_t i = 0; i < fg_cfg_n_keys; i++) {
        env_suffix(suffix, sizeof suffix, fg_cfg_keys[i].path);
        if (len == ENV_PREFIX_LEN + strlen(suffix) && memcmp(name + ENV_PREFIX_LEN, suffix, len - ENV_PREFIX_LEN) == 0)
            return (long)i;
    }
    return -1;
}

static fg_err stage_variable(const char *entry, fg_cfg_value *values, bool *set, fg_diag *d)
{
    const char *eq = strchr(entry, '=');
    if (!eq)
        return FG_OK; /* not NAME=value: not a variable */
    const size_t len = (size_t)(eq - entry);
    if (len == sizeof ENV_PREFIX "CONFIG" - 1 && memcmp(entry, ENV_PREFIX "CONFIG", len) == 0)
        return FG_OK; /* the binary's: the config file's path */
    const long i = find_env_key(entry, len);
    if (i < 0)
        return unknown_variable(entry, len, d);

    const fg_cfg_key *k = &fg_cfg_keys[i];
    char var[96], where[160];
    snprintf(var, sizeof var, "%.*s", (int)len, entry);
    snprintf(where, sizeof where, "%s (%s)", var, k->path);
    fg_cfg_value v;
    fg_err e = fg_cfg_parse_env(k, where, eq + 1, &v, d);
    if (!e && (e = fg_cfg_check(k, &v, where, d)))
        fg_cfg_value_free(k, &v);
    if (e)
        return e;
    if (set[i])
        fg_cfg_value_free(k, &values[i]); /* given twice: the last one counts */
    values[i] = v;
    set[i] = true;
    return FG_OK;
}

fg_err fg_config_apply_env(fg_config *c, char *const *envp, fg_diag *d)
{
    if (!c)
        return fg_diag_set(d, FG_ERR_INVALID_ARG, "fg_config_apply_env: NULL config");
    if (!envp)
        return FG_OK;
    fg_cfg_value *values = calloc(fg_cfg_n_keys, sizeof *values);
    bool *set = calloc(fg_cfg_n_keys, sizeof *set);
    fg_err e = (values && set) ? FG_OK : fg_diag_set(d, FG_ERR_NOMEM, "out of memory reading the environment");
    for (char *const *p = envp; *p && !e; p++)
        if (strncmp(*p, ENV_PREFIX, ENV_PREFIX_LEN) == 0)
            e = stage_variable(*p, values, set, d);
    for (size_t i = 0; i < fg_cfg_n_keys && set; i++) {
        if (!set[i])
            continue;
        if (e)
            fg_cfg_value_free(&fg_cfg_keys[i], &values[i]);
        else
            fg_cfg_store(&fg_cfg_keys[i], c, &values[i]);
    }
    free(values);
    free(set);
    return e;
}
