/* sampler.c: greedy, top-k, temperature, top-p, min-p sampling (see sampler.h). */
#include "engine/serve/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/vecops.h"

typedef struct candidate {
    float logit;
    int32_t id;
} candidate;

struct fg_sampler {
    int n_vocab;
    candidate *cand; /* [n_vocab] */
    float *probs;    /* [n_vocab] */
};

fg_sampling fg_sampling_default(void)
{
    return (fg_sampling){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0};
}

fg_err fg_sampling_validate(const fg_sampling *p, fg_diag *diag)
{
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "temperature %g outside [0, 100]", p->temperature);
    if (p->top_k < 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "top_k %d must be >= 0", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "top_p %g outside (0, 1]", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p < 1.0f))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "min_p %g outside [0, 1)", p->min_p);
    return FG_OK;
}

fg_err fg_sampler_create(int n_vocab, fg_sampler_t **out, fg_diag *diag)
{
    *out = NULL;
    if (n_vocab < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "vocabulary size %d", n_vocab);
    fg_sampler_t *s = calloc(1, sizeof *s);
    if (s) {
        s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
        s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    }
    if (!s || !s->cand || !s->probs) {
        fg_sampler_destroy(s);
        return fg_diag_set(diag, FG_ERR_NOMEM, "sampler: out of memory");
    }
    s->n_vocab = n_vocab;
    *out = s;
    return FG_OK;
}

void fg_sampler_destroy(fg_sampler_t *s)
{
    if (!s)
        return;
    free(s->cand);
    free(s->probs);
    free(s);
}

/* splitmix64: small, fast, and the same on every platform. */
static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Descending logit, ties by ascending id, so the order is deterministic. */
static int by_logit_desc(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* True when a ranks after b (lower logit, or equal logit and higher id). */
static int after(const candidate *a, const candidate *b)
{
    return a->logit < b->logit || (a->logit == b->logit && a->id > b->id);
}

static void sift_down(candidate *h, int n, int i)
{
    for (;;) {
        int w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && after(&h[l], &h[w]))
            w = l;
        if (r < n && after(&h[r], &h[w]))
            w = r;
        if (w == i)
            return;
        candidate t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The k best non-NaN logits into s->cand (unordered): a heap whose root is the
 * worst kept candidate. The same set as the first k of a full sort. */
static int select_top_k(fg_sampler_t *s, const float *logits, int k)
{
    candidate *h = s->cand;
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++) {
        if (isnan(logits[i]))
            continue;
        candidate c = {logits[i], i};
        if (n < k) {
            h[n++] = c;
            for (int j = n - 1; j > 0;) { /* sift up */
                int parent = (j - 1) / 2;
                if (!after(&h[j], &h[parent]))
                    break;
                candidate t = h[j];
                h[j] = h[parent];
                h[parent] = t;
                j = parent;
            }
        } else if (after(&h[0], &c)) {
            h[0] = c;
            sift_down(h, n, 0);
        }
    }
    return n;
}

uint64_t fg_sampler_rng_init(uint64_t seed)
{
    return seed ^ 0x9e3779b97f4a7c15ull;
}

/* The distribution fg_sampler_sample draws from, for temperature > 0: its
 * support in s->cand[0..n) (best first) with unnormalised weights in
 * s->probs[0..n); *sum is their total. Returns n (0: every logit NaN). */
static int build_dist(fg_sampler_t *s, const fg_sampling *p, const float *logits, double *sum_out)
{
    const int V = s->n_vocab;
    int n = 0;
    if (p->top_k > 0 && p->top_k < V) {
        n = select_top_k(s, logits, p->top_k); /* per token: O(V log k), not a full sort */
    } else {
        for (int i = 0; i < V; i++)
            if (!isnan(logits[i]))
                s->cand[n++] = (candidate){logits[i], i};
    }
    if (n == 0)
        return 0;
    qsort(s->cand, (size_t)n, sizeof *s->cand, by_logit_desc);

    const float inv_t = 1.0f / p->temperature, top = s->cand[0].logit;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        s->probs[i] = expf((s->cand[i].logit - top) * inv_t);
        sum += s->probs[i];
    }
    if (p->top_p < 1.0f) {
        double acc = 0;
        for (int i = 0; i < n; i++) {
            acc += s->probs[i] / sum;
            if (acc >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        /* probs[0] is the best (unnormalised, = 1). */
        int keep = 1;
        while (keep < n && s->probs[keep] >= p->min_p * s->probs[0])
            keep++;
        n = keep;
    }
    sum = 0;
    for (int i = 0; i < n; i++)
        sum += s->probs[i];
    *sum_out = sum;
    return n;
}

/* A uniform draw in [0, 1). */
static double uniform(uint64_t *rng)
{
    return (double)(next_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

/* One draw from the first n candidates by weight, skipping index skip (-1: none); sum excludes it. */
static int32_t draw(const fg_sampler_t *s, int n, double sum, int skip, uint64_t *rng)
{
    double r = uniform(rng) * sum;
    double acc = 0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (i == skip)
            continue;
        acc += s->probs[i];
        last = i;
        if (r < acc)
            return s->cand[i].id;
    }
    return s->cand[last].id;
}

int32_t fg_sampler_sample(fg_sampler_t *s, const fg_sampling *p, uint64_t *rng, const float *logits)
{
    if (p->temperature == 0.0f) {
        int best = fg_argmax(logits, s->n_vocab);
        return best < 0 ? 0 : best;
    }
    double sum;
    const int n = build_dist(s, p, logits, &sum);
    return n == 0 ? 0 : draw(s, n, sum, -1, rng);
}

int32_t fg_sampler_verify(fg_sampler_t *s, const fg_sampling *p, uint64_t *rng, const float *logits, int32_t draft,
                          bool *accepted)
{
    if (p->temperature == 0.0f) {
        const int32_t best = fg_sampler_sample(s, p, rng, logits);
        *accepted = best == draft;
        return best;
    }
    double sum;
    const int n = build_dist(s, p, logits, &sum);
    *accepted = false;
    if (n == 0)
        return 0;
    int at = -1;
    for (int i = 0; i < n && at < 0; i++)
        if (s->cand[i].id == draft)
            at = i;
    /* Accept with probability p(draft); one draw either way, so a seed fixes the outcome. */
    if (at >= 0 && uniform(rng) * sum < s->probs[at]) {
        *accepted = true;
        return draft;
    }
    const double rest = at >= 0 ? sum - s->probs[at] : sum;
    if (!(rest > 0)) { /* draft held all the mass (then it is accepted above but for rounding) */
        *accepted = true;
        return draft;
    }
    return draw(s, n, rest, at, rng);
}
