/* bench_common.h: what the benchmark tools share: a clock, medians and
 * percentiles, the machine's cache sizes and its read bandwidth over a given
 * working set measured with the engine's own worker pool, and the rule that
 * names which limit a rate is compared with (bench_share). Header-only because
 * each file in engine/tools/ is its own program. */
#ifndef FG_BENCH_COMMON_H
#define FG_BENCH_COMMON_H

#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

#if defined(__x86_64__)
/* The sums with the widest loads this CPU has, so the bandwidth is the
 * memory's, not a narrow loop's: the products read with AVX-512 loads and
 * would otherwise beat the "limit". Chosen at run time (target attributes). */
__attribute__((target("avx512f"))) static inline uint64_t bw_sum_avx512(const uint64_t *p, long b, long e)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (long i = b; i < e; i += 32) {
        s0 = _mm512_add_epi64(s0, _mm512_loadu_si512((const void *)(p + i)));
        s1 = _mm512_add_epi64(s1, _mm512_loadu_si512((const void *)(p + i + 8)));
        s2 = _mm512_add_epi64(s2, _mm512_loadu_si512((const void *)(p + i + 16)));
        s3 = _mm512_add_epi64(s3, _mm512_loadu_si512((const void *)(p + i + 24)));
    }
    uint64_t l[8], r = 0; /* summed unsigned: the sums wrap (the intrinsic's reduction is signed) */
    _mm512_storeu_si512((void *)l, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    for (int k = 0; k < 8; k++)
        r += l[k];
    return r;
}

__attribute__((target("avx2"))) static inline uint64_t bw_sum_avx2(const uint64_t *p, long b, long e)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (long i = b; i < e; i += 16) {
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t l[4], r = 0;
    _mm256_storeu_si256((__m256i *)l, _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    for (int k = 0; k < 4; k++)
        r += l[k];
    return r;
}
#endif

static inline void bw_read(void *ctx, int ith, int nth)
{
    bw_job *j = ctx;
    long b, e;
    fg_pool_split((long)j->n, 64, ith, nth, &b, &e); /* multiples of 64 words: whole steps of every loop */
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        j->sums[ith & 63] = bw_sum_avx512(j->buf, b, e);
        return;
    }
    if (__builtin_cpu_supports("avx2")) {
        j->sums[ith & 63] = bw_sum_avx2(j->buf, b, e);
        return;
    }
#endif
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (long i = b; i < e; i += 4) {
        s0 += j->buf[i];
        s1 += j->buf[i + 1];
        s2 += j->buf[i + 2];
        s3 += j->buf[i + 3];
    }
    j->sums[ith & 63] = s0 ^ s1 ^ s2 ^ s3;
}

/* Read bandwidth over a working set of `bytes` (rounded up to whole 4 KiB),
 * bytes/s, median of reps timings: one untimed pass brings the set into
 * whatever cache level holds it, then each timing reads it as many times as
 * make ~256 MiB, so a cache-resident set is measured at that cache's rate.
 * A pool of one thread (which runs jobs on the caller) is timed in the
 * caller's CPU time, as the one-thread products of bench-matmul are (on a
 * shared machine wall time would count the neighbours); larger pools in wall
 * time. 0 when out of memory. */
static inline double measure_bandwidth_ws(fg_pool_t *pool, size_t bytes, int reps)
{
    bytes = (bytes + 4095) / 4096 * 4096;
    bw_job j = {.n = bytes / sizeof(uint64_t)};
    uint64_t *buf = malloc(bytes);
    if (!buf)
        return 0;
    memset(buf, 1, bytes);
    j.buf = buf;
    const size_t passes = bytes >= ((size_t)256 << 20) ? 1 : ((size_t)256 << 20) / bytes;
    fg_pool_run(pool, bw_read, &j);
    double r[32];
    reps = reps < 1 ? 1 : reps > 32 ? 32 : reps;
    const int cpu = fg_pool_size(pool) == 1;
    for (int i = 0; i < reps; i++) {
        double t = cpu ? thread_cpu_s() : fg_clock_mono_s();
        for (size_t p = 0; p < passes; p++)
            fg_pool_run(pool, bw_read, &j);
        r[i] = (double)(bytes * passes) / ((cpu ? thread_cpu_s() : fg_clock_mono_s()) - t);
    }
    free(buf);
    return median(r, reps);
}

/* ---- cache sizes (sysfs of cpu0, else sysconf): bytes per instance ---- */
typedef struct fg_bench_caches {
    size_t l1d, l2, l3; /* 0 where unknown; l3 is shared, l1d and l2 per core here */
} fg_bench_caches;

static inline size_t cache_sysfs(int level)
{
    for (int i = 0; i < 8; i++) {
        char path[96], buf[32];
        int lv = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        lv = fscanf(f, "%d", &lv) == 1 ? lv : 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        f = fopen(path, "r");
        const int data = f && fgets(buf, sizeof buf, f) && strncmp(buf, "Instruction", 11) != 0;
        if (f)
            fclose(f);
        if (lv != level || !data)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        unsigned long v = 0;
        char unit = 0;
        const int n = f ? fscanf(f, "%lu%c", &v, &unit) : 0;
        if (f)
            fclose(f);
        if (n >= 1)
            return (size_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1048576u : 1u);
    }
    return 0;
}

static inline fg_bench_caches bench_caches(void)
{
    fg_bench_caches c = {cache_sysfs(1), cache_sysfs(2), cache_sysfs(3)};
#ifdef _SC_LEVEL1_DCACHE_SIZE
    const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE),
               l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    c.l1d = c.l1d ? c.l1d : l1 > 0 ? (size_t)l1 : 0;
    c.l2 = c.l2 ? c.l2 : l2 > 0 ? (size_t)l2 : 0;
    c.l3 = c.l3 ? c.l3 : l3 > 0 ? (size_t)l3 : 0;
#endif
    return c;
}

/* Which level a working set of `bytes` read by `threads` cores lives in:
 * "L2" when each core's share fits its L2, "LLC" when the whole set fits the
 * last-level cache, else "DRAM". */
static inline const char *bench_level(const fg_bench_caches *c, size_t bytes, int threads)
{
    if (c->l2 && bytes / (size_t)(threads > 0 ? threads : 1) <= c->l2)
        return "L2";
    if (c->l3 && bytes <= c->l3)
        return "LLC";
    return "DRAM";
}

/* DRAM read bandwidth: a set four times the last-level cache, 1 GiB at least. */
static inline double measure_bandwidth(fg_pool_t *pool, int reps)
{
    const fg_bench_caches c = bench_caches();
    const size_t bytes = 4 * c.l3 > ((size_t)1 << 30) ? 4 * c.l3 : (size_t)1 << 30;
    return measure_bandwidth_ws(pool, bytes, reps);
}

/* ---- a rate against the limits that bound it ----
 * Each limit is an upper bound on the rate if its premise holds (weights from
 * DRAM; from the cache level the working set fits; the product kernel's
 * cache-resident peak). The rate is reported against the tightest limit it
 * does not exceed: a rate above a limit proves that limit's premise false
 * here (weights cached, not streamed), so the next explanation is named
 * instead, and no share above 100 % is ever printed. A rate at most
 * BENCH_NOISE above a limit is "at" that limit (100 %): two timings on a
 * shared machine differ by that much. */
#define BENCH_NOISE 0.05

typedef struct fg_bench_limit {
    const char *name;  /* "DRAM bandwidth", "LLC bandwidth", "compute" */
    double rate;       /* the bound, in the rate's units; <= 0: does not apply */
} fg_bench_limit;

/* Writes "NN % of the <name> limit (R)" (with the limits the rate broke, if
 * any) or "above every measured limit ..." into out; returns the share in
 * [0, 1] of the limit that applies, or -1 when none does. *which (may be
 * NULL) gets that limit, or NULL. */
static inline double bench_share(double rate, const fg_bench_limit *lims, int n, char *out, size_t cap,
                                 const fg_bench_limit **which)
{
    const fg_bench_limit *best = NULL, *broken = NULL;
    for (int i = 0; i < n; i++) {
        if (lims[i].rate <= 0)
            continue;
        if (rate <= lims[i].rate * (1 + BENCH_NOISE)) {
            if (!best || lims[i].rate < best->rate)
                best = &lims[i];
        } else if (!broken || lims[i].rate > broken->rate) {
            broken = &lims[i];
        }
    }
    if (which)
        *which = best;
    const double share = best ? (rate < best->rate ? rate / best->rate : 1.0) : -1.0;
    if (best && broken)
        snprintf(out, cap, "%.0f %% of the %s limit (%.1f; above the %s limit %.1f, so that premise fails here)",
                 100.0 * share, best->name, best->rate, broken->name, broken->rate);
    else if (best)
        snprintf(out, cap, "%.0f %% of the %s limit (%.1f)", 100.0 * share, best->name, best->rate);
    else if (broken)
        snprintf(out, cap, "above every measured limit (largest: %s %.1f): the limits were measured under a "
                 "different load, rerun", broken->name, broken->rate);
    else
        snprintf(out, cap, "no limit measured");
    return share;
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
