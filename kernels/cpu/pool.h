/* pool.h: a fixed pool of worker threads that run one data-parallel job at a time.
 *
 * fg_pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) on every thread of the
 * pool (the caller is thread 0) and returns when all have finished. Workers
 * spin briefly between jobs (a decode step issues hundreds of jobs per token)
 * and then sleep on a futex/condvar so an idle engine costs no CPU.
 *
 * Thread safety: fg_pool_run may be called from one thread at a time (the
 * owner, e.g. the engine's step thread). create/destroy from the owner.
 */
#ifndef FG_POOL_H
#define FG_POOL_H

typedef struct fg_pool fg_pool_t;

typedef void (*fg_pool_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0 means one per online CPU. Returns NULL on allocation or
 * thread-creation failure. */
fg_pool_t *fg_pool_create(int n_threads);
void fg_pool_destroy(fg_pool_t *pool);
int fg_pool_size(const fg_pool_t *pool);

/* Runs fn on all threads; pool may be NULL (runs fn(ctx, 0, 1) inline). */
void fg_pool_run(fg_pool_t *pool, fg_pool_fn fn, void *ctx);

/* Splits [0, n) into nth near-equal contiguous parts, rounded to multiples of
 * `grain`; writes thread ith's [*begin, *end). */
void fg_pool_split(long n, long grain, int ith, int nth, long *begin, long *end);

#endif
