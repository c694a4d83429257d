/* Speculative decoding's pieces without a model: prompt-lookup drafts
 * (engine/serve/spec.h) and the accept/resample rule (fg_sampler_verify):
 * greedy accepts exactly the argmax; sampled, the verified token is
 * distributed as the sampler's distribution p whatever the draft (in the
 * support, outside it, holding all of it), checked per token against p. */
#include <math.h>
#include <string.h>

#include "engine/serve/sampler.h"
#include "engine/serve/spec.h"
#include "tests/unit/fg_test.h"

#define DRAWS 200000

static void check_lookup(void)
{
    int32_t out[FG_SPEC_MAX_DRAFTS];
    /* "1 2 3 4 5 1 2" + next 3: the last 3 tokens (1 2 3) occurred at 0; drafts 4 5 1 2 3. */
    const int32_t h[] = {1, 2, 3, 4, 5, 1, 2};
    int n = fg_spec_lookup(h, 7, 3, 8, out);
    CHECK(n == 5 && out[0] == 4 && out[1] == 5 && out[2] == 1 && out[3] == 2 && out[4] == 3);
    CHECK(fg_spec_lookup(h, 7, 3, 2, out) == 2 && out[0] == 4 && out[1] == 5); /* at most max */
    CHECK(fg_spec_lookup(h, 7, 3, 0, out) == 0);
    /* No earlier occurrence of the next token: nothing. */
    CHECK(fg_spec_lookup(h, 7, 9, 4, out) == 0);
    /* The most recent occurrence wins: "7 8 | 7 9 | 7" drafts 9, then what followed it. */
    const int32_t h2[] = {7, 8, 6, 7, 9, 6};
    n = fg_spec_lookup(h2, 6, 7, 4, out);
    CHECK(n >= 1 && out[0] == 9);
    /* A longer suffix beats a shorter, more recent one: "6 7 9 ... 5 7 8 ... 6 7" drafts 9. */
    const int32_t h3[] = {6, 7, 9, 1, 5, 7, 8, 2, 6};
    n = fg_spec_lookup(h3, 9, 7, 1, out);
    CHECK(n == 1 && out[0] == 9);
    /* A single recurring token is not enough: "5 8 ... 4 5" + next 8 matches
     * (5 8), but "3 9 ... 4" + next 9 has only the 1-gram (9). */
    const int32_t h4[] = {5, 8, 1, 4, 5};
    CHECK(fg_spec_lookup(h4, 5, 8, 2, out) == 2 && out[0] == 1 && out[1] == 4);
    const int32_t h5[] = {3, 9, 1, 4};
    CHECK(fg_spec_lookup(h5, 4, 9, 2, out) == 0);
    /* Empty history: the lone next token matches nothing. */
    CHECK(fg_spec_lookup(NULL, 0, 4, 4, out) == 0);
}

/* Frequencies of fg_sampler_verify's token over DRAWS seeds, against p, to
 * 5 standard deviations of a binomial proportion (about 0.0056 at p = 0.5):
 * a false failure about once in 3.5 million cells, while the naive rule
 * (on rejection, resample from p without removing the draft) puts
 * p(d)(1 - p(d)) too much on the draft: at least 0.16 for every draft here
 * with 0 < p(d) < 1. */
static void check_verify_dist(fg_sampler_t *s, const fg_sampling *p, const float *logits, int V, const double *want,
                              int32_t draft)
{
    int count[8] = {0}, acc_n = 0;
    uint64_t rng = fg_sampler_rng_init(p->seed);
    for (int i = 0; i < DRAWS; i++) {
        bool acc;
        const int32_t t = fg_sampler_verify(s, p, &rng, logits, draft, &acc);
        CHECK(t >= 0 && t < V);
        CHECK(acc == (t == draft));
        count[t]++;
        acc_n += acc;
    }
    for (int i = 0; i < V; i++) {
        const double f = (double)count[i] / DRAWS;
        const double sd = sqrt(want[i] * (1 - want[i]) / DRAWS);
        CHECK_MSG(fabs(f - want[i]) <= 5 * sd + 1e-12, "draft %d: token %d at %.4f, p %.4f", (int)draft, i, f,
                  want[i]);
    }
    const double sd = sqrt(want[draft] * (1 - want[draft]) / DRAWS);
    CHECK_MSG(fabs((double)acc_n / DRAWS - want[draft]) <= 5 * sd + 1e-12, "acceptance %.4f, p(draft) %.4f",
              (double)acc_n / DRAWS, want[draft]);
}

static void check_verify(void)
{
    fg_sampler_t *s;
    fg_diag d;
    CHECK(fg_sampler_create(4, &s, &d) == FG_OK);
    const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.2f), -INFINITY};
    const double p[4] = {0.5, 0.3, 0.2, 0};

    /* Greedy: the argmax; accepted iff it is the draft; no draws. */
    fg_sampling g = fg_sampling_default();
    uint64_t rng = 1, rng0 = 1;
    bool acc;
    CHECK(fg_sampler_verify(s, &g, &rng, logits, 0, &acc) == 0 && acc);
    CHECK(fg_sampler_verify(s, &g, &rng, logits, 2, &acc) == 0 && !acc);
    CHECK(rng == rng0);

    /* Sampled: the output is p for every draft. */
    fg_sampling t = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 11};
    for (int32_t draft = 0; draft < 4; draft++)
        check_verify_dist(s, &t, logits, 4, p, draft);
    /* With top-k 2 the support is {0, 1} (p 0.625, 0.375); a draft outside is never accepted. */
    fg_sampling k2 = t;
    k2.top_k = 2;
    const double pk[4] = {0.625, 0.375, 0, 0};
    check_verify_dist(s, &k2, logits, 4, pk, 2);
    check_verify_dist(s, &k2, logits, 4, pk, 1);
    /* A draft that holds all the mass is always accepted. */
    fg_sampling k1 = t;
    k1.top_k = 1;
    const double p1[4] = {1, 0, 0, 0};
    check_verify_dist(s, &k1, logits, 4, p1, 0);
    /* Reproducible by seed. */
    uint64_t a = fg_sampler_rng_init(5), b = fg_sampler_rng_init(5);
    for (int i = 0; i < 100; i++) {
        bool x, y;
        CHECK(fg_sampler_verify(s, &t, &a, logits, i % 4, &x) == fg_sampler_verify(s, &t, &b, logits, i % 4, &y));
    }
    fg_sampler_destroy(s);
}

int main(void)
{
    check_lookup();
    check_verify();
    return TEST_DONE("test_spec_draft");
}
