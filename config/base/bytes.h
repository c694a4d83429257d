/* bytes.h: a growing NUL-terminated byte buffer (buf, len, cap held by the
 * caller), the one append the gateway's text and reply builders share.
 * Pure libc; any thread (one caller per buffer).
 */
#ifndef FG_BYTES_H
#define FG_BYTES_H

#include <stdbool.h>
#include <stddef.h>

/* Appends n bytes of src to *buf (len bytes used of cap, NUL after them),
 * doubling the capacity from at least 256 as needed. False on out of memory
 * or size overflow: nothing appended, the buffer as it was. */
bool fg_bytes_append(char **buf, size_t *len, size_t *cap, const void *src, size_t n);

#endif
