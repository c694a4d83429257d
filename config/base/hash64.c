/* hash64.c: see hash64.h. The constants are large odd numbers with well mixed
 * bits (from the 64-bit golden ratio and primes); little-endian loads. */
#include "config/base/hash64.h"

#include <string.h>

#define K1 0x9E3779B97F4A7C15ull
#define K2 0xC2B2AE3D27D4EB4Full
#define K3 0x165667B19E3779F9ull
#define K4 0xD6E8FEB86659FD93ull

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t lane_step(uint64_t acc, uint64_t w)
{
    acc += w * K2;
    acc = rotl(acc, 31);
    return acc * K1;
}

static inline uint64_t avalanche(uint64_t x)
{
    x ^= x >> 33;
    x *= K2;
    x ^= x >> 29;
    x *= K3;
    x ^= x >> 32;
    return x;
}

void fg_hash64_init(fg_hash64_state *h, uint64_t seed)
{
    memset(h, 0, sizeof *h);
    h->seed = seed;
    h->lane[0] = seed + K1 + K2;
    h->lane[1] = seed + K2;
    h->lane[2] = seed;
    h->lane[3] = seed - K1;
}

static void stripe(fg_hash64_state *h, const uint8_t *p)
{
    for (int i = 0; i < 4; i++)
        h->lane[i] = lane_step(h->lane[i], load64(p + 8 * i));
}

void fg_hash64_update(fg_hash64_state *h, const void *data, size_t n)
{
    const uint8_t *p = data;
    h->total += n;
    if (h->buf_n) {
        size_t take = 32 - h->buf_n < n ? 32 - h->buf_n : n;
        memcpy(h->buf + h->buf_n, p, take);
        h->buf_n += take;
        p += take;
        n -= take;
        if (h->buf_n < 32)
            return;
        stripe(h, h->buf);
        h->buf_n = 0;
    }
    for (; n >= 32; p += 32, n -= 32)
        stripe(h, p);
    memcpy(h->buf, p, n);
    h->buf_n = n;
}

uint64_t fg_hash64_final(const fg_hash64_state *h)
{
    uint64_t acc;
    if (h->total >= 32) {
        acc = rotl(h->lane[0], 1) + rotl(h->lane[1], 7) + rotl(h->lane[2], 12) + rotl(h->lane[3], 18);
        for (int i = 0; i < 4; i++)
            acc = (acc ^ lane_step(0, h->lane[i])) * K1 + K4;
    } else {
        acc = h->seed + K3;
    }
    acc += h->total;
    const uint8_t *p = h->buf;
    size_t n = h->buf_n;
    for (; n >= 8; p += 8, n -= 8)
        acc = rotl(acc ^ lane_step(0, load64(p)), 27) * K1 + K4;
    for (; n > 0; p++, n--)
        acc = rotl(acc ^ (*p * K3), 11) * K1;
    return avalanche(acc);
}

uint64_t fg_hash64(const void *data, size_t n, uint64_t seed)
{
    fg_hash64_state h;
    fg_hash64_init(&h, seed);
    fg_hash64_update(&h, data, n);
    return fg_hash64_final(&h);
}

uint64_t fg_fnv1a64_add(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * FG_FNV1A64_PRIME;
    return h;
}

uint64_t fg_fnv1a64(const void *data, size_t n) { return fg_fnv1a64_add(FG_FNV1A64_INIT, data, n); }
