/* Sampling rules (greedy, top-k, temperature, top-p, min-p, seeds) and stop-string search. */
#include <math.h>
#include <string.h>

#include "engine/serve/sampler.h"
#include "engine/serve/stop.h"
#include "tests/unit/fg_test.h"

#define DRAWS 20000

static void histogram(fg_sampler_t *s, const fg_sampling *p, const float *logits, int V, double *freq)
{
    uint64_t rng = fg_sampler_rng_init(p->seed);
    for (int i = 0; i < V; i++)
        freq[i] = 0;
    for (int i = 0; i < DRAWS; i++)
        freq[fg_sampler_sample(s, p, &rng, logits)] += 1.0 / DRAWS;
}

int main(void)
{
    fg_sampler_t *s;
    fg_diag d;
    CHECK(fg_sampler_create(0, &s, &d) == FG_ERR_INVALID_ARG);
    CHECK(fg_sampler_create(4, &s, &d) == FG_OK);
    /* probabilities 0.5, 0.3, 0.2, 0 */
    const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.2f), -INFINITY};
    double f[4];

    fg_sampling g = fg_sampling_default();
    uint64_t rng = fg_sampler_rng_init(0);
    CHECK(fg_sampler_sample(s, &g, &rng, logits) == 0);
    const float tie[4] = {1, 3, 3, 2};
    CHECK(fg_sampler_sample(s, &g, &rng, tie) == 1); /* lowest id wins a tie */
    const float with_nan[4] = {NAN, 1, 5, NAN};
    CHECK(fg_sampler_sample(s, &g, &rng, with_nan) == 2);

    fg_sampling t1 = g;
    t1.temperature = 1.0f;
    histogram(s, &t1, logits, 4, f);
    CHECK_MSG(fabs(f[0] - 0.5) < 0.02 && fabs(f[1] - 0.3) < 0.02 && fabs(f[2] - 0.2) < 0.02 && f[3] == 0,
              "temperature 1: %.3f %.3f %.3f %.3f", f[0], f[1], f[2], f[3]);

    fg_sampling cold = t1;
    cold.temperature = 0.5f; /* p ~ p^2: 0.25, 0.09, 0.04 -> 0.658, 0.237, 0.105 */
    histogram(s, &cold, logits, 4, f);
    CHECK_MSG(fabs(f[0] - 0.658) < 0.02 && fabs(f[2] - 0.105) < 0.02, "temperature 0.5: %.3f %.3f", f[0], f[2]);

    fg_sampling k1 = t1;
    k1.top_k = 1;
    histogram(s, &k1, logits, 4, f);
    CHECK(f[0] > 0.9999 && f[1] == 0 && f[2] == 0);
    fg_sampling k2 = t1;
    k2.top_k = 2; /* 0.5 / 0.8, 0.3 / 0.8 */
    histogram(s, &k2, logits, 4, f);
    CHECK_MSG(fabs(f[0] - 0.625) < 0.02 && f[2] == 0, "top_k 2: %.3f %.3f", f[0], f[2]);

    fg_sampling tp = t1;
    tp.top_p = 0.6f; /* 0.5 < 0.6 <= 0.8: keeps tokens 0 and 1 */
    histogram(s, &tp, logits, 4, f);
    CHECK_MSG(f[2] == 0 && fabs(f[0] - 0.625) < 0.02, "top_p 0.6: %.3f %.3f %.3f", f[0], f[1], f[2]);

    fg_sampling mp = t1;
    mp.min_p = 0.5f; /* keeps p >= 0.25: tokens 0 and 1 */
    histogram(s, &mp, logits, 4, f);
    CHECK_MSG(f[2] == 0 && f[1] > 0.3, "min_p 0.5: %.3f %.3f %.3f", f[0], f[1], f[2]);

    /* seeds: the same seed repeats the sequence, another seed does not */
    int32_t a[64], b[64], c[64];
    uint64_t ra = fg_sampler_rng_init(7), rb = fg_sampler_rng_init(7), rc = fg_sampler_rng_init(8);
    int differ = 0;
    for (int i = 0; i < 64; i++) {
        a[i] = fg_sampler_sample(s, &t1, &ra, logits);
        b[i] = fg_sampler_sample(s, &t1, &rb, logits);
        c[i] = fg_sampler_sample(s, &t1, &rc, logits);
        differ += a[i] != c[i];
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(differ > 0);

    /* parameter validation names the field */
    fg_sampling bad = t1;
    bad.top_p = 0;
    CHECK(fg_sampling_validate(&bad, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "top_p"));
    bad = t1;
    bad.temperature = -1;
    CHECK(fg_sampling_validate(&bad, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "temperature"));
    bad = t1;
    bad.min_p = 1;
    CHECK(fg_sampling_validate(&bad, &d) == FG_ERR_INVALID_ARG && strstr(d.msg, "min_p"));
    fg_sampler_destroy(s);

    /* stop strings: found once their last byte arrives, earliest start wins */
    const char *stops[] = {"END", "", "x\ny"};
    const char *text = "abcEN";
    CHECK(fg_stop_find(text, strlen(text), 3, stops, 3) == -1);
    text = "abcEND";
    CHECK(fg_stop_find(text, strlen(text), 5, stops, 3) == 3);
    CHECK(fg_stop_find(text, strlen(text), 6, stops, 3) == -1); /* already reported region */
    text = "x\nyEND";
    CHECK(fg_stop_find(text, strlen(text), 0, stops, 3) == 0);
    CHECK(fg_stop_find("", 0, 0, stops, 3) == -1);
    return TEST_DONE("test_sampler");
}
