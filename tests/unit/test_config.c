/* test_config.c: config/fg_config.h. The built-in defaults equal the shipped
 * config/flashgate.json, which lists every key; each kind of bad file is
 * refused with a message naming the key (and never an api key), leaving the
 * config as it was; files overlay, tenant lists replace; environment
 * overrides parse strictly and name the variable; the rules between keys;
 * the reference text and docs/config.md cover every key (docs/config.md holds
 * the reference verbatim, so the docs cannot drift); constant-time tenant
 * lookup; file errors name the path. Run under ASan, the leak check covers
 * every path here.
 *
 * FG_SOURCE_DIR (set by ctest) locates config/flashgate.json and
 * docs/config.md; without it those parts are skipped with a message.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config_schema.h"
#include "config/fg_config.h"
#include "engine/ep/ep_transport.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_files.h"

#define DEV_KEY "fg-dev-key-change-me-0001"
#define KEY_A "acme-key-0123456789abcdef"
#define KEY_A2 "acme-key-second-0123456789"
#define KEY_B "beta-key-0123456789abcdef"

/* ---- helpers ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

static char *reference_text(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    fg_config_print_reference(f);
    fclose(f);
    return buf;
}

static fg_err load(fg_config *c, const char *json, fg_diag *d)
{
    return fg_config_load_string(c, json, strlen(json), d);
}

/* ---- defaults and the shipped file ---- */

static void test_defaults(void)
{
    fg_config c;
    fg_config_init_defaults(&c);
    CHECK(c.server.port == 8080);
    CHECK(strcmp(c.server.host, "127.0.0.1") == 0);
    CHECK(c.model.kv_format == FG_CONFIG_KV_AUTO);
    CHECK(c.model.kv_budget_bytes == INT64_C(2147483648));
    CHECK(c.model.backend == FG_CONFIG_BACKEND_CPU);
    CHECK(c.limits.messages_per_second == 50.0);
    CHECK(c.log.level == FG_CONFIG_LOG_INFO);
    CHECK(strcmp(c.auth.admin_key, "") == 0);
    CHECK(c.n_tenants == 1 && strcmp(c.tenants[0].id, "default") == 0);
    CHECK(strcmp(c.tenants[0].name, "default") == 0);
    CHECK(c.tenants[0].api_keys.count == 1 && strcmp(c.tenants[0].api_keys.items[0], DEV_KEY) == 0);
    CHECK(c.tenants[0].weight == 1 && c.tenants[0].priority == 0);
    fg_diag d = {{0}};
    CHECK_MSG(fg_config_validate(&c, &d) == FG_OK, "defaults do not validate: %s", d.msg);

    /* every default is inside its own range */
    for (size_t i = 0; i < fg_cfg_n_keys; i++) {
        const fg_cfg_value v = fg_cfg_read(&fg_cfg_keys[i], &c);
        CHECK_MSG(fg_cfg_check(&fg_cfg_keys[i], &v, fg_cfg_keys[i].path, &d) == FG_OK, "%s", d.msg);
    }
    fg_config_free(&c);
    fg_config_free(&c); /* a second free is harmless */
}

static void test_shipped_file(const char *src)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config/flashgate.json", src);

    /* It names every key, so loading it sets everything ... */
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    CHECK_MSG(root != NULL, "%s: %s", path, jerr.text);
    for (size_t i = 0; root && i < fg_cfg_n_keys; i++) {
        char section[64];
        const char *path_i = fg_cfg_keys[i].path;
        const char *dot = strchr(path_i, '.');
        snprintf(section, sizeof section, "%.*s", (int)(dot - path_i), path_i);
        CHECK_MSG(json_object_get(json_object_get(root, section), dot + 1) != NULL,
                  "config/flashgate.json lacks %s", path_i);
    }
    const json_t *tenants = root ? json_object_get(root, "tenants") : NULL;
    CHECK_MSG(json_array_size(tenants) == 1, "config/flashgate.json should have one example tenant");
    for (size_t i = 0; i < fg_cfg_n_tenant_keys; i++)
        CHECK_MSG(json_object_get(json_array_get(tenants, 0), fg_cfg_tenant_keys[i].path) != NULL,
                  "the example tenant lacks %s", fg_cfg_tenant_keys[i].path);
    json_decref(root);

    /* ... and what it sets equals the built-in defaults. */
    fg_config defaults, loaded;
    fg_config_init_defaults(&defaults);
    fg_config_init_defaults(&loaded);
    fg_diag d = {{0}};
    CHECK_MSG(fg_config_load_file(&loaded, path, &d) == FG_OK, "%s", d.msg);
    CHECK_MSG(fg_config_equal(&defaults, &loaded), "config/flashgate.json differs from the built-in defaults");
    CHECK_MSG(fg_config_validate(&loaded, &d) == FG_OK, "%s", d.msg);
    fg_config_free(&loaded);
    fg_config_free(&defaults);
}

/* ---- bad files ---- */

typedef struct bad_case {
    const char *json;
    const char *want;   /* a fragment of the message */
    const char *absent; /* must not appear (an api key, a wrong suggestion), or NULL */
} bad_case;

static const bad_case bad_cases[] = {
    /* the document */
    {"", "the config is empty", NULL},
    {" \n\t\r\n", "the config is empty", NULL},
    {"[]", "the top level must be a JSON object, found an array", NULL},
    {"42", "the top level must be a JSON object, found an integer", NULL},
    {"\"text\"", "the top level must be a JSON object, found a string", NULL},
    {"{", "line 1, column 1: invalid JSON", NULL},
    {"{\n  \"server\": {\"port\": 1,}\n}", "line 2, column", NULL},
    {"{\"server\": {\"host\": \"\xff\xfe\"}}", "invalid JSON", NULL},
    {"{\"server\": {\"host\": \"a\\u0000b\"}}", "invalid JSON: \\u0000 (NUL) is not allowed in a string", NULL},
    {"{\"server\": {\"port\": 1, \"port\": 2}}", "duplicate object key", NULL},
    {"{\"server\": {\"port\": 99999999999999999999}}", "invalid JSON", NULL},
    {"{} {}", "invalid JSON", NULL},
    {"{\"tenants\": [{\"id\": \"a\", \"api_keys\": [\"" KEY_A "\" \"" KEY_B "\"]}]}", "invalid JSON", KEY_B},
    /* unknown keys */
    {"{\"server\": {\"prot\": 9000}}", "unknown key 'server.prot' (did you mean 'server.port'?)", NULL},
    {"{\"sever\": {}}", "unknown key 'sever' (did you mean 'server'?)", NULL},
    {"{\"tenant\": []}", "unknown key 'tenant' (did you mean 'tenants'?)", NULL},
    {"{\"server\": {\"kv_format\": \"f16\"}}", "unknown key 'server.kv_format' (did you mean 'model.kv_format'?)",
     NULL},
    {"{\"model\": {\"kv_fmt\": \"f16\"}}", "(did you mean 'model.kv_format'?)", NULL},
    {"{\"sessions\": {\"max_per_tenan\": 4}}", "(did you mean 'sessions.max_per_tenant'?)", NULL},
    {"{\"server\": {\"idle_timeout_s\": 5}}", "(did you mean 'sessions.idle_timeout_s'?)", NULL},
    {"{\"server\": {\"foo\": 1}}", "unknown key 'server.foo'", "did you mean"},
    {"{\"bogus\": 1}", "unknown key 'bogus'", "did you mean"},
    {"{\"server.port\": 9000}", "nest it as {\"server\": {\"port\": ...}}", NULL},
    {"{\"server\": {\"p\\u00f6rt\": 1}}", "unknown key 'server.p??rt'", NULL},
    /* types */
    {"{\"server\": 5}", "server: expected an object of settings, found an integer", NULL},
    {"{\"server\": {\"port\": \"8080\"}}", "server.port: expected an integer, found a string", NULL},
    {"{\"server\": {\"port\": 8080.5}}", "server.port: expected an integer, found a real number", NULL},
    {"{\"server\": {\"port\": 8080.0}}", "server.port: expected an integer, found a real number", NULL},
    {"{\"server\": {\"port\": null}}", "server.port: expected an integer, found null", NULL},
    {"{\"server\": {\"port\": true}}", "server.port: expected an integer, found a boolean", NULL},
    {"{\"server\": {\"host\": 1}}", "server.host: expected a string, found an integer", NULL},
    {"{\"limits\": {\"messages_per_second\": \"5\"}}", "limits.messages_per_second: expected a number, found a string",
     NULL},
    {"{\"model\": {\"kv_format\": 8}}", "model.kv_format: expected a string, found an integer", NULL},
    {"{\"log\": {\"level\": [\"info\"]}}", "log.level: expected a string, found an array", NULL},
    /* ranges and allowed values */
    {"{\"server\": {\"port\": 70000}}", "server.port: 70000 is out of range [1, 65535]", NULL},
    {"{\"server\": {\"port\": 0}}", "server.port: 0 is out of range [1, 65535]", NULL},
    {"{\"server\": {\"port\": -1}}", "server.port: -1 is out of range [1, 65535]", NULL},
    {"{\"model\": {\"kv_budget_bytes\": 1125899906842625}}",
     "model.kv_budget_bytes: 1125899906842625 is out of range [1048576, 1125899906842624]", NULL},
    {"{\"sessions\": {\"idle_timeout_s\": 2592001}}", "sessions.idle_timeout_s: 2592001 is out of range [1, 2592000]",
     NULL},
    {"{\"limits\": {\"messages_per_second\": 0.01}}", "limits.messages_per_second: 0.01 is out of range [0.1, 1000000]",
     NULL},
    {"{\"limits\": {\"messages_per_second\": 1e7}}", "out of range [0.1, 1000000]", NULL},
    {"{\"model\": {\"kv_format\": \"fp3\"}}",
     "model.kv_format: 'fp3' is not allowed; use one of auto, f32, f16, int8, fp8, fp4", NULL},
    {"{\"model\": {\"backend\": \"CUDA\"}}", "model.backend: 'CUDA' is not allowed; use one of cpu, cuda", NULL},
    {"{\"log\": {\"level\": \"loud\"}}", "log.level: 'loud' is not allowed; use one of debug, info, warn, error", NULL},
    {"{\"server\": {\"host\": \"\"}}", "server.host must not be empty", NULL},
    {"{\"model\": {\"path\": \"\"}}", "model.path must not be empty", NULL},
    /* tenants */
    {"{\"tenants\": {}}", "tenants: expected an array of tenant objects, found an object", NULL},
    {"{\"tenants\": []}", "tenants: the list is empty", NULL},
    {"{\"tenants\": [1]}", "tenants[0]: expected an object, found an integer", NULL},
    {"{\"tenants\": [{\"name\": \"x\"}]}", "tenants[0]: missing required key 'id'", NULL},
    {"{\"tenants\": [{\"id\": \"bad id!\"}]}", "tenants[0].id: 'bad id!' is not 1 to 64 characters", NULL},
    {"{\"tenants\": [{\"id\": \"\"}]}", "tenants[0].id must not be empty", NULL},
    {"{\"tenants\": [{\"id\": "
     "\"a123456789b123456789c123456789d123456789e123456789f123456789g12345\"}]}",
     "is not 1 to 64 characters", NULL},
    {"{\"tenants\": [{\"id\": 7}]}", "tenants[0].id: expected a string, found an integer", NULL},
    {"{\"tenants\": [{\"id\": \"a\", \"api_key\": []}]}",
     "unknown key 'tenants[0].api_key' (did you mean 'tenants[0].api_keys'?)", NULL},
    {"{\"tenants\": [{\"id\": \"a\", \"api_keys\": \"" KEY_A "\"}]}",
     "tenants[0].api_keys: expected an array of strings, found a string", KEY_A},
    {"{\"tenants\": [{\"id\": \"a\", \"api_keys\": [\"" KEY_A "\", 5]}]}",
     "tenants[0].api_keys[1]: expected a string, found an integer", KEY_A},
    {"{\"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"short-key\"]}]}",
     "tenants[0].api_keys[0]: an api key of tenant 'acme' is shorter than 16 characters", "short-key"},
    {"{\"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"" KEY_A "\", \"with a space 0123456789\"]}]}",
     "tenants[0].api_keys[1]: an api key of tenant 'acme' contains a space", "with a space"},
    {"{\"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"" KEY_A "\\u00e9\"]}]}",
     "an api key of tenant 'acme' contains a space or a character outside printable ASCII", KEY_A},
    {"{\"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"x0123456789012345678901234567890123456789012345678901234567"
     "8901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123"
     "4567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789"
     "\"]}]}",
     "an api key of tenant 'acme' is longer than 256 characters", "x0123456789"},
    {"{\"tenants\": [{\"id\": \"a\"}, {\"id\": \"b\"}, {\"id\": \"a\"}]}",
     "tenants[2].id: duplicate tenant id 'a' (also tenants[0])", NULL},
    {"{\"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"" KEY_A "\"]}, {\"id\": \"beta\", \"api_keys\": [\"" KEY_B
     "\", \"" KEY_A "\"]}]}",
     "tenants[1].api_keys[1]: an api key of tenant 'beta' is also an api key of tenant 'acme'", KEY_A},
    {"{\"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"" KEY_A "\", \"" KEY_A "\"]}]}",
     "tenants[0].api_keys[1]: tenant 'acme' lists the same api key twice", KEY_A},
    {"{\"tenants\": [{\"id\": \"a\", \"weight\": 0}]}", "tenants[0].weight: 0 is out of range [1, 1000]", NULL},
    {"{\"tenants\": [{\"id\": \"a\", \"priority\": 11}]}", "tenants[0].priority: 11 is out of range [-10, 10]", NULL},
    {"{\"tenants\": [{\"id\": \"a\", \"name\": null}]}", "tenants[0].name: expected a string, found null", NULL},
    /* a good part before a bad one changes nothing (checked below) */
    {"{\"server\": {\"port\": 9000}, \"tenants\": [{\"id\": \"a\"}], \"log\": {\"level\": \"loud\"}}",
     "log.level: 'loud' is not allowed", NULL},
};

static void test_bad_configs(void)
{
    fg_config defaults;
    fg_config_init_defaults(&defaults);
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *bc = &bad_cases[i];
        fg_config c;
        fg_config_init_defaults(&c);
        fg_diag d = {{0}};
        const fg_err e = load(&c, bc->json, &d);
        CHECK_MSG(e == FG_ERR_CONFIG, "case %zu (%s): got %s (%s)", i, bc->json, fg_err_name(e), d.msg);
        CHECK_MSG(strstr(d.msg, bc->want) != NULL, "case %zu (%s):\n  message '%s'\n  lacks    '%s'", i, bc->json,
                  d.msg, bc->want);
        CHECK_MSG(!bc->absent || !strstr(d.msg, bc->absent), "case %zu: message '%s' contains '%s'", i, d.msg,
                  bc->absent);
        CHECK_MSG(fg_config_equal(&c, &defaults), "case %zu: a refused config changed the values", i);
        fg_config_free(&c);
    }
    /* NULL text of length 0 is the empty config */
    fg_config c;
    fg_config_init_defaults(&c);
    fg_diag d = {{0}};
    CHECK(fg_config_load_string(&c, NULL, 0, &d) == FG_ERR_CONFIG && strstr(d.msg, "empty"));
    CHECK(fg_config_load_string(&c, NULL, 3, &d) == FG_ERR_INVALID_ARG);

    /* nesting far deeper than any config: refused, not a stack overflow */
    const size_t depth = 100000;
    char *deep = malloc(2 * depth + 1);
    if (deep) {
        memset(deep, '[', depth);
        memset(deep + depth, ']', depth);
        deep[2 * depth] = '\0';
        CHECK(fg_config_load_string(&c, deep, 2 * depth, &d) == FG_ERR_CONFIG);
        free(deep);
    }
    fg_config_free(&c);
    fg_config_free(&defaults);
}

/* ---- good files ---- */

static void test_overlay(void)
{
    fg_config c;
    fg_config_init_defaults(&c);
    fg_diag d = {{0}};

    CHECK(load(&c, "{}", &d) == FG_OK);
    CHECK(load(&c, "\xEF\xBB\xBF{\"server\": {\"port\": 9000}}", &d) == FG_OK); /* with a BOM */
    CHECK(c.server.port == 9000 && strcmp(c.server.host, "127.0.0.1") == 0);
    CHECK(load(&c, "{\"server\": {\"host\": \"0.0.0.0\"}, \"model\": {\"kv_format\": \"fp8\", \"backend\": \"cuda\"}}",
               &d) == FG_OK);
    CHECK(c.server.port == 9000 && strcmp(c.server.host, "0.0.0.0") == 0);
    CHECK(c.model.kv_format == FG_CONFIG_KV_FP8 && c.model.backend == FG_CONFIG_BACKEND_CUDA);
    /* a string replaced twice: the first copy must be freed (the leak check sees it) */
    CHECK(load(&c, "{\"server\": {\"host\": \"::\"}, \"limits\": {\"messages_per_second\": 2}}", &d) == FG_OK);
    CHECK(strcmp(c.server.host, "::") == 0 && c.limits.messages_per_second == 2.0);
    CHECK(load(&c, "{\"limits\": {\"messages_per_second\": 0.5}, \"log\": {\"level\": \"debug\"}}", &d) == FG_OK);
    CHECK(c.limits.messages_per_second == 0.5 && c.log.level == FG_CONFIG_LOG_DEBUG);

    /* a tenant list replaces the default one; name defaults to id */
    CHECK_MSG(load(&c,
                   "{\"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"" KEY_A "\", \"" KEY_A2
                   "\"], \"weight\": 3, \"priority\": -2},"
                   " {\"id\": \"beta_2\", \"name\": \"Beta Inc.\", \"api_keys\": [\"" KEY_B "\"]}]}",
                   &d) == FG_OK,
              "%s", d.msg);
    CHECK(c.n_tenants == 2);
    if (c.n_tenants == 2) {
        CHECK(strcmp(c.tenants[0].id, "acme") == 0 && strcmp(c.tenants[0].name, "acme") == 0);
        CHECK(c.tenants[0].api_keys.count == 2 && c.tenants[0].weight == 3 && c.tenants[0].priority == -2);
        CHECK(strcmp(c.tenants[1].name, "Beta Inc.") == 0 && c.tenants[1].weight == 1);
    }
    /* and the next list replaces that one (and frees it) */
    CHECK(load(&c, "{\"tenants\": [{\"id\": \"solo\", \"api_keys\": []}]}", &d) == FG_OK);
    CHECK(c.n_tenants == 1 && strcmp(c.tenants[0].id, "solo") == 0 && c.tenants[0].api_keys.count == 0);
    CHECK(c.server.port == 9000); /* untouched by a file without it */

    fg_config other;
    fg_config_init_defaults(&other);
    CHECK(!fg_config_equal(&c, &other));
    fg_config_free(&c);
    CHECK(fg_config_equal(&c, &other)); /* free leaves the defaults */
    fg_config_free(&other);
}

/* ---- environment ---- */

static void test_env(void)
{
    fg_config c;
    fg_config_init_defaults(&c);
    fg_diag d = {{0}};
    char *env[] = {
        "PATH=/usr/bin",
        "FLASHGATE_CONFIG=/nonexistent/flashgate.json",
        "FLASHGATE_SERVER_PORT=9000",
        "FLASHGATE_SERVER_PORT=9001", /* the last one counts */
        "FLASHGATE_SERVER_HOST=0.0.0.0",
        "FLASHGATE_MODEL_KV_FORMAT=int8",
        "FLASHGATE_MODEL_KV_BUDGET_BYTES=1073741824",
        "FLASHGATE_LIMITS_MESSAGES_PER_SECOND=2.5",
        "FLASHGATE_LIMITS_MESSAGE_BURST=10",
        "FLASHGATE_TENANT_NOTES_IGNORED_NO_EQUALS", /* not NAME=value */
        "FLASHGATE_AUTH_ADMIN_KEY=admin-key-0123456789abcdef",
        "FLASHGATE_REDIS_ADDRESS=",
        "FLASHGATE_PERSISTENCE_IDLE_SPILL_S=0",
        "flashgate_server_port=1", /* the prefix is upper-case only */
        NULL,
    };
    CHECK_MSG(fg_config_apply_env(&c, env, &d) == FG_OK, "%s", d.msg);
    CHECK(c.server.port == 9001);
    CHECK(strcmp(c.server.host, "0.0.0.0") == 0);
    CHECK(c.model.kv_format == FG_CONFIG_KV_INT8);
    CHECK(c.model.kv_budget_bytes == INT64_C(1073741824));
    CHECK(c.limits.messages_per_second == 2.5 && c.limits.message_burst == 10);
    CHECK(strcmp(c.auth.admin_key, "admin-key-0123456789abcdef") == 0);
    CHECK(strcmp(c.redis.address, "") == 0);
    CHECK(c.persistence.idle_spill_s == 0);
    CHECK_MSG(fg_config_validate(&c, &d) == FG_OK, "%s", d.msg);
    CHECK(fg_config_apply_env(&c, NULL, &d) == FG_OK);

    /* applied on top of a file: the environment wins */
    CHECK(load(&c, "{\"server\": {\"port\": 7000}}", &d) == FG_OK && c.server.port == 7000);
    char *env2[] = {"FLASHGATE_SERVER_PORT=7001", NULL};
    CHECK(fg_config_apply_env(&c, env2, &d) == FG_OK && c.server.port == 7001);
    fg_config_free(&c);

    static const struct {
        const char *entry, *want, *absent;
    } bad[] = {
        {"FLASHGATE_SERVER_PORT=90x0", "FLASHGATE_SERVER_PORT (server.port): '90x0' is not an integer", NULL},
        {"FLASHGATE_SERVER_PORT=", "FLASHGATE_SERVER_PORT (server.port): '' is not an integer", NULL},
        {"FLASHGATE_SERVER_PORT= 9000", "is not an integer", NULL},
        {"FLASHGATE_SERVER_PORT=9000 ", "is not an integer", NULL},
        {"FLASHGATE_SERVER_PORT=+9000", "is not an integer", NULL},
        {"FLASHGATE_SERVER_PORT=0x2328", "is not an integer", NULL},
        {"FLASHGATE_SERVER_PORT=9e3", "is not an integer", NULL},
        {"FLASHGATE_SERVER_PORT=-", "is not an integer", NULL},
        {"FLASHGATE_SERVER_PORT=99999999999999999999", "is not an integer", NULL},
        {"FLASHGATE_SERVER_PORT=70000", "FLASHGATE_SERVER_PORT (server.port): 70000 is out of range [1, 65535]", NULL},
        {"FLASHGATE_SERVER_PORT=-9223372036854775808", "is out of range", NULL},
        {"FLASHGATE_SERVER_HOST=", "FLASHGATE_SERVER_HOST (server.host) must not be empty", NULL},
        {"FLASHGATE_MODEL_KV_FORMAT=FP8", "FLASHGATE_MODEL_KV_FORMAT (model.kv_format): 'FP8' is not allowed", NULL},
        {"FLASHGATE_LIMITS_MESSAGES_PER_SECOND=fast", "(limits.messages_per_second): 'fast' is not a decimal number",
         NULL},
        {"FLASHGATE_LIMITS_MESSAGES_PER_SECOND=inf", "is not a decimal number", NULL},
        {"FLASHGATE_LIMITS_MESSAGES_PER_SECOND=nan", "is not a decimal number", NULL},
        {"FLASHGATE_LIMITS_MESSAGES_PER_SECOND=1e999", "is not a decimal number", NULL},
        {"FLASHGATE_LIMITS_MESSAGES_PER_SECOND=0.05", "0.05 is out of range [0.1, 1000000]", NULL},
        {"FLASHGATE_SERVER_PROT=1", "unknown variable FLASHGATE_SERVER_PROT (did you mean FLASHGATE_SERVER_PORT?)",
         NULL},
        {"FLASHGATE_SERVER_KV_FORMAT=f16", "(did you mean FLASHGATE_MODEL_KV_FORMAT?)", NULL},
        {"FLASHGATE_NOTHING_LIKE_IT=1", "unknown variable FLASHGATE_NOTHING_LIKE_IT: no config key has this name",
         NULL},
        {"FLASHGATE_TENANTS=[]", "FLASHGATE_TENANTS: the tenant list cannot be set from the environment", NULL},
        {"FLASHGATE_=1", "unknown variable FLASHGATE_", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fg_config_init_defaults(&c);
        fg_config before;
        fg_config_init_defaults(&before);
        /* a good variable first: it must not be applied when a later one fails */
        char *e[] = {"FLASHGATE_SERVER_MAX_CONNECTIONS=5", (char *)bad[i].entry, NULL};
        const fg_err err = fg_config_apply_env(&c, e, &d);
        CHECK_MSG(err == FG_ERR_CONFIG, "%s: got %s", bad[i].entry, fg_err_name(err));
        CHECK_MSG(strstr(d.msg, bad[i].want) != NULL, "%s:\n  message '%s'\n  lacks    '%s'", bad[i].entry, d.msg,
                  bad[i].want);
        CHECK_MSG(fg_config_equal(&c, &before), "%s: a refused environment changed the values", bad[i].entry);
        fg_config_free(&c);
        fg_config_free(&before);
    }
}

/* Bool and list keys: none of the main keys has these types today, so the
 * parser is driven through the schema helpers with keys made up here. */
typedef struct env_probe {
    bool flag;
    fg_config_strlist list;
} env_probe;

static void test_env_types(void)
{
    env_probe s = {false, {NULL, 0}};
    const fg_cfg_key kb = {.path = "x.flag", .type = FG_CFG_BOOL, .offset = offsetof(env_probe, flag)};
    const fg_cfg_key kl = {.path = "x.list", .type = FG_CFG_STRLIST, .offset = offsetof(env_probe, list)};
    fg_diag d = {{0}};
    fg_cfg_value v;

    static const struct {
        const char *text;
        int want; /* 1 true, 0 false, -1 refused */
    } bools[] = {{"true", 1}, {"1", 1}, {"false", 0}, {"0", 0}, {"yes", -1}, {"TRUE", -1}, {"", -1}, {"01", -1}};
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
        const fg_err e = fg_cfg_parse_env(&kb, "V", bools[i].text, &v, &d);
        if (bools[i].want < 0)
            CHECK_MSG(e == FG_ERR_CONFIG && strstr(d.msg, "is not a boolean (true, false, 1 or 0)"), "'%s'",
                      bools[i].text);
        else
            CHECK_MSG(e == FG_OK && v.b == (bools[i].want == 1), "'%s'", bools[i].text);
    }
    CHECK(fg_cfg_parse_env(&kb, "V", "true", &v, &d) == FG_OK);
    fg_cfg_store(&kb, &s, &v);
    CHECK(s.flag == true);

    CHECK(fg_cfg_parse_env(&kl, "V", " a,b , c ", &v, &d) == FG_OK);
    CHECK(v.list.count == 3 && strcmp(v.list.items[0], "a") == 0 && strcmp(v.list.items[1], "b") == 0 &&
          strcmp(v.list.items[2], "c") == 0);
    fg_cfg_store(&kl, &s, &v);
    CHECK(fg_cfg_parse_env(&kl, "V", "one", &v, &d) == FG_OK && v.list.count == 1);
    fg_cfg_store(&kl, &s, &v); /* replaces, freeing the first list */
    CHECK(s.list.count == 1 && strcmp(s.list.items[0], "one") == 0);
    CHECK(fg_cfg_parse_env(&kl, "V", "", &v, &d) == FG_OK && v.list.count == 0);
    fg_cfg_value_free(&kl, &v);
    CHECK(fg_cfg_parse_env(&kl, "V", "a,,b", &v, &d) == FG_ERR_CONFIG && strstr(d.msg, "V: item 2"));
    CHECK(fg_cfg_parse_env(&kl, "V", "a,", &v, &d) == FG_ERR_CONFIG && strstr(d.msg, "item 2"));
    fg_cfg_free_fields(&kl, 1, &s);
    CHECK(s.list.items == NULL && s.list.count == 0);

    /* a secret's value stays out of the message */
    const fg_cfg_key ks = {.path = "x.n", .type = FG_CFG_INT, .flags = FG_CFG_SECRET, .max_int = 5};
    CHECK(fg_cfg_parse_env(&ks, "V", "s3cr3t", &v, &d) == FG_ERR_CONFIG && !strstr(d.msg, "s3cr3t"));
}

/* ---- rules between keys ---- */

/* The topology rules that need no model (the ones that do are in test_ep_shard). */
static void test_topology(void)
{
    const char *no_nccl = "this build has no NCCL";
    const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"topology\": {\"ranks\": 8, \"ranks_per_node\": 3, \"transport\": \"nccl\"}}",
         "topology.ranks_per_node (3) does not divide topology.ranks (8)"},
        {"{\"topology\": {\"ranks\": 8, \"ranks_per_node\": 4, \"node\": 2, \"transport\": \"nccl\"}}",
         "topology.node (2) is outside the 2 nodes"},
        {"{\"topology\": {\"ranks\": 4, \"redundant_experts\": 8, \"experts_per_rank\": 2}}",
         "topology.experts_per_rank (2) * topology.ranks (4) = 8 slots leave fewer than one owned expert per rank "
         "next to topology.redundant_experts (8)"},
        {"{\"topology\": {\"recv_capacity_rows\": -1}}", "topology.recv_capacity_rows: -1 is out of range"},
        {"{\"topology\": {\"ranks\": 8, \"ranks_per_node\": 4}}",
         "topology.transport inproc runs every rank in this process"},
        {"{\"topology\": {\"ranks\": 0}}", "topology.ranks: 0 is out of range [1, 1024]"},
        {"{\"topology\": {\"transport\": \"mpi\"}}", "'mpi' is not allowed; use one of inproc, nccl"},
        {"{\"topology\": {\"placement\": \"random\"}}", "use one of contiguous, strided"},
        {"{\"topology\": {\"transport\": \"nccl\", \"ranks\": 72, \"ranks_per_node\": 4, \"node\": 17}, "
         "\"redis\": {\"address\": \"off\"}, \"model\": {\"backend\": \"cuda\"}}",
         fg_ep_nccl_available() ? "needs Redis to exchange the NCCL id" : no_nccl},
        {"{\"topology\": {\"transport\": \"nccl\", \"ranks\": 8, \"ranks_per_node\": 4}}",
         fg_ep_nccl_available() ? "over 2 nodes needs Redis to exchange the NCCL id, one every node reaches" : no_nccl},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fg_config c;
        fg_config_init_defaults(&c);
        fg_diag d = {{0}};
        fg_err e = load(&c, bad[i].json, &d);
        if (e == FG_OK)
            e = fg_config_validate(&c, &d);
        CHECK_MSG(e == FG_ERR_CONFIG && strstr(d.msg, bad[i].want), "%s:\n  got %s '%s'\n  want '%s'", bad[i].json,
                  fg_err_name(e), d.msg, bad[i].want);
        fg_config_free(&c);
    }
    static const char *const good[] = {
        "{\"topology\": {\"ranks\": 4}}",
        /* no model to check against here: uneven ownership and replicas are the engine's to check */
        "{\"topology\": {\"ranks\": 3, \"redundant_experts\": 2, \"recv_capacity_rows\": 64}}",
        "{\"topology\": {\"ranks\": 4, \"redundant_experts\": 6}}",
        ("{\"topology\": {\"ranks\": 4, \"ranks_per_node\": 4, \"redundant_experts\": 8, \"experts_per_rank\": 6, "
         "\"placement\": \"strided\"}}"),
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fg_config c;
        fg_config_init_defaults(&c);
        fg_diag d = {{0}};
        CHECK_MSG(load(&c, good[i], &d) == FG_OK && fg_config_validate(&c, &d) == FG_OK, "%s: %s", good[i], d.msg);
        fg_config_free(&c);
    }
    if (fg_ep_nccl_available()) { /* 72 ranks, 4 GPUs per node: the NVL72 layout validates */
        fg_config c;
        fg_config_init_defaults(&c);
        fg_diag d = {{0}};
        const char *j = "{\"topology\": {\"transport\": \"nccl\", \"ranks\": 72, \"ranks_per_node\": 4, "
                        "\"node\": 17}, \"redis\": {\"address\": \"10.0.0.1:6379\"}}";
        CHECK_MSG(load(&c, j, &d) == FG_OK && fg_config_validate(&c, &d) == FG_OK, "%s", d.msg);
        fg_config_free(&c);
        fg_config_init_defaults(&c); /* one node makes its NCCL id itself: no Redis needed */
        j = "{\"topology\": {\"transport\": \"nccl\", \"ranks\": 2}, \"redis\": {\"address\": \"off\"}}";
        CHECK_MSG(load(&c, j, &d) == FG_OK && fg_config_validate(&c, &d) == FG_OK, "%s", d.msg);
        fg_config_free(&c);
    }
}

static void test_validate(void)
{
    static const struct {
        const char *json, *want, *absent;
    } cases[] = {
        {"{\"model\": {\"prefill_chunk\": 512}}",
         "model.prefill_chunk (512) exceeds model.max_batch_tokens (256)", NULL},
        {"{\"model\": {\"max_context\": 512}}",
         "sessions.default_max_output_tokens (512) must be below model.max_context (512)", NULL},
        {"{\"sessions\": {\"max_instructions_bytes\": 2000000}}",
         "sessions.max_instructions_bytes (2000000) exceeds limits.max_frame_bytes (1048576)", NULL},
        {"{\"sessions\": {\"max_instructions_bytes\": 65536}}",
         "sessions.max_instructions_bytes (65536) exceeds 61440: a session's settings must fit", NULL},
        {"{\"auth\": {\"admin_key\": \"short\"}}", "auth.admin_key: the key is shorter than 16 characters", "short\""},
        {"{\"auth\": {\"dashboard_key\": \"dash board key 0123456789\"}}",
         "auth.dashboard_key: the key contains a space", "dash board"},
        {"{\"auth\": {\"admin_key\": \"" DEV_KEY "\"}}", "auth.admin_key is also an api key of tenant 'default'",
         DEV_KEY},
        {"{\"auth\": {\"admin_key\": \"" KEY_A "\", \"dashboard_key\": \"" KEY_A "\"}}",
         "auth.dashboard_key equals auth.admin_key", KEY_A},
        {"{\"redis\": {\"address\": \"localhost\"}}", "redis.address must be host:port", NULL},
        {"{\"redis\": {\"address\": \"::1:6379\"}}", "redis.address must be", NULL},
        {"{\"redis\": {\"address\": \"host:0\"}}", "redis.address must be", NULL},
        {"{\"redis\": {\"address\": \"host:65536\"}}", "redis.address must be", NULL},
        {"{\"redis\": {\"address\": \"host:6379x\"}}", "redis.address must be", NULL},
        {"{\"redis\": {\"address\": \":6379\"}}", "redis.address must be", NULL},
        {"{\"redis\": {\"address\": \"host:\"}}", "redis.address must be", NULL},
        {"{\"redis\": {\"address\": \"[]:6379\"}}", "redis.address must be", NULL},
        {"{\"redis\": {\"address\": \"redis/sock\"}}", "redis.address must be", NULL},
        {"{\"redis\": {\"nodes\": [\"10.0.0.1:6379\"]}}", "redis.nodes is for redis.mode sentinel or cluster", NULL},
        {"{\"redis\": {\"mode\": \"cluster\"}}", "redis.mode cluster needs 1 to 64 redis.nodes", NULL},
        {"{\"redis\": {\"mode\": \"cluster\", \"address\": \"h:1\", \"nodes\": [\"h:1\"]}}",
         "redis.address is for redis.mode single", NULL},
        {"{\"redis\": {\"mode\": \"cluster\", \"nodes\": [\"h:1\", \"/run/redis.sock\"]}}",
         "redis.nodes[1] must be host:port", NULL},
        {"{\"redis\": {\"mode\": \"sentinel\", \"nodes\": [\"h:26379\"]}}", "needs redis.master_name", NULL},
        {"{\"redis\": {\"mode\": \"sentinel\", \"nodes\": [\"h:26379\"], \"master_name\": \"my master\"}}",
         "needs redis.master_name", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_config c;
        fg_config_init_defaults(&c);
        fg_diag d = {{0}};
        CHECK_MSG(load(&c, cases[i].json, &d) == FG_OK, "%s: %s", cases[i].json, d.msg);
        const fg_err e = fg_config_validate(&c, &d);
        CHECK_MSG(e == FG_ERR_CONFIG && strstr(d.msg, cases[i].want), "%s:\n  got %s '%s'\n  want '%s'",
                  cases[i].json, fg_err_name(e), d.msg, cases[i].want);
        CHECK_MSG(!cases[i].absent || !strstr(d.msg, cases[i].absent), "'%s' contains '%s'", d.msg, cases[i].absent);
        fg_config_free(&c);
    }

    static const char *const good[] = {
        "{\"redis\": {\"address\": \"localhost:6379\"}}",
        "{\"redis\": {\"address\": \"10.0.0.7:6380\"}}",
        "{\"redis\": {\"address\": \"[::1]:6379\"}}",
        "{\"redis\": {\"address\": \"/run/redis/redis.sock\"}}",
        "{\"redis\": {\"mode\": \"cluster\", \"nodes\": [\"10.0.0.1:7000\", \"[::1]:7001\"]}}",
        "{\"redis\": {\"mode\": \"sentinel\", \"nodes\": [\"10.0.0.1:26379\"], \"master_name\": \"fg\"}}",
        "{\"model\": {\"prefill_chunk\": 256, \"max_context\": 513}}",
        "{\"auth\": {\"admin_key\": \"" KEY_A "\", \"dashboard_key\": \"" KEY_B "\"}}",
        "{\"sessions\": {\"max_instructions_bytes\": 0}}",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fg_config c;
        fg_config_init_defaults(&c);
        fg_diag d = {{0}};
        CHECK_MSG(load(&c, good[i], &d) == FG_OK && fg_config_validate(&c, &d) == FG_OK, "%s: %s", good[i], d.msg);
        fg_config_free(&c);
    }

    /* a config built in code gets the per-key checks too */
    fg_config c;
    fg_config_init_defaults(&c);
    fg_diag d = {{0}};
    c.server.port = 0;
    CHECK(fg_config_validate(&c, &d) == FG_ERR_CONFIG && strstr(d.msg, "server.port: 0 is out of range"));
    c.server.port = 80;
    c.limits.messages_per_second = NAN;
    CHECK(fg_config_validate(&c, &d) == FG_ERR_CONFIG && strstr(d.msg, "limits.messages_per_second"));
    c.limits.messages_per_second = 1;
    c.log.level = (fg_config_log_level)9;
    CHECK(fg_config_validate(&c, &d) == FG_ERR_CONFIG && strstr(d.msg, "log.level"));
    c.log.level = FG_CONFIG_LOG_WARN;
    const char *dir_default = c.persistence.dir;
    c.persistence.dir = NULL;
    CHECK(fg_config_validate(&c, &d) == FG_ERR_CONFIG && strstr(d.msg, "persistence.dir is not set"));
    c.persistence.dir = "var";
    const fg_config_tenant *keep = c.tenants;
    c.tenants = NULL;
    c.n_tenants = 0;
    CHECK(fg_config_validate(&c, &d) == FG_ERR_CONFIG && strstr(d.msg, "tenants: the list is empty"));
    c.tenants = keep;
    c.n_tenants = 1;
    CHECK_MSG(fg_config_validate(&c, &d) == FG_OK, "%s", d.msg);
    c.persistence.dir = dir_default; /* "var" is not the config's to free */
    fg_config_free(&c);
}

/* ---- reference text and docs ---- */

static void check_covers(const char *text, const char *what)
{
    char needle[160];
    for (size_t i = 0; i < fg_cfg_n_keys; i++) {
        snprintf(needle, sizeof needle, "`%s`", fg_cfg_keys[i].path);
        CHECK_MSG(strstr(text, needle) != NULL, "%s lacks %s", what, needle);
        CHECK_MSG(strstr(text, fg_cfg_keys[i].doc) != NULL, "%s lacks the doc line of %s", what, fg_cfg_keys[i].path);
        char env[128];
        size_t o = (size_t)snprintf(env, sizeof env, "FLASHGATE_");
        for (const char *p = fg_cfg_keys[i].path; *p && o + 1 < sizeof env; p++)
            env[o++] = *p == '.' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        env[o] = '\0';
        CHECK_MSG(strstr(text, env) != NULL, "%s lacks %s", what, env);
    }
    for (size_t i = 0; i < fg_cfg_n_tenant_keys; i++) {
        snprintf(needle, sizeof needle, "`tenants[].%s`", fg_cfg_tenant_keys[i].path);
        CHECK_MSG(strstr(text, needle) != NULL, "%s lacks %s", what, needle);
    }
    for (size_t i = 0; i < fg_cfg_n_sections; i++) {
        snprintf(needle, sizeof needle, "## %s\n", fg_cfg_sections[i].name);
        CHECK_MSG(strstr(text, needle) != NULL, "%s lacks section %s", what, fg_cfg_sections[i].name);
    }
}

static void test_reference(const char *src)
{
    char *ref = reference_text();
    CHECK(ref != NULL);
    if (!ref)
        return;
    check_covers(ref, "the reference");
    CHECK(strstr(ref, DEV_KEY) != NULL); /* the built-in tenant list is shown */

    if (src) {
        char path[4096];
        snprintf(path, sizeof path, "%s/docs/config.md", src);
        char *doc = fg_test_read_file(path, NULL);
        CHECK_MSG(doc != NULL, "cannot read %s", path);
        if (doc) {
            check_covers(doc, "docs/config.md");
            CHECK_MSG(strstr(doc, ref) != NULL,
                      "docs/config.md does not hold the current reference text: replace everything after its "
                      "'## Reference' paragraph with the output of `flashgate --help-config`");
            free(doc);
        }
    }
    free(ref);
}

/* ---- tenant lookup ---- */

static void test_find_tenant(void)
{
    fg_config c;
    fg_config_init_defaults(&c);
    const fg_config_tenant *t = fg_config_find_tenant_by_key(&c, DEV_KEY);
    CHECK(t && strcmp(t->id, "default") == 0);

    fg_diag d = {{0}};
    CHECK(load(&c,
               "{\"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"" KEY_A "\", \"" KEY_A2 "\"]},"
               " {\"id\": \"empty\", \"api_keys\": []},"
               " {\"id\": \"beta\", \"api_keys\": [\"" KEY_B "\"]}]}",
               &d) == FG_OK);
    t = fg_config_find_tenant_by_key(&c, KEY_A);
    CHECK(t && strcmp(t->id, "acme") == 0);
    t = fg_config_find_tenant_by_key(&c, KEY_A2);
    CHECK(t && strcmp(t->id, "acme") == 0);
    t = fg_config_find_tenant_by_key(&c, KEY_B);
    CHECK(t && strcmp(t->id, "beta") == 0);
    CHECK(fg_config_find_tenant_by_key(&c, DEV_KEY) == NULL); /* the default list was replaced */
    CHECK(fg_config_find_tenant_by_key(&c, NULL) == NULL);
    CHECK(fg_config_find_tenant_by_key(&c, "") == NULL);
    CHECK(fg_config_find_tenant_by_key(NULL, KEY_A) == NULL);

    char probe[400];
    snprintf(probe, sizeof probe, "%s", KEY_A);
    probe[strlen(probe) - 1] ^= 1; /* last byte differs */
    CHECK(fg_config_find_tenant_by_key(&c, probe) == NULL);
    probe[strlen(probe) - 1] = '\0'; /* a prefix */
    CHECK(fg_config_find_tenant_by_key(&c, probe) == NULL);
    snprintf(probe, sizeof probe, "%sx", KEY_A); /* a longer key */
    CHECK(fg_config_find_tenant_by_key(&c, probe) == NULL);
    memset(probe, 'a', sizeof probe - 1);
    probe[sizeof probe - 1] = '\0';
    CHECK(fg_config_find_tenant_by_key(&c, probe) == NULL);
    fg_config_free(&c);
}

/* ---- files ---- */

static void test_files(void)
{
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/fg_config_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp %s failed", dir);
        return;
    }
    char path[600];
    fg_config c;
    fg_config_init_defaults(&c);
    fg_diag d = {{0}};

    snprintf(path, sizeof path, "%s/missing.json", dir);
    CHECK(fg_config_load_file(&c, path, &d) == FG_ERR_IO);
    CHECK_MSG(strstr(d.msg, path) != NULL, "'%s' does not name %s", d.msg, path);

    CHECK(fg_config_load_file(&c, dir, &d) == FG_ERR_IO); /* a directory */
    CHECK_MSG(strstr(d.msg, dir) != NULL, "'%s' does not name %s", d.msg, dir);

    snprintf(path, sizeof path, "%s/good.json", dir);
    write_file(path, "{\n  \"server\": {\"port\": 9100},\n  \"tenants\": [{\"id\": \"acme\", \"api_keys\": [\"" KEY_A
                     "\"]}]\n}\n");
    CHECK_MSG(fg_config_load_file(&c, path, &d) == FG_OK, "%s", d.msg);
    CHECK(c.server.port == 9100 && c.n_tenants == 1 && strcmp(c.tenants[0].id, "acme") == 0);
    unlink(path);

    snprintf(path, sizeof path, "%s/empty.json", dir);
    write_file(path, "");
    CHECK(fg_config_load_file(&c, path, &d) == FG_ERR_CONFIG);
    CHECK_MSG(strstr(d.msg, path) && strstr(d.msg, "empty"), "'%s'", d.msg);
    unlink(path);

    snprintf(path, sizeof path, "%s/syntax.json", dir);
    write_file(path, "{\n  \"server\": {\"port\": 9000\n}\n");
    CHECK(fg_config_load_file(&c, path, &d) == FG_ERR_CONFIG);
    CHECK_MSG(strstr(d.msg, path) && strstr(d.msg, "line 4, column") && strstr(d.msg, "invalid JSON"), "'%s'", d.msg);
    unlink(path);

    snprintf(path, sizeof path, "%s/unknown.json", dir);
    write_file(path, "{\"server\": {\"prot\": 9000}}");
    CHECK(fg_config_load_file(&c, path, &d) == FG_ERR_CONFIG);
    CHECK_MSG(strstr(d.msg, path) && strstr(d.msg, ": unknown key 'server.prot' (did you mean 'server.port'?)"), "'%s'",
              d.msg);
    unlink(path);

    CHECK(c.server.port == 9100); /* the refused files changed nothing */
    CHECK(fg_config_load_file(&c, NULL, &d) == FG_ERR_INVALID_ARG);
    fg_config_free(&c);
    CHECK(rmdir(dir) == 0);
}

int main(void)
{
    const char *src = getenv("FG_SOURCE_DIR");
    test_defaults();
    if (src && src[0])
        test_shipped_file(src);
    else
        fprintf(stderr, "test_config: FG_SOURCE_DIR unset; skipping config/flashgate.json and docs/config.md\n");
    test_bad_configs();
    test_overlay();
    test_env();
    test_env_types();
    test_validate();
    test_topology();
    test_reference(src && src[0] ? src : NULL);
    test_find_tenant();
    test_files();
    return TEST_DONE("test_config");
}
