/* protocol_write.c: server events as JSON text, written by hand.
 *
 * Why not jansson's json_dumps: it allocates a tree per event (the delta is
 * written once per token batch for every streaming session) and it refuses
 * strings that are not valid UTF-8, while model output is raw bytes. Writing
 * by hand into one reused buffer costs a memcpy for the common ASCII run and
 * makes every output valid JSON and valid UTF-8 whatever the bytes were:
 * quote, backslash and C0 controls are escaped, ill-formed UTF-8 becomes
 * U+FFFD (one per maximal subpart, see protocol_utf8.c).
 *
 * Field order puts "type" first so a client can dispatch before reading on.
 * Numbers: integers by hand; doubles with the shortest "%.*g" that reads back
 * exactly, never NaN/Inf (written as null).
 */
#include "gateway/protocol.h"
#include "gateway/protocol_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the buffer ---- */

void fg_proto_buf_init(fg_proto_buf *b, size_t pre)
{
    b->data = NULL;
    b->pre = pre;
    b->len = 0;
    b->cap = 0;
}

void fg_proto_buf_free(fg_proto_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

const char *fg_proto_buf_text(const fg_proto_buf *b)
{
    return b->data ? b->data + b->pre : "";
}

/* Makes room for `more` payload bytes plus the trailing NUL. Grows by doubling
 * so a buffer reused across events stops allocating once it fits the largest. */
static fg_err buf_reserve(fg_proto_buf *b, size_t more)
{
    if (more > SIZE_MAX / 2 - b->len - b->pre - 1)
        return FG_ERR_NOMEM;
    const size_t need = b->len + more;
    if (b->data && need <= b->cap)
        return FG_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *d = realloc(b->data, b->pre + cap + 1);
    if (!d)
        return FG_ERR_NOMEM;
    b->data = d;
    b->cap = cap;
    d[b->pre + cap] = '\0'; /* the payload reads as a string even after a failed write */
    return FG_OK;
}

/* Unchecked appends: callers reserve first. */
static inline void put_raw(fg_proto_buf *b, const char *s, size_t n)
{
    memcpy(b->data + b->pre + b->len, s, n);
    b->len += n;
}

static inline void put_ch(fg_proto_buf *b, char c)
{
    b->data[b->pre + b->len++] = c;
}

static fg_err put_lit(fg_proto_buf *b, const char *s)
{
    const size_t n = strlen(s);
    fg_err e = buf_reserve(b, n);
    if (e)
        return e;
    put_raw(b, s, n);
    return FG_OK;
}

static fg_err put_u64(fg_proto_buf *b, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    fg_err e = buf_reserve(b, n);
    if (e)
        return e;
    while (n)
        put_ch(b, tmp[--n]);
    return FG_OK;
}

static fg_err put_double(fg_proto_buf *b, double v)
{
    if (!(v == v) || v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
        return put_lit(b, "null"); /* JSON has no NaN or Inf */
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    /* A process that called setlocale() may print a decimal comma; JSON needs '.'. */
    for (char *p = tmp; *p; p++)
        if (*p == ',')
            *p = '.';
    return put_lit(b, tmp);
}

static const char hex[] = "0123456789abcdef";

/* 1 for bytes that leave the plain-copy run: C0 controls, '"' (0x22), '\\'
 * (0x5c) and every non-ASCII byte (those go through the UTF-8 decoder). */
#define ONES16 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1
#define ZEROS16 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
static const unsigned char special[256] = {
    ONES16, ONES16,                                 /* 0x00..0x1f */
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x20..0x2f */
    ZEROS16, ZEROS16,                               /* 0x30..0x4f */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* 0x50..0x5f */
    ZEROS16, ZEROS16,                               /* 0x60..0x7f */
    ONES16, ONES16, ONES16, ONES16, ONES16, ONES16, ONES16, ONES16, /* 0x80..0xff */
};

fg_err fg_proto_buf_put_json_string(fg_proto_buf *b, const char *s, size_t n)
{
    /* Worst case 6 output bytes per input byte (\u00XX); U+FFFD is 3 per byte. */
    if (n > (SIZE_MAX - 2) / 6)
        return FG_ERR_NOMEM;
    fg_err e = buf_reserve(b, 6 * n + 2);
    if (e)
        return e;
    const unsigned char *p = (const unsigned char *)s;
    put_ch(b, '"');
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && !special[p[run]])
            run++;
        if (run > i) {
            put_raw(b, (const char *)p + i, run - i);
            i = run;
            if (i >= n)
                break;
        }
        const unsigned char c = p[i];
        if (c >= 0x80) {
            const int r = fg_proto_utf8_next(p + i, n - i);
            if (r > 0) {
                put_raw(b, (const char *)p + i, (size_t)r);
                i += (size_t)r;
            } else {
                put_raw(b, "\xEF\xBF\xBD", 3);
                /* r == 0: the rest is one incomplete sequence, one subpart */
                i += r < 0 ? (size_t)-r : n - i;
            }
            continue;
        }
        put_ch(b, '\\');
        switch (c) {
        case '"':
            put_ch(b, '"');
            break;
        case '\\':
            put_ch(b, '\\');
            break;
        case '\n':
            put_ch(b, 'n');
            break;
        case '\r':
            put_ch(b, 'r');
            break;
        case '\t':
            put_ch(b, 't');
            break;
        case '\b':
            put_ch(b, 'b');
            break;
        case '\f':
            put_ch(b, 'f');
            break;
        default:
            put_raw(b, "u00", 3);
            put_ch(b, hex[c >> 4]);
            put_ch(b, hex[c & 15]);
            break;
        }
        i++;
    }
    put_ch(b, '"');
    return FG_OK;
}

static fg_err put_cstr(fg_proto_buf *b, const char *s)
{
    return s ? fg_proto_buf_put_json_string(b, s, strlen(s)) : put_lit(b, "null");
}

static fg_err put_str(fg_proto_buf *b, fg_proto_str s)
{
    return fg_proto_buf_put_json_string(b, s.ptr ? s.ptr : "", s.ptr ? s.len : 0);
}

/* Ends the payload with a NUL (room is always reserved for it). */
static fg_err finish(fg_proto_buf *b)
{
    b->data[b->pre + b->len] = '\0';
    return FG_OK;
}

/* Starts an event: `{"type":"<type>","event_id":"evt_<evt>","sequence_number":<seq>`. */
static fg_err begin(fg_proto_buf *b, const char *type, uint64_t seq, uint64_t evt)
{
    b->len = 0;
    fg_err e;
    if ((e = put_lit(b, "{\"type\":\"")) || (e = put_lit(b, type)) || (e = put_lit(b, "\",\"event_id\":\"evt_")) ||
        (e = put_u64(b, evt)) || (e = put_lit(b, "\",\"sequence_number\":")) || (e = put_u64(b, seq)))
        return e;
    return FG_OK;
}

fg_err fg_proto_buf_rename_type(fg_proto_buf *b, const char *to)
{
    static const char head[] = "{\"type\":\"";
    const size_t h = sizeof head - 1;
    if (!b->data || b->len < h || memcmp(b->data + b->pre, head, h) != 0)
        return FG_ERR_INVALID_ARG;
    const char *name = b->data + b->pre + h;
    const char *end = memchr(name, '"', b->len - h);
    if (!end)
        return FG_ERR_INVALID_ARG;
    const size_t old = (size_t)(end - name), n = strlen(to);
    if (n > old) {
        fg_err e = buf_reserve(b, n - old);
        if (e)
            return e;
    }
    char *p = b->data + b->pre + h; /* the buffer may have moved */
    memmove(p + n, p + old, b->len - h - old + 1); /* the rest and its NUL */
    memcpy(p, to, n);
    b->len = b->len - old + n;
    return FG_OK;
}

/* ---- names on the wire ---- */

static const char *item_type_name(fg_proto_item_type t)
{
    switch (t) {
    case FG_PROTO_ITEM_FUNCTION_CALL:
        return "function_call";
    case FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT:
        return "function_call_output";
    case FG_PROTO_ITEM_MESSAGE:
        break;
    }
    return "message";
}

static const char *role_name(fg_proto_role r)
{
    switch (r) {
    case FG_PROTO_ROLE_SYSTEM:
        return "system";
    case FG_PROTO_ROLE_ASSISTANT:
        return "assistant";
    case FG_PROTO_ROLE_USER:
        break;
    }
    return "user";
}

static const char *part_type_name(fg_proto_part_type t)
{
    switch (t) {
    case FG_PROTO_PART_OUTPUT_TEXT:
        return "output_text";
    case FG_PROTO_PART_TEXT:
        return "text";
    case FG_PROTO_PART_INPUT_TEXT:
        break;
    }
    return "input_text";
}

static const char *status_name(fg_proto_response_status s)
{
    switch (s) {
    case FG_PROTO_RESPONSE_CANCELLED:
        return "cancelled";
    case FG_PROTO_RESPONSE_INCOMPLETE:
        return "incomplete";
    case FG_PROTO_RESPONSE_FAILED:
        return "failed";
    case FG_PROTO_RESPONSE_COMPLETED:
        break;
    }
    return "completed";
}

/* ---- pieces ---- */

static fg_err put_session(fg_proto_buf *b, const fg_proto_session_info *s)
{
    fg_err e;
    if ((e = put_lit(b, ",\"session\":{\"id\":")) || (e = put_cstr(b, s->id)) ||
        (e = put_lit(b, ",\"object\":\"realtime.session\",\"instructions\":")) || (e = put_str(b, s->instructions)) ||
        (e = put_lit(b, ",\"temperature\":")) || (e = put_double(b, s->temperature)) ||
        (e = put_lit(b, ",\"top_p\":")) || (e = put_double(b, s->top_p)) || (e = put_lit(b, ",\"top_k\":")) ||
        (e = put_u64(b, s->top_k)) || (e = put_lit(b, ",\"min_p\":")) || (e = put_double(b, s->min_p)) ||
        (e = put_lit(b, ",\"seed\":")))
        return e;
    if ((e = s->has_seed ? put_u64(b, s->seed) : put_lit(b, "null")))
        return e;
    if ((e = put_lit(b, ",\"max_output_tokens\":")) || (e = put_u64(b, s->max_output_tokens)) ||
        (e = put_lit(b, ",\"stop\":[")))
        return e;
    const uint32_t n_stop = s->n_stop < FG_PROTO_MAX_STOP ? s->n_stop : FG_PROTO_MAX_STOP;
    for (uint32_t i = 0; i < n_stop; i++)
        if ((i && (e = put_lit(b, ","))) || (e = put_str(b, s->stop[i])))
            return e;
    if ((e = put_lit(b, "]")))
        return e;
    if (s->ga) {
        const char *word = fg_proto_tool_choice_word(s->tool_choice);
        if ((e = put_lit(b, ",\"type\":\"realtime\",\"model\":")) || (e = put_cstr(b, s->model ? s->model : "")) ||
            (e = put_lit(b, ",\"output_modalities\":[\"text\"],\"tools\":")) ||
            (e = put_lit(b, s->tools ? s->tools : "[]")) || (e = put_lit(b, ",\"tool_choice\":")))
            return e;
        if (s->tool_choice == FG_PROTO_TOOL_CHOICE_FUNCTION)
            e = put_lit(b, "{\"type\":\"function\",\"name\":");
        else
            e = put_cstr(b, word ? word : "auto");
        if (e || (s->tool_choice == FG_PROTO_TOOL_CHOICE_FUNCTION &&
                  ((e = put_cstr(b, s->tool_choice_name ? s->tool_choice_name : "")) || (e = put_lit(b, "}")))))
            return e;
    }
    return put_lit(b, "}");
}

static fg_err put_item(fg_proto_buf *b, const fg_proto_item *it)
{
    fg_err e;
    if ((e = put_lit(b, "{\"id\":")) || (e = put_str(b, it->id)) || (e = put_lit(b, ",\"type\":\"")) ||
        (e = put_lit(b, item_type_name(it->type))) || (e = put_lit(b, "\"")))
        return e;
    if (it->status && ((e = put_lit(b, ",\"object\":\"realtime.item\",\"status\":")) || (e = put_cstr(b, it->status))))
        return e;
    switch (it->type) {
    case FG_PROTO_ITEM_FUNCTION_CALL:
        if ((e = put_lit(b, ",\"call_id\":")) || (e = put_str(b, it->call_id)) || (e = put_lit(b, ",\"name\":")) ||
            (e = put_str(b, it->name)) || (e = put_lit(b, ",\"arguments\":")) || (e = put_str(b, it->arguments)))
            return e;
        break;
    case FG_PROTO_ITEM_FUNCTION_CALL_OUTPUT:
        if ((e = put_lit(b, ",\"call_id\":")) || (e = put_str(b, it->call_id)) || (e = put_lit(b, ",\"output\":")) ||
            (e = put_str(b, it->output)))
            return e;
        break;
    case FG_PROTO_ITEM_MESSAGE:
    default: {
        if ((e = put_lit(b, ",\"role\":\"")) || (e = put_lit(b, role_name(it->role))) ||
            (e = put_lit(b, "\",\"content\":[")))
            return e;
        const uint32_t n = it->n_content < FG_PROTO_MAX_PARTS ? it->n_content : FG_PROTO_MAX_PARTS;
        for (uint32_t i = 0; i < n; i++)
            if ((i && (e = put_lit(b, ","))) || (e = put_lit(b, "{\"type\":\"")) ||
                (e = put_lit(b, part_type_name(it->content[i].type))) || (e = put_lit(b, "\",\"text\":")) ||
                (e = put_str(b, it->content[i].text)) || (e = put_lit(b, "}")))
                return e;
        if ((e = put_lit(b, "]")))
            return e;
        break;
    }
    }
    return put_lit(b, "}");
}

/* ---- events ---- */

static fg_err write_session_event(fg_proto_buf *b, const char *type, uint64_t seq, uint64_t evt,
                                  const fg_proto_session_info *s)
{
    fg_err e;
    if ((e = begin(b, type, seq, evt)) || (e = put_session(b, s)) || (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_session_created(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_session_info *s)
{
    return write_session_event(b, "session.created", seq, evt, s);
}

fg_err fg_proto_write_session_updated(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_session_info *s)
{
    return write_session_event(b, "session.updated", seq, evt, s);
}

fg_err fg_proto_write_session_resumed(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_session_info *s)
{
    return write_session_event(b, "session.resumed", seq, evt, s);
}

fg_err fg_proto_write_session_closed(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *session_id,
                                     const char *reason)
{
    fg_err e;
    if ((e = begin(b, "session.closed", seq, evt)) || (e = put_lit(b, ",\"session_id\":")) ||
        (e = put_cstr(b, session_id)) || (e = put_lit(b, ",\"reason\":")) ||
        (e = put_cstr(b, reason ? reason : "client_requested")) || (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_item_added(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_item *item)
{
    fg_err e;
    if ((e = begin(b, "conversation.item.added", seq, evt)) || (e = put_lit(b, ",\"item\":")) ||
        (e = put_item(b, item)) || (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_response_created(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *response_id)
{
    fg_err e;
    if ((e = begin(b, "response.created", seq, evt)) || (e = put_lit(b, ",\"response\":{\"id\":")) ||
        (e = put_cstr(b, response_id)) ||
        (e = put_lit(b, ",\"object\":\"realtime.response\",\"status\":\"in_progress\"}}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_text_delta(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *response_id,
                                 const char *item_id, const char *bytes, size_t n)
{
    fg_err e;
    if ((e = begin(b, "response.output_text.delta", seq, evt)) || (e = put_lit(b, ",\"response_id\":")) ||
        (e = put_cstr(b, response_id)) || (e = put_lit(b, ",\"item_id\":")) || (e = put_cstr(b, item_id)) ||
        (e = put_lit(b, ",\"output_index\":0,\"content_index\":0,\"delta\":")) ||
        (e = fg_proto_buf_put_json_string(b, bytes ? bytes : "", bytes ? n : 0)) || (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

/* {"type","code","message"} of an error (status_details.error and the error event share it). */
static fg_err put_error_head(fg_proto_buf *b, fg_proto_code code, const char *message, size_t message_len)
{
    const fg_proto_code_info *ci = fg_proto_code_info_get(code);
    fg_err e;
    if ((e = put_lit(b, "{\"type\":\"")) ||
        (e = put_lit(b, fg_proto_error_type_name(ci ? ci->type : FG_PROTO_SERVER_ERROR))) ||
        (e = put_lit(b, "\",\"code\":\"")) || (e = put_lit(b, fg_proto_error_code_name(code))) ||
        (e = put_lit(b, "\",\"message\":")) ||
        (e = fg_proto_buf_put_json_string(b, message ? message : "", message ? message_len : 0)))
        return e;
    return FG_OK;
}

/* ,"conversation_id":...,"output_modalities":["text"],"max_output_tokens":N,"metadata":... */
static fg_err put_response_ga(fg_proto_buf *b, const fg_proto_response_ga *ga)
{
    fg_err e;
    if ((e = put_lit(b, ",\"conversation_id\":")) || (e = put_cstr(b, ga->conversation_id)) ||
        (e = put_lit(b, ",\"output_modalities\":[\"text\"],\"max_output_tokens\":")) ||
        (e = put_u64(b, ga->max_output_tokens)) || (e = put_lit(b, ",\"metadata\":")) ||
        (e = put_lit(b, ga->metadata ? ga->metadata : "null")))
        return e;
    return FG_OK;
}

fg_err fg_proto_write_response_created_ga(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *response_id,
                                          const fg_proto_response_ga *ga)
{
    fg_err e;
    if ((e = begin(b, "response.created", seq, evt)) || (e = put_lit(b, ",\"response\":{\"id\":")) ||
        (e = put_cstr(b, response_id)) ||
        (e = put_lit(b, ",\"object\":\"realtime.response\",\"status\":\"in_progress\",\"status_details\":null")) ||
        (e = put_response_ga(b, ga)) || (e = put_lit(b, ",\"output\":[],\"usage\":null}}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_item_ga(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const fg_proto_item *item,
                              const char *previous_item_id)
{
    fg_err e;
    if ((e = begin(b, done ? "conversation.item.done" : "conversation.item.added", seq, evt)) ||
        (e = put_lit(b, ",\"previous_item_id\":")) || (e = put_cstr(b, previous_item_id)) ||
        (e = put_lit(b, ",\"item\":")) || (e = put_item(b, item)) || (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_item_retrieved(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_item *item)
{
    fg_err e;
    if ((e = begin(b, "conversation.item.retrieved", seq, evt)) || (e = put_lit(b, ",\"item\":")) ||
        (e = put_item(b, item)) || (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_item_deleted(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *item_id)
{
    fg_err e;
    if ((e = begin(b, "conversation.item.deleted", seq, evt)) || (e = put_lit(b, ",\"item_id\":")) ||
        (e = put_cstr(b, item_id)) || (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_item_truncated(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *item_id,
                                     uint32_t content_index, uint64_t audio_end_ms)
{
    fg_err e;
    if ((e = begin(b, "conversation.item.truncated", seq, evt)) || (e = put_lit(b, ",\"item_id\":")) ||
        (e = put_cstr(b, item_id)) || (e = put_lit(b, ",\"content_index\":")) || (e = put_u64(b, content_index)) ||
        (e = put_lit(b, ",\"audio_end_ms\":")) || (e = put_u64(b, audio_end_ms)) || (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_output_item_at(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const char *response_id,
                                     uint32_t output_index, const fg_proto_item *item)
{
    fg_err e;
    if ((e = begin(b, done ? "response.output_item.done" : "response.output_item.added", seq, evt)) ||
        (e = put_lit(b, ",\"response_id\":")) || (e = put_cstr(b, response_id)) ||
        (e = put_lit(b, ",\"output_index\":")) || (e = put_u64(b, output_index)) || (e = put_lit(b, ",\"item\":")) ||
        (e = put_item(b, item)) ||
        (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_output_item(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const char *response_id,
                                  const fg_proto_item *item)
{
    return fg_proto_write_output_item_at(b, done, seq, evt, response_id, 0, item);
}

fg_err fg_proto_write_call_args(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const char *response_id,
                                const char *item_id, uint32_t output_index, const char *call_id, const char *name,
                                const char *text, size_t n)
{
    fg_err e;
    if ((e = begin(b, done ? "response.function_call_arguments.done" : "response.function_call_arguments.delta", seq,
                   evt)) ||
        (e = put_lit(b, ",\"response_id\":")) || (e = put_cstr(b, response_id)) || (e = put_lit(b, ",\"item_id\":")) ||
        (e = put_cstr(b, item_id)) || (e = put_lit(b, ",\"output_index\":")) || (e = put_u64(b, output_index)) ||
        (e = put_lit(b, ",\"call_id\":")) ||
        (e = put_cstr(b, call_id)))
        return e;
    if (done && ((e = put_lit(b, ",\"name\":")) || (e = put_cstr(b, name))))
        return e;
    if ((e = put_lit(b, done ? ",\"arguments\":" : ",\"delta\":")) ||
        (e = fg_proto_buf_put_json_string(b, text ? text : "", text ? n : 0)) || (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

/* ,"response_id":...,"item_id":...,"output_index":0,"content_index":0 */
static fg_err put_part_place(fg_proto_buf *b, const char *response_id, const char *item_id)
{
    fg_err e;
    if ((e = put_lit(b, ",\"response_id\":")) || (e = put_cstr(b, response_id)) || (e = put_lit(b, ",\"item_id\":")) ||
        (e = put_cstr(b, item_id)) || (e = put_lit(b, ",\"output_index\":0,\"content_index\":0")))
        return e;
    return FG_OK;
}

fg_err fg_proto_write_content_part(fg_proto_buf *b, bool done, uint64_t seq, uint64_t evt, const char *response_id,
                                   const char *item_id, const char *text, size_t n)
{
    fg_err e;
    if ((e = begin(b, done ? "response.content_part.done" : "response.content_part.added", seq, evt)) ||
        (e = put_part_place(b, response_id, item_id)) || (e = put_lit(b, ",\"part\":{\"type\":\"text\",\"text\":")) ||
        (e = fg_proto_buf_put_json_string(b, text ? text : "", text ? n : 0)) || (e = put_lit(b, "}}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_text_done(fg_proto_buf *b, uint64_t seq, uint64_t evt, const char *response_id,
                                const char *item_id, const char *text, size_t n)
{
    fg_err e;
    if ((e = begin(b, "response.output_text.done", seq, evt)) || (e = put_part_place(b, response_id, item_id)) ||
        (e = put_lit(b, ",\"text\":")) || (e = fg_proto_buf_put_json_string(b, text ? text : "", text ? n : 0)) ||
        (e = put_lit(b, "}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_response_done(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_response_done *r)
{
    fg_err e;
    if ((e = begin(b, "response.done", seq, evt)) || (e = put_lit(b, ",\"response\":{\"id\":")) ||
        (e = put_cstr(b, r->id)) || (e = put_lit(b, ",\"object\":\"realtime.response\",\"status\":\"")) ||
        (e = put_lit(b, status_name(r->status))) || (e = put_lit(b, "\",\"status_details\":")))
        return e;
    if (r->status == FG_PROTO_RESPONSE_FAILED) {
        const fg_proto_code code = r->error_code ? r->error_code : FG_PROTO_INTERNAL_ERROR;
        if ((e = put_lit(b, "{\"type\":\"failed\",\"error\":")) ||
            (e = put_error_head(b, code, r->error_message, r->error_message ? strlen(r->error_message) : 0)) ||
            (e = put_lit(b, "}}")))
            return e;
    } else if (r->reason && r->status != FG_PROTO_RESPONSE_COMPLETED) {
        if ((e = put_lit(b, "{\"type\":\"")) || (e = put_lit(b, status_name(r->status))) ||
            (e = put_lit(b, "\",\"reason\":")) || (e = put_cstr(b, r->reason)) || (e = put_lit(b, "}")))
            return e;
    } else if ((e = put_lit(b, "null"))) {
        return e;
    }
    if (r->ga && (e = put_response_ga(b, r->ga)))
        return e;
    if ((e = put_lit(b, ",\"output\":[")))
        return e;
    for (size_t i = 0; i < r->n_output; i++)
        if ((i && (e = put_lit(b, ","))) || (e = put_item(b, &r->output[i])))
            return e;
    const fg_proto_usage *u = &r->usage;
    if ((e = put_lit(b, "],\"usage\":{\"total_tokens\":")) || (e = put_u64(b, u->input_tokens + u->output_tokens)) ||
        (e = put_lit(b, ",\"input_tokens\":")) || (e = put_u64(b, u->input_tokens)) ||
        (e = put_lit(b, ",\"output_tokens\":")) || (e = put_u64(b, u->output_tokens)) ||
        (e = put_lit(b, ",\"input_token_details\":{\"cached_tokens\":")) || (e = put_u64(b, u->cached_tokens)) ||
        (e = put_lit(b, "}}}}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_rate_limits(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_rate_limit *rl,
                                  size_t n)
{
    fg_err e;
    if ((e = begin(b, "rate_limits.updated", seq, evt)) || (e = put_lit(b, ",\"rate_limits\":[")))
        return e;
    for (size_t i = 0; i < n; i++)
        if ((i && (e = put_lit(b, ","))) || (e = put_lit(b, "{\"name\":")) || (e = put_cstr(b, rl[i].name)) ||
            (e = put_lit(b, ",\"limit\":")) || (e = put_u64(b, rl[i].limit)) || (e = put_lit(b, ",\"remaining\":")) ||
            (e = put_u64(b, rl[i].remaining)) || (e = put_lit(b, ",\"reset_seconds\":")) ||
            (e = put_double(b, rl[i].reset_seconds)) || (e = put_lit(b, "}")))
            return e;
    if ((e = put_lit(b, "]}")))
        return e;
    return finish(b);
}

fg_err fg_proto_write_error(fg_proto_buf *b, uint64_t seq, uint64_t evt, const fg_proto_error *err,
                            uint32_t retry_after_s)
{
    fg_err e;
    if ((e = begin(b, "error", seq, evt)) || (e = put_lit(b, ",\"error\":")) ||
        (e = put_error_head(b, err->code, err->message, strnlen(err->message, sizeof err->message))) ||
        (e = put_lit(b, ",\"param\":")))
        return e;
    /* The struct's strings are fixed arrays: bound the reads even if a caller
     * forgot the NUL. */
    e = err->param[0] ? fg_proto_buf_put_json_string(b, err->param, strnlen(err->param, sizeof err->param))
                      : put_lit(b, "null");
    if (e || (e = put_lit(b, ",\"event_id\":")))
        return e;
    e = err->has_event_id ? fg_proto_buf_put_json_string(b, err->event_id, strnlen(err->event_id, sizeof err->event_id))
                          : put_lit(b, "null");
    if (!e && err->location_url[0] &&
        ((e = put_lit(b, ",\"location\":{\"instance_id\":")) ||
         (e = fg_proto_buf_put_json_string(b, err->location_instance,
                                           strnlen(err->location_instance, sizeof err->location_instance))) ||
         (e = put_lit(b, ",\"url\":")) ||
         (e = fg_proto_buf_put_json_string(b, err->location_url, strnlen(err->location_url, sizeof err->location_url))) ||
         (e = put_lit(b, "}"))))
        return e;
    if (e || (e = put_lit(b, "}")))
        return e;
    if (retry_after_s && ((e = put_lit(b, ",\"retry_after\":")) || (e = put_u64(b, retry_after_s))))
        return e;
    if ((e = put_lit(b, "}")))
        return e;
    return finish(b);
}
