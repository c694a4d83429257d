/* scheduler.h: sharing one step's token budget between sessions and tenants.
 *
 * Deficit round robin over tenants, by weight: each round every tenant with
 * demand earns quantum x weight tokens of credit and spends it on its own
 * items, highest priority first, then oldest first. Credit carries over
 * between steps while a tenant keeps demand (so small grants even out) and is
 * dropped when it has none (standard DRR). Used twice per step: once for
 * decode tokens (one per session), then for prefill chunks from what is left.
 *
 * Owns: per-tenant credit. Thread safety: the engine's step thread only.
 */
#ifndef FG_SCHEDULER_H
#define FG_SCHEDULER_H

#include <stdint.h>

#include "config/fg_error.h"

typedef struct fg_sched_item {
    uint32_t tenant;    /* scheduling group */
    int weight;         /* tenant weight, >= 1 (the first item of a tenant decides) */
    int priority;       /* higher is served first within a tenant */
    uint64_t order;     /* older (smaller) first among equal priorities */
    int want;           /* tokens wanted this step, >= 1 */
    int grant;          /* out: tokens granted, 0..want */
} fg_sched_item;

typedef struct fg_sched fg_sched_t;

/* quantum: tokens of credit per unit of weight per round (>= 1). */
fg_err fg_sched_create(int max_items, int quantum, fg_sched_t **out);
void fg_sched_destroy(fg_sched_t *s);

/* Grants at most budget tokens over items[0..n) (n <= max_items); returns the
 * tokens granted. No allocation. */
int fg_sched_allocate(fg_sched_t *s, fg_sched_item *items, int n, int budget);

#endif
