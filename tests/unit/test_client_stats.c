/* test_client_stats.c: gateway/client_stats.h, the load mode's histograms.
 *
 * - bucket edges: exact below 64, contiguous and increasing above, every value
 *   inside its own bucket's [low, next low);
 * - percentiles by nearest rank against an exact sort of the same samples,
 *   within the promised 1/64 relative error, for uniform, skewed and
 *   constant data; the extremes are exact; an empty histogram answers 0;
 * - merging two histograms equals recording all samples into one.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/client_stats.h"
#include "tests/unit/fg_test.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n). */
static uint64_t exact_pct(const uint64_t *v, size_t n, double p)
{
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1)
        rank = 1;
    return v[rank - 1];
}

static void test_buckets(void)
{
    for (uint64_t v = 0; v < 64; v++) {
        CHECK(fg_client_hist_bucket(v) == v);
        CHECK(fg_client_hist_bucket_low((unsigned)v) == v);
    }
    for (unsigned b = 1; b < FG_CLIENT_HIST_BUCKETS; b++) {
        uint64_t lo = fg_client_hist_bucket_low(b), prev = fg_client_hist_bucket_low(b - 1);
        CHECK_MSG(lo > prev, "bucket %u low %llu <= %llu", b, (unsigned long long)lo, (unsigned long long)prev);
        CHECK(fg_client_hist_bucket(lo) == b);
        CHECK(fg_client_hist_bucket(lo - 1) == b - 1);
    }
    /* the width of a bucket is at most 1/64 of its low edge */
    for (unsigned b = 64; b + 1 < FG_CLIENT_HIST_BUCKETS; b++) {
        uint64_t lo = fg_client_hist_bucket_low(b), next = fg_client_hist_bucket_low(b + 1);
        CHECK((next - lo) * 64 <= lo);
    }
    CHECK(fg_client_hist_bucket(UINT64_MAX) == FG_CLIENT_HIST_BUCKETS - 1);
}

static void check_against_exact(const char *name, uint64_t *v, size_t n)
{
    fg_client_hist h;
    fg_client_hist_init(&h);
    for (size_t i = 0; i < n; i++)
        fg_client_hist_record(&h, v[i]);
    qsort(v, n, sizeof *v, cmp_u64);
    CHECK(h.count == n);
    CHECK(h.min_us == v[0]);
    CHECK(h.max_us == v[n - 1]);
    static const double ps[] = {1, 10, 50, 90, 99, 99.9};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        uint64_t want = exact_pct(v, n, ps[i]), got = fg_client_hist_percentile(&h, ps[i]);
        double err = fabs((double)got - (double)want);
        CHECK_MSG(err <= (double)want / 64.0 + 0.5, "%s p%g: got %llu want %llu", name, ps[i],
                  (unsigned long long)got, (unsigned long long)want);
    }
    CHECK(fg_client_hist_percentile(&h, 100) == v[n - 1]);
    double mean = 0;
    for (size_t i = 0; i < n; i++)
        mean += (double)v[i];
    mean /= (double)n;
    CHECK(fabs(fg_client_hist_mean(&h) - mean) < 1e-6 * mean + 1e-9);
}

static void test_percentiles(void)
{
    enum { N = 20000 };
    uint64_t *v = malloc(N * sizeof *v);
    CHECK(v != NULL);
    if (!v)
        return;
    for (size_t i = 0; i < N; i++) /* uniform 1 us .. 20 ms */
        v[i] = 1 + (i * 7919) % 20000;
    check_against_exact("uniform", v, N);
    srand(1);
    for (size_t i = 0; i < N; i++) { /* heavy tail: mostly ~1 ms, some seconds */
        double u = (rand() + 1.0) / ((double)RAND_MAX + 2.0);
        v[i] = (uint64_t)(1000.0 / pow(u, 0.7));
    }
    check_against_exact("pareto", v, N);
    for (size_t i = 0; i < N; i++)
        v[i] = 123456;
    check_against_exact("constant", v, N);
    v[0] = 5;
    check_against_exact("one sample", v, 1);
    free(v);

    fg_client_hist empty;
    fg_client_hist_init(&empty);
    CHECK(fg_client_hist_percentile(&empty, 50) == 0);
    CHECK(fg_client_hist_mean(&empty) == 0);
}

static void test_merge(void)
{
    fg_client_hist a, b, all;
    fg_client_hist_init(&a);
    fg_client_hist_init(&b);
    fg_client_hist_init(&all);
    for (uint64_t i = 0; i < 1000; i++) {
        uint64_t x = i * i + 3;
        fg_client_hist_record(i % 3 ? &a : &b, x);
        fg_client_hist_record(&all, x);
    }
    fg_client_hist_merge(&a, &b);
    CHECK(a.count == all.count && a.sum_us == all.sum_us);
    CHECK(a.min_us == all.min_us && a.max_us == all.max_us);
    CHECK(memcmp(a.buckets, all.buckets, sizeof a.buckets) == 0);
    fg_client_hist empty;
    fg_client_hist_init(&empty);
    fg_client_hist_merge(&empty, &all);
    CHECK(empty.min_us == all.min_us && fg_client_hist_percentile(&empty, 50) == fg_client_hist_percentile(&all, 50));
}

int main(void)
{
    test_buckets();
    test_percentiles();
    test_merge();
    return TEST_DONE("test_client_stats");
}
