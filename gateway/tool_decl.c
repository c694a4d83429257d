/* tool_decl.c: declared tools, tool_choice and the checks on calls (see tool_decl.h).
 *
 * The schema goes into the prompt re-serialised, not as the client wrote it:
 * DeepSeek's convention writes json.dumps(parameters), and one canonical form
 * keeps a session's prompt (and so its KV prefix) the same for the same
 * declarations however a client spaces its JSON.
 */
#include "gateway/tool_decl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/pyjson.h"

/* ---------------------------------------------------------------- json.dumps */

fg_err fg_tool_json_pydump(const json_t *v, char **buf, size_t *len, size_t *cap)
{
    return fg_pyjson_dump(v, true, buf, len, cap);
}

/* ---------------------------------------------------------------- tools */

void fg_tool_set_free(fg_tool_set *s)
{
    if (!s)
        return;
    for (uint32_t i = 0; i < s->n; i++)
        free((void *)s->tools[i].name.ptr);
    free(s->tools);
    *s = (fg_tool_set){0};
}

const fg_chat_tool *fg_tool_set_find(const fg_tool_set *s, const char *name, size_t len)
{
    for (uint32_t i = 0; s && i < s->n; i++)
        if (s->tools[i].name.len == len && memcmp(s->tools[i].name.ptr, name, len) == 0)
            return &s->tools[i];
    return NULL;
}

/* Only these fields; a typo is an error rather than a silently ignored setting. */
static fg_err check_fields(const json_t *o, const char *const *allowed, const char *path, uint32_t i, fg_diag *diag)
{
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)o, key, x) {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strcmp(*a, key) == 0;
        if (!ok)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u]%s.%s: unknown field", i, path, key);
    }
    return FG_OK;
}

/* One tool into t (its texts in one block). */
static fg_err parse_tool(const json_t *e, uint32_t i, fg_chat_tool *t, fg_diag *diag)
{
    static const char *const flat[] = {"type", "name", "description", "parameters", "strict", NULL};
    static const char *const outer[] = {"type", "function", NULL};
    static const char *const inner[] = {"name", "description", "parameters", "strict", NULL};
    if (!json_is_object(e))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u]: a tool is an object", i);
    const json_t *type = json_object_get(e, "type");
    if (!json_is_string(type))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u].type: missing (a string, \"function\")", i);
    if (strcmp(json_string_value(type), "function") != 0)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "tools[%u].type: \"%.40s\" tools are not supported; only \"function\" tools are", i,
                           json_string_value(type));
    const json_t *fn = json_object_get(e, "function");
    const char *path = "";
    fg_err err;
    if (fn) {
        if (!json_is_object(fn))
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u].function: an object", i);
        if ((err = check_fields(e, outer, "", i, diag)) || (err = check_fields(fn, inner, ".function", i, diag)))
            return err;
        path = ".function";
    } else {
        if ((err = check_fields(e, flat, "", i, diag)))
            return err;
        fn = e;
    }
    const json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description");
    const json_t *params = json_object_get(fn, "parameters"), *strict = json_object_get(fn, "strict");
    if (!json_is_string(name) || !fg_name_valid(json_string_value(name), json_string_length(name)))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u]%s.name: 1 to %d of [A-Za-z0-9_-]", i, path,
                           FG_NAME_MAX);
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u]%s.description: a string", i, path);
    if (desc && json_is_string(desc) && json_string_length(desc) > FG_TOOL_DESC_MAX)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u]%s.description: longer than %u bytes", i, path,
                           FG_TOOL_DESC_MAX);
    if (params && !json_is_null(params) && !json_is_object(params))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u]%s.parameters: a JSON Schema object", i, path);
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u]%s.strict: a boolean", i, path);

    /* the block: name NUL description NUL parameters NUL */
    char *sch = NULL;
    size_t slen = 0, scap = 0;
    if (params && json_is_object(params)) {
        err = fg_tool_json_pydump(params, &sch, &slen, &scap);
    } else { /* OpenAI: no parameters is a function that takes none */
        json_t *none = json_pack("{s:s,s:{}}", "type", "object", "properties");
        err = none ? fg_tool_json_pydump(none, &sch, &slen, &scap) : FG_ERR_NOMEM;
        json_decref(none);
    }
    if (err) {
        free(sch);
        return fg_diag_set(diag, err, "tools[%u]%s.parameters: %s", i, path,
                           err == FG_ERR_NOMEM ? "out of memory" : "nested deeper than 64");
    }
    if (slen > FG_TOOL_PARAMS_MAX) {
        free(sch);
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u]%s.parameters: %zu bytes as JSON (at most %u)", i,
                           path, slen, FG_TOOL_PARAMS_MAX);
    }
    size_t nl = json_string_length(name), dl = json_is_string(desc) ? json_string_length(desc) : 0;
    char *blk = malloc(nl + dl + slen + 3);
    if (!blk) {
        free(sch);
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory for tool %u", i);
    }
    memcpy(blk, json_string_value(name), nl);
    blk[nl] = '\0';
    if (dl)
        memcpy(blk + nl + 1, json_string_value(desc), dl);
    blk[nl + 1 + dl] = '\0';
    memcpy(blk + nl + dl + 2, sch, slen);
    blk[nl + dl + 2 + slen] = '\0';
    free(sch);
    *t = (fg_chat_tool){{blk, nl}, {blk + nl + 1, dl}, {blk + nl + dl + 2, slen}};
    return FG_OK;
}

fg_err fg_tool_set_parse(const json_t *tools, fg_tool_set *out, fg_diag *diag)
{
    if (!out)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "fg_tool_set_parse: NULL argument");
    fg_tool_set_free(out);
    if (!tools || json_is_null(tools))
        return FG_OK;
    if (!json_is_array(tools))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools: an array of tools");
    size_t n = json_array_size(tools);
    if (n > FG_TOOL_MAX_DECLS)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools: %zu tools (at most %u)", n, FG_TOOL_MAX_DECLS);
    if (n == 0)
        return FG_OK;
    out->tools = calloc(n, sizeof *out->tools);
    if (!out->tools)
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory for %zu tools", n);
    for (uint32_t i = 0; i < n; i++) {
        fg_err e = parse_tool(json_array_get(tools, i), i, &out->tools[i], diag);
        if (!e && fg_tool_set_find(out, out->tools[i].name.ptr, out->tools[i].name.len)) {
            e = fg_diag_set(diag, FG_ERR_INVALID_ARG, "tools[%u]: a second tool named %s", i, out->tools[i].name.ptr);
            free((void *)out->tools[i].name.ptr);
        }
        if (e) {
            fg_tool_set_free(out);
            return e;
        }
        out->n = i + 1;
    }
    return FG_OK;
}

/* ---------------------------------------------------------------- tool_choice */

fg_err fg_tool_choice_parse(const json_t *v, fg_tool_choice *out, fg_diag *diag)
{
    if (!out)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "fg_tool_choice_parse: NULL argument");
    *out = (fg_tool_choice){FG_TOOL_CHOICE_AUTO, ""};
    if (!v || json_is_null(v))
        return FG_OK;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "auto") == 0)
            return FG_OK;
        if (strcmp(s, "none") == 0)
            out->mode = FG_TOOL_CHOICE_NONE;
        else if (strcmp(s, "required") == 0)
            out->mode = FG_TOOL_CHOICE_REQUIRED;
        else
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "tool_choice: \"%.40s\" is not \"auto\", \"none\", \"required\" or a function", s);
        return FG_OK;
    }
    if (!json_is_object(v))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool_choice: a string or an object");
    const json_t *type = json_object_get(v, "type");
    if (!json_is_string(type))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool_choice.type: missing (\"function\")");
    if (strcmp(json_string_value(type), "function") != 0)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "tool_choice.type: \"%.40s\" is not supported; only \"function\"",
                           json_string_value(type));
    const json_t *fn = json_object_get(v, "function");
    const json_t *name = fn ? json_object_get(fn, "name") : json_object_get(v, "name");
    const char *path = fn ? "tool_choice.function.name" : "tool_choice.name";
    if ((fn && !json_is_object(fn)) || !json_is_string(name) ||
        !fg_name_valid(json_string_value(name), json_string_length(name)))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "%s: 1 to %d of [A-Za-z0-9_-]", path, FG_NAME_MAX);
    out->mode = FG_TOOL_CHOICE_NAMED;
    memcpy(out->name, json_string_value(name), json_string_length(name) + 1);
    return FG_OK;
}

fg_err fg_tool_choice_check(const fg_tool_set *s, const fg_tool_choice *c, fg_diag *diag)
{
    if (!s || !c)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "fg_tool_choice_check: NULL argument");
    if (c->mode == FG_TOOL_CHOICE_REQUIRED && s->n == 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool_choice: \"required\" with no tools declared");
    if (c->mode == FG_TOOL_CHOICE_NAMED && !fg_tool_set_find(s, c->name, strlen(c->name)))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool_choice: no declared function is named %s", c->name);
    return FG_OK;
}

/* Indexed by fg_proto_tool_choice; the two enums list the same four choices. */
static const fg_tool_choice_mode proto_mode[] = {
    [FG_PROTO_TOOL_CHOICE_AUTO] = FG_TOOL_CHOICE_AUTO,
    [FG_PROTO_TOOL_CHOICE_NONE] = FG_TOOL_CHOICE_NONE,
    [FG_PROTO_TOOL_CHOICE_REQUIRED] = FG_TOOL_CHOICE_REQUIRED,
    [FG_PROTO_TOOL_CHOICE_FUNCTION] = FG_TOOL_CHOICE_NAMED,
};

fg_tool_choice fg_tool_choice_from_proto(fg_proto_tool_choice mode, const char *name)
{
    fg_tool_choice c = {FG_TOOL_CHOICE_AUTO, ""};
    if ((unsigned)mode < sizeof proto_mode / sizeof proto_mode[0])
        c.mode = proto_mode[mode];
    if (c.mode == FG_TOOL_CHOICE_NAMED)
        snprintf(c.name, sizeof c.name, "%s", name ? name : "");
    return c;
}

fg_proto_tool_choice fg_tool_choice_to_proto(const fg_tool_choice *c)
{
    for (unsigned i = 0; i < sizeof proto_mode / sizeof proto_mode[0]; i++)
        if (proto_mode[i] == c->mode)
            return (fg_proto_tool_choice)i;
    return FG_PROTO_TOOL_CHOICE_AUTO;
}

bool fg_tool_choice_renders(const fg_tool_choice *c) { return c->mode != FG_TOOL_CHOICE_NONE; }

/* ---------------------------------------------------------------- checks */

fg_tool_verdict fg_tool_check_call(const fg_tool_set *s, const fg_tool_choice *c, const char *name, size_t len)
{
    if (c->mode == FG_TOOL_CHOICE_NONE)
        return FG_TOOL_V_CHOICE_NONE;
    if (!fg_tool_set_find(s, name, len))
        return FG_TOOL_V_UNDECLARED;
    if (c->mode == FG_TOOL_CHOICE_NAMED && (strlen(c->name) != len || memcmp(c->name, name, len) != 0))
        return FG_TOOL_V_NOT_CHOSEN;
    return FG_TOOL_V_ACCEPT;
}

fg_tool_verdict fg_tool_check_reply(const fg_tool_choice *c, uint32_t n_accepted)
{
    if ((c->mode == FG_TOOL_CHOICE_REQUIRED || c->mode == FG_TOOL_CHOICE_NAMED) && n_accepted == 0)
        return FG_TOOL_V_MISSING;
    return FG_TOOL_V_ACCEPT;
}

const char *fg_tool_verdict_name(fg_tool_verdict v)
{
    switch (v) {
    case FG_TOOL_V_ACCEPT:
        return "accept";
    case FG_TOOL_V_UNDECLARED:
        return "tool_undeclared";
    case FG_TOOL_V_CHOICE_NONE:
        return "tool_choice_none";
    case FG_TOOL_V_NOT_CHOSEN:
        return "tool_not_chosen";
    case FG_TOOL_V_MISSING:
        return "tool_call_missing";
    }
    return "?";
}
