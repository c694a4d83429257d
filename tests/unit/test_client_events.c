/* test_client_events.c: the client side of the protocol (gateway/client.h's
 * URL parser and gateway/client_events.h).
 *
 * - every event the client writes parses with the server's own parser
 *   (fg_proto_parse) into exactly the fields it was given, including text with
 *   quotes, control characters and invalid UTF-8 (which becomes U+FFFD);
 * - the server event view: type, sequence number, dotted paths, error lines
 *   for an error event and a failed response.done, refusal of non-objects;
 * - the fast type peek agrees with a parse, and declines what it cannot read;
 * - ws:// and wss:// URLs: defaults, ports, IPv6, paths, and bad ones.
 */
#include <string.h>

#include "gateway/client.h"
#include "gateway/client_events.h"
#include "gateway/protocol.h"
#include "tests/unit/fg_test.h"

static bool str_is(fg_proto_str s, const char *want)
{
    return s.ptr && s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

/* Parses text with the server's parser; the event must be valid. */
static bool server_parse(const char *text, fg_client_event *ev)
{
    fg_proto_error err;
    if (!text)
        return false;
    fg_err e = fg_proto_parse(text, strlen(text), NULL, ev, &err);
    CHECK_MSG(e == FG_OK, "%s: %s (param %s)", text, err.message, err.param);
    return e == FG_OK;
}

static void test_writers(void)
{
    fg_client_event ev;
    fg_client_sampling s = {0};
    s.has_temperature = true;
    s.temperature = 0.25;
    s.has_max_output_tokens = true;
    s.max_output_tokens = 77;
    s.has_seed = true;
    s.seed = 42;
    s.has_top_k = true;
    s.top_k = 40;
    s.has_top_p = true;
    s.top_p = 0.9;
    s.has_min_p = true;
    s.min_p = 0.05;

    char *t = fg_client_ev_session_create("c1", "Be \"terse\"\n", &s);
    if (server_parse(t, &ev)) {
        CHECK(ev.type == FG_CLIENT_SESSION_CREATE);
        CHECK(ev.has_event_id && str_is(ev.event_id, "c1"));
        CHECK(ev.u.session.has_instructions && str_is(ev.u.session.instructions, "Be \"terse\"\n"));
        const fg_proto_sampling *p = &ev.u.session.sampling;
        CHECK(p->has_temperature && p->temperature == 0.25);
        CHECK(p->has_max_output_tokens && p->max_output_tokens == 77);
        CHECK(p->has_seed && p->seed == 42);
        CHECK(p->has_top_k && p->top_k == 40);
        CHECK(p->has_top_p && p->top_p == 0.9);
        CHECK(p->has_min_p && p->min_p == 0.05);
        CHECK(!p->has_stop && !ev.u.session.has_fork_from);
        fg_client_event_free(&ev);
    }
    free(t);

    t = fg_client_ev_session_create(NULL, NULL, NULL);
    if (server_parse(t, &ev)) {
        CHECK(ev.type == FG_CLIENT_SESSION_CREATE && !ev.has_event_id);
        CHECK(!ev.u.session.has_instructions && !ev.u.session.sampling.has_temperature);
        fg_client_event_free(&ev);
    }
    free(t);

    t = fg_client_ev_session_resume("r", "sess_abc", 41);
    if (server_parse(t, &ev)) {
        CHECK(ev.type == FG_CLIENT_SESSION_RESUME);
        CHECK(str_is(ev.u.resume.session_id, "sess_abc") && ev.u.resume.last_sequence_number == 41);
        CHECK(!ev.u.resume.allow_gap);
        fg_client_event_free(&ev);
    }
    free(t);

    /* text with a control character, a tab and a truncated UTF-8 sequence */
    const char raw[] = "a\x01\tb \xC3\xA9 \xE2\x82";
    t = fg_client_ev_message("m1", NULL, raw, sizeof raw - 1);
    if (server_parse(t, &ev)) {
        CHECK(ev.type == FG_CLIENT_ITEM_CREATE);
        CHECK(ev.u.item.type == FG_PROTO_ITEM_MESSAGE && ev.u.item.role == FG_PROTO_ROLE_USER);
        CHECK(ev.u.item.n_content == 1 && ev.u.item.content[0].type == FG_PROTO_PART_INPUT_TEXT);
        CHECK(str_is(ev.u.item.content[0].text, "a\x01\tb \xC3\xA9 \xEF\xBF\xBD"));
        fg_client_event_free(&ev);
    }
    free(t);

    t = fg_client_ev_message(NULL, "system", "", 0);
    if (server_parse(t, &ev)) {
        CHECK(ev.u.item.role == FG_PROTO_ROLE_SYSTEM && ev.u.item.content[0].text.len == 0);
        fg_client_event_free(&ev);
    }
    free(t);

    fg_client_sampling only_max = {0};
    only_max.has_max_output_tokens = true;
    only_max.max_output_tokens = 32768;
    t = fg_client_ev_response_create("p1", &only_max);
    if (server_parse(t, &ev)) {
        CHECK(ev.type == FG_CLIENT_RESPONSE_CREATE && ev.u.response.generate);
        CHECK(ev.u.response.sampling.has_max_output_tokens && ev.u.response.sampling.max_output_tokens == 32768);
        CHECK(!ev.u.response.sampling.has_temperature);
        fg_client_event_free(&ev);
    }
    free(t);

    t = fg_client_ev_response_create(NULL, NULL);
    if (server_parse(t, &ev)) {
        CHECK(ev.type == FG_CLIENT_RESPONSE_CREATE && ev.u.response.generate);
        fg_client_event_free(&ev);
    }
    free(t);

    t = fg_client_ev_response_cancel("x");
    if (server_parse(t, &ev)) {
        CHECK(ev.type == FG_CLIENT_RESPONSE_CANCEL && !ev.u.cancel.has_response_id);
        fg_client_event_free(&ev);
    }
    free(t);

    t = fg_client_ev_session_close("bye");
    if (server_parse(t, &ev)) {
        CHECK(ev.type == FG_CLIENT_SESSION_CLOSE && str_is(ev.event_id, "bye"));
        fg_client_event_free(&ev);
    }
    free(t);
}

static void test_view(void)
{
    /* written by the server's own writers, read by the client's view */
    fg_proto_buf b;
    fg_proto_buf_init(&b, 0);
    fg_proto_item item = {0};
    item.type = FG_PROTO_ITEM_MESSAGE;
    item.id = (fg_proto_str){"item_4", 6};
    item.role = FG_PROTO_ROLE_ASSISTANT;
    item.n_content = 1;
    item.content[0].type = FG_PROTO_PART_OUTPUT_TEXT;
    item.content[0].text = (fg_proto_str){"hi", 2};
    fg_proto_response_done done = {0};
    done.id = "resp_3";
    done.status = FG_PROTO_RESPONSE_FAILED;
    done.error_code = FG_PROTO_KV_UNAVAILABLE;
    done.error_message = "no KV";
    done.output = &item;
    done.n_output = 1;
    done.usage.input_tokens = 251;
    done.usage.cached_tokens = 192;
    done.usage.output_tokens = 9;
    CHECK(fg_proto_write_response_done(&b, 11, 11, &done) == FG_OK);
    fg_client_event_view v;
    CHECK(fg_client_ev_parse(b.data + b.pre, b.len, &v, NULL) == FG_OK);
    CHECK(!strcmp(v.type, "response.done") && v.has_seq && v.seq == 11);
    CHECK(fg_client_ev_num(&v, "response.usage.output_tokens", -1) == 9);
    CHECK(fg_client_ev_num(&v, "response.usage.input_token_details.cached_tokens", -1) == 192);
    CHECK(fg_client_ev_num(&v, "response.usage.nope", -1) == -1);
    CHECK(fg_client_ev_str(&v, "response.status") && !strcmp(fg_client_ev_str(&v, "response.status"), "failed"));
    CHECK(fg_client_ev_str(&v, "response.usage") == NULL);
    char line[300];
    fg_client_ev_describe_error(&v, line, sizeof line);
    CHECK_MSG(!strcmp(line, "kv_unavailable: no KV"), "%s", line);
    char type[64];
    CHECK(fg_client_ev_peek_type(b.data + b.pre, b.len, type, sizeof type) && !strcmp(type, "response.done"));
    fg_client_ev_release(&v);

    fg_proto_error e;
    fg_proto_error_set(&e, FG_PROTO_INVALID_VALUE, "session.temperature", "c7", "temperature must be in [0, 2]");
    CHECK(fg_proto_write_error(&b, 12, 12, &e, 0) == FG_OK);
    CHECK(fg_client_ev_parse(b.data + b.pre, b.len, &v, NULL) == FG_OK);
    fg_client_ev_describe_error(&v, line, sizeof line);
    CHECK_MSG(!strcmp(line, "invalid_value: temperature must be in [0, 2] (param session.temperature)"), "%s", line);
    CHECK(!strcmp(fg_client_ev_str(&v, "error.event_id"), "c7"));
    fg_client_ev_release(&v);

    CHECK(fg_proto_write_text_delta(&b, 13, 13, "resp_3", "item_4", "x", 1) == FG_OK);
    CHECK(fg_client_ev_peek_type(b.data + b.pre, b.len, type, sizeof type) &&
          !strcmp(type, "response.output_text.delta"));
    CHECK(fg_client_ev_parse(b.data + b.pre, b.len, &v, NULL) == FG_OK);
    fg_client_ev_describe_error(&v, line, sizeof line);
    CHECK(line[0] == '\0');
    fg_client_ev_release(&v);
    fg_proto_buf_free(&b);

    fg_diag d = {{0}};
    CHECK(fg_client_ev_parse("[1]", 3, &v, &d) == FG_ERR_INVALID_ARG && d.msg[0]);
    CHECK(fg_client_ev_parse("{", 1, &v, NULL) == FG_ERR_INVALID_ARG);
    CHECK(!strcmp(v.type, ""));
    fg_client_ev_release(&v);
    CHECK(fg_client_ev_parse("{\"sequence_number\":-1}", 22, &v, NULL) == FG_OK && !v.has_seq);
    fg_client_ev_release(&v);

    /* the peek: whitespace allowed, escapes and other first keys declined */
    const char *ok = " { \"type\" : \"session.created\" , \"x\":1}";
    CHECK(fg_client_ev_peek_type(ok, strlen(ok), type, sizeof type) && !strcmp(type, "session.created"));
    const char *no[] = {"{\"event_id\":\"e\",\"type\":\"x\"}", "{\"type\":\"a\\u0062\"}", "{\"type\":1}",
                        "{\"type\":\"unterminated", "[]", ""};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        CHECK_MSG(!fg_client_ev_peek_type(no[i], strlen(no[i]), type, sizeof type), "%s", no[i]);
    CHECK(!fg_client_ev_peek_type(ok, strlen(ok), type, 4)); /* too small a buffer */
}

static void test_url(void)
{
    fg_client_url u;
    CHECK(fg_client_url_parse("ws://127.0.0.1:8080/v1/realtime", &u, NULL) == FG_OK);
    CHECK(!u.tls && !strcmp(u.host, "127.0.0.1") && u.port == 8080 && !strcmp(u.path, "/v1/realtime"));
    CHECK(!strcmp(u.host_header, "127.0.0.1:8080"));
    CHECK(fg_client_url_parse("wss://gw.example.com", &u, NULL) == FG_OK);
    CHECK(u.tls && u.port == 443 && !strcmp(u.path, "/") && !strcmp(u.host_header, "gw.example.com"));
    CHECK(fg_client_url_parse("ws://h:80/x?a=b", &u, NULL) == FG_OK);
    CHECK(u.port == 80 && !strcmp(u.path, "/x?a=b") && !strcmp(u.host_header, "h"));
    CHECK(fg_client_url_parse("ws://h?q", &u, NULL) == FG_OK && !strcmp(u.path, "/?q"));
    CHECK(fg_client_url_parse("ws://[::1]:9000/v1/realtime", &u, NULL) == FG_OK);
    CHECK(!strcmp(u.host, "::1") && u.port == 9000 && !strcmp(u.host_header, "[::1]:9000"));
    const char *bad[] = {"http://h/", "ws://", "ws://:80/", "ws://h:0/", "ws://h:65536/", "ws://h:x/",
                         "ws://[::1/", "ws://user@h/", "ws://h/a b", "ws://h:80x/", "h:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fg_diag d = {{0}};
        CHECK_MSG(fg_client_url_parse(bad[i], &u, &d) == FG_ERR_INVALID_ARG && d.msg[0], "%s", bad[i]);
    }
}

int main(void)
{
    test_writers();
    test_view();
    test_url();
    return TEST_DONE("test_client_events");
}
