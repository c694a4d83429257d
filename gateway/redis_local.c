/* redis_local.c: starting, supervising and stopping our own redis-server (see
 * redis_local.h). */
#include "gateway/redis_local.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "gateway/log.h"

#define BACKOFF_MIN_S 0.1
#define BACKOFF_MAX_S 30.0
#define STABLE_S 30.0 /* a child that ran this long resets the backoff */
#define SOCK_MAX 108  /* sun_path */

struct fg_redis_local {
    char dir[4096];          /* absolute: redis-server changes into it */
    char prog[4096];         /* redis-server, resolved in PATH before any fork */
    char logfile[4200];
    char link[SOCK_MAX];     /* <dir>/redis.sock, what the quota module connects to */
    char socket[SOCK_MAX];   /* the current child's own socket */
    pid_t pid;               /* the current child; 0 while none runs */
    unsigned gen;            /* children started so far */
    double started_at;       /* monotonic seconds */
    double restart_at;       /* while none runs: when the next starts */
    double backoff_s;        /* the wait before the next start; 0 before the first death */
    uint64_t restarts, exits;
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

/* The program's path: the child may only call async-signal-safe functions
 * (the gateway has threads when it restarts one), so no execvp there. */
static bool find_program(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n && (size_t)snprintf(out, cap, "%.*s/%s", (int)n, p, name) < cap && access(out, X_OK) == 0)
            return true;
        p += n + (end ? 1 : 0);
    }
    return false;
}

/* Sockets of earlier generations (a crashed gateway's, a killed child's) are
 * nobody's now: a child that is still dying removes only its own. */
static void remove_stale_sockets(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        int pid, end = 0;
        unsigned gen;
        if (sscanf(de->d_name, "redis-%d-%u.sock%n", &pid, &gen, &end) == 2 && de->d_name[end] == 0) {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

/* Points the link at the current child's socket (atomically: a new link renamed over the old). */
static void point_link(fg_redis_local_t *r)
{
    char tmp[SOCK_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.new", r->link);
    unlink(tmp);
    const char *base = strrchr(r->socket, '/') + 1;
    if (symlink(base, tmp) != 0 || rename(tmp, r->link) != 0) {
        fg_log(FG_LOG_ERROR, "redis_link_failed", "\"error\":\"%s\"", strerror(errno));
        unlink(tmp);
    }
}

/* Forks the next generation; does not wait for it. */
static fg_err spawn(fg_redis_local_t *r, fg_diag *diag)
{
    char sock[SOCK_MAX];
    unsigned gen = r->gen + 1;
    if ((size_t)snprintf(sock, sizeof sock, "%s/redis-%d-%u.sock", r->dir, (int)getpid(), gen) >= sizeof sock)
        return fg_diag_set(diag, FG_ERR_IO, "the redis socket path under %s is too long for a unix socket", r->dir);
    unlink(sock);
    char *argv[] = {"redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
                    "--dir", r->dir, "--appendonly", "yes", "--save", "", "--daemonize", "no",
                    "--logfile", r->logfile, NULL};
    /* fork + exec rather than posix_spawn: the child must die with us
     * (PR_SET_PDEATHSIG, so a killed gateway leaves no redis behind; the
     * forking thread is the main thread, which exits last), must not inherit
     * our blocked signals, and must not hold our stdout/stderr open. */
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return fg_diag_set(diag, FG_ERR_IO, "cannot start redis-server: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1); /* the gateway died before the line above */
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
        execv(r->prog, argv);
        _exit(127);
    }
    r->gen = gen;
    r->pid = pid;
    r->started_at = fg_clock_mono_s();
    memcpy(r->socket, sock, sizeof sock);
    point_link(r);
    return FG_OK;
}

fg_err fg_redis_local_start(const char *dir, fg_redis_local_t **out, fg_diag *diag)
{
    *out = NULL;
    if (make_dirs(dir))
        return fg_diag_set(diag, FG_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    fg_redis_local_t *r = calloc(1, sizeof *r);
    if (!r)
        return fg_diag_set(diag, FG_ERR_NOMEM, "out of memory");
    if (!realpath(dir, r->dir)) {
        free(r);
        return fg_diag_set(diag, FG_ERR_IO, "cannot resolve %s: %s", dir, strerror(errno));
    }
    if (!find_program("redis-server", r->prog, sizeof r->prog)) {
        free(r);
        return fg_diag_set(diag, FG_ERR_IO, "cannot run redis-server (install the redis-server package)");
    }
    snprintf(r->logfile, sizeof r->logfile, "%s/redis.log", r->dir);
    if ((size_t)snprintf(r->link, sizeof r->link, "%s/redis.sock", r->dir) >= sizeof r->link) {
        free(r);
        return fg_diag_set(diag, FG_ERR_IO, "the redis socket path under %s is too long for a unix socket", dir);
    }
    remove_stale_sockets(r->dir);
    fg_err err = spawn(r, diag);
    if (err != FG_OK) {
        free(r);
        return err;
    }
    for (int i = 0; i < 200; i++) { /* up to 10 s */
        if (answers_ping(r->link)) {
            *out = r;
            return FG_OK;
        }
        int status;
        if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
            unlink(r->socket);
            free(r);
            if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                return fg_diag_set(diag, FG_ERR_IO, "cannot run redis-server (install the redis-server package)");
            return fg_diag_set(diag, FG_ERR_IO, "redis-server exited at start (see %s/redis.log)", dir);
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    fg_redis_local_stop(r);
    return fg_diag_set(diag, FG_ERR_IO, "redis-server did not answer on %s within 10 s (see %s/redis.log)", dir, dir);
}

const char *fg_redis_local_socket(const fg_redis_local_t *r) { return r->link; }

void fg_redis_local_check(fg_redis_local_t *r, double now)
{
    if (!r)
        return;
    if (r->pid > 0) {
        int status = 0;
        pid_t w = waitpid(r->pid, &status, WNOHANG);
        if (w == 0 || (w < 0 && errno != ECHILD))
            return; /* still running */
        const double ran = fg_clock_mono_s() - r->started_at;
        r->backoff_s = r->backoff_s == 0 || ran >= STABLE_S ? BACKOFF_MIN_S
                       : r->backoff_s * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S
                                                          : r->backoff_s * 2;
        r->restart_at = now + r->backoff_s;
        r->exits++;
        fg_log(FG_LOG_ERROR, "redis_exited",
               "\"pid\":%d,\"exit_code\":%d,\"signal\":%d,\"ran_s\":%.1f,\"restart_in_s\":%.1f", (int)r->pid, w > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1,
               w > 0 && WIFSIGNALED(status) ? WTERMSIG(status) : 0, ran, r->backoff_s);
        unlink(r->socket); /* a killed child leaves it behind */
        r->pid = 0;
        return;
    }
    if (now < r->restart_at)
        return;
    fg_diag d = {{0}};
    fg_err e = spawn(r, &d);
    if (e != FG_OK) {
        r->backoff_s = r->backoff_s * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S : r->backoff_s * 2;
        r->restart_at = now + r->backoff_s;
        fg_log(FG_LOG_ERROR, "redis_restart_failed", "\"error\":\"%s\",\"restart_in_s\":%.1f", fg_err_name(e),
               r->backoff_s);
        return;
    }
    r->restarts++;
    fg_log(FG_LOG_WARN, "redis_restarted", "\"pid\":%d,\"generation\":%u", (int)r->pid, r->gen);
}

void fg_redis_local_get_stats(const fg_redis_local_t *r, fg_redis_local_stats *st)
{
    memset(st, 0, sizeof *st);
    if (!r)
        return;
    st->running = r->pid > 0;
    st->restarts = r->restarts;
    st->exits = r->exits;
}

void fg_redis_local_stop(fg_redis_local_t *r)
{
    if (!r)
        return;
    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        int status;
        waitpid(r->pid, &status, 0);
    }
    free(r);
}
