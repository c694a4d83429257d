/* tool_decl.h: the function tools a client declares, its tool_choice, and the
 * checks on the calls the model makes (docs/protocol.md "Tool declarations").
 *
 * Owns a request's tool set: OpenAI's `tools` in both shapes (Responses and
 * Realtime: {"type":"function","name",...}; Chat Completions:
 * {"type":"function","function":{"name",...}}) validated and turned into the
 * fg_chat_tool entries chat_template.h writes into the prompt, each schema
 * serialised as Python's json.dumps writes it (what DeepSeek's convention
 * shows). tool_choice: "auto", "none", "required", {"type":"function",
 * "name":N} or {"type":"function","function":{"name":N}}.
 *
 * Errors name the field as a path (tools[2].function.name), so a caller can
 * report OpenAI's `param`. Memory: a set owns one allocation per tool, freed
 * by fg_tool_set_free; the checks allocate nothing. Pure, any thread.
 */
#ifndef FG_TOOL_DECL_H
#define FG_TOOL_DECL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/base/name.h"
#include "config/fg_error.h"
#include "gateway/chat_template.h"

#define FG_TOOL_MAX_DECLS 128u               /* OpenAI's limit on functions */
#define FG_TOOL_DESC_MAX (32u * 1024u)       /* bytes of a description */
#define FG_TOOL_PARAMS_MAX (64u * 1024u)     /* bytes of a schema as written into the prompt */

typedef struct fg_tool_set {
    fg_chat_tool *tools; /* [n]; each entry's texts live in one block it owns */
    uint32_t n;
} fg_tool_set;

/* Parses `tools` (NULL or JSON null: no tools) into out (replaced).
 * Errors: FG_ERR_INVALID_ARG (not an array, an entry that is not an object,
 * a missing or bad name (1..64 of [A-Za-z0-9_-]), two tools of one name, a
 * description that is not a string, parameters that are not a JSON object,
 * an unknown field, limits), FG_ERR_UNSUPPORTED (a tool type other than
 * "function": web_search, file_search, mcp, custom, ...), FG_ERR_NOMEM.
 * out is empty on error. */
fg_err fg_tool_set_parse(const json_t *tools, fg_tool_set *out, fg_diag *diag);
void fg_tool_set_free(fg_tool_set *s);

/* The declared tool of that name, or NULL. */
const fg_chat_tool *fg_tool_set_find(const fg_tool_set *s, const char *name, size_t len);

typedef enum fg_tool_choice_mode {
    FG_TOOL_CHOICE_AUTO = 0, /* the model decides (OpenAI's default when tools are declared) */
    FG_TOOL_CHOICE_NONE,     /* no call is taken */
    FG_TOOL_CHOICE_REQUIRED, /* the reply must call at least one declared function */
    FG_TOOL_CHOICE_NAMED,    /* the reply must call this function, and no other */
} fg_tool_choice_mode;

typedef struct fg_tool_choice {
    fg_tool_choice_mode mode;
    char name[FG_NAME_MAX + 1]; /* NAMED: NUL-terminated */
} fg_tool_choice;

/* Parses tool_choice (NULL or JSON null: auto). Errors: FG_ERR_INVALID_ARG
 * (an unknown string, a bad name, a malformed object), FG_ERR_UNSUPPORTED
 * (an object of another type: allowed_tools, mcp, custom, hosted tools). */
fg_err fg_tool_choice_parse(const json_t *v, fg_tool_choice *out, fg_diag *diag);

/* Whether a choice fits a set: "required" needs a tool, a named function must
 * be declared. Errors: FG_ERR_INVALID_ARG saying which. */
fg_err fg_tool_choice_check(const fg_tool_set *s, const fg_tool_choice *c, fg_diag *diag);

/* The session layer's tool_choice (gateway/protocol.h: the mode, and the name
 * of FG_PROTO_TOOL_CHOICE_FUNCTION) as tool_decl's, and back: the one mapping
 * between the two enums. name NULL: "". */
fg_tool_choice fg_tool_choice_from_proto(fg_proto_tool_choice mode, const char *name);
fg_proto_tool_choice fg_tool_choice_to_proto(const fg_tool_choice *c);

/* Whether the tool set goes into the prompt: not with "none", so the model is
 * not invited to call what will not be taken. */
bool fg_tool_choice_renders(const fg_tool_choice *c);

typedef enum fg_tool_verdict {
    FG_TOOL_V_ACCEPT = 0,   /* the call is taken */
    FG_TOOL_V_UNDECLARED,   /* no declared function has the call's name */
    FG_TOOL_V_CHOICE_NONE, /* tool_choice is "none": no call is taken */
    FG_TOOL_V_NOT_CHOSEN,   /* tool_choice names another function */
    FG_TOOL_V_MISSING,      /* the reply ended without the call tool_choice requires */
} fg_tool_verdict;

/* The verdict on one well-formed call (FG_TOOL_EV_CALL_DONE's name). */
fg_tool_verdict fg_tool_check_call(const fg_tool_set *s, const fg_tool_choice *c, const char *name, size_t len);
/* The verdict on a whole reply that took n_accepted calls. */
fg_tool_verdict fg_tool_check_reply(const fg_tool_choice *c, uint32_t n_accepted);
/* "accept", "tool_undeclared", "tool_choice_none", "tool_not_chosen", "tool_call_missing", or "?" */
const char *fg_tool_verdict_name(fg_tool_verdict v);

/* fg_pyjson_dump with ensure_ascii (gateway/pyjson.h): the form of V3's tool
 * declarations. */
fg_err fg_tool_json_pydump(const json_t *v, char **buf, size_t *len, size_t *cap);

#endif
