/* sha256.h: SHA-256 (FIPS 180-4), for hashing API keys before they reach
 * Redis or the tenant cache: a key is stored and compared only as the hex
 * SHA-256 of its bytes, never raw.
 *
 * Thread safety: pure functions; a context belongs to its caller.
 */
#ifndef FG_SHA256_H
#define FG_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FG_SHA256_BYTES 32
#define FG_SHA256_HEX_LEN 64 /* characters, without the terminating NUL */

typedef struct fg_sha256_ctx {
    uint32_t h[8];       /* chaining state */
    uint64_t n_bytes;    /* message length so far, bytes */
    uint8_t block[64];   /* pending input, block_len bytes used */
    size_t block_len;
} fg_sha256_ctx;

void fg_sha256_init(fg_sha256_ctx *s);
void fg_sha256_update(fg_sha256_ctx *s, const void *data, size_t len);
void fg_sha256_final(fg_sha256_ctx *s, uint8_t out[FG_SHA256_BYTES]);

/* One-shot digest of len bytes. */
void fg_sha256(const void *data, size_t len, uint8_t out[FG_SHA256_BYTES]);

/* Lower-case hex of a digest into hex (FG_SHA256_HEX_LEN + 1 bytes, NUL-terminated). */
void fg_sha256_hex(const uint8_t digest[FG_SHA256_BYTES], char hex[FG_SHA256_HEX_LEN + 1]);

/* Parses 64 hex digits (either case) into a digest; false if hex is not exactly that. */
bool fg_sha256_from_hex(const char *hex, uint8_t digest[FG_SHA256_BYTES]);

/* True when a and b are equal; the time taken does not depend on where they differ. */
bool fg_sha256_equal(const uint8_t a[FG_SHA256_BYTES], const uint8_t b[FG_SHA256_BYTES]);

#endif
