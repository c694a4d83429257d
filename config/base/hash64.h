/* hash64.h: our two 64-bit non-cryptographic hashes.
 *
 * fg_hash64, for session file checksums and the prefix cache's chained page
 * hashes (long inputs, where its four lanes pay off):
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

/* FNV-1a (64-bit), for short keys (names, strings in hash tables) and for
 * the model identity that cache files record, whose value must never change:
 * h = (h ^ byte) * FG_FNV1A64_PRIME per byte from FG_FNV1A64_INIT.
 * fg_fnv1a64_add continues h over more bytes, so split input hashes as one. */
#define FG_FNV1A64_INIT 0xcbf29ce484222325ull
#define FG_FNV1A64_PRIME 0x100000001b3ull
uint64_t fg_fnv1a64_add(uint64_t h, const void *data, size_t n);
/* fg_fnv1a64_add(FG_FNV1A64_INIT, data, n). */
uint64_t fg_fnv1a64(const void *data, size_t n);

#endif
