/* config_schema.h: the configuration schema table and the per-field helpers
 * that config_schema.c and config_load.c share. Internal to config/ (and its
 * unit test); other modules use config/fg_config.h only.
 *
 * A schema entry describes one field of a struct (fg_config for the main
 * table, fg_config_tenant for the tenant table) by its offset, so defaults,
 * parsing, checking, freeing, comparing and the reference text are each one
 * loop over a table rather than code per key.
 *
 * Ownership of a string field: it points either at the entry's static
 * default (def_str) or at heap memory the struct owns. A list field is owned
 * when its items pointer is not NULL (list defaults are always empty). The
 * tenant array is owned unless it is the built-in default array.
 */
#ifndef FG_CONFIG_SCHEMA_H
#define FG_CONFIG_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/base/name.h"
#include "config/fg_config.h"
#include "config/fg_error.h"

typedef enum fg_cfg_type {
    FG_CFG_BOOL,    /* bool */
    FG_CFG_INT,     /* int64_t, within [min_int, max_int] */
    FG_CFG_DOUBLE,  /* double, finite, within [min_double, max_double] */
    FG_CFG_STRING,  /* const char *, owned as above */
    FG_CFG_ENUM,    /* a C enum (int-sized): index into names */
    FG_CFG_STRLIST, /* fg_config_strlist */
} fg_cfg_type;

enum {
    FG_CFG_REQUIRED = 1u << 0, /* must be given (tenant table only) */
    FG_CFG_NONEMPTY = 1u << 1, /* string must not be "" */
    FG_CFG_SECRET = 1u << 2,   /* value never appears in a message */
};

typedef struct fg_cfg_key {
    const char *path;           /* "server.port"; the bare name in the tenant table */
    fg_cfg_type type;
    unsigned flags;
    size_t offset;              /* offsetof() into the described struct */
    bool def_bool;
    int64_t def_int, min_int, max_int;
    double def_double, min_double, max_double;
    const char *def_str;        /* NULL: no default (required, or derived) */
    const char *const *names;   /* enum values, NULL-terminated */
    int def_enum;
    const char *doc;            /* one line for the reference */
} fg_cfg_key;

typedef struct fg_cfg_section {
    const char *name;
    const char *doc;
} fg_cfg_section;

/* One value on its way into or out of a field. Values produced by a parser
 * own their strings; values from fg_cfg_read() borrow them. */
typedef struct fg_cfg_value {
    union {
        bool b;
        int64_t i;
        double d;
        int e;
        const char *s;
        fg_config_strlist list;
    };
} fg_cfg_value;

extern const fg_cfg_key fg_cfg_keys[];
extern const size_t fg_cfg_n_keys;
extern const fg_cfg_key fg_cfg_tenant_keys[];
extern const size_t fg_cfg_n_tenant_keys;
extern const fg_cfg_section fg_cfg_sections[];
extern const size_t fg_cfg_n_sections;

/* Api key limits, shared by the checks and the tenant lookup (tenant ids: config/base/name.h). */
#define FG_CFG_API_KEY_MIN 16
#define FG_CFG_API_KEY_MAX 256

/* ---- config_schema.c: the tables and per-field helpers ---- */

/* Sets every field of base described by keys to its default, owning nothing. */
void fg_cfg_set_defaults(const fg_cfg_key *keys, size_t n, void *base);

/* The field's current value, borrowed. */
fg_cfg_value fg_cfg_read(const fg_cfg_key *k, const void *base);

/* Moves v into the field, freeing what the field owned before; v must own
 * its strings (parser output) and is consumed. Cannot fail. */
void fg_cfg_store(const fg_cfg_key *k, void *base, fg_cfg_value *v);

/* Frees the heap parts of a parser-produced value that was not stored. */
void fg_cfg_value_free(const fg_cfg_key *k, fg_cfg_value *v);

/* Frees what the fields of base own and resets them to their defaults. */
void fg_cfg_free_fields(const fg_cfg_key *keys, size_t n, void *base);

/* True when the two values of field k are equal (strings by content). */
bool fg_cfg_value_equal(const fg_cfg_key *k, const fg_cfg_value *a, const fg_cfg_value *b);

/* Frees an owned tenant array and everything in it. */
void fg_cfg_tenants_free(fg_config_tenant *t, size_t n);

/* Installs an owned tenant array into c, freeing the previous one if owned. */
void fg_cfg_tenants_replace(fg_config *c, fg_config_tenant *t, size_t n);

/* ---- config_check.c: the rules, and how a broken one is worded ---- */

/* Copies in to out for a message: bytes outside printable ASCII become '?',
 * and a long text is cut with "...", so that file or environment content
 * cannot garble a log line. */
void fg_cfg_quote(char *out, size_t cap, const char *in);

/* Finds the known name closest to an unknown word, for "did you mean".
 * Offer every candidate, then read the result (NULL: nothing close). A
 * candidate is close when few edits (insert, delete, replace, swap two
 * neighbours) turn the word into it, or when the word ends in the
 * candidate's leaf — the part after its first sep — as in 'server.kv_format'
 * for 'model.kv_format', or when the word is the candidate cut short. */
typedef struct fg_cfg_suggest {
    const char *word;
    char sep;
    size_t best_dist;
    char best[96];
    char prefix_best[96];
    char leaf_best[96];
} fg_cfg_suggest;

void fg_cfg_suggest_init(fg_cfg_suggest *s, const char *word, char sep);
void fg_cfg_suggest_offer(fg_cfg_suggest *s, const char *candidate);
const char *fg_cfg_suggest_result(const fg_cfg_suggest *s);

/* Checks a value against k's range, allowed names and flags; where names it
 * in the message ("server.port", "FLASHGATE_SERVER_PORT (server.port)"). Errors: FG_ERR_CONFIG. */
fg_err fg_cfg_check(const fg_cfg_key *k, const fg_cfg_value *v, const char *where, fg_diag *d);

/* Maps an enum value's name to its index. Errors: FG_ERR_CONFIG listing the
 * allowed names. */
fg_err fg_cfg_parse_enum(const fg_cfg_key *k, const char *where, const char *text, int *out, fg_diag *d);

/* The tenant list rules: not empty; ids well formed and unique; every field
 * in range; api keys well formed and unique across tenants. Messages name
 * the tenant by id and an api key by position, never by its text.
 * Errors: FG_ERR_CONFIG. */
fg_err fg_cfg_check_tenants(const fg_config_tenant *t, size_t n, fg_diag *d);

/* ---- config_env.c ---- */

/* Parses one environment value for key k; var names the variable in
 * messages. The result owns its strings. Checks the syntax (and enum names)
 * only; ranges are fg_cfg_check(). Errors: FG_ERR_CONFIG, FG_ERR_NOMEM. */
fg_err fg_cfg_parse_env(const fg_cfg_key *k, const char *var, const char *text, fg_cfg_value *out,
                        fg_diag *d);

#endif
