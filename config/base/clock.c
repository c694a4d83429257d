/* clock.c: see clock.h. */
#include "config/base/clock.h"

static struct timespec now(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts;
}

double fg_clock_mono_s(void)
{
    struct timespec ts = now(CLOCK_MONOTONIC);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int64_t fg_clock_mono_us(void)
{
    struct timespec ts = now(CLOCK_MONOTONIC);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

double fg_clock_real_s(void)
{
    struct timespec ts = now(CLOCK_REALTIME);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int64_t fg_clock_real_us(void)
{
    struct timespec ts = now(CLOCK_REALTIME);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct timespec fg_clock_deadline(double seconds)
{
    struct timespec ts = now(CLOCK_REALTIME);
    long ns = ts.tv_nsec + (long)((seconds - (double)(time_t)seconds) * 1e9);
    ts.tv_sec += (time_t)seconds + ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    return ts;
}
