/* redis_local.h: the redis-server flashgate starts for itself when no Redis
 * address is configured: a child process on a unix socket in a directory of
 * ours, with append-only persistence, stopped (and flushed) at exit.
 */
#ifndef FG_REDIS_LOCAL_H
#define FG_REDIS_LOCAL_H

#include <stddef.h>

#include "config/fg_error.h"

typedef struct fg_redis_local fg_redis_local_t;

/* Starts redis-server with its socket and data in dir (created if missing) and
 * waits until it answers PING. Errors: FG_ERR_IO (cannot create dir, start the
 * program, or it did not come up within 10 s). */
fg_err fg_redis_local_start(const char *dir, fg_redis_local_t **out, fg_diag *diag);
/* The socket path to give the quota module. */
const char *fg_redis_local_socket(const fg_redis_local_t *r);
/* SIGTERM (redis saves), wait, free. */
void fg_redis_local_stop(fg_redis_local_t *r);

#endif
