/* kv_evict.c: eviction order of resident KV (see kv_evict.h). */
#include "policies/kv_evict.h"

#include <stdlib.h>

static double score(const fg_evict_candidate *c)
{
    return c->idle_seconds / (double)(c->weight < 1 ? 1 : c->weight);
}

static int cmp(const void *pa, const void *pb)
{
    const fg_evict_candidate *a = pa, *b = pb;
    if (a->kind != b->kind)
        return a->kind == FG_EVICT_COLD_PAGE ? -1 : 1;
    double sa = a->kind == FG_EVICT_COLD_PAGE ? a->idle_seconds : score(a);
    double sb = b->kind == FG_EVICT_COLD_PAGE ? b->idle_seconds : score(b);
    if (sa != sb)
        return sa > sb ? -1 : 1;
    if (a->pages != b->pages)
        return a->pages > b->pages ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

void fg_kv_evict_order(fg_evict_candidate *c, int n)
{
    if (n > 1)
        qsort(c, (size_t)n, sizeof *c, cmp);
}

int fg_kv_evict_take(const fg_evict_candidate *c, int n, size_t need_pages)
{
    size_t got = 0;
    int i = 0;
    while (i < n && got < need_pages)
        got += c[i++].pages;
    return i;
}
