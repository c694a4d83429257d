/* random.c: see random.h. */
#include "config/base/random.h"

#include <errno.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

bool fg_random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(p + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t fg_random_seed(void)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed)
        return seed;
    /* No entropy yet (early boot): the clocks, the pid and ASLR. */
    struct timespec m, r;
    clock_gettime(CLOCK_MONOTONIC, &m);
    clock_gettime(CLOCK_REALTIME, &r);
    seed = (uint64_t)(uintptr_t)&seed ^ ((uint64_t)m.tv_nsec << 20) ^ (uint64_t)m.tv_sec ^
           ((uint64_t)r.tv_nsec * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)getpid() << 32);
    return mix64(seed);
}
