/* pool.c: the persistent worker pool of pool.h.
 *
 * Protocol (all shared state is C11 atomics or guarded by `mu`):
 *   - The owner publishes a job by writing fn/ctx (plain fields), setting
 *     `pending` to the number of workers, then incrementing `gen` with release
 *     order. A worker that observes a new `gen` (acquire) therefore sees fn/ctx.
 *   - Each worker runs fn(ctx, ith, n) and decrements `pending` (release). The
 *     owner runs share 0 itself, then waits for `pending == 0` (acquire), so
 *     everything the workers wrote happens-before fg_pool_run returns, and no
 *     worker reads fn/ctx again until the next `gen`: the owner may rewrite them.
 *   - Between jobs a worker spins on `gen` for FG_POOL_SPIN_NS, then sleeps on
 *     `cv`. Lost wake-ups are excluded Dekker-style with seq_cst operations:
 *     a sleeper increments `n_sleeping` and re-reads `gen` under `mu` before
 *     waiting; the owner increments `gen` and then reads `n_sleeping`, taking
 *     `mu` to broadcast only when someone may be asleep. At least one of the
 *     two sees the other's write, and `mu` orders the broadcast after the check.
 *
 * Hot fields live on separate cache lines: `gen` is read by every spinning
 * worker, `pending` is written by every finishing worker.
 */
#include "kernels/cpu/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* How long an idle worker polls before sleeping: long enough to cover the gap
 * between the matrix products of one decode step, short enough that an idle
 * engine stops burning CPU almost at once. */
#define FG_POOL_SPIN_NS 150000
/* Polling is pure (pause only) for this long, then yields the CPU every few
 * polls: when there are more runnable threads than cores, the thread we wait
 * for may need ours. */
#define FG_POOL_PURE_SPIN_NS 20000
#define FG_POOL_MAX_THREADS 512

struct fg_pool_worker {
    struct fg_pool *pool;
    int ith;
};

struct fg_pool {
    alignas(64) atomic_uint gen;   /* job generation; bumped once per job */
    atomic_int stop;               /* set once by destroy, published with a gen bump */
    atomic_int n_sleeping;         /* workers inside (or entering) cond_wait */
    fg_pool_fn fn;                 /* the current job: written by the owner only while */
    void *ctx;                     /* no worker can read them (see protocol above) */

    alignas(64) atomic_int pending; /* workers still running the current job */

    alignas(64) int n;             /* threads, the owner included */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *threads;            /* n - 1 workers */
    struct fg_pool_worker *workers;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One poll of a wait loop: pause, and every 16 polls read the clock; past
 * FG_POOL_PURE_SPIN_NS also yield every 64 polls. Returns the time waited so far
 * (updated every 16 polls). */
typedef struct backoff {
    uint64_t start, waited;
    unsigned polls;
} backoff;

static uint64_t backoff_poll(backoff *b)
{
    cpu_relax();
    if ((++b->polls & 15) == 0) {
        const uint64_t t = now_ns();
        if (b->start == 0)
            b->start = t;
        b->waited = t - b->start;
        if (b->waited > FG_POOL_PURE_SPIN_NS && (b->polls & 63) == 0)
            sched_yield();
    }
    return b->waited;
}

/* Waits until gen != seen; returns the new gen. Polls, then sleeps. */
static unsigned worker_wait(struct fg_pool *p, unsigned seen)
{
    unsigned g;
    backoff b = {0, 0, 0};
    for (;;) {
        g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen)
            return g;
        if (backoff_poll(&b) > FG_POOL_SPIN_NS)
            break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleeping, 1); /* seq_cst: pairs with the owner's gen bump */
    while ((g = atomic_load(&p->gen)) == seen)
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->n_sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg)
{
    struct fg_pool_worker *w = arg;
    struct fg_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        seen = worker_wait(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            break;
        p->fn(p->ctx, w->ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
    return NULL;
}

static void publish(struct fg_pool *p)
{
    atomic_fetch_add(&p->gen, 1); /* seq_cst: release for fn/ctx/pending, and Dekker with n_sleeping */
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

fg_pool_t *fg_pool_create(int n_threads)
{
    if (n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)nc : 1;
    }
    if (n_threads > FG_POOL_MAX_THREADS)
        n_threads = FG_POOL_MAX_THREADS;
    struct fg_pool *p = aligned_alloc(64, sizeof *p);
    if (!p)
        return NULL;
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->pending, 0);
    p->fn = NULL;
    p->ctx = NULL;
    p->n = n_threads;
    p->threads = NULL;
    p->workers = NULL;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            p->n = 1;
            fg_pool_destroy(p);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            p->workers[i - 1].pool = p;
            p->workers[i - 1].ith = i;
            if (pthread_create(&p->threads[i - 1], NULL, worker_main, &p->workers[i - 1]) != 0) {
                p->n = i; /* destroy joins the i - 1 workers already started */
                fg_pool_destroy(p);
                return NULL;
            }
        }
    }
    return p;
}

void fg_pool_destroy(fg_pool_t *p)
{
    if (!p)
        return;
    if (p->n > 1) {
        atomic_store_explicit(&p->stop, 1, memory_order_relaxed); /* published by the gen bump */
        publish(p);
        /* a worker that slept through the bump still wakes: it re-checks gen under mu */
        for (int i = 0; i < p->n - 1; i++)
            pthread_join(p->threads[i], NULL);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p);
}

int fg_pool_size(const fg_pool_t *pool)
{
    return pool ? pool->n : 1;
}

void fg_pool_run(fg_pool_t *p, fg_pool_fn fn, void *ctx)
{
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    publish(p);
    fn(ctx, 0, p->n);
    backoff b = {0, 0, 0};
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0)
        backoff_poll(&b);
}

void fg_pool_split(long n, long grain, int ith, int nth, long *begin, long *end)
{
    if (grain < 1)
        grain = 1;
    if (nth < 1)
        nth = 1;
    if (n <= 0 || ith < 0 || ith >= nth) {
        *begin = *end = n > 0 ? n : 0;
        return;
    }
    long units = (n + grain - 1) / grain;
    long per = units / nth, rem = units % nth;
    long ub = ith * per + (ith < rem ? ith : rem);
    long ue = ub + per + (ith < rem ? 1 : 0);
    long b = ub * grain, e = ue * grain;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
}
