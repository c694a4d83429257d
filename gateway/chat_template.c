/* chat_template.c: conversations to prompts (see chat_template.h).
 *
 * DeepSeek-V3 (render_v3) follows the chat_template of DeepSeek-V3's
 * tokenizer_config.json statement by statement, its state included (the
 * template's namespace: is_first, is_tool, is_output_first), so its quirks
 * come out as it writes them: system messages gathered at the head; the
 * markers that close a tool-call block written only after a message's second
 * call; a later tool-call or tool-output block continued with "\n" instead of
 * opened again; an assistant answer after tool outputs without <｜Assistant｜>.
 * tests/chat renders the same conversations with the template itself.
 *
 * DeepSeek-V4 (render_v4) follows encode_messages of DeepSeek's
 * encoding_dsv4.py (docs/protocol.md "Prompt formats"): runs of user and tool
 * messages merged into one user turn, each turn then written with what its
 * successor asks for (the reply opening after a user turn), reasoning kept
 * only where the encoder keeps it, call arguments re-parsed and written as
 * DSML parameters. tests/chat/v4_vectors.json holds what the encoder wrote.
 */
#include "gateway/chat_template.h"

#include <stdlib.h>
#include <string.h>

#include "config/base/bytes.h"
#include "gateway/pyjson.h"

/* The markers, spelled in UTF-8 (U+FF5C fullwidth bar, U+2581 lower block). */
#define BAR "\xef\xbd\x9c"
#define SP "\xe2\x96\x81"
#define USER "<" BAR "User" BAR ">"
#define ASSISTANT "<" BAR "Assistant" BAR ">"
#define EOS_TEXT "<" BAR "end" SP "of" SP "sentence" BAR ">"
#define TOOL_CALLS_BEGIN "<" BAR "tool" SP "calls" SP "begin" BAR ">"
#define TOOL_CALLS_END "<" BAR "tool" SP "calls" SP "end" BAR ">"
#define TOOL_CALL_BEGIN "<" BAR "tool" SP "call" SP "begin" BAR ">"
#define TOOL_CALL_END "<" BAR "tool" SP "call" SP "end" BAR ">"
#define TOOL_SEP "<" BAR "tool" SP "sep" BAR ">"
#define TOOL_OUTPUTS_BEGIN "<" BAR "tool" SP "outputs" SP "begin" BAR ">"
#define TOOL_OUTPUTS_END "<" BAR "tool" SP "outputs" SP "end" BAR ">"
#define TOOL_OUT_BEGIN "<" BAR "tool" SP "output" SP "begin" BAR ">"
#define TOOL_OUT_END "<" BAR "tool" SP "output" SP "end" BAR ">"
#define DSML BAR "DSML" BAR
#define LATEST_REMINDER "<" BAR "latest_reminder" BAR ">"
#define THINK_START "<think>"
#define THINK_END "</think>"

/* ---------------------------------------------------------------- families */

const char *fg_chat_family_name(fg_chat_family f)
{
    switch (f) {
    case FG_CHAT_DEEPSEEK_V3:
        return "deepseek-v3";
    case FG_CHAT_DEEPSEEK_R1:
        return "deepseek-r1";
    case FG_CHAT_DEEPSEEK_V4:
        return "deepseek-v4";
    }
    return "?";
}

static bool contains(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, k) == 0)
            return true;
    return false;
}

static bool vocab_has(const fg_tokenizer_t *tok, const char *text)
{
    return fg_tokenizer_special_id(tok, text, strlen(text)) >= 0;
}

fg_err fg_chat_family_detect(const char *tmpl, size_t len, const fg_tokenizer_t *tok, fg_chat_family *out,
                             fg_diag *diag)
{
    if (!out || (!tmpl && len) || (!tmpl && !tok))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "fg_chat_family_detect: NULL argument");
    if (tmpl) {
        /* What tells the families apart in their template texts: V4's DSML
         * tool blocks; the thinking templates' "</think>" handling; V3's
         * "tool['type'] + '<｜tool▁sep｜>'" call line. */
        if (contains(tmpl, len, DSML)) {
            *out = FG_CHAT_DEEPSEEK_V4;
            return FG_OK;
        }
        if (contains(tmpl, len, USER) && contains(tmpl, len, TOOL_OUTPUTS_BEGIN)) {
            if (contains(tmpl, len, THINK_END)) {
                *out = FG_CHAT_DEEPSEEK_R1;
                return FG_OK;
            }
            if (contains(tmpl, len, "tool['type'] + '" TOOL_SEP "'")) {
                *out = FG_CHAT_DEEPSEEK_V3;
                return FG_OK;
            }
        }
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "%s (%zu bytes) is not a DeepSeek template known here (deepseek-v3, deepseek-r1, "
                           "deepseek-v4; docs/protocol.md \"Prompt formats\")",
                           FG_CHAT_TEMPLATE_KEY, len);
    }
    if (vocab_has(tok, LATEST_REMINDER)) {
        *out = FG_CHAT_DEEPSEEK_V4;
        return FG_OK;
    }
    if (vocab_has(tok, USER) && vocab_has(tok, TOOL_CALLS_BEGIN)) {
        *out = FG_CHAT_DEEPSEEK_V3;
        return FG_OK;
    }
    return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                       "no %s and no DeepSeek chat markers (%s, %s) among the vocabulary's special tokens",
                       FG_CHAT_TEMPLATE_KEY, USER, TOOL_CALLS_BEGIN);
}

/* ---------------------------------------------------------------- prompts */

void fg_chat_prompt_free(fg_chat_prompt *p)
{
    if (!p)
        return;
    free(p->text);
    free(p->spans);
    *p = (fg_chat_prompt){0};
}

/* Rendering state: the prompt being written and the first error. */
typedef struct render_out {
    fg_chat_prompt *p;
    fg_err err;
} render_out;

static void put(render_out *o, const char *s, size_t n, bool tmpl)
{
    fg_chat_prompt *p = o->p;
    if (o->err || n == 0)
        return;
    if (n > FG_CHAT_MAX_PROMPT_BYTES - p->len) {
        o->err = FG_ERR_INVALID_ARG;
        return;
    }
    const size_t at = p->len;
    if (!fg_bytes_append(&p->text, &p->len, &p->cap, s, n)) {
        o->err = FG_ERR_NOMEM;
        return;
    }
    if (tmpl) {
        if (p->n_spans && p->spans[p->n_spans - 1].end == at) {
            p->spans[p->n_spans - 1].end += n;
        } else {
            if (p->n_spans == p->cap_spans) {
                size_t c = p->cap_spans ? 2 * p->cap_spans : 16;
                fg_tok_span *sp = realloc(p->spans, c * sizeof *sp);
                if (!sp) {
                    o->err = FG_ERR_NOMEM;
                    return;
                }
                p->spans = sp;
                p->cap_spans = c;
            }
            p->spans[p->n_spans++] = (fg_tok_span){at, at + n};
        }
    }
}

/* Template text (special tokens may match in it). */
static void lit(render_out *o, const char *s) { put(o, s, strlen(s), true); }
/* Message text (never matched). */
static void txt(render_out *o, fg_chat_text t) { put(o, t.ptr, t.len, false); }

static fg_err check_text(fg_chat_text t, uint32_t i, const char *what, fg_diag *diag)
{
    if (!t.ptr && t.len)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: %s has a length but no bytes", i, what);
    if (t.len > FG_CHAT_MAX_PROMPT_BYTES)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: %s is longer than %u bytes", i, what,
                           FG_CHAT_MAX_PROMPT_BYTES);
    return FG_OK;
}

/* Checks what every family needs of a message. */
static fg_err check_msg(const fg_chat_msg *m, uint32_t i, fg_diag *diag)
{
    fg_err e;
    if (m->role < FG_CHAT_SYSTEM || m->role > FG_CHAT_TOOL)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: unknown role %d", i, (int)m->role);
    if ((e = check_text(m->content, i, "content", diag)))
        return e;
    if (m->n_calls && m->role != FG_CHAT_ASSISTANT)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: only an assistant message has tool calls", i);
    if (m->n_calls > FG_CHAT_MAX_CALLS || (m->n_calls && !m->calls))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: %u tool calls (at most %u)", i, m->n_calls,
                           FG_CHAT_MAX_CALLS);
    for (uint32_t k = 0; k < m->n_calls; k++) {
        const fg_chat_call *c = &m->calls[k];
        if ((e = check_text(c->name, i, "a call's name", diag)) || (e = check_text(c->arguments, i, "a call's arguments", diag)))
            return e;
        if (!c->name.len)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: tool call %u has no name", i, k);
        if (!c->arguments.ptr)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: tool call %u has no arguments", i, k);
    }
    if (m->role != FG_CHAT_ASSISTANT && !m->content.ptr)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: content is absent", i);
    if ((e = check_text(m->reasoning, i, "reasoning", diag)))
        return e;
    if (m->reasoning.ptr && m->role != FG_CHAT_ASSISTANT)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: only an assistant message has reasoning", i);
    return FG_OK;
}

static void v3_call(render_out *o, const fg_chat_call *c, bool first)
{
    lit(o, first ? ASSISTANT TOOL_CALLS_BEGIN TOOL_CALL_BEGIN "function" TOOL_SEP : "\n" TOOL_CALL_BEGIN "function" TOOL_SEP);
    txt(o, c->name);
    lit(o, "\n```json\n");
    txt(o, c->arguments);
    lit(o, "\n```" TOOL_CALL_END);
}

/* Tool declarations. DeepSeek-V3's template writes none; DeepSeek documents
 * one convention, in DeepSeek-V3.1's model card ("ToolCall"): the block below
 * right after the system prompt, one "###" entry per tool, the parameters as
 * Python's json.dumps writes them (tool_decl.c). The format line shows V3's
 * own call syntax, the one its template writes and tool_parse.c reads (V3.1's
 * card shows V3.1's: no type, no fence). The fixed text is template text, so
 * its markers are special tokens; names, descriptions and schemas are not. */
static void v3_tools(render_out *o, const fg_chat_tool *t, uint32_t n)
{
    lit(o, "## Tools\nYou have access to the following tools:\n");
    for (uint32_t i = 0; i < n; i++) {
        lit(o, "\n### ");
        txt(o, t[i].name);
        lit(o, "\nDescription: ");
        txt(o, t[i].description);
        lit(o, "\n\nParameters: ");
        txt(o, t[i].parameters);
        lit(o, "\n");
    }
    lit(o, "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
           TOOL_CALLS_BEGIN TOOL_CALL_BEGIN "function" TOOL_SEP "tool_call_name\n```json\ntool_call_arguments\n```"
           TOOL_CALL_END "{{additional_tool_calls}}" TOOL_CALLS_END "\n\n"
           "Where:\n"
           "- `tool_call_name` must be an exact match to one of the available tools\n"
           "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
           "- For multiple tool calls, chain them directly without separators or spaces\n");
}

static fg_err check_tools(const fg_chat_conv *conv, fg_diag *diag)
{
    if (conv->n_tools > FG_CHAT_MAX_TOOLS || (conv->n_tools && !conv->tools))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "%u tools (at most %u)", conv->n_tools, FG_CHAT_MAX_TOOLS);
    for (uint32_t i = 0; i < conv->n_tools; i++) {
        const fg_chat_tool *t = &conv->tools[i];
        fg_chat_text parts[3] = {t->name, t->description, t->parameters};
        for (int k = 0; k < 3; k++)
            if ((!parts[k].ptr && parts[k].len) || parts[k].len > FG_CHAT_MAX_PROMPT_BYTES)
                return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool %u: a text with a bad length", i);
        if (!t->name.len)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool %u has no name", i);
        if (!t->parameters.ptr)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool %u has no parameters", i);
    }
    return FG_OK;
}

static fg_err render_v3(const fg_chat_conv *conv, const fg_tokenizer_t *tok, render_out *o, fg_diag *diag)
{
    if (conv->thinking)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "DeepSeek-V3's template has no thinking mode");
    for (uint32_t i = 0; i < conv->n_msgs; i++) {
        if (conv->msgs[i].reasoning.ptr)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "message %u: DeepSeek-V3's template has no place for reasoning", i);
        const fg_chat_msg *m = &conv->msgs[i];
        if (m->role == FG_CHAT_ASSISTANT && m->content.ptr && m->n_calls)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "message %u: DeepSeek-V3's template writes an assistant message as text or as tool "
                               "calls, not both (send the calls as a message without content)", i);
        if (m->role == FG_CHAT_ASSISTANT && !m->content.ptr && !m->n_calls)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "message %u: an assistant message without content or calls", i);
    }
    int32_t bos = fg_tokenizer_bos(tok);
    if (bos >= 0) {
        const char *b = fg_tokenizer_token_text(tok, bos);
        put(o, b, strlen(b), true);
    }
    bool first_sp = true;
    for (uint32_t i = 0; i < conv->n_msgs; i++) {
        if (conv->msgs[i].role != FG_CHAT_SYSTEM)
            continue;
        if (!first_sp)
            lit(o, "\n\n");
        txt(o, conv->msgs[i].content);
        first_sp = false;
    }
    if (conv->n_tools)
        v3_tools(o, conv->tools, conv->n_tools);
    bool is_first = false, is_tool = false, is_output_first = true;
    for (uint32_t i = 0; i < conv->n_msgs; i++) {
        const fg_chat_msg *m = &conv->msgs[i];
        switch (m->role) {
        case FG_CHAT_SYSTEM:
            break;
        case FG_CHAT_USER:
            is_tool = false;
            lit(o, USER);
            txt(o, m->content);
            break;
        case FG_CHAT_ASSISTANT:
            if (!m->content.ptr) {
                is_tool = false;
                for (uint32_t k = 0; k < m->n_calls; k++) {
                    v3_call(o, &m->calls[k], !is_first);
                    if (is_first) /* sic: the template closes the block after every call but the first */
                        lit(o, TOOL_CALLS_END EOS_TEXT);
                    is_first = true;
                }
            } else {
                lit(o, is_tool ? TOOL_OUTPUTS_END : ASSISTANT);
                txt(o, m->content);
                lit(o, EOS_TEXT);
                is_tool = false;
            }
            break;
        case FG_CHAT_TOOL:
            is_tool = true;
            lit(o, is_output_first ? TOOL_OUTPUTS_BEGIN TOOL_OUT_BEGIN : "\n" TOOL_OUT_BEGIN);
            txt(o, m->content);
            lit(o, TOOL_OUT_END);
            is_output_first = false;
            break;
        }
    }
    if (is_tool)
        lit(o, TOOL_OUTPUTS_END);
    if (conv->add_generation_prompt && !is_tool)
        lit(o, ASSISTANT);
    return FG_OK;
}

/* ---------------------------------------------------------------- DeepSeek-V4 */

#define DSML_TAG(t) "<" DSML t
#define DSML_END(t) "</" DSML t ">"
/* What opens an assistant's calls (after its text; fg_chat_call_prefix's too). */
#define V4_CALLS_OPEN "\n\n" DSML_TAG("tool_calls>") "\n"

/* Call arguments and schemas as json.loads reads them, for what jansson reads
 * alike; what only Python takes (NaN, integers past 64 bits, duplicate keys,
 * \u0000) fails here, and the caller refuses it rather than write it
 * differently. */
static json_t *v4_load(fg_chat_text t, json_error_t *je)
{
    return json_loadb(t.ptr ? t.ptr : "", t.len, JSON_REJECT_DUPLICATES, je);
}

/* Scratch for the re-serialised JSON of one render. */
typedef struct v4_json {
    char *buf;
    size_t len, cap;
} v4_json;

/* v as the encoder's to_json writes it (json.dumps, ensure_ascii=False); client text. */
static void v4_dump(render_out *o, v4_json *j, const json_t *v)
{
    j->len = 0;
    fg_err e = fg_pyjson_dump(v, false, &j->buf, &j->len, &j->cap);
    if (e && !o->err)
        o->err = e;
    put(o, j->buf, j->len, false);
}

/* TOOLS_TEMPLATE of the encoder, one schema line per tool:
 * {"name": N, "description": D, "parameters": P} (no description key when it is absent). */
static fg_err v4_tools(render_out *o, v4_json *j, const fg_chat_tool *t, uint32_t n, fg_diag *diag)
{
    lit(o, "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools "
           "by writing a \"" DSML_TAG("tool_calls>") "\" block like the following:\n\n"
           DSML_TAG("tool_calls>") "\n"
           DSML_TAG("invoke name=\"$TOOL_NAME\">") "\n"
           DSML_TAG("parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE") DSML_END("parameter") "\n"
           "...\n" DSML_END("invoke") "\n"
           DSML_TAG("invoke name=\"$TOOL_NAME2\">") "\n"
           "...\n" DSML_END("invoke") "\n" DSML_END("tool_calls") "\n\n"
           "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
           "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
           "If thinking_mode is enabled (triggered by " THINK_START "), you MUST output your complete reasoning inside "
           THINK_START "..." THINK_END " BEFORE any tool calls or final response.\n\n"
           "Otherwise, output directly after " THINK_END " with tool calls or final response.\n\n"
           "### Available Tool Schemas\n\n");
    for (uint32_t i = 0; i < n && !o->err; i++) {
        json_error_t je;
        json_t *params = v4_load(t[i].parameters, &je), *fn = json_object();
        if (!params || !fn || !json_is_object(params)) {
            json_decref(params);
            json_decref(fn);
            return fn ? fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool %u: parameters are not a JSON object (%s)", i,
                                    params ? "another JSON value" : je.text)
                      : fg_diag_set(diag, FG_ERR_NOMEM, "out of memory rendering a prompt");
        }
        json_t *name = json_stringn(t[i].name.ptr, t[i].name.len);
        json_t *desc = t[i].description.ptr ? json_stringn(t[i].description.ptr, t[i].description.len) : NULL;
        if (!name || (t[i].description.ptr && !desc)) {
            json_decref(name);
            json_decref(desc);
            json_decref(params);
            json_decref(fn);
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "tool %u: a name or description that is not UTF-8", i);
        }
        /* each set takes its value, failed or not */
        int bad_set = json_object_set_new(fn, "name", name);
        if (desc)
            bad_set |= json_object_set_new(fn, "description", desc);
        bad_set |= json_object_set_new(fn, "parameters", params);
        if (i)
            lit(o, "\n");
        if (bad_set && !o->err)
            o->err = FG_ERR_NOMEM;
        v4_dump(o, j, fn);
        json_decref(fn);
    }
    lit(o, "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n");
    return FG_OK;
}

/* One call as encode_arguments_to_dsml writes it: each argument a parameter,
 * strings as they are (string="true"), other values as JSON. */
static fg_err v4_call(render_out *o, v4_json *j, const fg_chat_call *c, uint32_t i, uint32_t k, fg_diag *diag)
{
    json_error_t je;
    json_t *args = v4_load(c->arguments, &je);
    if (!args || !json_is_object(args)) {
        json_decref(args);
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "message %u: tool call %u: the arguments are not a JSON object (%s); DeepSeek-V4's "
                           "encoder writes each argument as a parameter", i, k, args ? "another JSON value" : je.text);
    }
    lit(o, DSML_TAG("invoke name=\""));
    txt(o, c->name);
    lit(o, "\">\n");
    const char *key;
    json_t *v;
    bool first = true;
    json_object_foreach(args, key, v) {
        lit(o, first ? DSML_TAG("parameter name=\"") : "\n" DSML_TAG("parameter name=\""));
        first = false;
        txt(o, (fg_chat_text){key, strlen(key)});
        lit(o, json_is_string(v) ? "\" string=\"true\">" : "\" string=\"false\">");
        if (json_is_string(v))
            txt(o, (fg_chat_text){json_string_value(v), json_string_length(v)});
        else
            v4_dump(o, j, v);
        lit(o, DSML_END("parameter"));
    }
    lit(o, "\n</" DSML "invoke"); /* its ">": the next piece's (v4_before) */
    json_decref(args);
    return FG_OK;
}

static bool v4_user_side(fg_chat_role r) { return r == FG_CHAT_USER || r == FG_CHAT_TOOL; }

/* V4's pieces, one message at a time (render_v4 and the session's items).
 * What goes between two messages depends on both, so each piece first writes
 * the end of the turn left open (v4_before), then its own bytes. */
typedef enum v4_next { V4_NEXT_SYSTEM, V4_NEXT_USER, V4_NEXT_ASSISTANT, V4_NEXT_CALL, V4_NEXT_END } v4_next;

/* think: the reply opening is "<think>" (else "</think>"). Returns what stays open.
 * A tool output and a call end before their last ">", which is written here:
 * DeepSeek's pre-tokenizer joins punctuation with the newlines after it
 * (">\n\n", ">\n"), so each piece must end where the split is certain (a
 * letter before punctuation), or the pieces' ids would not be the whole's. */
static fg_template_tail v4_before(render_out *o, fg_template_tail t, v4_next next, bool think)
{
    if (t == FG_TEMPLATE_TAIL_RESULT || t == FG_TEMPLATE_TAIL_CALLS)
        lit(o, ">");
    switch (t) {
    case FG_TEMPLATE_TAIL_USER:
    case FG_TEMPLATE_TAIL_RESULT:
        if (next == V4_NEXT_USER) { /* merge_tool_messages: one user turn */
            lit(o, "\n\n");
            return FG_TEMPLATE_TAIL_USER;
        }
        if (next == V4_NEXT_ASSISTANT || next == V4_NEXT_CALL) {
            lit(o, ASSISTANT);
            lit(o, think ? THINK_START : THINK_END);
        }
        return FG_TEMPLATE_TAIL_NONE;
    case FG_TEMPLATE_TAIL_ASSISTANT:
        if (next == V4_NEXT_CALL)
            return t; /* the calls go after the text */
        lit(o, EOS_TEXT);
        return FG_TEMPLATE_TAIL_NONE;
    case FG_TEMPLATE_TAIL_CALLS:
        if (next == V4_NEXT_CALL) {
            lit(o, "\n");
            return t;
        }
        lit(o, "\n" DSML_END("tool_calls") EOS_TEXT);
        return FG_TEMPLATE_TAIL_NONE;
    case FG_TEMPLATE_TAIL_NONE:
        break;
    }
    return FG_TEMPLATE_TAIL_NONE;
}

/* A user message or a tool output (tool: in <tool_result>). */
static void v4_user_part(render_out *o, fg_template_tail *t, bool tool, const fg_chat_text *parts, uint32_t n)
{
    *t = v4_before(o, *t, V4_NEXT_USER, false);
    if (*t != FG_TEMPLATE_TAIL_USER)
        lit(o, USER);
    if (tool)
        lit(o, "<tool_result>");
    for (uint32_t k = 0; k < n; k++)
        txt(o, parts[k]);
    if (tool)
        lit(o, "</tool_result"); /* its ">": the next piece's (v4_before) */
    *t = tool ? FG_TEMPLATE_TAIL_RESULT : FG_TEMPLATE_TAIL_USER;
}

/* An assistant message's reasoning (reasoning non-NULL: written, with its
 * "</think>") and text; its calls and end follow. think: as v4_before's. */
static void v4_assistant_text(render_out *o, fg_template_tail *t, bool think, const fg_chat_text *reasoning,
                              const fg_chat_text *parts, uint32_t n)
{
    *t = v4_before(o, *t, V4_NEXT_ASSISTANT, think);
    if (reasoning) {
        txt(o, *reasoning);
        lit(o, THINK_END);
    }
    for (uint32_t k = 0; k < n; k++)
        txt(o, parts[k]);
    *t = FG_TEMPLATE_TAIL_ASSISTANT;
}

/* One call of an assistant turn: the block opens at its first. */
static fg_err v4_call_piece(render_out *o, fg_template_tail *t, v4_json *j, const fg_chat_call *c, uint32_t i,
                            uint32_t k, fg_diag *diag)
{
    fg_template_tail was = v4_before(o, *t, V4_NEXT_CALL, false);
    if (was != FG_TEMPLATE_TAIL_CALLS)
        lit(o, V4_CALLS_OPEN);
    *t = FG_TEMPLATE_TAIL_CALLS;
    return v4_call(o, j, c, i, k, diag);
}

/* encode_messages(messages, thinking_mode, drop_thinking=True) with the tools
 * on the first message (a system message, or an empty one put at the head).
 * A run of user and tool messages is one user turn (merge_tool_messages), its
 * parts joined by "\n\n", each output in <tool_result>; results are kept in
 * the order given (the encoder sorts them by call id, which we do not carry).
 * Declared tools keep every turn's reasoning (the encoder turns drop_thinking
 * off); otherwise thinking mode writes it only after the last user turn. */
static fg_err render_v4(const fg_chat_conv *conv, const fg_tokenizer_t *tok, render_out *o, fg_diag *diag)
{
    const fg_chat_msg *m = conv->msgs;
    const uint32_t n = conv->n_msgs;
    const bool ends_user = n && v4_user_side(m[n - 1].role);
    if (ends_user != conv->add_generation_prompt)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           ends_user ? "DeepSeek-V4's encoder always opens the reply after a user turn (set "
                                       "add_generation_prompt)"
                                     : "DeepSeek-V4's encoder opens a reply only after a user or tool message");
    const bool drop = conv->n_tools == 0;
    uint32_t last_user = 0; /* the first message of the last user turn; meaningful when it exists */
    for (uint32_t i = 0; i < n; i++)
        if (v4_user_side(m[i].role) && (i == 0 || !v4_user_side(m[i - 1].role)))
            last_user = i;
    int32_t bos = fg_tokenizer_bos(tok);
    if (bos >= 0) {
        const char *b = fg_tokenizer_token_text(tok, bos);
        put(o, b, strlen(b), true);
    }
    v4_json j = {0};
    fg_err e = FG_OK;
    if (conv->n_tools && (n == 0 || m[0].role != FG_CHAT_SYSTEM)) {
        lit(o, "\n\n");
        e = v4_tools(o, &j, conv->tools, conv->n_tools, diag);
    }
    fg_template_tail t = FG_TEMPLATE_TAIL_NONE;
    for (uint32_t i = 0; i < n && !e; i++) {
        /* thinking kept: every turn with tools, else only after the last user turn */
        const bool keep = conv->thinking && (!drop || i > last_user);
        switch (m[i].role) {
        case FG_CHAT_SYSTEM:
            t = v4_before(o, t, V4_NEXT_SYSTEM, false);
            txt(o, m[i].content);
            if (i == 0 && conv->n_tools) {
                lit(o, "\n\n");
                e = v4_tools(o, &j, conv->tools, conv->n_tools, diag);
            }
            break;
        case FG_CHAT_ASSISTANT:
            v4_assistant_text(o, &t, keep, keep ? &m[i].reasoning : NULL, &m[i].content, 1);
            for (uint32_t k = 0; k < m[i].n_calls && !e; k++)
                e = v4_call_piece(o, &t, &j, &m[i].calls[k], i, k, diag);
            t = v4_before(o, t, V4_NEXT_END, false); /* a message is one turn */
            break;
        case FG_CHAT_USER:
        case FG_CHAT_TOOL:
            v4_user_part(o, &t, m[i].role == FG_CHAT_TOOL, &m[i].content, 1);
            break;
        }
    }
    /* the reply opening after the last user turn */
    if (!e && (t == FG_TEMPLATE_TAIL_USER || t == FG_TEMPLATE_TAIL_RESULT))
        v4_before(o, t, V4_NEXT_ASSISTANT, conv->thinking);
    free(j.buf);
    return e;
}

fg_err fg_chat_render(fg_chat_family family, const fg_chat_conv *conv, const fg_tokenizer_t *tok,
                      fg_chat_prompt *p, fg_diag *diag)
{
    if (!conv || !tok || !p || (conv->n_msgs && !conv->msgs))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "fg_chat_render: NULL argument");
    p->len = 0;
    p->n_spans = 0;
    if (conv->n_msgs > FG_CHAT_MAX_MSGS)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "%u messages (at most %u)", conv->n_msgs, FG_CHAT_MAX_MSGS);
    fg_err e;
    for (uint32_t i = 0; i < conv->n_msgs; i++)
        if ((e = check_msg(&conv->msgs[i], i, diag)))
            return e;
    if ((e = check_tools(conv, diag)))
        return e;
    render_out o = {p, FG_OK};
    switch (family) {
    case FG_CHAT_DEEPSEEK_V3:
        e = render_v3(conv, tok, &o, diag);
        break;
    case FG_CHAT_DEEPSEEK_V4:
        e = render_v4(conv, tok, &o, diag);
        break;
    case FG_CHAT_DEEPSEEK_R1:
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "the %s prompt format is not rendered yet (docs/protocol.md "
                           "\"Prompt formats\")", fg_chat_family_name(family));
    default:
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "unknown chat family %d", (int)family);
    }
    if (!e && o.err)
        e = fg_diag_set(diag, o.err, o.err == FG_ERR_NOMEM ? "out of memory rendering a prompt"
                                                           : "the prompt is longer than %u bytes", FG_CHAT_MAX_PROMPT_BYTES);
    if (e) {
        p->len = 0;
        p->n_spans = 0;
    }
    return e;
}

/* V3's call opening, as the template writes a first call after <｜Assistant｜>. */
#define V3_CALL_OPEN TOOL_CALLS_BEGIN TOOL_CALL_BEGIN "function" TOOL_SEP

fg_err fg_chat_call_prefix(fg_chat_family family, const char *name, size_t len, fg_chat_prompt *p, fg_diag *diag)
{
    if (!p || (name && (len == 0 || len > 64)))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "fg_chat_call_prefix: no prompt, or a name of %zu bytes", len);
    if (family != FG_CHAT_DEEPSEEK_V3 && family != FG_CHAT_DEEPSEEK_V4)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "the %s prompt format is not rendered yet",
                           fg_chat_family_name(family));
    size_t len0 = p->len, n_spans0 = p->n_spans, end0 = p->n_spans ? p->spans[p->n_spans - 1].end : 0;
    render_out o = {p, FG_OK};
    if (family == FG_CHAT_DEEPSEEK_V4) {
        /* as render_v4 writes an assistant turn with no text and calls: the block, the first invoke */
        lit(&o, V4_CALLS_OPEN);
        if (name) {
            lit(&o, DSML_TAG("invoke name=\""));
            txt(&o, (fg_chat_text){name, len});
            lit(&o, "\">\n");
        }
    } else {
        lit(&o, V3_CALL_OPEN);
        if (name) {
            txt(&o, (fg_chat_text){name, len});
            lit(&o, "\n```json\n");
        }
    }
    if (o.err) {
        p->len = len0;
        p->n_spans = n_spans0;
        if (n_spans0)
            p->spans[n_spans0 - 1].end = end0;
        if (p->text)
            p->text[len0] = '\0';
        return fg_diag_set(diag, o.err, "out of memory for a call prefix");
    }
    return FG_OK;
}

fg_err fg_chat_encode(const fg_tokenizer_t *tok, const fg_chat_prompt *p, fg_tokens *out)
{
    if (!tok || !p || !out)
        return FG_ERR_INVALID_ARG;
    if (p->len == 0)
        return FG_OK;
    /* A byte-level BPE never yields more tokens than bytes. */
    fg_err e = fg_tokens_reserve(out, out->n + p->len);
    if (e)
        return e;
    size_t got = 0;
    e = fg_tokenizer_encode_spans(tok, p->text, p->len, p->spans, p->n_spans, out->v + out->n, out->cap - out->n, &got);
    if (e == FG_OK)
        out->n += got;
    return e;
}

/* ---------------------------------------------------------------- v1 items */

/* Encodes text and appends it; special tokens are recognised only in markers. */
static fg_err push_text(const fg_tokenizer_t *tok, const char *s, size_t len, int special, fg_tokens *out)
{
    if (len == 0)
        return FG_OK;
    /* A byte-level BPE never yields more tokens than bytes. */
    fg_err e = fg_tokens_reserve(out, out->n + len);
    if (e)
        return e;
    size_t got = 0;
    e = fg_tokenizer_encode(tok, s, len, false, special, out->v + out->n, out->cap - out->n, &got);
    if (e == FG_OK)
        out->n += got;
    return e;
}

static fg_err marker(const fg_tokenizer_t *tok, const char *m, fg_tokens *out)
{
    return push_text(tok, m, strlen(m), 1, out);
}

fg_err fg_template_head(const fg_tokenizer_t *tok, const char *instructions, size_t len, fg_tokens *out)
{
    int32_t bos = fg_tokenizer_bos(tok);
    if (bos >= 0 && fg_tokenizer_add_bos(tok)) {
        fg_err e = fg_tokens_push(out, &bos, 1);
        if (e)
            return e;
    }
    return push_text(tok, instructions, len, 0, out);
}

static bool is_v4(const fg_tokenizer_t *tok)
{
    fg_chat_family f;
    fg_diag d;
    return fg_chat_family_detect(NULL, 0, tok, &f, &d) == FG_OK && f == FG_CHAT_DEEPSEEK_V4;
}

/* V4's item: render_v4's piece for the message it is (a function_call: an
 * assistant message's call), after what the items before left open. */
static fg_err v4_item(const fg_tokenizer_t *tok, fg_template_tail *tail, const fg_proto_item *item, fg_tokens *out)
{
    fg_chat_prompt p = {0};
    render_out o = {&p, FG_OK};
    v4_json j = {0};
    fg_diag d;
    fg_template_tail t = *tail;
    fg_chat_text parts[FG_PROTO_MAX_PARTS];
    uint32_t n = 0;
    for (uint32_t i = 0; item->type == FG_PROTO_ITEM_MESSAGE && i < item->n_content && i < FG_PROTO_MAX_PARTS; i++)
        parts[n++] = (fg_chat_text){item->content[i].text.ptr, item->content[i].text.len};
    fg_err e = FG_OK;
    switch (item->type) {
    case FG_PROTO_ITEM_MESSAGE:
        if (item->role == FG_PROTO_ROLE_USER) {
            v4_user_part(&o, &t, false, parts, n);
        } else if (item->role == FG_PROTO_ROLE_ASSISTANT) {
            v4_assistant_text(&o, &t, false, NULL, parts, n);
        } else { /* system (and developer) messages: their text, as render_v4 writes a system message */
            t = v4_before(&o, t, V4_NEXT_SYSTEM, false);
            for (uint32_t k = 0; k < n; k++)
                txt(&o, parts[k]);
        }
        break;
    case FG_PROTO_ITEM_FUNCTION_CALL: {
        const fg_chat_call c = {{item->name.ptr, item->name.len}, {item->arguments.ptr, item->arguments.len}};
        e = v4_call_piece(&o, &t, &j, &c, 0, 0, &d);
        break;
    }
    case FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT: {
        const fg_chat_text out_text = {item->output.ptr, item->output.len};
        v4_user_part(&o, &t, true, &out_text, 1);
        break;
    }
    default:
        e = FG_ERR_INVALID_ARG;
    }
    if (e == FG_OK)
        e = o.err;
    if (e == FG_OK)
        e = fg_chat_encode(tok, &p, out);
    if (e == FG_OK)
        *tail = fg_template_tail_after(item); /* what the piece left open (t) */
    free(j.buf);
    fg_chat_prompt_free(&p);
    return e;
}

/* V4's end of the open turn (next: what follows), then, for a reply, its opening. */
static fg_err v4_end(const fg_tokenizer_t *tok, fg_template_tail *tail, bool reply, fg_tokens *out)
{
    fg_chat_prompt p = {0};
    render_out o = {&p, FG_OK};
    fg_template_tail t = v4_before(&o, *tail, V4_NEXT_END, false);
    if (reply) { /* after a user turn as render_v4 writes it; elsewhere (the encoder opens no reply there) the same */
        lit(&o, ASSISTANT THINK_END);
        t = FG_TEMPLATE_TAIL_NONE;
    } else if (*tail == FG_TEMPLATE_TAIL_USER || *tail == FG_TEMPLATE_TAIL_RESULT) {
        t = FG_TEMPLATE_TAIL_USER; /* a user turn stays open (its ">" written) */
    }
    fg_err e = o.err ? o.err : fg_chat_encode(tok, &p, out);
    if (e == FG_OK)
        *tail = t;
    fg_chat_prompt_free(&p);
    return e;
}

fg_template_tail fg_template_tail_after(const fg_proto_item *item)
{
    switch (item ? item->type : FG_PROTO_ITEM_MESSAGE) {
    case FG_PROTO_ITEM_MESSAGE:
        if (!item)
            return FG_TEMPLATE_TAIL_NONE;
        return item->role == FG_PROTO_ROLE_USER        ? FG_TEMPLATE_TAIL_USER
               : item->role == FG_PROTO_ROLE_ASSISTANT ? FG_TEMPLATE_TAIL_ASSISTANT
                                                       : FG_TEMPLATE_TAIL_NONE;
    case FG_PROTO_ITEM_FUNCTION_CALL:
        return FG_TEMPLATE_TAIL_CALLS;
    case FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT:
        return FG_TEMPLATE_TAIL_RESULT;
    }
    return FG_TEMPLATE_TAIL_NONE;
}

fg_err fg_template_close(const fg_tokenizer_t *tok, fg_template_tail *tail, fg_tokens *out)
{
    if (!tail || !is_v4(tok))
        return FG_OK;
    return v4_end(tok, tail, false, out);
}

fg_err fg_template_item(const fg_tokenizer_t *tok, fg_template_tail *tail, const fg_proto_item *item, fg_tokens *out)
{
    if (is_v4(tok)) {
        fg_template_tail none = FG_TEMPLATE_TAIL_NONE;
        return v4_item(tok, tail ? tail : &none, item, out);
    }
    fg_err e = FG_OK;
    switch (item->type) {
    case FG_PROTO_ITEM_MESSAGE:
        if (item->role == FG_PROTO_ROLE_USER)
            e = marker(tok, USER, out);
        else if (item->role == FG_PROTO_ROLE_ASSISTANT)
            e = marker(tok, ASSISTANT, out);
        /* system messages join the conversation as plain text, like the head */
        for (uint32_t i = 0; i < item->n_content && !e; i++)
            e = push_text(tok, item->content[i].text.ptr, item->content[i].text.len, 0, out);
        if (!e && item->role == FG_PROTO_ROLE_ASSISTANT) {
            int32_t eos = fg_tokenizer_eos(tok);
            if (eos >= 0)
                e = fg_tokens_push(out, &eos, 1);
        }
        return e;
    case FG_PROTO_ITEM_FUNCTION_CALL: {
        /* V3's call form, its text between the markers one run as fg_chat_render encodes it: a call
         * sent back renders as the model wrote it after a forced call's opening (fg_chat_call_prefix) */
        static const char fence[] = "\n```json\n", close[] = "\n```";
        const size_t n = item->name.len + sizeof fence - 1 + item->arguments.len + sizeof close - 1;
        char *run = malloc(n);
        if (!run)
            return FG_ERR_NOMEM;
        char *w = run;
        memcpy(w, item->name.ptr, item->name.len);
        w += item->name.len;
        memcpy(w, fence, sizeof fence - 1);
        w += sizeof fence - 1;
        if (item->arguments.len)
            memcpy(w, item->arguments.ptr, item->arguments.len);
        w += item->arguments.len;
        memcpy(w, close, sizeof close - 1);
        e = marker(tok, ASSISTANT V3_CALL_OPEN, out);
        if (!e)
            e = push_text(tok, run, n, 0, out);
        free(run);
        if (!e)
            e = marker(tok, TOOL_CALL_END TOOL_CALLS_END, out);
        int32_t eos = fg_tokenizer_eos(tok);
        if (!e && eos >= 0)
            e = fg_tokens_push(out, &eos, 1);
        return e;
    }
    case FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT:
        e = marker(tok, TOOL_OUT_BEGIN, out);
        if (!e)
            e = push_text(tok, item->output.ptr, item->output.len, 0, out);
        if (!e)
            e = marker(tok, TOOL_OUT_END, out);
        return e;
    }
    return FG_ERR_INVALID_ARG;
}

fg_err fg_template_reply(const fg_tokenizer_t *tok, fg_template_tail *tail, fg_tokens *out)
{
    if (is_v4(tok)) {
        fg_template_tail none = FG_TEMPLATE_TAIL_NONE;
        return v4_end(tok, tail ? tail : &none, true, out);
    }
    return marker(tok, ASSISTANT, out);
}
