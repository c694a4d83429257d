/* gw_tools.c: the tool calls of a session's response (docs/protocol.md "Tool
 * calls in the reply"). A response of a GA session whose tools are rendered
 * runs with keep_control; its released text goes through the session's
 * fg_tool_parser, and the parser's events become the GA events of
 * function_call items after tool_decl's checks. tool_choice "required" or a
 * named function is forced by prefill: the opening of a call
 * (fg_chat_call_prefix) goes into the prompt after the reply marker, as the
 * start of the assistant's turn, and into the parser before the reply. Owns
 * the per-response call list that response.done shows, and the prefix.
 * Service thread only.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"
#include "gateway/log.h"
#include "gateway/tool_decl.h"
#include "gateway/tool_parse.h"

#define MAX_CALLS 32u /* calls one response may make; further ones are refused */

typedef struct gw_call {
    char item_id[FG_PROTO_MAX_ID_BYTES + 1];
    char call_id[FG_PROTO_MAX_ID_BYTES + 1];
    char name[FG_NAME_MAX + 1];
    uint32_t index;       /* the parser's */
    uint32_t output_index;
    const char *status;   /* NULL: in progress */
    char *args;           /* the whole arguments once done */
    size_t args_len;
} gw_call;

struct gw_tools {
    fg_tool_parser_t *parser;
    fg_tool_set set;
    fg_tool_choice choice;
    bool on;               /* this response parses its text */
    gw_call calls[MAX_CALLS];
    uint32_t n_calls;
    uint32_t n_accepted;
    uint32_t rejected_index; /* the parser's index of a call not taken, UINT32_MAX: none */
    fg_chat_prompt prefix;   /* the forced call's opening (empty: none), fed to the parser first */
    fg_tokens prefix_tokens; /* its tokens, the prompt's after the reply marker */
};

void gw_tools_free(gw_session *s)
{
    gw_tools *t = s->tools_resp;
    if (!t)
        return;
    for (uint32_t i = 0; i < t->n_calls; i++)
        free(t->calls[i].args);
    fg_tool_parser_destroy(t->parser);
    fg_tool_set_free(&t->set);
    fg_chat_prompt_free(&t->prefix);
    fg_tokens_free(&t->prefix_tokens);
    free(t);
    s->tools_resp = NULL;
}

/* Forgets the last response's calls; keeps the parser. */
static void reset(gw_tools *t)
{
    for (uint32_t i = 0; i < t->n_calls; i++)
        free(t->calls[i].args);
    t->n_calls = t->n_accepted = 0;
    t->rejected_index = UINT32_MAX;
    t->on = false;
    t->prefix.len = t->prefix.n_spans = 0;
    t->prefix_tokens.n = 0;
    fg_tool_set_free(&t->set);
}

/* The opening of the call the choice forces, in text and tokens; none where
 * the choice forces nothing or the prompt format has no prefix (then the
 * choice is only checked when the reply ends). False: out of memory. */
static bool make_prefix(const gw_session *s, gw_tools *t)
{
    const fg_tool_choice *c = &t->choice;
    if (c->mode != FG_TOOL_CHOICE_REQUIRED && c->mode != FG_TOOL_CHOICE_NAMED)
        return true;
    const fg_tokenizer_t *tok = s->gw->tok;
    fg_chat_family f;
    fg_diag d;
    if (fg_chat_family_detect(NULL, 0, tok, &f, &d) != FG_OK)
        return true; /* refused at session.update: tools need the chat markers */
    const bool named = c->mode == FG_TOOL_CHOICE_NAMED;
    fg_err e = fg_chat_call_prefix(f, named ? c->name : NULL, named ? strlen(c->name) : 0, &t->prefix, &d);
    if (e == FG_OK)
        e = fg_chat_encode(tok, &t->prefix, &t->prefix_tokens);
    if (e != FG_OK) {
        t->prefix.len = t->prefix.n_spans = 0;
        t->prefix_tokens.n = 0;
    }
    return e != FG_ERR_NOMEM;
}

bool gw_tools_begin(gw_session *s, fg_response_params *rp)
{
    if (s->tools_resp)
        reset(s->tools_resp);
    if (!rp->generate || !s->tools || s->tool_choice == FG_PROTO_TOOL_CHOICE_NONE)
        return true; /* "none": the tools are not in the prompt, and the reply is plain text */
    if (!s->tools_resp) {
        gw_tools *n = calloc(1, sizeof *n);
        fg_diag d;
        /* the vocabulary's family writes the calls: V4's in DSML (tools were refused without one) */
        fg_chat_family f = FG_CHAT_DEEPSEEK_V3;
        (void)fg_chat_family_detect(NULL, 0, s->gw->tok, &f, &d);
        const fg_tool_parse_opts po = {.syntax = f == FG_CHAT_DEEPSEEK_V4 ? FG_TOOL_SYNTAX_DSML : FG_TOOL_SYNTAX_V3};
        if (!n || fg_tool_parser_create(&po, &n->parser, &d) != FG_OK) {
            free(n);
            return false;
        }
        n->rejected_index = UINT32_MAX;
        s->tools_resp = n;
    }
    gw_tools *t = s->tools_resp;
    json_error_t je;
    json_t *j = json_loads(s->tools, 0, &je);
    fg_diag d;
    fg_err e = j ? fg_tool_set_parse(j, &t->set, &d) : FG_ERR_NOMEM;
    json_decref(j);
    if (e != FG_OK || t->set.n == 0)
        return e == FG_OK; /* checked at session.update; an empty list renders nothing */
    t->choice = fg_tool_choice_from_proto(s->tool_choice, s->tool_choice_name);
    if (!make_prefix(s, t))
        return false;
    fg_tool_parser_reset(t->parser);
    t->on = true;
    rp->keep_control = true;
    return true;
}

const fg_tokens *gw_tools_prefix(const gw_session *s)
{
    const gw_tools *t = s->tools_resp;
    return t && t->on && t->prefix_tokens.n ? &t->prefix_tokens : NULL;
}

bool gw_tools_on(const gw_session *s)
{
    return s->tools_resp && s->tools_resp->on;
}

static void emit_error(gw_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit_error(gw_session *s, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fg_proto_error err;
    fg_proto_error_set(&err, FG_PROTO_TOOL_CALL_INVALID, NULL, NULL, "%s", msg);
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_error(&s->gw->scratch, em.seq, em.evt, &err, 0));
    fg_log_at(FG_LOG_INFO, "tool_call_invalid", gw_session_tenant(s), s->id, NULL);
}

static gw_call *find_call(gw_tools *t, uint32_t index)
{
    for (uint32_t i = 0; i < t->n_calls; i++)
        if (t->calls[i].index == index && !t->calls[i].status)
            return &t->calls[i];
    return NULL;
}

static fg_proto_item call_item(const gw_call *c, const char *status)
{
    fg_proto_item it = {.type = FG_PROTO_ITEM_FUNCTION_CALL,
                        .id = {c->item_id, strlen(c->item_id)},
                        .call_id = {c->call_id, strlen(c->call_id)},
                        .name = {c->name, strlen(c->name)},
                        .arguments = {c->args ? c->args : "", c->args ? c->args_len : 0},
                        .status = status};
    return it;
}

/* output_item.done and, for a kept item, conversation.item.done. */
static void call_done(gw_session *s, gw_call *c, const char *status)
{
    fg_proto_buf *b = &s->gw->scratch;
    c->status = status;
    fg_proto_item it = call_item(c, status);
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_output_item_at(b, true, em.seq, em.evt, s->resp_id, c->output_index, &it));
    if (s->resp_oob || strcmp(status, "completed") != 0)
        return; /* a call not taken is shown, not kept */
    const char *prev = gw_items_last_id(&s->items);
    char prev_copy[FG_PROTO_MAX_ID_BYTES + 1] = "";
    if (prev)
        snprintf(prev_copy, sizeof prev_copy, "%s", prev);
    it.status = NULL;
    /* its tokens are the response's (in the message item's range): placed after it, none of its own */
    if (!gw_items_push(&s->items, &it, c->item_id, GW_ITEM_DEFERRED, 0, true))
        fg_log_at(FG_LOG_ERROR, "item_not_kept", gw_session_tenant(s), s->id, "\"reason\":\"out_of_memory\"");
    it.status = "completed";
    em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_item_ga(b, true, em.seq, em.evt, &it, prev ? prev_copy : NULL));
}

static void on_begin(gw_session *s, gw_tools *t, const fg_tool_event *ev)
{
    fg_tool_verdict v = fg_tool_check_call(&t->set, &t->choice, ev->name, ev->name_len);
    if (v != FG_TOOL_V_ACCEPT || t->n_calls == MAX_CALLS) {
        t->rejected_index = ev->index;
        emit_error(s, "tool call %u (%s) is not taken: %s", (unsigned)ev->index, ev->name,
                   v != FG_TOOL_V_ACCEPT ? fg_tool_verdict_name(v) : "more calls than one response may make");
        return;
    }
    gw_session_flush_delta(s); /* the text before the call goes first */
    gw_call *c = &t->calls[t->n_calls++];
    memset(c, 0, sizeof *c);
    c->index = ev->index;
    c->output_index = t->n_calls; /* the message is output 0 */
    snprintf(c->name, sizeof c->name, "%s", ev->name);
    snprintf(c->item_id, sizeof c->item_id, "item_%llu", (unsigned long long)++s->item_counter);
    snprintf(c->call_id, sizeof c->call_id, "call_%s_%llu", s->id + 5, (unsigned long long)s->item_counter);
    fg_proto_item it = call_item(c, "in_progress");
    fg_proto_buf *b = &s->gw->scratch;
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_output_item_at(b, false, em.seq, em.evt, s->resp_id, c->output_index, &it));
    if (!s->resp_oob) {
        const char *prev = gw_items_last_id(&s->items);
        em = gw_emit_next(s);
        gw_emit_push(s, em, fg_proto_write_item_ga(b, false, em.seq, em.evt, &it, prev));
    }
}

static void on_event(void *ctx, const fg_tool_event *ev)
{
    gw_session *s = ctx;
    gw_tools *t = s->tools_resp;
    gw_call *c = ev->type == FG_TOOL_EV_TEXT || ev->type == FG_TOOL_EV_CALL_BEGIN ? NULL : find_call(t, ev->index);
    fg_proto_buf *b = &s->gw->scratch;
    gw_emit em;
    switch (ev->type) {
    case FG_TOOL_EV_TEXT:
        gw_session_add_text(s, ev->text, ev->len);
        break;
    case FG_TOOL_EV_CALL_BEGIN:
        on_begin(s, t, ev);
        break;
    case FG_TOOL_EV_ARGS_DELTA:
        if (!c)
            break;
        em = gw_emit_next(s);
        gw_emit_push(s, em, fg_proto_write_call_args(b, false, em.seq, em.evt, s->resp_id, c->item_id,
                                                     c->output_index, c->call_id, c->name, ev->text, ev->len));
        break;
    case FG_TOOL_EV_CALL_DONE:
        if (!c)
            break; /* refused at its beginning: already reported */
        if (!(c->args = malloc(ev->len + 1))) {
            emit_error(s, "tool call %u (%s): out of memory", (unsigned)ev->index, c->name);
            call_done(s, c, "incomplete");
            break;
        }
        memcpy(c->args, ev->text, ev->len);
        c->args[ev->len] = 0;
        c->args_len = ev->len;
        em = gw_emit_next(s);
        gw_emit_push(s, em, fg_proto_write_call_args(b, true, em.seq, em.evt, s->resp_id, c->item_id,
                                                     c->output_index, c->call_id, c->name, c->args, c->args_len));
        t->n_accepted++;
        call_done(s, c, "completed");
        break;
    case FG_TOOL_EV_MALFORMED:
        if (ev->index == t->rejected_index && ev->index != UINT32_MAX)
            break; /* refused at its beginning: already reported */
        emit_error(s, "tool call %u%s%s%s is malformed: %s: %s", (unsigned)ev->index, ev->name[0] ? " (" : "",
                   ev->name, ev->name[0] ? ")" : "", fg_tool_bad_name(ev->reason), ev->detail);
        if (c)
            call_done(s, c, "incomplete");
        break;
    }
}

void gw_tools_text(gw_session *s, const char *text, size_t n)
{
    fg_tool_parse_feed(s->tools_resp->parser, text, n, on_event, s);
}

void gw_tools_prefill(gw_session *s)
{
    gw_tools *t = s->tools_resp;
    if (t && t->on && t->prefix.len)
        gw_tools_text(s, t->prefix.text, t->prefix.len);
}

void gw_tools_end(gw_session *s, bool completed)
{
    gw_tools *t = s->tools_resp;
    fg_tool_parse_finish(t->parser, on_event, s);
    fg_tool_verdict v = fg_tool_check_reply(&t->choice, t->n_accepted);
    /* a forced call the model wrote badly is reported as such already */
    const bool reported = t->prefix.len && fg_tool_parse_n_malformed(t->parser);
    if (completed && v != FG_TOOL_V_ACCEPT && !reported)
        emit_error(s, "the reply made no call that tool_choice requires: %s", fg_tool_verdict_name(v));
}

uint32_t gw_tools_output(const gw_session *s, fg_proto_item *out, uint32_t max)
{
    const gw_tools *t = s->tools_resp;
    uint32_t n = 0;
    for (uint32_t i = 0; t && t->on && i < t->n_calls && n < max; i++)
        out[n++] = call_item(&t->calls[i], t->calls[i].status ? t->calls[i].status : "incomplete");
    return n;
}

uint32_t gw_tools_accepted(const gw_session *s)
{
    return s->tools_resp && s->tools_resp->on ? s->tools_resp->n_accepted : 0;
}
