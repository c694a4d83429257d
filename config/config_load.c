/* config_load.c: reading the JSON config file (or text) onto a config.
 *
 * Design: two phases, so that a bad file leaves the config as it was. The
 * parse phase walks the document against the schema and stages every value
 * (owned, already checked) and a new tenant array; only when the whole
 * document is good does the commit phase move them in, and moving cannot
 * fail. Objects nest one level: {"section": {"key": value}}; "tenants" is
 * the one array, of objects described by the tenant table.
 *
 * jansson does the JSON itself (UTF-8 validity, duplicate keys, number
 * overflow, nesting depth) and reports line and column; its messages can
 * quote the text near an error, which may be a secret, so only the parts
 * known to be safe are passed on.
 */
#include "config/config_schema.h"

#include "config/base/file.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A config file larger than this is a mistake (a model file named by
 * accident, /dev/zero), not a config. */
#define MAX_FILE_BYTES (16u << 20)

static const char *json_type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown value";
}

static const char *type_wanted(const fg_cfg_key *k)
{
    switch (k->type) {
    case FG_CFG_BOOL: return "a boolean";
    case FG_CFG_INT: return "an integer";
    case FG_CFG_DOUBLE: return "a number";
    case FG_CFG_STRING: return "a string";
    case FG_CFG_ENUM: return "a string";
    case FG_CFG_STRLIST: return "an array of strings";
    }
    return "a value";
}

static fg_err wrong_type(fg_diag *d, const char *where, const char *wanted, const json_t *j)
{
    return fg_diag_set(d, FG_ERR_CONFIG, "%s: expected %s, found %s", where, wanted, json_type_name(j));
}

static fg_err strlist_from_json(const json_t *j, const char *where, fg_config_strlist *out, fg_diag *d)
{
    const size_t n = json_array_size(j);
    const char **items = calloc(n ? n : 1, sizeof *items);
    if (!items)
        return fg_diag_set(d, FG_ERR_NOMEM, "%s: out of memory", where);
    fg_err e = FG_OK;
    for (size_t i = 0; i < n && !e; i++) {
        const json_t *s = json_array_get(j, i);
        if (!json_is_string(s))
            e = fg_diag_set(d, FG_ERR_CONFIG, "%s[%zu]: expected a string, found %s", where, i, json_type_name(s));
        else if (!(items[i] = strdup(json_string_value(s))))
            e = fg_diag_set(d, FG_ERR_NOMEM, "%s: out of memory", where);
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

/* Converts j to key k's type (the value owns its strings) and checks it. */
static fg_err value_from_json(const fg_cfg_key *k, const json_t *j, const char *where, fg_cfg_value *out,
                              fg_diag *d)
{
    memset(out, 0, sizeof *out);
    fg_err e = FG_OK;
    switch (k->type) {
    case FG_CFG_BOOL:
        if (!json_is_boolean(j))
            return wrong_type(d, where, type_wanted(k), j);
        out->b = json_is_true(j);
        break;
    case FG_CFG_INT:
        if (!json_is_integer(j))
            return wrong_type(d, where, type_wanted(k), j);
        out->i = (int64_t)json_integer_value(j);
        break;
    case FG_CFG_DOUBLE:
        if (!json_is_number(j))
            return wrong_type(d, where, type_wanted(k), j);
        out->d = json_number_value(j);
        break;
    case FG_CFG_STRING:
        if (!json_is_string(j))
            return wrong_type(d, where, type_wanted(k), j);
        if (!(out->s = strdup(json_string_value(j))))
            return fg_diag_set(d, FG_ERR_NOMEM, "%s: out of memory", where);
        break;
    case FG_CFG_ENUM:
        if (!json_is_string(j))
            return wrong_type(d, where, type_wanted(k), j);
        e = fg_cfg_parse_enum(k, where, json_string_value(j), &out->e, d);
        break;
    case FG_CFG_STRLIST:
        if (!json_is_array(j))
            return wrong_type(d, where, type_wanted(k), j);
        e = strlist_from_json(j, where, &out->list, d);
        break;
    }
    if (!e)
        e = fg_cfg_check(k, out, where, d);
    if (e)
        fg_cfg_value_free(k, out);
    return e;
}

/* ---- unknown keys ---- */

static bool is_section(const char *name)
{
    for (size_t i = 0; i < fg_cfg_n_sections; i++)
        if (strcmp(fg_cfg_sections[i].name, name) == 0)
            return true;
    return false;
}

/* Index of the main key section.name, or -1. */
static long find_key(const char *section, const char *name)
{
    const size_t sl = strlen(section);
    for (size_t i = 0; i < fg_cfg_n_keys; i++) {
        const char *p = fg_cfg_keys[i].path;
        if (strncmp(p, section, sl) == 0 && p[sl] == '.' && strcmp(p + sl + 1, name) == 0)
            return (long)i;
    }
    return -1;
}

static fg_err unknown_key(fg_diag *d, const char *path, const char *suggestion)
{
    char q[96];
    fg_cfg_quote(q, sizeof q, path);
    if (suggestion)
        return fg_diag_set(d, FG_ERR_CONFIG, "unknown key '%s' (did you mean '%s'?)", q, suggestion);
    return fg_diag_set(d, FG_ERR_CONFIG, "unknown key '%s'", q);
}

static fg_err unknown_top_level(fg_diag *d, const char *name)
{
    /* {"server.port": 9000}: a known key written as one dotted name */
    for (size_t i = 0; i < fg_cfg_n_keys; i++)
        if (strcmp(fg_cfg_keys[i].path, name) == 0) {
            const char *dot = strchr(name, '.');
            return fg_diag_set(d, FG_ERR_CONFIG, "unknown key '%s': nest it as {\"%.*s\": {\"%s\": ...}}", name,
                               (int)(dot - name), name, dot + 1);
        }
    fg_cfg_suggest s;
    fg_cfg_suggest_init(&s, name, '.');
    for (size_t i = 0; i < fg_cfg_n_sections; i++)
        fg_cfg_suggest_offer(&s, fg_cfg_sections[i].name);
    fg_cfg_suggest_offer(&s, "tenants");
    return unknown_key(d, name, fg_cfg_suggest_result(&s));
}

static fg_err unknown_in_section(fg_diag *d, const char *section, const char *name)
{
    char path[160];
    snprintf(path, sizeof path, "%s.%s", section, name);
    fg_cfg_suggest s;
    fg_cfg_suggest_init(&s, path, '.');
    for (size_t i = 0; i < fg_cfg_n_keys; i++)
        fg_cfg_suggest_offer(&s, fg_cfg_keys[i].path);
    return unknown_key(d, path, fg_cfg_suggest_result(&s));
}

/* ---- tenants ---- */

static fg_err tenant_from_json(const json_t *obj, size_t ti, fg_config_tenant *t, fg_diag *d)
{
    char where[160];
    snprintf(where, sizeof where, "tenants[%zu]", ti);
    if (!json_is_object(obj))
        return wrong_type(d, where, "an object", obj);
    const char *name;
    const json_t *val;
    json_object_foreach((json_t *)obj, name, val) {
        const fg_cfg_key *k = NULL;
        for (size_t i = 0; i < fg_cfg_n_tenant_keys && !k; i++)
            if (strcmp(fg_cfg_tenant_keys[i].path, name) == 0)
                k = &fg_cfg_tenant_keys[i];
        if (!k) {
            fg_cfg_suggest s;
            fg_cfg_suggest_init(&s, name, '.');
            for (size_t i = 0; i < fg_cfg_n_tenant_keys; i++)
                fg_cfg_suggest_offer(&s, fg_cfg_tenant_keys[i].path);
            char full[160];
            const char *hint = fg_cfg_suggest_result(&s);
            char hint_full[160];
            snprintf(full, sizeof full, "tenants[%zu].%s", ti, name);
            if (hint)
                snprintf(hint_full, sizeof hint_full, "tenants[%zu].%s", ti, hint);
            return unknown_key(d, full, hint ? hint_full : NULL);
        }
        snprintf(where, sizeof where, "tenants[%zu].%s", ti, k->path);
        fg_cfg_value v;
        const fg_err e = value_from_json(k, val, where, &v, d);
        if (e)
            return e;
        fg_cfg_store(k, t, &v);
    }
    if (!t->id)
        return fg_diag_set(d, FG_ERR_CONFIG, "tenants[%zu]: missing required key 'id'", ti);
    if (!t->name && !(t->name = strdup(t->id)))
        return fg_diag_set(d, FG_ERR_NOMEM, "tenants[%zu]: out of memory", ti);
    return FG_OK;
}

/* Builds the whole new tenant list; on error frees it. */
static fg_err tenants_from_json(const json_t *arr, fg_config_tenant **out, size_t *n_out, fg_diag *d)
{
    if (!json_is_array(arr))
        return wrong_type(d, "tenants", "an array of tenant objects", arr);
    const size_t n = json_array_size(arr);
    fg_config_tenant *t = calloc(n ? n : 1, sizeof *t);
    if (!t)
        return fg_diag_set(d, FG_ERR_NOMEM, "tenants: out of memory");
    for (size_t i = 0; i < n; i++)
        fg_cfg_set_defaults(fg_cfg_tenant_keys, fg_cfg_n_tenant_keys, &t[i]);
    fg_err e = FG_OK;
    for (size_t i = 0; i < n && !e; i++)
        e = tenant_from_json(json_array_get(arr, i), i, &t[i], d);
    if (!e)
        e = fg_cfg_check_tenants(t, n, d);
    if (e) {
        fg_cfg_tenants_free(t, n);
        return e;
    }
    *out = t;
    *n_out = n;
    return FG_OK;
}

/* ---- the document ---- */

typedef struct staging {
    fg_cfg_value *values; /* one per main key */
    bool *set;
    fg_config_tenant *tenants;
    size_t n_tenants;
    bool have_tenants;
} staging;

static fg_err section_from_json(staging *st, const char *section, const json_t *obj, fg_diag *d)
{
    if (!json_is_object(obj))
        return wrong_type(d, section, "an object of settings", obj);
    const char *name;
    const json_t *val;
    json_object_foreach((json_t *)obj, name, val) {
        const long i = find_key(section, name);
        if (i < 0)
            return unknown_in_section(d, section, name);
        const fg_cfg_key *k = &fg_cfg_keys[i];
        const fg_err e = value_from_json(k, val, k->path, &st->values[i], d);
        if (e)
            return e;
        st->set[i] = true; /* once at most: jansson refuses duplicate keys */
    }
    return FG_OK;
}

static fg_err document_from_json(staging *st, const json_t *root, fg_diag *d)
{
    if (!json_is_object(root))
        return fg_diag_set(d, FG_ERR_CONFIG, "the top level must be a JSON object, found %s", json_type_name(root));
    const char *name;
    const json_t *val;
    json_object_foreach((json_t *)root, name, val) {
        fg_err e;
        if (strcmp(name, "tenants") == 0) {
            e = tenants_from_json(val, &st->tenants, &st->n_tenants, d);
            st->have_tenants = !e;
        } else if (is_section(name)) {
            e = section_from_json(st, name, val, d);
        } else {
            e = unknown_top_level(d, name);
        }
        if (e)
            return e;
    }
    return FG_OK;
}

/* Copies jansson's message, dropping its "near '...'" part: that quotes the
 * input, which may be an api key. A duplicate object key is the exception:
 * the quoted text is then a key name, and the one thing the reader needs. */
static void json_error_text(char *out, size_t cap, const char *text)
{
    char buf[JSON_ERROR_TEXT_LENGTH];
    snprintf(buf, sizeof buf, "%s", text);
    char *near = strstr(buf, " near ");
    if (near && strncmp(buf, "duplicate object key", 20) != 0)
        *near = '\0';
    if (strstr(buf, "JSON_ALLOW_NUL")) /* jansson names its own flag */
        snprintf(buf, sizeof buf, "\\u0000 (NUL) is not allowed in a string");
    fg_cfg_quote(out, cap, buf);
}

static fg_err load_text(fg_config *c, const char *text, size_t len, fg_diag *d)
{
    /* A UTF-8 byte order mark is valid UTF-8 that some editors write; JSON
     * parsers may ignore it (RFC 8259, 8.1). */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        text += 3;
        len -= 3;
    }
    size_t blank = 0;
    while (blank < len && (text[blank] == ' ' || text[blank] == '\t' || text[blank] == '\n' || text[blank] == '\r'))
        blank++;
    if (blank == len)
        return fg_diag_set(d, FG_ERR_CONFIG, "the config is empty; it must be a JSON object, e.g. {}");

    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        char msg[JSON_ERROR_TEXT_LENGTH];
        json_error_text(msg, sizeof msg, jerr.text);
        return fg_diag_set(d, FG_ERR_CONFIG, "line %d, column %d: invalid JSON: %s", jerr.line, jerr.column, msg);
    }

    staging st = {0};
    st.values = calloc(fg_cfg_n_keys, sizeof *st.values);
    st.set = calloc(fg_cfg_n_keys, sizeof *st.set);
    fg_err e = (st.values && st.set) ? document_from_json(&st, root, d)
                                     : fg_diag_set(d, FG_ERR_NOMEM, "out of memory loading the config");
    json_decref(root);

    for (size_t i = 0; i < fg_cfg_n_keys && st.set; i++) {
        if (!st.set[i])
            continue;
        if (e)
            fg_cfg_value_free(&fg_cfg_keys[i], &st.values[i]);
        else
            fg_cfg_store(&fg_cfg_keys[i], c, &st.values[i]);
    }
    if (st.have_tenants) {
        if (e)
            fg_cfg_tenants_free(st.tenants, st.n_tenants);
        else
            fg_cfg_tenants_replace(c, st.tenants, st.n_tenants);
    }
    free(st.values);
    free(st.set);
    return e;
}

fg_err fg_config_load_string(fg_config *c, const char *json, size_t len, fg_diag *d)
{
    if (!c || (!json && len))
        return fg_diag_set(d, FG_ERR_INVALID_ARG, "fg_config_load_string: NULL argument");
    return load_text(c, json ? json : "", len, d);
}

/* Reads the whole file into a heap buffer. */
static fg_err read_file(const char *path, char **out, size_t *out_len, fg_diag *d)
{
    const int err = fg_file_read(path, MAX_FILE_BYTES, out, out_len);
    if (err == EFBIG)
        return fg_diag_set(d, FG_ERR_IO, "%s: larger than %u MiB; not a config file", path, MAX_FILE_BYTES >> 20);
    if (err == ENOMEM)
        return fg_diag_set(d, FG_ERR_NOMEM, "%s: out of memory", path);
    if (err)
        return fg_diag_set(d, FG_ERR_IO, "cannot read %s: %s", path, strerror(err));
    return FG_OK;
}

fg_err fg_config_load_file(fg_config *c, const char *path, fg_diag *d)
{
    if (!c || !path)
        return fg_diag_set(d, FG_ERR_INVALID_ARG, "fg_config_load_file: NULL argument");
    char *text = NULL;
    size_t len = 0;
    fg_err e = read_file(path, &text, &len, d);
    if (e)
        return e;
    fg_diag inner = {{0}};
    e = load_text(c, text, len, &inner);
    free(text);
    if (e) {
        /* the path first, like a compiler; a very long path keeps its tail */
        const size_t pl = strlen(path);
        const char *shown = pl > 120 ? path + pl - 117 : path;
        fg_diag_set(d, e, "%s%s: %s", pl > 120 ? "..." : "", shown, inner.msg);
    }
    return e;
}
