/* chat_check.c: the C half of the chat template check
 * (tests/chat/check_chat_templates.sh runs it).
 *
 *   chat_check VOCAB.gguf TOKENIZER_CONFIG_JSON CONVERSATIONS_JSON CASES
 *
 * VOCAB.gguf is DeepSeek-V3's tokenizer.json converted as llama.cpp converts
 * it; CASES has, per conversation, what DeepSeek-V3's own chat_template made
 * of it (@huggingface/jinja) and the ids Hugging Face's tokenizer gave that
 * text (tests/chat/chat_render.mjs). Checks:
 *  - the family detected from the config's chat_template, and from the
 *    vocabulary alone, is deepseek-v3;
 *  - fg_chat_render writes the same bytes as the template, for every
 *    conversation (one prompt buffer reused for all);
 *  - fg_chat_encode gives the same ids, markers as single ids; where a
 *    conversation's message text holds marker text ("typed_markers": n),
 *    those n stay plain text instead: the ids decode back to the prompt and
 *    hold exactly n special tokens fewer than the reference's;
 *  - bad conversations are refused with FG_ERR_INVALID_ARG, the families not
 *    rendered yet with FG_ERR_UNSUPPORTED, an unknown template too.
 *
 *   chat_check --v4 VOCAB.gguf V4_VECTORS_JSON
 *
 * DeepSeek-V4: VOCAB.gguf is a generated model with V4's markers
 * (flashgate-modelgen --v4-chat-markers); V4_VECTORS_JSON has, per
 * conversation, the prompt DeepSeek's encoding_dsv4.py made of it
 * (tests/chat/make_v4_vectors.py). Checks: the family detected from the
 * vocabulary is deepseek-v4; fg_chat_render writes the same bytes; in the ids
 * of fg_chat_encode each marker the renderer wrote is one id, as many as it
 * wrote, marker text in messages stays text, and the ids decode back to the
 * prompt; what V4's format cannot express is refused with FG_ERR_INVALID_ARG;
 * for the non-thinking conversations, the session layer's per-item path
 * (fg_template_head/item/reply) gives the same ids as the whole render.
 *
 *   chat_check --v4-split VOCAB.gguf OUT.gguf V4_VECTORS_JSON
 *
 * The same checks on a copy of VOCAB.gguf written to OUT.gguf with V4's own
 * pre-tokenizer (deepseek-v3) and tokens for ">\n", ">\n\n", "\n\n" and
 * "\n\n<" (the pieces that pre-tokenizer can make where two items meet),
 * which the whole renders must hold: where the per-item path ends an item
 * decides whether its ids are the whole render's.
 * Prints every mismatch and "passed N of M"; exits 1 unless all pass.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/chat_template.h"

static int n_pass, n_fail;

static void result(int ok, const char *what, const char *name)
{
    if (ok) {
        n_pass++;
    } else {
        n_fail++;
        printf("FAIL %s: %s\n", name, what);
    }
}

static fg_chat_text text_of(json_t *v)
{
    if (!json_is_string(v))
        return (fg_chat_text){NULL, 0};
    return (fg_chat_text){json_string_value(v), json_string_length(v)};
}

/* The conversation's messages and calls, pointing into the JSON. */
typedef struct conv_buf {
    fg_chat_msg msgs[64];
    fg_chat_call calls[64];
    fg_chat_tool tools[8];
    char *params[8]; /* the tools' schemas as text, owned */
    fg_chat_conv conv;
} conv_buf;

static void conv_buf_free(conv_buf *b)
{
    for (uint32_t i = 0; i < b->conv.n_tools; i++)
        free(b->params[i]);
}

static int build(json_t *c, conv_buf *b)
{
    json_t *msgs = json_object_get(c, "messages"), *m;
    size_t i, n_calls = 0;
    b->conv = (fg_chat_conv){0};
    if (json_array_size(msgs) > 64)
        return -1;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        fg_chat_msg *o = &b->msgs[i];
        *o = (fg_chat_msg){0};
        o->role = !role ? 0
                  : !strcmp(role, "system") ? FG_CHAT_SYSTEM
                  : !strcmp(role, "user") ? FG_CHAT_USER
                  : !strcmp(role, "assistant") ? FG_CHAT_ASSISTANT
                  : !strcmp(role, "tool") ? FG_CHAT_TOOL : 0;
        o->content = text_of(json_object_get(m, "content"));
        o->reasoning = text_of(json_object_get(m, "reasoning_content"));
        json_t *calls = json_object_get(m, "tool_calls"), *tc;
        size_t k;
        o->calls = &b->calls[n_calls];
        json_array_foreach(calls, k, tc) {
            if (n_calls == 64)
                return -1;
            json_t *f = json_object_get(tc, "function");
            b->calls[n_calls++] = (fg_chat_call){text_of(json_object_get(f, "name")),
                                                 text_of(json_object_get(f, "arguments"))};
            o->n_calls++;
        }
    }
    b->conv = (fg_chat_conv){.msgs = b->msgs,
                             .n_msgs = (uint32_t)json_array_size(msgs),
                             .add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
                             .tools = b->tools,
                             .thinking = json_is_true(json_object_get(c, "thinking"))};
    json_t *tools = json_object_get(c, "tools"), *t;
    json_array_foreach(tools, i, t) {
        if (i == 8)
            return -1;
        b->params[i] = json_dumps(json_object_get(t, "parameters"), JSON_COMPACT);
        b->tools[i] = (fg_chat_tool){text_of(json_object_get(t, "name")), text_of(json_object_get(t, "description")),
                                     {b->params[i], b->params[i] ? strlen(b->params[i]) : 0}};
        b->conv.n_tools++;
    }
    return 0;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static size_t count_special(const fg_tokenizer_t *t, const int32_t *ids, size_t n)
{
    size_t s = 0;
    for (size_t i = 0; i < n; i++) {
        const char *x = fg_tokenizer_token_text(t, ids[i]);
        s += x && fg_tokenizer_special_id(t, x, strlen(x)) == ids[i];
    }
    return s;
}

static void show_diff(const char *a, size_t na, const char *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    size_t from = i > 40 ? i - 40 : 0;
    printf("    first difference at byte %zu\n    template : \"%.*s\"\n    flashgate: \"%.*s\"\n", i,
           (int)((na < from + 80 ? na : from + 80) - from), a + from, (int)((nb < from + 80 ? nb : from + 80) - from),
           b + from);
}

/* Conversations the renderer must refuse, and how. */
static void check_refusals(const fg_tokenizer_t *t, fg_chat_prompt *p)
{
    const fg_chat_call call = {{"f", 1}, {"{}", 2}}, noname = {{"", 0}, {"{}", 2}};
    const fg_chat_text hi = {"hi", 2}, absent = {NULL, 0}, bad = {NULL, 3};
    struct {
        const char *name;
        fg_chat_msg m;
    } bad_msgs[] = {
        {"assistant with text and calls", {FG_CHAT_ASSISTANT, hi, &call, 1, absent}},
        {"assistant with neither", {FG_CHAT_ASSISTANT, absent, NULL, 0, absent}},
        {"calls on a user message", {FG_CHAT_USER, hi, &call, 1, absent}},
        {"user without content", {FG_CHAT_USER, absent, NULL, 0, absent}},
        {"tool without content", {FG_CHAT_TOOL, absent, NULL, 0, absent}},
        {"unknown role", {(fg_chat_role)9, hi, NULL, 0, absent}},
        {"call without a name", {FG_CHAT_ASSISTANT, absent, &noname, 1, absent}},
        {"length without bytes", {FG_CHAT_USER, bad, NULL, 0, absent}},
        {"calls count without calls", {FG_CHAT_ASSISTANT, absent, NULL, 2, absent}},
        {"reasoning (V3 has no place for it)", {FG_CHAT_ASSISTANT, hi, NULL, 0, hi}},
        {"reasoning on a user message", {FG_CHAT_USER, hi, NULL, 0, hi}},
    };
    for (size_t i = 0; i < sizeof bad_msgs / sizeof bad_msgs[0]; i++) {
        fg_chat_msg msgs[2] = {{.role = FG_CHAT_USER, .content = hi}, bad_msgs[i].m};
        fg_chat_conv c = {.msgs = msgs, .n_msgs = 2, .add_generation_prompt = true};
        fg_diag d = {{0}};
        fg_err e = fg_chat_render(FG_CHAT_DEEPSEEK_V3, &c, t, p, &d);
        result(e == FG_ERR_INVALID_ARG && p->len == 0 && strstr(d.msg, "message 1"), "refused with the message index",
               bad_msgs[i].name);
        if (e != FG_ERR_INVALID_ARG)
            printf("    got %s: %s\n", fg_err_name(e), d.msg);
    }
    fg_chat_msg one = {.role = FG_CHAT_USER, .content = hi};
    fg_chat_conv c = {.msgs = &one, .n_msgs = 1, .add_generation_prompt = true};
    fg_diag d = {{0}};
    c.thinking = true;
    result(fg_chat_render(FG_CHAT_DEEPSEEK_V3, &c, t, p, &d) == FG_ERR_INVALID_ARG, "V3 has no thinking mode",
           "thinking");
    c.thinking = false;
    result(fg_chat_render(FG_CHAT_DEEPSEEK_R1, &c, t, p, &d) == FG_ERR_UNSUPPORTED, "R1 not rendered yet", "deepseek-r1");
    result(fg_chat_render((fg_chat_family)0, &c, t, p, &d) == FG_ERR_INVALID_ARG, "unknown family", "family 0");
    fg_chat_family f;
    const char *other = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}";
    result(fg_chat_family_detect(other, strlen(other), t, &f, &d) == FG_ERR_UNSUPPORTED, "ChatML refused", "detect");
    const char *r1 = "<\xef\xbd\x9cUser\xef\xbd\x9c> <\xef\xbd\x9ctool\xe2\x96\x81outputs\xe2\x96\x81" "begin\xef\xbd\x9c>"
                     " {% set content = content.split('</think>')[-1] %}";
    result(fg_chat_family_detect(r1, strlen(r1), t, &f, &d) == FG_OK && f == FG_CHAT_DEEPSEEK_R1, "R1 detected",
           "detect");
}

/* ---------------------------------------------------------------- DeepSeek-V4 */

/* V4's markers as the renderer writes them (and modelgen --v4-chat-markers adds). */
static const char *const V4_MARKERS[] = {
    "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<\xef\xbd\x9cUser\xef\xbd\x9c>", "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", "<think>", "</think>",
    "\xef\xbd\x9c" "DSML\xef\xbd\x9c",
};
#define N_V4_MARKERS (sizeof V4_MARKERS / sizeof V4_MARKERS[0])

/* Occurrences of marker text in s[n]. */
static size_t count_text(const char *s, size_t n, const char *mk)
{
    size_t c = 0, k = strlen(mk);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, mk, k)) {
            c++;
            i += k - 1;
        }
    return c;
}

/* How often the encoder itself wrote a marker: its occurrences in the
 * reference prompt less those in the conversation's own texts. */
static size_t count_written(json_t *c, const char *mk)
{
    json_t *want = json_object_get(c, "prompt"), *m;
    size_t n = count_text(json_string_value(want), json_string_length(want), mk), i;
    json_array_foreach(json_object_get(c, "messages"), i, m) {
        static const char *const keys[] = {"content", "reasoning_content"};
        for (size_t k = 0; k < 2; k++) {
            json_t *v = json_object_get(m, keys[k]);
            n -= count_text(json_is_string(v) ? json_string_value(v) : "", json_string_length(v), mk);
        }
    }
    return n;
}

/* What V4's format cannot express, refused with FG_ERR_INVALID_ARG. */
static void v4_refusals(const fg_tokenizer_t *t, fg_chat_prompt *p)
{
    const fg_chat_text hi = {"hi", 2}, absent = {NULL, 0};
    const fg_chat_call not_json = {{"f", 1}, {"city=Paris", 10}}, array = {{"f", 1}, {"[1]", 3}},
                       nan = {{"f", 1}, {"{\"x\": NaN}", 11}}, dup = {{"f", 1}, {"{\"a\":1,\"a\":2}", 13}};
    const fg_chat_call *bad_calls[] = {&not_json, &array, &nan, &dup};
    for (size_t i = 0; i < sizeof bad_calls / sizeof bad_calls[0]; i++) {
        fg_chat_msg m[2] = {{.role = FG_CHAT_USER, .content = hi}, {.role = FG_CHAT_ASSISTANT, .content = absent,
                                                                    .calls = bad_calls[i], .n_calls = 1}};
        fg_chat_conv c = {.msgs = m, .n_msgs = 2};
        fg_diag d = {{0}};
        fg_err e = fg_chat_render(FG_CHAT_DEEPSEEK_V4, &c, t, p, &d);
        result(e == FG_ERR_INVALID_ARG && p->len == 0 && strstr(d.msg, "message 1"), "arguments refused",
               bad_calls[i]->arguments.ptr);
    }
    fg_chat_msg user = {.role = FG_CHAT_USER, .content = hi}, ua[2] = {user, {.role = FG_CHAT_ASSISTANT, .content = hi}};
    fg_chat_conv no_gen = {.msgs = &user, .n_msgs = 1}, gen_after = {.msgs = ua, .n_msgs = 2, .add_generation_prompt = true};
    fg_diag d = {{0}};
    result(fg_chat_render(FG_CHAT_DEEPSEEK_V4, &no_gen, t, p, &d) == FG_ERR_INVALID_ARG, "the reply opening is "
           "always written after a user turn", "no generation prompt");
    result(fg_chat_render(FG_CHAT_DEEPSEEK_V4, &gen_after, t, p, &d) == FG_ERR_INVALID_ARG, "no reply opening after "
           "an assistant turn", "generation prompt after assistant");
    const fg_chat_tool bad_tool = {{"f", 1}, absent, {"[]", 2}};
    fg_chat_conv tool_conv = {.msgs = &user, .n_msgs = 1, .add_generation_prompt = true, .tools = &bad_tool, .n_tools = 1};
    result(fg_chat_render(FG_CHAT_DEEPSEEK_V4, &tool_conv, t, p, &d) == FG_ERR_INVALID_ARG && p->len == 0,
           "a schema that is not an object", "tool parameters");
    const fg_chat_tool bad_name = {{"\xff", 1}, absent, {"{}", 2}};
    tool_conv.tools = &bad_name;
    result(fg_chat_render(FG_CHAT_DEEPSEEK_V4, &tool_conv, t, p, &d) == FG_ERR_INVALID_ARG && p->len == 0,
           "a name that is not UTF-8", "tool name");
}

/* The session layer's per-item path (non-thinking: what sessions run): the
 * leading system message (or none) and the tools as the session's head, each
 * other message as its items (an assistant's text a message item, each call
 * a function_call item, a tool message a function_call_output), then the
 * reply marker or the open turn's close; the ids must be fg_chat_encode's of
 * fg_chat_render's prompt. */
static void v4_items_check(const fg_tokenizer_t *t, const fg_chat_conv *conv, const char *name)
{
    if (conv->thinking)
        return;
    fg_diag d = {{0}};
    fg_chat_prompt p = {0};
    fg_tokens want = {0}, got = {0};
    bool ok = fg_chat_render(FG_CHAT_DEEPSEEK_V4, conv, t, &p, &d) == FG_OK && fg_chat_encode(t, &p, &want) == FG_OK;
    uint32_t i = 0;
    fg_chat_text ins = {"", 0};
    if (conv->n_msgs && conv->msgs[0].role == FG_CHAT_SYSTEM)
        ins = conv->msgs[i++].content;
    if (conv->n_tools) { /* as gw_session_head: the rendered system turn with the tools */
        fg_chat_msg sys = {.role = FG_CHAT_SYSTEM, .content = ins};
        fg_chat_conv head = {.msgs = &sys, .n_msgs = 1, .tools = conv->tools, .n_tools = conv->n_tools};
        ok = ok && fg_chat_render(FG_CHAT_DEEPSEEK_V4, &head, t, &p, &d) == FG_OK && fg_chat_encode(t, &p, &got) == FG_OK;
    } else {
        ok = ok && fg_template_head(t, ins.ptr, ins.len, &got) == FG_OK;
    }
    fg_template_tail tail = FG_TEMPLATE_TAIL_NONE;
    for (; ok && i < conv->n_msgs; i++) {
        const fg_chat_msg *m = &conv->msgs[i];
        fg_proto_item it = {.type = FG_PROTO_ITEM_MESSAGE, .n_content = 1};
        it.content[0].text = (fg_proto_str){m->content.ptr ? m->content.ptr : "", m->content.len};
        switch (m->role) {
        case FG_CHAT_SYSTEM:
            it.role = FG_PROTO_ROLE_SYSTEM;
            break;
        case FG_CHAT_USER:
            it.role = FG_PROTO_ROLE_USER;
            break;
        case FG_CHAT_ASSISTANT:
            it.role = FG_PROTO_ROLE_ASSISTANT;
            break;
        case FG_CHAT_TOOL:
            it = (fg_proto_item){.type = FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT,
                                 .output = {m->content.ptr ? m->content.ptr : "", m->content.len}};
            break;
        }
        if (m->role != FG_CHAT_ASSISTANT || m->content.ptr)
            ok = fg_template_item(t, &tail, &it, &got) == FG_OK;
        for (uint32_t k = 0; ok && k < m->n_calls; k++) {
            fg_proto_item call = {.type = FG_PROTO_ITEM_FUNCTION_CALL,
                                  .name = {m->calls[k].name.ptr, m->calls[k].name.len},
                                  .arguments = {m->calls[k].arguments.ptr, m->calls[k].arguments.len}};
            ok = fg_template_item(t, &tail, &call, &got) == FG_OK;
        }
    }
    ok = ok && (conv->add_generation_prompt ? fg_template_reply(t, &tail, &got) : fg_template_close(t, &tail, &got)) == FG_OK;
    bool same = ok && got.n == want.n && !memcmp(got.v, want.v, got.n * sizeof *got.v);
    result(same, "head + items + reply (the session's per-item path) are the rendered prompt's ids", name);
    if (ok && !same) {
        static char a[1 << 16], b[1 << 16];
        size_t na = 0, nb = 0;
        fg_tokenizer_decode(t, want.v, want.n, true, a, sizeof a, &na);
        fg_tokenizer_decode(t, got.v, got.n, true, b, sizeof b, &nb);
        printf("    ids %zu, per item %zu\n", want.n, got.n);
        show_diff(a, na < sizeof a ? na : sizeof a - 1, b, nb < sizeof b ? nb : sizeof b - 1);
    }
    fg_tokens_free(&want);
    fg_tokens_free(&got);
    fg_chat_prompt_free(&p);
}

/* Byte-level BPE symbols ('\n' is U+010A "Ċ") that DeepSeek's pre-tokenizer
 * can put in one piece across two items: ">\n" (a call, then the next call
 * or the block's end), ">\n\n" (a tool output, then the next part of the
 * user turn), and "\n\n<". */
static const char *const JOINED[] = {"\xc4\x8a\xc4\x8a", ">\xc4\x8a", ">\xc4\x8a\xc4\x8a", "\xc4\x8a\xc4\x8a<"};
#define N_JOINED (sizeof JOINED / sizeof JOINED[0])
static const char *const JOINED_MERGES[] = {"\xc4\x8a \xc4\x8a", "> \xc4\x8a", "> \xc4\x8a\xc4\x8a",
                                            ">\xc4\x8a \xc4\x8a", "\xc4\x8a\xc4\x8a <"};
#define N_JOINED_MERGES (sizeof JOINED_MERGES / sizeof JOINED_MERGES[0])

/* Writes to out a copy of src's vocabulary with DeepSeek-V3's pre-tokenizer
 * ("deepseek-v3", as V4 ships) and the JOINED tokens with their merges
 * appended (those it lacks), the other keys copied. 0 on success. */
static int write_split_vocab(const char *src, const char *out)
{
    fg_diag d = {{0}};
    fg_gguf_t *g;
    if (fg_gguf_open_file(src, &g, &d) != FG_OK) {
        fprintf(stderr, "chat_check: %s: %s\n", src, d.msg);
        return 2;
    }
    fg_gguf_writer_t *w = NULL;
    fg_gguf_vtype et;
    uint64_t n_tok = 0, n_merge = 0;
    fg_err e = fg_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok);
    if (!e)
        e = fg_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_merge);
    const uint64_t cap_tok = n_tok + N_JOINED, cap_merge = n_merge + N_JOINED_MERGES;
    const char **tok = calloc(cap_tok, sizeof *tok), **merge = calloc(cap_merge, sizeof *merge);
    uint64_t *tok_len = calloc(cap_tok, sizeof *tok_len), *merge_len = calloc(cap_merge, sizeof *merge_len);
    int32_t *type = calloc(cap_tok, sizeof *type);
    if (!e && (!tok || !merge || !tok_len || !merge_len || !type))
        e = FG_ERR_NOMEM;
    fg_gguf_str v;
    for (uint64_t i = 0; !e && i < n_tok; i++) {
        int64_t ty = 1;
        e = fg_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &v);
        if (!e)
            e = fg_gguf_get_arr_i64(g, "tokenizer.ggml.token_type", i, &ty);
        tok[i] = v.ptr, tok_len[i] = v.len, type[i] = (int32_t)ty;
    }
    for (uint64_t i = 0; !e && i < n_merge; i++) {
        e = fg_gguf_get_arr_str(g, "tokenizer.ggml.merges", i, &v);
        merge[i] = v.ptr, merge_len[i] = v.len;
    }
    for (size_t k = 0; !e && k < N_JOINED; k++) {
        bool have = false;
        for (uint64_t i = 0; i < n_tok && !have; i++)
            have = tok_len[i] == strlen(JOINED[k]) && !memcmp(tok[i], JOINED[k], tok_len[i]);
        if (!have)
            tok[n_tok] = JOINED[k], tok_len[n_tok] = strlen(JOINED[k]), type[n_tok++] = 1; /* normal */
    }
    for (size_t k = 0; !e && k < N_JOINED_MERGES; k++) {
        bool have = false;
        for (uint64_t i = 0; i < n_merge && !have; i++)
            have = merge_len[i] == strlen(JOINED_MERGES[k]) && !memcmp(merge[i], JOINED_MERGES[k], merge_len[i]);
        if (!have)
            merge[n_merge] = JOINED_MERGES[k], merge_len[n_merge++] = strlen(JOINED_MERGES[k]);
    }
    if (!e)
        e = fg_gguf_writer_create(out, 0, &w, &d);
    for (uint64_t i = 0; !e && i < fg_gguf_key_count(g); i++) {
        const char *key = fg_gguf_key_name(g, i);
        if (!strcmp(key, "tokenizer.ggml.tokens") || !strcmp(key, "tokenizer.ggml.token_type") ||
            !strcmp(key, "tokenizer.ggml.merges") || !strcmp(key, "tokenizer.ggml.pre"))
            continue;
        uint64_t len;
        const void *raw = fg_gguf_key_raw(g, i, &len);
        e = fg_gguf_writer_add_raw(w, key, (uint32_t)fg_gguf_key_type(g, i), raw, len);
    }
    if (!e)
        e = fg_gguf_writer_add_str(w, "tokenizer.ggml.pre", "deepseek-v3");
    if (!e)
        e = fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tok, tok_len, n_tok);
    if (!e)
        e = fg_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", type, n_tok);
    if (!e)
        e = fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merge, merge_len, n_merge);
    if (!e)
        e = fg_gguf_writer_begin_data(w, &d);
    if (!e)
        e = fg_gguf_writer_finish(w, &d);
    if (e)
        fprintf(stderr, "chat_check: writing %s: %s %s\n", out, fg_err_name(e), d.msg);
    fg_gguf_writer_destroy(w);
    free(tok), free(tok_len), free(type), free(merge), free(merge_len);
    fg_gguf_close(g);
    return e ? 2 : 0;
}

static int v4_main(const char *vocab, const char *vectors, bool split)
{
    fg_diag d = {{0}};
    fg_gguf_t *g;
    fg_tokenizer_t *t;
    if (fg_gguf_open_file(vocab, &g, &d) != FG_OK || fg_tokenizer_create(g, &t, &d) != FG_OK) {
        fprintf(stderr, "chat_check: %s: %s\n", vocab, d.msg);
        return 2;
    }
    json_error_t je;
    json_t *convs = json_load_file(vectors, 0, &je);
    if (!json_is_array(convs)) {
        fprintf(stderr, "chat_check: %s: %s\n", vectors, je.text);
        return 2;
    }
    fg_chat_family f = 0;
    fg_err e = fg_chat_family_detect(NULL, 0, t, &f, &d);
    result(e == FG_OK && f == FG_CHAT_DEEPSEEK_V4, "family from the vocabulary is deepseek-v4", "detect");
    int32_t marker_id[N_V4_MARKERS];
    for (size_t k = 0; k < N_V4_MARKERS; k++) {
        marker_id[k] = fg_tokenizer_special_id(t, V4_MARKERS[k], strlen(V4_MARKERS[k]));
        result(marker_id[k] >= 0, "the vocabulary has the marker as a special token", V4_MARKERS[k]);
    }
    int32_t joined_id[N_JOINED];
    size_t joined_seen[N_JOINED] = {0};
    for (size_t k = 0; split && k < N_JOINED; k++) {
        fg_tokens one = {0};
        const char *text = k == 0 ? "\n\n" : k == 1 ? ">\n" : k == 2 ? ">\n\n" : "\n\n<";
        joined_id[k] = -1;
        if (fg_tokens_reserve(&one, 8) == FG_OK) {
            size_t got = 0;
            if (fg_tokenizer_encode(t, text, strlen(text), false, 0, one.v, one.cap, &got) == FG_OK && got == 1)
                joined_id[k] = one.v[0];
        }
        fg_tokens_free(&one);
        /* "\n\n<" is never one piece under this split (the newlines are one before "<"): in the vocabulary
         * all the same, in case the pre-tokenizer joined them */
        if (k < 3)
            result(joined_id[k] >= 0, "the split vocabulary has the joined piece as one token", JOINED[k]);
    }
    fg_chat_prompt p = {0};
    fg_tokens ids = {0};
    size_t i, cap = 1 << 20;
    char *back = malloc(cap);
    json_t *c;
    json_array_foreach(convs, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *want = json_object_get(c, "prompt");
        conv_buf b;
        if (build(c, &b)) {
            result(0, "conversation too big for the checker", name);
            conv_buf_free(&b);
            continue;
        }
        e = fg_chat_render(FG_CHAT_DEEPSEEK_V4, &b.conv, t, &p, &d);
        if (e == FG_OK)
            v4_items_check(t, &b.conv, name);
        conv_buf_free(&b);
        size_t n_want = json_string_length(want);
        bool same = e == FG_OK && p.len == n_want && !memcmp(p.text, json_string_value(want), n_want);
        result(same, "rendered text equals the encoder's", name);
        if (e != FG_OK)
            printf("    %s: %s\n", fg_err_name(e), d.msg);
        else if (!same)
            show_diff(json_string_value(want), n_want, p.text, p.len);
        if (!same)
            continue;
        ids.n = 0;
        size_t n_back = 0;
        e = fg_chat_encode(t, &p, &ids);
        for (size_t k = 0; split && k < N_JOINED; k++)
            for (size_t q = 0; q < ids.n; q++)
                joined_seen[k] += ids.v[q] == joined_id[k];
        bool round = e == FG_OK && fg_tokenizer_decode(t, ids.v, ids.n, true, back, cap, &n_back) == FG_OK &&
                     n_back == p.len && !memcmp(back, p.text, p.len);
        result(round, "the ids decode back to the prompt", name);
        for (size_t k = 0; k < N_V4_MARKERS; k++) {
            size_t wrote = count_written(c, V4_MARKERS[k]), got = 0;
            for (size_t q = 0; q < ids.n; q++)
                got += ids.v[q] == marker_id[k];
            result(wrote == got, "each marker the renderer wrote is one id, marker text in messages is not", name);
            if (wrote != got)
                printf("    %s: written %zu, ids %zu\n", V4_MARKERS[k], wrote, got);
        }
    }
    /* the vectors meet there: two calls, two tool outputs, an output and a user message */
    for (size_t k = 1; split && k < 3; k++)
        result(joined_seen[k] > 0, "the whole renders hold the joined piece (the per-item check covers it)", JOINED[k]);
    v4_refusals(t, &p);
    printf("passed %d of %d\n", n_pass, n_pass + n_fail);
    free(back);
    fg_tokens_free(&ids);
    fg_chat_prompt_free(&p);
    json_decref(convs);
    fg_tokenizer_destroy(t);
    fg_gguf_close(g);
    return n_fail ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--v4"))
        return v4_main(argv[2], argv[3], false);
    if (argc == 5 && !strcmp(argv[1], "--v4-split")) {
        int rc = write_split_vocab(argv[2], argv[3]);
        return rc ? rc : v4_main(argv[3], argv[4], true);
    }
    if (argc != 5) {
        fprintf(stderr, "usage: chat_check VOCAB.gguf TOKENIZER_CONFIG_JSON CONVERSATIONS_JSON CASES\n"
                        "       chat_check --v4 VOCAB.gguf V4_VECTORS_JSON\n"
                        "       chat_check --v4-split VOCAB.gguf OUT.gguf V4_VECTORS_JSON\n");
        return 2;
    }
    fg_diag d = {{0}};
    fg_gguf_t *g;
    fg_tokenizer_t *t;
    if (fg_gguf_open_file(argv[1], &g, &d) != FG_OK || fg_tokenizer_create(g, &t, &d) != FG_OK) {
        fprintf(stderr, "chat_check: %s: %s\n", argv[1], d.msg);
        return 2;
    }
    json_error_t je;
    json_t *cfg = json_load_file(argv[2], 0, &je), *convs = json_load_file(argv[3], 0, &je);
    FILE *cases = fopen(argv[4], "r");
    if (!cfg || !convs || !cases) {
        fprintf(stderr, "chat_check: cannot read the inputs (%s)\n", je.text);
        return 2;
    }

    fg_chat_family f = 0;
    json_t *tmpl = json_object_get(cfg, "chat_template");
    fg_err e = fg_chat_family_detect(json_string_value(tmpl), json_string_length(tmpl), t, &f, &d);
    result(e == FG_OK && f == FG_CHAT_DEEPSEEK_V3, "family from the chat_template is deepseek-v3", "detect");
    fg_chat_family fv = 0;
    e = fg_chat_family_detect(NULL, 0, t, &fv, &d);
    result(e == FG_OK && fv == FG_CHAT_DEEPSEEK_V3, "family from the vocabulary is deepseek-v3", "detect");

    size_t cap = 1 << 20;
    char *line = malloc(cap), *want_text = malloc(cap), *back = malloc(cap);
    int32_t *want = malloc(cap * sizeof *want);
    fg_chat_prompt p = {0};
    fg_tokens ids = {0};
    size_t i;
    json_t *c;
    json_array_foreach(convs, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        if (!fgets(line, (int)cap, cases) || strncmp(line, name, strlen(name)) || line[strlen(name)] != '\t') {
            result(0, "no reference line", name);
            continue;
        }
        char *hex = line + strlen(name) + 1, *tab = strchr(hex, '\t');
        size_t n_text = 0, n_want = 0;
        for (char *q = hex; tab && q + 1 < tab; q += 2)
            want_text[n_text++] = (char)(hexval(q[0]) << 4 | hexval(q[1]));
        for (char *q = tab ? tab + 1 : hex, *r; (strtol(q, &r, 10), r != q); q = r)
            want[n_want++] = (int32_t)strtol(q, NULL, 10);

        conv_buf b;
        if (build(c, &b)) {
            result(0, "conversation too big for the checker", name);
            continue;
        }
        e = fg_chat_render(f, &b.conv, t, &p, &d);
        conv_buf_free(&b);
        bool same_text = e == FG_OK && p.len == n_text && !memcmp(p.text, want_text, n_text);
        result(same_text, "rendered text equals the template's", name);
        if (e != FG_OK)
            printf("    %s: %s\n", fg_err_name(e), d.msg);
        else if (!same_text)
            show_diff(want_text, n_text, p.text, p.len);
        if (!same_text)
            continue;

        ids.n = 0;
        e = fg_chat_encode(t, &p, &ids);
        size_t typed = (size_t)json_integer_value(json_object_get(c, "typed_markers")), n_back = 0;
        if (typed == 0) {
            bool same = e == FG_OK && ids.n == n_want && !memcmp(ids.v, want, n_want * sizeof *want);
            result(same, "ids equal the reference tokenizer's", name);
            if (!same) {
                printf("    hf       :");
                for (size_t k = 0; k < n_want && k < 60; k++)
                    printf(" %d", want[k]);
                printf("\n    flashgate:");
                for (size_t k = 0; k < ids.n && k < 60; k++)
                    printf(" %d", ids.v[k]);
                putchar('\n');
            }
        } else {
            bool round = e == FG_OK && fg_tokenizer_decode(t, ids.v, ids.n, true, back, cap, &n_back) == FG_OK &&
                         n_back == n_text && !memcmp(back, want_text, n_text);
            size_t ours = count_special(t, ids.v, ids.n), theirs = count_special(t, want, n_want);
            result(round && ours + typed == theirs, "typed markers stay text, template markers stay ids", name);
            if (!(round && ours + typed == theirs))
                printf("    round trip %d, special ids: ours %zu, reference %zu, typed %zu\n", round, ours, theirs,
                       typed);
        }
    }
    check_refusals(t, &p);

    printf("passed %d of %d\n", n_pass, n_pass + n_fail);
    fg_tokens_free(&ids);
    fg_chat_prompt_free(&p);
    free(line);
    free(want_text);
    free(back);
    free(want);
    fclose(cases);
    json_decref(cfg);
    json_decref(convs);
    fg_tokenizer_destroy(t);
    fg_gguf_close(g);
    return n_fail ? 1 : 0;
}
