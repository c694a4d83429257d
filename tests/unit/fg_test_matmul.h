/* fg_test_matmul.h: what the matmul kernel tests (test_matmul, test_quants,
 * test_mxfp4) share: the fast ISAs this CPU runs, and pools of 1, 2 and 3
 * threads (pools[0] is NULL: the caller's thread alone). */
#ifndef FG_TEST_MATMUL_H
#define FG_TEST_MATMUL_H

#include <stdio.h>

#include "kernels/cpu/matmul.h"
#include "tests/unit/fg_test.h"

static fg_isa fast_isas[2];
static int n_fast;
static fg_pool_t *pools[4]; /* NULL, 1, 2, 3 threads */

/* Fills fast_isas with the vector ISAs this CPU has (a line on stderr names
 * each one skipped) and makes the pools. */
static inline void fg_test_matmul_setup(const char *test)
{
    const fg_isa cand[2] = {FG_ISA_AVX2, FG_ISA_AVX512};
    for (int i = 0; i < 2; i++) {
        if (fg_isa_supported(cand[i]))
            fast_isas[n_fast++] = cand[i];
        else
            fprintf(stderr, "%s: %s not supported here, skipped\n", test, fg_isa_name(cand[i]));
    }
    pools[0] = NULL;
    for (int p = 1; p <= 3; p++) {
        pools[p] = fg_pool_create(p);
        CHECK(pools[p] != NULL);
    }
}

static inline void fg_test_matmul_teardown(void)
{
    for (int p = 1; p <= 3; p++)
        fg_pool_destroy(pools[p]);
}

#endif
