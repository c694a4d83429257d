/* session_meta.c: encoding and validating the gateway's session record (see
 * session_meta.h for the format). The decoder trusts nothing: the engine's
 * checksum guards the file against damage, not against a record written by
 * another version of the gateway. */
#include "gateway/session_meta.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/name.h"

#define META_MAGIC "FGSM"
#define FLAG_HAS_SEED 1u
#define FLAG_REBUILD 2u
#define FLAG_CONV_KNOWN 4u
#define TAIL_SHIFT 3                /* bits 3..5: the tail */
#define TAIL_MASK (7u << TAIL_SHIFT)
#define FLAGS_ALL (FLAG_HAS_SEED | FLAG_REBUILD | FLAG_CONV_KNOWN | TAIL_MASK)

/* ---- writing ---- */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    bool over;       /* something did not fit */
} wbuf;

static void put(wbuf *w, const void *src, size_t n)
{
    if (w->over || n > w->cap - w->len) {
        w->over = true;
        return;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static void put_u(wbuf *w, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}

static void put_f64(wbuf *w, double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    put_u(w, v, 8);
}

static void put_varint(wbuf *w, uint32_t v)
{
    uint8_t b[5];
    int n = 0;
    do {
        b[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            b[n] |= 0x80;
        n++;
    } while (v);
    put(w, b, (size_t)n);
}

/* Everything but the conversation's tokens; n_conv written as given. */
static void put_head(wbuf *w, const fg_session_meta *m, bool conv_known, uint32_t n_conv)
{
    uint16_t flags = (uint16_t)((m->has_seed ? FLAG_HAS_SEED : 0) | (m->rebuild ? FLAG_REBUILD : 0) |
                                (conv_known ? FLAG_CONV_KNOWN : 0) | ((unsigned)m->tail << TAIL_SHIFT));
    put(w, META_MAGIC, 4);
    put_u(w, FG_SESSION_META_VERSION, 2);
    put_u(w, flags, 2);
    size_t tl = strlen(m->tenant);
    put_u(w, tl, 1);
    put(w, m->tenant, tl);
    put_f64(w, m->temperature);
    put_f64(w, m->top_p);
    put_f64(w, m->min_p);
    put_u(w, m->top_k, 4);
    put_u(w, m->has_seed ? m->seed : 0, 8);
    put_u(w, m->max_output_tokens, 4);
    put_u(w, m->n_stop, 1);
    for (uint32_t i = 0; i < m->n_stop; i++) {
        size_t sl = strlen(m->stop[i]);
        put_u(w, sl, 1);
        put(w, m->stop[i], sl);
    }
    put_u(w, m->instructions_len, 4);
    put(w, m->instructions, m->instructions_len);
    put_u(w, m->next_seq, 8);
    put_u(w, m->evt_counter, 8);
    put_u(w, m->item_counter, 8);
    put_u(w, m->resp_counter, 8);
    put_u(w, m->cached_tokens, 4);
    put_u(w, n_conv, 4);
}

fg_err fg_session_meta_encode(const fg_session_meta *m, uint8_t *buf, size_t cap, size_t *len, fg_diag *diag)
{
    *len = 0;
    if (!fg_name_valid(m->tenant, strlen(m->tenant)))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session record: tenant id '%s' is not 1..64 of [A-Za-z0-9_-]",
                           m->tenant);
    if (m->n_stop > FG_PROTO_MAX_STOP)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session record: %u stop strings (at most %d)", m->n_stop,
                           FG_PROTO_MAX_STOP);
    if ((unsigned)m->tail > FG_TEMPLATE_TAIL_MAX)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session record: tail %d", (int)m->tail);
    for (uint32_t i = 0; i < m->n_stop; i++) {
        size_t sl = strnlen(m->stop[i], sizeof m->stop[i]);
        if (sl < 1 || sl > FG_PROTO_MAX_STOP_BYTES)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session record: stop string %u is %zu bytes", i, sl);
    }
    if (m->conv_known && m->conv.n <= UINT32_MAX) {
        wbuf w = {buf, 0, cap, false};
        put_head(&w, m, true, (uint32_t)m->conv.n);
        for (size_t i = 0; i < m->conv.n && !w.over; i++)
            put_varint(&w, (uint32_t)m->conv.v[i]);
        if (!w.over) {
            *len = w.len;
            return FG_OK;
        }
    }
    /* Without the conversation: a restored session then keeps its cache but cannot rebuild it. */
    wbuf w = {buf, 0, cap, false};
    put_head(&w, m, false, 0);
    if (w.over)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session record: the settings need more than %zu bytes", cap);
    *len = w.len;
    return FG_OK;
}

/* ---- reading ---- */

typedef struct rbuf {
    const uint8_t *p;
    size_t len, off;
    bool short_read;
} rbuf;

static const uint8_t *take(rbuf *r, size_t n)
{
    if (r->short_read || n > r->len - r->off) {
        r->short_read = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}

static uint64_t get_u(rbuf *r, int bytes)
{
    const uint8_t *b = take(r, (size_t)bytes);
    uint64_t v = 0;
    for (int i = 0; b && i < bytes; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static double get_f64(rbuf *r)
{
    uint64_t v = get_u(r, 8);
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

static bool get_varint(rbuf *r, uint32_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        const uint8_t *b = take(r, 1);
        if (!b)
            return false;
        v |= (uint64_t)(*b & 0x7f) << shift;
        if (!(*b & 0x80)) {
            if (v > INT32_MAX)
                return false;
            *out = (uint32_t)v;
            return true;
        }
    }
    return false;
}

static fg_err bad(fg_session_meta *m, fg_diag *diag, const char *what)
{
    fg_session_meta_free(m);
    return fg_diag_set(diag, FG_ERR_INVALID_ARG, "session record: %s", what);
}

fg_err fg_session_meta_decode(const uint8_t *buf, size_t len, fg_session_meta *m, fg_diag *diag)
{
    memset(m, 0, sizeof *m);
    rbuf r = {buf, len, 0, false};
    const uint8_t *magic = take(&r, 4);
    if (!magic || memcmp(magic, META_MAGIC, 4) != 0)
        return bad(m, diag, "not a gateway session record");
    uint64_t version = get_u(&r, 2);
    if (!r.short_read && version != FG_SESSION_META_VERSION)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "session record version %u (this gateway reads %d)",
                           (unsigned)version, FG_SESSION_META_VERSION);
    uint64_t flags = get_u(&r, 2);
    if (flags & ~(uint64_t)FLAGS_ALL)
        return bad(m, diag, "unknown flags");
    size_t tl = (size_t)get_u(&r, 1);
    const uint8_t *t = take(&r, tl);
    if (!t || !fg_name_valid((const char *)t, tl))
        return bad(m, diag, "bad tenant id");
    memcpy(m->tenant, t, tl);
    m->has_seed = flags & FLAG_HAS_SEED;
    m->rebuild = flags & FLAG_REBUILD;
    m->conv_known = flags & FLAG_CONV_KNOWN;
    const unsigned tail = (unsigned)(flags & TAIL_MASK) >> TAIL_SHIFT;
    if (tail > FG_TEMPLATE_TAIL_MAX)
        return bad(m, diag, "unknown tail");
    m->tail = (fg_template_tail)tail;
    m->temperature = get_f64(&r);
    m->top_p = get_f64(&r);
    m->min_p = get_f64(&r);
    m->top_k = (uint32_t)get_u(&r, 4);
    m->seed = get_u(&r, 8);
    m->max_output_tokens = (uint32_t)get_u(&r, 4);
    /* The same ranges the protocol accepts (docs/protocol.md, session.create). */
    if (!isfinite(m->temperature) || m->temperature < 0 || m->temperature > 2 || !(m->top_p > 0 && m->top_p <= 1) ||
        !(m->min_p >= 0 && m->min_p <= 1) || m->max_output_tokens < 1)
        return bad(m, diag, "sampling setting out of range");
    m->n_stop = (uint32_t)get_u(&r, 1);
    if (m->n_stop > FG_PROTO_MAX_STOP)
        return bad(m, diag, "too many stop strings");
    for (uint32_t i = 0; i < m->n_stop; i++) {
        size_t sl = (size_t)get_u(&r, 1);
        const uint8_t *sp = take(&r, sl);
        if (!sp || sl < 1 || sl > FG_PROTO_MAX_STOP_BYTES || memchr(sp, 0, sl))
            return bad(m, diag, "bad stop string");
        memcpy(m->stop[i], sp, sl);
        m->stop[i][sl] = 0;
    }
    size_t il = (size_t)get_u(&r, 4);
    const uint8_t *ins = take(&r, il);
    if (!ins)
        return bad(m, diag, "truncated instructions");
    char *copy = malloc(il + 1);
    if (!copy) {
        fg_session_meta_free(m);
        return fg_diag_set(diag, FG_ERR_NOMEM, "session record: out of memory");
    }
    memcpy(copy, ins, il);
    copy[il] = 0;
    m->instructions = copy;
    m->instructions_len = il;
    m->next_seq = get_u(&r, 8);
    m->evt_counter = get_u(&r, 8);
    m->item_counter = get_u(&r, 8);
    m->resp_counter = get_u(&r, 8);
    m->cached_tokens = (uint32_t)get_u(&r, 4);
    uint64_t n_conv = get_u(&r, 4);
    if (r.short_read)
        return bad(m, diag, "truncated");
    if (m->next_seq < 1)
        return bad(m, diag, "sequence number 0");
    if (!m->conv_known && n_conv)
        return bad(m, diag, "tokens without the conversation flag");
    if (n_conv > r.len - r.off) /* each token takes at least one byte */
        return bad(m, diag, "more tokens than bytes");
    for (uint64_t i = 0; i < n_conv; i++) {
        uint32_t tok;
        if (!get_varint(&r, &tok))
            return bad(m, diag, "bad token");
        int32_t v = (int32_t)tok;
        if (fg_tokens_push(&m->conv, &v, 1) != FG_OK) {
            fg_session_meta_free(m);
            return fg_diag_set(diag, FG_ERR_NOMEM, "session record: out of memory");
        }
    }
    if (r.off != r.len)
        return bad(m, diag, "trailing bytes");
    return FG_OK;
}

void fg_session_meta_free(fg_session_meta *m)
{
    free((char *)m->instructions);
    m->instructions = NULL;
    m->instructions_len = 0;
    fg_tokens_free(&m->conv);
}
