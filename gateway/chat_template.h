/* chat_template.h: conversations to prompts, in the model family's own format.
 *
 * Owns the prompt formats (docs/protocol.md "Prompt formats"): which family a
 * model's GGUF asks for, the text its template makes of a conversation, and
 * the tokens of that text. Two layers:
 *
 *  - fg_chat_*: a whole conversation (messages, tool calls, tool outputs)
 *    rendered byte for byte as the family's reference renders it (DeepSeek-V3:
 *    the Jinja chat_template of its tokenizer_config.json; tests/chat checks
 *    every case against @huggingface/jinja running that text; DeepSeek-V4:
 *    encode_messages of DeepSeek's encoding_dsv4.py, checked against vectors
 *    that script wrote, tests/chat/v4_vectors.json). The renderer
 *    also records which bytes the template itself wrote; fg_chat_encode
 *    matches special tokens (BOS, <｜User｜>, the tool markers) only there, so
 *    a marker typed by a user stays plain text while the template's markers
 *    become single ids, as the reference tokenizer makes them.
 *  - fg_template_*: the per-item form the session layer appends to a live
 *    session, built from the same pieces as fg_chat_render.
 *
 * Memory: fg_chat_render writes into a caller-owned fg_chat_prompt and grows
 * it only when a prompt is longer than any before it (reuse one per session
 * or thread); nothing else allocates except the token vector of
 * fg_chat_encode and V4's scratch for re-serialised JSON. No global state; pure functions over an immutable
 * tokenizer, safe from any thread.
 */
#ifndef FG_CHAT_TEMPLATE_H
#define FG_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/base/tokens.h"
#include "config/fg_error.h"
#include "engine/tokenizer/tokenizer.h"
#include "gateway/protocol.h"

/* ---- families ---- */

typedef enum fg_chat_family {
    FG_CHAT_DEEPSEEK_V3 = 1, /* DeepSeek-V3's chat_template (also the vocabulary default) */
    FG_CHAT_DEEPSEEK_R1,     /* a DeepSeek template that strips <think> (R1, V3.1): detected, not rendered yet */
    FG_CHAT_DEEPSEEK_V4,     /* DeepSeek-V4's encoding_dsv4.py (DSML tools, thinking mode) */
} fg_chat_family;

/* The GGUF key the template text comes from. */
#define FG_CHAT_TEMPLATE_KEY "tokenizer.chat_template"

/* Picks the family: from the template text when there is one (tmpl NULL: the
 * GGUF has no tokenizer.chat_template), else from the vocabulary's markers.
 * Errors: FG_ERR_UNSUPPORTED (a template or vocabulary of no DeepSeek family
 * known here; the message says what was found), FG_ERR_INVALID_ARG. */
fg_err fg_chat_family_detect(const char *tmpl, size_t len, const fg_tokenizer_t *tok, fg_chat_family *out,
                             fg_diag *diag);
/* "deepseek-v3", "deepseek-r1", "deepseek-v4", or "?" */
const char *fg_chat_family_name(fg_chat_family f);

/* ---- conversations ---- */

/* Bytes, not NUL-terminated. ptr NULL means absent (len must be 0), which
 * differs from present and empty where a template tells them apart. */
typedef struct fg_chat_text {
    const char *ptr;
    size_t len;
} fg_chat_text;

typedef enum fg_chat_role {
    FG_CHAT_SYSTEM = 1,
    FG_CHAT_USER,
    FG_CHAT_ASSISTANT,
    FG_CHAT_TOOL, /* a tool's output, answering the calls before it */
} fg_chat_role;

typedef struct fg_chat_call {
    fg_chat_text name;      /* the function, non-empty */
    fg_chat_text arguments; /* its arguments as JSON text, written as given */
} fg_chat_call;

typedef struct fg_chat_msg {
    fg_chat_role role;
    fg_chat_text content;     /* absent: an assistant turn that only calls tools */
    const fg_chat_call *calls; /* assistant only: [n_calls] */
    uint32_t n_calls;
    /* assistant only: the turn's reasoning (OpenAI's reasoning_content),
     * absent when it has none. DeepSeek-V4 writes it before the answer in
     * thinking mode, for the turns its encoder keeps; DeepSeek-V3 has no
     * place for it (refused). */
    fg_chat_text reasoning;
} fg_chat_msg;

/* A function the model may call (gateway/tool_decl.h makes them from a request). */
typedef struct fg_chat_tool {
    fg_chat_text name;        /* non-empty */
    fg_chat_text description; /* absent or empty: written empty */
    fg_chat_text parameters;  /* its JSON schema as text, written as given */
} fg_chat_tool;

typedef struct fg_chat_conv {
    const fg_chat_msg *msgs; /* [n_msgs] */
    uint32_t n_msgs;
    bool add_generation_prompt; /* end with what starts the model's reply */
    /* Declared tools, written after the system prompt in the family's tool
     * description (DeepSeek-V3: docs/protocol.md "Tool declarations");
     * none: the prompt is exactly the template's. */
    const fg_chat_tool *tools; /* [n_tools] */
    uint32_t n_tools;
    /* DeepSeek-V4's thinking mode ("thinking", else "chat"): the reply opens
     * with <think> and the kept turns' reasoning is written. DeepSeek-V3 has
     * no thinking mode (refused). */
    bool thinking;
} fg_chat_conv;

/* Limits a conversation must keep (FG_ERR_INVALID_ARG past them). */
#define FG_CHAT_MAX_MSGS 65536u
#define FG_CHAT_MAX_CALLS 1024u          /* per message */
#define FG_CHAT_MAX_TOOLS 1024u          /* declared tools */
#define FG_CHAT_MAX_PROMPT_BYTES (1u << 30) /* a rendered prompt */

/* A byte range of the prompt that the template wrote (not message text). */
typedef struct fg_chat_prompt {
    char *text;         /* [cap], text[len] = '\0' after a render */
    size_t len, cap;
    fg_tok_span *spans; /* [cap_spans], sorted, non-adjacent: the template's bytes */
    size_t n_spans, cap_spans;
} fg_chat_prompt;

/* Releases the buffers and leaves an empty prompt (a zeroed one is empty too). */
void fg_chat_prompt_free(fg_chat_prompt *p);

/* Renders conv in family's format into out (replacing what was there). tok
 * gives the BOS text (none when the vocabulary has no BOS).
 * Errors: FG_ERR_INVALID_ARG with the message index and what is wrong (a bad
 * role, an absent text where one is required, a call outside an assistant
 * message, limits, and what the family's format cannot express: for V3 an
 * assistant message with both text and calls, reasoning, thinking mode; for
 * V4 call arguments that are not a JSON object, a generation prompt that
 * does not follow a user turn or is missing after one);
 * FG_ERR_UNSUPPORTED for a family that is detected but not rendered yet;
 * FG_ERR_NOMEM. out is left empty on error. */
fg_err fg_chat_render(fg_chat_family family, const fg_chat_conv *conv, const fg_tokenizer_t *tok,
                      fg_chat_prompt *out, fg_diag *diag);

/* Appends to a rendered prompt (after its generation prompt) the start of a
 * tool call, so that the model's reply continues a call rather than choosing
 * whether to make one: tool_choice "required" (name NULL: up to the name) or
 * a named function (name given: up to the opening of its arguments). The
 * reply's parser must be fed the appended bytes (p->text from the old
 * p->len) before the reply. DeepSeek-V4: "\n\n<｜DSML｜tool_calls>\n", then
 * for a name "<｜DSML｜invoke name=\"NAME\">\n", as render_v4 writes an
 * assistant turn with no text that makes the call. Errors:
 * FG_ERR_INVALID_ARG (a name that is empty or longer than 64 bytes),
 * FG_ERR_UNSUPPORTED (a family whose calls are not parsed yet: R1),
 * FG_ERR_NOMEM; p is unchanged on error. */
fg_err fg_chat_call_prefix(fg_chat_family family, const char *name, size_t len, fg_chat_prompt *p, fg_diag *diag);

/* Appends the tokens of a rendered prompt: special tokens only inside its
 * spans (fg_tokenizer_encode_spans). Errors: FG_ERR_NOMEM, FG_ERR_INVALID_ARG. */
fg_err fg_chat_encode(const fg_tokenizer_t *tok, const fg_chat_prompt *p, fg_tokens *out);

/* ---- the session layer's per-item form ----
 *   BOS instructions  <｜User｜>text  <｜Assistant｜>text EOS  ...  <｜Assistant｜>(generation)
 * DeepSeek-V3: each item its own piece; a tool call in V3's call form (as the
 * model writes it, and as it continues fg_chat_call_prefix), its output in
 * the tool-output markers. DeepSeek-V4: render_v4's pieces, one message at a
 * time, so head + items + reply is fg_chat_render's prompt of the same
 * conversation (non-thinking mode; each item one message, a function_call
 * an assistant message's call). What V4 writes between two messages depends
 * on both, so the end of an item's turn is written by the next item (or the
 * reply): the tail says what the items so far leave open (docs/protocol.md
 * "Prompt formats"). Markers are encoded with special tokens recognised,
 * user-supplied text never is. */

/* What the items so far leave open (DeepSeek-V4; V3's items leave nothing
 * open and ignore it). A tool output and a call end before their last ">",
 * which the next item or the reply writes, so that every item ends where
 * DeepSeek's pre-tokenizer must split (docs/protocol.md "Prompt formats"). */
typedef enum fg_template_tail {
    FG_TEMPLATE_TAIL_NONE = 0,  /* nothing: the head, a system message, a closed (generated) turn */
    FG_TEMPLATE_TAIL_USER,      /* a user turn ending in a user message, without its reply opening */
    FG_TEMPLATE_TAIL_ASSISTANT, /* an assistant message without its end (calls or EOS may follow) */
    FG_TEMPLATE_TAIL_CALLS,     /* an assistant's call block, not closed: "...</｜DSML｜invoke" */
    FG_TEMPLATE_TAIL_RESULT,    /* a user turn ending in a tool output: "...</tool_result" */
} fg_template_tail;
#define FG_TEMPLATE_TAIL_MAX FG_TEMPLATE_TAIL_RESULT

/* What item leaves open after it, as fg_template_item sets *tail (the one
 * rule for every caller): a user message USER, a tool output RESULT, an
 * assistant message ASSISTANT, a call CALLS, a system message NONE. A
 * generated reply is no item: it closes its own turn (NONE, fg_template_reply). */
fg_template_tail fg_template_tail_after(const fg_proto_item *item);

/* Appends the session head: BOS (if the vocabulary has one) and the instructions. */
fg_err fg_template_head(const fg_tokenizer_t *tok, const char *instructions, size_t len, fg_tokens *out);
/* Appends one conversation item after the items that left *tail (updated to
 * fg_template_tail_after(item); NULL: nothing open, not updated). Errors: FG_ERR_INVALID_ARG (V4: call
 * arguments that are not a JSON object), FG_ERR_NOMEM; *tail is unchanged on error. */
fg_err fg_template_item(const fg_tokenizer_t *tok, fg_template_tail *tail, const fg_proto_item *item, fg_tokens *out);
/* Appends what ends the open turn and the assistant marker that starts a
 * generated reply (V4: "<｜Assistant｜></think>"); *tail becomes NONE, as the
 * generated reply closes its own turn. tail NULL: nothing open. */
fg_err fg_template_reply(const fg_tokenizer_t *tok, fg_template_tail *tail, fg_tokens *out);
/* Appends the end of an open assistant turn (V4: its call block's end, EOS;
 * a tool output's ">"; nothing for another tail, or V3) and sets *tail to
 * NONE, or USER after a user turn (which stays open). */
fg_err fg_template_close(const fg_tokenizer_t *tok, fg_template_tail *tail, fg_tokens *out);

#endif
