/* test_metrics_hist.c: gateway/metrics.h's latency histogram.
 *
 * - an observation equal to a bound counts in that bound's bucket (Prometheus
 *   buckets are "less or equal"), one just above it in the next; above the last
 *   bound is +Inf; negative and NaN durations (a clock step) count as 0;
 * - count and sum follow the observations;
 * - quantiles over a delta (now minus an earlier copy) see only the newer
 *   observations, answer a bucket's upper bound, and 0 when nothing is new.
 */
#include <math.h>
#include <string.h>

#include "gateway/metrics.h"
#include "tests/unit/fg_test.h"

static void test_buckets(void)
{
    for (int i = 0; i < GW_LAT_BUCKETS; i++) {
        gw_hist h;
        memset(&h, 0, sizeof h);
        gw_hist_observe(&h, gw_latency_bounds[i]);
        CHECK_MSG(h.bucket[i] == 1, "bound %g", gw_latency_bounds[i]);
        gw_hist_observe(&h, gw_latency_bounds[i] * 1.0001);
        CHECK_MSG(h.bucket[i + 1] == 1, "just above %g", gw_latency_bounds[i]);
        CHECK(h.count == 2);
        if (i)
            CHECK(gw_latency_bounds[i] > gw_latency_bounds[i - 1]);
    }
    gw_hist h;
    memset(&h, 0, sizeof h);
    gw_hist_observe(&h, 1e9);
    CHECK(h.bucket[GW_LAT_BUCKETS] == 1);
    gw_hist_observe(&h, -1.0);
    gw_hist_observe(&h, NAN);
    CHECK(h.bucket[0] == 2);
    CHECK(h.count == 3);
    CHECK(h.sum == 1e9);
}

static void test_quantiles(void)
{
    gw_hist before, now;
    memset(&now, 0, sizeof now);
    for (int i = 0; i < 100; i++)
        gw_hist_observe(&now, 50.0); /* old, slow observations */
    before = now;
    CHECK(gw_hist_quantile_delta(&now, &before, 0.5) == 0.0);
    for (int i = 0; i < 90; i++)
        gw_hist_observe(&now, 0.004); /* bucket le=0.005 */
    for (int i = 0; i < 10; i++)
        gw_hist_observe(&now, 0.2); /* bucket le=0.25 */
    CHECK(gw_hist_quantile_delta(&now, &before, 0.5) == 0.005);
    CHECK(gw_hist_quantile_delta(&now, &before, 0.9) == 0.005);
    CHECK(gw_hist_quantile_delta(&now, &before, 0.95) == 0.25);
    memset(&before, 0, sizeof before);
    CHECK(gw_hist_quantile_delta(&now, &before, 0.99) == 60.0); /* the old ones count again */
    gw_hist_observe(&now, 1e6);
    CHECK(gw_hist_quantile_delta(&now, &before, 1.0) == gw_latency_bounds[GW_LAT_BUCKETS - 1]);
}

int main(void)
{
    test_buckets();
    test_quantiles();
    return TEST_DONE("test_metrics_hist");
}
