/* gw_realtime.c: the OpenAI GA flow of a session (docs/protocol.md "The OpenAI
 * GA flow"): the conversation's items as the client sees them, the event
 * sequence around a response, and conversation.item.retrieve / delete /
 * truncate.
 *
 * Each item keeps a copy of its content and the range of its tokens in the
 * session's conv, so that a delete or a truncation can cut the tokens out.
 * The cache keeps the KV before the cut: gw_disk's worker cuts the engine
 * session there (fg_session_truncate waits for a step) and saves it, and the
 * answer goes from the completion, which queues the conversation after the
 * cut as the next response's input. Meanwhile the client is not read. Where
 * the engine cannot cut (deepseek4's cache) the session is rebuilt at its
 * next response instead, as after an instructions change. Service thread
 * only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"
#include "gateway/gw_disk.h"
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

bool gw_items_push(gw_items *l, const fg_proto_item *it, const char *id, size_t tok_start, size_t tok_len,
                   bool generated)
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
    d->generated = generated;
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
        if (!gw_items_push(dst, &src->v[i].it, src->v[i].id, src->v[i].tok_start, src->v[i].tok_len,
                           src->v[i].generated))
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

/* gw_items_tail_at judged by the items before index below only. */
static fg_template_tail tail_before(const gw_session *s, size_t pos, size_t below)
{
    for (size_t i = below; i-- > 0;) {
        const gw_item *g = &s->items.v[i];
        if (g->tok_start == GW_ITEM_DEFERRED || g->tok_start > pos)
            continue;
        const size_t end = g->tok_start + g->tok_len;
        if (end != pos || g->generated) /* within it, after a reply, or a reply itself: closed */
            return FG_TEMPLATE_TAIL_NONE;
        return fg_template_tail_after(&g->it);
    }
    return pos == s->restored_n ? s->restored_tail : FG_TEMPLATE_TAIL_NONE;
}

fg_template_tail gw_items_tail_at(const gw_session *s, size_t pos)
{
    return tail_before(s, pos, s->items.n);
}

fg_template_tail gw_session_tail(const gw_session *s)
{
    for (size_t i = s->items.n; s->responding && i-- > 0;) {
        const gw_item *g = &s->items.v[i];
        if (g->tok_start == GW_ITEM_DEFERRED)
            return g->generated ? FG_TEMPLATE_TAIL_NONE : fg_template_tail_after(&g->it);
    }
    return gw_items_tail_at(s, s->conv.n);
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
        if (gw_items_push(&s->items, &out, s->item_id, tok_start, 0, true))
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
 * character boundary) and re-tokenizes it in place; *same: its first tokens
 * that stayed as they were. */
static fg_proto_code truncate_item(gw_session *s, size_t i, uint32_t part, size_t keep, size_t *same)
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
    /* rendered after what the items before left open, and closed if its tokens were (a generated reply's EOS) */
    fg_template_tail tail = tail_before(s, g->tok_start, i);
    const int32_t eos = fg_tokenizer_eos(s->gw->tok);
    const bool closed = g->tok_len && eos >= 0 && s->conv.v[g->tok_start + g->tok_len - 1] == eos;
    fg_proto_code code = FG_PROTO_OK;
    if (fg_template_item(s->gw->tok, &tail, &it, &tok) != FG_OK ||
        (closed && fg_template_close(s->gw->tok, &tail, &tok) != FG_OK))
        code = FG_PROTO_INTERNAL_ERROR;
    *same = 0;
    while (code == FG_PROTO_OK && *same < tok.n && *same < g->tok_len && tok.v[*same] == s->conv.v[g->tok_start + *same])
        ++*same;
    if (code == FG_PROTO_OK && (!items_splice(s, i, tok.v, tok.n) || !item_set(&s->items.v[i], &it, id)))
        code = FG_PROTO_INTERNAL_ERROR;
    fg_tokens_free(&tok);
    free(cut);
    return code;
}

/* After a delete at i: the item now at i, which opened after was (what the
 * deleted item, or a v1 reply after it, left open), opens after what the items before it leave open,
 * as in a fresh session: a client item is rendered again; a generated reply
 * keeps its output after the reply opening that follows them. False on out
 * of memory (its tokens stay as they were). */
static bool follow_again(gw_session *s, size_t i, fg_template_tail was)
{
    if (i >= s->items.n || s->items.v[i].tok_start == GW_ITEM_DEFERRED || !s->items.v[i].tok_len)
        return true;
    gw_item *g = &s->items.v[i];
    const fg_tokenizer_t *tk = s->gw->tok;
    fg_template_tail tail = tail_before(s, g->tok_start, i);
    if (tail == was)
        return true;
    fg_tokens tok = {0}, old = {0};
    bool ok;
    if (!g->generated) {
        const int32_t eos = fg_tokenizer_eos(tk);
        const bool closed = eos >= 0 && s->conv.v[g->tok_start + g->tok_len - 1] == eos;
        ok = fg_template_item(tk, &tail, &g->it, &tok) == FG_OK &&
             (!closed || fg_template_close(tk, &tail, &tok) == FG_OK);
    } else {
        ok = fg_template_reply(tk, &was, &old) == FG_OK && fg_template_reply(tk, &tail, &tok) == FG_OK;
        const int32_t *v = s->conv.v + g->tok_start;
        if (ok && old.n <= g->tok_len && !memcmp(v, old.v, old.n * sizeof *v))
            ok = fg_tokens_push(&tok, v + old.n, g->tok_len - old.n) == FG_OK;
        else
            tok.n = 0; /* it does not start with that opening: left as it is */
    }
    if (ok && (tok.n || !g->generated))
        ok = items_splice(s, i, tok.v, tok.n);
    fg_tokens_free(&tok);
    fg_tokens_free(&old);
    return ok;
}

/* A cut on gw_disk's worker, and the answer it owes. */
typedef struct cut_wait {
    gw_session *s;
    bool deleted;                   /* conversation.item.deleted, else .truncated */
    char item_id[FG_PROTO_MAX_ID_BYTES + 1];
    uint32_t part;
    uint64_t audio_end_ms;
    int keep, expect;               /* as asked of the worker (keep < 0: only a save) */
    int n_tail;                     /* tokens of conv after the cache's expect */
} cut_wait;

static void cut_answer(gw_session *s, const cut_wait *w)
{
    fg_proto_buf *b = &s->gw->scratch;
    gw_emit em = gw_emit_next(s);
    gw_emit_push(s, em, w->deleted ? fg_proto_write_item_deleted(b, em.seq, em.evt, w->item_id)
                                   : fg_proto_write_item_truncated(b, em.seq, em.evt, w->item_id, w->part,
                                                                   w->audio_end_ms));
}

/* The worker's answer: the cache holds the head and conv's first expect -
 * head tokens, and the rest of conv is queued as the next response's input;
 * or, where it could not be cut, the rebuild stays pending. Either way its
 * file was written (or could not be: logged) before the client hears of it. */
static void on_cut(void *user, fg_err cut, fg_err saved, const fg_diag *d)
{
    (void)d; /* the engine's words are in the log only as codes */
    cut_wait *w = user;
    gw_session *s = w->s;
    s->cutting = false;
    if (s->sink)
        gw_sink_rx_update(s->sink);
    if (s->doomed) { /* closed meanwhile (evicted, or the server stops) */
        if (!s->restoring && !s->forks)
            gw_session_destroy(s, s->doomed_keep_file);
        free(w);
        return;
    }
    if (w->keep >= 0 && cut == FG_OK) {
        s->new_input = w->n_tail; /* the conversation after the cut, queued on the worker */
        s->rebuild = false;
    } else if (w->keep >= 0) { /* the rebuild stays pending */
        fg_log_at(cut == FG_ERR_UNSUPPORTED ? FG_LOG_DEBUG : FG_LOG_WARN, "session_cut_failed", gw_session_tenant(s),
                  s->id, "\"error\":\"%s\"", fg_err_name(cut));
    }
    gw_session_store_meta(s);
    if (saved != FG_OK && saved != FG_ERR_STATE)
        fg_log_at(FG_LOG_WARN, "session_save_failed", gw_session_tenant(s), s->id,
                  "\"error\":\"%s\",\"when\":\"cut\"", fg_err_name(saved));
    fg_log_at(FG_LOG_DEBUG, "session_cut_done", gw_session_tenant(s), s->id,
              "\"kept\":%d,\"error\":\"%s\",\"saved\":\"%s\"", w->keep >= 0 && cut == FG_OK ? w->expect : -1,
              fg_err_name(cut), fg_err_name(saved));
    cut_answer(s, w);
    free(w);
}

/* After conv was edited from conv position cut on (the item list already
 * says so): the engine session keeps its KV of the head and conv[0, cut) and
 * the file is rewritten, on gw_disk's worker; w answers from there. Until
 * then the session is marked for a rebuild, in its record too, so that a
 * file written meanwhile makes a restore prefill again: a crash never
 * brings back a cache that does not match the conversation. Without an
 * engine session or the worker the answer goes at once and the rebuild
 * stays pending. */
static void cut_start(gw_session *s, size_t cut, cut_wait *w)
{
    fg_gateway_t *gw = s->gw;
    const bool pending = s->rebuild; /* the cache is discarded at the next response anyway */
    s->rebuild = true;
    gw_session_store_meta(s);
    w->s = s;
    w->keep = w->expect = -1;
    const uint8_t *meta = NULL;
    size_t meta_len = 0;
    fg_tokens head = {0};
    fg_diag d;
    if (!pending && s->es && gw_session_head(s, &head, &d) == FG_OK) {
        const int keep = (int)(head.n + cut), len = fg_session_length(s->es), expect = len < keep ? len : keep;
        /* a cache without its whole head was never used: it is rebuilt for nothing */
        if (expect >= (int)head.n && (meta = gw_session_meta_cut(s, expect, (size_t)expect - head.n, &meta_len))) {
            w->keep = keep;
            w->expect = expect;
        }
    }
    fg_tokens_free(&head);
    const int32_t *tail = NULL;
    if (w->keep >= 0) {
        const size_t from = cut - (size_t)(w->keep - w->expect); /* conv's index of the cache's end */
        tail = s->conv.v + from;
        w->n_tail = (int)(s->conv.n - from);
    }
    if (!s->es || !gw->disk ||
        gw_disk_cut(gw->disk, s->es, w->keep, w->expect, tail, w->n_tail, meta, meta_len, on_cut, w) != FG_OK) {
        cut_answer(s, w);
        free(w);
        return;
    }
    s->cutting = true;
    if (s->sink)
        gw_sink_rx_update(s->sink);
    fg_log_at(FG_LOG_DEBUG, "session_cut_started", gw_session_tenant(s), s->id, "\"keep\":%d", w->keep);
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
    if (s->responding || s->quota_pending || it->tok_start == GW_ITEM_DEFERRED)
        return item_fail(k, ev, FG_PROTO_RESPONSE_IN_PROGRESS, "item_id",
                         "the conversation cannot be cut while a response is in progress");
    if (s->forks || s->cutting) /* events read before its client's reading paused */
        return item_fail(k, ev, FG_PROTO_RESPONSE_IN_PROGRESS, "item_id",
                         "the session is being forked or cut; retry once that is answered");
    if (!s->conv_known)
        return item_fail(k, ev, FG_PROTO_SESSION_LOST, NULL,
                         "this session was restored without its token history; start a new session to cut it");
    cut_wait *w = calloc(1, sizeof *w);
    if (!w)
        return item_fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "out of memory");
    snprintf(w->item_id, sizeof w->item_id, "%s", it->id);
    const size_t start = it->tok_start;
    if (ev->type == FG_CLIENT_ITEM_DELETE) {
        w->deleted = true;
        /* what the next item opened after (the deleted one's tail, or a reply's between them) */
        const fg_template_tail was = i + 1 < s->items.n ? tail_before(s, s->items.v[i + 1].tok_start, i + 1)
                                                        : FG_TEMPLATE_TAIL_NONE;
        if (!items_splice(s, i, NULL, 0)) {
            free(w);
            return item_fail(k, ev, FG_PROTO_INTERNAL_ERROR, NULL, "out of memory");
        }
        free(it->blob);
        memmove(&s->items.v[i], &s->items.v[i + 1], (s->items.n - i - 1) * sizeof *s->items.v);
        s->items.n--;
        items_fix_ids(&s->items);
        if (!follow_again(s, i, was)) /* the item after it opened after what the deleted one left open */
            fg_log_at(FG_LOG_ERROR, "item_not_kept", gw_session_tenant(s), s->id, "\"reason\":\"out_of_memory\"");
        return cut_start(s, start, w); /* the KV from the deleted item on goes */
    }
    /* truncate: an assistant message's text */
    const uint32_t part = ev->u.item_ref.content_index;
    fg_proto_code code = FG_PROTO_OK;
    const char *msg = "out of memory", *param = NULL;
    if (it->it.type != FG_PROTO_ITEM_MESSAGE || it->it.role != FG_PROTO_ROLE_ASSISTANT) {
        code = FG_PROTO_INVALID_VALUE, param = "item_id", msg = "only assistant messages can be truncated";
    } else if (part >= it->it.n_content) {
        code = FG_PROTO_INVALID_VALUE, param = "content_index", msg = "the item has no such content part";
    } else if (!ev->u.item_ref.has_text_end && ev->u.item_ref.audio_end_ms > 0) {
        code = FG_PROTO_INVALID_VALUE, param = "audio_end_ms";
        msg = "the item has no audio: send audio_end_ms 0 (cut all its text) or text_end (bytes to keep)";
    }
    size_t same = 0;
    if (code == FG_PROTO_OK)
        code = truncate_item(s, i, part, ev->u.item_ref.has_text_end ? ev->u.item_ref.text_end : 0, &same);
    if (code != FG_PROTO_OK) {
        free(w);
        return item_fail(k, ev, code, param, msg);
    }
    w->part = part;
    w->audio_end_ms = ev->u.item_ref.audio_end_ms;
    cut_start(s, start + same, w); /* the KV from the first changed token on goes */
}
