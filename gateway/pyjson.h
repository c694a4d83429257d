/* pyjson.h: a JSON value serialised as Python's json.dumps(v) writes it, with
 * its default separators (", " and ": "), the keys in the object's order and
 * floats as repr. DeepSeek's prompt formats write tool schemas and argument
 * values this way (docs/protocol.md "Prompt formats", "Tool declarations"):
 * V3's convention with ensure_ascii=True, V4's encoder with
 * ensure_ascii=False. Pure, any thread.
 */
#ifndef FG_PYJSON_H
#define FG_PYJSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "config/fg_error.h"

/* Appends v to *buf (malloc'd, grown; *len bytes used, NUL-terminated).
 * ascii: json.dumps' ensure_ascii (every non-ASCII character as lowercase
 * \uXXXX escapes); false writes it as UTF-8. Errors: FG_ERR_NOMEM,
 * FG_ERR_INVALID_ARG (a NULL argument, nesting deeper than 64). */
fg_err fg_pyjson_dump(const json_t *v, bool ascii, char **buf, size_t *len, size_t *cap);

/* One byte of a JSON string as json.dumps escapes it: the short escapes
 * (\" \\ \n \r \t \b \f) and other control bytes as \u00XX. Writes the
 * escape to e and returns its length (2 or 6); returns 0 for a byte that
 * stands as itself (ensure_ascii=False; with ensure_ascii the caller escapes
 * bytes >= 0x7f itself). */
size_t fg_pyjson_escape_byte(unsigned char c, char e[6]);

#endif
