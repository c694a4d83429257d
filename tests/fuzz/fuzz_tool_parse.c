/* fuzz_tool_parse.c: libFuzzer target for gateway/tool_parse.h.
 *
 * The input is a reply text, with byte 0x01 followed by k standing for
 * DeepSeek's k-th marker (so random inputs reach the call states), parsed
 * three ways: whole, a byte at a time, and cut where a generator seeded by
 * the input says, by a parser of each syntax (V3's markers and DSML's tags;
 * markers 10 and on are DSML's). Checks the contracts: the three give the same events once
 * adjacent deltas are joined; call indexes only grow; CALL_BEGIN names pass
 * fg_name_valid; a CALL_DONE's arguments are one JSON object and equal its
 * joined ARGS deltas; no delta is empty; MALFORMED has a reason and a
 * detail. A broken contract aborts. max_args is small so the limit is hit.
 * The seed corpus is tests/fuzz/corpus/fuzz_tool_parse/.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/name.h"
#include "gateway/tool_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define B "\xef\xbd\x9c"
#define S "\xe2\x96\x81"
static const char *const markers[] = {
    "<" B "tool" S "calls" S "begin" B ">", "<" B "tool" S "calls" S "end" B ">", "<" B "tool" S "call" S "begin" B ">",
    "<" B "tool" S "call" S "end" B ">",    "<" B "tool" S "sep" B ">",           "<" B "end" S "of" S "sentence" B ">",
    "<" B "User" B ">",                     "\n```json\n",                         "\n```",
    "function",
#define DS B "DSML" B
    "<" DS "tool_calls>",                   "</" DS "tool_calls>",                 "<" DS "invoke name=\"",
    "</" DS "invoke>",                      "<" DS "parameter name=\"",            "</" DS "parameter>",
    "\" string=\"true\">",                  "\" string=\"false\">",                 "\">\n"};
#define N_MARKERS (sizeof markers / sizeof markers[0])

typedef struct rec {
    char *s;
    size_t n, cap;
    int last;
    uint32_t last_index, max_index;
    char args[FG_TOOL_ARGS_DEFAULT]; /* the current call's joined deltas */
    size_t args_len;
} rec;

static void put(rec *r, const void *s, size_t n)
{
    if (r->n + n > r->cap) {
        r->cap = (r->n + n) * 2 + 64;
        r->s = realloc(r->s, r->cap);
        if (!r->s)
            abort();
    }
    memcpy(r->s + r->n, s, n);
    r->n += n;
}

static void sink(void *ctx, const fg_tool_event *ev)
{
    rec *r = ctx;
    bool delta = ev->type == FG_TOOL_EV_TEXT || ev->type == FG_TOOL_EV_ARGS_DELTA;
    if (delta && ev->len == 0)
        abort();
    bool join = delta && (int)ev->type == r->last && ev->index == r->last_index;
    if (!join) {
        uint8_t head[5] = {(uint8_t)ev->type};
        memcpy(head + 1, &ev->index, 4);
        put(r, head, 5);
    }
    if (ev->type != FG_TOOL_EV_TEXT && ev->index != UINT32_MAX) {
        if (ev->index + 1 < r->max_index)
            abort(); /* indexes only grow */
        if (ev->index + 1 > r->max_index)
            r->max_index = ev->index + 1;
    }
    switch (ev->type) {
    case FG_TOOL_EV_TEXT:
        put(r, ev->text, ev->len);
        break;
    case FG_TOOL_EV_CALL_BEGIN:
        if (!fg_name_valid(ev->name, ev->name_len) || strlen(ev->name) != ev->name_len)
            abort();
        put(r, ev->name, ev->name_len);
        r->args_len = 0;
        break;
    case FG_TOOL_EV_ARGS_DELTA:
        if (r->args_len + ev->len > sizeof r->args)
            abort();
        memcpy(r->args + r->args_len, ev->text, ev->len);
        r->args_len += ev->len;
        put(r, ev->text, ev->len);
        break;
    case FG_TOOL_EV_CALL_DONE: {
        if (ev->len != r->args_len || memcmp(ev->text, r->args, ev->len) != 0)
            abort();
        json_t *v = json_loadb(ev->text, ev->len, 0, NULL);
        if (!v || !json_is_object(v))
            abort();
        json_decref(v);
        put(r, ev->name, ev->name_len);
        break;
    }
    case FG_TOOL_EV_MALFORMED:
        if (!ev->detail || !ev->detail[0] || !strcmp(fg_tool_bad_name(ev->reason), "?"))
            abort();
        put(r, &ev->reason, sizeof ev->reason);
        r->args_len = 0;
        break;
    }
    r->last = (int)ev->type;
    r->last_index = ev->index;
}

static fg_tool_parser_t *P, *parsers[2];

static void run(const char *text, size_t n, int mode, uint64_t seed, rec *r)
{
    r->n = 0;
    r->last = -1;
    r->max_index = 0;
    r->args_len = 0;
    fg_tool_parser_reset(P);
    size_t at = 0;
    while (at < n) {
        size_t k = n - at;
        if (mode == 1) {
            k = 1;
        } else if (mode == 2) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            k = 1 + (size_t)(seed % 23);
            if (k > n - at)
                k = n - at;
        }
        fg_tool_parse_feed(P, text + at, k, sink, r);
        at += k;
    }
    fg_tool_parse_finish(P, sink, r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!parsers[0]) {
        fg_diag d = {{0}};
        if (fg_tool_parser_create(&(fg_tool_parse_opts){.max_args = 64}, &parsers[0], &d) ||
            fg_tool_parser_create(&(fg_tool_parse_opts){.max_args = 64, .syntax = FG_TOOL_SYNTAX_DSML}, &parsers[1],
                                  &d))
            abort();
    }
    if (size > 1 << 16)
        return 0;
    char *text = malloc(size * 16 + 1);
    size_t n = 0;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < size; i++) {
        seed = seed * 31 + data[i];
        if (data[i] == 0x01 && i + 1 < size) {
            const char *m = markers[data[++i] % N_MARKERS];
            memcpy(text + n, m, strlen(m));
            n += strlen(m);
        } else {
            text[n++] = (char)data[i];
        }
    }
    static rec a, b, c;
    for (int syn = 0; syn < 2; syn++) {
        P = parsers[syn];
        run(text, n, 0, 0, &a);
        run(text, n, 1, 0, &b);
        run(text, n, 2, seed | 1, &c);
        if (a.n != b.n || a.n != c.n || (a.n && (memcmp(a.s, b.s, a.n) != 0 || memcmp(a.s, c.s, a.n) != 0)))
            abort();
    }
    free(text);
    return 0;
}
