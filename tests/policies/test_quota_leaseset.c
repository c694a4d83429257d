/* test_quota_leaseset.c: the held-lease set (policies/quota_leases.c)
 * against a plain reference array under random adds, updates and takes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fg_test.h"
#include "policies/quota_internal.h"
#include "quota_cases.h"

#define UNIVERSE 3000

int test_quota_leaseset(void)
{
    fg_qlease_vec v = {0};
    static bool held[UNIVERSE];
    static int64_t reserved[UNIVERSE];
    unsigned rng = 12345;
    size_t n_held = 0;
    for (int op = 0; op < 200000; op++) {
        rng = rng * 1103515245u + 12345u;
        int k = (int)((rng >> 8) % UNIVERSE);
        char member[40];
        snprintf(member, sizeof member, "inst:%d", k);
        if ((rng >> 4) % 3 != 0) {
            int64_t r = op;
            CHECK(fg_qlease_add(&v, member, r, 1, true));
            n_held += !held[k];
            held[k] = true;
            reserved[k] = r;
        } else {
            fg_qlease out;
            bool got = fg_qlease_take(&v, member, &out);
            CHECK_MSG(got == held[k], "op %d member %s", op, member);
            if (got) {
                CHECK(strcmp(out.member, member) == 0 && out.reserved == reserved[k]);
                free(out.member);
                held[k] = false;
                n_held--;
            }
        }
        if (op % 5000 == 0) {
            CHECK(v.n == n_held);
            for (int j = 0; j < UNIVERSE; j++) {
                snprintf(member, sizeof member, "inst:%d", j);
                fg_qlease *l = fg_qlease_find(&v, member);
                CHECK(held[j] ? l && l->reserved == reserved[j] : l == NULL);
            }
        }
    }
    fg_qlease_vec_free(&v);
    return TEST_DONE("quota_leaseset");
}
