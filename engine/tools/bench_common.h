/* bench_common.h: what the benchmark tools share: a clock, medians and
 * percentiles, the machine's read bandwidth measured with the engine's own
 * worker pool (the limit decode is compared with), the machine's name and
 * load, and the process's resident memory. Header-only because
 * each file in engine/tools/ is its own program. */
#ifndef FG_BENCH_COMMON_H
#define FG_BENCH_COMMON_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "kernels/cpu/pool.h"

/* The engine's wakeup callback for a tool that polls sessions on its main
 * thread: the callback marks, the main thread waits (at most timeout_ms, so
 * a lost wakeup only delays a poll). */
typedef struct fg_bench_waker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;
} fg_bench_waker;

static inline void fg_bench_wake(void *user)
{
    fg_bench_waker *w = user;
    pthread_mutex_lock(&w->mu);
    w->pending = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static inline void fg_bench_wait(fg_bench_waker *w, long timeout_ms)
{
    pthread_mutex_lock(&w->mu);
    if (!w->pending) {
        struct timespec ts = fg_clock_deadline(timeout_ms / 1000.0);
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    w->pending = 0;
    pthread_mutex_unlock(&w->mu);
}

/* CPU seconds used so far by the calling thread / by every thread of this process. */
static inline double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static inline double thread_cpu_s(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }
static inline double process_cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

/* A reproducible value in [-0.5, 0.5) from a 64-bit LCG state. */
static inline float next_value(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(*s >> 40) / 16777216.0f - 0.5f;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- memory bandwidth: every thread sums its share of a large buffer ---- */
typedef struct bw_job {
    const uint64_t *buf;
    size_t n;
    uint64_t sums[64];
} bw_job;

static inline void bw_read(void *ctx, int ith, int nth)
{
    bw_job *j = ctx;
    long b, e;
    fg_pool_split((long)j->n, 64, ith, nth, &b, &e);
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (long i = b; i < e; i += 4) {
        s0 += j->buf[i];
        s1 += j->buf[i + 1];
        s2 += j->buf[i + 2];
        s3 += j->buf[i + 3];
    }
    j->sums[ith & 63] = s0 ^ s1 ^ s2 ^ s3;
}

static inline double measure_bandwidth(fg_pool_t *pool, int reps)
{
    const size_t bytes = (size_t)1 << 30;
    bw_job j = {.n = bytes / sizeof(uint64_t)};
    uint64_t *buf = malloc(bytes);
    if (!buf)
        return 0;
    memset(buf, 1, bytes);
    j.buf = buf;
    double r[32];
    for (int i = 0; i < reps; i++) {
        double t = fg_clock_mono_s();
        fg_pool_run(pool, bw_read, &j);
        r[i] = bytes / (fg_clock_mono_s() - t);
    }
    free(buf);
    return median(r, reps);
}


/* The 1-minute load average (/proc/loadavg); -1 when unreadable. Printed
 * beside figures: on a shared machine it says how much of it was ours. */
static inline double fg_bench_load1(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

/* The process's resident memory now (VmRSS), bytes; 0 when unreadable. */
static inline uint64_t fg_bench_rss_bytes(void)
{
    unsigned long long kb = 0;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* One line naming the machine: CPU model, online cores, load averages. */
static inline void fg_bench_print_machine(void)
{
    char line[512], model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(model, sizeof model, "%s", colon + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    }
    if (f)
        fclose(f);
    char load[128] = "unknown";
    f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fgets(load, sizeof load, f))
            load[strcspn(load, "\n")] = 0;
        fclose(f);
    }
    printf("machine: \"%s\", %ld cores online; load average %s\n", model, sysconf(_SC_NPROCESSORS_ONLN), load);
}

/* The p-quantile (0..1) of v (sorted in place); 0 when n is 0. */
static inline double percentile(double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return v[(size_t)(p * (double)(n - 1) + 0.5)];
}

#endif
