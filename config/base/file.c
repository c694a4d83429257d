/* file.c: see file.h. */
#include "config/base/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int fg_file_read(const char *path, size_t max_bytes, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    int err = buf ? 0 : ENOMEM;
    while (!err) {
        if (n + 1 == cap) { /* keep room for the NUL */
            if (cap > max_bytes) {
                err = EFBIG;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                err = ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        const size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                err = errno ? errno : EIO;
            break;
        }
    }
    fclose(f);
    if (!err && n > max_bytes)
        err = EFBIG;
    if (err) {
        free(buf);
        return err;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}
