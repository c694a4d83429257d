/* redis_local.c: starting and stopping our own redis-server (see redis_local.h). */
#include "gateway/redis_local.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct fg_redis_local {
    pid_t pid;
    char socket[108];
};

/* mkdir -p */
static int make_dirs(const char *path)
{
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0700) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0700) && errno != EEXIST ? -1 : 0;
}

static int answers_ping(const char *socket)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectUnixWithTimeout(socket, tv);
    int ok = 0;
    if (c && !c->err) {
        redisReply *r = redisCommand(c, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ok;
}

fg_err fg_redis_local_start(const char *dir, fg_redis_local_t **out, fg_diag *diag)
{
    *out = NULL;
    if (make_dirs(dir))
        return fg_diag_set(diag, FG_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    /* redis-server changes into --dir: every path it gets must be absolute. */
    char abs[4096];
    if (!realpath(dir, abs))
        return fg_diag_set(diag, FG_ERR_IO, "cannot resolve %s: %s", dir, strerror(errno));
    dir = abs;
    fg_redis_local_t *r = calloc(1, sizeof *r);
    if (!r)
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory");
    if ((size_t)snprintf(r->socket, sizeof r->socket, "%s/redis.sock", dir) >= sizeof r->socket) {
        free(r);
        return fg_diag_set(diag, FG_ERR_IO, "the redis socket path under %s is too long for a unix socket", dir);
    }
    char logfile[4200];
    snprintf(logfile, sizeof logfile, "%s/redis.log", dir);
    unlink(r->socket);
    char *argv[] = {"redis-server", "--port", "0", "--unixsocket", r->socket, "--unixsocketperm", "700",
                    "--dir", (char *)dir, "--appendonly", "yes", "--save", "", "--daemonize", "no",
                    "--logfile", logfile, NULL};
    /* fork + exec rather than posix_spawn: the child must die with us
     * (PR_SET_PDEATHSIG, so a killed gateway leaves no redis behind), must not
     * inherit our blocked signals, and must not hold our stdout/stderr open.
     * Called before any other thread of ours starts. */
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        free(r);
        return fg_diag_set(diag, FG_ERR_IO, "cannot start redis-server: %s", strerror(err));
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, 0);
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execvp("redis-server", argv);
        _exit(127);
    }
    r->pid = pid;
    for (int i = 0; i < 200; i++) { /* up to 10 s */
        if (answers_ping(r->socket)) {
            *out = r;
            return FG_OK;
        }
        int status;
        if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
            free(r);
            if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                return fg_diag_set(diag, FG_ERR_IO, "cannot run redis-server (install the redis-server package)");
            return fg_diag_set(diag, FG_ERR_IO, "redis-server exited at start (see %s)", logfile);
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    fg_redis_local_stop(r);
    return fg_diag_set(diag, FG_ERR_IO, "redis-server did not answer on %s within 10 s", logfile);
}

const char *fg_redis_local_socket(const fg_redis_local_t *r) { return r->socket; }

void fg_redis_local_stop(fg_redis_local_t *r)
{
    if (!r)
        return;
    kill(r->pid, SIGTERM);
    int status;
    waitpid(r->pid, &status, 0);
    free(r);
}
