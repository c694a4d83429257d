/* fuzz_openai_req.c: libFuzzer target for gateway/openai_req.h, the
 * parsers of POST /v1/chat/completions, POST /v1/responses (and its
 * WebSocket mode's response.create messages) and POST
 * /v1/realtime/client_secrets bodies.
 *
 * Every input is parsed by both, with the default limits and with tiny ones,
 * and any broken promise aborts: a success hands out at least one item: a
 * function_call (call_id, name, arguments) or function_call_output (call_id,
 * output) with NUL-free strings within the text limit, or a message with 1..16 NUL-terminated, NUL-free text parts within the text
 * limit, sampling values in their ranges and at most four stop strings of
 * 1..64 bytes; a failure names an HTTP status (400, 404 or 500), a type, a
 * code and a message. A client secret request that parses has a lifetime of
 * 10..7200 s, a reply session that is JSON, and session settings the
 * realtime parser takes as a session.update. The seed corpus is tests/fuzz/corpus/fuzz_openai_req/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/openai_req.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PROMISE(c)                                                                        \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "broken promise at %s:%d: %s\n", __FILE__, __LINE__, #c);     \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static void check_items(const fg_proto_item *items, size_t n, const fg_proto_limits *lim)
{
    PROMISE(n >= 1 && n <= 4 * GW_CHAT_MAX_MESSAGES); /* an assistant message's tool calls are items too */
    for (size_t i = 0; i < n; i++) {
        const fg_proto_item *it = &items[i];
        if (it->type == FG_PROTO_ITEM_FUNCTION_CALL || it->type == FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT) {
            PROMISE(it->call_id.ptr && it->call_id.len >= 1 && strlen(it->call_id.ptr) >= it->call_id.len);
            const fg_proto_str t = it->type == FG_PROTO_ITEM_FUNCTION_CALL ? it->arguments : it->output;
            PROMISE(t.ptr && t.len <= lim->max_text_bytes && memchr(t.ptr, 0, t.len) == NULL);
            if (it->type == FG_PROTO_ITEM_FUNCTION_CALL)
                PROMISE(it->name.ptr && it->name.len >= 1 && it->name.len <= 64);
            continue;
        }
        PROMISE(it->type == FG_PROTO_ITEM_MESSAGE);
        PROMISE(it->role >= FG_PROTO_ROLE_SYSTEM && it->role <= FG_PROTO_ROLE_ASSISTANT);
        PROMISE(it->n_content >= 1 && it->n_content <= FG_PROTO_MAX_PARTS);
        for (uint32_t k = 0; k < it->n_content; k++) {
            const fg_proto_str t = it->content[k].text;
            PROMISE(t.ptr && strlen(t.ptr) == t.len && t.len <= lim->max_text_bytes);
        }
    }
}

static void check_sampling(const fg_proto_sampling *s, const fg_proto_limits *lim)
{
    PROMISE(!s->has_temperature || (s->temperature >= 0 && s->temperature <= 2));
    PROMISE(!s->has_top_p || (s->top_p > 0 && s->top_p <= 1));
    PROMISE(!s->has_max_output_tokens || (s->max_output_tokens >= 1 && s->max_output_tokens <= lim->max_output_tokens));
    PROMISE(!s->has_seed || s->seed <= FG_PROTO_MAX_SEED);
    PROMISE(s->n_stop <= FG_PROTO_MAX_STOP);
    for (uint32_t i = 0; i < s->n_stop; i++)
        PROMISE(s->stop[i].len >= 1 && s->stop[i].len <= FG_PROTO_MAX_STOP_BYTES &&
                strlen(s->stop[i].ptr) == s->stop[i].len);
}

static void check_error(const gw_oa_error *e)
{
    PROMISE(e->status == 400 || e->status == 404 || e->status == 500);
    PROMISE(e->type && e->code && e->message[0]);
    PROMISE(memchr(e->param, 0, sizeof e->param));
}

static void run(const char *body, size_t len, const fg_proto_limits *lim)
{
    gw_oa_error err;
    gw_chat_req c;
    if (gw_chat_parse(body, len, lim, "tiny", &c, &err) == FG_OK) {
        PROMISE(c.model && !strcmp(c.model, "tiny"));
        PROMISE(!c.instructions || strlen(c.instructions) == c.instructions_len);
        PROMISE(!c.include_usage || c.stream);
        check_items(c.items, c.n_items, lim);
        check_sampling(&c.sampling, lim);
    } else {
        check_error(&err);
    }
    gw_chat_req_free(&c);
    gw_resp_req r;
    if (gw_resp_parse(body, len, lim, "tiny", &r, &err) == FG_OK) {
        PROMISE(r.model && !strcmp(r.model, "tiny"));
        PROMISE(!r.instructions || strlen(r.instructions) == r.instructions_len);
        check_items(r.items, r.n_items, lim);
        check_sampling(&r.sampling, lim);
    } else {
        check_error(&err);
    }
    gw_resp_req_free(&r);
    if (gw_resp_ws_parse(body, len, lim, "tiny", &r, &err) == FG_OK) {
        PROMISE(r.model && !strcmp(r.model, "tiny") && r.stream);
        check_items(r.items, r.n_items, lim);
        check_sampling(&r.sampling, lim);
    } else {
        check_error(&err);
    }
    gw_resp_req_free(&r);
    gw_secret_req sr;
    if (gw_secret_parse(body, len, lim, "tiny", &sr, &err) == FG_OK) {
        PROMISE(sr.ttl_s >= GW_SECRET_TTL_MIN_S && sr.ttl_s <= GW_SECRET_TTL_MAX_S);
        PROMISE(sr.session_json && sr.session_json[0] == '{');
        if (sr.session_event) {
            fg_client_event ev;
            fg_proto_error pe;
            PROMISE(fg_proto_parse(sr.session_event, strlen(sr.session_event), lim, &ev, &pe) == FG_OK);
            PROMISE(ev.type == FG_CLIENT_SESSION_UPDATE);
            fg_client_event_free(&ev);
        }
    } else {
        check_error(&err);
    }
    gw_secret_req_free(&sr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy, so reading past the body is caught */
    char *body = malloc(size ? size : 1);
    if (!body)
        return 0;
    memcpy(body, data, size);
    fg_proto_limits lim;
    fg_proto_limits_default(&lim);
    run(body, size, &lim);
    fg_proto_limits tiny = lim;
    tiny.max_text_bytes = 8;
    tiny.max_output_tokens = 4;
    run(body, size, &tiny);
    free(body);
    return 0;
}
