/* fg_test_matmul.h: what the matmul kernel tests (test_matmul, test_quants,
 * test_mxfp4) share: the fast ISAs this CPU runs, and pools of 1, 2 and 3
 * threads (pools[0] is NULL: the caller's thread alone). */
#ifndef FG_TEST_MATMUL_H
#define FG_TEST_MATMUL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* 64-byte-aligned scratch for fg_matmul of n_tok tokens of n_in; NULL when
 * the type needs none. */
static inline void *fg_test_alloc_scratch(int wtype, int64_t n_in, int64_t n_tok)
{
    const size_t s = fg_matmul_scratch_bytes(wtype, n_in, n_tok);
    return s ? aligned_alloc(64, (s + 63) / 64 * 64) : NULL;
}

/* One product of nt tokens xb on pool into yb, then each token alone (no
 * pool) into y1: how many tokens' outputs differ in any bit. sb and s1 are
 * scratch for nt tokens and for one. */
static inline int fg_test_batch_differs(fg_pool_t *pool, fg_isa isa, int wtype, const void *w, int64_t ni, int64_t no,
                                        const float *xb, int64_t nt, float *yb, void *sb, float *y1, void *s1)
{
    CHECK(fg_matmul(pool, isa, wtype, w, ni, no, xb, nt, yb, sb) == 0);
    int differ = 0;
    for (int64_t t = 0; t < nt; t++) {
        CHECK(fg_matmul(NULL, isa, wtype, w, ni, no, xb + t * ni, 1, y1, s1) == 0);
        differ += memcmp(y1, yb + t * no, (size_t)no * sizeof *y1) != 0;
    }
    return differ;
}

static inline void fg_test_matmul_teardown(void)
{
    for (int p = 1; p <= 3; p++)
        fg_pool_destroy(pools[p]);
}

#endif
