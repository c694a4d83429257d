/* pyjson.c: JSON as Python's json.dumps writes it (see pyjson.h). */
#include "gateway/pyjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/bytes.h"

typedef struct sbuf {
    char **buf;
    size_t *len, *cap;
    bool ascii; /* ensure_ascii */
    fg_err err;
} sbuf;

static void sput(sbuf *b, const char *s, size_t n)
{
    if (!b->err && !fg_bytes_append(b->buf, b->len, b->cap, s, n))
        b->err = FG_ERR_NOMEM;
}

static void sputs(sbuf *b, const char *s) { sput(b, s, strlen(s)); }

static void hex_u(unsigned v, char e[6])
{
    static const char hex[] = "0123456789abcdef";
    e[0] = '\\', e[1] = 'u', e[2] = hex[(v >> 12) & 15], e[3] = hex[(v >> 8) & 15], e[4] = hex[(v >> 4) & 15];
    e[5] = hex[v & 15];
}

static void put_u(sbuf *b, unsigned v)
{
    char e[6];
    hex_u(v, e);
    sput(b, e, 6);
}

size_t fg_pyjson_escape_byte(unsigned char c, char e[6])
{
    const char s = c == '"' ? '"' : c == '\\' ? '\\' : c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't'
                 : c == '\b' ? 'b' : c == '\f' ? 'f' : 0;
    if (s) {
        e[0] = '\\', e[1] = s;
        return 2;
    }
    if (c < 0x20) {
        hex_u(c, e);
        return 6;
    }
    return 0;
}

/* A JSON string as json.dumps escapes it: printable ASCII as is, the short
 * escapes and control bytes (fg_pyjson_escape_byte); the rest \uXXXX (UTF-16,
 * lowercase) with ensure_ascii, as it is (UTF-8) without. jansson has checked
 * that the string is UTF-8. */
static void put_str(sbuf *b, const char *s, size_t n)
{
    sput(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char e[6];
        const size_t el = fg_pyjson_escape_byte(c, e);
        if (el) {
            sput(b, e, el);
            i++;
            continue;
        }
        if (c >= 0x20 && (c < 0x7f || !b->ascii)) {
            size_t k = i;
            while (k < n && (unsigned char)s[k] >= 0x20 && ((unsigned char)s[k] < 0x7f || !b->ascii) && s[k] != '"' &&
                   s[k] != '\\')
                k++;
            sput(b, s + i, k - i);
            i = k;
            continue;
        }
        unsigned cp = c, extra = 0;
        if (c >= 0xf0)
            cp = c & 0x07, extra = 3;
        else if (c >= 0xe0)
            cp = c & 0x0f, extra = 2;
        else if (c >= 0xc0)
            cp = c & 0x1f, extra = 1;
        for (unsigned k = 1; k <= extra && i + k < n; k++)
            cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3f);
        i += 1 + extra;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            put_u(b, 0xd800 + (cp >> 10));
            put_u(b, 0xdc00 + (cp & 0x3ff));
        } else {
            put_u(b, cp);
        }
    }
    sput(b, "\"", 1);
}

/* A double as Python's repr: the shortest digits that read back the same,
 * fixed notation for 1e-4 <= |x| < 1e16 (with ".0" when whole), else
 * d.ddde±XX. */
static void put_real(sbuf *b, double x)
{
    char e[40];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x)
            break;
    }
    snprintf(e, sizeof e, "%.*e", prec - 1, x);
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    int ex = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char o[64];
    size_t k = 0;
    if (neg)
        o[k++] = '-';
    if (ex >= 16 || ex < -4) {
        o[k++] = digits[0];
        if (nd > 1) {
            o[k++] = '.';
            memcpy(o + k, digits + 1, nd - 1);
            k += nd - 1;
        }
        k += (size_t)snprintf(o + k, sizeof o - k, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    } else if (ex < 0) {
        o[k++] = '0';
        o[k++] = '.';
        for (int z = 0; z < -ex - 1; z++)
            o[k++] = '0';
        memcpy(o + k, digits, nd);
        k += nd;
    } else {
        size_t ip = (size_t)ex + 1; /* digits before the point */
        for (size_t i = 0; i < ip; i++)
            o[k++] = i < nd ? digits[i] : '0';
        o[k++] = '.';
        if (nd > ip) {
            memcpy(o + k, digits + ip, nd - ip);
            k += nd - ip;
        } else {
            o[k++] = '0';
        }
    }
    sput(b, o, k);
}

static void dump(sbuf *b, const json_t *v, int depth)
{
    if (depth > 64) {
        b->err = FG_ERR_INVALID_ARG;
        return;
    }
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *x;
        bool first = true;
        sput(b, "{", 1);
        json_object_foreach((json_t *)v, key, x) {
            if (!first)
                sput(b, ", ", 2);
            first = false;
            put_str(b, key, strlen(key));
            sput(b, ": ", 2);
            dump(b, x, depth + 1);
        }
        sput(b, "}", 1);
        return;
    }
    case JSON_ARRAY:
        sput(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                sput(b, ", ", 2);
            dump(b, json_array_get(v, i), depth + 1);
        }
        sput(b, "]", 1);
        return;
    case JSON_STRING:
        put_str(b, json_string_value(v), json_string_length(v));
        return;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        sputs(b, num);
        return;
    case JSON_REAL:
        put_real(b, json_real_value(v));
        return;
    case JSON_TRUE:
        sputs(b, "true");
        return;
    case JSON_FALSE:
        sputs(b, "false");
        return;
    case JSON_NULL:
        sputs(b, "null");
        return;
    }
}

fg_err fg_pyjson_dump(const json_t *v, bool ascii, char **buf, size_t *len, size_t *cap)
{
    if (!v || !buf || !len || !cap)
        return FG_ERR_INVALID_ARG;
    sbuf b = {buf, len, cap, ascii, FG_OK};
    dump(&b, v, 0);
    return b.err;
}
