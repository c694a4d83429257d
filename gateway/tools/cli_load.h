/* cli_load.h: `flashgate-cli load`, concurrent sessions for throughput,
 * latency and memory measurements.
 *
 * N connections, one session each, all on one client loop in the main thread
 * (libwebsockets, non-blocking), started evenly over --ramp seconds. Each
 * session runs M turns: conversation.item.create and response.create sent
 * together, then the response streamed to its response.done; after the last
 * turn it sends session.close and closes the connection. Measured: time to
 * first token (response.create handed to the socket -> first delta),
 * inter-delta gaps within a response, tokens per delta (a delta may coalesce
 * several tokens), output tokens and aggregate tokens/s over the wall time,
 * and errors by code. --idle holds the sessions open after their turns (none
 * by default) for --hold seconds and reports resident memory per idle session,
 * of this process and, with --server-pid, of the server.
 *
 * Memory here is fixed per session (no per-token allocation in the client):
 * latencies go to log-linear histograms (client_stats.h). Deltas are
 * recognised without a JSON parse (the type is the first key).
 *
 * Included once, by flashgate-cli.c; runs on the main thread.
 */
#ifndef FG_CLI_LOAD_H
#define FG_CLI_LOAD_H

#include <sys/resource.h>

#include "gateway/client_stats.h"
#include "gateway/log.h"
#include "gateway/tools/cli_common.h"

#define LOAD_MAX_SESSIONS 1000000
#define LOAD_MAX_ERROR_CODES 48
#define LOAD_CLOSE_WAIT_US (10 * 1000000LL)

typedef enum load_state {
    LS_WAITING,    /* not started yet (ramp) */
    LS_CONNECTING,
    LS_CREATING,   /* session.create sent */
    LS_TURN,       /* a response in progress */
    LS_HOLDING,    /* --idle: turns done, holding the session */
    LS_CLOSING,    /* session.close sent, or the connection closing */
    LS_DONE,
} load_state;

typedef struct load load;

typedef struct load_sess {
    load *L;
    fg_client_conn_t *c;
    load_state st;
    bool failed;
    unsigned turns_done;
    int64_t t_sent;          /* response.create queued (us) */
    int64_t t_last_delta;    /* 0 = no delta yet in this response */
    uint32_t deltas;         /* in this response */
    int64_t deadline;        /* of the current step */
} load_sess;

typedef struct load_error {
    char code[48];
    uint64_t n;
} load_error;

typedef struct load_opts {
    uint64_t sessions, turns;
    const char *prompt;
    const char *instructions;
    bool has_max_output_tokens;
    uint64_t max_output_tokens;
    bool has_temperature;
    double temperature;
    double ramp_s;
    bool idle;
    double hold_s;
    long server_pid;         /* 0 = none */
    double timeout_s;        /* per step: connect, create, one response */
    bool json;
} load_opts;

struct load {
    cli_common *co;
    load_opts o;
    fg_client_loop_t *loop;
    load_sess *sess;
    /* the same events for every session, made once */
    char *ev_create, *ev_item, *ev_response, *ev_close;
    size_t len_create, len_item, len_response, len_close;
    /* progress */
    uint64_t n_started, n_finished, n_ok, n_failed, n_holding;
    int64_t t_start, t_end;
    /* results */
    fg_client_hist ttft, inter_delta;
    uint64_t responses, out_tokens, deltas, tokens_in_delta_responses;
    uint64_t status_completed, status_incomplete, status_cancelled, status_failed;
    load_error errors[LOAD_MAX_ERROR_CODES];
    unsigned n_errors;
    /* --idle */
    long rss_client_before, rss_client_after, rss_server_before, rss_server_after;
    int64_t hold_until;      /* 0 = not holding yet */
    uint64_t held_open;      /* sessions still open when the hold ended */
    rlim_t nofile;
};

/* VmRSS of a process in KiB from /proc/PID/status (pid 0 = this one); -1 if unknown. */
static long load_rss_kib(long pid)
{
    char path[64];
    if (pid)
        snprintf(path, sizeof path, "/proc/%ld/status", pid);
    else
        snprintf(path, sizeof path, "/proc/self/status");
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) {
            kib = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kib;
}

static void load_count_error(load *L, const char *code)
{
    /* the last slot collects codes beyond the table as "other" */
    for (unsigned i = 0; i < L->n_errors; i++)
        if (!strcmp(L->errors[i].code, code)) {
            L->errors[i].n++;
            return;
        }
    unsigned i = L->n_errors < LOAD_MAX_ERROR_CODES ? L->n_errors++ : LOAD_MAX_ERROR_CODES - 1;
    snprintf(L->errors[i].code, sizeof L->errors[i].code, "%s", i == LOAD_MAX_ERROR_CODES - 1 ? "other" : code);
    L->errors[i].n++;
}

static void load_finish_session(load_sess *S)
{
    load *L = S->L;
    if (S->st == LS_DONE)
        return;
    if (S->st == LS_HOLDING)
        L->n_holding--;
    S->st = LS_DONE;
    L->n_finished++;
    if (S->failed)
        L->n_failed++;
    else
        L->n_ok++;
    if (L->n_finished == L->n_started && L->n_started == L->o.sessions)
        L->t_end = fg_clock_mono_us();
}

static void load_send(load_sess *S, const char *msg, size_t len);

/* Marks the session failed (counting code) and ends it: session.close first
 * when the server has a session for it (so it does not linger detached until
 * its idle timeout), then the connection. */
static void load_fail(load_sess *S, const char *code)
{
    load *L = S->L;
    if (code)
        load_count_error(L, code);
    S->failed = true;
    if (S->st == LS_DONE || S->st == LS_CLOSING)
        return;
    if (S->st == LS_HOLDING)
        L->n_holding--;
    bool has_session = S->st == LS_TURN || S->st == LS_HOLDING;
    S->st = LS_CLOSING;
    S->deadline = fg_clock_mono_us() + LOAD_CLOSE_WAIT_US;
    if (S->c && fg_client_conn_is_open(S->c) && has_session)
        load_send(S, L->ev_close, L->len_close);
    else if (S->c && !fg_client_conn_is_closed(S->c))
        fg_client_conn_close(S->c, 1000);
    else
        load_finish_session(S);
}

static void load_send(load_sess *S, const char *msg, size_t len)
{
    fg_err e = S->c ? fg_client_conn_send(S->c, msg, len, false) : FG_ERR_STATE;
    if (e == FG_OK)
        return;
    if (S->st == LS_CLOSING) { /* nothing more to say: just end it */
        S->failed = true;
        if (S->c && !fg_client_conn_is_closed(S->c))
            fg_client_conn_drop(S->c);
        else
            load_finish_session(S);
        return;
    }
    load_fail(S, "send_failed");
}

static void load_start_turn(load_sess *S)
{
    load *L = S->L;
    S->st = LS_TURN;
    S->t_last_delta = 0;
    S->deltas = 0;
    load_send(S, L->ev_item, L->len_item);
    S->t_sent = fg_clock_mono_us();
    S->deadline = S->t_sent + (int64_t)(L->o.timeout_s * 1e6);
    load_send(S, L->ev_response, L->len_response);
}

/* After session.created or a response.done: the next turn, the hold, or the end. */
static void load_next(load_sess *S)
{
    load *L = S->L;
    if (S->turns_done < L->o.turns) {
        load_start_turn(S);
    } else if (L->o.idle && !L->hold_until) {
        S->st = LS_HOLDING;
        L->n_holding++;
    } else {
        S->st = LS_CLOSING;
        S->deadline = fg_clock_mono_us() + LOAD_CLOSE_WAIT_US;
        load_send(S, L->ev_close, L->len_close);
    }
}

static void load_on_delta(load_sess *S)
{
    load *L = S->L;
    int64_t now = fg_clock_mono_us();
    if (S->st != LS_TURN)
        return;
    if (!S->t_last_delta)
        fg_client_hist_record(&L->ttft, (uint64_t)(now - S->t_sent));
    else
        fg_client_hist_record(&L->inter_delta, (uint64_t)(now - S->t_last_delta));
    S->t_last_delta = now;
    S->deltas++;
}

static void load_on_done(load_sess *S, const fg_client_event_view *ev)
{
    load *L = S->L;
    if (S->st != LS_TURN)
        return;
    uint64_t out = (uint64_t)fg_client_ev_num(ev, "response.usage.output_tokens", 0);
    L->responses++;
    L->out_tokens += out;
    if (S->deltas) {
        L->deltas += S->deltas;
        L->tokens_in_delta_responses += out;
    }
    const char *status = fg_client_ev_str(ev, "response.status");
    status = status ? status : "";
    S->turns_done++;
    if (!strcmp(status, "completed")) {
        L->status_completed++;
    } else if (!strcmp(status, "incomplete")) {
        L->status_incomplete++;
    } else if (!strcmp(status, "cancelled")) {
        L->status_cancelled++;
        load_fail(S, "response_cancelled");
        return;
    } else {
        L->status_failed++;
        const char *code = fg_client_ev_str(ev, "response.status_details.error.code");
        load_fail(S, code ? code : "response_failed");
        return;
    }
    load_next(S);
}

static void load_on_open(fg_client_conn_t *c, void *user)
{
    load_sess *S = user;
    (void)c;
    S->st = LS_CREATING;
    S->deadline = fg_clock_mono_us() + (int64_t)(S->L->o.timeout_s * 1e6);
    load_send(S, S->L->ev_create, S->L->len_create);
}

static void load_on_message(fg_client_conn_t *c, void *user, const char *text, size_t len, bool binary)
{
    load_sess *S = user;
    (void)c;
    char type[64];
    if (binary)
        return;
    if (fg_client_ev_peek_type(text, len, type, sizeof type) && !strcmp(type, "response.output_text.delta")) {
        load_on_delta(S);
        return;
    }
    fg_client_event_view ev;
    if (fg_client_ev_parse(text, len, &ev, NULL) != FG_OK) {
        load_fail(S, "bad_server_message");
        return;
    }
    const char *t = ev.type;
    if (!strcmp(t, "response.output_text.delta")) {
        load_on_delta(S);
    } else if (!strcmp(t, "session.created")) {
        if (S->st == LS_CREATING)
            load_next(S);
    } else if (!strcmp(t, "response.done")) {
        load_on_done(S, &ev);
    } else if (!strcmp(t, "error")) {
        const char *code = fg_client_ev_str(&ev, "error.code");
        if (S->L->co->verbose) {
            char desc[400];
            fg_client_ev_describe_error(&ev, desc, sizeof desc);
            fprintf(stderr, "session %ld: error: %s\n", (long)(S - S->L->sess), desc);
        }
        if (S->st == LS_CLOSING) {
            load_count_error(S->L, code ? code : "error");
            S->failed = true;
            fg_client_conn_close(S->c, 1000); /* session.close itself failed */
        } else {
            load_fail(S, code ? code : "error");
        }
    } else if (!strcmp(t, "session.closed")) {
        if (S->st == LS_CLOSING) {
            fg_client_conn_close(S->c, 1000);
        } else {
            const char *reason = fg_client_ev_str(&ev, "reason");
            char code[64];
            snprintf(code, sizeof code, "session_closed_%s", reason ? reason : "unknown");
            load_fail(S, code);
        }
    }
    fg_client_ev_release(&ev);
}

static void load_on_close(fg_client_conn_t *c, void *user, const fg_client_close_info *ci)
{
    load_sess *S = user;
    load *L = S->L;
    fg_client_conn_free(c);
    S->c = NULL;
    if (S->st == LS_DONE)
        return;
    if (S->st != LS_CLOSING || !ci->local) {
        char code[48];
        if (!ci->was_open && ci->http_status && ci->http_status != 101)
            snprintf(code, sizeof code, "http_%d", ci->http_status);
        else if (!ci->was_open)
            snprintf(code, sizeof code, "connect_failed");
        else if (ci->close_code)
            snprintf(code, sizeof code, "closed_%d", ci->close_code);
        else
            snprintf(code, sizeof code, "connection_lost");
        if (L->co->verbose) {
            char why[320];
            cli_describe_close(L->co, ci, why, sizeof why);
            fprintf(stderr, "session %ld: %s\n", (long)(S - L->sess), why);
        }
        load_fail(S, code);
    }
    load_finish_session(S);
}

static const fg_client_handlers load_handlers = {load_on_open, load_on_message, load_on_close};

static void load_start_session(load *L, load_sess *S)
{
    S->L = L;
    S->st = LS_CONNECTING;
    S->deadline = fg_clock_mono_us() + (int64_t)(L->o.timeout_s * 1e6);
    L->n_started++;
    if (cli_conn_open(L->co, L->loop, &load_handlers, S, &S->c)) {
        S->c = NULL;
        S->failed = true;
        load_count_error(L, "connect_failed");
        load_finish_session(S);
    }
}

/* Raises the open-files soft limit to the hard limit (one fd per connection). */
static rlim_t load_raise_nofile(uint64_t want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t target = rl.rlim_max;
        if (target == RLIM_INFINITY || target > (rlim_t)1 << 20)
            target = (rlim_t)1 << 20; /* lws sizes tables by the limit */
        if (target > rl.rlim_cur) {
            rl.rlim_cur = target;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    if (rl.rlim_cur < want + 32)
        fprintf(stderr,
                "flashgate-cli: warning: open-files limit %llu is below %llu sessions; raise the hard limit "
                "(ulimit -Hn) or expect connect failures\n",
                (unsigned long long)rl.rlim_cur, (unsigned long long)want);
    return rl.rlim_cur;
}

/* Checks the deadlines of every session (each step has one). */
static void load_check_timeouts(load *L, int64_t now)
{
    for (uint64_t i = 0; i < L->n_started; i++) {
        load_sess *S = &L->sess[i];
        if (S->st == LS_DONE || S->st == LS_HOLDING || S->st == LS_WAITING || now <= S->deadline)
            continue;
        if (S->st == LS_CLOSING) { /* the server does not answer: give up on politeness */
            if (!S->failed)
                load_count_error(L, "close_timeout");
            S->failed = true;
            S->deadline = INT64_MAX;
            if (S->c)
                fg_client_conn_drop(S->c);
            else
                load_finish_session(S);
            continue;
        }
        static const char *const names[] = {"", "connect_timeout", "create_timeout", "response_timeout"};
        load_fail(S, S->st <= LS_TURN ? names[S->st] : "timeout");
    }
}

static void load_release_holds(load *L)
{
    for (uint64_t i = 0; i < L->n_started; i++) {
        load_sess *S = &L->sess[i];
        if (S->st != LS_HOLDING)
            continue;
        L->held_open++;
        L->n_holding--;
        S->st = LS_CLOSING;
        S->deadline = fg_clock_mono_us() + LOAD_CLOSE_WAIT_US;
        load_send(S, L->ev_close, L->len_close);
    }
}

static double load_ms(uint64_t us)
{
    return (double)us / 1000.0;
}

static void load_report_table(const load *L, FILE *f)
{
    double wall = L->t_end > L->t_start ? (double)(L->t_end - L->t_start) / 1e6 : 0;
    fprintf(f, "flashgate-cli load: %llu sessions x %llu turns against %s\n", (unsigned long long)L->o.sessions,
            (unsigned long long)L->o.turns, L->co->url_text);
    fprintf(f, "  %-22s ok %llu   failed %llu\n", "sessions", (unsigned long long)L->n_ok,
            (unsigned long long)L->n_failed);
    fprintf(f, "  %-22s %llu (completed %llu, incomplete %llu, cancelled %llu, failed %llu)\n", "responses",
            (unsigned long long)L->responses, (unsigned long long)L->status_completed,
            (unsigned long long)L->status_incomplete, (unsigned long long)L->status_cancelled,
            (unsigned long long)L->status_failed);
    fprintf(f, "  %-22s %llu\n", "output tokens", (unsigned long long)L->out_tokens);
    fprintf(f, "  %-22s %.3f s\n", "wall time", wall);
    fprintf(f, "  %-22s %.1f tokens/s\n", "output throughput", wall > 0 ? (double)L->out_tokens / wall : 0.0);
    if (L->ttft.count)
        fprintf(f, "  %-22s p50 %.1f ms   p90 %.1f ms   p99 %.1f ms   (n=%llu)\n", "time to first token",
                load_ms(fg_client_hist_percentile(&L->ttft, 50)), load_ms(fg_client_hist_percentile(&L->ttft, 90)),
                load_ms(fg_client_hist_percentile(&L->ttft, 99)), (unsigned long long)L->ttft.count);
    else
        fprintf(f, "  %-22s -\n", "time to first token");
    if (L->inter_delta.count)
        fprintf(f, "  %-22s p50 %.2f ms   p99 %.2f ms   (n=%llu)\n", "inter-delta gap",
                load_ms(fg_client_hist_percentile(&L->inter_delta, 50)),
                load_ms(fg_client_hist_percentile(&L->inter_delta, 99)), (unsigned long long)L->inter_delta.count);
    else
        fprintf(f, "  %-22s -\n", "inter-delta gap");
    fprintf(f, "  %-22s %.2f (%llu deltas)\n", "tokens per delta",
            L->deltas ? (double)L->tokens_in_delta_responses / (double)L->deltas : 0.0, (unsigned long long)L->deltas);
    fprintf(f, "  %-22s", "errors");
    if (!L->n_errors)
        fprintf(f, " none");
    for (unsigned i = 0; i < L->n_errors; i++)
        fprintf(f, "%s %s %llu", i ? "," : "", L->errors[i].code, (unsigned long long)L->errors[i].n);
    fputc('\n', f);
    if (L->o.idle) {
        double n = L->held_open ? (double)L->held_open : 1.0;
        fprintf(f, "  %-22s %llu of %llu sessions held for %.1f s\n", "idle hold", (unsigned long long)L->held_open,
                (unsigned long long)L->o.sessions, L->o.hold_s);
        if (L->rss_client_before >= 0 && L->rss_client_after >= 0)
            fprintf(f, "  %-22s %ld KiB -> %ld KiB (%.1f KiB per session)\n", "client RSS", L->rss_client_before,
                    L->rss_client_after, (double)(L->rss_client_after - L->rss_client_before) / n);
        if (L->o.server_pid) {
            if (L->rss_server_before >= 0 && L->rss_server_after >= 0)
                fprintf(f, "  %-22s %ld KiB -> %ld KiB (%.1f KiB per session)\n", "server RSS",
                        L->rss_server_before, L->rss_server_after,
                        (double)(L->rss_server_after - L->rss_server_before) / n);
            else
                fprintf(f, "  %-22s unknown (cannot read /proc/%ld/status)\n", "server RSS", L->o.server_pid);
        }
    }
}

/* A JSON string literal of s (server-made codes and the URL), escaped like the logs. */
static void load_json_str(FILE *f, const char *s)
{
    char buf[2048];
    fputs(fg_log_str(buf, sizeof buf, s), f);
}

static void load_json_rss(FILE *f, const char *name, long before, long after, double n)
{
    if (before < 0 || after < 0) {
        fprintf(f, ",\"%s\":null", name);
        return;
    }
    fprintf(f, ",\"%s\":{\"before_kib\":%ld,\"after_kib\":%ld,\"per_session_kib\":%.2f}", name, before, after,
            (double)(after - before) / n);
}

static void load_report_json(const load *L, FILE *f)
{
    double wall = L->t_end > L->t_start ? (double)(L->t_end - L->t_start) / 1e6 : 0;
    fprintf(f, "{\"mode\":\"%s\",\"url\":", L->o.idle ? "idle" : "load");
    load_json_str(f, L->co->url_text);
    fprintf(f, ",\"sessions\":{\"requested\":%llu,\"ok\":%llu,\"failed\":%llu}", (unsigned long long)L->o.sessions,
            (unsigned long long)L->n_ok, (unsigned long long)L->n_failed);
    fprintf(f, ",\"turns\":%llu", (unsigned long long)L->o.turns);
    fprintf(f, ",\"responses\":{\"total\":%llu,\"completed\":%llu,\"incomplete\":%llu,\"cancelled\":%llu,\"failed\":%llu}",
            (unsigned long long)L->responses, (unsigned long long)L->status_completed,
            (unsigned long long)L->status_incomplete, (unsigned long long)L->status_cancelled,
            (unsigned long long)L->status_failed);
    fprintf(f, ",\"output_tokens\":%llu,\"wall_s\":%.6f,\"output_tokens_per_s\":%.3f", (unsigned long long)L->out_tokens,
            wall, wall > 0 ? (double)L->out_tokens / wall : 0.0);
    if (L->ttft.count)
        fprintf(f, ",\"ttft_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"mean\":%.3f,\"n\":%llu}",
                load_ms(fg_client_hist_percentile(&L->ttft, 50)), load_ms(fg_client_hist_percentile(&L->ttft, 90)),
                load_ms(fg_client_hist_percentile(&L->ttft, 99)), fg_client_hist_mean(&L->ttft) / 1000.0,
                (unsigned long long)L->ttft.count);
    else
        fprintf(f, ",\"ttft_ms\":null");
    if (L->inter_delta.count)
        fprintf(f, ",\"inter_delta_ms\":{\"p50\":%.3f,\"p99\":%.3f,\"mean\":%.3f,\"n\":%llu}",
                load_ms(fg_client_hist_percentile(&L->inter_delta, 50)),
                load_ms(fg_client_hist_percentile(&L->inter_delta, 99)), fg_client_hist_mean(&L->inter_delta) / 1000.0,
                (unsigned long long)L->inter_delta.count);
    else
        fprintf(f, ",\"inter_delta_ms\":null");
    fprintf(f, ",\"deltas\":%llu,\"tokens_per_delta\":%.4f", (unsigned long long)L->deltas,
            L->deltas ? (double)L->tokens_in_delta_responses / (double)L->deltas : 0.0);
    fprintf(f, ",\"errors\":{");
    for (unsigned i = 0; i < L->n_errors; i++) {
        fputs(i ? "," : "", f);
        load_json_str(f, L->errors[i].code);
        fprintf(f, ":%llu", (unsigned long long)L->errors[i].n);
    }
    fputc('}', f);
    if (L->o.idle) {
        double n = L->held_open ? (double)L->held_open : 1.0;
        fprintf(f, ",\"idle\":{\"hold_s\":%.3f,\"held_sessions\":%llu", L->o.hold_s, (unsigned long long)L->held_open);
        load_json_rss(f, "client_rss", L->rss_client_before, L->rss_client_after, n);
        if (L->o.server_pid)
            load_json_rss(f, "server_rss", L->rss_server_before, L->rss_server_after, n);
        fputc('}', f);
    }
    fprintf(f, ",\"open_files_limit\":%llu}\n", (unsigned long long)L->nofile);
}

/* Builds the events every session sends. */
static bool load_make_events(load *L)
{
    fg_client_sampling smp = {0};
    if (L->o.has_temperature) {
        smp.has_temperature = true;
        smp.temperature = L->o.temperature;
    }
    if (L->o.has_max_output_tokens) {
        smp.has_max_output_tokens = true;
        smp.max_output_tokens = (uint32_t)L->o.max_output_tokens;
    }
    L->ev_create = fg_client_ev_session_create(NULL, L->o.instructions, NULL);
    L->ev_item = fg_client_ev_message(NULL, "user", L->o.prompt, strlen(L->o.prompt));
    L->ev_response = fg_client_ev_response_create(NULL, &smp);
    L->ev_close = fg_client_ev_session_close(NULL);
    if (!L->ev_create || !L->ev_item || !L->ev_response || !L->ev_close)
        return false;
    L->len_create = strlen(L->ev_create);
    L->len_item = strlen(L->ev_item);
    L->len_response = strlen(L->ev_response);
    L->len_close = strlen(L->ev_close);
    return true;
}

static int load_run(load *L)
{
    L->nofile = load_raise_nofile(L->o.sessions); /* before the lws context: it sizes its tables by the limit */
    L->sess = calloc(L->o.sessions, sizeof *L->sess);
    if (!L->sess || !load_make_events(L)) {
        fprintf(stderr, "flashgate-cli: out of memory\n");
        return CLI_EXIT_FAIL;
    }
    fg_client_hist_init(&L->ttft);
    fg_client_hist_init(&L->inter_delta);
    L->rss_client_before = L->rss_client_after = L->rss_server_before = L->rss_server_after = -1;
    unsigned tick = L->o.ramp_s > 0 ? 5 : 20;
    if (cli_loop_create(L->co, tick, (unsigned)(L->o.sessions < 100000 ? L->o.sessions : 100000), &L->loop))
        return CLI_EXIT_FAIL;
    L->rss_client_before = load_rss_kib(0);
    if (L->o.server_pid)
        L->rss_server_before = load_rss_kib(L->o.server_pid);

    L->t_start = fg_clock_mono_us();
    int64_t last_scan = L->t_start, last_progress = L->t_start;
    bool interrupted = false;
    while (L->n_finished < L->o.sessions) {
        int64_t now = fg_clock_mono_us();
        /* the ramp: session i starts at i * ramp / N */
        while (L->n_started < L->o.sessions && !interrupted) {
            double at = L->o.ramp_s * 1e6 * (double)L->n_started / (double)L->o.sessions;
            if ((double)(now - L->t_start) < at)
                break;
            load_start_session(L, &L->sess[L->n_started]);
        }
        fg_client_loop_service(L->loop);
        now = fg_clock_mono_us();
        if (now - last_scan > 100000) {
            last_scan = now;
            load_check_timeouts(L, now);
        }
        /* --idle: when every session is holding or finished, measure, hold, release */
        if (L->o.idle && !L->hold_until && L->n_started == L->o.sessions &&
            L->n_holding + L->n_finished == L->o.sessions) {
            L->hold_until = now + (int64_t)(L->o.hold_s * 1e6);
            if (L->co->verbose || !L->o.json)
                fprintf(stderr, "flashgate-cli: %llu sessions idle; holding %.1f s\n", (unsigned long long)L->n_holding,
                        L->o.hold_s);
        }
        if (L->hold_until && now >= L->hold_until && L->n_holding) {
            L->rss_client_after = load_rss_kib(0);
            if (L->o.server_pid)
                L->rss_server_after = load_rss_kib(L->o.server_pid);
            load_release_holds(L);
        }
        if (cli_interrupts && !interrupted) {
            interrupted = true;
            fprintf(stderr, "flashgate-cli: interrupted; closing the sessions\n");
            for (uint64_t i = L->n_started; i < L->o.sessions; i++) {
                L->sess[i].L = L;
                L->n_started++;
                L->sess[i].failed = true;
                load_finish_session(&L->sess[i]);
            }
            if (L->n_holding) {
                L->rss_client_after = load_rss_kib(0);
                if (L->o.server_pid)
                    L->rss_server_after = load_rss_kib(L->o.server_pid);
                load_release_holds(L);
            }
            for (uint64_t i = 0; i < L->o.sessions; i++)
                if (L->sess[i].st != LS_DONE && L->sess[i].st != LS_CLOSING)
                    load_fail(&L->sess[i], "interrupted");
        }
        if (cli_interrupts > 1)
            break;
        if (L->co->verbose && now - last_progress > 1000000) {
            last_progress = now;
            fprintf(stderr, "[%.1f s] started %llu, finished %llu (ok %llu, failed %llu), holding %llu, %llu tokens\n",
                    (double)(now - L->t_start) / 1e6, (unsigned long long)L->n_started,
                    (unsigned long long)L->n_finished, (unsigned long long)L->n_ok, (unsigned long long)L->n_failed,
                    (unsigned long long)L->n_holding, (unsigned long long)L->out_tokens);
        }
    }
    if (!L->t_end)
        L->t_end = fg_clock_mono_us();
    for (uint64_t i = 0; i < L->o.sessions; i++) {
        fg_client_conn_free(L->sess[i].c);
        L->sess[i].c = NULL;
    }
    fg_client_loop_destroy(L->loop);
    if (L->o.json) {
        load_report_table(L, stderr);
        load_report_json(L, stdout);
    } else {
        load_report_table(L, stdout);
    }
    fflush(stdout);
    free(L->sess);
    free(L->ev_create);
    free(L->ev_item);
    free(L->ev_response);
    free(L->ev_close);
    return L->n_failed || interrupted ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

static void load_usage(FILE *f)
{
    fprintf(f,
            "usage: flashgate-cli load [options] --sessions N --turns M\n"
            "       flashgate-cli load [options] --idle --sessions N --hold S [--server-pid P]\n"
            "\n"
            "Open N WebSocket connections at once (one session each, one service thread); each\n"
            "runs M turns (conversation.item.create + response.create, then the streamed response\n"
            "to response.done) and closes its session. Prints sessions ok/failed, output tokens,\n"
            "wall time, aggregate output tokens/s, time to first token p50/p90/p99\n"
            "(response.create sent -> first delta), the gap between deltas p50/p99, tokens per\n"
            "delta (the server coalesces tokens into deltas) and errors by code.\n"
            "--idle creates the sessions (after --turns turns, 0 by default), holds them open and\n"
            "idle for --hold seconds, and reports resident memory (VmRSS) of this process and of\n"
            "the server before and after: memory per idle session.\n"
            "The open-files soft limit is raised to the hard limit (one fd per connection).\n"
            "\n"
            "options:\n" CLI_COMMON_HELP
            "  --sessions N         concurrent sessions (default 1)\n"
            "  --turns M            turns per session (default 1; with --idle 0)\n"
            "  --prompt TEXT        the user message of every turn (default \"Tell me a story.\")\n"
            "  --instructions TEXT  the sessions' system prompt\n"
            "  --max-output-tokens K  per response (default: the server's)\n"
            "  --temperature T      0..2 (default: the server's)\n"
            "  --ramp S             start the connections evenly over S seconds (default 0)\n"
            "  --timeout S          per step: connect, create, one response (default 120)\n"
            "  --idle               hold the sessions idle (see above)\n"
            "  --hold S             --idle: seconds to hold (default 10)\n"
            "  --server-pid P       --idle: also report the server's VmRSS\n"
            "  --json               one JSON object on stdout (the table goes to stderr)\n"
            "\n"
            "exit status: 0 when every session succeeded, 1 when any failed, 2 on bad options.\n");
}

static int load_main(int argc, char **argv)
{
    cli_common co;
    cli_common_init(&co);
    load *L = calloc(1, sizeof *L);
    if (!L)
        return CLI_EXIT_FAIL;
    L->co = &co;
    L->o.sessions = 1;
    L->o.turns = 1;
    L->o.prompt = "Tell me a story.";
    L->o.hold_s = 10;
    L->o.timeout_s = 120;
    bool turns_given = false;
    int rc = -1;
    for (int i = 0; i < argc && rc < 0; i++) {
        const char *v;
        int r;
        uint64_t n = 0;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            load_usage(stdout);
            rc = CLI_EXIT_OK;
        } else if ((r = cli_common_opt(&co, argc, argv, &i)) != 0) {
            if (r < 0)
                rc = CLI_EXIT_USAGE;
        } else if ((r = cli_opt(argc, argv, &i, "--sessions", &v)) != 0) {
            if (r < 0 || !cli_parse_u64(v, 1, LOAD_MAX_SESSIONS, &L->o.sessions)) {
                fprintf(stderr, "flashgate-cli: --sessions must be 1..%d\n", LOAD_MAX_SESSIONS);
                rc = CLI_EXIT_USAGE;
            }
        } else if ((r = cli_opt(argc, argv, &i, "--turns", &v)) != 0) {
            if (r < 0 || !cli_parse_u64(v, 0, 1000000, &L->o.turns)) {
                fprintf(stderr, "flashgate-cli: --turns must be 0..1000000\n");
                rc = CLI_EXIT_USAGE;
            }
            turns_given = true;
        } else if ((r = cli_opt(argc, argv, &i, "--prompt", &v)) != 0) {
            if (r < 0)
                rc = CLI_EXIT_USAGE;
            L->o.prompt = v;
        } else if ((r = cli_opt(argc, argv, &i, "--instructions", &v)) != 0) {
            if (r < 0)
                rc = CLI_EXIT_USAGE;
            L->o.instructions = v;
        } else if ((r = cli_opt(argc, argv, &i, "--max-output-tokens", &v)) != 0) {
            if (r < 0 || !cli_parse_u64(v, 1, 32768, &n)) {
                fprintf(stderr, "flashgate-cli: --max-output-tokens must be 1..32768\n");
                rc = CLI_EXIT_USAGE;
            }
            L->o.has_max_output_tokens = true;
            L->o.max_output_tokens = n;
        } else if ((r = cli_opt(argc, argv, &i, "--temperature", &v)) != 0) {
            if (r < 0 || !cli_parse_double(v, 0, 2, &L->o.temperature)) {
                fprintf(stderr, "flashgate-cli: --temperature must be 0..2\n");
                rc = CLI_EXIT_USAGE;
            }
            L->o.has_temperature = true;
        } else if ((r = cli_opt(argc, argv, &i, "--ramp", &v)) != 0) {
            if (r < 0 || !cli_parse_double(v, 0, 86400, &L->o.ramp_s)) {
                fprintf(stderr, "flashgate-cli: --ramp needs seconds (0..86400)\n");
                rc = CLI_EXIT_USAGE;
            }
        } else if ((r = cli_opt(argc, argv, &i, "--timeout", &v)) != 0) {
            if (r < 0 || !cli_parse_double(v, 0.001, 86400, &L->o.timeout_s)) {
                fprintf(stderr, "flashgate-cli: --timeout needs seconds (0.001..86400)\n");
                rc = CLI_EXIT_USAGE;
            }
        } else if ((r = cli_opt(argc, argv, &i, "--hold", &v)) != 0) {
            if (r < 0 || !cli_parse_double(v, 0, 86400 * 7, &L->o.hold_s)) {
                fprintf(stderr, "flashgate-cli: --hold needs seconds\n");
                rc = CLI_EXIT_USAGE;
            }
        } else if ((r = cli_opt(argc, argv, &i, "--server-pid", &v)) != 0) {
            if (r < 0 || !cli_parse_u64(v, 1, 1u << 30, &n)) {
                fprintf(stderr, "flashgate-cli: --server-pid needs a process id\n");
                rc = CLI_EXIT_USAGE;
            }
            L->o.server_pid = (long)n;
        } else if (cli_opt(argc, argv, &i, "--idle", NULL)) {
            L->o.idle = true;
        } else if (cli_opt(argc, argv, &i, "--json", NULL)) {
            L->o.json = true;
        } else {
            fprintf(stderr, "flashgate-cli load: unknown argument \"%s\" (see --help)\n", argv[i]);
            rc = CLI_EXIT_USAGE;
        }
    }
    if (rc < 0 && !cli_common_finish(&co))
        rc = CLI_EXIT_USAGE;
    if (rc < 0 && L->o.idle && !turns_given)
        L->o.turns = 0;
    if (rc < 0 && !L->o.idle && (L->o.server_pid)) {
        fprintf(stderr, "flashgate-cli: --server-pid goes with --idle\n");
        rc = CLI_EXIT_USAGE;
    }
    if (rc < 0 && L->o.server_pid && load_rss_kib(L->o.server_pid) < 0) {
        fprintf(stderr, "flashgate-cli: cannot read /proc/%ld/status\n", L->o.server_pid);
        rc = CLI_EXIT_USAGE;
    }
    if (rc < 0)
        rc = load_run(L);
    free(L);
    return rc;
}

#endif
