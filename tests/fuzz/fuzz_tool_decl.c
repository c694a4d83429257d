/* fuzz_tool_decl.c: libFuzzer target for gateway/tool_decl.h.
 *
 * The input is JSON (anything jansson reads). Checks the contracts: as
 * `tools` and as `tool_choice` it is either accepted or refused with a
 * message and an empty result; an accepted set has valid, distinct names
 * and schemas that read back as JSON objects; a choice that fits the set is
 * judged consistently by fg_tool_check_call; and for any value, Python-style
 * serialisation (fg_tool_json_pydump) is ASCII and reads back equal to it.
 * A broken contract aborts. The seed corpus is tests/fuzz/corpus/fuzz_tool_decl/.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/tool_decl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int depth_of(const json_t *v)
{
    int d = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            int e = depth_of(x);
            d = e > d ? e : d;
        }
        return d + 1;
    }
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            int e = depth_of(json_array_get(v, i));
            d = e > d ? e : d;
        }
        return d + 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!v)
        return 0;
    fg_diag d = {{0}};

    /* any value: json.dumps form, ASCII, equal once read back */
    char *buf = NULL;
    size_t len = 0, cap = 0;
    fg_err e = fg_tool_json_pydump(v, &buf, &len, &cap);
    if (e == FG_OK) {
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] > 0x7e)
                abort();
        json_t *back = json_loadb(buf, len, JSON_DECODE_ANY, NULL);
        if (!back || !json_equal(back, v))
            abort();
        json_decref(back);
    } else if (e != FG_ERR_INVALID_ARG || depth_of(v) <= 64) {
        abort();
    }
    free(buf);

    fg_tool_set s = {0};
    e = fg_tool_set_parse(v, &s, &d);
    if (e) {
        if (!d.msg[0] || s.n || s.tools)
            abort();
    } else {
        for (uint32_t i = 0; i < s.n; i++) {
            const fg_chat_tool *t = &s.tools[i];
            if (!fg_name_valid(t->name.ptr, t->name.len) || fg_tool_set_find(&s, t->name.ptr, t->name.len) != t)
                abort();
            json_t *schema = json_loadb(t->parameters.ptr, t->parameters.len, 0, NULL);
            if (!schema || !json_is_object(schema) || t->parameters.len > FG_TOOL_PARAMS_MAX)
                abort();
            json_decref(schema);
        }
    }
    fg_tool_choice c;
    d.msg[0] = '\0';
    if (fg_tool_choice_parse(v, &c, &d)) {
        if (!d.msg[0])
            abort();
    } else if (fg_tool_choice_check(&s, &c, &d) == FG_OK) {
        for (uint32_t i = 0; i < s.n; i++) {
            fg_tool_verdict vd = fg_tool_check_call(&s, &c, s.tools[i].name.ptr, s.tools[i].name.len);
            bool want = c.mode == FG_TOOL_CHOICE_AUTO || c.mode == FG_TOOL_CHOICE_REQUIRED ||
                        (c.mode == FG_TOOL_CHOICE_NAMED && strcmp(c.name, s.tools[i].name.ptr) == 0);
            if ((vd == FG_TOOL_V_ACCEPT) != want)
                abort();
        }
    }
    fg_tool_set_free(&s);
    json_decref(v);
    return 0;
}
