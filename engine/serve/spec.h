/* spec.h: draft tokens for speculative decoding (engine_serve.c verifies
 * them): prompt lookup, an n-gram match against a session's own history.
 *
 * A decoding session feeds its sampled token and up to k drafts in one
 * forward pass; the drafts are deterministic proposals, verified by
 * fg_sampler_verify (sampler.h), so the output is that of plain decoding
 * (greedy: the same tokens; sampled: the same distribution). The other
 * source, the model's MTP block, runs through the backend
 * (fg_backend_draft, engine/backend/backend.h).
 *
 * Thread safety: pure functions.
 */
#ifndef FG_SPEC_H
#define FG_SPEC_H

#include <stdint.h>

#define FG_SPEC_MAX_DRAFTS 16     /* most drafts of one session per step (engine option spec_drafts) */
#define FG_SPEC_LOOKUP_NGRAM 3    /* longest suffix matched; shorter ones are tried after it */
#define FG_SPEC_LOOKUP_MIN 2      /* shortest: a single token recurs too often by chance (docs/benchmarks.md) */
#define FG_SPEC_LOOKUP_WINDOW 8192 /* tokens of history searched, the most recent: bounds a step's scan */

/* Prompt lookup over the sequence hist[0..n_hist) followed by next: finds the
 * most recent earlier occurrence of its last g tokens (g = FG_SPEC_LOOKUP_NGRAM
 * down to FG_SPEC_LOOKUP_MIN, the longest that occurs) and writes up to max of
 * the tokens that followed it to out. Returns how many (0: no match). */
int fg_spec_lookup(const int32_t *hist, int n_hist, int32_t next, int max, int32_t *out);

#endif
