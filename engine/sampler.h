/* sampler.h: choosing the next token from logits.
 *
 * temperature 0 is greedy (argmax, lowest id on ties). Otherwise, in order:
 * top-k (0 = off), temperature softmax, top-p (1 = off, keeps the smallest
 * prefix of the sorted distribution whose mass reaches p), min-p (0 = off,
 * drops tokens below min_p times the best probability), then one draw from a
 * seeded generator: the same seed and logits give the same tokens.
 *
 * Owns: its scratch ([n_vocab] ids and probabilities) and RNG state.
 * Thread safety: one sampler per sequence, used by one thread at a time.
 */
#ifndef FG_SAMPLER_H
#define FG_SAMPLER_H

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

/* Errors: FG_ERR_INVALID_ARG (bad parameters), FG_ERR_NOMEM. */
fg_err fg_sampler_create(int n_vocab, const fg_sampling *p, fg_sampler_t **out, fg_diag *diag);
void fg_sampler_destroy(fg_sampler_t *s);

/* Returns the chosen token id (logits are not modified). */
int32_t fg_sampler_sample(fg_sampler_t *s, const float *logits);

#endif
