/* test_pool.c: kernels/cpu/pool.h. fg_pool_split covers [0, n) exactly once in
 * grain-aligned near-equal parts; jobs run on every thread with the right
 * (ith, nth); what workers write is visible to the caller when fg_pool_run
 * returns; 10,000 back-to-back jobs; wake-up after the workers went to sleep;
 * pools of 1, 2, 3 (more threads than this machine's cores) and NULL.
 */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/pool.h"
#include "tests/unit/fg_test.h"

#define MAX_N 5000
#define MAX_THREADS 8

static void test_split(void)
{
    const long ns[] = {0, 1, 2, 7, 16, 17, 100, 1000, 4999};
    const long grains[] = {1, 3, 16, 64};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++)
            for (int nth = 1; nth <= 7; nth++) {
                const long n = ns[a], grain = grains[g];
                long prev_end = 0, min_units = n + 1, max_units = -1;
                for (int ith = 0; ith < nth; ith++) {
                    long b, e;
                    fg_pool_split(n, grain, ith, nth, &b, &e);
                    /* contiguous, in order, grain-aligned starts */
                    CHECK_MSG(b == prev_end, "n=%ld grain=%ld nth=%d ith=%d: begin %ld, expected %ld", n, grain,
                              nth, ith, b, prev_end);
                    CHECK(b <= e);
                    CHECK(b == e || b % grain == 0); /* an empty part may sit at n */
                    prev_end = e;
                    const long units = (e - b + grain - 1) / grain;
                    if (units < min_units)
                        min_units = units;
                    if (units > max_units)
                        max_units = units;
                }
                CHECK_MSG(prev_end == n, "n=%ld grain=%ld nth=%d: ends at %ld", n, grain, nth, prev_end);
                CHECK_MSG(max_units - min_units <= 1, "n=%ld grain=%ld nth=%d: unbalanced", n, grain, nth);
            }
}

typedef struct cover_ctx {
    long n, grain;
    atomic_int hits[MAX_N];
    atomic_int calls[MAX_THREADS];
    atomic_int bad_nth;
    int expect_nth;
} cover_ctx;

static void cover_fn(void *vctx, int ith, int nth)
{
    cover_ctx *c = vctx;
    if (nth != c->expect_nth || ith < 0 || ith >= nth)
        atomic_fetch_add(&c->bad_nth, 1);
    else
        atomic_fetch_add(&c->calls[ith], 1);
    long b, e;
    fg_pool_split(c->n, c->grain, ith, nth, &b, &e);
    for (long i = b; i < e; i++)
        atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
}

/* Many jobs, each covering its [0, n) once. */
static void test_cover(fg_pool_t *pool, int nth)
{
    static cover_ctx c;
    for (int job = 0; job < 200; job++) {
        memset(&c, 0, sizeof c);
        c.n = (job * 37) % MAX_N;
        c.grain = 1 + job % 9;
        c.expect_nth = nth;
        fg_pool_run(pool, cover_fn, &c);
        int bad = 0;
        for (long i = 0; i < MAX_N; i++)
            bad += atomic_load(&c.hits[i]) != (i < c.n ? 1 : 0);
        CHECK_MSG(bad == 0, "nth=%d job %d: %d indices not covered exactly once", nth, job, bad);
        for (int t = 0; t < nth; t++)
            CHECK_MSG(atomic_load(&c.calls[t]) == 1, "nth=%d job %d: thread %d ran %d times", nth, job, t,
                      atomic_load(&c.calls[t]));
        CHECK(atomic_load(&c.bad_nth) == 0);
    }
}

typedef struct seq_ctx {
    int job;               /* written by the caller between runs */
    int seen[MAX_THREADS]; /* plain writes by each thread: fg_pool_run must publish them */
    long sum[MAX_THREADS];
} seq_ctx;

static void seq_fn(void *vctx, int ith, int nth)
{
    seq_ctx *c = vctx;
    (void)nth;
    c->seen[ith] = c->job;
    c->sum[ith] += c->job;
}

static void test_back_to_back(fg_pool_t *pool, int nth)
{
    static seq_ctx c;
    memset(&c, 0, sizeof c);
    int bad = 0;
    const int jobs = 10000;
    for (int j = 1; j <= jobs; j++) {
        c.job = j;
        fg_pool_run(pool, seq_fn, &c);
        for (int t = 0; t < nth; t++)
            bad += c.seen[t] != j;
    }
    CHECK_MSG(bad == 0, "nth=%d: %d stale results", nth, bad);
    const long expect = (long)jobs * (jobs + 1) / 2;
    for (int t = 0; t < nth; t++)
        CHECK_MSG(c.sum[t] == expect, "nth=%d thread %d: sum %ld, expected %ld", nth, t, c.sum[t], expect);
}

/* Jobs separated by pauses long enough for the workers to go to sleep. */
static void test_sleep_wake(fg_pool_t *pool, int nth)
{
    static seq_ctx c;
    memset(&c, 0, sizeof c);
    for (int j = 1; j <= 5; j++) {
        const struct timespec ts = {0, 3 * 1000 * 1000}; /* 3 ms: well past the spin budget */
        nanosleep(&ts, NULL);
        c.job = j;
        fg_pool_run(pool, seq_fn, &c);
        for (int t = 0; t < nth; t++)
            CHECK_MSG(c.seen[t] == j, "nth=%d: thread %d missed job %d after sleeping", nth, t, j);
    }
}

int main(void)
{
    test_split();

    /* NULL pool: inline, thread 0 of 1 */
    test_cover(NULL, 1);
    CHECK(fg_pool_size(NULL) == 1);

    for (int n = 1; n <= 3; n++) {
        fg_pool_t *pool = fg_pool_create(n);
        CHECK(pool != NULL);
        if (!pool)
            continue;
        CHECK(fg_pool_size(pool) == n);
        struct timespec t0, t1, t2;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        test_cover(pool, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        test_back_to_back(pool, n);
        clock_gettime(CLOCK_MONOTONIC, &t2);
        test_sleep_wake(pool, n);
        test_back_to_back(pool, n);
        fprintf(stderr, "pool of %d: 200 cover jobs %.1f ms, 10000 jobs %.1f ms (%.2f us/job)\n", n,
                (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6,
                (t2.tv_sec - t1.tv_sec) * 1e3 + (t2.tv_nsec - t1.tv_nsec) * 1e-6,
                ((t2.tv_sec - t1.tv_sec) * 1e3 + (t2.tv_nsec - t1.tv_nsec) * 1e-6) * 1e3 / 10000);
        fg_pool_destroy(pool);
    }

    /* one per CPU; create and destroy at once (workers may not have started waiting) */
    fg_pool_t *pool = fg_pool_create(0);
    CHECK(pool != NULL && fg_pool_size(pool) >= 1);
    fg_pool_destroy(pool);
    fg_pool_destroy(NULL);
    return TEST_DONE("test_pool");
}
