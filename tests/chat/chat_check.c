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
 * Prints every mismatch and "passed N of M"; exits 1 unless all pass.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h"
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
    fg_chat_conv conv;
} conv_buf;

static int build(json_t *c, conv_buf *b)
{
    json_t *msgs = json_object_get(c, "messages"), *m;
    size_t i, n_calls = 0;
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
    b->conv = (fg_chat_conv){b->msgs, (uint32_t)json_array_size(msgs),
                             json_is_true(json_object_get(c, "add_generation_prompt")), NULL, 0};
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
        {"assistant with text and calls", {FG_CHAT_ASSISTANT, hi, &call, 1}},
        {"assistant with neither", {FG_CHAT_ASSISTANT, absent, NULL, 0}},
        {"calls on a user message", {FG_CHAT_USER, hi, &call, 1}},
        {"user without content", {FG_CHAT_USER, absent, NULL, 0}},
        {"tool without content", {FG_CHAT_TOOL, absent, NULL, 0}},
        {"unknown role", {(fg_chat_role)9, hi, NULL, 0}},
        {"call without a name", {FG_CHAT_ASSISTANT, absent, &noname, 1}},
        {"length without bytes", {FG_CHAT_USER, bad, NULL, 0}},
        {"calls count without calls", {FG_CHAT_ASSISTANT, absent, NULL, 2}},
    };
    for (size_t i = 0; i < sizeof bad_msgs / sizeof bad_msgs[0]; i++) {
        fg_chat_msg msgs[2] = {{FG_CHAT_USER, hi, NULL, 0}, bad_msgs[i].m};
        fg_chat_conv c = {msgs, 2, true, NULL, 0};
        fg_diag d = {{0}};
        fg_err e = fg_chat_render(FG_CHAT_DEEPSEEK_V3, &c, t, p, &d);
        result(e == FG_ERR_INVALID_ARG && p->len == 0 && strstr(d.msg, "message 1"), "refused with the message index",
               bad_msgs[i].name);
        if (e != FG_ERR_INVALID_ARG)
            printf("    got %s: %s\n", fg_err_name(e), d.msg);
    }
    fg_chat_msg one = {FG_CHAT_USER, hi, NULL, 0};
    fg_chat_conv c = {&one, 1, true, NULL, 0};
    fg_diag d = {{0}};
    result(fg_chat_render(FG_CHAT_DEEPSEEK_V4, &c, t, p, &d) == FG_ERR_UNSUPPORTED, "V4 not rendered yet", "deepseek-v4");
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

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: chat_check VOCAB.gguf TOKENIZER_CONFIG_JSON CONVERSATIONS_JSON CASES\n");
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
