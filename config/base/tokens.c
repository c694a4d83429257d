/* tokens.c: see tokens.h. */
#include "config/base/tokens.h"

#include <stdlib.h>
#include <string.h>

fg_err fg_tokens_reserve(fg_tokens *t, size_t need)
{
    if (need <= t->cap)
        return FG_OK;
    size_t c = t->cap ? t->cap : 64;
    while (c < need)
        c *= 2;
    int32_t *v = realloc(t->v, c * sizeof *v);
    if (!v)
        return FG_ERR_NOMEM;
    t->v = v;
    t->cap = c;
    return FG_OK;
}

fg_err fg_tokens_push(fg_tokens *t, const int32_t *ids, size_t n)
{
    if (n == 0)
        return FG_OK;
    fg_err e = fg_tokens_reserve(t, t->n + n);
    if (e != FG_OK)
        return e;
    memcpy(t->v + t->n, ids, n * sizeof *ids);
    t->n += n;
    return FG_OK;
}

void fg_tokens_free(fg_tokens *t)
{
    free(t->v);
    memset(t, 0, sizeof *t);
}
