/* redis_local.h: the redis-server flashgate starts for itself when no Redis
 * address is configured: a child process on a unix socket in a directory of
 * ours, with append-only persistence, supervised (restarted with backoff when
 * it dies) and stopped (flushed) at exit.
 *
 * Each child (generation) listens on a socket of its own,
 * <dir>/redis-<gateway pid>-<generation>.sock, and <dir>/redis.sock is a
 * symlink to the newest one: the quota module connects to the link, and a
 * dying child (of this gateway or of a crashed earlier one), which removes
 * its socket file on the way out, removes only its own.
 *
 * Threads: start on the main thread before other threads run (the first
 * child is forked then); check, stats and stop on one thread at a time (the
 * gateway's service thread calls check from a timer; stop runs at exit).
 */
#ifndef FG_REDIS_LOCAL_H
#define FG_REDIS_LOCAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

typedef struct fg_redis_local fg_redis_local_t;

/* Starts redis-server with its socket and data in dir (created if missing) and
 * waits until it answers PING. Errors: FG_ERR_IO (cannot create dir, start the
 * program, the socket path is too long, or it did not come up within 10 s),
 * FG_ERR_NOMEM. */
fg_err fg_redis_local_start(const char *dir, fg_redis_local_t **out, fg_diag *diag);
/* The socket path to give the quota module: the link to the newest child's socket. */
const char *fg_redis_local_socket(const fg_redis_local_t *r);
/* Supervision, never blocking: reaps a child that exited (logged
 * redis_exited), and starts the next one once its backoff is over (logged
 * redis_restarted): 0.1 s after the first death, doubling to 30 s while
 * children keep dying within 30 s of their start. now: monotonic seconds.
 * Call it a few times a second. */
void fg_redis_local_check(fg_redis_local_t *r, double now);

typedef struct fg_redis_local_stats {
    bool running;        /* a child is running (it may still be loading its data) */
    uint64_t restarts;   /* children started after the first */
    uint64_t exits;      /* children that died on their own */
} fg_redis_local_stats;

void fg_redis_local_get_stats(const fg_redis_local_t *r, fg_redis_local_stats *st);
/* SIGTERM (redis saves), wait, free. NULL is a no-op. */
void fg_redis_local_stop(fg_redis_local_t *r);

#endif
