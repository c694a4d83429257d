/* chat_template.c: items to tokens (see chat_template.h). */
#include "gateway/chat_template.h"

#include <string.h>

#define USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define TOOL_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define TOOL_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define TOOL_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"
#define TOOL_OUT_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81output\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define TOOL_OUT_END "<\xef\xbd\x9ctool\xe2\x96\x81output\xe2\x96\x81" "end\xef\xbd\x9c>"

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

fg_err fg_template_item(const fg_tokenizer_t *tok, const fg_proto_item *item, fg_tokens *out)
{
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
    case FG_PROTO_ITEM_FUNCTION_CALL:
        e = marker(tok, ASSISTANT TOOL_CALL_BEGIN, out);
        if (!e)
            e = push_text(tok, item->name.ptr, item->name.len, 0, out);
        if (!e)
            e = marker(tok, TOOL_SEP, out);
        if (!e)
            e = push_text(tok, item->arguments.ptr, item->arguments.len, 0, out);
        if (!e)
            e = marker(tok, TOOL_CALL_END, out);
        return e;
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

fg_err fg_template_reply(const fg_tokenizer_t *tok, fg_tokens *out)
{
    return marker(tok, ASSISTANT, out);
}
