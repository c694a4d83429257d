/* test_bench_share.c: the rule the benchmark tools report a rate by
 * (engine/tools/bench_common.h, bench_share): against the tightest limit the
 * rate does not exceed, naming a limit it broke, "at" a limit within
 * BENCH_NOISE above it, and never a share above 100 %. Also: the cache level
 * a working set is named by. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tools/bench_common.h"
#include "tests/unit/fg_test.h"

/* The largest number printed right before a '%' in s. */
static double max_percent(const char *s)
{
    double m = -1;
    for (const char *p = strchr(s, '%'); p; p = strchr(p + 1, '%')) {
        const char *q = p;
        while (q > s && (q[-1] == ' '))
            q--;
        while (q > s && ((q[-1] >= '0' && q[-1] <= '9') || q[-1] == '.'))
            q--;
        const double v = atof(q);
        m = v > m ? v : m;
    }
    return m;
}

int main(void)
{
    const fg_bench_limit lims[] = {{"DRAM bandwidth", 400}, {"LLC bandwidth", 2000}, {"compute", 900}};
    char out[256];
    const fg_bench_limit *which;

    double f = bench_share(300, lims, 3, out, sizeof out, &which);
    CHECK(which == &lims[0] && f > 0.749 && f < 0.751 && strstr(out, "75 % of the DRAM bandwidth limit"));

    /* above the DRAM limit: weights cached; the next tighter limit is compute */
    f = bench_share(600, lims, 3, out, sizeof out, &which);
    CHECK(which == &lims[2] && strstr(out, "67 % of the compute limit") && strstr(out, "above the DRAM bandwidth"));

    /* a hair above compute: at the limit, 100 %, not 102 % */
    f = bench_share(918, lims, 3, out, sizeof out, &which);
    CHECK(which == &lims[2] && f == 1.0 && strstr(out, "100 % of the compute limit"));

    /* above all of them: no share at all */
    f = bench_share(5000, lims, 3, out, sizeof out, &which);
    CHECK(which == NULL && f < 0 && strstr(out, "above every measured limit") && max_percent(out) < 0);

    /* a limit that does not apply (rate 0) is never chosen */
    const fg_bench_limit some[] = {{"DRAM bandwidth", 0}, {"LLC bandwidth", 2000}};
    f = bench_share(300, some, 2, out, sizeof out, &which);
    CHECK(which == &some[1] && strstr(out, "15 % of the LLC bandwidth limit"));
    f = bench_share(1, some, 0, out, sizeof out, &which);
    CHECK(which == NULL && strstr(out, "no limit measured"));

    /* never above 100 %, over a sweep */
    for (double r = 1; r < 4000; r *= 1.07) {
        f = bench_share(r, lims, 3, out, sizeof out, NULL);
        CHECK_MSG(f <= 1.0 && max_percent(out) <= 100.0, "rate %.1f: %s", r, out);
    }

    const fg_bench_caches c = {48 << 10, 2 << 20, (size_t)260 << 20};
    CHECK(strcmp(bench_level(&c, 3 << 20, 2), "L2") == 0);
    CHECK(strcmp(bench_level(&c, 5 << 20, 2), "LLC") == 0);
    CHECK(strcmp(bench_level(&c, (size_t)400 << 20, 2), "DRAM") == 0);
    const fg_bench_caches none = {0, 0, 0};
    CHECK(strcmp(bench_level(&none, 1, 1), "DRAM") == 0);
    const fg_bench_caches mine = bench_caches(); /* whatever this machine says: no crash, sizes sane if known */
    CHECK(mine.l1d <= mine.l2 || !mine.l2 || !mine.l1d);
    return TEST_DONE("test_bench_share");
}
