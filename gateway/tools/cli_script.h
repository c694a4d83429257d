/* cli_script.h: `flashgate-cli script`, for tests and reproducible sessions.
 *
 * Reads a script (a file, or stdin with "-") line by line and sends each
 * client event in order; every message the server sends is written to stdout
 * as one line, exactly as received (a raw line break inside a message, which
 * JSON only allows as whitespace, is written as a space). Lines:
 *
 *   {"type": ...}       a client event, sent verbatim (not validated: tests
 *                       send bad JSON on purpose) after ${...} substitution
 *   # ... / blank       ignored
 *   !wait TYPE          wait for a server event of TYPE; "@closed" waits for
 *                       the server to close the current connection
 *   !timeout S          the timeout of later !waits (default 30 s, or --timeout)
 *   !sleep S            pause, still printing what arrives
 *   !drop               shut the current connection down without a close frame
 *                       (after the events sent before it have gone out)
 *   !reconnect          open a new connection (it becomes the current one; an
 *                       old one still open stays open and is still printed)
 *   !close [CODE]       close the current connection with a close frame
 *   !send TEXT          send TEXT verbatim, even if it starts with '#' or '!'
 *   !binary TEXT        send TEXT as a binary message
 *
 * !wait consumes events: it is satisfied by the oldest event of its type that
 * no earlier !wait consumed, so "!wait X" twice waits for two X's, and an
 * event that arrived while earlier lines ran (or, from another connection, in
 * a different order than the script expects) is not missed.
 *
 * Substitutions in event lines: ${session_id} (from the last session.created
 * or session.resumed), ${last_sequence_number} (the newest non-zero
 * sequence_number received), ${response_id} (the last response.created),
 * ${item_id} (the last conversation.item.added), ${env:NAME}; "$${" writes "${".
 *
 * Exit status: 0 when the script ended and every !wait was satisfied; 1 on a
 * timeout, a refused or lost connection, or a substitution with no value yet;
 * 2 on bad options or a bad script line.
 *
 * Included once, by flashgate-cli.c; runs on the main thread.
 */
#ifndef FG_CLI_SCRIPT_H
#define FG_CLI_SCRIPT_H

#include <fcntl.h>

#include "config/base/bytes.h"
#include "gateway/tools/cli_common.h"

#define SCRIPT_DEFAULT_TIMEOUT_S 30.0
#define SCRIPT_CLOSE_WAIT_US (5 * 1000000LL)

typedef enum script_phase {
    SCRIPT_RUNNING,    /* taking lines */
    SCRIPT_CONNECTING, /* waiting for the current connection's handshake */
    SCRIPT_WAITING,    /* !wait */
    SCRIPT_SLEEPING,   /* !sleep */
    SCRIPT_DRAINING,   /* !drop: the queued messages go out first */
    SCRIPT_CLOSING,    /* the script ended: closing the connections */
    SCRIPT_DONE,
} script_phase;

typedef struct script script;

typedef struct script_conn {
    script *s;
    fg_client_conn_t *c;      /* NULL once closed (and freed) */
    unsigned id;              /* 1, 2, ... in order of opening */
    struct script_conn *next;
} script_conn;

struct script {
    cli_common *co;
    const char *path;
    fg_client_loop_t *loop;
    cli_lines *lines;
    script_conn *conns;       /* every connection opened, newest first */
    script_conn *cur;         /* the current one */
    unsigned n_opened;
    script_phase phase;
    int exit_code;
    unsigned lineno;
    double timeout_s;
    int64_t deadline;         /* of the current wait, connect, sleep or close */
    char wait_type[128];
    /* types of the events received and not yet consumed by a !wait, oldest first */
    char **pending;
    size_t n_pending, cap_pending;
    /* substitution values */
    char session_id[FG_PROTO_MAX_ID_BYTES + 1];
    char response_id[FG_PROTO_MAX_ID_BYTES + 1];
    char item_id[FG_PROTO_MAX_ID_BYTES + 1];
    uint64_t last_seq;
    bool have_seq;
};

static void script_error(script *s, int code, const char *fmt, const char *arg)
{
    if (s->lineno)
        fprintf(stderr, "flashgate-cli: %s:%u: ", s->path, s->lineno);
    else
        fprintf(stderr, "flashgate-cli: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    if (s->exit_code == CLI_EXIT_OK)
        s->exit_code = code;
    s->phase = SCRIPT_DONE;
}

static void script_pending_clear(script *s, size_t upto)
{
    if (!upto)
        return;
    for (size_t i = 0; i < upto; i++)
        free(s->pending[i]);
    memmove(s->pending, s->pending + upto, (s->n_pending - upto) * sizeof *s->pending);
    s->n_pending -= upto;
}

/* Consumes the oldest pending event of type t; true when there was one. */
static bool script_pending_take(script *s, const char *t)
{
    for (size_t i = 0; i < s->n_pending; i++) {
        if (strcmp(s->pending[i], t))
            continue;
        free(s->pending[i]);
        memmove(s->pending + i, s->pending + i + 1, (s->n_pending - i - 1) * sizeof *s->pending);
        s->n_pending--;
        return true;
    }
    return false;
}

static void script_pending_add(script *s, const char *t)
{
    if (s->n_pending == s->cap_pending) {
        size_t cap = s->cap_pending ? s->cap_pending * 2 : 64;
        char **p = realloc(s->pending, cap * sizeof *p);
        if (!p)
            return; /* a lost type can only make a later !wait time out */
        s->pending = p;
        s->cap_pending = cap;
    }
    char *dup = strdup(t);
    if (dup)
        s->pending[s->n_pending++] = dup;
    if (s->phase == SCRIPT_WAITING && script_pending_take(s, s->wait_type))
        s->phase = SCRIPT_RUNNING;
}

static void script_note(script *s, const script_conn *sc, const char *what)
{
    if (s->co->verbose)
        fprintf(stderr, "# connection %u: %s\n", sc->id, what);
}

static void script_on_open(fg_client_conn_t *c, void *user)
{
    script_conn *sc = user;
    script *s = sc->s;
    (void)c;
    script_note(s, sc, "open");
    if (s->phase == SCRIPT_CONNECTING && s->cur == sc)
        s->phase = SCRIPT_RUNNING;
}

static void script_copy_str(const fg_client_event_view *ev, const char *path, char *out, size_t cap)
{
    const char *v = fg_client_ev_str(ev, path);
    if (v)
        snprintf(out, cap, "%s", v);
}

static void script_on_message(fg_client_conn_t *c, void *user, const char *text, size_t len, bool binary)
{
    script_conn *sc = user;
    script *s = sc->s;
    (void)c;
    /* One line per message, as received. */
    for (size_t i = 0; i < len; i++)
        putchar(text[i] == '\n' || text[i] == '\r' ? ' ' : text[i]);
    putchar('\n');
    fflush(stdout);
    if (binary) {
        script_note(s, sc, "(that was a binary message)");
        return;
    }
    fg_client_event_view ev;
    if (fg_client_ev_parse(text, len, &ev, NULL) != FG_OK) {
        script_note(s, sc, "(that message is not a JSON object)");
        return;
    }
    if (ev.has_seq && ev.seq > 0) {
        s->last_seq = ev.seq;
        s->have_seq = true;
    }
    if (!strcmp(ev.type, "session.created") || !strcmp(ev.type, "session.resumed"))
        script_copy_str(&ev, "session.id", s->session_id, sizeof s->session_id);
    else if (!strcmp(ev.type, "response.created"))
        script_copy_str(&ev, "response.id", s->response_id, sizeof s->response_id);
    else if (!strcmp(ev.type, "conversation.item.added"))
        script_copy_str(&ev, "item.id", s->item_id, sizeof s->item_id);
    script_pending_add(s, ev.type);
    fg_client_ev_release(&ev);
}

static void script_on_close(fg_client_conn_t *c, void *user, const fg_client_close_info *ci)
{
    script_conn *sc = user;
    script *s = sc->s;
    char why[320];
    cli_describe_close(s->co, ci, why, sizeof why);
    fg_client_conn_free(c);
    sc->c = NULL;
    if (s->phase == SCRIPT_CLOSING || s->phase == SCRIPT_DONE) {
        script_note(s, sc, why);
        return;
    }
    if (!ci->was_open) {
        if (s->cur == sc)
            script_error(s, CLI_EXIT_FAIL, "%s", why);
        return;
    }
    if (ci->local) {
        script_note(s, sc, why);
        return;
    }
    /* The server closed it: say so always, it is rarely what a script expects. */
    fprintf(stderr, "# connection %u: %s\n", sc->id, why);
    if (s->cur == sc) {
        script_pending_add(s, "@closed");
        if (s->phase == SCRIPT_WAITING) {
            char msg[200];
            snprintf(msg, sizeof msg, "the connection closed while waiting for %s", s->wait_type);
            script_error(s, CLI_EXIT_FAIL, "%s", msg);
        }
    }
}

static const fg_client_handlers script_handlers = {script_on_open, script_on_message, script_on_close};

static bool script_connect(script *s)
{
    script_conn *sc = calloc(1, sizeof *sc);
    if (!sc) {
        script_error(s, CLI_EXIT_FAIL, "%s", "out of memory");
        return false;
    }
    sc->s = s;
    sc->id = ++s->n_opened;
    sc->next = s->conns;
    s->conns = sc;
    s->cur = sc;
    s->phase = SCRIPT_CONNECTING;
    s->deadline = fg_clock_mono_us() + (int64_t)(s->timeout_s * 1e6);
    if (cli_conn_open(s->co, s->loop, &script_handlers, sc, &sc->c)) {
        sc->c = NULL;
        script_error(s, CLI_EXIT_FAIL, "%s", "cannot open a connection");
        return false;
    }
    return true;
}

/* Expands ${...} in line; returns a malloc'd string (length *out_len), or
 * NULL after reporting the problem. */
static char *script_expand(script *s, const char *line, size_t n, size_t *out_len)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    size_t i = 0;
    bool ok = fg_bytes_append(&buf, &len, &cap, "", 0);
    while (ok && i < n) {
        if (line[i] == '$' && i + 2 < n && line[i + 1] == '$' && line[i + 2] == '{') {
            ok = fg_bytes_append(&buf, &len, &cap, "${", 2);
            i += 3;
            continue;
        }
        if (line[i] != '$' || i + 1 >= n || line[i + 1] != '{') {
            ok = fg_bytes_append(&buf, &len, &cap, line + i, 1);
            i++;
            continue;
        }
        const char *close = memchr(line + i + 2, '}', n - i - 2);
        if (!close) {
            script_error(s, CLI_EXIT_USAGE, "%s", "unterminated ${");
            free(buf);
            return NULL;
        }
        char name[128];
        size_t nl = (size_t)(close - (line + i + 2));
        if (nl >= sizeof name) {
            script_error(s, CLI_EXIT_USAGE, "%s", "substitution name too long");
            free(buf);
            return NULL;
        }
        memcpy(name, line + i + 2, nl);
        name[nl] = '\0';
        char num[32];
        const char *val = NULL;
        bool known = true;
        if (!strcmp(name, "session_id")) {
            val = s->session_id[0] ? s->session_id : NULL;
        } else if (!strcmp(name, "response_id")) {
            val = s->response_id[0] ? s->response_id : NULL;
        } else if (!strcmp(name, "item_id")) {
            val = s->item_id[0] ? s->item_id : NULL;
        } else if (!strcmp(name, "last_sequence_number")) {
            snprintf(num, sizeof num, "%llu", (unsigned long long)s->last_seq);
            val = num; /* 0 before any event: "resume from the start" */
        } else if (!strncmp(name, "env:", 4)) {
            val = getenv(name + 4);
        } else {
            known = false;
        }
        if (!known) {
            script_error(s, CLI_EXIT_USAGE, "unknown substitution ${%s}", name);
            free(buf);
            return NULL;
        }
        if (!val) {
            script_error(s, CLI_EXIT_FAIL, "${%s} has no value yet", name);
            free(buf);
            return NULL;
        }
        ok = fg_bytes_append(&buf, &len, &cap, val, strlen(val));
        i += nl + 3;
    }
    if (!ok) {
        script_error(s, CLI_EXIT_FAIL, "%s", "out of memory");
        free(buf);
        return NULL;
    }
    *out_len = len;
    return buf;
}

static void script_send(script *s, const char *data, size_t len, bool binary)
{
    if (!s->cur || !s->cur->c || fg_client_conn_is_closed(s->cur->c)) {
        script_error(s, CLI_EXIT_FAIL, "%s", "not connected (use !reconnect)");
        return;
    }
    fg_err e = fg_client_conn_send(s->cur->c, data, len, binary);
    if (e)
        script_error(s, CLI_EXIT_FAIL, "cannot send: %s", e == FG_ERR_STATE ? "the connection is closing" : fg_err_name(e));
}

/* The argument after a directive word; "" when none. */
static const char *script_arg(const char *p)
{
    while (*p && *p != ' ' && *p != '\t')
        p++;
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static bool script_word(const char *p, const char *w)
{
    size_t n = strlen(w);
    return !strncmp(p, w, n) && (p[n] == '\0' || p[n] == ' ' || p[n] == '\t');
}

static void script_directive(script *s, const char *p)
{
    const char *arg = script_arg(p);
    double secs;
    if (script_word(p, "!wait")) {
        if (!*arg || strchr(arg, ' ')) {
            script_error(s, CLI_EXIT_USAGE, "%s", "!wait needs one event type");
            return;
        }
        if (script_pending_take(s, arg))
            return;
        snprintf(s->wait_type, sizeof s->wait_type, "%s", arg);
        if (!strcmp(arg, "@closed") && (!s->cur || !s->cur->c)) {
            script_error(s, CLI_EXIT_FAIL, "%s", "!wait @closed: the current connection is already closed");
            return;
        }
        bool any_open = false;
        for (script_conn *sc = s->conns; sc; sc = sc->next)
            any_open |= sc->c != NULL;
        if (!any_open) {
            script_error(s, CLI_EXIT_FAIL, "%s", "!wait: not connected");
            return;
        }
        s->phase = SCRIPT_WAITING;
        s->deadline = fg_clock_mono_us() + (int64_t)(s->timeout_s * 1e6);
    } else if (script_word(p, "!timeout")) {
        if (!cli_parse_double(arg, 0.001, 86400, &secs)) {
            script_error(s, CLI_EXIT_USAGE, "%s", "!timeout needs seconds (0.001..86400)");
            return;
        }
        s->timeout_s = secs;
    } else if (script_word(p, "!sleep")) {
        if (!cli_parse_double(arg, 0, 86400, &secs)) {
            script_error(s, CLI_EXIT_USAGE, "%s", "!sleep needs seconds (0..86400)");
            return;
        }
        s->phase = SCRIPT_SLEEPING;
        s->deadline = fg_clock_mono_us() + (int64_t)(secs * 1e6);
    } else if (script_word(p, "!drop")) {
        if (s->cur && s->cur->c) {
            s->phase = SCRIPT_DRAINING;
            s->deadline = fg_clock_mono_us() + (int64_t)(s->timeout_s * 1e6);
        }
    } else if (script_word(p, "!close")) {
        uint64_t code = 1000;
        if (*arg && !cli_parse_u64(arg, 1000, 4999, &code)) {
            script_error(s, CLI_EXIT_USAGE, "%s", "!close takes a close code (1000..4999)");
            return;
        }
        if (s->cur && s->cur->c)
            fg_client_conn_close(s->cur->c, (int)code);
    } else if (script_word(p, "!reconnect")) {
        script_connect(s);
    } else if (script_word(p, "!send")) {
        script_send(s, arg, strlen(arg), false);
    } else if (script_word(p, "!binary")) {
        script_send(s, arg, strlen(arg), true);
    } else {
        script_error(s, CLI_EXIT_USAGE, "unknown directive \"%s\"", p);
    }
}

static void script_line(script *s, cli_line *ln)
{
    s->lineno++;
    const char *p = ln->text;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p || *p == '#')
        return;
    if (s->co->verbose)
        fprintf(stderr, "# %u: %s\n", s->lineno, p);
    if (*p == '!') {
        script_directive(s, p);
        return;
    }
    size_t len;
    char *msg = script_expand(s, p, ln->len - (size_t)(p - ln->text), &len);
    if (!msg)
        return;
    script_send(s, msg, len, false);
    free(msg);
}

/* Starts closing every connection once the script has ended. */
static void script_finish(script *s)
{
    s->phase = SCRIPT_CLOSING;
    s->deadline = fg_clock_mono_us() + SCRIPT_CLOSE_WAIT_US;
    for (script_conn *sc = s->conns; sc; sc = sc->next)
        if (sc->c)
            fg_client_conn_close(sc->c, 1000);
}

static bool script_all_closed(const script *s)
{
    for (const script_conn *sc = s->conns; sc; sc = sc->next)
        if (sc->c)
            return false;
    return true;
}

static void script_step(script *s)
{
    int64_t now = fg_clock_mono_us();
    if (cli_interrupts) {
        script_error(s, CLI_EXIT_FAIL, "%s", "interrupted");
        return;
    }
    switch (s->phase) {
    case SCRIPT_CONNECTING:
        if (now > s->deadline)
            script_error(s, CLI_EXIT_FAIL, "%s", "timed out connecting");
        return;
    case SCRIPT_WAITING:
        if (now > s->deadline) {
            char msg[200];
            snprintf(msg, sizeof msg, "timed out after %g s waiting for %s", s->timeout_s, s->wait_type);
            script_error(s, CLI_EXIT_FAIL, "%s", msg);
        }
        return;
    case SCRIPT_SLEEPING:
        if (now < s->deadline)
            return;
        s->phase = SCRIPT_RUNNING;
        break;
    case SCRIPT_DRAINING:
        /* Drop once what the script sent before !drop has reached the socket. */
        if (s->cur && s->cur->c && fg_client_conn_pending(s->cur->c) && now <= s->deadline && fg_client_conn_is_open(s->cur->c))
            return;
        if (s->cur && s->cur->c)
            fg_client_conn_drop(s->cur->c);
        s->phase = SCRIPT_RUNNING;
        break;
    case SCRIPT_CLOSING:
        if (script_all_closed(s) || now > s->deadline)
            s->phase = SCRIPT_DONE;
        return;
    default:
        break;
    }
    while (s->phase == SCRIPT_RUNNING) {
        cli_line *ln = NULL;
        int r = cli_lines_pop(s->lines, &ln);
        if (r == 0)
            return;
        if (r < 0) {
            script_finish(s);
            return;
        }
        script_line(s, ln);
        free(ln);
    }
}

static int script_run(script *s, int fd, bool close_fd)
{
    static cli_lines lines; /* static: a reader blocked on a terminal may outlive this frame */
    if (cli_loop_create(s->co, 10, 4, &s->loop)) {
        if (close_fd)
            close(fd);
        return CLI_EXIT_FAIL;
    }
    if (!cli_lines_start(&lines, fd, close_fd, s->loop)) {
        fprintf(stderr, "flashgate-cli: cannot start the script reader\n");
        fg_client_loop_destroy(s->loop);
        if (close_fd)
            close(fd);
        return CLI_EXIT_FAIL;
    }
    s->lines = &lines;
    if (script_connect(s)) {
        while (s->phase != SCRIPT_DONE) {
            fg_client_loop_service(s->loop);
            if (s->phase != SCRIPT_DONE)
                script_step(s);
        }
    }
    cli_lines_stop(s->lines);
    for (script_conn *sc = s->conns, *next; sc; sc = next) {
        next = sc->next;
        fg_client_conn_free(sc->c);
        free(sc);
    }
    fg_client_loop_destroy(s->loop);
    script_pending_clear(s, s->n_pending);
    free(s->pending);
    return s->exit_code;
}

static void script_usage(FILE *f)
{
    fprintf(f,
            "usage: flashgate-cli script [options] FILE|-\n"
            "\n"
            "Send the client events of a script in order and print every server event received\n"
            "as one JSON line on stdout, exactly as received. Script lines:\n"
            "  {\"type\": ...}      a client event, sent verbatim after ${...} substitution\n"
            "  # comment, blank    ignored\n"
            "  !wait TYPE          wait for a server event of TYPE; each !wait consumes the oldest\n"
            "                      one no earlier !wait took, so none that arrived early is missed;\n"
            "                      TYPE @closed waits for the server to close the connection\n"
            "  !timeout S          timeout of later !waits (default %g s)\n"
            "  !sleep S            pause S seconds\n"
            "  !drop               shut the connection down abruptly (no close frame)\n"
            "  !reconnect          open a new connection (an old open one stays open)\n"
            "  !close [CODE]       close the connection with a close frame (default 1000)\n"
            "  !send TEXT          send TEXT verbatim;  !binary TEXT  send it as a binary message\n"
            "Substitutions: ${session_id} ${last_sequence_number} ${response_id} ${item_id}\n"
            "${env:NAME}, from the events received so far; $${ is a literal ${. Example:\n"
            "  {\"type\":\"session.create\"}\n"
            "  !wait session.created\n"
            "  !drop\n"
            "  !reconnect\n"
            "  {\"type\":\"session.resume\",\"session_id\":\"${session_id}\",\"last_sequence_number\":${last_sequence_number}}\n"
            "  !wait session.resumed\n"
            "\n"
            "options:\n" CLI_COMMON_HELP
            "  --timeout S          default !wait and connect timeout (default %g s)\n"
            "\n"
            "exit status: 0 when the script ended and every !wait was satisfied; 1 on a timeout\n"
            "or a failed or lost connection; 2 on bad options or a bad script line.\n",
            SCRIPT_DEFAULT_TIMEOUT_S, SCRIPT_DEFAULT_TIMEOUT_S);
}

static int script_main(int argc, char **argv)
{
    cli_common co;
    cli_common_init(&co);
    script s;
    memset(&s, 0, sizeof s);
    s.co = &co;
    s.timeout_s = SCRIPT_DEFAULT_TIMEOUT_S;
    const char *file = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v;
        int r;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            script_usage(stdout);
            return CLI_EXIT_OK;
        }
        if ((r = cli_common_opt(&co, argc, argv, &i)) != 0) {
            if (r < 0)
                return CLI_EXIT_USAGE;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--timeout", &v)) != 0) {
            if (r < 0 || !cli_parse_double(v, 0.001, 86400, &s.timeout_s)) {
                fprintf(stderr, "flashgate-cli: --timeout needs seconds (0.001..86400)\n");
                return CLI_EXIT_USAGE;
            }
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "flashgate-cli script: unknown option \"%s\" (see --help)\n", argv[i]);
            return CLI_EXIT_USAGE;
        }
        if (file) {
            fprintf(stderr, "flashgate-cli script: one script only (see --help)\n");
            return CLI_EXIT_USAGE;
        }
        file = argv[i];
    }
    if (!file) {
        fprintf(stderr, "flashgate-cli script: which script? (a FILE, or - for stdin; see --help)\n");
        return CLI_EXIT_USAGE;
    }
    if (!cli_common_finish(&co))
        return CLI_EXIT_USAGE;
    int fd = 0;
    bool close_fd = false;
    s.path = "stdin";
    if (strcmp(file, "-")) {
        fd = open(file, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "flashgate-cli: cannot open %s: %s\n", file, strerror(errno));
            return CLI_EXIT_USAGE;
        }
        close_fd = true;
        s.path = file;
    }
    return script_run(&s, fd, close_fd);
}

#endif
