#include "config/base/bytes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool fg_bytes_append(char **buf, size_t *len, size_t *cap, const void *src, size_t n)
{
    if (n > SIZE_MAX / 4 - *len)
        return false;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (!b)
            return false;
        *buf = b;
        *cap = c;
    }
    if (n)
        memcpy(*buf + *len, src, n);
    *len += n;
    (*buf)[*len] = 0;
    return true;
}
