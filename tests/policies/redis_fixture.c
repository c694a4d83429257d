/* redis_fixture.c: see redis_fixture.h. */
#include "redis_fixture.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void fg_sleep_ms(double ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)((ms - (double)(time_t)(ms / 1000) * 1000) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bool spawn(fg_redis_fixture *fx)
{
    const char *server = getenv("FG_REDIS_SERVER");
    if (!server || !*server)
        server = "redis-server";
    char log[400];
    snprintf(log, sizeof log, "%s/redis.log", fx->dir);
    unlink(fx->sock);
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        char conf[400], port[16];
        snprintf(conf, sizeof conf, "%s/redis.conf", fx->dir);
        snprintf(port, sizeof port, "%d", fx->port);
        const char *argv[24 + FG_REDIS_FIXTURE_ARGS];
        int n = 0;
        argv[n++] = server;
        if (fx->conf)
            argv[n++] = conf;
        const char *fixed[] = {"--port", port, "--bind", "127.0.0.1", "--unixsocket", fx->sock, "--unixsocketperm",
                               "700", "--dir", fx->dir, "--save", "", "--appendonly", fx->aof ? "yes" : "no",
                               "--appendfsync", "always", "--daemonize", "no", "--logfile", log};
        for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
            argv[n++] = fixed[i];
        for (int i = 0; i < fx->n_args; i++)
            argv[n++] = fx->args[i];
        argv[n] = NULL;
        execvp(server, (char *const *)argv);
        _exit(127);
    }
    fx->pid = pid;
    /* Wait for PING. */
    for (int i = 0; i < 500; i++) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fx->pid = 0;
            fprintf(stderr, "redis-server exited at start (status %d); see %s\n", status, log);
            return false;
        }
        redisContext *c = fg_redis_client(fx);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            bool ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
            if (r)
                freeReplyObject(r);
            redisFree(c);
            if (ok)
                return true;
        }
        fg_sleep_ms(10);
    }
    fprintf(stderr, "redis-server did not answer PING in 5 s\n");
    fg_redis_kill(fx, SIGKILL);
    return false;
}

static bool make_dir(fg_redis_fixture *fx)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof fx->dir, "%s/fg-redis-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx->dir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return false;
    }
    snprintf(fx->sock, sizeof fx->sock, "%s/redis.sock", fx->dir);
    return true;
}

bool fg_redis_start(fg_redis_fixture *fx, bool aof)
{
    memset(fx, 0, sizeof *fx);
    fx->aof = aof;
    return make_dir(fx) && spawn(fx);
}

bool fg_redis_start_port(fg_redis_fixture *fx, int port, const char *conf, const char *const *args, bool aof)
{
    memset(fx, 0, sizeof *fx);
    fx->aof = aof;
    fx->port = port;
    for (; args && args[fx->n_args]; fx->n_args++) {
        if (fx->n_args == FG_REDIS_FIXTURE_ARGS) {
            fprintf(stderr, "fg_redis_start_port: more than %d options\n", FG_REDIS_FIXTURE_ARGS);
            return false;
        }
        snprintf(fx->args[fx->n_args], sizeof fx->args[0], "%s", args[fx->n_args]);
    }
    if (!make_dir(fx))
        return false;
    if (conf) {
        char path[400];
        snprintf(path, sizeof path, "%s/redis.conf", fx->dir);
        FILE *f = fopen(path, "w");
        if (!f || fputs(conf, f) < 0 || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return false;
        }
        fx->conf = true;
    }
    return spawn(fx);
}

void fg_redis_kill(fg_redis_fixture *fx, int sig)
{
    if (fx->pid <= 0)
        return;
    kill(fx->pid, sig);
    if (sig == SIGSTOP || sig == SIGCONT)
        return;
    int status;
    while (waitpid(fx->pid, &status, 0) < 0 && errno == EINTR) {
    }
    fx->pid = 0;
}

bool fg_redis_restart(fg_redis_fixture *fx)
{
    fg_redis_kill(fx, SIGKILL);
    return spawn(fx);
}

void fg_redis_stop(fg_redis_fixture *fx)
{
    if (fx->pid > 0) {
        kill(fx->pid, SIGCONT); /* in case a test left it stopped */
        fg_redis_kill(fx, SIGKILL);
    }
    if (fx->dir[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", fx->dir);
        fx->dir[0] = '\0';
    }
}

redisContext *fg_redis_client(const fg_redis_fixture *fx)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectUnixWithTimeout(fx->sock, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

long long fg_redis_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = -1;
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r && r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    if (r)
        freeReplyObject(r);
    return v;
}

long long fg_redis_cmdstat(redisContext *c, const char *command)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    char needle[80];
    snprintf(needle, sizeof needle, "cmdstat_%s:calls=", command);
    const char *p = strstr(r->str, needle);
    long long v = p ? strtoll(p + strlen(needle), NULL, 10) : 0;
    freeReplyObject(r);
    return v;
}
