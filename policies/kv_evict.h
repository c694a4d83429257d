/* kv_evict.h: the order in which resident KV leaves memory under pressure.
 *
 * Candidates are prefix-cache pages that no session holds ("cold": freeing
 * them loses only a possible future hit) and idle sessions (spilled to disk,
 * so nothing is lost but the time to load them back). Cold pages always go
 * first, least recently used first. Sessions follow in order of idle time
 * divided by their tenant's weight: a tenant with twice the weight keeps its
 * idle sessions in memory twice as long.
 *
 * A pure function of its input, free of the engine and of Redis, so it is
 * unit-tested alone and the engine links it without hiredis.
 */
#ifndef FG_KV_EVICT_H
#define FG_KV_EVICT_H

#include <stddef.h>
#include <stdint.h>

typedef enum fg_evict_kind {
    FG_EVICT_COLD_PAGE = 0,  /* a cached page held only by the prefix cache */
    FG_EVICT_SESSION = 1,    /* an idle session that can be spilled */
} fg_evict_kind;

typedef struct fg_evict_candidate {
    fg_evict_kind kind;
    double idle_seconds;     /* since its last use (>= 0) */
    int weight;              /* the tenant's weight, 1..1000 (values below 1 count as 1) */
    size_t pages;            /* pages freeing it would return */
    uint32_t id;             /* the caller's handle; the last tie-break, so the order is total */
} fg_evict_candidate;

/* Sorts c[0..n) into eviction order (see above). Ties among sessions: more
 * pages first (fewer spills free the same memory), then lower id. */
void fg_kv_evict_order(fg_evict_candidate *c, int n);

/* How many candidates from the front of an ordered array free at least
 * need_pages; n when all of them do not. */
int fg_kv_evict_take(const fg_evict_candidate *c, int n, size_t need_pages);

#endif
