/* Deficit round robin: budget shares follow tenant weights over many steps,
 * priorities and age order within a tenant, grants never exceed wants or budget. */
#include <stdlib.h>

#include "engine/serve/scheduler.h"
#include "tests/unit/fg_test.h"

int main(void)
{
    fg_sched_t *s;
    CHECK(fg_sched_create(0, 16, &s) == FG_ERR_INVALID_ARG);
    CHECK(fg_sched_create(64, 16, &s) == FG_OK);

    /* two tenants, weights 1 and 3, each with 8 sessions wanting 100 tokens */
    fg_sched_item it[16];
    long got[2] = {0, 0};
    for (int step = 0; step < 200; step++) {
        for (int i = 0; i < 16; i++)
            it[i] = (fg_sched_item){.tenant = i % 2 ? 7 : 3, .weight = i % 2 ? 3 : 1, .priority = 0,
                                    .order = (uint64_t)i, .want = 100};
        int g = fg_sched_allocate(s, it, 16, 64);
        CHECK(g == 64);
        for (int i = 0; i < 16; i++) {
            CHECK(it[i].grant >= 0 && it[i].grant <= it[i].want);
            got[i % 2] += it[i].grant;
        }
    }
    double ratio = (double)got[1] / (double)got[0];
    CHECK_MSG(ratio > 2.85 && ratio < 3.15, "weight 3:1 got %ld:%ld (%.3f)", got[1], got[0], ratio);

    /* spare budget goes to whoever has demand: a light tenant does not cap a heavy one */
    fg_sched_item two[2] = {{.tenant = 1, .weight = 1, .want = 5}, {.tenant = 2, .weight = 1, .want = 500}};
    CHECK(fg_sched_allocate(s, two, 2, 256) == 256);
    CHECK(two[0].grant == 5 && two[1].grant == 251);

    /* within a tenant: higher priority first, then older */
    fg_sched_item p[3] = {{.tenant = 1, .weight = 1, .priority = 0, .order = 1, .want = 10},
                          {.tenant = 1, .weight = 1, .priority = 5, .order = 2, .want = 10},
                          {.tenant = 1, .weight = 1, .priority = 0, .order = 0, .want = 10}};
    CHECK(fg_sched_allocate(s, p, 3, 15) == 15);
    CHECK_MSG(p[1].grant == 10 && p[2].grant == 5 && p[0].grant == 0, "grants %d %d %d", p[0].grant, p[1].grant,
              p[2].grant);

    /* decode-shaped: 300 sessions wanting one token, budget 256: fair rounds over 3 equal tenants */
    fg_sched_item d[300];
    for (int i = 0; i < 300; i++)
        d[i] = (fg_sched_item){.tenant = (uint32_t)(i % 3), .weight = 1, .order = (uint64_t)i, .want = 1};
    fg_sched_t *big;
    CHECK(fg_sched_create(300, 16, &big) == FG_OK);
    CHECK(fg_sched_allocate(big, d, 300, 256) == 256);
    int per[3] = {0, 0, 0};
    for (int i = 0; i < 300; i++)
        per[i % 3] += d[i].grant;
    CHECK_MSG(abs(per[0] - per[1]) <= 16 && abs(per[1] - per[2]) <= 16, "per tenant %d %d %d", per[0], per[1], per[2]);

    /* nothing to do */
    CHECK(fg_sched_allocate(big, d, 0, 256) == 0);
    CHECK(fg_sched_allocate(big, d, 10, 0) == 0);
    fg_sched_destroy(big);
    fg_sched_destroy(s);
    return TEST_DONE("test_scheduler");
}
