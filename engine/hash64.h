/* hash64.h: our 64-bit non-cryptographic hash, for session file checksums and
 * the prefix cache's chained page hashes.
 *
 * Four 64-bit lanes take 32-byte stripes (multiply, rotate, multiply), then a
 * tail and an avalanche finish; streaming and one-shot give the same value for
 * the same bytes however they are split. Strong enough that a random change
 * to a file goes unnoticed with probability about 2^-64; not for adversaries
 * (the prefix cache compares the tokens of every hit anyway).
 *
 * Thread safety: pure; a state belongs to its caller.
 */
#ifndef FG_HASH64_H
#define FG_HASH64_H

#include <stddef.h>
#include <stdint.h>

typedef struct fg_hash64_state {
    uint64_t lane[4];
    uint64_t total;      /* bytes fed */
    uint8_t buf[32];     /* an incomplete stripe */
    size_t buf_n;
    uint64_t seed;
} fg_hash64_state;

void fg_hash64_init(fg_hash64_state *h, uint64_t seed);
void fg_hash64_update(fg_hash64_state *h, const void *data, size_t n);
uint64_t fg_hash64_final(const fg_hash64_state *h);
/* One call: init, update, final. */
uint64_t fg_hash64(const void *data, size_t n, uint64_t seed);

#endif
