/* test_tool_parse.c: gateway/tool_parse.h on scripted replies: one call,
 * parallel calls, text then calls, every chunking of them (each split point,
 * byte at a time, random cuts), malformed calls of every reason with the
 * parse going on after them, and a round trip through fg_chat_render; the
 * same for DeepSeek-V4's DSML, and both families' call prefixes. */
#include <jansson.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/tokenizer/byte_unicode.h"
#include "fg_test.h"
#include "gateway/chat_template.h"
#include "gateway/tool_decl.h"
#include "gateway/tool_parse.h"

#define B "\xef\xbd\x9c"
#define S "\xe2\x96\x81"
#define CALLS_BEGIN "<" B "tool" S "calls" S "begin" B ">"
#define CALLS_END "<" B "tool" S "calls" S "end" B ">"
#define CALL_BEGIN "<" B "tool" S "call" S "begin" B ">"
#define CALL_END "<" B "tool" S "call" S "end" B ">"
#define SEP "<" B "tool" S "sep" B ">"
#define EOS "<" B "end" S "of" S "sentence" B ">"
#define USER "<" B "User" B ">"
#define ASSISTANT "<" B "Assistant" B ">"
#define CALL(name, args) CALL_BEGIN "function" SEP name "\n```json\n" args "\n```" CALL_END

/* The events of a parse written as one line each, adjacent deltas joined. */
typedef struct rec {
    char s[16384];
    size_t n;
    int last; /* the type of the last event, to join deltas */
    uint32_t last_index;
    int utf8_cut; /* a TEXT delta ended inside a UTF-8 sequence */
} rec;

static void put(rec *r, const char *s, size_t n)
{
    if (r->n + n >= sizeof r->s)
        n = sizeof r->s - 1 - r->n;
    memcpy(r->s + r->n, s, n);
    r->n += n;
    r->s[r->n] = '\0';
}

static bool open_utf8_tail(const char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xc0) == 0x80)
            continue;
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > k;
    }
    return false;
}

static void sink(void *ctx, const fg_tool_event *ev)
{
    rec *r = ctx;
    char head[160];
    bool join = (ev->type == FG_TOOL_EV_TEXT || ev->type == FG_TOOL_EV_ARGS_DELTA) && (int)ev->type == r->last &&
                ev->index == r->last_index;
    if (!join && r->n)
        put(r, "\n", 1);
    switch (ev->type) {
    case FG_TOOL_EV_TEXT:
        if (!join)
            put(r, "T:", 2);
        put(r, ev->text, ev->len);
        if (open_utf8_tail(ev->text, ev->len))
            r->utf8_cut++;
        break;
    case FG_TOOL_EV_CALL_BEGIN:
        snprintf(head, sizeof head, "B%u:%s", ev->index, ev->name);
        put(r, head, strlen(head));
        CHECK(strlen(ev->name) == ev->name_len);
        break;
    case FG_TOOL_EV_ARGS_DELTA:
        if (!join) {
            snprintf(head, sizeof head, "A%u:", ev->index);
            put(r, head, strlen(head));
        }
        put(r, ev->text, ev->len);
        break;
    case FG_TOOL_EV_CALL_DONE:
        snprintf(head, sizeof head, "D%u:%s:", ev->index, ev->name);
        put(r, head, strlen(head));
        put(r, ev->text, ev->len);
        break;
    case FG_TOOL_EV_MALFORMED:
        if (ev->index == UINT32_MAX)
            snprintf(head, sizeof head, "M-:%s", fg_tool_bad_name(ev->reason));
        else
            snprintf(head, sizeof head, "M%u:%s", ev->index, fg_tool_bad_name(ev->reason));
        put(r, head, strlen(head));
        CHECK(ev->detail && ev->detail[0]);
        break;
    }
    r->last = (int)ev->type;
    r->last_index = ev->index;
}

static fg_tool_parser_t *P;

/* Parses text cut at the given points (sorted, inside (0, n)). */
static void parse_cut(const char *text, size_t n, const size_t *cuts, size_t n_cuts, rec *r)
{
    memset(r, 0, sizeof *r);
    r->last = -1;
    fg_tool_parser_reset(P);
    size_t at = 0;
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        fg_tool_parse_feed(P, text + at, end - at, sink, r);
        at = end;
    }
    fg_tool_parse_finish(P, sink, r);
}

static void parse(const char *text, rec *r) { parse_cut(text, strlen(text), NULL, 0, r); }

static void expect(const char *text, const char *want)
{
    rec r;
    parse(text, &r);
    CHECK_MSG(strcmp(r.s, want) == 0, "parse of\n%s\ngave\n%s\nwanted\n%s", text, r.s, want);
}

/* The same events for every chunking of text. */
static void every_chunking(const char *text)
{
    size_t n = strlen(text);
    static rec whole, part;
    parse(text, &whole);
    for (size_t c = 1; c < n; c++) {
        parse_cut(text, n, &c, 1, &part);
        CHECK_MSG(strcmp(part.s, whole.s) == 0, "cut at %zu:\n%s\nwhole:\n%s", c, part.s, whole.s);
        CHECK(part.utf8_cut == 0);
    }
    size_t *cuts = malloc(n * sizeof *cuts);
    for (size_t i = 1; i < n; i++)
        cuts[i - 1] = i;
    parse_cut(text, n, cuts, n - 1, &part);
    CHECK_MSG(strcmp(part.s, whole.s) == 0, "byte at a time:\n%s\nwhole:\n%s", part.s, whole.s);
    CHECK(part.utf8_cut == 0);
    rng_seed(n);
    for (int t = 0; t < 200; t++) {
        size_t k = 0;
        for (size_t i = 1; i < n; i++)
            if (rng_u32() % 7 == 0)
                cuts[k++] = i;
        parse_cut(text, n, cuts, k, &part);
        CHECK_MSG(strcmp(part.s, whole.s) == 0, "random cuts (%zu):\n%s\nwhole:\n%s", k, part.s, whole.s);
    }
    free(cuts);
}

static void test_well_formed(void)
{
    expect(CALLS_BEGIN CALL("get_weather", "{\"city\": \"Tokyo\"}") CALLS_END EOS,
           "B0:get_weather\nA0:{\"city\": \"Tokyo\"}\nD0:get_weather:{\"city\": \"Tokyo\"}");
    /* parallel calls, "\n" between them as V3's template writes them */
    expect(CALLS_BEGIN CALL("a", "{}") "\n" CALL("b_2", "{\"x\": [1, 2]}") CALLS_END EOS,
           "B0:a\nA0:{}\nD0:a:{}\nB1:b_2\nA1:{\"x\": [1, 2]}\nD1:b_2:{\"x\": [1, 2]}");
    /* text, then a call; a single call left open before EOS, as V3's template writes one */
    expect("Let me check the weather. " CALLS_BEGIN CALL("w", "{\"q\": \"\xe6\x97\xa5\xe6\x9c\xac\"}") EOS,
           "T:Let me check the weather. \nB0:w\nA0:{\"q\": \"\xe6\x97\xa5\xe6\x9c\xac\"}\n"
           "D0:w:{\"q\": \"\xe6\x97\xa5\xe6\x9c\xac\"}");
    /* text only; EOS and the chat's markers write nothing, other "<" stays text */
    expect("a < b <\xef\xbd\x9c not a marker \xc3\xa9" ASSISTANT "!" EOS, "T:a < b <\xef\xbd\x9c not a marker \xc3\xa9!");
    /* fences and markers inside the JSON, a fence of four backticks, whitespace around the closing one */
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP "f\n```json\n{\"c\": \"```x``` <b> <\xef\xbd\x9cy\"}\n````  "
           CALL_END CALLS_END,
           "B0:f\nA0:{\"c\": \"```x``` <b> <\xef\xbd\x9cy\"}\n`\nM0:bad_json");
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP "f\n```json\n{\"c\": \"```x``` <b> <\xef\xbd\x9cy\"}  \n```  \n"
           CALL_END CALLS_END,
           "B0:f\nA0:{\"c\": \"```x``` <b> <\xef\xbd\x9cy\"}\nD0:f:{\"c\": \"```x``` <b> <\xef\xbd\x9cy\"}");
    /* text after the block goes on as text */
    expect(CALLS_BEGIN CALL("f", "{}") CALLS_END "done", "B0:f\nA0:{}\nD0:f:{}\nT:done");
}

static void test_chunkings(void)
{
    every_chunking("Sure \xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80: " CALLS_BEGIN CALL("get_weather", "{\"city\": \"T\xc3\xb6kyo\", \"n\": [1, {\"a\": \"```\"}]}")
                   "\n" CALL("other-fn", "{}") CALLS_END EOS);
    every_chunking(CALLS_BEGIN CALL_BEGIN "function" SEP "\n```json\n{}\n```" CALL_END "\n" CALL("ok", "{\"k\": 1}") CALLS_END);
    every_chunking("x" CALL_BEGIN "function" SEP "f\n```json\n{}" CALLS_BEGIN CALL("g", "[1]") CALL("h", "{\"a\":") "tail");
    every_chunking(CALLS_BEGIN CALL("f", "{\"a\": 1"));
}

static void test_malformed(void)
{
    /* no name, then a good call: the parse goes on */
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP "\n```json\n{}\n```" CALL_END "\n" CALL("ok", "{}") CALLS_END,
           "M0:bad_name\nB1:ok\nA1:{}\nD1:ok:{}");
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP CALL_END CALLS_END, "M0:bad_name");
    expect(CALLS_BEGIN CALL("bad name", "{}") CALLS_END, "M0:bad_name");
    expect(CALLS_BEGIN CALL("f", "{city: Tokyo}") CALLS_END, "B0:f\nA0:{city: Tokyo}\nM0:bad_json");
    expect(CALLS_BEGIN CALL("f", "[1, 2]") CALLS_END, "B0:f\nA0:[1, 2]\nM0:bad_json");
    expect(CALLS_BEGIN CALL("f", "{} {}") CALLS_END, "B0:f\nA0:{} {}\nM0:bad_json");
    expect(CALLS_BEGIN CALL("f", "") CALLS_END, "B0:f\nM0:bad_json");
    /* cut short: inside the arguments, the name, right after the markers */
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP "f\n```json\n{\"a\": ", "B0:f\nA0:{\"a\":\nM0:unterminated");
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP "get_w", "M0:unterminated");
    expect(CALLS_BEGIN CALL_BEGIN, "M0:unterminated");
    expect(CALLS_BEGIN, "");
    /* order: a call outside the block, stray markers, a marker inside the arguments */
    expect("hi " CALL("f", "{}") " there", "T:hi \nM0:bad_order\nT: there");
    expect("a" CALL_END "b" SEP "c", "T:a\nM-:bad_order\nT:b\nM-:bad_order\nT:c");
    expect(CALLS_BEGIN "oops" CALL("f", "{}") CALLS_END "x", "M-:bad_order\nB0:f\nA0:{}\nD0:f:{}\nT:x");
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP "f\n```json\n{\"a\": 1" CALL("g", "{}") CALLS_END,
           "B0:f\nA0:{\"a\": 1\nM0:bad_order\nB1:g\nA1:{}\nD1:g:{}");
    expect(CALLS_BEGIN CALL_BEGIN CALL("g", "{}"), "M0:bad_order\nB1:g\nA1:{}\nD1:g:{}");
    /* DeepSeek-V3.1's form (name before the separator, no fence) is not V3's */
    expect(CALLS_BEGIN CALL_BEGIN "get_weather" SEP "{\"a\": 1}" CALL_END CALLS_END, "M0:bad_type");
    expect(CALLS_BEGIN CALL_BEGIN "functionfunctionfunction" SEP, "M0:bad_type");
    /* fences */
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP "f\n{\"a\": 1}" CALL_END CALLS_END, "B0:f\nM0:bad_fence");
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP "f\n```json\n{\"a\": 1}" CALL_END CALLS_END,
           "B0:f\nA0:{\"a\": 1}\nM0:bad_fence");
    expect(CALLS_BEGIN CALL_BEGIN "function" SEP "f" CALL_END CALLS_END, "M0:bad_fence");
    char longname[200];
    memset(longname, 'n', 100);
    strcpy(longname + 100, "\n");
    char buf[512];
    snprintf(buf, sizeof buf, CALLS_BEGIN CALL_BEGIN "function" SEP "%s```json\n{}\n```" CALL_END CALLS_END, longname);
    expect(buf, "M0:bad_name");
}

/* The arguments' limit: a clear error for the call, the next one still read. */
static void test_limit(void)
{
    fg_tool_parser_t *small;
    fg_diag d = {{0}};
    CHECK(fg_tool_parser_create(&(fg_tool_parse_opts){.max_args = 16}, &small, &d) == FG_OK);
    fg_tool_parser_t *keep = P;
    P = small;
    expect(CALLS_BEGIN CALL("f", "{\"a\": \"0123456789abcdef\"}") "\n" CALL("g", "{\"b\": 1}") CALLS_END,
           "B0:f\nA0:{\"a\": \"012345678\nM0:too_long\nB1:g\nA1:{\"b\": 1}\nD1:g:{\"b\": 1}");
    every_chunking(CALLS_BEGIN CALL("f", "{\"a\": \"0123456789abcdef\"}") "\n" CALL("g", "{\"b\": 1}") CALLS_END);
    CHECK(fg_tool_parse_n_done(P) == 1 && fg_tool_parse_n_malformed(P) == 1);
    P = keep;
    fg_tool_parser_destroy(small);
    CHECK(fg_tool_parser_create(&(fg_tool_parse_opts){.max_args = FG_TOOL_ARGS_MAX + 1u}, &small, &d) ==
          FG_ERR_INVALID_ARG);
    CHECK(strstr(d.msg, "limit") != NULL);
}

/* No allocation on the delta path once the buffers have grown: text and
 * arguments fed a byte at a time, counted by the sanitizer's allocator hooks
 * (only a CALL_DONE's JSON check allocates). */
#if defined(__SANITIZE_ADDRESS__)
/* from the sanitizers' allocator_interface.h, which not every compiler package installs */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
static long n_allocs;
static int counting;
static void on_malloc(const volatile void *ptr, size_t size)
{
    (void)ptr;
    (void)size;
    if (counting)
        n_allocs++;
}
static void on_free(const volatile void *ptr) { (void)ptr; }
static long n_events;
static void count_sink(void *ctx, const fg_tool_event *ev)
{
    (void)ctx;
    (void)ev;
    n_events++;
}

static void test_no_alloc(void)
{
    size_t cap = 64 * 1024, n = 0;
    char *reply = malloc(cap);
    for (int i = 0; i < 2000; i++)
        n += (size_t)sprintf(reply + n, "w\xc3\xa9%d <b> ", i);
    n += (size_t)sprintf(reply + n, CALLS_BEGIN CALL_BEGIN "function" SEP "f\n```json\n{\"a\": [");
    for (int i = 0; i < 2000; i++)
        n += (size_t)sprintf(reply + n, "\"x\xe6\x97\xa5%d\", ", i);
    n += (size_t)sprintf(reply + n, "0]}\n```");
    size_t before_end = n;
    n += (size_t)sprintf(reply + n, CALL_END CALLS_END "bye");
    fg_tool_parser_reset(P);
    fg_tool_parse_feed(P, reply, n, count_sink, NULL); /* grows the buffers */
    fg_tool_parse_finish(P, count_sink, NULL);
    CHECK(fg_tool_parse_n_done(P) == 1);
    __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
    fg_tool_parser_reset(P);
    n_events = 0;
    counting = 1;
    for (size_t i = 0; i < before_end; i++)
        fg_tool_parse_feed(P, reply + i, 1, count_sink, NULL);
    counting = 0;
    CHECK_MSG(n_allocs == 0, "%ld allocations while feeding", n_allocs);
    CHECK(n_events > 4000); /* deltas did flow */
    fg_tool_parse_feed(P, reply + before_end, n - before_end, count_sink, NULL);
    fg_tool_parse_finish(P, count_sink, NULL);
    CHECK(fg_tool_parse_n_done(P) == 1 && fg_tool_parse_n_malformed(P) == 0);
    free(reply);
}
#else
static void test_no_alloc(void) { fprintf(stderr, "test_no_alloc: skipped (needs the address sanitizer's hooks)\n"); }
#endif

/* ---- round trip through the renderer ---- */

static const char *const vocab_markers[] = {
    "<" B "begin" S "of" S "sentence" B ">", EOS, USER, ASSISTANT, CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP,
    "<" B "tool" S "outputs" S "begin" B ">", "<" B "tool" S "outputs" S "end" B ">",
    "<" B "tool" S "output" S "begin" B ">", "<" B "tool" S "output" S "end" B ">"};
#define N_VM (sizeof vocab_markers / sizeof vocab_markers[0])
/* DeepSeek-V4's (as modelgen --v4-chat-markers writes them) */
static const char *const vocab_markers_v4[] = {"<" B "begin" S "of" S "sentence" B ">", EOS, USER, ASSISTANT,
                                               "<" B "latest_reminder" B ">", "<think>", "</think>", B "DSML" B};
#define N_VM4 (sizeof vocab_markers_v4 / sizeof vocab_markers_v4[0])

static fg_tokenizer_t *vocab_of(const char *const *vm, size_t n_vm)
{
    static char text[256][5];
    const char *tokens[256 + N_VM];
    int32_t types[256 + N_VM];
    for (int b = 0; b < 256; b++) {
        text[b][fg_byte_to_utf8((uint8_t)b, text[b])] = '\0';
        tokens[b] = text[b];
        types[b] = 1;
    }
    for (size_t i = 0; i < n_vm && i < N_VM; i++) {
        tokens[256 + i] = vm[i];
        types[256 + i] = 3;
    }
    char path[] = "/tmp/test_tool_parse_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    close(fd);
    fg_diag d = {{0}};
    fg_gguf_writer_t *w;
    fg_gguf_t *g = NULL;
    fg_tokenizer_t *t = NULL;
    if (fg_gguf_writer_create(path, 0, &w, &d) || fg_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2") ||
        fg_gguf_writer_add_str(w, "tokenizer.ggml.pre", "deepseek-v3") ||
        fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, 256 + n_vm) ||
        fg_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types, 256 + n_vm) ||
        fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", NULL, NULL, 0) ||
        fg_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 256) ||
        fg_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 257) || fg_gguf_writer_begin_data(w, &d) ||
        fg_gguf_writer_finish(w, &d) || (fg_gguf_writer_destroy(w), 0) || fg_gguf_open_file(path, &g, &d) ||
        fg_tokenizer_create(g, &t, &d))
        fprintf(stderr, "vocabulary: %s\n", d.msg);
    if (g)
        fg_gguf_close(g);
    unlink(path);
    return t;
}

static fg_tokenizer_t *vocab(void) { return vocab_of(vocab_markers, N_VM); }

#define TXT(s) ((fg_chat_text){s, sizeof s - 1})

typedef struct got_calls {
    char names[4][80];
    char args[4][256];
    int n;
} got_calls;

static void collect(void *ctx, const fg_tool_event *ev)
{
    got_calls *g = ctx;
    if (ev->type == FG_TOOL_EV_CALL_DONE && g->n < 4) {
        snprintf(g->names[g->n], sizeof g->names[0], "%s", ev->name);
        snprintf(g->args[g->n], sizeof g->args[0], "%.*s", (int)ev->len, ev->text);
        g->n++;
    }
    CHECK(ev->type != FG_TOOL_EV_MALFORMED);
    CHECK(ev->type != FG_TOOL_EV_TEXT);
}

static void test_round_trip(fg_tokenizer_t *tok)
{
    const fg_chat_call calls[] = {
        {TXT("get_weather"), TXT("{\"city\": \"Paris\", \"unit\": \"c\"}")},
        {TXT("search-web"), TXT("{\"q\": \"```fences``` \xe6\x97\xa5\", \"n\": [1, 2.5, null]}")},
    };
    const fg_chat_msg msgs[] = {
        {FG_CHAT_SYSTEM, TXT("be brief"), NULL, 0, {NULL, 0}},
        {FG_CHAT_USER, TXT("weather?"), NULL, 0, {NULL, 0}},
        {FG_CHAT_ASSISTANT, {NULL, 0}, calls, 2, {NULL, 0}},
    };
    fg_chat_conv conv = {.msgs = msgs, .n_msgs = 3};
    fg_chat_prompt p = {0};
    fg_diag d = {{0}};
    CHECK_MSG(fg_chat_render(FG_CHAT_DEEPSEEK_V3, &conv, tok, &p, &d) == FG_OK, "%s", d.msg);
    const char *reply = strstr(p.text, "weather?" ASSISTANT);
    CHECK(reply != NULL);
    if (!reply)
        return;
    reply += strlen("weather?");
    for (size_t cut = 0; cut < strlen(reply); cut += 7) {
        got_calls g = {0};
        fg_tool_parser_reset(P);
        fg_tool_parse_feed(P, reply, cut, collect, &g);
        fg_tool_parse_feed(P, reply + cut, strlen(reply) - cut, collect, &g);
        fg_tool_parse_finish(P, collect, &g);
        CHECK(g.n == 2);
        for (int i = 0; i < 2 && i < g.n; i++) {
            CHECK(strlen(g.names[i]) == calls[i].name.len && memcmp(g.names[i], calls[i].name.ptr, calls[i].name.len) == 0);
            CHECK_MSG(strlen(g.args[i]) == calls[i].arguments.len &&
                          memcmp(g.args[i], calls[i].arguments.ptr, calls[i].arguments.len) == 0,
                      "call %d: %s", i, g.args[i]);
        }
    }
    fg_chat_prompt_free(&p);
}

/* Declarations after the system prompt, as DeepSeek-V3.1's card describes
 * them with V3's call line; the fixed text is template text (its markers are
 * special tokens), names, descriptions and schemas are not. */
static void test_render_tools(fg_tokenizer_t *tok)
{
    json_t *decl = json_loads("[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather "
                              CALL_BEGIN "now.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
                              "{\"type\":\"string\"}},\"required\":[\"city\"]}},"
                              "{\"type\":\"function\",\"function\":{\"name\":\"noop\"}}]",
                              0, NULL);
    fg_tool_set set = {0};
    fg_diag d = {{0}};
    CHECK_MSG(fg_tool_set_parse(decl, &set, &d) == FG_OK, "%s", d.msg);
    json_decref(decl);
    const fg_chat_msg msgs[] = {
        {FG_CHAT_SYSTEM, TXT("be brief"), NULL, 0, {NULL, 0}},
        {FG_CHAT_USER, TXT("weather?"), NULL, 0, {NULL, 0}},
    };
    fg_chat_conv conv = {.msgs = msgs, .n_msgs = 2, .add_generation_prompt = true, .tools = set.tools, .n_tools = set.n};
    fg_chat_prompt p = {0};
    CHECK_MSG(fg_chat_render(FG_CHAT_DEEPSEEK_V3, &conv, tok, &p, &d) == FG_OK, "%s", d.msg);
    static const char want[] =
        "<" B "begin" S "of" S "sentence" B ">be brief## Tools\nYou have access to the following tools:\n"
        "\n### get_weather\nDescription: Weather " CALL_BEGIN "now.\n\nParameters: {\"type\": \"object\", "
        "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}\n"
        "\n### noop\nDescription: \n\nParameters: {\"type\": \"object\", \"properties\": {}}\n"
        "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
        CALLS_BEGIN CALL_BEGIN "function" SEP "tool_call_name\n```json\ntool_call_arguments\n```" CALL_END
        "{{additional_tool_calls}}" CALLS_END "\n\nWhere:\n"
        "- `tool_call_name` must be an exact match to one of the available tools\n"
        "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
        "- For multiple tool calls, chain them directly without separators or spaces\n"
        USER "weather?" ASSISTANT;
    CHECK_MSG(p.len == sizeof want - 1 && memcmp(p.text, want, p.len) == 0, "rendered:\n%s", p.text);
    /* which bytes are template text: the format line's markers yes, the description's marker no */
    const char *fmt = strstr(p.text, "IMPORTANT");
    const char *in_desc = strstr(p.text, "Weather ");
    bool fmt_in = false, desc_in = false, name_in = false;
    const char *name = strstr(p.text, "get_weather");
    for (size_t i = 0; fmt && in_desc && name && i < p.n_spans; i++) {
        size_t f = (size_t)(fmt - p.text), de = (size_t)(in_desc - p.text) + 8, n = (size_t)(name - p.text);
        fmt_in |= p.spans[i].start <= f && f < p.spans[i].end;
        desc_in |= p.spans[i].start <= de && de < p.spans[i].end;
        name_in |= p.spans[i].start <= n && n < p.spans[i].end;
    }
    CHECK(fmt_in && !desc_in && !name_in);
    fg_tokens ids = {0};
    CHECK(fg_chat_encode(tok, &p, &ids) == FG_OK);
    int32_t calls_begin_id = fg_tokenizer_special_id(tok, CALLS_BEGIN, strlen(CALLS_BEGIN));
    int32_t call_begin_id = fg_tokenizer_special_id(tok, CALL_BEGIN, strlen(CALL_BEGIN));
    int n_calls_begin = 0, n_call_begin = 0;
    for (size_t i = 0; i < ids.n; i++) {
        n_calls_begin += ids.v[i] == calls_begin_id;
        n_call_begin += ids.v[i] == call_begin_id;
    }
    CHECK(n_calls_begin == 1 && n_call_begin == 1); /* the format line's, not the description's */
    fg_tokens_free(&ids);
    fg_chat_prompt_free(&p);
    fg_tool_set_free(&set);
}

/* tool_choice by prefill: the prompt ends inside a call, the parser is fed
 * the same bytes, and the model's continuation completes the call. */
static void test_call_prefix(fg_tokenizer_t *tok)
{
    const fg_chat_msg msgs[] = {{FG_CHAT_USER, TXT("weather?"), NULL, 0, {NULL, 0}}};
    fg_chat_conv conv = {.msgs = msgs, .n_msgs = 1, .add_generation_prompt = true};
    fg_chat_prompt p = {0};
    fg_diag d = {{0}};
    for (int named = 0; named < 2; named++) {
        CHECK(fg_chat_render(FG_CHAT_DEEPSEEK_V3, &conv, tok, &p, &d) == FG_OK);
        size_t len0 = p.len;
        CHECK_MSG(fg_chat_call_prefix(FG_CHAT_DEEPSEEK_V3, named ? "get_weather" : NULL, named ? 11 : 0, &p, &d) ==
                      FG_OK, "%s", d.msg);
        const char *want = named ? CALLS_BEGIN CALL_BEGIN "function" SEP "get_weather\n```json\n"
                                 : CALLS_BEGIN CALL_BEGIN "function" SEP;
        CHECK(p.len - len0 == strlen(want) && memcmp(p.text + len0, want, strlen(want)) == 0);
        /* the model's part */
        const char *cont = named ? "{\"city\": \"Oslo\"}\n```" CALL_END CALLS_END EOS
                                 : "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" CALL_END CALLS_END EOS;
        static rec r;
        memset(&r, 0, sizeof r);
        r.last = -1;
        fg_tool_parser_reset(P);
        fg_tool_parse_feed(P, p.text + len0, p.len - len0, sink, &r);
        fg_tool_parse_feed(P, cont, strlen(cont), sink, &r);
        fg_tool_parse_finish(P, sink, &r);
        CHECK_MSG(strcmp(r.s, "B0:get_weather\nA0:{\"city\": \"Oslo\"}\nD0:get_weather:{\"city\": \"Oslo\"}") == 0,
                  "%s", r.s);
    }
    /* In tokens, as the session layer sends them: the generation prompt's tokens and then the
     * prefix's (rendered alone, after the reply marker) are where the rendering of the finished
     * assistant turn begins, so the next turn's prompt starts with the forced turn's. */
    const int32_t calls_begin_id = fg_tokenizer_special_id(tok, CALLS_BEGIN, strlen(CALLS_BEGIN));
    const int32_t call_begin_id = fg_tokenizer_special_id(tok, CALL_BEGIN, strlen(CALL_BEGIN));
    const int32_t sep_id = fg_tokenizer_special_id(tok, SEP, strlen(SEP));
    const fg_chat_call call = {TXT("get_weather"), TXT("{\"city\": \"Oslo\"}")};
    const fg_chat_msg turn[] = {{FG_CHAT_USER, TXT("weather?"), NULL, 0, {NULL, 0}}, {FG_CHAT_ASSISTANT, {NULL, 0}, &call, 1, {NULL, 0}}};
    const fg_chat_conv done = {.msgs = turn, .n_msgs = 2};
    fg_chat_prompt whole = {0}, pre = {0};
    CHECK(fg_chat_render(FG_CHAT_DEEPSEEK_V3, &done, tok, &whole, &d) == FG_OK);
    fg_tokens want_ids = {0};
    CHECK(fg_chat_encode(tok, &whole, &want_ids) == FG_OK);
    for (int named = 0; named < 2; named++) {
        fg_tokens ids = {0};
        CHECK(fg_chat_render(FG_CHAT_DEEPSEEK_V3, &conv, tok, &p, &d) == FG_OK);
        CHECK(fg_chat_encode(tok, &p, &ids) == FG_OK);
        const size_t n_prompt = ids.n;
        pre.len = pre.n_spans = 0;
        CHECK(fg_chat_call_prefix(FG_CHAT_DEEPSEEK_V3, named ? "get_weather" : NULL, named ? 11 : 0, &pre, &d) == FG_OK);
        CHECK(fg_chat_encode(tok, &pre, &ids) == FG_OK);
        /* the markers are single special tokens right after the generation prompt */
        CHECK(ids.n > n_prompt + 4 && ids.v[n_prompt] == calls_begin_id && ids.v[n_prompt + 1] == call_begin_id);
        bool has_sep = false;
        for (size_t i = n_prompt + 2; i < ids.n; i++)
            has_sep |= ids.v[i] == sep_id;
        CHECK(has_sep && (named || ids.v[ids.n - 1] == sep_id));
        CHECK_MSG(ids.n < want_ids.n && memcmp(ids.v, want_ids.v, ids.n * sizeof ids.v[0]) == 0,
                  "named %d: the prompt and prefix are not the start of the rendered turn", named);
        fg_tokens_free(&ids);
    }
    fg_tokens_free(&want_ids);
    fg_chat_prompt_free(&whole);
    fg_chat_prompt_free(&pre);
    size_t len0 = p.len;
    CHECK(fg_chat_call_prefix(FG_CHAT_DEEPSEEK_V3, "", 0, &p, &d) == FG_ERR_INVALID_ARG);
    CHECK(fg_chat_call_prefix(FG_CHAT_DEEPSEEK_R1, NULL, 0, &p, &d) == FG_ERR_UNSUPPORTED);
    CHECK(p.len == len0);
    fg_chat_prompt_free(&p);
}

/* ---------------------------------------------------------------- DSML */

#define DS B "DSML" B
#define DS_CALLS "<" DS "tool_calls>"
#define DS_CALLS_END "</" DS "tool_calls>"
#define INVOKE(name) "<" DS "invoke name=\"" name "\">\n"
#define INVOKE_END "</" DS "invoke>"
#define PSTR(k, v) "<" DS "parameter name=\"" k "\" string=\"true\">" v "</" DS "parameter>\n"
#define PJSON(k, v) "<" DS "parameter name=\"" k "\" string=\"false\">" v "</" DS "parameter>\n"
#define BLOCK(calls) "\n\n" DS_CALLS "\n" calls "\n" DS_CALLS_END

static fg_tool_parser_t *P4; /* FG_TOOL_SYNTAX_DSML */

static void test_dsml_well_formed(void)
{
    expect(BLOCK(INVOKE("get_weather") PSTR("city", "Tokyo") INVOKE_END) EOS,
           "B0:get_weather\nA0:{\"city\": \"Tokyo\"}\nD0:get_weather:{\"city\": \"Tokyo\"}");
    /* text before the block (the "\n\n" that opens it is not text), after it too */
    expect("Let me check.  " BLOCK(INVOKE("w") INVOKE_END) " ok" EOS, "T:Let me check.\nB0:w\nA0:{}\nD0:w:{}\nT: ok");
    /* several calls, parameters of every kind; string values escaped as JSON, JSON values as written */
    expect(BLOCK(INVOKE("search-web") PSTR("q", "a \"quoted\"\nline\\ <b> </x> <" B "y \xe6\x97\xa5\t\x01\r\b\f\x1f")
                     PJSON("n", "3") PJSON("f", "true") PJSON("list", "[1, {\"a\": null}]")
                     PJSON("obj", " {\"k\": \"v\"}\n") PSTR("empty", "") PJSON("s", "\"json string\"") INVOKE_END "\n"
                 INVOKE("noop") INVOKE_END "\n" INVOKE("get_weather") PSTR("city", "Paris") INVOKE_END) EOS,
           "B0:search-web\nA0:{\"q\": \"a \\\"quoted\\\"\\nline\\\\ <b> </x> <" B "y \xe6\x97\xa5\\t\\u0001"
           "\\r\\b\\f\\u001f\", \"n\": 3, "
           "\"f\": true, \"list\": [1, {\"a\": null}], \"obj\":  {\"k\": \"v\"}\n, \"empty\": \"\", \"s\": \"json string\"}\n"
           "D0:search-web:{\"q\": \"a \\\"quoted\\\"\\nline\\\\ <b> </x> <" B "y \xe6\x97\xa5\\t\\u0001"
           "\\r\\b\\f\\u001f\", \"n\": 3, "
           "\"f\": true, \"list\": [1, {\"a\": null}], \"obj\":  {\"k\": \"v\"}\n, \"empty\": \"\", \"s\": \"json string\"}\n"
           "B1:noop\nA1:{}\nD1:noop:{}\nB2:get_weather\nA2:{\"city\": \"Paris\"}\nD2:get_weather:{\"city\": \"Paris\"}");
    /* text only: whitespace at the end is text when no block takes it; V3's markers are text here */
    expect("hello \n\n" EOS, "T:hello \n\n");
    expect("a <" DS " b " CALLS_BEGIN ASSISTANT "!", "T:a <" DS " b " CALLS_BEGIN "!");
    /* a block left open before EOS ends there */
    expect("\n\n" DS_CALLS "\n" INVOKE("f") INVOKE_END EOS "x", "B0:f\nA0:{}\nD0:f:{}\nT:x");
}

static void test_dsml_malformed(void)
{
    /* a call outside a block, stray tags */
    expect("hi " INVOKE("f") INVOKE_END " there", "T:hi \nM0:bad_order\nT: there");
    expect("a</" DS "parameter>b" INVOKE_END "c", "T:a\nM-:bad_order\nT:b\nM-:bad_order\nT:c");
    expect(BLOCK("oops" INVOKE("f") INVOKE_END), "M-:bad_order\nB0:f\nA0:{}\nD0:f:{}");
    /* names: invalid, empty, too long, the tag not closed; the parse goes on at the next invoke */
    expect(BLOCK(INVOKE("bad name") INVOKE_END "\n" INVOKE("ok") INVOKE_END), "M0:bad_name\nB1:ok\nA1:{}\nD1:ok:{}");
    expect(BLOCK(INVOKE("") INVOKE_END), "M0:bad_name");
    expect(BLOCK("<" DS "invoke name=\"f\" x>" INVOKE_END), "M0:bad_name");
    expect(BLOCK("<" DS "invoke name=\"f" INVOKE_END), "M0:bad_name");
    char buf[512];
    snprintf(buf, sizeof buf, BLOCK("<" DS "invoke name=\"%0100d\">" INVOKE_END), 0);
    expect(buf, "M0:bad_name");
    /* parameters: a kind other than true/false, a tag inside the tag, text between them */
    expect(BLOCK(INVOKE("f") "<" DS "parameter name=\"a\" string=\"yes\">1</" DS "parameter>" INVOKE_END),
           "B0:f\nA0:{\"a\": \nM0:bad_fence");
    expect(BLOCK(INVOKE("f") "<" DS "parameter name=\"a\">1</" DS "parameter>" INVOKE_END),
           "B0:f\nA0:{\"a\": \nM0:bad_fence");
    expect(BLOCK(INVOKE("f") "<" DS "parameter name=\"a" INVOKE_END), "B0:f\nA0:{\"a\nM0:bad_fence");
    expect(BLOCK(INVOKE("f") "oops" PSTR("a", "1") INVOKE_END "\n" INVOKE("g") INVOKE_END),
           "B0:f\nA0:{\nM0:bad_order\nB1:g\nA1:{}\nD1:g:{}");
    /* values: not JSON, more than one JSON value, empty, a key given twice, a tag inside a value */
    expect(BLOCK(INVOKE("f") PJSON("n", "tru") INVOKE_END), "B0:f\nA0:{\"n\": tru\nM0:bad_json");
    expect(BLOCK(INVOKE("f") PJSON("n", "1, \"x\": 2") INVOKE_END), "B0:f\nA0:{\"n\": 1, \"x\": 2\nM0:bad_json");
    expect(BLOCK(INVOKE("f") PJSON("n", "") INVOKE_END), "B0:f\nA0:{\"n\": \nM0:bad_json");
    expect(BLOCK(INVOKE("f") PSTR("a", "1") PSTR("a", "2") INVOKE_END),
           "B0:f\nA0:{\"a\": \"1\", \"a\": \"2\"}\nM0:bad_json");
    expect(BLOCK(INVOKE("f") PSTR("a", "\xff") INVOKE_END), "B0:f\nA0:{\"a\": \"\xff\"}\nM0:bad_json");
    expect(BLOCK(INVOKE("f") "<" DS "parameter name=\"a\" string=\"true\">abc" INVOKE_END "\n" INVOKE("g") INVOKE_END),
           "B0:f\nA0:{\"a\": \"abc\nM0:bad_order\nB1:g\nA1:{}\nD1:g:{}");
    /* cut short anywhere */
    expect("\n\n" DS_CALLS "\n" INVOKE("f") PSTR("a", "1") "<" DS "param", "B0:f\nA0:{\"a\": \"1\"\nM0:unterminated");
    expect("\n\n" DS_CALLS "\n" INVOKE("f") "<" DS "parameter name=\"a\" string=\"false\">[1,", "B0:f\nA0:{\"a\": [1,\nM0:unterminated");
    expect("\n\n" DS_CALLS "\n<" DS "invoke name=\"ge", "M0:unterminated");
    expect("\n\n" DS_CALLS "\n", "");
}

static void test_dsml_chunkings(void)
{
    every_chunking("Sure \xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80:" BLOCK(INVOKE("get_weather") PSTR("city", "T\xc3\xb6kyo \"<" B "\"")
                   PJSON("n", "[1, {\"a\": \"</x>\"}]") INVOKE_END "\n" INVOKE("other-fn") INVOKE_END) EOS "tail");
    every_chunking(BLOCK(INVOKE("bad name") PSTR("a", "1") INVOKE_END "\n" INVOKE("ok") PJSON("k", "1") INVOKE_END));
    every_chunking("x " INVOKE("f") INVOKE_END BLOCK(INVOKE("g") PJSON("a", "tru") INVOKE_END "\n" INVOKE("h") "oops"));
    every_chunking(BLOCK(INVOKE("f") "<" DS "parameter name=\"a\" string=\"fals\">1" INVOKE_END));
}

/* The limit counts the object as written, tags not included. */
static void test_dsml_limit(void)
{
    fg_tool_parser_t *small;
    fg_diag d = {{0}};
    CHECK(fg_tool_parser_create(&(fg_tool_parse_opts){.max_args = 16, .syntax = FG_TOOL_SYNTAX_DSML}, &small, &d) ==
          FG_OK);
    fg_tool_parser_t *keep = P;
    P = small;
    const char *r = BLOCK(INVOKE("f") PSTR("a", "0123456789abcdef") INVOKE_END "\n" INVOKE("g") PJSON("b", "1") INVOKE_END);
    expect(r, "B0:f\nA0:{\"a\": \"012345678\nM0:too_long\nB1:g\nA1:{\"b\": 1}\nD1:g:{\"b\": 1}");
    every_chunking(r);
    P = keep;
    fg_tool_parser_destroy(small);
    CHECK(fg_tool_parser_create(&(fg_tool_parse_opts){.syntax = (fg_tool_syntax)7}, &small, &d) == FG_ERR_INVALID_ARG);
}

/* All events of a parse, for the round trip. */
typedef struct got_all {
    got_calls calls;
    char text[256];
    size_t text_len;
    int n_bad;
} got_all;

static void collect_all(void *ctx, const fg_tool_event *ev)
{
    got_all *g = ctx;
    if (ev->type == FG_TOOL_EV_TEXT && g->text_len + ev->len < sizeof g->text) {
        memcpy(g->text + g->text_len, ev->text, ev->len);
        g->text_len += ev->len;
    } else if (ev->type == FG_TOOL_EV_CALL_DONE && g->calls.n < 4) {
        snprintf(g->calls.names[g->calls.n], sizeof g->calls.names[0], "%s", ev->name);
        snprintf(g->calls.args[g->calls.n], sizeof g->calls.args[0], "%.*s", (int)ev->len, ev->text);
        g->calls.n++;
    } else if (ev->type == FG_TOOL_EV_MALFORMED) {
        g->n_bad++;
    }
}

/* render_v4's assistant turn, fed back: the same text and calls (arguments
 * written as json.dumps writes them come back byte for byte). */
static void test_dsml_round_trip(fg_tokenizer_t *tok)
{
    const fg_chat_call calls[] = {
        {TXT("get_weather"), TXT("{\"city\": \"Paris\", \"unit\": \"c\"}")},
        {TXT("search-web"), TXT("{\"q\": \"```fences``` \\\"q\\\"\\n\xe6\x97\xa5 </b>\", \"n\": [1, 2.5, null], "
                                "\"deep\": {\"a\": {\"b\": false}}, \"k\": 7, \"s\": \"\"}")},
        {TXT("noop"), TXT("{}")},
    };
    const fg_chat_msg msgs[] = {
        {FG_CHAT_USER, TXT("weather?"), NULL, 0, {NULL, 0}},
        {FG_CHAT_ASSISTANT, TXT("Checking."), calls, 3, {NULL, 0}},
    };
    fg_chat_conv conv = {.msgs = msgs, .n_msgs = 2};
    fg_chat_prompt p = {0};
    fg_diag d = {{0}};
    CHECK_MSG(fg_chat_render(FG_CHAT_DEEPSEEK_V4, &conv, tok, &p, &d) == FG_OK, "%s", d.msg);
    const char *reply = strstr(p.text, ASSISTANT "</think>");
    CHECK(reply != NULL);
    if (!reply)
        return;
    reply += strlen(ASSISTANT "</think>");
    CHECK(strstr(reply, DS_CALLS) != NULL);
    for (size_t cut = 0; cut < strlen(reply); cut++) {
        got_all g = {0};
        fg_tool_parser_reset(P4);
        fg_tool_parse_feed(P4, reply, cut, collect_all, &g);
        fg_tool_parse_feed(P4, reply + cut, strlen(reply) - cut, collect_all, &g);
        fg_tool_parse_finish(P4, collect_all, &g);
        CHECK(g.n_bad == 0 && g.calls.n == 3);
        CHECK_MSG(g.text_len == 9 && memcmp(g.text, "Checking.", 9) == 0, "text %.*s", (int)g.text_len, g.text);
        for (int i = 0; i < 3 && i < g.calls.n; i++) {
            CHECK(strlen(g.calls.names[i]) == calls[i].name.len &&
                  memcmp(g.calls.names[i], calls[i].name.ptr, calls[i].name.len) == 0);
            CHECK_MSG(strlen(g.calls.args[i]) == calls[i].arguments.len &&
                          memcmp(g.calls.args[i], calls[i].arguments.ptr, calls[i].arguments.len) == 0,
                      "cut %zu call %d: %s", cut, i, g.calls.args[i]);
        }
        if (g.n_bad || g.calls.n != 3)
            break;
    }
    fg_chat_prompt_free(&p);
}

/* V4's prefixes: the bytes render_v4 writes for a turn with no text that
 * makes the call, so the finished turn renders as the prompt and prefix
 * began it; the parser takes the prefix and the model's rest as one call. */
static void test_dsml_call_prefix(fg_tokenizer_t *tok)
{
    const fg_chat_msg msgs[] = {{FG_CHAT_USER, TXT("weather?"), NULL, 0, {NULL, 0}}};
    const fg_chat_conv conv = {.msgs = msgs, .n_msgs = 1, .add_generation_prompt = true};
    const fg_chat_call call = {TXT("get_weather"), TXT("{\"city\": \"Oslo\"}")};
    const fg_chat_msg turn[] = {{FG_CHAT_USER, TXT("weather?"), NULL, 0, {NULL, 0}},
                                {FG_CHAT_ASSISTANT, {NULL, 0}, &call, 1, {NULL, 0}}};
    const fg_chat_conv done = {.msgs = turn, .n_msgs = 2};
    fg_chat_prompt p = {0}, whole = {0};
    fg_diag d = {{0}};
    CHECK(fg_chat_render(FG_CHAT_DEEPSEEK_V4, &done, tok, &whole, &d) == FG_OK);
    fg_tokens want_ids = {0};
    CHECK(fg_chat_encode(tok, &whole, &want_ids) == FG_OK);
    for (int named = 0; named < 2; named++) {
        CHECK(fg_chat_render(FG_CHAT_DEEPSEEK_V4, &conv, tok, &p, &d) == FG_OK);
        size_t len0 = p.len;
        CHECK_MSG(fg_chat_call_prefix(FG_CHAT_DEEPSEEK_V4, named ? "get_weather" : NULL, named ? 11 : 0, &p, &d) ==
                      FG_OK, "%s", d.msg);
        const char *want = named ? "\n\n" DS_CALLS "\n" INVOKE("get_weather") : "\n\n" DS_CALLS "\n";
        CHECK_MSG(p.len - len0 == strlen(want) && memcmp(p.text + len0, want, strlen(want)) == 0, "%s", p.text + len0);
        /* the prompt and the prefix are the start of the finished turn, in bytes and in tokens */
        CHECK(p.len < whole.len && memcmp(p.text, whole.text, p.len) == 0);
        fg_tokens ids = {0};
        CHECK(fg_chat_encode(tok, &p, &ids) == FG_OK);
        CHECK(ids.n < want_ids.n && memcmp(ids.v, want_ids.v, ids.n * sizeof ids.v[0]) == 0);
        fg_tokens_free(&ids);
        /* the model's part: exactly what render_v4 writes after the prefix */
        const char *cont = named ? PSTR("city", "Oslo") INVOKE_END "\n" DS_CALLS_END EOS
                                 : INVOKE("get_weather") PSTR("city", "Oslo") INVOKE_END "\n" DS_CALLS_END EOS;
        CHECK_MSG(strcmp(whole.text + p.len, cont) == 0, "the rendered turn goes on: %s", whole.text + p.len);
        static rec r;
        memset(&r, 0, sizeof r);
        r.last = -1;
        fg_tool_parser_reset(P4);
        fg_tool_parse_feed(P4, p.text + len0, p.len - len0, sink, &r);
        fg_tool_parse_feed(P4, cont, strlen(cont), sink, &r);
        fg_tool_parse_finish(P4, sink, &r);
        CHECK_MSG(strcmp(r.s, "B0:get_weather\nA0:{\"city\": \"Oslo\"}\nD0:get_weather:{\"city\": \"Oslo\"}") == 0,
                  "%s", r.s);
    }
    fg_tokens_free(&want_ids);
    fg_chat_prompt_free(&whole);
    fg_chat_prompt_free(&p);
}

/* The session layer's call item on a V4 vocabulary: render_v4's turn after
 * the reply marker, so it is the reply marker, the prefix and what the model
 * writes after it; the parser reads its text back as the call. */
static void test_dsml_call_item(void)
{
    fg_tokenizer_t *tok4 = vocab_of(vocab_markers_v4, N_VM4);
    CHECK(tok4 != NULL);
    if (!tok4)
        return;
    fg_chat_family f = 0;
    fg_diag d = {{0}};
    CHECK(fg_chat_family_detect(NULL, 0, tok4, &f, &d) == FG_OK && f == FG_CHAT_DEEPSEEK_V4);
    const char args[] = "{\"city\": \"Oslo\", \"days\": [1, 2]}";
    fg_proto_item it = {.type = FG_PROTO_ITEM_FUNCTION_CALL, .name = {"get_weather", 11},
                        .arguments = {args, sizeof args - 1}};
    fg_tokens item = {0}, head = {0};
    fg_template_tail tail = FG_TEMPLATE_TAIL_USER, tail2 = FG_TEMPLATE_TAIL_USER; /* after a user turn */
    CHECK(fg_template_item(tok4, &tail, &it, &item) == FG_OK && tail == FG_TEMPLATE_TAIL_CALLS);
    CHECK(fg_template_close(tok4, &tail, &item) == FG_OK && tail == FG_TEMPLATE_TAIL_NONE);
    /* the reply marker and the prefix's tokens begin it; EOS ends it; its text is the DSML turn */
    fg_chat_prompt p = {0};
    CHECK(fg_template_reply(tok4, &tail2, &head) == FG_OK);
    CHECK(fg_chat_call_prefix(FG_CHAT_DEEPSEEK_V4, "get_weather", 11, &p, &d) == FG_OK);
    CHECK(fg_chat_encode(tok4, &p, &head) == FG_OK);
    CHECK(head.n < item.n && memcmp(item.v, head.v, head.n * sizeof head.v[0]) == 0);
    CHECK(item.n && item.v[item.n - 1] == fg_tokenizer_eos(tok4));
    static char text[1024];
    size_t n = 0;
    CHECK(fg_tokenizer_decode(tok4, item.v, item.n, true, text, sizeof text, &n) == FG_OK);
    const char want[] = ASSISTANT "</think>\n\n" DS_CALLS "\n" INVOKE("get_weather") PSTR("city", "Oslo") PJSON("days", "[1, 2]")
        INVOKE_END "\n" DS_CALLS_END EOS;
    CHECK_MSG(n == sizeof want - 1 && memcmp(text, want, n) == 0, "%s", text);
    static rec r;
    memset(&r, 0, sizeof r);
    r.last = -1;
    fg_tool_parser_reset(P4);
    const size_t opening = sizeof ASSISTANT "</think>" - 1; /* the reply marker: the model writes what follows */
    fg_tool_parse_feed(P4, text + opening, n - opening, sink, &r);
    fg_tool_parse_finish(P4, sink, &r);
    CHECK_MSG(strcmp(r.s, "B0:get_weather\nA0:{\"city\": \"Oslo\", \"days\": [1, 2]}\n"
                          "D0:get_weather:{\"city\": \"Oslo\", \"days\": [1, 2]}") == 0, "%s", r.s);
    /* arguments V4 cannot write as parameters */
    it.arguments = (fg_proto_str){"[1]", 3};
    CHECK(fg_template_item(tok4, NULL, &it, &item) == FG_ERR_INVALID_ARG);
    fg_tokens_free(&item);
    fg_tokens_free(&head);
    fg_chat_prompt_free(&p);
    fg_tokenizer_destroy(tok4);
}

/* DSML's delta path allocates nothing either once grown (string parameters
 * only: a JSON value's check allocates, once per parameter). test_no_alloc
 * installed the hooks. */
#if defined(__SANITIZE_ADDRESS__)
static void test_dsml_no_alloc(void)
{
    size_t cap = 96 * 1024, n = 0;
    char *reply = malloc(cap);
    for (int i = 0; i < 2000; i++)
        n += (size_t)sprintf(reply + n, "w\xc3\xa9%d <b> \n", i);
    n += (size_t)sprintf(reply + n, "\n\n" DS_CALLS "\n" INVOKE("f"));
    for (int k = 0; k < 3; k++) {
        n += (size_t)sprintf(reply + n, "<" DS "parameter name=\"k%d\" string=\"true\">", k);
        for (int i = 0; i < 700; i++)
            n += (size_t)sprintf(reply + n, "\"x\xe6\x97\xa5%d\"\n <", i);
        n += (size_t)sprintf(reply + n, "</" DS "parameter>\n");
    }
    size_t before_end = n;
    n += (size_t)sprintf(reply + n, INVOKE_END "\n" DS_CALLS_END EOS "bye");
    CHECK(n < cap);
    fg_tool_parser_reset(P4);
    fg_tool_parse_feed(P4, reply, n, count_sink, NULL); /* grows the buffers */
    fg_tool_parse_finish(P4, count_sink, NULL);
    CHECK(fg_tool_parse_n_done(P4) == 1 && fg_tool_parse_n_malformed(P4) == 0);
    fg_tool_parser_reset(P4);
    n_events = 0;
    n_allocs = 0;
    counting = 1;
    for (size_t i = 0; i < before_end; i++)
        fg_tool_parse_feed(P4, reply + i, 1, count_sink, NULL);
    counting = 0;
    CHECK_MSG(n_allocs == 0, "%ld allocations while feeding DSML", n_allocs);
    CHECK(n_events > 4000);
    fg_tool_parse_feed(P4, reply + before_end, n - before_end, count_sink, NULL);
    fg_tool_parse_finish(P4, count_sink, NULL);
    CHECK(fg_tool_parse_n_done(P4) == 1 && fg_tool_parse_n_malformed(P4) == 0);
    free(reply);
}
#else
static void test_dsml_no_alloc(void) {}
#endif

static void test_dsml(void)
{
    fg_tool_parser_t *keep = P;
    P = P4;
    test_dsml_well_formed();
    test_dsml_malformed();
    test_dsml_chunkings();
    test_dsml_limit();
    test_dsml_no_alloc();
    P = keep;
}

int main(void)
{
    fg_diag d = {{0}};
    CHECK(fg_tool_parser_create(NULL, &P, &d) == FG_OK);
    CHECK(fg_tool_parser_create(&(fg_tool_parse_opts){.syntax = FG_TOOL_SYNTAX_DSML}, &P4, &d) == FG_OK);
    test_well_formed();
    test_chunkings();
    test_malformed();
    test_limit();
    test_no_alloc();
    test_dsml();
    fg_tokenizer_t *tok = vocab();
    CHECK(tok != NULL);
    if (tok) {
        test_round_trip(tok);
        test_render_tools(tok);
        test_call_prefix(tok);
        test_dsml_round_trip(tok);
        test_dsml_call_prefix(tok);
        test_dsml_call_item();
        fg_tokenizer_destroy(tok);
    }
    fg_tool_parser_destroy(P);
    fg_tool_parser_destroy(P4);
    return TEST_DONE("test_tool_parse");
}
