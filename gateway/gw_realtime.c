/* gw_realtime.c: the OpenAI GA flow of a session (docs/protocol.md "The OpenAI
 * GA flow"): the conversation's items as the client sees them, the event
 * sequence around a response, and conversation.item.retrieve / delete /
 * truncate.
 *
 * Each item keeps a copy of its content and the range of its tokens in the
 * session's conv, so that a delete or a truncation can cut the tokens out. The
 * engine has no call that drops a session's KV after a position, so a cut marks
 * the session for a rebuild (as an instructions change does): the next
 * response prefills the head and the remaining conversation again, and the KV
 * after the cut is gone. Service thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"
#include "gateway/log.h"

/* ---- the item list ---- */

/* The id pointer of every item after a realloc or a move. */
static void items_fix_ids(gw_items *l)
{
    for (size_t i = 0; i < l->n; i++)
        l->v[i].it.id = (fg_proto_str){l->v[i].id, strlen(l->v[i].id)};
}

static size_t str_bytes(fg_proto_str s)
{
    return s.ptr ? s.len + 1 : 0;
}

/* Copies s into *p (advanced) and points *out at the copy. */
static void str_copy(char **p, fg_proto_str s, fg_proto_str *out)
{
    if (!s.ptr) {
        *out = (fg_proto_str){"", 0};
        return;
    }
    memcpy(*p, s.ptr, s.len);
    (*p)[s.len] = 0;
    *out = (fg_proto_str){*p, s.len};
    *p += s.len + 1;
}

/* dst = a deep copy of src (one allocation for its strings). */
static bool item_set(gw_item *dst, const fg_proto_item *src, const char *id)
{
    size_t n = str_bytes(src->call_id) + str_bytes(src->name) + str_bytes(src->arguments) + str_bytes(src->output);
    for (uint32_t i = 0; i < src->n_content; i++)
        n += str_bytes(src->content[i].text);
    char *blob = malloc(n ? n : 1), *p = blob;
    if (!blob)
        return false;
    fg_proto_item it = *src;
    for (uint32_t i = 0; i < src->n_content; i++)
        str_copy(&p, src->content[i].text, &it.content[i].text);
    str_copy(&p, src->call_id, &it.call_id);
    str_copy(&p, src->name, &it.name);
    str_copy(&p, src->arguments, &it.arguments);
    str_copy(&p, src->output, &it.output);
    free(dst->blob);
    dst->blob = blob;
    snprintf(dst->id, sizeof dst->id, "%s", id);
    it.id = (fg_proto_str){dst->id, strlen(dst->id)};
    it.status = NULL;
    dst->it = it;
    return true;
}

bool gw_items_push(gw_items *l, const fg_proto_item *it, const char *id, size_t tok_start, size_t tok_len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        gw_item *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
        items_fix_ids(l);
    }
    gw_item *d = &l->v[l->n];
    memset(d, 0, sizeof *d);
    if (!item_set(d, it, id))
        return false;
    d->it.id = (fg_proto_str){d->id, strlen(d->id)}; /* d stays put until the next realloc */
    d->tok_start = tok_start;
    d->tok_len = tok_len;
    l->n++;
    return true;
}

/* The id pointer of every item after a realloc or a move. */
void gw_items_free(gw_items *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].blob);
    free(l->v);
    memset(l, 0, sizeof *l);
}

bool gw_items_copy(gw_items *dst, const gw_items *src)
{
    for (size_t i = 0; i < src->n; i++)
        if (!gw_items_push(dst, &src->v[i].it, src->v[i].id, src->v[i].tok_start, src->v[i].tok_len))
            return false;
    items_fix_ids(dst);
    return true;
}

const char *gw_items_last_id(const gw_items *l)
{
    return l->n ? l->v[l->n - 1].id : NULL;
}

static gw_item *items_find(gw_items *l, const char *id, size_t *index)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].id, id)) {
            *index = i;
            return &l->v[i];
        }
    return NULL;
}

void gw_items_place_deferred(gw_session *s, size_t at)
{
    for (size_t i = 0; i < s->items.n; i++)
        if (s->items.v[i].tok_start == GW_ITEM_DEFERRED) {
            s->items.v[i].tok_start = at;
            at += s->items.v[i].tok_len;
        }
}

/* Replaces item i's tokens in conv with t[0..n); the later items move. */
static bool items_splice(gw_session *s, size_t i, const int32_t *t, size_t n)
{
    gw_item *it = &s->items.v[i];
    fg_tokens *c = &s->conv;
    const size_t start = it->tok_start, old = it->tok_len, tail = c->n - start - old;
    if (n > old) {
        const size_t grow = n - old;
        int32_t pad[64] = {0};
        for (size_t k = 0; k < grow; k += 64) /* room at the end, then the tail moves up */
            if (fg_tokens_push(c, pad, grow - k < 64 ? grow - k : 64) != FG_OK)
                return false;
        memmove(c->v + start + n, c->v + start + old, tail * sizeof *c->v);
    } else if (old) {
        memmove(c->v + start + n, c->v + start + old, tail * sizeof *c->v);
        c->n -= old - n;
    }
    if (n)
        memcpy(c->v + start, t, n * sizeof *t);
    it->tok_len = n;
    for (size_t k = i + 1; k < s->items.n; k++)
        if (s->items.v[k].tok_start != GW_ITEM_DEFERRED)
            s->items.v[k].tok_start = s->items.v[k].tok_start - old + n;
    return true;
}

/* ---- events ---- */

const char *gw_ga_beta_name(const char *json)
{
    static const char *const renames[][2] = {
        {"response.output_text.delta", "response.text.delta"},
        {"response.output_text.done", "response.text.done"},
        {"conversation.item.added", "conversation.item.created"},
    };
    static const char head[] = "{\"type\":\"";
    if (strncmp(json, head, sizeof head - 1) != 0)
        return NULL;
    const char *name = json + sizeof head - 1;
    for (size_t i = 0; i < sizeof renames / sizeof renames[0]; i++) {
        const size_t n = strlen(renames[i][0]);
        if (!strncmp(name, renames[i][0], n) && name[n] == '"')
            return renames[i][1];
    }
    return NULL;
}

void gw_ga_item_added(gw_session *s, const gw_item *item, const char *previous_id)
{
    fg_proto_buf *b = &s->gw->scratch;
    fg_proto_item it = item->it;
    it.status = "completed";
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_item_ga(b, false, em.seq, em.evt, &it, previous_id));
    em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_item_ga(b, true, em.seq, em.evt, &it, previous_id));
}

/* The response's assistant message as it stands. */
static fg_proto_item response_item(gw_session *s, const char *status, bool with_text)
{
    fg_proto_item out = {.type = FG_PROTO_ITEM_MESSAGE, .id = {s->item_id, strlen(s->item_id)},
                         .role = FG_PROTO_ROLE_ASSISTANT, .status = status};
    if (with_text) {
        out.n_content = 1;
        out.content[0] = (fg_proto_part){FG_PROTO_PART_OUTPUT_TEXT, {s->out_text ? s->out_text : "", s->out_len}};
    }
    return out;
}

void gw_ga_response_begin(gw_session *s, size_t tok_start)
{
    fg_proto_buf *b = &s->gw->scratch;
    const char *prev = s->resp_oob ? NULL : gw_items_last_id(&s->items);
    char prev_copy[FG_PROTO_MAX_ID_BYTES + 1] = "";
    if (prev)
        snprintf(prev_copy, sizeof prev_copy, "%s", prev);
    fg_proto_item out = response_item(s, "in_progress", false);
    if (!s->resp_oob) { /* an out-of-band response's item is in no conversation */
        if (gw_items_push(&s->items, &out, s->item_id, tok_start, 0))
            s->resp_item = s->items.n - 1;
    } else {
        s->resp_item = SIZE_MAX - 1; /* shown, not kept (gateway_internal.h) */
    }
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_output_item(b, false, em.seq, em.evt, s->resp_id, &out));
    if (!s->resp_oob) {
        em = gw_emit_next(s);
        gw_emit_push(s, em, fg_proto_write_item_ga(b, false, em.seq, em.evt, &out, prev ? prev_copy : NULL));
    }
    em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_content_part(b, false, em.seq, em.evt, s->resp_id, s->item_id, "", 0));
}

void gw_ga_response_end(gw_session *s, const char *status)
{
    fg_proto_buf *b = &s->gw->scratch;
    const char *text = s->out_text ? s->out_text : "";
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_text_done(b, em.seq, em.evt, s->resp_id, s->item_id, text, s->out_len));
    em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_content_part(b, true, em.seq, em.evt, s->resp_id, s->item_id, text, s->out_len));
    fg_proto_item out = response_item(s, status, true);
    em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_output_item(b, true, em.seq, em.evt, s->resp_id, &out));
    if (s->resp_item < s->items.n) {
        gw_item *it = &s->items.v[s->resp_item];
        const char *prev = s->resp_item ? s->items.v[s->resp_item - 1].id : NULL;
        /* the reply marker and the output: the tokens since the response began */
        it->tok_len = s->conv.n - it->tok_start;
        if (!item_set(it, &out, s->item_id))
            fg_log_at(FG_LOG_ERROR, "item_not_kept", gw_session_tenant(s), s->id, "\"reason\":\"out_of_memory\"");
        em = gw_emit_next(s);
        gw_emit_push(s, em, fg_proto_write_item_ga(b, true, em.seq, em.evt, &out, prev));
    }
}

/* ---- commands ---- */

static void item_fail(gw_sink *k, const fg_client_event *ev, fg_proto_code code, const char *param, const char *msg)
{
    fg_proto_error err;
    fg_proto_error_set(&err, code, param, ev->has_event_id ? ev->event_id.ptr : NULL, "%s", msg);
    gw_sink_error(k, &err, 0);
}

/* Cuts part_index's text of an assistant message to keep bytes (back to a
 * character boundary) and re-tokenizes it in place. */
static fg_proto_code truncate_item(gw_session *s, size_t i, uint32_t part, size_t keep)
{
    gw_item *g = &s->items.v[i];
    fg_proto_item it = g->it;
    fg_proto_str t = it.content[part].text;
    if (keep > t.len)
        keep = t.len;
    while (keep > 0 && keep < t.len && ((unsigned char)t.ptr[keep] & 0xC0) == 0x80)
        keep--;
    it.content[part].text.len = keep;
    char id[FG_PROTO_MAX_ID_BYTES + 1];
    snprintf(id, sizeof id, "%s", g->id);
    /* a copy cut at keep (the item's own strings are replaced below) */
    char *cut = malloc(keep + 1);
    if (!cut)
        return FG_PROTO_INTERNAL_ERROR;
    memcpy(cut, t.ptr, keep);
    cut[keep] = 0;
    it.content[part].text.ptr = cut;
    fg_tokens tok = {0};
    fg_proto_code code = FG_PROTO_OK;
    if (fg_template_item(s->gw->tok, &it, &tok) != FG_OK || !items_splice(s, i, tok.v, tok.n) ||
        !item_set(&s->items.v[i], &it, id))
        code = FG_PROTO_INTERNAL_ERROR;
    fg_tokens_free(&tok);
    free(cut);
    return code;
}

void gw_ga_item_command(gw_sink *k, const fg_client_event *ev)
{
    gw_session *s = k->session;
    fg_proto_buf *b = &k->gw->scratch;
    size_t i = 0;
    gw_item *it = items_find(&s->items, ev->u.item_ref.item_id.ptr, &i);
    if (!it)
        return item_fail(k, ev, FG_PROTO_INVALID_VALUE, "item_id",
                         s->conv_known ? "no item with this id in the conversation"
                                       : "no item with this id (the items of a session restored from disk are not kept)");
    gw_emit em;
    if (ev->type == FG_CLIENT_ITEM_RETRIEVE) {
        fg_proto_item out = it->it;
        out.status = "completed";
        em = gw_emit_next(s);
        return gw_emit_push(s, em, fg_proto_write_item_retrieved(b, em.seq, em.evt, &out));
    }
    if (s->responding || it->tok_start == GW_ITEM_DEFERRED)
        return item_fail(k, ev, FG_PROTO_RESPONSE_IN_PROGRESS, "item_id",
                         "the conversation cannot be cut while a response is in progress");
    if (!s->conv_known)
        return item_fail(k, ev, FG_PROTO_SESSION_LOST, NULL,
                         "this session was restored without its token history; start a new session to cut it");
    if (ev->type == FG_CLIENT_ITEM_DELETE) {
        char id[FG_PROTO_MAX_ID_BYTES + 1];
        snprintf(id, sizeof id, "%s", it->id);
        if (!items_splice(s, i, NULL, 0))
            return item_fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "out of memory");
        free(it->blob);
        memmove(&s->items.v[i], &s->items.v[i + 1], (s->items.n - i - 1) * sizeof *s->items.v);
        s->items.n--;
        items_fix_ids(&s->items);
        s->rebuild = true; /* the KV from the deleted item on is recomputed at the next response */
        gw_session_store_meta(s);
        em = gw_emit_next(s);
        return gw_emit_push(s, em, fg_proto_write_item_deleted(b, em.seq, em.evt, id));
    }
    /* truncate: an assistant message's text */
    const uint32_t part = ev->u.item_ref.content_index;
    if (it->it.type != FG_PROTO_ITEM_MESSAGE || it->it.role != FG_PROTO_ROLE_ASSISTANT)
        return item_fail(k, ev, FG_PROTO_INVALID_VALUE, "item_id", "only assistant messages can be truncated");
    if (part >= it->it.n_content)
        return item_fail(k, ev, FG_PROTO_INVALID_VALUE, "content_index", "the item has no such content part");
    if (!ev->u.item_ref.has_text_end && ev->u.item_ref.audio_end_ms > 0)
        return item_fail(k, ev, FG_PROTO_INVALID_VALUE, "audio_end_ms",
                         "the item has no audio: send audio_end_ms 0 (cut all its text) or text_end (bytes to keep)");
    fg_proto_code code = truncate_item(s, i, part, ev->u.item_ref.has_text_end ? ev->u.item_ref.text_end : 0);
    if (code != FG_PROTO_OK)
        return item_fail(k, ev, code, NULL, "out of memory");
    s->rebuild = true; /* the KV from the cut on is recomputed at the next response */
    gw_session_store_meta(s);
    em = gw_emit_next(s);
    gw_emit_push(s, em, fg_proto_write_item_truncated(b, em.seq, em.evt, ev->u.item_ref.item_id.ptr, part,
                                                      ev->u.item_ref.audio_end_ms));
}
