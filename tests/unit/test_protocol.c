/* test_protocol.c: gateway/protocol.h against docs/protocol.md.
 *
 * - every client example in the docs (each ```json block whose type is a
 *   client event) parses, and is one of the table below, whose checker
 *   asserts the parsed fields; extra valid cases cover the conventions (null =
 *   absent, unknown fields ignored, integral reals, "inf", a stop string);
 * - a bad-input table: each input gives exactly its code, param and echoed
 *   event_id (not JSON, not an object, unknown type, every field's missing /
 *   wrong type / out of range, oversized, invalid UTF-8 variants, nesting,
 *   huge numbers, U+0000, duplicate keys);
 * - the writers: every output parses back with jansson with the right fields;
 *   escaping, U+FFFD replacement and the UTF-8 carry across deltas; no
 *   allocation once the buffer fits;
 * - the docs: every error code has a row with its type, retry_after and
 *   reserved mark, and no row names an unknown code; every server example has
 *   exactly the key paths the writers produce for that event type.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gateway/protocol.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_files.h"

/* ---- small helpers ---- */

static bool str_is(fg_proto_str s, const char *want)
{
    return s.ptr && s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0 && s.ptr[s.len] == '\0';
}

/* docs/protocol.md from FG_SOURCE_DIR (ctest sets it) or beside this file. */
static char *read_docs(size_t *len)
{
    char path[4096];
    const char *root = getenv("FG_SOURCE_DIR");
    if (root) {
        snprintf(path, sizeof path, "%s/docs/protocol.md", root);
    } else {
        snprintf(path, sizeof path, "%s", __FILE__);
        char *cut = strstr(path, "tests/unit/test_protocol.c");
        if (!cut)
            return NULL;
        snprintf(cut, sizeof path - (size_t)(cut - path), "docs/protocol.md");
    }
    return fg_test_read_file(path, len);
}

/* A set of strings (JSON key paths), small and linear: tests only. */
typedef struct strset {
    char *s[256];
    int n;
} strset;

static void set_add(strset *set, const char *s)
{
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->s[i], s) == 0)
            return;
    if (set->n < 256)
        set->s[set->n++] = strdup(s);
}

static bool set_has(const strset *set, const char *s)
{
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->s[i], s) == 0)
            return true;
    return false;
}

static void set_free(strset *set)
{
    for (int i = 0; i < set->n; i++)
        free(set->s[i]);
    set->n = 0;
}

/* Every key path of v: "response.usage.total_tokens", arrays as "[]". */
static void key_paths(const json_t *v, const char *prefix, strset *out)
{
    if (json_is_object(v)) {
        const char *k;
        json_t *child;
        json_object_foreach((json_t *)v, k, child) {
            char p[512];
            snprintf(p, sizeof p, "%s%s%s", prefix, *prefix ? "." : "", k);
            set_add(out, p);
            key_paths(child, p, out);
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *child;
        json_array_foreach((json_t *)v, i, child) {
            char p[512];
            snprintf(p, sizeof p, "%s[]", prefix);
            key_paths(child, p, out);
        }
    }
}

/* ---- valid client events ---- */

typedef void (*checker)(const fg_client_event *ev);

static void chk_create_full(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_SESSION_CREATE);
    CHECK(ev->has_event_id && str_is(ev->event_id, "c1"));
    const fg_proto_session_params *p = &ev->u.session;
    CHECK(p->has_instructions && str_is(p->instructions, "You are a terse assistant."));
    CHECK(p->sampling.has_temperature && p->sampling.temperature == 0.7);
    CHECK(p->sampling.has_top_p && p->sampling.top_p == 0.95);
    CHECK(p->sampling.has_top_k && p->sampling.top_k == 40);
    CHECK(p->sampling.has_min_p && p->sampling.min_p == 0.05);
    CHECK(p->sampling.has_seed && p->sampling.seed == 42);
    CHECK(p->sampling.has_max_output_tokens && p->sampling.max_output_tokens == 512);
    CHECK(p->sampling.has_stop && p->sampling.n_stop == 1 && str_is(p->sampling.stop[0], "\nUser:"));
    CHECK(!p->has_fork_from);
}

static void chk_create_empty(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_SESSION_CREATE);
    CHECK(!ev->has_event_id);
    const fg_proto_session_params *p = &ev->u.session;
    CHECK(!p->has_instructions && !p->has_fork_from);
    const fg_proto_sampling *s = &p->sampling;
    CHECK(!s->has_temperature && !s->has_top_p && !s->has_top_k && !s->has_min_p && !s->has_seed &&
          !s->has_max_output_tokens && !s->has_stop);
}

static void chk_create_fork(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_SESSION_CREATE);
    CHECK(ev->u.session.has_fork_from && str_is(ev->u.session.fork_from, "sess_4bq9XzT1kd0Vw7mYcR2sHf"));
    CHECK(ev->u.session.sampling.has_temperature && ev->u.session.sampling.temperature == 1.2);
    CHECK(!ev->u.session.sampling.has_top_p);
}

static void chk_update(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_SESSION_UPDATE);
    CHECK(str_is(ev->event_id, "c2"));
    const fg_proto_sampling *s = &ev->u.session.sampling;
    CHECK(s->has_temperature && s->temperature == 0);
    CHECK(s->has_stop && s->n_stop == 0); /* clears */
    CHECK(!s->has_top_p && !ev->u.session.has_instructions);
}

static void chk_resume(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_SESSION_RESUME);
    CHECK(str_is(ev->event_id, "c3"));
    CHECK(str_is(ev->u.resume.session_id, "sess_4bq9XzT1kd0Vw7mYcR2sHf"));
    CHECK(ev->u.resume.last_sequence_number == 41);
    CHECK(!ev->u.resume.allow_gap);
}

static void chk_item_message(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_ITEM_CREATE);
    CHECK(str_is(ev->event_id, "c4"));
    const fg_proto_item *it = &ev->u.item;
    CHECK(it->type == FG_PROTO_ITEM_MESSAGE && it->role == FG_PROTO_ROLE_USER);
    CHECK(it->n_content == 1 && it->content[0].type == FG_PROTO_PART_INPUT_TEXT);
    CHECK(str_is(it->content[0].text, "What is the weather in Paris?"));
    CHECK(it->id.ptr == NULL);
}

static void chk_item_call(const fg_client_event *ev)
{
    const fg_proto_item *it = &ev->u.item;
    CHECK(ev->type == FG_CLIENT_ITEM_CREATE && it->type == FG_PROTO_ITEM_FUNCTION_CALL);
    CHECK(str_is(it->call_id, "call_1") && str_is(it->name, "get_weather"));
    CHECK(str_is(it->arguments, "{\"city\":\"Paris\"}"));
}

static void chk_item_output(const fg_client_event *ev)
{
    const fg_proto_item *it = &ev->u.item;
    CHECK(ev->type == FG_CLIENT_ITEM_CREATE && it->type == FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT);
    CHECK(str_is(it->call_id, "call_1") && str_is(it->output, "{\"temp_c\":18}"));
}

static void chk_response_plain(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_RESPONSE_CREATE && str_is(ev->event_id, "c5"));
    CHECK(ev->u.response.generate);
    CHECK(!ev->u.response.sampling.has_temperature && !ev->u.response.sampling.has_stop);
}

static void chk_response_overrides(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_RESPONSE_CREATE && ev->u.response.generate);
    const fg_proto_sampling *s = &ev->u.response.sampling;
    CHECK(s->has_max_output_tokens && s->max_output_tokens == 256);
    CHECK(s->has_temperature && s->temperature == 0.2);
    CHECK(s->has_stop && s->n_stop == 1 && str_is(s->stop[0], "\n\n"));
}

static void chk_response_prefill(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_RESPONSE_CREATE && !ev->u.response.generate);
}

static void chk_cancel_id(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_RESPONSE_CANCEL);
    CHECK(ev->u.cancel.has_response_id && str_is(ev->u.cancel.response_id, "resp_3"));
}

static void chk_cancel_any(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_RESPONSE_CANCEL && !ev->u.cancel.has_response_id);
}

static void chk_close(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_SESSION_CLOSE && str_is(ev->event_id, "c9"));
}

/* The OpenAI GA shapes. */
static void chk_update_ga(const fg_client_event *ev)
{
    const fg_proto_session_params *p = &ev->u.session;
    CHECK(ev->type == FG_CLIENT_SESSION_UPDATE && p->has_instructions && str_is(p->instructions, "Be brief."));
    CHECK(p->has_model && str_is(p->model, "gpt-realtime"));
    CHECK(p->sampling.has_max_output_tokens && p->sampling.max_output_tokens == 32768); /* "inf" */
    CHECK(p->has_tools && strstr(p->tools.ptr, "\"name\":\"get_weather\"") != NULL);
    CHECK(p->has_tool_choice && p->tool_choice == FG_PROTO_TOOL_CHOICE_AUTO);
}
static void chk_item_prev(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_ITEM_CREATE && ev->has_previous_item_id && str_is(ev->previous_item_id, "item_1"));
    CHECK(str_is(ev->u.item.id, "msg_2") && ev->u.item.role == FG_PROTO_ROLE_USER);
}
static void chk_retrieve(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_ITEM_RETRIEVE && str_is(ev->u.item_ref.item_id, "item_2"));
}
static void chk_delete(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_ITEM_DELETE && str_is(ev->u.item_ref.item_id, "item_1"));
}
static void chk_truncate(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_ITEM_TRUNCATE && str_is(ev->u.item_ref.item_id, "item_2"));
    CHECK(ev->u.item_ref.content_index == 0 && ev->u.item_ref.audio_end_ms == 0);
    CHECK(ev->u.item_ref.has_text_end && ev->u.item_ref.text_end == 12);
}
static void chk_response_oob(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_RESPONSE_CREATE && ev->u.response.out_of_band && ev->u.response.has_input);
    CHECK(ev->u.response.n_input == 1 && ev->u.response.input[0].n_content == 1);
    CHECK(str_is(ev->u.response.input[0].content[0].text, "Is this message about billing?"));
    CHECK(ev->u.response.has_metadata && strcmp(ev->u.response.metadata.ptr, "{\"purpose\":\"classify\"}") == 0);
    CHECK(ev->u.response.has_instructions && ev->u.response.sampling.max_output_tokens == 8);
}

/* Conventions beyond the docs' examples. */
static void chk_nulls_absent(const fg_client_event *ev)
{
    const fg_proto_sampling *s = &ev->u.session.sampling;
    CHECK(ev->type == FG_CLIENT_SESSION_CREATE && !ev->has_event_id);
    CHECK(!s->has_temperature && !s->has_seed && !s->has_stop && !ev->u.session.has_instructions);
}

static void chk_unknown_ignored(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_SESSION_UPDATE);
    CHECK(ev->u.session.sampling.has_top_k && ev->u.session.sampling.top_k == 0);
}

static void chk_integral_reals(const fg_client_event *ev)
{
    const fg_proto_sampling *s = &ev->u.session.sampling;
    CHECK(s->has_seed && s->seed == 4);
    CHECK(s->has_top_k && s->top_k == 1000000);
    CHECK(s->has_max_output_tokens && s->max_output_tokens == 32768); /* "inf" = the limit */
    CHECK(s->has_stop && s->n_stop == 1 && str_is(s->stop[0], "END"));
    CHECK(s->has_temperature && s->temperature == 2 && s->has_top_p && s->top_p == 1);
    CHECK(s->has_min_p && s->min_p == 0);
}

static void chk_seed_max(const fg_client_event *ev)
{
    CHECK(ev->u.session.sampling.has_seed && ev->u.session.sampling.seed == (UINT64_C(1) << 53));
}

static void chk_resume_gap(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_SESSION_RESUME && ev->u.resume.allow_gap);
    CHECK(ev->u.resume.last_sequence_number == 0);
}

static void chk_message_parts(const fg_client_event *ev)
{
    const fg_proto_item *it = &ev->u.item;
    CHECK(it->role == FG_PROTO_ROLE_ASSISTANT && it->n_content == 3);
    CHECK(it->content[0].type == FG_PROTO_PART_OUTPUT_TEXT &&
          str_is(it->content[0].text, "caf\xC3\xA9 \xF0\x9F\x98\x80"));
    CHECK(it->content[1].type == FG_PROTO_PART_TEXT && str_is(it->content[1].text, ""));
    CHECK(it->content[2].type == FG_PROTO_PART_INPUT_TEXT &&
          str_is(it->content[2].text, "tab\there \"q\" \xE2\x82\xAC"));
}

static void chk_system_msg(const fg_client_event *ev)
{
    CHECK(ev->u.item.role == FG_PROTO_ROLE_SYSTEM && ev->has_event_id && ev->event_id.len == 0);
}

static void chk_depth_ok(const fg_client_event *ev)
{
    CHECK(ev->type == FG_CLIENT_SESSION_CLOSE);
}

#define D32 "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]" /* 31 arrays, +1 root object = 32 */

static const struct valid_case {
    const char *json;
    checker check;
    bool in_docs; /* must appear among the docs' examples */
} valid_cases[] = {
    {"{\"type\":\"session.create\",\"event_id\":\"c1\",\"session\":{\"instructions\":\"You are a terse assistant.\","
     "\"temperature\":0.7,\"top_p\":0.95,\"top_k\":40,\"min_p\":0.05,\"seed\":42,\"max_output_tokens\":512,"
     "\"stop\":[\"\\nUser:\"]}}",
     chk_create_full, true},
    {"{\"type\":\"session.create\"}", chk_create_empty, true},
    {"{\"type\":\"session.create\",\"session\":{\"fork_from\":\"sess_4bq9XzT1kd0Vw7mYcR2sHf\",\"temperature\":1.2}}",
     chk_create_fork, true},
    {"{\"type\":\"session.update\",\"event_id\":\"c2\",\"session\":{\"temperature\":0,\"stop\":[]}}", chk_update, true},
    {"{\"type\":\"session.resume\",\"event_id\":\"c3\",\"session_id\":\"sess_4bq9XzT1kd0Vw7mYcR2sHf\","
     "\"last_sequence_number\":41}",
     chk_resume, true},
    {"{\"type\":\"conversation.item.create\",\"event_id\":\"c4\",\"item\":{\"type\":\"message\",\"role\":\"user\","
     "\"content\":[{\"type\":\"input_text\",\"text\":\"What is the weather in Paris?\"}]}}",
     chk_item_message, true},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call\",\"call_id\":\"call_1\","
     "\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}",
     chk_item_call, true},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call_output\",\"call_id\":\"call_1\","
     "\"output\":\"{\\\"temp_c\\\":18}\"}}",
     chk_item_output, true},
    {"{\"type\":\"response.create\",\"event_id\":\"c5\"}", chk_response_plain, true},
    {"{\"type\":\"response.create\",\"response\":{\"max_output_tokens\":256,\"temperature\":0.2,\"stop\":[\"\\n\\n\"]}"
     "}",
     chk_response_overrides, true},
    {"{\"type\":\"response.create\",\"response\":{\"generate\":false}}", chk_response_prefill, true},
    {"{\"type\":\"response.cancel\",\"response_id\":\"resp_3\"}", chk_cancel_id, true},
    {"{\"type\":\"response.cancel\"}", chk_cancel_any, true},
    {"{\"type\":\"session.close\",\"event_id\":\"c9\"}", chk_close, true},
    {"{\"type\":\"session.update\",\"session\":{\"type\":\"realtime\",\"model\":\"gpt-realtime\","
     "\"instructions\":\"Be brief.\",\"output_modalities\":[\"text\"],\"max_output_tokens\":\"inf\","
     "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}],"
     "\"tool_choice\":\"auto\"}}",
     chk_update_ga, true},
    {"{\"type\":\"conversation.item.create\",\"previous_item_id\":\"item_1\",\"item\":{\"id\":\"msg_2\","
     "\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"And in Rome?\"}]}}",
     chk_item_prev, true},
    {"{\"type\":\"conversation.item.retrieve\",\"item_id\":\"item_2\"}", chk_retrieve, true},
    {"{\"type\":\"conversation.item.delete\",\"item_id\":\"item_1\"}", chk_delete, true},
    {"{\"type\":\"conversation.item.truncate\",\"item_id\":\"item_2\",\"content_index\":0,\"audio_end_ms\":0,"
     "\"text_end\":12}",
     chk_truncate, true},
    {"{\"type\":\"response.create\",\"response\":{\"conversation\":\"none\",\"metadata\":{\"purpose\":\"classify\"},"
     "\"instructions\":\"Answer yes or no.\",\"max_output_tokens\":8,\"input\":[{\"type\":\"message\","
     "\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Is this message about billing?\"}]}]}}",
     chk_response_oob, true},
    /* conventions */
    {"{\"type\":\"session.create\",\"event_id\":null,\"session\":{\"temperature\":null,\"seed\":null,\"stop\":null,"
     "\"instructions\":null}}",
     chk_nulls_absent, false},
    {"{\"type\":\"session.update\",\"future\":{\"a\":[1,2]},\"session\":{\"top_k\":0,\"voice\":\"alloy\","
     "\"modalities\":[\"text\"]}}",
     chk_unknown_ignored, false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":4.0,\"top_k\":1e6,\"max_output_tokens\":\"inf\","
     "\"stop\":\"END\",\"temperature\":2,\"top_p\":1,\"min_p\":0}}",
     chk_integral_reals, false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":9007199254740992}}", chk_seed_max, false},
    {" \r\n\t{\"type\":\"session.resume\",\"session_id\":\"s\",\"last_sequence_number\":0,\"allow_gap\":true} \n",
     chk_resume_gap, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"assistant\",\"id\":\"x\","
     "\"content\":[{\"type\":\"output_text\",\"text\":\"caf\xC3\xA9 "
     "\\ud83d\\ude00\"},{\"type\":\"text\",\"text\":\"\"},"
     "{\"type\":\"input_text\",\"text\":\"tab\\there \\\"q\\\" \\u20ac\"}]}}",
     chk_message_parts, false},
    {"{\"type\":\"conversation.item.create\",\"event_id\":\"\",\"item\":{\"type\":\"message\",\"role\":\"system\","
     "\"content\":[{\"type\":\"text\",\"text\":\"be brief\"}]}}",
     chk_system_msg, false},
    {"{\"type\":\"session.close\",\"x\":" D32 "}", chk_depth_ok, false},
};
#define N_VALID (sizeof valid_cases / sizeof valid_cases[0])

static void test_valid(void)
{
    for (size_t i = 0; i < N_VALID; i++) {
        fg_client_event ev;
        fg_proto_error err;
        fg_err e = fg_proto_parse(valid_cases[i].json, strlen(valid_cases[i].json), NULL, &ev, &err);
        CHECK_MSG(e == FG_OK, "valid case %zu: %s (%s, param %s)", i, valid_cases[i].json,
                  fg_proto_error_code_name(err.code), err.message);
        if (e == FG_OK)
            valid_cases[i].check(&ev);
        fg_client_event_free(&ev);
        fg_client_event_free(&ev); /* idempotent */
    }
}

/* ---- bad client events ---- */

typedef struct bad_case {
    const char *json;
    size_t len; /* 0: strlen */
    fg_proto_code code;
    const char *param; /* NULL: null */
    const char *event_id; /* NULL: not echoed */
    bool small_limits; /* parse with tiny limits (text 8, instructions 8, message 200, tokens 100) */
} bad_case;

#define FG_PROTO_FG_PROTO_
static const bad_case bad_cases[] = {
    /* not JSON */
    {"", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    {"not json", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    {"{\"type\":\"session.create\"", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    {"{\"type\":\"session.close\"} x", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    {"{\"type\":'session.close'}", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    {"{\"type\":\"session.close\",}", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    {"{\"type\":\"session.close\"}\0", sizeof("{\"type\":\"session.close\"}\0") - 1, FG_PROTO_INVALID_JSON, NULL, NULL,
     false}, /* raw NUL byte after the object */
    {"{\"type\":\"sess\0ion.close\"}", sizeof("{\"type\":\"sess\0ion.close\"}") - 1, FG_PROTO_INVALID_JSON, NULL, NULL,
     false}, /* raw NUL inside a string */
    {"{\"type\":\"session.close\",\"x\":\"\\ud800\"}", 0, FG_PROTO_INVALID_JSON, NULL, NULL,
     false}, /* lone surrogate escape */
    /* duplicate keys, at the top and nested */
    {"{\"type\":\"session.create\",\"type\":\"session.close\"}", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":1,\"seed\":2}}", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    /* nesting: 33 levels */
    {"{\"type\":\"session.close\",\"x\":[" D32 "]}", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    /* numbers no double or int64 holds */
    {"{\"type\":\"session.create\",\"session\":{\"seed\":1e400}}", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":99999999999999999999}}", 0, FG_PROTO_INVALID_JSON, NULL, NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"temperature\":-1e999}}", 0, FG_PROTO_INVALID_JSON, NULL, NULL, false},
    /* invalid UTF-8, even with a readable event_id */
    {"{\"type\":\"session.close\",\"event_id\":\"e\",\"x\":\"\xC0\xAF\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\xC1\xBF\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\xE0\x80\xAF\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\xF0\x80\x80\xAF\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\xED\xA0\x80\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\xED\xBF\xBF\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\xF4\x90\x80\x80\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\xF5\x80\x80\x80\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\x80\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\xFF\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"\xE2\x82\"}", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\"type\":\"session.close\",\"x\":\"ok\"}\xF0\x9F\x98", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    {"{\xFF", 0, FG_PROTO_INVALID_UTF8, NULL, NULL, false},
    /* size comes first, before UTF-8 */
    {"{\"type\":\"session.close\",\"x\":\"\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF"
     "\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF"
     "\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF"
     "\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF"
     "\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF"
     "\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF"
     "\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF"
     "\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\"}",
     0, FG_PROTO_FRAME_TOO_LARGE, NULL, NULL, true},
    /* not an event */
    {"[1,2]", 0, FG_PROTO_INVALID_EVENT, NULL, NULL, false},
    {"\"session.create\"", 0, FG_PROTO_INVALID_EVENT, NULL, NULL, false},
    {"42", 0, FG_PROTO_INVALID_EVENT, NULL, NULL, false},
    {"null", 0, FG_PROTO_INVALID_EVENT, NULL, NULL, false},
    {"{}", 0, FG_PROTO_INVALID_EVENT, "type", NULL, false},
    {"{\"type\":5}", 0, FG_PROTO_INVALID_EVENT, "type", NULL, false},
    {"{\"type\":null,\"event_id\":\"e7\"}", 0, FG_PROTO_INVALID_EVENT, "type", "e7", false},
    {"{\"type\":[\"session.create\"]}", 0, FG_PROTO_INVALID_EVENT, "type", NULL, false},
    {"{\"type\":\"session.destroy\"}", 0, FG_PROTO_UNKNOWN_EVENT_TYPE, "type", NULL, false},
    {"{\"type\":\"Session.Create\",\"event_id\":\"e1\"}", 0, FG_PROTO_UNKNOWN_EVENT_TYPE, "type", "e1", false},
    {"{\"type\":\"session.create\\u0000x\"}", 0, FG_PROTO_UNKNOWN_EVENT_TYPE, "type", NULL, false},
    {"{\"type\":\"session.created\"}", 0, FG_PROTO_UNKNOWN_EVENT_TYPE, "type", NULL, false}, /* a server event */
    {"{\"type\":\"\"}", 0, FG_PROTO_UNKNOWN_EVENT_TYPE, "type", NULL, false},
    /* event_id */
    {"{\"type\":\"session.close\",\"event_id\":5}", 0, FG_PROTO_INVALID_TYPE, "event_id", NULL, false},
    {"{\"type\":\"session.close\",\"event_id\":\"0123456789012345678901234567890123456789012345678901234567890123x\"}",
     0, FG_PROTO_INVALID_VALUE, "event_id", NULL, false},
    {"{\"type\":\"session.close\",\"event_id\":\"a\\u0000b\"}", 0, FG_PROTO_INVALID_VALUE, "event_id", NULL, false},
    {"{\"event_id\":{},\"type\":\"nope\"}", 0, FG_PROTO_INVALID_TYPE, "event_id", NULL, false},
    /* session.create */
    {"{\"type\":\"session.create\",\"event_id\":\"e\",\"session\":[]}", 0, FG_PROTO_INVALID_TYPE, "session", "e",
     false},
    {"{\"type\":\"session.create\",\"session\":\"x\"}", 0, FG_PROTO_INVALID_TYPE, "session", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"instructions\":5}}", 0, FG_PROTO_INVALID_TYPE, "session.instructions",
     NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"instructions\":\"123456789\"}}", 0, FG_PROTO_INVALID_VALUE,
     "session.instructions", NULL, true},
    {"{\"type\":\"session.create\",\"session\":{\"instructions\":\"a\\u0000b\"}}", 0, FG_PROTO_INVALID_VALUE,
     "session.instructions", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"temperature\":\"hot\"}}", 0, FG_PROTO_INVALID_TYPE,
     "session.temperature", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"temperature\":true}}", 0, FG_PROTO_INVALID_TYPE,
     "session.temperature", NULL, false},
    {"{\"type\":\"session.create\",\"event_id\":\"t\",\"session\":{\"temperature\":2.0001}}", 0, FG_PROTO_INVALID_VALUE,
     "session.temperature", "t", false},
    {"{\"type\":\"session.create\",\"session\":{\"temperature\":-0.1}}", 0, FG_PROTO_INVALID_VALUE,
     "session.temperature", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"top_p\":0}}", 0, FG_PROTO_INVALID_VALUE, "session.top_p", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"top_p\":1.01}}", 0, FG_PROTO_INVALID_VALUE, "session.top_p", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"top_p\":[]}}", 0, FG_PROTO_INVALID_TYPE, "session.top_p", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"top_k\":1000001}}", 0, FG_PROTO_INVALID_VALUE, "session.top_k", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"top_k\":-1}}", 0, FG_PROTO_INVALID_VALUE, "session.top_k", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"top_k\":3.5}}", 0, FG_PROTO_INVALID_TYPE, "session.top_k", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"min_p\":1}}", 0, FG_PROTO_INVALID_VALUE, "session.min_p", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"min_p\":-0.5}}", 0, FG_PROTO_INVALID_VALUE, "session.min_p", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":-1}}", 0, FG_PROTO_INVALID_VALUE, "session.seed", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":9007199254740993}}", 0, FG_PROTO_INVALID_VALUE, "session.seed",
     NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":9223372036854775807}}", 0, FG_PROTO_INVALID_VALUE,
     "session.seed", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":1e300}}", 0, FG_PROTO_INVALID_VALUE, "session.seed", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":1.5}}", 0, FG_PROTO_INVALID_TYPE, "session.seed", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"seed\":\"1\"}}", 0, FG_PROTO_INVALID_TYPE, "session.seed", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"max_output_tokens\":0}}", 0, FG_PROTO_INVALID_VALUE,
     "session.max_output_tokens", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"max_output_tokens\":32769}}", 0, FG_PROTO_INVALID_VALUE,
     "session.max_output_tokens", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"max_output_tokens\":101}}", 0, FG_PROTO_INVALID_VALUE,
     "session.max_output_tokens", NULL, true},
    {"{\"type\":\"session.create\",\"session\":{\"max_output_tokens\":\"infinite\"}}", 0, FG_PROTO_INVALID_VALUE,
     "session.max_output_tokens", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"max_output_tokens\":true}}", 0, FG_PROTO_INVALID_TYPE,
     "session.max_output_tokens", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}}", 0, FG_PROTO_INVALID_VALUE,
     "session.stop", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"stop\":[\"a\",\"\"]}}", 0, FG_PROTO_INVALID_VALUE, "session.stop[1]",
     NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"stop\":[1]}}", 0, FG_PROTO_INVALID_TYPE, "session.stop[0]", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"stop\":[null]}}", 0, FG_PROTO_INVALID_TYPE, "session.stop[0]", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"stop\":[\"0123456789012345678901234567890123456789012345678901234"
     "567890123x\"]}}",
     0, FG_PROTO_INVALID_VALUE, "session.stop[0]", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"stop\":{}}}", 0, FG_PROTO_INVALID_TYPE, "session.stop", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"stop\":\"\"}}", 0, FG_PROTO_INVALID_VALUE, "session.stop", NULL,
     false},
    {"{\"type\":\"session.create\",\"session\":{\"stop\":[\"a\\u0000\"]}}", 0, FG_PROTO_INVALID_VALUE,
     "session.stop[0]", NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"fork_from\":\"\"}}", 0, FG_PROTO_INVALID_VALUE, "session.fork_from",
     NULL, false},
    {"{\"type\":\"session.create\",\"session\":{\"fork_from\":7}}", 0, FG_PROTO_INVALID_TYPE, "session.fork_from", NULL,
     false},
    /* the first bad field in the documented order wins */
    {"{\"type\":\"session.create\",\"session\":{\"stop\":5,\"temperature\":9}}", 0, FG_PROTO_INVALID_VALUE,
     "session.temperature", NULL, false},
    /* session.update */
    {"{\"type\":\"session.update\",\"event_id\":\"u\"}", 0, FG_PROTO_MISSING_FIELD, "session", "u", false},
    {"{\"type\":\"session.update\",\"session\":null}", 0, FG_PROTO_MISSING_FIELD, "session", NULL, false},
    {"{\"type\":\"session.update\",\"session\":{\"fork_from\":\"sess_1\"}}", 0, FG_PROTO_INVALID_VALUE,
     "session.fork_from", NULL, false},
    {"{\"type\":\"session.update\",\"session\":{\"top_k\":\"many\"}}", 0, FG_PROTO_INVALID_TYPE, "session.top_k", NULL,
     false},
    /* session.resume */
    {"{\"type\":\"session.resume\",\"last_sequence_number\":1}", 0, FG_PROTO_MISSING_FIELD, "session_id", NULL, false},
    {"{\"type\":\"session.resume\",\"session_id\":5,\"last_sequence_number\":1}", 0, FG_PROTO_INVALID_TYPE,
     "session_id", NULL, false},
    {"{\"type\":\"session.resume\",\"session_id\":\"\",\"last_sequence_number\":1}", 0, FG_PROTO_INVALID_VALUE,
     "session_id", NULL, false},
    {"{\"type\":\"session.resume\",\"session_id\":\"s\"}", 0, FG_PROTO_MISSING_FIELD, "last_sequence_number", NULL,
     false},
    {"{\"type\":\"session.resume\",\"session_id\":\"s\",\"last_sequence_number\":-1}", 0, FG_PROTO_INVALID_VALUE,
     "last_sequence_number", NULL, false},
    {"{\"type\":\"session.resume\",\"session_id\":\"s\",\"last_sequence_number\":\"5\"}", 0, FG_PROTO_INVALID_TYPE,
     "last_sequence_number", NULL, false},
    {"{\"type\":\"session.resume\",\"session_id\":\"s\",\"last_sequence_number\":9007199254740993}", 0,
     FG_PROTO_INVALID_VALUE, "last_sequence_number", NULL, false},
    {"{\"type\":\"session.resume\",\"session_id\":\"s\",\"last_sequence_number\":1,\"allow_gap\":\"yes\"}", 0,
     FG_PROTO_INVALID_TYPE, "allow_gap", NULL, false},
    /* conversation.item.create */
    {"{\"type\":\"conversation.item.create\",\"event_id\":\"i\"}", 0, FG_PROTO_MISSING_FIELD, "item", "i", false},
    {"{\"type\":\"conversation.item.create\",\"item\":[]}", 0, FG_PROTO_INVALID_TYPE, "item", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{}}", 0, FG_PROTO_MISSING_FIELD, "item.type", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":1}}", 0, FG_PROTO_INVALID_TYPE, "item.type", NULL,
     false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"audio\"}}", 0, FG_PROTO_INVALID_VALUE, "item.type",
     NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\\u0000\"}}", 0, FG_PROTO_INVALID_VALUE,
     "item.type", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"content\":[]}}", 0,
     FG_PROTO_MISSING_FIELD, "item.role", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"tool\"}}", 0,
     FG_PROTO_INVALID_VALUE, "item.role", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\"}}", 0,
     FG_PROTO_MISSING_FIELD, "item.content", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":\"hi\"}}", 0,
     FG_PROTO_INVALID_TYPE, "item.content", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":[]}}", 0,
     FG_PROTO_INVALID_VALUE, "item.content", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":[{},{},{},"
     "{},{},{},{},{},{},{},{},{},{},{},{},{},{}]}}",
     0, FG_PROTO_INVALID_VALUE, "item.content", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":[\"x\"]}}", 0,
     FG_PROTO_INVALID_TYPE, "item.content[0]", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":[{}]}}", 0,
     FG_PROTO_MISSING_FIELD, "item.content[0].type", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":"
     "[{\"type\":\"image\",\"text\":\"\"}]}}",
     0, FG_PROTO_INVALID_VALUE, "item.content[0].type", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":"
     "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\"}]}}",
     0, FG_PROTO_MISSING_FIELD, "item.content[1].text", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":"
     "[{\"type\":\"text\",\"text\":5}]}}",
     0, FG_PROTO_INVALID_TYPE, "item.content[0].text", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":"
     "[{\"type\":\"text\",\"text\":\"123456789\"}]}}",
     0, FG_PROTO_INVALID_VALUE, "item.content[0].text", NULL, true},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\",\"role\":\"user\",\"content\":"
     "[{\"type\":\"text\",\"text\":\"nul\\u0000here\"}]}}",
     0, FG_PROTO_INVALID_VALUE, "item.content[0].text", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"\"}}",
     0, FG_PROTO_MISSING_FIELD, "item.call_id", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call\",\"call_id\":\"c\","
     "\"name\":\"get weather\",\"arguments\":\"\"}}",
     0, FG_PROTO_INVALID_VALUE, "item.name", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"\","
     "\"arguments\":\"\"}}",
     0, FG_PROTO_INVALID_VALUE, "item.name", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\"}}",
     0, FG_PROTO_MISSING_FIELD, "item.arguments", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\","
     "\"arguments\":{}}}",
     0, FG_PROTO_INVALID_TYPE, "item.arguments", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call_output\",\"call_id\":\"c\"}}", 0,
     FG_PROTO_MISSING_FIELD, "item.output", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call_output\",\"call_id\":\"0123456789"
     "012345678901234567890123456789012345678901234567890123x\",\"output\":\"\"}}",
     0, FG_PROTO_INVALID_VALUE, "item.call_id", NULL, false},
    {"{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"function_call_output\",\"call_id\":\"c\","
     "\"output\":\"123456789\"}}",
     0, FG_PROTO_INVALID_VALUE, "item.output", NULL, true},
    /* response.create */
    {"{\"type\":\"response.create\",\"response\":5}", 0, FG_PROTO_INVALID_TYPE, "response", NULL, false},
    {"{\"type\":\"response.create\",\"response\":{\"generate\":\"no\"}}", 0, FG_PROTO_INVALID_TYPE, "response.generate",
     NULL, false},
    {"{\"type\":\"response.create\",\"response\":{\"generate\":0}}", 0, FG_PROTO_INVALID_TYPE, "response.generate",
     NULL, false},
    {"{\"type\":\"response.create\",\"event_id\":\"r\",\"response\":{\"temperature\":3}}", 0, FG_PROTO_INVALID_VALUE,
     "response.temperature", "r", false},
    {"{\"type\":\"response.create\",\"response\":{\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}}", 0,
     FG_PROTO_INVALID_VALUE, "response.stop", NULL, false},
    {"{\"type\":\"response.create\",\"response\":{\"max_output_tokens\":-5}}", 0, FG_PROTO_INVALID_VALUE,
     "response.max_output_tokens", NULL, false},
    {"{\"type\":\"response.create\",\"response\":{\"seed\":{}}}", 0, FG_PROTO_INVALID_TYPE, "response.seed", NULL,
     false},
    /* response.cancel */
    {"{\"type\":\"response.cancel\",\"response_id\":\"\"}", 0, FG_PROTO_INVALID_VALUE, "response_id", NULL, false},
    {"{\"type\":\"response.cancel\",\"response_id\":5}", 0, FG_PROTO_INVALID_TYPE, "response_id", NULL, false},
};
#define N_BAD (sizeof bad_cases / sizeof bad_cases[0])

static void test_bad(void)
{
    fg_proto_limits small = {.max_message_bytes = 200,
                             .max_instructions_bytes = 8,
                             .max_text_bytes = 8,
                             .max_output_tokens = 100,
                             .max_depth = 0 /* default */};
    for (size_t i = 0; i < N_BAD; i++) {
        const bad_case *bc = &bad_cases[i];
        const size_t len = bc->len ? bc->len : strlen(bc->json);
        fg_client_event ev;
        fg_proto_error err;
        memset(&err, 0x55, sizeof err); /* everything must be written */
        fg_err e = fg_proto_parse(bc->json, len, bc->small_limits ? &small : NULL, &ev, &err);
        CHECK_MSG(e == FG_ERR_INVALID_ARG, "bad case %zu accepted: %.120s", i, bc->json);
        if (e != FG_ERR_INVALID_ARG) {
            fg_client_event_free(&ev);
            continue;
        }
        CHECK(ev.root_ == NULL && ev.type == 0);
        CHECK_MSG(err.code == bc->code, "bad case %zu: code %s, expected %s (%s): %.120s", i,
                  fg_proto_error_code_name(err.code), fg_proto_error_code_name(bc->code), err.message, bc->json);
        const char *want_param = bc->param ? bc->param : "";
        CHECK_MSG(strcmp(err.param, want_param) == 0, "bad case %zu: param \"%s\", expected \"%s\": %.120s", i,
                  err.param, want_param, bc->json);
        CHECK_MSG(err.has_event_id == (bc->event_id != NULL), "bad case %zu: event_id echo %d", i, err.has_event_id);
        if (bc->event_id && err.has_event_id)
            CHECK(strcmp(err.event_id, bc->event_id) == 0);
        CHECK_MSG(err.message[0] != '\0' && memchr(err.message, '\0', sizeof err.message), "bad case %zu: message", i);
        /* The error must be writable as an event that parses back. */
        fg_proto_buf b;
        fg_proto_buf_init(&b, 0);
        CHECK(fg_proto_write_error(&b, 0, 1, &err, 0) == FG_OK);
        json_t *j = json_loads(fg_proto_buf_text(&b), JSON_REJECT_DUPLICATES, NULL);
        CHECK_MSG(j != NULL, "bad case %zu: error event not JSON: %s", i, fg_proto_buf_text(&b));
        json_decref(j);
       fg_proto_buf_free(&b);
    }
}

/* Limits at their edges: exactly at the limit passes, one over fails. */
static void test_limits(void)
{
    fg_proto_limits lim;
    fg_proto_limits_default(&lim);
    CHECK(lim.max_message_bytes == 1u << 20 && lim.max_depth == 32 && lim.max_output_tokens == 32768);

    /* a message of exactly max_message_bytes, and one byte more */
    const size_t max = lim.max_message_bytes;
    char *msg = malloc(max + 2);
    const char *head = "{\"type\":\"session.close\",\"pad\":\"";
    size_t hl = strlen(head);
    memcpy(msg, head, hl);
    memset(msg + hl, 'a', max - hl - 2);
    memcpy(msg + max - 2, "\"}", 2);
    fg_client_event ev;
    fg_proto_error err;
    CHECK(fg_proto_parse(msg, max, NULL, &ev, &err) == FG_OK);
    fg_client_event_free(&ev);
    memmove(msg + hl + 1, msg + hl, max - hl);
    CHECK(fg_proto_parse(msg, max + 1, NULL, &ev, &err) == FG_ERR_INVALID_ARG && err.code == FG_PROTO_FRAME_TOO_LARGE &&
          err.param[0] == '\0');
    free(msg);

    /* instructions of exactly the default limit pass; text parts of 256 KiB pass */
    size_t n = lim.max_instructions_bytes;
    size_t cap = n + 200;
    msg = malloc(cap);
    int k = snprintf(msg, cap, "{\"type\":\"session.create\",\"session\":{\"instructions\":\"");
    memset(msg + k, 'x', n);
    snprintf(msg + k + n, cap - (size_t)k - n, "\"}}");
    CHECK(fg_proto_parse(msg, strlen(msg), NULL, &ev, &err) == FG_OK && ev.u.session.instructions.len == n);
    fg_client_event_free(&ev);
    memset(msg + k, 'x', n);
    snprintf(msg + k + n, cap - (size_t)k - n, "x\"}}");
    CHECK(fg_proto_parse(msg, strlen(msg), NULL, &ev, &err) == FG_ERR_INVALID_ARG &&
          err.code == FG_PROTO_INVALID_VALUE && strcmp(err.param, "session.instructions") == 0);
    free(msg);

    /* deep nesting far past the limit fails fast with invalid_json, without recursion */
    const size_t depth = 200000;
    msg = malloc(depth * 2 + 64);
    size_t o = (size_t)sprintf(msg, "{\"type\":\"session.close\",\"x\":");
    memset(msg + o, '[', depth);
    o += depth;
    memset(msg + o, ']', depth);
    o += depth;
    msg[o++] = '}';
    CHECK(fg_proto_parse(msg, o, NULL, &ev, &err) == FG_ERR_INVALID_ARG && err.code == FG_PROTO_INVALID_JSON);
    /* brackets inside strings do not count */
    o = (size_t)sprintf(msg, "{\"type\":\"session.close\",\"x\":\"");
    memset(msg + o, '[', 1000);
    o += 1000;
    o += (size_t)sprintf(msg + o, "\\\"\"}");
    CHECK(fg_proto_parse(msg, o, NULL, &ev, &err) == FG_OK);
    fg_client_event_free(&ev);
    free(msg);

    /* a custom depth limit */
    fg_proto_limits shallow = {.max_depth = 2};
    const char *d2 = "{\"type\":\"session.close\",\"x\":[1]}";
    const char *d3 = "{\"type\":\"session.close\",\"x\":[[1]]}";
    CHECK(fg_proto_parse(d2, strlen(d2), &shallow, &ev, &err) == FG_OK);
    fg_client_event_free(&ev);
    CHECK(fg_proto_parse(d3, strlen(d3), &shallow, &ev, &err) == FG_ERR_INVALID_ARG &&
          err.code == FG_PROTO_INVALID_JSON);

    /* 16 content parts pass; a buffer without a NUL terminator is fine */
    char parts[2048];
    o = (size_t)sprintf(parts, "{\"type\":\"conversation.item.create\",\"item\":{\"type\":\"message\","
                               "\"role\":\"user\",\"content\":[");
    for (int i = 0; i < 16; i++)
        o += (size_t)sprintf(parts + o, "%s{\"type\":\"text\",\"text\":\"p%d\"}", i ? "," : "", i);
    o += (size_t)sprintf(parts + o, "]}}");
    parts[o] = 'X'; /* garbage after len must not be read */
    CHECK(fg_proto_parse(parts, o, NULL, &ev, &err) == FG_OK && ev.u.item.n_content == 16 &&
          str_is(ev.u.item.content[15].text, "p15"));
    fg_client_event_free(&ev);

    /* a NULL error pointer is allowed */
    CHECK(fg_proto_parse("{}", 2, NULL, &ev, NULL) == FG_ERR_INVALID_ARG);
}

/* ---- writers ---- */

static json_t *load(const fg_proto_buf *b)
{
    json_error_t je;
    json_t *j = json_loads(fg_proto_buf_text(b), JSON_REJECT_DUPLICATES, &je);
    CHECK_MSG(j != NULL, "writer output is not JSON (%s): %s", je.text, fg_proto_buf_text(b));
    CHECK_MSG(strlen(fg_proto_buf_text(b)) == b->len, "len %zu vs text", b->len);
    return j;
}

static const char *jstr(json_t *j, const char *path)
{
    /* path: "a.b.c" through objects only */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = j;
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, "."))
        v = json_object_get(v, tok);
    return v && json_is_string(v) ? json_string_value(v) : NULL;
}

static json_t *jget(json_t *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *v = j;
    for (char *tok = strtok(buf, "."); tok && v; tok = strtok(NULL, "."))
        v = json_object_get(v, tok);
    return v;
}

static void check_head(json_t *j, const char *type, uint64_t seq, const char *evt)
{
    CHECK_MSG(jstr(j, "type") && strcmp(jstr(j, "type"), type) == 0, "type %s", type);
    CHECK(jstr(j, "event_id") && strcmp(jstr(j, "event_id"), evt) == 0);
    CHECK(json_integer_value(json_object_get(j, "sequence_number")) == (json_int_t)seq);
}

/* Collected writer outputs by type, for the docs comparison. */
static struct {
    char type[64];
    strset paths;
} writer_paths[32];
static int n_writer_types;

static void record_paths(json_t *j)
{
    const char *type = jstr(j, "type");
    if (!type)
        return;
    int k = 0;
    while (k < n_writer_types && strcmp(writer_paths[k].type, type) != 0)
        k++;
    if (k == n_writer_types) {
        if (n_writer_types == 32)
            return;
        snprintf(writer_paths[k].type, sizeof writer_paths[k].type, "%s", type);
        n_writer_types++;
    }
    key_paths(j, "", &writer_paths[k].paths);
}

static fg_proto_str S(const char *s)
{
    return (fg_proto_str){s, strlen(s)};
}

static void test_writers(void)
{
    fg_proto_buf b;
    fg_proto_buf_init(&b, 16);
    CHECK(strcmp(fg_proto_buf_text(&b), "") == 0);

    /* session.created / updated / resumed */
    fg_proto_session_info si = {.id = "sess_abc",
                                .instructions = S("Be \"brief\".\n"),
                                .temperature = 0.7,
                                .top_p = 0.95,
                                .min_p = 0.05,
                                .top_k = 40,
                                .has_seed = true,
                                .seed = UINT64_C(1) << 53,
                                .max_output_tokens = 512,
                                .n_stop = 2,
                                .stop = {S("\nUser:"), S("END")}};
    CHECK(fg_proto_write_session_created(&b, 1, 1, &si) == FG_OK);
    CHECK(b.data && fg_proto_buf_text(&b) == b.data + 16);
    CHECK(strstr(fg_proto_buf_text(&b), "\"temperature\":0.7,") != NULL); /* shortest round-trip form */
    json_t *j = load(&b);
    check_head(j, "session.created", 1, "evt_1");
    CHECK(strcmp(jstr(j, "session.id"), "sess_abc") == 0);
    CHECK(strcmp(jstr(j, "session.object"), "realtime.session") == 0);
    CHECK(strcmp(jstr(j, "session.instructions"), "Be \"brief\".\n") == 0);
    CHECK(json_real_value(jget(j, "session.temperature")) == 0.7);
    CHECK(json_real_value(jget(j, "session.top_p")) == 0.95);
    CHECK(json_real_value(jget(j, "session.min_p")) == 0.05);
    CHECK(json_integer_value(jget(j, "session.top_k")) == 40);
    CHECK(json_integer_value(jget(j, "session.seed")) == (json_int_t)1 << 53);
    CHECK(json_integer_value(jget(j, "session.max_output_tokens")) == 512);
    json_t *stop = jget(j, "session.stop");
    CHECK(json_array_size(stop) == 2 && strcmp(json_string_value(json_array_get(stop, 0)), "\nUser:") == 0);
    record_paths(j);
    json_decref(j);

    si.has_seed = false;
    si.n_stop = 0;
    si.temperature = 0;
    si.top_p = 1;
    CHECK(fg_proto_write_session_updated(&b, 2, 2, &si) == FG_OK);
    j = load(&b);
    check_head(j, "session.updated", 2, "evt_2");
    CHECK(json_is_null(jget(j, "session.seed")) && json_array_size(jget(j, "session.stop")) == 0);
    CHECK(json_number_value(jget(j, "session.temperature")) == 0 && json_number_value(jget(j, "session.top_p")) == 1);
    record_paths(j);
    json_decref(j);

    CHECK(fg_proto_write_session_resumed(&b, 43, 43, &si) == FG_OK);
    j = load(&b);
    check_head(j, "session.resumed", 43, "evt_43");
    record_paths(j);
    json_decref(j);

    /* non-finite doubles become null, never "nan" */
    si.temperature = NAN;
    si.top_p = INFINITY;
    CHECK(fg_proto_write_session_updated(&b, 3, 3, &si) == FG_OK);
    j = load(&b);
    CHECK(json_is_null(jget(j, "session.temperature")) && json_is_null(jget(j, "session.top_p")));
    json_decref(j);

    /* conversation.item.added, each item type */
    fg_proto_item msg = {
        .type = FG_PROTO_ITEM_MESSAGE,
        .id = S("item_1"),
        .role = FG_PROTO_ROLE_USER,
        .n_content = 2,
        .content = {{FG_PROTO_PART_INPUT_TEXT, S("What is the weather?")}, {FG_PROTO_PART_TEXT, S("second")}}};
    CHECK(fg_proto_write_item_added(&b, 3, 3, &msg) == FG_OK);
    j = load(&b);
    check_head(j, "conversation.item.added", 3, "evt_3");
    CHECK(strcmp(jstr(j, "item.id"), "item_1") == 0 && strcmp(jstr(j, "item.type"), "message") == 0 &&
          strcmp(jstr(j, "item.role"), "user") == 0);
    json_t *content = jget(j, "item.content");
    CHECK(json_array_size(content) == 2);
    CHECK(strcmp(jstr(json_array_get(content, 1), "type"), "text") == 0 &&
          strcmp(jstr(json_array_get(content, 1), "text"), "second") == 0);
    record_paths(j);
    json_decref(j);

    fg_proto_item call = {.type = FG_PROTO_ITEM_FUNCTION_CALL,
                          .id = S("item_2"),
                          .call_id = S("call_1"),
                          .name = S("get_weather"),
                          .arguments = S("{\"city\":\"Paris\"}")};
    CHECK(fg_proto_write_item_added(&b, 4, 4, &call) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "item.type"), "function_call") == 0 && strcmp(jstr(j, "item.call_id"), "call_1") == 0 &&
          strcmp(jstr(j, "item.name"), "get_weather") == 0 &&
          strcmp(jstr(j, "item.arguments"), "{\"city\":\"Paris\"}") == 0);
    CHECK(jget(j, "item.role") == NULL && jget(j, "item.content") == NULL);
    record_paths(j);
    json_decref(j);

    fg_proto_item out = {.type = FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT,
                         .id = S("item_3"),
                         .call_id = S("call_1"),
                         .output = S("{\"temp_c\":18}")};
    CHECK(fg_proto_write_item_added(&b, 5, 5, &out) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "item.type"), "function_call_output") == 0 &&
          strcmp(jstr(j, "item.output"), "{\"temp_c\":18}") == 0 && jget(j, "item.name") == NULL);
    record_paths(j);
    json_decref(j);

    /* response.created */
    CHECK(fg_proto_write_response_created(&b, 6, 6, "resp_3") == FG_OK);
    j = load(&b);
    check_head(j, "response.created", 6, "evt_6");
    CHECK(strcmp(jstr(j, "response.id"), "resp_3") == 0 &&
          strcmp(jstr(j, "response.object"), "realtime.response") == 0 &&
          strcmp(jstr(j, "response.status"), "in_progress") == 0);
    record_paths(j);
    json_decref(j);

    /* response.output_text.delta */
    CHECK(fg_proto_write_text_delta(&b, 8, 8, "resp_3", "item_4",
                                    "It is 18 \xC2\xB0"
                                    "C",
                                    12) == FG_OK);
    j = load(&b);
    check_head(j, "response.output_text.delta", 8, "evt_8");
    CHECK(strcmp(jstr(j, "response_id"), "resp_3") == 0 && strcmp(jstr(j, "item_id"), "item_4") == 0);
    CHECK(json_integer_value(json_object_get(j, "output_index")) == 0 &&
          json_integer_value(json_object_get(j, "content_index")) == 0);
    CHECK(strcmp(jstr(j, "delta"), "It is 18 \xC2\xB0"
                                   "C") == 0);
    record_paths(j);
    json_decref(j);

    /* response.done: completed with output, incomplete, cancelled, failed */
    fg_proto_item answer = {.type = FG_PROTO_ITEM_MESSAGE,
                            .id = S("item_4"),
                            .role = FG_PROTO_ROLE_ASSISTANT,
                            .n_content = 1,
                            .content = {{FG_PROTO_PART_OUTPUT_TEXT, S("It is 18 C.")}}};
    fg_proto_response_done rd = {.id = "resp_3",
                                 .status = FG_PROTO_RESPONSE_COMPLETED,
                                 .reason = "ignored for completed",
                                 .output = &answer,
                                 .n_output = 1,
                                 .usage = {.input_tokens = 251, .cached_tokens = 192, .output_tokens = 9}};
    CHECK(fg_proto_write_response_done(&b, 11, 11, &rd) == FG_OK);
    j = load(&b);
    check_head(j, "response.done", 11, "evt_11");
    CHECK(strcmp(jstr(j, "response.status"), "completed") == 0 && json_is_null(jget(j, "response.status_details")));
    CHECK(json_integer_value(jget(j, "response.usage.total_tokens")) == 260 &&
          json_integer_value(jget(j, "response.usage.input_tokens")) == 251 &&
          json_integer_value(jget(j, "response.usage.output_tokens")) == 9 &&
          json_integer_value(jget(j, "response.usage.input_token_details.cached_tokens")) == 192);
    json_t *output = jget(j, "response.output");
    CHECK(json_array_size(output) == 1 && strcmp(jstr(json_array_get(output, 0), "role"), "assistant") == 0);
    record_paths(j);
    json_decref(j);

    rd.status = FG_PROTO_RESPONSE_INCOMPLETE;
    rd.reason = "max_output_tokens";
    CHECK(fg_proto_write_response_done(&b, 20, 20, &rd) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "response.status"), "incomplete") == 0 &&
          strcmp(jstr(j, "response.status_details.type"), "incomplete") == 0 &&
          strcmp(jstr(j, "response.status_details.reason"), "max_output_tokens") == 0);
    record_paths(j);
    json_decref(j);

    rd.status = FG_PROTO_RESPONSE_CANCELLED;
    rd.reason = "client_cancelled";
    rd.n_output = 0;
    CHECK(fg_proto_write_response_done(&b, 21, 21, &rd) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "response.status_details.type"), "cancelled") == 0 &&
          strcmp(jstr(j, "response.status_details.reason"), "client_cancelled") == 0 &&
          json_array_size(jget(j, "response.output")) == 0);
    record_paths(j);
    json_decref(j);

    rd.status = FG_PROTO_RESPONSE_FAILED;
    rd.reason = NULL;
    rd.error_code = FG_PROTO_KV_UNAVAILABLE;
    rd.error_message = "no KV \"memory\"";
    CHECK(fg_proto_write_response_done(&b, 24, 24, &rd) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "response.status"), "failed") == 0 &&
          strcmp(jstr(j, "response.status_details.type"), "failed") == 0 &&
          strcmp(jstr(j, "response.status_details.error.type"), "server_error") == 0 &&
          strcmp(jstr(j, "response.status_details.error.code"), "kv_unavailable") == 0 &&
          strcmp(jstr(j, "response.status_details.error.message"), "no KV \"memory\"") == 0);
    record_paths(j);
    json_decref(j);

    /* rate_limits.updated */
    fg_proto_rate_limit rl[2] = {{"tokens", 200000, 199487, 0.15}, {"daily_tokens", 50000000, 49731002, 41388}};
    CHECK(fg_proto_write_rate_limits(&b, 7, 7, rl, 2) == FG_OK);
    j = load(&b);
    check_head(j, "rate_limits.updated", 7, "evt_7");
    json_t *rls = json_object_get(j, "rate_limits");
    CHECK(json_array_size(rls) == 2);
    CHECK(strcmp(jstr(json_array_get(rls, 0), "name"), "tokens") == 0 &&
          json_integer_value(json_object_get(json_array_get(rls, 0), "limit")) == 200000 &&
          json_integer_value(json_object_get(json_array_get(rls, 0), "remaining")) == 199487 &&
          json_number_value(json_object_get(json_array_get(rls, 0), "reset_seconds")) == 0.15);
    record_paths(j);
    json_decref(j);

    /* session.closed */
    CHECK(fg_proto_write_session_closed(&b, 30, 30, "sess_abc", "client_requested") == FG_OK);
    j = load(&b);
    check_head(j, "session.closed", 30, "evt_30");
    CHECK(strcmp(jstr(j, "session_id"), "sess_abc") == 0 && strcmp(jstr(j, "reason"), "client_requested") == 0);
    record_paths(j);
    json_decref(j);

    /* error: with param and event_id; without; with retry_after */
    fg_proto_error err;
    fg_proto_error_set(&err, FG_PROTO_INVALID_VALUE, "session.temperature", "c7", "must be in [0, %d]", 2);
    CHECK(fg_proto_write_error(&b, 12, 12, &err, 0) == FG_OK);
    j = load(&b);
    check_head(j, "error", 12, "evt_12");
    CHECK(strcmp(jstr(j, "error.type"), "invalid_request_error") == 0 &&
          strcmp(jstr(j, "error.code"), "invalid_value") == 0 &&
          strcmp(jstr(j, "error.message"), "must be in [0, 2]") == 0 &&
          strcmp(jstr(j, "error.param"), "session.temperature") == 0 && strcmp(jstr(j, "error.event_id"), "c7") == 0 &&
          json_object_get(j, "retry_after") == NULL);
    record_paths(j);
    json_decref(j);

    fg_proto_error_set(&err, FG_PROTO_RATE_LIMITED, NULL, NULL, "slow down");
    CHECK(fg_proto_write_error(&b, 0, 1, &err, 2) == FG_OK);
    j = load(&b);
    check_head(j, "error", 0, "evt_1");
    CHECK(strcmp(jstr(j, "error.type"), "rate_limit_error") == 0 && json_is_null(jget(j, "error.param")) &&
          json_is_null(jget(j, "error.event_id")) && json_integer_value(json_object_get(j, "retry_after")) == 2);
    record_paths(j);
    json_decref(j);

    /* a redirect: error.location names the session's holder */
    fg_proto_error_set(&err, FG_PROTO_SESSION_ELSEWHERE, "session_id", "r1", "held by %s", "gw-a");
    snprintf(err.location_instance, sizeof err.location_instance, "gw-a");
    snprintf(err.location_url, sizeof err.location_url, "ws://10.0.0.5:8080");
    CHECK(fg_proto_write_error(&b, 0, 3, &err, 0) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "error.code"), "session_elsewhere") == 0 &&
          strcmp(jstr(j, "error.location.instance_id"), "gw-a") == 0 &&
          strcmp(jstr(j, "error.location.url"), "ws://10.0.0.5:8080") == 0);
    record_paths(j);
    json_decref(j);
    /* and fg_proto_error_set clears it for the next error */
    fg_proto_error_set(&err, FG_PROTO_INTERNAL_ERROR, NULL, NULL, "x");
    CHECK(err.location_url[0] == 0 && err.location_instance[0] == 0);

    /* an out-of-range code is written as internal_error, never garbage */
    err.code = (fg_proto_code)999;
    CHECK(fg_proto_write_error(&b, 0, 2, &err, 0) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "error.code"), "internal_error") == 0 && strcmp(jstr(j, "error.type"), "server_error") == 0);
    json_decref(j);

    /* the OpenAI GA flow's events */
    si.ga = true;
    si.model = "gpt-realtime";
    si.tools = "[{\"type\":\"function\",\"name\":\"get_weather\"}]";
    si.tool_choice = FG_PROTO_TOOL_CHOICE_FUNCTION;
    si.tool_choice_name = "get_weather";
    CHECK(fg_proto_write_session_created(&b, 1, 1, &si) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "session.type"), "realtime") == 0 && strcmp(jstr(j, "session.model"), "gpt-realtime") == 0);
    CHECK(strcmp(jstr(j, "session.tool_choice.name"), "get_weather") == 0);
    CHECK(json_array_size(jget(j, "session.output_modalities")) == 1);
    record_paths(j);
    json_decref(j);
    const fg_proto_response_ga ga = {.conversation_id = "sess_abc", .metadata = "{\"k\":\"v\"}",
                                     .max_output_tokens = 256};
    CHECK(fg_proto_write_response_created_ga(&b, 2, 2, "resp_1", &ga) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "response.conversation_id"), "sess_abc") == 0 && strcmp(jstr(j, "response.metadata.k"), "v") == 0);
    record_paths(j);
    json_decref(j);
    fg_proto_item ai = {.type = FG_PROTO_ITEM_MESSAGE, .id = S("item_2"), .role = FG_PROTO_ROLE_ASSISTANT,
                        .status = "completed", .n_content = 1};
    ai.content[0] = (fg_proto_part){FG_PROTO_PART_OUTPUT_TEXT, S("Hello.")};
    CHECK(fg_proto_write_item_ga(&b, false, 3, 3, &ai, "item_1") == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "previous_item_id"), "item_1") == 0 && strcmp(jstr(j, "item.status"), "completed") == 0);
    record_paths(j);
    json_decref(j);
    CHECK(fg_proto_write_item_ga(&b, true, 4, 4, &ai, NULL) == FG_OK);
    j = load(&b);
    check_head(j, "conversation.item.done", 4, "evt_4");
    CHECK(json_is_null(jget(j, "previous_item_id")));
    record_paths(j);
    json_decref(j);
    CHECK(fg_proto_write_item_retrieved(&b, 5, 5, &ai) == FG_OK);
    j = load(&b);
    CHECK(json_array_size(jget(j, "item.content")) == 1);
    record_paths(j);
    json_decref(j);
    CHECK(fg_proto_write_item_deleted(&b, 6, 6, "item_1") == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "item_id"), "item_1") == 0);
    record_paths(j);
    json_decref(j);
    CHECK(fg_proto_write_item_truncated(&b, 7, 7, "item_2", 0, 0) == FG_OK);
    j = load(&b);
    CHECK(json_integer_value(jget(j, "audio_end_ms")) == 0);
    record_paths(j);
    json_decref(j);
    fg_proto_item empty = ai; /* at output_item.added the message has no content yet */
    empty.n_content = 0;
    empty.status = "in_progress";
    CHECK(fg_proto_write_output_item(&b, false, 8, 8, "resp_1", &empty) == FG_OK);
    j = load(&b);
    CHECK(json_integer_value(jget(j, "output_index")) == 0);
    record_paths(j);
    json_decref(j);
    CHECK(fg_proto_write_output_item(&b, true, 9, 9, "resp_1", &ai) == FG_OK);
    j = load(&b);
    record_paths(j);
    json_decref(j);
    for (int done = 0; done < 2; done++) {
        CHECK(fg_proto_write_content_part(&b, done, 10, 10, "resp_1", "item_2", "Hi\x01", 3) == FG_OK);
        j = load(&b);
        CHECK(strcmp(jstr(j, "part.type"), "text") == 0 && strcmp(jstr(j, "part.text"), "Hi\x01") == 0);
        record_paths(j);
        json_decref(j);
    }
    /* the beta names for old clients: the type replaced in place, the rest intact */
    CHECK(fg_proto_write_item_ga(&b, false, 3, 3, &ai, "item_1") == FG_OK);
    CHECK(fg_proto_buf_rename_type(&b, "conversation.item.created") == FG_OK);
    j = load(&b);
    check_head(j, "conversation.item.created", 3, "evt_3");
    CHECK(strcmp(jstr(j, "item.id"), "item_2") == 0);
    json_decref(j);
    CHECK(fg_proto_write_text_delta(&b, 4, 4, "resp_1", "item_2", "x", 1) == FG_OK);
    CHECK(fg_proto_buf_rename_type(&b, "response.text.delta") == FG_OK);
    j = load(&b);
    check_head(j, "response.text.delta", 4, "evt_4");
    CHECK(strcmp(jstr(j, "delta"), "x") == 0);
    json_decref(j);
    CHECK(fg_proto_write_text_done(&b, 11, 11, "resp_1", "item_2", "Hello.", 6) == FG_OK);
    j = load(&b);
    CHECK(strcmp(jstr(j, "text"), "Hello.") == 0);
    record_paths(j);
    json_decref(j);
    fg_proto_response_done gd = {.id = "resp_1", .ga = &ga, .status = FG_PROTO_RESPONSE_COMPLETED, .output = &ai,
                                 .n_output = 1, .usage = {10, 4, 2}};
    CHECK(fg_proto_write_response_done(&b, 12, 12, &gd) == FG_OK);
    j = load(&b);
    CHECK(json_integer_value(jget(j, "response.max_output_tokens")) == 256);
    record_paths(j);
    json_decref(j);

    fg_proto_buf_free(&b);
}

/* ---- escaping and UTF-8 ---- */

/* Writes a delta of bytes[0..n) and returns the decoded delta (malloc'd). */
static char *delta_roundtrip(fg_proto_buf *b, const char *bytes, size_t n, size_t *out_len)
{
    if (fg_proto_write_text_delta(b, 1, 1, "r", "i", bytes, n) != FG_OK)
        return NULL;
    json_t *j = json_loads(fg_proto_buf_text(b), JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, NULL);
    CHECK_MSG(j != NULL, "delta not JSON: %s", fg_proto_buf_text(b));
    if (!j)
        return NULL;
    json_t *d = json_object_get(j, "delta");
    *out_len = json_string_length(d);
    char *s = malloc(*out_len + 1);
    memcpy(s, json_string_value(d), *out_len + 1);
    json_decref(j);
    return s;
}

#define FFFD "\xEF\xBF\xBD"

static void test_escaping(void)
{
    static const struct {
        const char *in;
        size_t n;
        const char *want; /* decoded */
        size_t want_n;
    } cases[] = {
        {"plain ascii", 11, "plain ascii", 11},
        {"", 0, "", 0},
        {"q\"b\\s/", 6, "q\"b\\s/", 6},
        {"\n\r\t\b\f\x01\x1f\x7f", 8, "\n\r\t\b\f\x01\x1f\x7f", 8},
        {"nul\0in", 6, "nul\0in", 6},
        {"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 14, "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", 14},
        {"\xE2\x80\xA8", 3, "\xE2\x80\xA8", 3}, /* U+2028 is valid JSON as is */
        {"a\xFF"
         "b",
         3, "a" FFFD "b", 5},
        {"\x80\x80", 2, FFFD FFFD, 6},
        {"\xC0\xAF", 2, FFFD FFFD, 6}, /* overlong: C0 never starts a character */
        {"\xE0\x80\xAF", 3, FFFD FFFD FFFD, 9}, /* overlong 3-byte */
        {"\xED\xA0\x80", 3, FFFD FFFD FFFD, 9}, /* surrogate */
        {"\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD, 12}, /* > U+10FFFF */
        {"\xE2\x82", 2, FFFD, 3}, /* incomplete at the end: one subpart */
        {"\xF0\x9F\x98", 3, FFFD, 3},
        {"\xE2\x82x", 3, FFFD "x", 4}, /* broken by the next byte */
        {"\xF0\x9F\x98\xF0\x9F\x98\x80", 7, FFFD "\xF0\x9F\x98\x80", 7},
        {"\xE2\x82\xE2\x82\xAC", 5, FFFD "\xE2\x82\xAC", 6},
    };
    fg_proto_buf b;
    fg_proto_buf_init(&b, 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = 0;
        char *got = delta_roundtrip(&b, cases[i].in, cases[i].n, &n);
        CHECK_MSG(got && n == cases[i].want_n && memcmp(got, cases[i].want, n) == 0, "escape case %zu", i);
        CHECK(fg_proto_utf8_valid(fg_proto_buf_text(&b), b.len));
        free(got);
    }
    /* the exact escapes */
    CHECK(fg_proto_write_text_delta(&b, 1, 1, "r", "i", "\x01\"\\\n", 4) == FG_OK);
    CHECK(strstr(fg_proto_buf_text(&b), "\"delta\":\"\\u0001\\\"\\\\\\n\"") != NULL);

    /* the hot path stops allocating once the buffer fits */
    char tok[64];
    memset(tok, 'x', sizeof tok);
    CHECK(fg_proto_write_text_delta(&b, 1, 1, "resp_1", "item_1", tok, sizeof tok) == FG_OK);
    char *data = b.data;
    size_t cap = b.cap;
    for (uint64_t s = 2; s < 1000; s++)
        CHECK(fg_proto_write_text_delta(&b, s, s, "resp_1", "item_1", tok, sizeof tok) == FG_OK);
    CHECK(b.data == data && b.cap == cap);
    fg_proto_buf_free(&b);
}

static void test_utf8(void)
{
    CHECK(fg_proto_utf8_valid("", 0));
    CHECK(fg_proto_utf8_valid("a\0b", 3));
    CHECK(fg_proto_utf8_valid(
        "\x7f\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xF0\x90\x80\x80\xF4\x8F\xBF\xBF", 22));
    const char *bad[] = {"\xC0\x80",
                         "\xC1\xBF",
                         "\xE0\x9F\xBF",
                         "\xED\xA0\x80",
                         "\xED\xBF\xBF",
                         "\xF0\x8F\xBF\xBF",
                         "\xF4\x90\x80\x80",
                         "\xF5\x80\x80\x80",
                         "\xF8\x88\x80\x80\x80",
                         "\xFE",
                         "\xFF",
                         "\x80",
                         "\xBF",
                         "\xC2",
                         "\xE2\x82",
                         "\xF0\x9F\x98",
                         "\xC2\xC2\x80",
                         "abcdefgh\xC3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(!fg_proto_utf8_valid(bad[i], strlen(bad[i])), "bad utf8 %zu accepted", i);
}

/* Feeds chunks through the carry into deltas, flushes, and returns the joined decoded text. */
static size_t carry_join(const char *const *chunks, const size_t *lens, int n, char *joined)
{
    fg_proto_buf b;
    fg_proto_buf_init(&b, 0);
    fg_proto_utf8_carry c = {0};
    size_t total = 0;
    char tmp[256];
    for (int i = 0; i <= n; i++) {
        size_t k = i < n ? fg_proto_utf8_carry_feed(&c, chunks[i], lens[i], tmp) : fg_proto_utf8_carry_flush(&c, tmp);
        size_t dn = 0;
        char *d = delta_roundtrip(&b, tmp, k, &dn);
        if (d) {
            memcpy(joined + total, d, dn);
            total += dn;
            free(d);
        }
    }
    CHECK(c.len == 0);
    fg_proto_buf_free(&b);
    return total;
}

static void test_carry(void)
{
    fg_proto_utf8_carry c = {0};
    char out[16];
    /* € (E2 82 AC) split after its first byte: nothing, then the whole character */
    CHECK(fg_proto_utf8_carry_feed(&c, "ab\xE2", 3, out) == 2 && memcmp(out, "ab", 2) == 0 && c.len == 1);
    CHECK(fg_proto_utf8_carry_feed(&c, "\x82\xAC!", 3, out) == 4 && memcmp(out, "\xE2\x82\xAC!", 4) == 0 && c.len == 0);
    /* an emoji in three deltas */
    CHECK(fg_proto_utf8_carry_feed(&c, "\xF0", 1, out) == 0 && c.len == 1);
    CHECK(fg_proto_utf8_carry_feed(&c, "\x9F\x98", 2, out) == 0 && c.len == 3);
    CHECK(fg_proto_utf8_carry_feed(&c, "", 0, out) == 0 && c.len == 3);
    CHECK(fg_proto_utf8_carry_feed(&c, "\x80", 1, out) == 4 && memcmp(out, "\xF0\x9F\x98\x80", 4) == 0);
    /* what a session keeps: ill-formed subparts replaced, one U+FFFD each */
    char shown[16];
    CHECK(fg_proto_utf8_replace("a\xFF\xE2\x82\xAC" "b\xE2\x82", 8, shown) == 11 &&
          memcmp(shown, "a\xEF\xBF\xBD\xE2\x82\xAC" "b\xEF\xBF\xBD", 11) == 0);
    CHECK(fg_proto_utf8_replace("", 0, shown) == 0);
    /* invalid bytes pass through (the writer replaces them); only a valid prefix is held */
    CHECK(fg_proto_utf8_carry_feed(&c, "x\xFF", 2, out) == 2 && c.len == 0);
    CHECK(fg_proto_utf8_carry_feed(&c, "\xE0\x80", 2, out) == 2 && c.len == 0); /* E0 80 can never complete */
    CHECK(fg_proto_utf8_carry_feed(&c, "\xED\xA0", 2, out) == 2 && c.len == 0); /* a surrogate prefix */
    CHECK(fg_proto_utf8_carry_feed(&c, "\xE2\x82\xAC\xE2\x82", 5, out) == 3 && c.len == 2);
    /* the held prefix broken by the next delta */
    CHECK(fg_proto_utf8_carry_feed(&c, "x", 1, out) == 3 && memcmp(out, "\xE2\x82x", 3) == 0 && c.len == 0);
    /* flush at response end: a held prefix becomes one U+FFFD */
    CHECK(fg_proto_utf8_carry_flush(&c, out) == 0);
    fg_proto_utf8_carry_feed(&c, "\xF0\x9F", 2, out);
    CHECK(fg_proto_utf8_carry_flush(&c, out) == 3 && memcmp(out, FFFD, 3) == 0 && c.len == 0);

    /* through the writer: the split character arrives whole in the second delta */
    {
        const char *chunks[] = {"It is 18 \xC2", "\xB0\x43 \xE2\x82", "\xAC", "\xF0\x9F"}; /* \x43 = 'C' */
        const size_t lens[] = {10, 5, 1, 2};
        char joined[64];
        size_t n = carry_join(chunks, lens, 4, joined);
        const char want[] = "It is 18 \xC2\xB0"
                            "C \xE2\x82\xAC" FFFD;
        CHECK(n == sizeof want - 1 && memcmp(joined, want, n) == 0);
    }
    /* a split anywhere gives the same text as the whole */
    const char text[] = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xFF\xE2\x82z\xED\xA0\x80\xF4\x8F\xBF\xBF\xF0\x9F";
    const size_t tn = sizeof text - 1;
    char whole[128];
    const char *one[] = {text};
    const size_t one_len[] = {tn};
    const size_t wn = carry_join(one, one_len, 1, whole);
    for (size_t cut1 = 0; cut1 <= tn; cut1++)
        for (size_t cut2 = cut1; cut2 <= tn; cut2++) {
            const char *ch[] = {text, text + cut1, text + cut2};
            const size_t ln[] = {cut1, cut2 - cut1, tn - cut2};
            char joined[128];
            size_t n = carry_join(ch, ln, 3, joined);
            CHECK_MSG(n == wn && memcmp(joined, whole, n) == 0, "cuts %zu %zu", cut1, cut2);
        }
}

/* ---- the docs ---- */

static void test_docs_codes(const char *docs)
{
    const char *sec = strstr(docs, "### Error codes");
    const char *end = sec ? strstr(sec, "\n## ") : NULL;
    CHECK_MSG(sec && end, "docs: no \"### Error codes\" section");
    if (!sec || !end)
        return;
    for (int c = 1; c < FG_PROTO_CODE__COUNT; c++) {
        const fg_proto_code_info *ci = fg_proto_code_info_get((fg_proto_code)c);
        CHECK_MSG(ci != NULL, "code %d has no table row", c);
        if (!ci)
            continue;
        CHECK(fg_proto_error_code_from_name(ci->name) == (fg_proto_code)c);
        CHECK(strcmp(fg_proto_error_code_name((fg_proto_code)c), ci->name) == 0);
        char key[96];
        snprintf(key, sizeof key, "\n| `%s` |", ci->name);
        const char *row = strstr(sec, key);
        CHECK_MSG(row && row < end, "docs: error code %s has no row in the Error codes table", ci->name);
        if (!row || row >= end)
            continue;
        const char *eol = strchr(row + 1, '\n');
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(eol - row - 1), row + 1);
        /* | code | type | retry_after | param | meaning | */
        char want[128];
        snprintf(want, sizeof want, "| `%s` | %s | %s |", ci->name, fg_proto_error_type_name(ci->type),
                 ci->retry_after ? "yes" : "no");
        CHECK_MSG(strncmp(line, want, strlen(want)) == 0, "docs row for %s: \"%s\", expected it to start \"%s\"",
                  ci->name, line, want);
        CHECK_MSG((strstr(line, "reserved") != NULL) == ci->reserved, "docs row for %s: reserved mark", ci->name);
        CHECK(ci->meaning && ci->meaning[0]);
    }
    /* and every row of the table names a code we have */
    for (const char *p = strstr(sec, "\n| `"); p && p < end; p = strstr(p + 1, "\n| `")) {
        char name[64];
        if (sscanf(p, "\n| `%63[a-z0-9_]`", name) == 1)
            CHECK_MSG(fg_proto_error_code_from_name(name) != FG_PROTO_OK, "docs: unknown error code %s", name);
    }
    CHECK(fg_proto_code_info_get(FG_PROTO_OK) == NULL && fg_proto_code_info_get(FG_PROTO_CODE__COUNT) == NULL);
    CHECK(fg_proto_error_code_from_name("nope") == FG_PROTO_OK);
}

static bool is_client_type(const char *t)
{
    for (int i = FG_CLIENT_SESSION_CREATE; i <= FG_CLIENT_ITEM_TRUNCATE; i++)
        if (strcmp(fg_client_event_type_name((fg_client_event_type)i), t) == 0)
            return true;
    return false;
}

static void test_docs_examples(const char *docs)
{
    bool seen_valid[N_VALID] = {0};
    bool client_type_seen[FG_CLIENT_ITEM_TRUNCATE + 1] = {0};
    strset doc_paths[32] = {0};
    char doc_types[32][64] = {{0}};
    int n_doc_types = 0;
    int n_blocks = 0;
    for (const char *p = strstr(docs, "```json\n"); p; p = strstr(p, "```json\n")) {
        p += 8;
        const char *e = strstr(p, "```");
        if (!e)
            break;
        n_blocks++;
        json_error_t je;
        json_t *j = json_loadb(p, (size_t)(e - p), JSON_REJECT_DUPLICATES, &je);
        CHECK_MSG(j != NULL, "docs example %d is not JSON (%s): %.60s", n_blocks, je.text, p);
        const char *type = j ? jstr(j, "type") : NULL;
        CHECK_MSG(type != NULL, "docs example %d has no type", n_blocks);
        if (type && is_client_type(type)) {
            fg_client_event ev;
            fg_proto_error err;
            fg_err r = fg_proto_parse(p, (size_t)(e - p), NULL, &ev, &err);
            CHECK_MSG(r == FG_OK, "docs client example %d does not parse: %s %s (%s)", n_blocks,
                      fg_proto_error_code_name(err.code), err.param, err.message);
            if (r == FG_OK)
                client_type_seen[ev.type] = true;
            fg_client_event_free(&ev);
            bool matched = false;
            for (size_t i = 0; i < N_VALID; i++) {
                json_t *v = json_loads(valid_cases[i].json, 0, NULL);
                if (v && json_equal(v, j)) {
                    matched = true;
                    seen_valid[i] = true;
                    if (r == FG_OK) {
                        fg_client_event ev2;
                        fg_proto_parse(p, (size_t)(e - p), NULL, &ev2, &err);
                        valid_cases[i].check(&ev2); /* the docs' text gives the table's fields */
                        fg_client_event_free(&ev2);
                    }
                }
                json_decref(v);
            }
            CHECK_MSG(matched, "docs client example %d is not in the test's table: %.80s", n_blocks, p);
        } else if (type) {
            int k = 0;
            while (k < n_doc_types && strcmp(doc_types[k], type) != 0)
                k++;
            if (k == n_doc_types && n_doc_types < 32)
                snprintf(doc_types[n_doc_types++], 64, "%s", type);
            if (k < 32)
                key_paths(j, "", &doc_paths[k]);
        }
        json_decref(j);
        p = e + 3;
    }
    CHECK_MSG(n_blocks >= 30, "docs: only %d json examples found", n_blocks);
    for (size_t i = 0; i < N_VALID; i++)
        if (valid_cases[i].in_docs)
            CHECK_MSG(seen_valid[i], "valid case %zu is marked in_docs but the docs lack it", i);
    for (int t = FG_CLIENT_SESSION_CREATE; t <= FG_CLIENT_ITEM_TRUNCATE; t++)
        CHECK_MSG(client_type_seen[t], "docs: no example of %s", fg_client_event_type_name((fg_client_event_type)t));

    /* Server examples: the same key paths per type as the writers produce. */
    for (int w = 0; w < n_writer_types; w++) {
        int k = 0;
        while (k < n_doc_types && strcmp(doc_types[k], writer_paths[w].type) != 0)
            k++;
        CHECK_MSG(k < n_doc_types, "docs: no example of server event %s", writer_paths[w].type);
        if (k == n_doc_types)
            continue;
        for (int i = 0; i < writer_paths[w].paths.n; i++)
            CHECK_MSG(set_has(&doc_paths[k], writer_paths[w].paths.s[i]), "docs %s examples lack the field %s",
                      writer_paths[w].type, writer_paths[w].paths.s[i]);
        for (int i = 0; i < doc_paths[k].n; i++)
            CHECK_MSG(set_has(&writer_paths[w].paths, doc_paths[k].s[i]),
                      "docs %s examples have the field %s, which the writers never produce", doc_types[k],
                      doc_paths[k].s[i]);
    }
    for (int k = 0; k < n_doc_types; k++) {
        bool known = false;
        for (int w = 0; w < n_writer_types; w++)
            known |= strcmp(doc_types[k], writer_paths[w].type) == 0;
        CHECK_MSG(known, "docs: example of %s, which no writer produces", doc_types[k]);
    }
    for (int k = 0; k < 32; k++)
        set_free(&doc_paths[k]);
    for (int w = 0; w < n_writer_types; w++)
        set_free(&writer_paths[w].paths);
}

static void test_docs(void)
{
    size_t len = 0;
    char *docs = read_docs(&len);
    CHECK_MSG(docs != NULL, "cannot read docs/protocol.md (set FG_SOURCE_DIR)");
    if (!docs)
        return;
    CHECK(strstr(docs, FG_PROTO_SUBPROTOCOL) != NULL && strstr(docs, FG_PROTO_PATH) != NULL);
    test_docs_codes(docs);
    test_docs_examples(docs);
    free(docs);
}

int main(void)
{
    test_valid();
    test_bad();
    test_limits();
    test_writers(); /* before test_docs: it records the writers' key paths */
    test_escaping();
    test_utf8();
    test_carry();
    test_docs();
    return TEST_DONE("test_protocol");
}
