/* gw_ring.c: the event FIFOs (a session's resume buffer, a connection's own
 * queue) over one circular byte buffer each.
 *
 * Each event takes one contiguous slot, LWS_PRE bytes of headroom (lws_write
 * frames in place), the JSON and a NUL, rounded up to 16 bytes. Slots are
 * taken at the end of the newest one, or from the buffer's start when the end
 * has no room and the oldest slot leaves enough before it (the buffer is then
 * wrapped); when neither fits, the buffer doubles and the live slots are
 * copied to its start in order. So a session whose events stay within what
 * its buffer held before allocates nothing per event (the streaming path);
 * the descriptor array doubles the same way. An emptied ring above 64 KiB
 * gives its buffer back, so an idle session does not keep a burst's memory.
 * Service thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"

#define SLOT_ALIGN 16
#define FIRST_DATA (4u << 10)      /* bytes: a few events of a fresh session */
#define KEEP_IDLE (64u << 10)      /* bytes an empty ring may keep */

static size_t slot_bytes(size_t len)
{
    return (LWS_PRE + len + 1 + SLOT_ALIGN - 1) & ~(size_t)(SLOT_ALIGN - 1);
}

/* Moves the live slots, in order, to the start of a new buffer of cap bytes. */
static bool regrow(gw_ring *r, size_t cap)
{
    char *d = malloc(cap);
    if (!d)
        return false;
    size_t at = 0;
    for (uint32_t i = 0; i < r->count; i++) {
        gw_event *e = gw_ring_at(r, i);
        memcpy(d + at, r->data + e->off, e->slot);
        e->off = at;
        e->buf = d + at;
        at += e->slot;
    }
    free(r->data);
    r->data = d;
    r->data_cap = cap;
    r->grows++;
    return true;
}

/* Offset of a free slot of need bytes, growing the buffer when none is free; SIZE_MAX on out of memory. */
static size_t take_slot(gw_ring *r, size_t need)
{
    if (r->count) {
        const gw_event *old = gw_ring_at(r, 0), *new = gw_ring_at(r, r->count - 1);
        const size_t tail = new->off + new->slot;
        if (old->off <= new->off) { /* one run: room after it, or before it */
            if (r->data_cap - tail >= need)
                return tail;
            if (old->off >= need)
                return 0;
        } else if (old->off - tail >= need) { /* wrapped: the gap between the newest and the oldest */
            return tail;
        }
    } else if (r->data_cap >= need) {
        return 0;
    }
    size_t used = 0;
    for (uint32_t i = 0; i < r->count; i++)
        used += gw_ring_at(r, i)->slot;
    size_t cap = r->data_cap ? r->data_cap * 2 : FIRST_DATA;
    while (cap < used + need)
        cap *= 2;
    if (!regrow(r, cap))
        return SIZE_MAX;
    return used;
}

bool gw_ring_push(gw_ring *r, uint64_t seq, const char *json, size_t len)
{
    if (r->count == r->cap) {
        /* rings start small so that an idle session costs little */
        uint32_t nc = r->cap ? r->cap * 2 : 8;
        gw_event *ev = malloc(nc * sizeof *ev);
        if (!ev)
            return false;
        for (uint32_t i = 0; i < r->count; i++)
            ev[i] = *gw_ring_at(r, i);
        free(r->ev);
        r->ev = ev;
        r->cap = nc;
        r->head = 0;
    }
    const size_t need = slot_bytes(len);
    const size_t off = take_slot(r, need);
    if (off == SIZE_MAX)
        return false;
    char *buf = r->data + off;
    memcpy(buf + LWS_PRE, json, len);
    buf[LWS_PRE + len] = 0;
    r->ev[(r->head + r->count) % r->cap] = (gw_event){.seq = seq, .buf = buf, .len = len, .off = off, .slot = need};
    r->count++;
    r->bytes += len;
    return true;
}

void gw_ring_drop_oldest(gw_ring *r)
{
    gw_event *old = gw_ring_at(r, 0);
    r->bytes -= old->len;
    r->head = (r->head + 1) % r->cap;
    r->count--;
    if (!r->count && r->data_cap > KEEP_IDLE) {
        free(r->data);
        r->data = NULL;
        r->data_cap = 0;
    }
}

void gw_ring_free(gw_ring *r)
{
    free(r->ev);
    free(r->data);
    memset(r, 0, sizeof *r);
}
