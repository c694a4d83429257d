/* protocol_utf8.c: UTF-8 validation and the carry for split characters.
 *
 * Our own validator rather than a library's: the parser must name invalid
 * UTF-8 as its own error (before JSON), and the writers must replace ill-formed
 * model output the way Unicode recommends (one U+FFFD per maximal subpart), so
 * that cutting a byte stream anywhere and re-joining it with the carry gives
 * the same text as writing it whole (tests/fuzz/fuzz_protocol.c checks this).
 *
 * Well-formed sequences (Unicode Table 3-7): the second byte's range depends
 * on the first, which is what rejects overlongs (C0, C1, E0 80..9F, F0 80..8F),
 * surrogates (ED A0..BF) and values above U+10FFFF (F4 90.., F5..FF).
 */
#include "gateway/protocol.h"
#include "gateway/protocol_internal.h"

#include <string.h>

int fg_proto_utf8_next(const unsigned char *p, size_t n)
{
    const unsigned b0 = p[0];
    if (b0 < 0x80)
        return 1;
    unsigned need, lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        if (b0 == 0xE0)
            lo = 0xA0; /* below: overlong */
        else if (b0 == 0xED)
            hi = 0x9F; /* above: UTF-16 surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        if (b0 == 0xF0)
            lo = 0x90; /* below: overlong */
        else if (b0 == 0xF4)
            hi = 0x8F; /* above: > U+10FFFF */
    } else {
        return -1; /* a continuation byte, C0/C1 or F5..FF: never starts a character */
    }
    for (unsigned i = 1; i <= need; i++) {
        if (i >= n)
            return 0;
        const unsigned b = p[i];
        if (b < lo || b > hi)
            return -(int)i; /* the bytes before this one are the maximal subpart */
        lo = 0x80;
        hi = 0xBF;
    }
    return (int)need + 1;
}

size_t fg_proto_utf8_check(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* ASCII runs dominate JSON; skip them 8 bytes at a time. */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & UINT64_C(0x8080808080808080))
                break;
            i += 8;
        }
        if (i >= n)
            break;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        const int r = fg_proto_utf8_next(p + i, n - i);
        if (r <= 0)
            return i;
        i += (size_t)r;
    }
    return n;
}

bool fg_proto_utf8_valid(const char *s, size_t n)
{
    return fg_proto_utf8_check(s, n) == n;
}

/* Bytes at the end of s[0..n) that form a well-formed but incomplete
 * sequence (0..3). Only the last lead byte can start one: a lead byte is never
 * a continuation byte, so decoding from the left always restarts at it, and a
 * character is at most 4 bytes, so it lies within the last 3. */
static size_t incomplete_tail(const unsigned char *s, size_t n)
{
    const size_t stop = n > 3 ? n - 3 : 0;
    for (size_t k = n; k-- > stop;) {
        if (s[k] >= 0x80 && s[k] <= 0xBF)
            continue; /* a continuation byte: look further left for its lead */
        if (s[k] >= 0xC2 && s[k] <= 0xF4 && fg_proto_utf8_next(s + k, n - k) == 0)
            return n - k;
        return 0;
    }
    return 0;
}

size_t fg_proto_utf8_carry_feed(fg_proto_utf8_carry *c, const char *bytes, size_t n, char *out)
{
    size_t total = c->len;
    memcpy(out, c->bytes, c->len);
    if (n)
        memcpy(out + total, bytes, n);
    total += n;
    const size_t hold = incomplete_tail((const unsigned char *)out, total);
    memcpy(c->bytes, out + total - hold, hold);
    c->len = (uint8_t)hold;
    return total - hold;
}

size_t fg_proto_utf8_carry_flush(fg_proto_utf8_carry *c, char *out)
{
    if (!c->len)
        return 0;
    /* An incomplete sequence is one maximal ill-formed subpart: one U+FFFD. */
    c->len = 0;
    memcpy(out, "\xEF\xBF\xBD", 3);
    return 3;
}

size_t fg_proto_utf8_replace(const char *s, size_t n, char *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            out[o++] = (char)p[i++];
            continue;
        }
        const int r = fg_proto_utf8_next(p + i, n - i);
        if (r > 0) {
            memcpy(out + o, p + i, (size_t)r);
            o += (size_t)r;
            i += (size_t)r;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += r < 0 ? (size_t)-r : n - i; /* r == 0: the rest is one incomplete subpart */
        }
    }
    return o;
}
