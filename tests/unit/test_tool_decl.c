/* test_tool_decl.c: gateway/tool_decl.h: both OpenAI shapes of `tools`, the
 * refusals (unknown types, names, fields, duplicates, limits), the schema as
 * Python's json.dumps writes it (expected strings made by CPython 3's json),
 * every tool_choice form, and the verdicts on calls and replies. */
#include <jansson.h>

#include "fg_test.h"
#include "gateway/pyjson.h"
#include "gateway/tool_decl.h"

static json_t *J(const char *s)
{
    json_error_t e;
    json_t *v = json_loads(s, JSON_DECODE_ANY, &e);
    if (!v)
        fprintf(stderr, "bad test JSON %s: %s\n", s, e.text);
    return v;
}

static void pydump_is(const char *json, const char *want)
{
    json_t *v = J(json);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    CHECK(v && fg_tool_json_pydump(v, &buf, &len, &cap) == FG_OK);
    CHECK_MSG(buf && strcmp(buf, want) == 0 && len == strlen(want), "%s -> %s, want %s", json, buf, want);
    free(buf);
    json_decref(v);
}

static void test_pydump(void)
{
    pydump_is("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"description\":\"Ville \xc3\xa9 "
              "\xf0\x9f\x98\x80\"},\"n\":{\"type\":\"number\",\"minimum\":0.5,\"maximum\":1e16,\"default\":1e-05}},"
              "\"required\":[\"city\"]}",
              "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"Ville \\u00e9 "
              "\\ud83d\\ude00\"}, \"n\": {\"type\": \"number\", \"minimum\": 0.5, \"maximum\": 1e+16, \"default\": "
              "1e-05}}, \"required\": [\"city\"]}");
    /* key order kept; the short escapes, \u for other controls and DEL, '/' as is */
    pydump_is("{\"z\":\"a\\u0001\\u001f\\u007f/\\\"\\\\\\n\\r\\t\\b\\f\",\"a\":[1,2.0,null,true,false,{},[]]}",
              "{\"z\": \"a\\u0001\\u001f\\u007f/\\\"\\\\\\n\\r\\t\\b\\f\", \"a\": [1, 2.0, null, true, false, {}, []]}");
    /* floats as repr: 0.1 0.3333333333333333 123.0 100000.0 -0.0 0.0001 1.2345678901234568e+16 0.00012 1.5e-07 */
    pydump_is("[0.1, 0.33333333333333331, 123.0, 1e5, -0.0, 1e-4, 12345678901234567.0, 0.00012, 1.5e-7, -2.5e300]",
              "[0.1, 0.3333333333333333, 123.0, 100000.0, -0.0, 0.0001, 1.2345678901234568e+16, 0.00012, 1.5e-07, "
              "-2.5e+300]");
    pydump_is("-12345678901234", "-12345678901234");

    /* ensure_ascii=False (DeepSeek-V4's to_json): UTF-8 and DEL as they are, controls still escaped */
    json_t *v = J("{\"z\":\"\\u00e9\\ud83d\\ude00\\u0001\\u007f\\\"\\n/\"}");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    const char *want = "{\"z\": \"\xc3\xa9\xf0\x9f\x98\x80\\u0001\x7f\\\"\\n/\"}";
    CHECK(v && fg_pyjson_dump(v, false, &buf, &len, &cap) == FG_OK);
    CHECK_MSG(buf && strcmp(buf, want) == 0, "ensure_ascii=False: %s", buf);
    free(buf);
    json_decref(v);
}

static fg_err parse_tools(const char *json, fg_tool_set *s, fg_diag *d)
{
    json_t *v = J(json);
    fg_err e = fg_tool_set_parse(v, s, d);
    json_decref(v);
    return e;
}

static void refused(const char *json, fg_err want, const char *says)
{
    fg_tool_set s = {0};
    fg_diag d = {{0}};
    fg_err e = parse_tools(json, &s, &d);
    CHECK_MSG(e == want && strstr(d.msg, says) != NULL, "%s: %s (%s), want %s with \"%s\"", json, fg_err_name(e),
              d.msg, fg_err_name(want), says);
    CHECK(s.n == 0 && s.tools == NULL);
}

static void test_tools(void)
{
    fg_tool_set s = {0};
    fg_diag d = {{0}};
    /* Responses/Realtime shape and Chat Completions shape, one of each */
    CHECK_MSG(parse_tools("[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather now.\","
                          "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}},"
                          "\"strict\":true},"
                          "{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}]",
                          &s, &d) == FG_OK,
              "%s", d.msg);
    CHECK(s.n == 2);
    if (s.n == 2) {
        CHECK(s.tools[0].name.len == 11 && memcmp(s.tools[0].name.ptr, "get_weather", 11) == 0);
        CHECK(s.tools[0].description.len == 12 && memcmp(s.tools[0].description.ptr, "Weather now.", 12) == 0);
        CHECK(strcmp(s.tools[0].parameters.ptr,
                     "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}") == 0);
        CHECK(s.tools[1].description.len == 0);
        CHECK(strcmp(s.tools[1].parameters.ptr, "{\"type\": \"object\", \"properties\": {}}") == 0);
        CHECK(fg_tool_set_find(&s, "noop", 4) == &s.tools[1]);
        CHECK(fg_tool_set_find(&s, "noo", 3) == NULL);
    }
    /* parsing again replaces; null and absent are no tools */
    CHECK(parse_tools("null", &s, &d) == FG_OK && s.n == 0);
    CHECK(fg_tool_set_parse(NULL, &s, &d) == FG_OK && s.n == 0);
    CHECK(parse_tools("[]", &s, &d) == FG_OK && s.n == 0);
    fg_tool_set_free(&s);

    refused("{}", FG_ERR_INVALID_ARG, "tools: an array");
    refused("[1]", FG_ERR_INVALID_ARG, "tools[0]: a tool is an object");
    refused("[{\"name\":\"f\"}]", FG_ERR_INVALID_ARG, "tools[0].type");
    refused("[{\"type\":\"web_search\"}]", FG_ERR_UNSUPPORTED, "\"web_search\" tools are not supported");
    refused("[{\"type\":\"function\",\"name\":\"f\"},{\"type\":\"mcp\",\"server_label\":\"x\"}]", FG_ERR_UNSUPPORTED,
            "tools[1].type: \"mcp\"");
    refused("[{\"type\":\"function\"}]", FG_ERR_INVALID_ARG, "tools[0].name");
    refused("[{\"type\":\"function\",\"name\":\"has space\"}]", FG_ERR_INVALID_ARG, "tools[0].name");
    refused("[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]", FG_ERR_INVALID_ARG, "tools[0].function.name");
    refused("[{\"type\":\"function\",\"function\":\"f\"}]", FG_ERR_INVALID_ARG, "tools[0].function: an object");
    refused("[{\"type\":\"function\",\"name\":\"f\"},{\"type\":\"function\",\"name\":\"f\"}]", FG_ERR_INVALID_ARG,
            "tools[1]: a second tool named f");
    refused("[{\"type\":\"function\",\"name\":\"f\",\"parameters\":[]}]", FG_ERR_INVALID_ARG, "parameters");
    refused("[{\"type\":\"function\",\"name\":\"f\",\"description\":3}]", FG_ERR_INVALID_ARG, "description");
    refused("[{\"type\":\"function\",\"name\":\"f\",\"strict\":\"yes\"}]", FG_ERR_INVALID_ARG, "strict");
    refused("[{\"type\":\"function\",\"name\":\"f\",\"paramaters\":{}}]", FG_ERR_INVALID_ARG,
            "tools[0].paramaters: unknown field");
    refused("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"x\":1}}]", FG_ERR_INVALID_ARG,
            "tools[0].function.x: unknown field");
    refused("[{\"type\":\"function\",\"name\":\"f\",\"function\":{\"name\":\"f\"}}]", FG_ERR_INVALID_ARG,
            "tools[0].name: unknown field");
    /* limits: 129 tools, a schema nested past 64 */
    char *many = malloc(129 * 40 + 8);
    size_t k = 0;
    many[k++] = '[';
    for (int i = 0; i < 129; i++)
        k += (size_t)sprintf(many + k, "%s{\"type\":\"function\",\"name\":\"f%d\"}", i ? "," : "", i);
    strcpy(many + k, "]");
    refused(many, FG_ERR_INVALID_ARG, "129 tools (at most 128)");
    free(many);
    char deep[400];
    k = (size_t)sprintf(deep, "[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"a\":");
    for (int i = 0; i < 70; i++)
        deep[k++] = '[';
    for (int i = 0; i < 70; i++)
        deep[k++] = ']';
    strcpy(deep + k, "}}]");
    refused(deep, FG_ERR_INVALID_ARG, "nested deeper than 64");
}

static fg_err choice(const char *json, fg_tool_choice *c, fg_diag *d)
{
    json_t *v = json ? J(json) : NULL;
    fg_err e = fg_tool_choice_parse(v, c, d);
    json_decref(v);
    return e;
}

static void test_choice(void)
{
    fg_tool_choice c;
    fg_diag d = {{0}};
    CHECK(choice(NULL, &c, &d) == FG_OK && c.mode == FG_TOOL_CHOICE_AUTO);
    CHECK(choice("\"auto\"", &c, &d) == FG_OK && c.mode == FG_TOOL_CHOICE_AUTO);
    CHECK(choice("\"none\"", &c, &d) == FG_OK && c.mode == FG_TOOL_CHOICE_NONE && !fg_tool_choice_renders(&c));
    CHECK(choice("\"required\"", &c, &d) == FG_OK && c.mode == FG_TOOL_CHOICE_REQUIRED && fg_tool_choice_renders(&c));
    CHECK(choice("{\"type\":\"function\",\"name\":\"get_weather\"}", &c, &d) == FG_OK &&
          c.mode == FG_TOOL_CHOICE_NAMED && strcmp(c.name, "get_weather") == 0);
    CHECK(choice("{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}", &c, &d) == FG_OK &&
          c.mode == FG_TOOL_CHOICE_NAMED && strcmp(c.name, "noop") == 0);
    CHECK(choice("\"always\"", &c, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "\"always\""));
    CHECK(choice("3", &c, &d) == FG_ERR_INVALID_ARG);
    CHECK(choice("{\"name\":\"f\"}", &c, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "tool_choice.type"));
    CHECK(choice("{\"type\":\"allowed_tools\",\"mode\":\"auto\",\"tools\":[]}", &c, &d) == FG_ERR_UNSUPPORTED &&
          strstr(d.msg, "allowed_tools"));
    CHECK(choice("{\"type\":\"function\"}", &c, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "tool_choice.name"));
    CHECK(choice("{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}", &c, &d) == FG_ERR_INVALID_ARG &&
          strstr(d.msg, "tool_choice.function.name"));
    /* the session layer's choice and back: each of the four, the name only with a function */
    const fg_proto_tool_choice protos[] = {FG_PROTO_TOOL_CHOICE_AUTO, FG_PROTO_TOOL_CHOICE_NONE,
                                           FG_PROTO_TOOL_CHOICE_REQUIRED, FG_PROTO_TOOL_CHOICE_FUNCTION};
    const fg_tool_choice_mode modes[] = {FG_TOOL_CHOICE_AUTO, FG_TOOL_CHOICE_NONE, FG_TOOL_CHOICE_REQUIRED,
                                         FG_TOOL_CHOICE_NAMED};
    for (int i = 0; i < 4; i++) {
        c = fg_tool_choice_from_proto(protos[i], "get_weather");
        CHECK(c.mode == modes[i] && strcmp(c.name, i == 3 ? "get_weather" : "") == 0);
        CHECK(fg_tool_choice_to_proto(&c) == protos[i]);
    }
    c = fg_tool_choice_from_proto(FG_PROTO_TOOL_CHOICE_FUNCTION, NULL);
    CHECK(c.mode == FG_TOOL_CHOICE_NAMED && c.name[0] == 0);
    c = fg_tool_choice_from_proto((fg_proto_tool_choice)99, "x");
    CHECK(c.mode == FG_TOOL_CHOICE_AUTO);
}

static void test_checks(void)
{
    fg_tool_set s = {0}, empty = {0};
    fg_diag d = {{0}};
    CHECK(parse_tools("[{\"type\":\"function\",\"name\":\"a\"},{\"type\":\"function\",\"name\":\"b\"}]", &s, &d) ==
          FG_OK);
    fg_tool_choice c;
    CHECK(choice("\"required\"", &c, &d) == FG_OK);
    CHECK(fg_tool_choice_check(&s, &c, &d) == FG_OK);
    CHECK(fg_tool_choice_check(&empty, &c, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "no tools declared"));
    CHECK(fg_tool_check_call(&s, &c, "a", 1) == FG_TOOL_V_ACCEPT);
    CHECK(fg_tool_check_call(&s, &c, "zz", 2) == FG_TOOL_V_UNDECLARED);
    CHECK(fg_tool_check_reply(&c, 0) == FG_TOOL_V_MISSING && fg_tool_check_reply(&c, 2) == FG_TOOL_V_ACCEPT);

    CHECK(choice("{\"type\":\"function\",\"name\":\"b\"}", &c, &d) == FG_OK);
    CHECK(fg_tool_choice_check(&s, &c, &d) == FG_OK);
    CHECK(fg_tool_check_call(&s, &c, "b", 1) == FG_TOOL_V_ACCEPT);
    CHECK(fg_tool_check_call(&s, &c, "a", 1) == FG_TOOL_V_NOT_CHOSEN);
    CHECK(fg_tool_check_call(&s, &c, "c", 1) == FG_TOOL_V_UNDECLARED);
    CHECK(fg_tool_check_reply(&c, 0) == FG_TOOL_V_MISSING && fg_tool_check_reply(&c, 1) == FG_TOOL_V_ACCEPT);
    CHECK(choice("{\"type\":\"function\",\"name\":\"c\"}", &c, &d) == FG_OK);
    CHECK(fg_tool_choice_check(&s, &c, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "named c"));

    CHECK(choice("\"none\"", &c, &d) == FG_OK);
    CHECK(fg_tool_check_call(&s, &c, "a", 1) == FG_TOOL_V_CHOICE_NONE);
    CHECK(fg_tool_check_reply(&c, 0) == FG_TOOL_V_ACCEPT);
    CHECK(choice("\"auto\"", &c, &d) == FG_OK);
    CHECK(fg_tool_check_call(&s, &c, "a", 1) == FG_TOOL_V_ACCEPT && fg_tool_check_reply(&c, 0) == FG_TOOL_V_ACCEPT);
    CHECK(strcmp(fg_tool_verdict_name(FG_TOOL_V_UNDECLARED), "tool_undeclared") == 0);
    CHECK(strcmp(fg_tool_verdict_name(FG_TOOL_V_MISSING), "tool_call_missing") == 0);
    fg_tool_set_free(&s);
}

int main(void)
{
    test_pydump();
    test_tools();
    test_choice();
    test_checks();
    return TEST_DONE("test_tool_decl");
}
