/* cli_common.h: what flashgate-cli's modes share: the common options (URL,
 * key, subprotocol), option-parsing helpers, a stdin/file line reader thread,
 * and the report of a connection that failed.
 *
 * Header-only and included once, by flashgate-cli.c (every .c file in
 * gateway/tools/ becomes its own executable). Threads: everything here runs on
 * the main thread, which owns the client loop, except the line reader's
 * thread, which only reads its fd and hands lines over under a mutex.
 */
#ifndef FG_CLI_COMMON_H
#define FG_CLI_COMMON_H

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway/client.h"
#include "gateway/client_events.h"
#include "gateway/protocol.h"

#define CLI_DEFAULT_URL "ws://127.0.0.1:8080" FG_PROTO_PATH
#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1  /* a timeout, a refused or lost connection, failed sessions */
#define CLI_EXIT_USAGE 2 /* bad options or a bad script */

/* Set by SIGINT (and SIGTERM); each mode decides what it means. */
static volatile sig_atomic_t cli_interrupts;

static void cli_on_signal(int sig)
{
    (void)sig;
    cli_interrupts++;
}

static void cli_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = cli_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* ---- common options ---- */

typedef struct cli_common {
    const char *url_text;
    fg_client_url url;
    const char *key;          /* --key, else $FLASHGATE_API_KEY; NULL = none */
    const char *subprotocol;  /* NULL = flashgate.v1 */
    int verbose;              /* -v: notes on stderr; -vv: also lws's log */
} cli_common;

static void cli_common_init(cli_common *co)
{
    memset(co, 0, sizeof *co);
    co->url_text = CLI_DEFAULT_URL;
    const char *env = getenv("FLASHGATE_API_KEY");
    co->key = env && *env ? env : NULL;
}

#define CLI_COMMON_HELP                                                                              \
    "  --url URL            WebSocket endpoint (default " CLI_DEFAULT_URL ")\n"                      \
    "  --key KEY            API key (default: $FLASHGATE_API_KEY), sent at the handshake as\n"      \
    "                       \"Authorization: Bearer KEY\", the protocol's only way to authenticate\n" \
    "  --header-key[=KEY]   the same: the key always goes in that header (=KEY sets it)\n"       \
    "  --subprotocol NAME   the Sec-WebSocket-Protocol to offer (default flashgate.v1; \"\" = none)\n" \
    "  -v, --verbose        notes on stderr (-vv: also libwebsockets' log)\n"                       \
    "  -h, --help           this help\n"

/* Matches argv[*i] against "--name" or "--name=value". Options with a value
 * take it from "=value" or from the next argument. Returns 1 when matched
 * (*val set, *i advanced past a separate value), 0 when not, -1 when the
 * value is missing (an error message was printed). */
static int cli_opt(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n))
        return 0;
    if (!val)
        return a[n] == '\0' ? 1 : 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "flashgate-cli: %s needs a value\n", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

/* Tries the common options at argv[*i]: 1 = consumed, 0 = not one, -1 = error. */
static int cli_common_opt(cli_common *co, int argc, char **argv, int *i)
{
    const char *v;
    int r;
    if ((r = cli_opt(argc, argv, i, "--url", &v)) != 0) {
        co->url_text = v;
        return r;
    }
    if ((r = cli_opt(argc, argv, i, "--key", &v)) != 0) {
        co->key = *v ? v : NULL;
        return r;
    }
    if ((r = cli_opt(argc, argv, i, "--subprotocol", &v)) != 0) {
        co->subprotocol = v;
        return r;
    }
    if (cli_opt(argc, argv, i, "--header-key", NULL))
        return 1; /* the key always goes in the Authorization header */
    if (!strncmp(argv[*i], "--header-key=", 13)) {
        co->key = argv[*i][13] ? argv[*i] + 13 : NULL;
        return 1;
    }
    if (!strcmp(argv[*i], "-v") || !strcmp(argv[*i], "--verbose")) {
        co->verbose++;
        return 1;
    }
    if (!strcmp(argv[*i], "-vv")) {
        co->verbose += 2;
        return 1;
    }
    return 0;
}

/* Parses the URL after the options; prints and returns false when bad. */
static bool cli_common_finish(cli_common *co)
{
    fg_diag d = {{0}};
    if (fg_client_url_parse(co->url_text, &co->url, &d) != FG_OK) {
        fprintf(stderr, "flashgate-cli: %s\n", d.msg);
        return false;
    }
    return true;
}

static fg_err cli_loop_create(const cli_common *co, unsigned tick_ms, unsigned max_conns, fg_client_loop_t **out)
{
    fg_client_loop_opts o = {0};
    o.tick_ms = tick_ms;
    o.max_conns = max_conns;
    /* lws's own log only with -vv: our messages say what failed */
    o.lws_log_level = co->verbose >= 2 ? (1 << 0) | (1 << 1) | (1 << 2) : 0;
    fg_diag d = {{0}};
    fg_err e = fg_client_loop_create(&o, out, &d);
    if (e)
        fprintf(stderr, "flashgate-cli: %s\n", d.msg[0] ? d.msg : fg_err_name(e));
    return e;
}

static fg_err cli_conn_open(const cli_common *co, fg_client_loop_t *loop, const fg_client_handlers *h, void *user,
                            fg_client_conn_t **out)
{
    fg_client_conn_opts o = {0};
    o.url = &co->url;
    o.api_key = co->key;
    o.subprotocol = co->subprotocol;
    o.handlers = *h;
    o.user = user;
    fg_diag d = {{0}};
    fg_err e = fg_client_conn_open(loop, &o, out, &d);
    if (e)
        fprintf(stderr, "flashgate-cli: %s\n", d.msg[0] ? d.msg : fg_err_name(e));
    return e;
}

/* One line saying why a connection ended, for people. */
static void cli_describe_close(const cli_common *co, const fg_client_close_info *ci, char *out, size_t cap)
{
    if (!ci->was_open) {
        if (ci->http_status == 401)
            snprintf(out, cap, "handshake refused: HTTP 401 Unauthorized (a missing, unknown or disabled API key)");
        else if (ci->http_status == 503)
            snprintf(out, cap, "handshake refused: HTTP 503 Service Unavailable (the server is draining)");
        else if (ci->http_status && ci->http_status != 101)
            snprintf(out, cap, "handshake refused: HTTP %d (%s)", ci->http_status, ci->reason);
        else
            snprintf(out, cap, "cannot connect to %s: %s", co->url_text, ci->reason[0] ? ci->reason : "failed");
        return;
    }
    if (ci->close_code)
        snprintf(out, cap, "connection closed by the server: %d%s%s", ci->close_code, ci->reason[0] ? " " : "",
                 ci->reason);
    else if (ci->local)
        snprintf(out, cap, "connection closed");
    else
        snprintf(out, cap, "connection lost (no close frame)%s%s", ci->reason[0] ? ": " : "", ci->reason);
}

static bool cli_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool cli_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-' || *s == '\0')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* ---- a line reader thread (stdin or a file) ---- */

typedef struct cli_line {
    struct cli_line *next;
    size_t len;
    char text[]; /* NUL-terminated, without the '\n' (and a '\r' before it) */
} cli_line;

typedef struct cli_lines {
    int fd;
    bool close_fd;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;          /* guards everything below */
    cli_line *head, *tail;
    bool eof;                    /* the reader reached the end (or an error) */
    int read_errno;              /* 0, or why reading stopped early */
    bool finished;               /* the thread has returned */
    fg_client_loop_t *wake;      /* woken after each line; NULL once the loop goes away */
} cli_lines;

static void cli_lines_push(cli_lines *l, const char *s, size_t n)
{
    if (n && s[n - 1] == '\r')
        n--;
    cli_line *ln = malloc(sizeof *ln + n + 1);
    pthread_mutex_lock(&l->mu);
    if (ln) {
        ln->next = NULL;
        ln->len = n;
        memcpy(ln->text, s, n);
        ln->text[n] = '\0';
        if (l->tail)
            l->tail->next = ln;
        else
            l->head = ln;
        l->tail = ln;
    } else {
        l->read_errno = ENOMEM;
        l->eof = true;
    }
    if (l->wake)
        fg_client_loop_wake(l->wake);
    pthread_mutex_unlock(&l->mu);
}

/* Reads with read(2), not stdio: exit() must not wait on a stdio lock that a
 * reader blocked on a terminal holds. */
static void *cli_lines_main(void *arg)
{
    cli_lines *l = arg;
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    int err = buf ? 0 : ENOMEM;
    while (buf) {
        if (len == cap) {
            char *nb = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                err = ENOMEM;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(l->fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err = errno;
            break;
        }
        if (r == 0)
            break;
        size_t start = 0, end = len + (size_t)r;
        for (size_t i = len; i < end; i++) {
            if (buf[i] != '\n')
                continue;
            cli_lines_push(l, buf + start, i - start);
            start = i + 1;
        }
        memmove(buf, buf + start, end - start);
        len = end - start;
    }
    if (buf && len) /* a last line without '\n' */
        cli_lines_push(l, buf, len);
    free(buf);
    pthread_mutex_lock(&l->mu);
    l->eof = true;
    l->read_errno = l->read_errno ? l->read_errno : err;
    l->finished = true;
    if (l->wake)
        fg_client_loop_wake(l->wake);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Starts reading fd (closed at the end when close_fd). Returns false on failure. */
static bool cli_lines_start(cli_lines *l, int fd, bool close_fd, fg_client_loop_t *wake)
{
    memset(l, 0, sizeof *l);
    l->fd = fd;
    l->close_fd = close_fd;
    l->wake = wake;
    pthread_mutex_init(&l->mu, NULL);
    if (pthread_create(&l->thread, NULL, cli_lines_main, l)) {
        pthread_mutex_destroy(&l->mu);
        return false;
    }
    l->started = true;
    return true;
}

/* Takes the next line: 1 = *out set (free it), 0 = none yet, -1 = the end. */
static int cli_lines_pop(cli_lines *l, cli_line **out)
{
    pthread_mutex_lock(&l->mu);
    cli_line *ln = l->head;
    int r;
    if (ln) {
        l->head = ln->next;
        if (!l->head)
            l->tail = NULL;
        *out = ln;
        r = 1;
    } else {
        r = l->eof ? -1 : 0;
    }
    pthread_mutex_unlock(&l->mu);
    return r;
}

/* Stops using the reader before the loop goes away. A thread still blocked in
 * read (a terminal) is left to die with the process. */
static void cli_lines_stop(cli_lines *l)
{
    if (!l->started)
        return;
    pthread_mutex_lock(&l->mu);
    l->wake = NULL;
    bool finished = l->finished;
    cli_line *ln = l->head;
    l->head = l->tail = NULL;
    pthread_mutex_unlock(&l->mu);
    while (ln) {
        cli_line *next = ln->next;
        free(ln);
        ln = next;
    }
    if (finished) {
        pthread_join(l->thread, NULL);
        pthread_mutex_destroy(&l->mu);
        if (l->close_fd)
            close(l->fd);
    } else {
        pthread_detach(l->thread);
    }
    l->started = false;
}

#endif
