/* tool_parse.h: DeepSeek tool calls out of the model's streamed reply text.
 *
 * Owns one reply's parse: the engine's released text (with keep_control, so
 * the markers are in it) goes in as chunks cut anywhere (inside a marker, a
 * UTF-8 sequence, the fence); plain assistant text and tool calls come out as
 * events (docs/protocol.md "Tool calls in the reply"), in one of two syntaxes
 * picked at creation. DeepSeek-V3's:
 *
 *   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
 *   \n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜><｜tool▁calls▁end｜>
 *
 * DeepSeek-V4's DSML, as render_v4 writes an assistant's calls (whitespace
 * between the tags is free; the whitespace before the block is not text):
 *
 *   \n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="NAME">\n
 *   <｜DSML｜parameter name="KEY" string="true">TEXT</｜DSML｜parameter>\n
 *   <｜DSML｜parameter name="KEY" string="false">JSON</｜DSML｜parameter>\n
 *   </｜DSML｜invoke>\n<｜DSML｜invoke name="NAME2">...</｜DSML｜invoke>\n</｜DSML｜tool_calls>
 *
 * whose arguments come out as the JSON object {"KEY": "TEXT", "KEY": JSON}
 * (json.dumps's separators; TEXT escaped as a JSON string, JSON as written,
 * each JSON value checked when its parameter ends).
 *
 * The parse works byte by byte with all its state here, so the events are the
 * same whatever the chunking, except where a TEXT or ARGS delta is cut (the
 * joined deltas are the same). Deltas never end inside a UTF-8 sequence
 * (bytes that are not UTF-8 pass through as they are).
 *
 * Memory: the parser owns a text buffer of fixed size and an arguments
 * buffer that grows by doubling up to max_args and is kept across replies;
 * feeding allocates nothing once it has grown (jansson's check of a finished
 * call allocates, once per call, and in DSML once per non-string parameter).
 * Event pointers are valid during the callback only. One parser per reply stream; not thread-safe, any thread.
 */
#ifndef FG_TOOL_PARSE_H
#define FG_TOOL_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

typedef enum fg_tool_ev_type {
    FG_TOOL_EV_TEXT = 1,   /* plain assistant text: text[len] */
    FG_TOOL_EV_CALL_BEGIN, /* a call's name is known: index, name */
    FG_TOOL_EV_ARGS_DELTA, /* more of the call's arguments: index, text[len] */
    FG_TOOL_EV_CALL_DONE,  /* the call ended well: index, name, text[len] = all its
                              arguments, a JSON object as the model wrote it */
    FG_TOOL_EV_MALFORMED,  /* a call that cannot be used: index, reason, detail
                              (name when it was read); no further events for it */
} fg_tool_ev_type;

typedef enum fg_tool_bad {
    FG_TOOL_BAD_ORDER = 1,    /* a tool marker where it cannot stand */
    FG_TOOL_BAD_TYPE,         /* the call's type is not "function" */
    FG_TOOL_BAD_NAME,         /* the name is missing, too long or not [A-Za-z0-9_-] */
    FG_TOOL_BAD_FENCE,        /* the arguments are not in a ```json ... ``` fence (DSML: a
                                 parameter's tag is not name="..." string="true|false") */
    FG_TOOL_BAD_JSON,         /* the arguments are not one JSON object */
    FG_TOOL_TOO_LONG,         /* the arguments pass max_args bytes */
    FG_TOOL_UNTERMINATED,     /* the output ended inside the call */
} fg_tool_bad;

typedef struct fg_tool_event {
    fg_tool_ev_type type;
    uint32_t index;      /* the call's place in the reply: how many call openings (<｜tool▁call▁begin｜>,
                            DSML's invoke) came before it */
    const char *name;    /* CALL_BEGIN, CALL_DONE, MALFORMED when known (else ""), NUL-terminated */
    size_t name_len;
    const char *text;    /* TEXT, ARGS_DELTA, CALL_DONE; not NUL-terminated */
    size_t len;
    fg_tool_bad reason;  /* MALFORMED */
    const char *detail;  /* MALFORMED: one line saying what was wrong, NUL-terminated */
} fg_tool_event;

typedef void (*fg_tool_sink)(void *ctx, const fg_tool_event *ev);

#define FG_TOOL_ARGS_DEFAULT (256u * 1024u) /* bytes of one call's arguments */
#define FG_TOOL_ARGS_MAX (64u * 1024u * 1024u)
#define FG_TOOL_TEXT_CHUNK 4096u            /* a TEXT delta is at most this long */

typedef enum fg_tool_syntax {
    FG_TOOL_SYNTAX_V3 = 0, /* DeepSeek-V3's markers and ```json fence */
    FG_TOOL_SYNTAX_DSML,   /* DeepSeek-V4's DSML tags */
} fg_tool_syntax;

typedef struct fg_tool_parse_opts {
    size_t max_args; /* bytes of one call's arguments (DSML: of its JSON object), 0: FG_TOOL_ARGS_DEFAULT */
    fg_tool_syntax syntax;
} fg_tool_parse_opts;

typedef struct fg_tool_parser fg_tool_parser_t;

/* Creates a parser ready for a reply (opts NULL: defaults).
 * Errors: FG_ERR_INVALID_ARG (max_args above FG_TOOL_ARGS_MAX, an unknown syntax), FG_ERR_NOMEM. */
fg_err fg_tool_parser_create(const fg_tool_parse_opts *opts, fg_tool_parser_t **out, fg_diag *diag);
void fg_tool_parser_destroy(fg_tool_parser_t *p);

/* Starts a new reply: forgets the state, keeps the buffers. */
void fg_tool_parser_reset(fg_tool_parser_t *p);

/* Parses the next n bytes of the reply; events go to sink in reply order.
 * Never fails: a call that cannot be parsed is a MALFORMED event, and the
 * parse goes on at the next call or after the block. */
void fg_tool_parse_feed(fg_tool_parser_t *p, const char *s, size_t n, fg_tool_sink sink, void *ctx);

/* The reply ended: releases what was held back (text, a partial marker) and
 * reports a call left open as FG_TOOL_UNTERMINATED. Then reset before reuse. */
void fg_tool_parse_finish(fg_tool_parser_t *p, fg_tool_sink sink, void *ctx);

/* Calls in the reply so far: CALL_DONE events, MALFORMED events. */
uint32_t fg_tool_parse_n_done(const fg_tool_parser_t *p);
uint32_t fg_tool_parse_n_malformed(const fg_tool_parser_t *p);

/* "bad_order", "bad_type", "bad_name", "bad_fence", "bad_json", "too_long", "unterminated", or "?" */
const char *fg_tool_bad_name(fg_tool_bad r);

#endif
