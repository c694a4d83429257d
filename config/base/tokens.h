/* tokens.h: the one growable vector of token ids.
 * Thread safety: none; a vector belongs to its owner.
 */
#ifndef FG_TOKENS_H
#define FG_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

typedef struct fg_tokens {
    int32_t *v; /* [cap], the first n in use; NULL while cap is 0 */
    size_t n, cap;
} fg_tokens;

/* Makes room for need tokens in all (capacity doubles from 64).
 * Errors: FG_ERR_NOMEM (the vector is unchanged). */
fg_err fg_tokens_reserve(fg_tokens *t, size_t need);
/* Appends ids[n]. Errors: FG_ERR_NOMEM (the vector is unchanged). */
fg_err fg_tokens_push(fg_tokens *t, const int32_t *ids, size_t n);
/* Frees the storage and leaves an empty vector. */
void fg_tokens_free(fg_tokens *t);

#endif
