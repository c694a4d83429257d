/* redis_fixture.h: a private redis-server per test, and a few helpers.
 *
 * Each test starts its own redis-server on a unix socket in a fresh temp
 * directory (no TCP port to collide on), waits for PING, and kills it at the
 * end; the server dies with the test process too (PR_SET_PDEATHSIG). With
 * aof set, data survives a SIGKILL (appendfsync always), so a restart on the
 * same socket and directory brings it back: what a crashed Redis with
 * persistence does.
 */
#ifndef FG_REDIS_FIXTURE_H
#define FG_REDIS_FIXTURE_H

#include <stdbool.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "config/base/clock.h"

#define FG_REDIS_FIXTURE_ARGS 16

typedef struct fg_redis_fixture {
    char dir[256];     /* temp directory (socket, AOF, log) */
    char sock[320];    /* unix socket path */
    pid_t pid;         /* 0: not running */
    bool aof;
    int port;          /* loopback TCP port as well, 0: the unix socket only */
    bool conf;         /* dir/redis.conf is given first (a sentinel's writable config) */
    char args[FG_REDIS_FIXTURE_ARGS][96]; /* extra redis-server options */
    int n_args;
} fg_redis_fixture;

/* Exit status for "redis-server is not installed": CTest SKIP_RETURN_CODE. */
#define FG_REDIS_SKIP 77

/* Starts a server in a new temp dir. False (with a message) if it cannot. */
bool fg_redis_start(fg_redis_fixture *fx, bool aof);
/* A server listening on 127.0.0.1:port too (cluster nodes, replicas,
 * sentinels), with extra options args (NULL-terminated, copied); conf, when
 * not NULL, is written to dir/redis.conf and given first. False (with a
 * message) if it cannot start, e.g. the port is taken. */
bool fg_redis_start_port(fg_redis_fixture *fx, int port, const char *conf, const char *const *args, bool aof);
/* Sends sig (SIGKILL, SIGTERM) and reaps the server. */
void fg_redis_kill(fg_redis_fixture *fx, int sig);
/* Starts the server again on the same socket and directory. */
bool fg_redis_restart(fg_redis_fixture *fx);
/* Kills the server and removes the directory. */
void fg_redis_stop(fg_redis_fixture *fx);

/* A direct client to the fixture (for checks); NULL on failure. */
redisContext *fg_redis_client(const fg_redis_fixture *fx);
/* Integer result of a command (strings parsed), or -1 on error or nil. */
long long fg_redis_int(redisContext *c, const char *fmt, ...);
/* "calls" of one command in INFO commandstats (e.g. "evalsha"), -1 on error. */
long long fg_redis_cmdstat(redisContext *c, const char *command);

void fg_sleep_ms(double ms);

#endif
