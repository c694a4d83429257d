/* random.h: random bytes from the kernel (getrandom). Any thread.
 */
#ifndef FG_RANDOM_H
#define FG_RANDOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fills buf[n] with bytes fit for secrets and unguessable ids (admin keys,
 * session ids); blocks only until the kernel's pool is first initialised
 * after boot. False when the kernel refuses (buf is then unusable). */
bool fg_random_bytes(void *buf, size_t n);

/* A 64-bit seed for hash tables and instance ids: random when the kernel has
 * entropy without waiting, otherwise the clocks, the pid and an address
 * mixed. Never fails, never blocks; not for secrets. */
uint64_t fg_random_seed(void);

#endif
