/* fuzz_protocol.c: libFuzzer target for gateway/protocol.h.
 *
 * Every input is used four ways, and any broken promise aborts:
 * 1. fg_proto_parse with the default limits and with tiny ones. A success
 *    hands out only NUL-terminated, NUL-free, valid UTF-8 strings within their
 *    limits, and writing the parsed item or settings back gives JSON that
 *    reads back to the same strings. A failure names a code, a message, and
 *    an error event that is valid JSON.
 * 2. fg_proto_write_text_delta over the raw bytes: always valid JSON; when the
 *    bytes were valid UTF-8 the delta decodes to exactly them.
 * 3. the UTF-8 carry: the bytes cut in two at a point chosen by the input and
 *    written as two deltas plus the flush decode to the same text as one delta.
 * 4. fg_proto_utf8_valid against a reference decoder written differently
 *    (code point arithmetic instead of per-lead-byte ranges).
 *
 * The seed corpus is tests/fuzz/corpus/fuzz_protocol/ (one event per file,
 * and raw model-like bytes).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The reference: decode the code point, then reject overlongs, surrogates
 * and values above U+10FFFF by value. */
static bool ref_utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t c = s[i];
        size_t len;
        uint32_t min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, c &= 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, c &= 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, c &= 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (len > n - i)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

static void check_str(fg_proto_str s, size_t max)
{
    if (!s.ptr || s.len > max || s.ptr[s.len] != '\0' || memchr(s.ptr, '\0', s.len) ||
        !fg_proto_utf8_valid(s.ptr, s.len))
        abort();
}

static json_t *must_load(const fg_proto_buf *b)
{
    json_error_t je;
    json_t *j = json_loadb(fg_proto_buf_text(b), b->len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!j) {
        fprintf(stderr, "writer output is not JSON (%s): %s\n", je.text, fg_proto_buf_text(b));
        abort();
    }
    return j;
}

static bool json_str_is(json_t *v, fg_proto_str s)
{
    return json_is_string(v) && json_string_length(v) == s.len && memcmp(json_string_value(v), s.ptr, s.len) == 0;
}

static void check_sampling(const fg_proto_sampling *s, const fg_proto_limits *lim)
{
    if ((s->has_temperature && !(s->temperature >= 0 && s->temperature <= 2)) ||
        (s->has_top_p && !(s->top_p > 0 && s->top_p <= 1)) || (s->has_top_k && s->top_k > FG_PROTO_MAX_TOP_K) ||
        (s->has_min_p && !(s->min_p >= 0 && s->min_p < 1)) || (s->has_seed && s->seed > FG_PROTO_MAX_SEED) ||
        (s->has_max_output_tokens && (s->max_output_tokens < 1 || s->max_output_tokens > lim->max_output_tokens)) ||
        s->n_stop > FG_PROTO_MAX_STOP || (!s->has_stop && s->n_stop))
        abort();
    for (uint32_t i = 0; i < s->n_stop; i++) {
        check_str(s->stop[i], FG_PROTO_MAX_STOP_BYTES);
        if (s->stop[i].len == 0)
            abort();
    }
}

/* A parsed event: every promise of the header, then written back. */
static void check_event(const fg_client_event *ev, const fg_proto_limits *lim, fg_proto_buf *b)
{
    if (ev->has_event_id)
        check_str(ev->event_id, FG_PROTO_MAX_ID_BYTES);
    switch (ev->type) {
    case FG_CLIENT_SESSION_CREATE:
    case FG_CLIENT_SESSION_UPDATE: {
        const fg_proto_session_params *p = &ev->u.session;
        if (p->has_instructions)
            check_str(p->instructions, lim->max_instructions_bytes);
        if (p->has_fork_from && (ev->type != FG_CLIENT_SESSION_CREATE || p->fork_from.len == 0))
            abort();
        if (p->has_fork_from)
            check_str(p->fork_from, FG_PROTO_MAX_ID_BYTES);
        check_sampling(&p->sampling, lim);
        fg_proto_session_info si = {.id = "sess_f",
                                    .instructions = p->has_instructions ? p->instructions : (fg_proto_str){"", 0},
                                    .temperature = p->sampling.temperature,
                                    .top_p = p->sampling.top_p,
                                    .min_p = p->sampling.min_p,
                                    .top_k = p->sampling.top_k,
                                    .has_seed = p->sampling.has_seed,
                                    .seed = p->sampling.seed,
                                    .max_output_tokens = p->sampling.max_output_tokens,
                                    .n_stop = p->sampling.n_stop};
        memcpy(si.stop, p->sampling.stop, sizeof si.stop);
        /* the GA fields: the model a string, the tools an array of JSON written back as it was kept */
        if (p->has_model)
            check_str(p->model, FG_PROTO_MAX_ID_BYTES);
        if (p->has_tool_choice && p->tool_choice == FG_PROTO_TOOL_CHOICE_FUNCTION)
            check_str(p->tool_choice_name, FG_PROTO_MAX_ID_BYTES);
        si.ga = true;
        si.model = p->has_model ? p->model.ptr : "m";
        si.tools = p->has_tools ? p->tools.ptr : NULL;
        si.tool_choice = p->has_tool_choice ? p->tool_choice : FG_PROTO_TOOL_CHOICE_AUTO;
        si.tool_choice_name = p->has_tool_choice ? p->tool_choice_name.ptr : NULL;
        if (fg_proto_write_session_created(b, 1, 1, &si) != FG_OK)
            abort();
        json_t *j = must_load(b);
        if (p->has_tools && json_array_size(json_object_get(json_object_get(j, "session"), "tools")) > FG_PROTO_MAX_TOOLS)
            abort();
        json_t *s = json_object_get(j, "session");
        if (!json_str_is(json_object_get(s, "instructions"), si.instructions) ||
            json_number_value(json_object_get(s, "temperature")) != si.temperature ||
            json_number_value(json_object_get(s, "top_p")) != si.top_p ||
            json_number_value(json_object_get(s, "min_p")) != si.min_p ||
            json_array_size(json_object_get(s, "stop")) != si.n_stop)
            abort();
        for (uint32_t i = 0; i < si.n_stop; i++)
            if (!json_str_is(json_array_get(json_object_get(s, "stop"), i), si.stop[i]))
                abort();
        json_decref(j);
        break;
    }
    case FG_CLIENT_SESSION_RESUME:
        check_str(ev->u.resume.session_id, FG_PROTO_MAX_ID_BYTES);
        if (ev->u.resume.session_id.len == 0 || ev->u.resume.last_sequence_number > FG_PROTO_MAX_SEQUENCE)
            abort();
        break;
    case FG_CLIENT_ITEM_CREATE: {
        fg_proto_item it = ev->u.item;
        if (it.type == FG_PROTO_ITEM_MESSAGE) {
            if (it.n_content < 1 || it.n_content > FG_PROTO_MAX_PARTS || it.role < FG_PROTO_ROLE_SYSTEM ||
                it.role > FG_PROTO_ROLE_ASSISTANT)
                abort();
            for (uint32_t i = 0; i < it.n_content; i++)
                check_str(it.content[i].text, lim->max_text_bytes);
        } else if (it.type == FG_PROTO_ITEM_FUNCTION_CALL) {
            check_str(it.call_id, FG_PROTO_MAX_ID_BYTES);
            check_str(it.name, FG_PROTO_MAX_ID_BYTES);
            check_str(it.arguments, lim->max_text_bytes);
        } else if (it.type == FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT) {
            check_str(it.call_id, FG_PROTO_MAX_ID_BYTES);
            check_str(it.output, lim->max_text_bytes);
        } else {
            abort();
        }
        it.id = (fg_proto_str){"item_1", 6};
        if (fg_proto_write_item_added(b, 2, 2, &it) != FG_OK)
            abort();
        json_t *j = must_load(b);
        json_t *item = json_object_get(j, "item");
        if (it.type == FG_PROTO_ITEM_MESSAGE) {
            json_t *content = json_object_get(item, "content");
            if (json_array_size(content) != it.n_content)
                abort();
            for (uint32_t i = 0; i < it.n_content; i++)
                if (!json_str_is(json_object_get(json_array_get(content, i), "text"), it.content[i].text))
                    abort();
        } else if (it.type == FG_PROTO_ITEM_FUNCTION_CALL) {
            if (!json_str_is(json_object_get(item, "arguments"), it.arguments) ||
                !json_str_is(json_object_get(item, "name"), it.name))
                abort();
        } else if (!json_str_is(json_object_get(item, "output"), it.output)) {
            abort();
        }
        json_decref(j);
        break;
    }
    case FG_CLIENT_RESPONSE_CREATE:
        check_sampling(&ev->u.response.sampling, lim);
        /* input and instructions only out of band; every input item's strings checked */
        if ((ev->u.response.has_input || ev->u.response.has_instructions) && !ev->u.response.out_of_band)
            abort();
        if (ev->u.response.n_input > FG_PROTO_MAX_INPUT)
            abort();
        for (uint32_t i = 0; i < ev->u.response.n_input; i++)
            for (uint32_t k = 0; k < ev->u.response.input[i].n_content; k++)
                check_str(ev->u.response.input[i].content[k].text, lim->max_text_bytes);
        if (ev->u.response.has_metadata) {
            json_t *m = json_loads(ev->u.response.metadata.ptr, 0, NULL);
            if (!json_is_object(m) || json_object_size(m) > FG_PROTO_MAX_METADATA)
                abort();
            json_decref(m);
        }
        break;
    case FG_CLIENT_ITEM_RETRIEVE:
    case FG_CLIENT_ITEM_DELETE:
    case FG_CLIENT_ITEM_TRUNCATE:
        check_str(ev->u.item_ref.item_id, FG_PROTO_MAX_ID_BYTES);
        if (ev->u.item_ref.item_id.len == 0 || ev->u.item_ref.content_index >= FG_PROTO_MAX_PARTS)
            abort();
        break;
    case FG_CLIENT_RESPONSE_CANCEL:
        if (ev->u.cancel.has_response_id) {
            check_str(ev->u.cancel.response_id, FG_PROTO_MAX_ID_BYTES);
            if (ev->u.cancel.response_id.len == 0)
                abort();
        }
        break;
    case FG_CLIENT_SESSION_CLOSE:
        break;
    default:
        abort();
    }
}

static void parse_one(const uint8_t *data, size_t size, const fg_proto_limits *lim, fg_proto_buf *b)
{
    fg_proto_limits eff;
    fg_proto_limits_default(&eff);
    if (lim) {
        eff = *lim; /* the tiny limits set every field */
    }
    fg_client_event ev;
    fg_proto_error err;
    const fg_err e = fg_proto_parse((const char *)data, size, lim, &ev, &err);
    if (e == FG_OK) {
        check_event(&ev, &eff, b);
        fg_client_event_free(&ev);
        return;
    }
    if (e != FG_ERR_INVALID_ARG && e != FG_ERR_NOMEM)
        abort();
    if (ev.root_ || !fg_proto_code_info_get(err.code) || !memchr(err.message, '\0', sizeof err.message) ||
        err.message[0] == '\0' || !memchr(err.param, '\0', sizeof err.param))
        abort();
    if (fg_proto_write_error(b, 0, 1, &err, 1) != FG_OK)
        abort();
    json_decref(must_load(b));
}

/* Decoded "delta" of the event in b, appended to out. */
static size_t delta_text(const fg_proto_buf *b, char *out)
{
    json_t *j = must_load(b);
    json_t *d = json_object_get(j, "delta");
    if (!json_is_string(d))
        abort();
    const size_t n = json_string_length(d);
    memcpy(out, json_string_value(d), n);
    json_decref(j);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_proto_buf b;
    fg_proto_buf_init(&b, 16);

    /* 1. the parser */
    parse_one(data, size, NULL, &b);
    const fg_proto_limits tiny = {.max_message_bytes = 256,
                                  .max_instructions_bytes = 8,
                                  .max_text_bytes = 8,
                                  .max_output_tokens = 16,
                                  .max_depth = 4};
    parse_one(data, size, &tiny, &b);

    /* 4. the validator against the reference */
    const bool valid = fg_proto_utf8_valid((const char *)data, size);
    if (valid != ref_utf8_valid(data, size))
        abort();

    /* 2. the delta writer over raw bytes; at most 3 output bytes per input byte once decoded */
    char *whole = malloc(3 * size + 8);
    char *joined = malloc(3 * size + 8);
    char *fed = malloc(size + 8);
    if (!whole || !joined || !fed)
        abort();
    if (fg_proto_write_text_delta(&b, 1, 1, "resp_1", "item_1", (const char *)data, size) != FG_OK)
        abort();
    size_t wn = delta_text(&b, whole);
    if (valid && (wn != size || memcmp(whole, data, size) != 0))
        abort();
    if (!fg_proto_utf8_valid(fg_proto_buf_text(&b), b.len))
        abort();

    /* 3. the carry: cut at a point the input picks, feed both parts, flush */
    const size_t cut = size ? data[0] % (size + 1) : 0;
    fg_proto_utf8_carry c = {0};
    size_t jn = 0;
    size_t k = fg_proto_utf8_carry_feed(&c, (const char *)data, cut, fed);
    if (fg_proto_write_text_delta(&b, 2, 2, "resp_1", "item_1", fed, k) != FG_OK)
        abort();
    jn += delta_text(&b, joined + jn);
    k = fg_proto_utf8_carry_feed(&c, (const char *)data + cut, size - cut, fed);
    if (fg_proto_write_text_delta(&b, 3, 3, "resp_1", "item_1", fed, k) != FG_OK)
        abort();
    jn += delta_text(&b, joined + jn);
    k = fg_proto_utf8_carry_flush(&c, fed);
    if (c.len != 0)
        abort();
    if (fg_proto_write_text_delta(&b, 4, 4, "resp_1", "item_1", fed, k) != FG_OK)
        abort();
    jn += delta_text(&b, joined + jn);
    if (jn != wn || memcmp(joined, whole, wn) != 0)
        abort();

    free(whole);
    free(joined);
    free(fed);
    fg_proto_buf_free(&b);
    return 0;
}
