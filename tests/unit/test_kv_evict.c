/* The eviction order: cold cached pages before any session, least recently
 * used first; sessions by idle time over tenant weight; a total order. */
#include "policies/kv_evict.h"
#include "tests/unit/fg_test.h"

int main(void)
{
    fg_evict_candidate c[] = {
        {.kind = FG_EVICT_SESSION, .idle_seconds = 100, .weight = 1, .pages = 3, .id = 1},
        {.kind = FG_EVICT_COLD_PAGE, .idle_seconds = 1, .weight = 1, .pages = 1, .id = 2},
        {.kind = FG_EVICT_SESSION, .idle_seconds = 150, .weight = 2, .pages = 5, .id = 3}, /* 75 */
        {.kind = FG_EVICT_COLD_PAGE, .idle_seconds = 9, .weight = 1, .pages = 1, .id = 4},
        {.kind = FG_EVICT_SESSION, .idle_seconds = 50, .weight = 0, .pages = 2, .id = 5},  /* weight 0 counts as 1 */
        {.kind = FG_EVICT_SESSION, .idle_seconds = 150, .weight = 2, .pages = 7, .id = 6}, /* ties with 3: more pages */
    };
    int n = (int)(sizeof c / sizeof c[0]);
    fg_kv_evict_order(c, n);
    uint32_t want[] = {4, 2, 1, 6, 3, 5};
    for (int i = 0; i < n; i++)
        CHECK_MSG(c[i].id == want[i], "position %d: id %u, want %u", i, c[i].id, want[i]);
    /* Enough to free 4 pages: the two cold pages and the first session. */
    CHECK(fg_kv_evict_take(c, n, 4) == 3);
    CHECK(fg_kv_evict_take(c, n, 0) == 0);
    CHECK(fg_kv_evict_take(c, n, 1000) == n);
    fg_kv_evict_order(c, 0); /* empty: no-op */
    /* A heavier tenant keeps a session longer than a lighter one idle for less. */
    fg_evict_candidate d[] = {
        {.kind = FG_EVICT_SESSION, .idle_seconds = 30, .weight = 10, .pages = 1, .id = 1},
        {.kind = FG_EVICT_SESSION, .idle_seconds = 10, .weight = 1, .pages = 1, .id = 2},
    };
    fg_kv_evict_order(d, 2);
    CHECK(d[0].id == 2);
    return fg_test_failures ? 1 : 0;
}
