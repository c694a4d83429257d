/* fuzz_config.c: libFuzzer target for the config loader.
 *
 * The input is loaded as config text onto the defaults. A refused input must
 * say why and leave the config exactly as it was (loading is
 * transactional); an accepted one is validated, loaded a second time on top
 * of itself (which must succeed again and frees every replaced value), and
 * every api key it holds must find its own tenant. The same bytes, split
 * into lines and given the FLASHGATE_ prefix, then go through the
 * environment overrides under the same rules. ASan's leak check covers all
 * of it. Nothing here may crash, whatever the bytes.
 *
 * The seed corpus is tests/fuzz/corpus/fuzz_config/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/fg_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_lookup(const fg_config *c)
{
    for (size_t t = 0; t < c->n_tenants; t++)
        for (size_t i = 0; i < c->tenants[t].api_keys.count; i++)
            if (fg_config_find_tenant_by_key(c, c->tenants[t].api_keys.items[i]) != &c->tenants[t])
                abort(); /* keys are unique, so each finds its own tenant */
}

static void fuzz_file(const char *text, size_t size)
{
    fg_config c, defaults;
    fg_config_init_defaults(&c);
    fg_config_init_defaults(&defaults);
    fg_diag d = {{0}};
    if (fg_config_load_string(&c, text, size, &d) != FG_OK) {
        if (!d.msg[0] || !fg_config_equal(&c, &defaults))
            abort();
    } else {
        fg_config_validate(&c, &d);
        check_lookup(&c);
        if (!fg_config_equal(&c, &c))
            abort();
        if (fg_config_load_string(&c, text, size, &d) != FG_OK)
            abort(); /* the same text cannot fail the second time */
        check_lookup(&c);
    }
    fg_config_free(&c);
    fg_config_free(&defaults);
}

static void fuzz_env(const char *text, size_t size)
{
    /* one variable per line, at most 64, each given the prefix */
    enum { MAX_VARS = 64 };
    char *vars[MAX_VARS + 1];
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= size && n < MAX_VARS; i++) {
        if (i < size && text[i] != '\n')
            continue;
        const size_t len = i - start;
        char *v = malloc(len + 11);
        if (!v)
            break;
        memcpy(v, "FLASHGATE_", 10);
        memcpy(v + 10, text + start, len);
        v[10 + len] = '\0'; /* a NUL inside the line just ends it early */
        vars[n++] = v;
        start = i + 1;
    }
    vars[n] = NULL;

    fg_config c, defaults;
    fg_config_init_defaults(&c);
    fg_config_init_defaults(&defaults);
    fg_diag d = {{0}};
    if (fg_config_apply_env(&c, vars, &d) != FG_OK) {
        if (!d.msg[0] || !fg_config_equal(&c, &defaults))
            abort();
    } else {
        fg_config_validate(&c, &d);
        if (fg_config_apply_env(&c, vars, &d) != FG_OK)
            abort();
    }
    fg_config_free(&c);
    fg_config_free(&defaults);
    for (size_t i = 0; i < n; i++)
        free(vars[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_file((const char *)data, size);
    fuzz_env((const char *)data, size);
    return 0;
}
