/* tool_parse.c: DeepSeek tool calls out of streamed reply text (see tool_parse.h).
 *
 * Two layers, both byte at a time so that no chunk boundary matters: a marker
 * matcher that holds back a "<｜…" run while it may still become one of
 * DeepSeek's markers (no marker is a prefix of another, and none holds a
 * second '<', so a failed run is released as bytes and only the failing byte
 * is looked at again); and the reply's state machine, which gets bytes and
 * whole markers. Inside the arguments a second small matcher tracks a
 * possible closing fence ("\n```" before <｜tool▁call▁end｜>), and ARGS
 * deltas stop where it starts, so the deltas never carry bytes that the end
 * of the call takes back.
 *
 * DSML shares the matcher and the block/call/skip states: its tags are
 * markers too (tool_calls and invoke play the V3 block and call markers),
 * and the arguments object is written into the same buffer as the tags
 * arrive, so its deltas are final as soon as they are written.
 */
#include "gateway/tool_parse.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/name.h"
#include "gateway/pyjson.h"

#define BAR "\xef\xbd\x9c"
#define SP "\xe2\x96\x81"

typedef enum marker {
    M_CALLS_BEGIN,
    M_CALLS_END,
    M_CALL_BEGIN,
    M_CALL_END,
    M_SEP,
    M_EOS,
    M_PARAM_OPEN,  /* DSML: <｜DSML｜parameter name=" */
    M_PARAM_CLOSE, /* DSML: </｜DSML｜parameter> */
    M_OTHER, /* the chat's other control markers: dropped, as without keep_control */
} marker;

typedef struct marker_def {
    const char *text;
    marker m;
} marker_def;

static const marker_def markers[] = {
    {"<" BAR "tool" SP "calls" SP "begin" BAR ">", M_CALLS_BEGIN},
    {"<" BAR "tool" SP "calls" SP "end" BAR ">", M_CALLS_END},
    {"<" BAR "tool" SP "call" SP "begin" BAR ">", M_CALL_BEGIN},
    {"<" BAR "tool" SP "call" SP "end" BAR ">", M_CALL_END},
    {"<" BAR "tool" SP "sep" BAR ">", M_SEP},
    {"<" BAR "end" SP "of" SP "sentence" BAR ">", M_EOS},
    {"<" BAR "begin" SP "of" SP "sentence" BAR ">", M_OTHER},
    {"<" BAR "User" BAR ">", M_OTHER},
    {"<" BAR "Assistant" BAR ">", M_OTHER},
    {"<" BAR "tool" SP "outputs" SP "begin" BAR ">", M_OTHER},
    {"<" BAR "tool" SP "outputs" SP "end" BAR ">", M_OTHER},
    {"<" BAR "tool" SP "output" SP "begin" BAR ">", M_OTHER},
    {"<" BAR "tool" SP "output" SP "end" BAR ">", M_OTHER},
};
#define N_MARKERS (sizeof markers / sizeof markers[0])

#define DSML BAR "DSML" BAR
static const marker_def dsml_markers[] = {
    {"<" DSML "tool_calls>", M_CALLS_BEGIN},
    {"</" DSML "tool_calls>", M_CALLS_END},
    {"<" DSML "invoke name=\"", M_CALL_BEGIN},
    {"</" DSML "invoke>", M_CALL_END},
    {"<" DSML "parameter name=\"", M_PARAM_OPEN},
    {"</" DSML "parameter>", M_PARAM_CLOSE},
    {"<" BAR "end" SP "of" SP "sentence" BAR ">", M_EOS},
    {"<" BAR "begin" SP "of" SP "sentence" BAR ">", M_OTHER},
    {"<" BAR "User" BAR ">", M_OTHER},
    {"<" BAR "Assistant" BAR ">", M_OTHER},
};
#define N_DSML_MARKERS (sizeof dsml_markers / sizeof dsml_markers[0])
/* What follows a parameter's name: its kind */
static const char ATTR_STR[] = "\" string=\"true\">", ATTR_JSON[] = "\" string=\"false\">";
#define MARKER_MAX 40 /* bytes of the longest marker, with room */

static const char FENCE_OPEN[] = "```json\n";
#define TYPE_MAX 16

typedef enum pstate {
    S_TEXT,  /* plain text */
    S_CALLS, /* inside <｜tool▁calls▁begin｜>, between calls */
    S_TYPE,  /* after <｜tool▁call▁begin｜>: the type, up to <｜tool▁sep｜> */
    S_NAME,  /* after <｜tool▁sep｜>: the name, up to "\n" */
    S_FENCE, /* "```json\n" */
    S_ARGS,  /* the arguments, up to "\n```<｜tool▁call▁end｜>" */
    S_SKIP,  /* after a malformed call: up to the next marker that resynchronises */
    /* DSML */
    D_NAME,     /* after <｜DSML｜invoke name=": the name, up to '"' */
    D_NAME_END, /* the '>' that closes the invoke tag */
    D_PARAMS,   /* inside the invoke, between parameters */
    D_KEY,      /* after <｜DSML｜parameter name=": the key, up to '"' */
    D_ATTR,     /* ATTR_STR or ATTR_JSON (from its second byte) */
    D_VALUE,    /* the value, up to </｜DSML｜parameter> */
} pstate;

/* The closing-fence matcher over the arguments: [ws]* ``` [ws]* */
typedef enum cstate { C_NONE, C_WS1, C_T1, C_T2, C_T3, C_WS2 } cstate;

struct fg_tool_parser {
    size_t max_args;
    fg_tool_syntax syntax;
    const marker_def *tab; /* [n_tab] the syntax's markers */
    size_t n_tab;
    pstate st;
    bool in_block; /* inside <｜tool▁calls▁begin｜> … <｜tool▁calls▁end｜> */
    uint32_t n_begun, n_done, n_bad;

    char mbuf[MARKER_MAX]; /* a possible marker being matched */
    size_t mlen;

    char tbuf[FG_TOOL_TEXT_CHUNK]; /* TEXT not yet released */
    size_t tlen;

    char type[TYPE_MAX];
    size_t type_len;
    char name[FG_NAME_MAX + 1];
    size_t name_len;
    size_t fence_pos;

    char *abuf; /* [acap] the arguments */
    size_t alen, acap, aemit;
    cstate cs;
    size_t cstart; /* where the possible closing fence starts in abuf */

    /* DSML: the parameter being read */
    uint32_t n_params;
    size_t attr_pos;   /* bytes of ATTR_* matched */
    unsigned attr_can; /* 1: may still be ATTR_STR, 2: ATTR_JSON */
    bool is_string;
    size_t vstart;     /* where a JSON value starts in abuf */

    char detail[256];
};

fg_err fg_tool_parser_create(const fg_tool_parse_opts *opts, fg_tool_parser_t **out, fg_diag *diag)
{
    if (!out)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "fg_tool_parser_create: NULL argument");
    size_t max = opts && opts->max_args ? opts->max_args : FG_TOOL_ARGS_DEFAULT;
    if (max > FG_TOOL_ARGS_MAX)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool call arguments limit %zu bytes is above %u", max,
                           FG_TOOL_ARGS_MAX);
    fg_tool_syntax syn = opts ? opts->syntax : FG_TOOL_SYNTAX_V3;
    if (syn != FG_TOOL_SYNTAX_V3 && syn != FG_TOOL_SYNTAX_DSML)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "unknown tool-call syntax %d", (int)syn);
    fg_tool_parser_t *p = calloc(1, sizeof *p);
    if (!p)
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory for a tool-call parser");
    p->max_args = max;
    p->syntax = syn;
    p->tab = syn == FG_TOOL_SYNTAX_DSML ? dsml_markers : markers;
    p->n_tab = syn == FG_TOOL_SYNTAX_DSML ? N_DSML_MARKERS : N_MARKERS;
    *out = p;
    return FG_OK;
}

void fg_tool_parser_destroy(fg_tool_parser_t *p)
{
    if (!p)
        return;
    free(p->abuf);
    free(p);
}

void fg_tool_parser_reset(fg_tool_parser_t *p)
{
    p->st = S_TEXT;
    p->in_block = false;
    p->n_begun = p->n_done = p->n_bad = 0;
    p->mlen = p->tlen = p->alen = p->aemit = 0;
}

uint32_t fg_tool_parse_n_done(const fg_tool_parser_t *p) { return p->n_done; }
uint32_t fg_tool_parse_n_malformed(const fg_tool_parser_t *p) { return p->n_bad; }

const char *fg_tool_bad_name(fg_tool_bad r)
{
    switch (r) {
    case FG_TOOL_BAD_ORDER:
        return "bad_order";
    case FG_TOOL_BAD_TYPE:
        return "bad_type";
    case FG_TOOL_BAD_NAME:
        return "bad_name";
    case FG_TOOL_BAD_FENCE:
        return "bad_fence";
    case FG_TOOL_BAD_JSON:
        return "bad_json";
    case FG_TOOL_TOO_LONG:
        return "too_long";
    case FG_TOOL_UNTERMINATED:
        return "unterminated";
    }
    return "?";
}

/* ---------------------------------------------------------------- output */

typedef struct out {
    fg_tool_sink sink;
    void *ctx;
} out;

/* Bytes at the end of s[0, n) that begin a UTF-8 sequence not yet complete. */
static size_t utf8_open_tail(const char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t need = c >= 0xf0 && c < 0xf8 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > k && c < 0xf8 ? k : 0;
    }
    return 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* DSML: the whitespace at the end of the held text, which a block that
 * follows takes ("\n\n" before <｜DSML｜tool_calls>); a buffer of nothing but
 * whitespace is let go. */
static size_t ws_tail(const fg_tool_parser_t *p)
{
    if (p->syntax != FG_TOOL_SYNTAX_DSML)
        return 0;
    size_t k = 0;
    while (k < p->tlen && is_ws(p->tbuf[p->tlen - 1 - k]))
        k++;
    return k < sizeof p->tbuf ? k : 0;
}

/* Releases held text; all of it when final, else up to a UTF-8 boundary
 * (and in DSML short of trailing whitespace). */
static void flush_text(fg_tool_parser_t *p, const out *o, bool final)
{
    size_t ws = final ? 0 : ws_tail(p);
    size_t keep = final ? 0 : ws ? ws : utf8_open_tail(p->tbuf, p->tlen);
    size_t n = p->tlen - keep;
    if (n) {
        fg_tool_event ev = {.type = FG_TOOL_EV_TEXT, .index = 0, .name = "", .text = p->tbuf, .len = n};
        o->sink(o->ctx, &ev);
    }
    memmove(p->tbuf, p->tbuf + n, keep);
    p->tlen = keep;
}

/* Releases the arguments read so far, short of a possible closing fence. */
static void flush_args(fg_tool_parser_t *p, const out *o)
{
    const bool dsml = p->st >= D_PARAMS && p->st <= D_VALUE;
    if (p->st != S_ARGS && !dsml)
        return;
    size_t safe = dsml || p->cs == C_NONE ? p->alen : p->cstart;
    if (safe == p->alen)
        safe -= utf8_open_tail(p->abuf + p->aemit, safe - p->aemit);
    if (safe > p->aemit) {
        fg_tool_event ev = {.type = FG_TOOL_EV_ARGS_DELTA, .index = p->n_begun - 1, .name = p->name,
                            .name_len = p->name_len, .text = p->abuf + p->aemit, .len = safe - p->aemit};
        o->sink(o->ctx, &ev);
        p->aemit = safe;
    }
}

/* Reports the current call (or, with no_call, a stray marker) as malformed. */
static void bad(fg_tool_parser_t *p, const out *o, bool no_call, fg_tool_bad why, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void bad(fg_tool_parser_t *p, const out *o, bool no_call, fg_tool_bad why, const char *fmt, ...)
{
    flush_text(p, o, true);
    flush_args(p, o);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->detail, sizeof p->detail, fmt, ap);
    va_end(ap);
    bool named = !no_call && ((p->st >= S_FENCE && p->st <= S_ARGS) || (p->st >= D_PARAMS && p->st <= D_VALUE));
    fg_tool_event ev = {.type = FG_TOOL_EV_MALFORMED,
                        .index = no_call ? UINT32_MAX : p->n_begun - 1,
                        .name = named ? p->name : "",
                        .name_len = named ? p->name_len : 0,
                        .reason = why,
                        .detail = p->detail};
    o->sink(o->ctx, &ev);
    if (!no_call)
        p->n_bad++;
}

/* A byte of a function name that ends at `end`: true when c ended a valid
 * name (NUL-terminated in p->name); false while it grows, or when it is too
 * long or not a name (reported, the call skipped). */
static bool name_byte(fg_tool_parser_t *p, const out *o, char c, char end)
{
    if (c != end) {
        if (p->name_len == FG_NAME_MAX) {
            bad(p, o, false, FG_TOOL_BAD_NAME, "the function name is longer than %d bytes", FG_NAME_MAX);
            p->st = S_SKIP;
            return false;
        }
        p->name[p->name_len++] = c;
        return false;
    }
    p->name[p->name_len] = '\0';
    if (!fg_name_valid(p->name, p->name_len)) {
        bad(p, o, false, FG_TOOL_BAD_NAME,
            p->name_len ? "the function name is not [A-Za-z0-9_-]" : "the call has no function name");
        p->st = S_SKIP;
        return false;
    }
    return true;
}

static void begin_call(fg_tool_parser_t *p)
{
    p->n_begun++;
    p->type_len = p->name_len = p->fence_pos = 0;
    p->alen = p->aemit = 0;
    p->cs = C_NONE;
    p->st = p->syntax == FG_TOOL_SYNTAX_DSML ? D_NAME : S_TYPE;
}

/* A call ended (well or not): back between calls, or to text for a call
 * that stood outside a block. */
static void after_call(fg_tool_parser_t *p) { p->st = p->in_block ? S_CALLS : S_TEXT; }

/* After a malformed call: the marker that ended it decides where the parse goes on. */
static void resync(fg_tool_parser_t *p, marker m)
{
    switch (m) {
    case M_CALL_BEGIN:
        begin_call(p);
        return;
    case M_CALL_END:
        after_call(p);
        return;
    case M_CALLS_BEGIN:
        p->in_block = true;
        p->st = S_CALLS;
        return;
    case M_CALLS_END:
    case M_EOS:
        p->in_block = false;
        p->st = S_TEXT;
        return;
    default:
        p->st = S_SKIP;
    }
}

/* The call's arguments are abuf[0, len): checked, then CALL_DONE. DSML
 * refuses a key given twice, which V4's renderer could not write back. */
static void end_call(fg_tool_parser_t *p, const out *o, size_t len)
{
    json_error_t err;
    json_t *v = json_loadb(p->abuf, len, p->syntax == FG_TOOL_SYNTAX_DSML ? JSON_REJECT_DUPLICATES : 0, &err);
    if (!v) {
        bad(p, o, false, FG_TOOL_BAD_JSON, "the arguments of %s are not valid JSON: %s (line %d, column %d)", p->name,
            err.text, err.line, err.column);
        after_call(p);
        return;
    }
    bool obj = json_is_object(v);
    json_decref(v);
    if (!obj) {
        bad(p, o, false, FG_TOOL_BAD_JSON, "the arguments of %s are JSON but not an object", p->name);
        after_call(p);
        return;
    }
    flush_args(p, o); /* what remains (V3: before the fence; cs is C_T3 or C_WS2: up to cstart) */
    fg_tool_event ev = {.type = FG_TOOL_EV_CALL_DONE, .index = p->n_begun - 1, .name = p->name,
                        .name_len = p->name_len, .text = p->abuf, .len = len};
    o->sink(o->ctx, &ev);
    p->n_done++;
    after_call(p);
}

/* ---------------------------------------------------------------- the state machine */

static void close_restart(fg_tool_parser_t *p, char c, size_t i)
{
    p->cs = C_NONE;
    if (is_ws(c)) {
        p->cs = C_WS1;
        p->cstart = i;
    } else if (c == '`') {
        p->cs = C_T1;
        p->cstart = i;
    }
}

/* One argument byte at abuf[i]: where a closing fence may begin. */
static void close_step(fg_tool_parser_t *p, char c, size_t i)
{
    switch (p->cs) {
    case C_NONE:
        close_restart(p, c, i);
        return;
    case C_WS1:
        if (c == '`')
            p->cs = C_T1;
        else if (!is_ws(c))
            p->cs = C_NONE;
        return;
    case C_T1:
    case C_T2:
        if (c == '`')
            p->cs = p->cs == C_T1 ? C_T2 : C_T3;
        else
            close_restart(p, c, i);
        return;
    case C_T3:
        if (is_ws(c))
            p->cs = C_WS2;
        else if (c == '`')
            p->cstart = i - 2; /* the last three backticks are the fence */
        else
            close_restart(p, c, i);
        return;
    case C_WS2:
        if (!is_ws(c))
            close_restart(p, c, i);
        return;
    }
}

/* Room for n more argument bytes; false (the call reported, the parse
 * skipping) past max_args or out of memory. */
static bool args_room(fg_tool_parser_t *p, const out *o, size_t n)
{
    if (p->alen + n <= p->acap)
        return true;
    if (p->alen + n > p->max_args) {
        bad(p, o, false, FG_TOOL_TOO_LONG, "the arguments of %s pass the limit of %zu bytes", p->name, p->max_args);
        p->st = S_SKIP;
        return false;
    }
    size_t cap = p->acap ? 2 * p->acap : 1024;
    while (cap < p->alen + n)
        cap *= 2;
    if (cap > p->max_args)
        cap = p->max_args;
    char *b = realloc(p->abuf, cap);
    if (!b) {
        bad(p, o, false, FG_TOOL_TOO_LONG, "out of memory for %zu bytes of arguments", cap);
        p->st = S_SKIP;
        return false;
    }
    p->abuf = b;
    p->acap = cap;
    return true;
}

/* DSML: appends to the arguments object. */
static bool args_put(fg_tool_parser_t *p, const out *o, const char *s, size_t n)
{
    if (!args_room(p, o, n))
        return false;
    memcpy(p->abuf + p->alen, s, n);
    p->alen += n;
    return true;
}

/* DSML: one byte of a key or string value, as json.dumps(ensure_ascii=False) writes it. */
static bool args_put_escaped(fg_tool_parser_t *p, const out *o, char c)
{
    char e[6];
    const size_t n = fg_pyjson_escape_byte((unsigned char)c, e);
    return n ? args_put(p, o, e, n) : args_put(p, o, &c, 1);
}

/* DSML: a byte of the parameter's kind ("true"/"false" in ATTR_*). */
static void attr_step(fg_tool_parser_t *p, const out *o, char c)
{
    const size_t pos = ++p->attr_pos; /* the '"' that ended the key is ATTR_*[0] */
    if (!(pos < sizeof ATTR_STR - 1 && ATTR_STR[pos] == c))
        p->attr_can &= ~1u;
    if (!(pos < sizeof ATTR_JSON - 1 && ATTR_JSON[pos] == c))
        p->attr_can &= ~2u;
    if (!p->attr_can) {
        bad(p, o, false, FG_TOOL_BAD_FENCE, "a parameter of %s is not followed by string=\"true\" or string=\"false\"",
            p->name);
        p->st = S_SKIP;
        return;
    }
    const bool str = (p->attr_can & 1u) && pos == sizeof ATTR_STR - 2;
    if (!str && !((p->attr_can & 2u) && pos == sizeof ATTR_JSON - 2))
        return;
    p->is_string = str;
    if (str && !args_put(p, o, "\"", 1))
        return;
    p->vstart = p->alen;
    p->st = D_VALUE;
}

/* DSML: a string="false" parameter ended; its value must be one JSON value. */
static void param_end(fg_tool_parser_t *p, const out *o)
{
    if (p->is_string) {
        if (args_put(p, o, "\"", 1))
            p->st = D_PARAMS;
        return;
    }
    json_error_t err;
    json_t *v = json_loadb(p->abuf + p->vstart, p->alen - p->vstart, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
    if (!v) {
        bad(p, o, false, FG_TOOL_BAD_JSON, "a string=\"false\" parameter of %s is not one JSON value: %s", p->name,
            err.text);
        p->st = S_SKIP;
        return;
    }
    json_decref(v);
    p->st = D_PARAMS;
}

static void on_byte(fg_tool_parser_t *p, const out *o, char c)
{
    switch (p->st) {
    case S_TEXT:
        p->tbuf[p->tlen++] = c;
        if (p->tlen == sizeof p->tbuf)
            flush_text(p, o, false);
        return;
    case S_CALLS:
        if (!is_ws(c)) {
            bad(p, o, true, FG_TOOL_BAD_ORDER, "text between tool calls");
            p->st = S_SKIP;
        }
        return;
    case S_TYPE:
        if (p->type_len == TYPE_MAX) {
            bad(p, o, false, FG_TOOL_BAD_TYPE, "the call's type is longer than %d bytes", TYPE_MAX);
            p->st = S_SKIP;
            return;
        }
        p->type[p->type_len++] = c;
        return;
    case S_NAME:
        if (!name_byte(p, o, c, '\n'))
            return;
        p->st = S_FENCE;
        {
            fg_tool_event ev = {.type = FG_TOOL_EV_CALL_BEGIN, .index = p->n_begun - 1, .name = p->name,
                                .name_len = p->name_len};
            o->sink(o->ctx, &ev);
        }
        return;
    case S_FENCE:
        if (c != FENCE_OPEN[p->fence_pos]) {
            bad(p, o, false, FG_TOOL_BAD_FENCE, "the arguments of %s do not start with ```json and a new line",
                p->name);
            p->st = S_SKIP;
            return;
        }
        if (++p->fence_pos == sizeof FENCE_OPEN - 1) {
            p->st = S_ARGS;
            p->alen = p->aemit = 0;
            p->cs = C_NONE;
        }
        return;
    case S_ARGS:
        if (!args_room(p, o, 1))
            return;
        p->abuf[p->alen] = c;
        close_step(p, c, p->alen);
        p->alen++;
        return;
    case S_SKIP:
        return;
    case D_NAME:
        if (!name_byte(p, o, c, '"'))
            return;
        p->st = D_NAME_END;
        return;
    case D_NAME_END:
        if (c != '>') {
            bad(p, o, false, FG_TOOL_BAD_NAME, "the invoke tag of %s does not end with \">\"", p->name);
            p->st = S_SKIP;
            return;
        }
        p->st = D_PARAMS;
        p->alen = p->aemit = 0;
        p->n_params = 0;
        {
            fg_tool_event ev = {.type = FG_TOOL_EV_CALL_BEGIN, .index = p->n_begun - 1, .name = p->name,
                                .name_len = p->name_len};
            o->sink(o->ctx, &ev);
        }
        args_put(p, o, "{", 1);
        return;
    case D_PARAMS:
        if (!is_ws(c)) {
            bad(p, o, false, FG_TOOL_BAD_ORDER, "text between the parameters of %s", p->name);
            p->st = S_SKIP;
        }
        return;
    case D_KEY:
        if (c == '"') {
            if (args_put(p, o, "\": ", 3)) {
                p->st = D_ATTR;
                p->attr_pos = 0;
                p->attr_can = 3;
            }
            return;
        }
        args_put_escaped(p, o, c);
        return;
    case D_ATTR:
        attr_step(p, o, c);
        return;
    case D_VALUE:
        if (p->is_string)
            args_put_escaped(p, o, c);
        else
            args_put(p, o, &c, 1);
        return;
    }
}

static void on_marker(fg_tool_parser_t *p, const out *o, marker m)
{
    switch (p->st) {
    case S_TEXT:
        if (m == M_CALLS_BEGIN) {
            p->tlen -= ws_tail(p); /* DSML: the "\n\n" before the block is the block's */
            flush_text(p, o, true);
            p->in_block = true;
            p->st = S_CALLS;
        } else if (m == M_CALL_BEGIN) {
            begin_call(p);
            bad(p, o, false, FG_TOOL_BAD_ORDER, "a tool call outside a tool-call block");
            p->st = S_SKIP;
        } else if (m == M_CALL_END || m == M_SEP || m == M_CALLS_END || m == M_PARAM_OPEN || m == M_PARAM_CLOSE) {
            bad(p, o, true, FG_TOOL_BAD_ORDER, "a tool-call marker outside a call");
        }
        return; /* EOS and the chat markers write nothing */
    case S_CALLS:
        if (m == M_CALL_BEGIN)
            begin_call(p);
        else if (m == M_CALLS_END || m == M_EOS || m == M_OTHER) {
            p->in_block = false; /* V3's template leaves a single call's block open: EOS ends it too */
            p->st = S_TEXT;
        }
        else
            bad(p, o, true, FG_TOOL_BAD_ORDER, "a tool-call marker between calls");
        return;
    case S_TYPE:
        if (m == M_SEP) {
            if (p->type_len == 8 && memcmp(p->type, "function", 8) == 0) {
                p->st = S_NAME;
                p->name_len = 0;
                return;
            }
            bad(p, o, false, FG_TOOL_BAD_TYPE, "the call's type is \"%.*s\", not \"function\"", (int)p->type_len,
                p->type);
        } else {
            bad(p, o, false, FG_TOOL_BAD_ORDER, "a marker where the call's type and <\xef\xbd\x9ctool\xe2\x96\x81"
                "sep\xef\xbd\x9c> belong");
        }
        resync(p, m);
        return;
    case S_NAME:
        if (p->name_len == 0)
            bad(p, o, false, FG_TOOL_BAD_NAME, "the call has no function name");
        else
            bad(p, o, false, FG_TOOL_BAD_FENCE, "a marker after the function name, before its arguments");
        resync(p, m);
        return;
    case S_FENCE:
        bad(p, o, false, FG_TOOL_BAD_FENCE, "a marker before the arguments of %s", p->name);
        resync(p, m);
        return;
    case S_ARGS:
        if (m == M_CALL_END && (p->cs == C_T3 || p->cs == C_WS2)) {
            end_call(p, o, p->cstart);
            return;
        }
        if (m == M_CALL_END)
            bad(p, o, false, FG_TOOL_BAD_FENCE, "the arguments of %s do not end with ```", p->name);
        else
            bad(p, o, false, FG_TOOL_BAD_ORDER, "a marker inside the arguments of %s", p->name);
        resync(p, m);
        return;
    case S_SKIP:
        if (m != M_SEP && m != M_OTHER && m != M_PARAM_OPEN && m != M_PARAM_CLOSE)
            resync(p, m);
        return;
    case D_NAME:
    case D_NAME_END:
        bad(p, o, false, FG_TOOL_BAD_NAME, "a marker inside the invoke tag");
        resync(p, m);
        return;
    case D_PARAMS:
        if (m == M_PARAM_OPEN) {
            if (p->n_params ? args_put(p, o, ", \"", 3) : args_put(p, o, "\"", 1)) {
                p->n_params++;
                p->st = D_KEY;
            }
            return;
        }
        if (m == M_CALL_END) {
            if (args_put(p, o, "}", 1))
                end_call(p, o, p->alen);
            return;
        }
        bad(p, o, false, FG_TOOL_BAD_ORDER, "a marker where a parameter of %s or its end belongs", p->name);
        resync(p, m);
        return;
    case D_KEY:
    case D_ATTR:
        bad(p, o, false, FG_TOOL_BAD_FENCE, "a marker inside a parameter tag of %s", p->name);
        resync(p, m);
        return;
    case D_VALUE:
        if (m == M_PARAM_CLOSE) {
            param_end(p, o);
            return;
        }
        bad(p, o, false, FG_TOOL_BAD_ORDER, "a marker inside a parameter of %s", p->name);
        resync(p, m);
        return;
    }
}

/* ---------------------------------------------------------------- markers */

/* 1: mbuf[0, n) begins a marker, 2: is one (*m set), 0: neither. */
static int marker_match(const fg_tool_parser_t *p, const char *s, size_t n, marker *m)
{
    for (size_t i = 0; i < p->n_tab; i++) {
        size_t k = strlen(p->tab[i].text);
        if (n <= k && memcmp(p->tab[i].text, s, n) == 0) {
            if (n == k)
                *m = p->tab[i].m;
            return n == k ? 2 : 1;
        }
    }
    return 0;
}

static void step(fg_tool_parser_t *p, const out *o, char c)
{
    for (;;) {
        if (p->mlen == 0) {
            if (c == '<') {
                p->mbuf[p->mlen++] = c;
                return;
            }
            on_byte(p, o, c);
            return;
        }
        p->mbuf[p->mlen] = c;
        marker m = M_OTHER;
        int r = marker_match(p, p->mbuf, p->mlen + 1, &m);
        if (r == 1) {
            p->mlen++;
            return;
        }
        if (r == 2) {
            p->mlen = 0;
            on_marker(p, o, m);
            return;
        }
        /* Not a marker: its bytes are ordinary ones (only the first is '<'). */
        size_t n = p->mlen;
        p->mlen = 0;
        for (size_t i = 0; i < n; i++)
            on_byte(p, o, p->mbuf[i]);
        /* and c is looked at again: it may start a marker */
    }
}

void fg_tool_parse_feed(fg_tool_parser_t *p, const char *s, size_t n, fg_tool_sink sink, void *ctx)
{
    const out o = {sink, ctx};
    size_t i = 0;
    while (i < n) {
        if (p->st == S_TEXT && p->mlen == 0) {
            /* the common case: a run of text up to the next '<' */
            const char *lt = memchr(s + i, '<', n - i);
            size_t run = lt ? (size_t)(lt - (s + i)) : n - i;
            while (run) {
                size_t room = sizeof p->tbuf - p->tlen, k = run < room ? run : room;
                memcpy(p->tbuf + p->tlen, s + i, k);
                p->tlen += k;
                i += k;
                run -= k;
                if (p->tlen == sizeof p->tbuf)
                    flush_text(p, &o, false);
            }
            if (i == n)
                break;
        }
        step(p, &o, s[i++]);
    }
    if (p->st == S_TEXT)
        flush_text(p, &o, false);
    flush_args(p, &o);
}

void fg_tool_parse_finish(fg_tool_parser_t *p, fg_tool_sink sink, void *ctx)
{
    const out o = {sink, ctx};
    /* a partial marker is bytes; inside a DSML call, where the call is cut short anyway, it is dropped */
    size_t n = p->st >= D_NAME && p->st <= D_VALUE ? 0 : p->mlen;
    p->mlen = 0;
    for (size_t i = 0; i < n; i++)
        on_byte(p, &o, p->mbuf[i]);
    switch (p->st) {
    case S_TEXT:
        flush_text(p, &o, true);
        break;
    case S_TYPE:
    case S_NAME:
    case S_FENCE:
    case S_ARGS:
    case D_NAME:
    case D_NAME_END:
    case D_PARAMS:
    case D_KEY:
    case D_ATTR:
    case D_VALUE:
        bad(p, &o, false, FG_TOOL_UNTERMINATED, "the reply ended inside tool call %u", p->n_begun - 1);
        break;
    case S_CALLS:
    case S_SKIP:
        break;
    }
    p->st = S_SKIP; /* until reset */
}
