/* sampler.h: choosing the next token from logits.
 *
 * temperature 0 is greedy (argmax, lowest id on ties). Otherwise, in order:
 * top-k (0 = off), temperature softmax, top-p (1 = off, keeps the smallest
 * prefix of the sorted distribution whose mass reaches p), min-p (0 = off,
 * drops tokens below min_p times the best probability), then one draw from a
 * seeded generator: the same seed and logits give the same tokens.
 *
 * A sampler is scratch space ([n_vocab] candidates) for one thread; the
 * parameters and the RNG state belong to each sequence, so one sampler serves
 * every sequence of a step.
 * Thread safety: a sampler is used by one thread at a time.
 */
#ifndef FG_SAMPLER_H
#define FG_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "config/fg_error.h"

typedef struct fg_sampling {
    float temperature;  /* >= 0; 0 = greedy */
    int top_k;          /* >= 0; 0 = off */
    float top_p;        /* (0, 1]; 1 = off */
    float min_p;        /* [0, 1); 0 = off */
    uint64_t seed;
} fg_sampling;

/* Greedy defaults. */
fg_sampling fg_sampling_default(void);
/* Errors: FG_ERR_INVALID_ARG naming the field out of range. */
fg_err fg_sampling_validate(const fg_sampling *p, fg_diag *diag);

typedef struct fg_sampler fg_sampler_t;

/* Errors: FG_ERR_INVALID_ARG (n_vocab < 1), FG_ERR_NOMEM. */
fg_err fg_sampler_create(int n_vocab, fg_sampler_t **out, fg_diag *diag);
void fg_sampler_destroy(fg_sampler_t *s);

/* Initial RNG state of a sequence sampled with this seed. */
uint64_t fg_sampler_rng_init(uint64_t seed);

/* Returns the chosen token id; advances *rng when it draws (not for greedy).
 * p must have passed fg_sampling_validate. Logits are not modified. */
int32_t fg_sampler_sample(fg_sampler_t *s, const fg_sampling *p, uint64_t *rng, const float *logits);

/* Speculative decoding's rule for one draft, a deterministic proposal (q is
 * a point mass on draft): with p the distribution fg_sampler_sample draws
 * from, returns draft with probability p(draft) (*accepted true), otherwise
 * a draw from p with draft removed and renormalised (*accepted false). The
 * result is distributed exactly as p: P(t) = p(t) for t = draft, and
 * (1 - p(d)) p(t) / (1 - p(d)) = p(t) for any other t. Greedy: the argmax,
 * accepted iff it is draft, so the tokens are those of plain decoding.
 * Advances *rng (one or two draws) unless greedy. */
int32_t fg_sampler_verify(fg_sampler_t *s, const fg_sampling *p, uint64_t *rng, const float *logits, int32_t draft,
                          bool *accepted);

#endif
