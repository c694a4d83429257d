/* cli_chat.h: `flashgate-cli chat`, an interactive conversation.
 *
 * Each line read from stdin becomes a user message (conversation.item.create);
 * once the server has added it, response.create is sent and the response's
 * deltas are written to stdout as they arrive. response.done ends the turn with
 * a usage line on stderr. End of input (Ctrl-D) closes the session
 * (session.close). Ctrl-C cancels a response in progress, or quits at the
 * prompt. A connection lost mid-session is reopened and the session resumed
 * (session.resume with the last sequence number seen), up to 3 times in a row.
 *
 * stdin may be a terminal or a pipe: lines are handled one turn at a time
 * either way, and with a pipe no prompt is written, so stdout holds only the
 * model's text (each response followed by a newline).
 *
 * Included once, by flashgate-cli.c; runs on the main thread.
 */
#ifndef FG_CLI_CHAT_H
#define FG_CLI_CHAT_H

#include "gateway/tools/cli_common.h"

#define CHAT_MAX_RECONNECTS 3
#define CHAT_CLOSE_WAIT_US (5 * 1000000LL)

typedef enum chat_phase {
    CHAT_CREATING,    /* waiting for the connection and session.created */
    CHAT_IDLE,        /* at the prompt */
    CHAT_ITEM,        /* the user's message sent, waiting for conversation.item.added */
    CHAT_RESPONSE,    /* response.create sent, streaming */
    CHAT_CLOSING,     /* session.close sent */
    CHAT_DONE,
} chat_phase;

typedef struct chat {
    cli_common *co;
    const char *instructions;
    fg_client_sampling sampling;   /* written into session.create */
    fg_client_loop_t *loop;
    fg_client_conn_t *conn;        /* NULL while waiting to reconnect */
    cli_lines *lines;
    chat_phase phase;
    bool interactive;              /* stdin is a terminal: prompts and notes */
    int exit_code;
    int64_t deadline;              /* CHAT_CLOSING / CHAT_DONE: stop waiting for the server then */
    /* the session */
    char session_id[FG_PROTO_MAX_ID_BYTES + 1];
    uint64_t last_seq;             /* the newest sequence number received */
    bool resuming;                 /* session.resume sent, session.resumed not yet received */
    int reconnects;                /* in a row, without a successful resume */
    int64_t reconnect_at;          /* when to reopen (us), 0 = not waiting */
    /* the turn */
    unsigned turn;
    char item_event_id[32], resp_event_id[32];
    bool resp_created;             /* response.created seen for this turn */
    bool cancel_sent;
    int64_t t_sent, t_first;
    bool text_open;                /* text written since the last newline */
} chat;

static void chat_prompt(chat *ch)
{
    if (ch->interactive && ch->phase == CHAT_IDLE && !ch->resuming) {
        fputs("> ", stderr);
        fflush(stderr);
    }
}

static void chat_end_text(chat *ch)
{
    if (ch->text_open) {
        fputc('\n', stdout);
        ch->text_open = false;
    }
    fflush(stdout);
}

/* Before a note on stderr in the middle of a response: on a terminal, start
 * a new line; into a pipe, leave the model's text whole. */
static void chat_break_line(chat *ch)
{
    if (ch->interactive)
        chat_end_text(ch);
}

/* Ends the run with status 1 after a message; closes the connection politely. */
static void chat_fail(chat *ch, const char *fmt, const char *arg)
{
    chat_end_text(ch);
    fprintf(stderr, "flashgate-cli: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    ch->exit_code = CLI_EXIT_FAIL;
    ch->phase = CHAT_DONE;
    ch->deadline = fg_clock_mono_us() + CHAT_CLOSE_WAIT_US;
    if (ch->conn)
        fg_client_conn_close(ch->conn, 1000);
}

static bool chat_send(chat *ch, char *msg)
{
    if (!msg) {
        chat_fail(ch, "%s", "out of memory");
        return false;
    }
    fg_err e = ch->conn ? fg_client_conn_send(ch->conn, msg, strlen(msg), false) : FG_ERR_STATE;
    if (ch->co->verbose && e == FG_OK)
        fprintf(stderr, "[sent] %s\n", msg);
    free(msg);
    if (e) {
        chat_fail(ch, "cannot send: %s", fg_err_name(e));
        return false;
    }
    return true;
}

static void chat_send_response_create(chat *ch)
{
    snprintf(ch->resp_event_id, sizeof ch->resp_event_id, "cli_resp_%u", ch->turn);
    ch->phase = CHAT_RESPONSE;
    ch->resp_created = false;
    ch->t_sent = fg_clock_mono_us();
    ch->t_first = 0;
    chat_send(ch, fg_client_ev_response_create(ch->resp_event_id, NULL));
}

static void chat_on_open(fg_client_conn_t *c, void *user)
{
    chat *ch = user;
    (void)c;
    if (ch->session_id[0]) {
        ch->resuming = true;
        fprintf(stderr, "[resuming %s after sequence number %llu]\n", ch->session_id, (unsigned long long)ch->last_seq);
        chat_send(ch, fg_client_ev_session_resume("cli_resume", ch->session_id, ch->last_seq));
    } else {
        chat_send(ch, fg_client_ev_session_create("cli_create", ch->instructions, &ch->sampling));
    }
}

static void chat_turn_end(chat *ch)
{
    chat_end_text(ch);
    ch->phase = CHAT_IDLE;
    ch->cancel_sent = false;
    chat_prompt(ch);
}

static void chat_on_done(chat *ch, const fg_client_event_view *ev)
{
    const char *status = fg_client_ev_str(ev, "response.status");
    double in = fg_client_ev_num(ev, "response.usage.input_tokens", 0);
    double cached = fg_client_ev_num(ev, "response.usage.input_token_details.cached_tokens", 0);
    double out = fg_client_ev_num(ev, "response.usage.output_tokens", 0);
    const char *reason = fg_client_ev_str(ev, "response.status_details.reason");
    int64_t now = fg_clock_mono_us();
    double secs = (double)(now - ch->t_sent) / 1e6;
    chat_end_text(ch);
    fprintf(stderr, "[%s%s%s: %.0f output tokens, %.0f input tokens (%.0f cached), %.2f s", status ? status : "?",
            reason ? " " : "", reason ? reason : "", out, in, cached, secs);
    if (ch->t_first) {
        double decode_s = (double)(now - ch->t_first) / 1e6;
        fprintf(stderr, ", first token %.0f ms", (double)(ch->t_first - ch->t_sent) / 1e3);
        if (decode_s > 0 && out > 1)
            fprintf(stderr, ", %.1f tokens/s", (out - 1) / decode_s);
    }
    fprintf(stderr, "]\n");
    char err[400];
    fg_client_ev_describe_error(ev, err, sizeof err);
    if (err[0])
        fprintf(stderr, "error: %s\n", err);
    chat_turn_end(ch);
}

static void chat_on_error(chat *ch, const fg_client_event_view *ev)
{
    char desc[400];
    fg_client_ev_describe_error(ev, desc, sizeof desc);
    chat_break_line(ch);
    fprintf(stderr, "error: %s\n", desc);
    const char *eid = fg_client_ev_str(ev, "error.event_id");
    if (eid && !strcmp(eid, "cli_create")) {
        chat_fail(ch, "%s", "the session could not be created");
        return;
    }
    if (eid && !strcmp(eid, "cli_resume")) {
        chat_fail(ch, "%s", "the session could not be resumed");
        return;
    }
    if (eid && ((ch->phase == CHAT_ITEM && !strcmp(eid, ch->item_event_id)) ||
                (ch->phase == CHAT_RESPONSE && !strcmp(eid, ch->resp_event_id)))) {
        chat_turn_end(ch); /* the turn did not start; the session is as it was */
        return;
    }
    if (eid && ch->phase == CHAT_CLOSING && !strcmp(eid, "cli_close")) {
        ch->phase = CHAT_DONE;
        ch->deadline = fg_clock_mono_us() + CHAT_CLOSE_WAIT_US;
        if (ch->conn)
            fg_client_conn_close(ch->conn, 1000);
    }
}

static void chat_on_resumed(chat *ch)
{
    ch->resuming = false;
    ch->reconnects = 0;
    fprintf(stderr, "[resumed]\n");
    if (ch->phase == CHAT_ITEM) {
        /* The replay holds everything the server did; no item.added in it means
         * our message never arrived. Send it again? The text is gone: ask. */
        fprintf(stderr, "[the last message did not reach the server; please send it again]\n");
        chat_turn_end(ch);
    } else if (ch->phase == CHAT_RESPONSE && !ch->resp_created) {
        chat_send_response_create(ch); /* response.create was lost on the way */
    } else if (ch->phase == CHAT_CLOSING) {
        chat_send(ch, fg_client_ev_session_close("cli_close"));
    } else {
        chat_prompt(ch);
    }
}

static void chat_on_message(fg_client_conn_t *c, void *user, const char *text, size_t len, bool binary)
{
    chat *ch = user;
    (void)c;
    if (ch->co->verbose)
        fprintf(stderr, "[recv] %.*s\n", (int)len, text);
    if (binary || ch->phase == CHAT_DONE)
        return;
    fg_client_event_view ev;
    fg_diag d = {{0}};
    if (fg_client_ev_parse(text, len, &ev, &d) != FG_OK) {
        fprintf(stderr, "flashgate-cli: ignoring a server message that is %s\n", d.msg);
        return;
    }
    if (ev.has_seq && ev.seq > ch->last_seq)
        ch->last_seq = ev.seq;
    const char *t = ev.type;
    if (!strcmp(t, "session.created")) {
        const char *id = fg_client_ev_str(&ev, "session.id");
        snprintf(ch->session_id, sizeof ch->session_id, "%s", id ? id : "");
        if (ch->interactive)
            fprintf(stderr, "[session %s; type a message, Ctrl-D to end]\n", ch->session_id);
        ch->phase = CHAT_IDLE;
        chat_prompt(ch);
    } else if (!strcmp(t, "session.resumed")) {
        chat_on_resumed(ch);
    } else if (!strcmp(t, "conversation.item.added")) {
        if (ch->phase == CHAT_ITEM)
            chat_send_response_create(ch);
    } else if (!strcmp(t, "response.created")) {
        ch->resp_created = true;
    } else if (!strcmp(t, "response.output_text.delta")) {
        const char *delta = fg_client_ev_str(&ev, "delta");
        if (!ch->t_first)
            ch->t_first = fg_clock_mono_us();
        if (ch->phase == CHAT_RESPONSE && delta && *delta) {
            fputs(delta, stdout);
            fflush(stdout);
            ch->text_open = delta[strlen(delta) - 1] != '\n';
        }
    } else if (!strcmp(t, "response.done")) {
        if (ch->phase == CHAT_RESPONSE)
            chat_on_done(ch, &ev);
    } else if (!strcmp(t, "error")) {
        chat_on_error(ch, &ev);
    } else if (!strcmp(t, "session.closed")) {
        const char *reason = fg_client_ev_str(&ev, "reason");
        if (ch->phase == CHAT_CLOSING) {
            ch->phase = CHAT_DONE;
            ch->deadline = fg_clock_mono_us() + CHAT_CLOSE_WAIT_US;
            fg_client_conn_close(ch->conn, 1000);
        } else {
            chat_fail(ch, "the server ended the session (%s)", reason ? reason : "?");
        }
    }
    fg_client_ev_release(&ev);
}

static void chat_on_close(fg_client_conn_t *c, void *user, const fg_client_close_info *ci)
{
    chat *ch = user;
    fg_client_conn_free(c);
    ch->conn = NULL;
    if (ch->phase == CHAT_DONE)
        return;
    char why[320];
    cli_describe_close(ch->co, ci, why, sizeof why);
    if (!ch->session_id[0] || ch->reconnects >= CHAT_MAX_RECONNECTS) {
        chat_fail(ch, "%s", why);
        return;
    }
    chat_break_line(ch);
    ch->reconnects++;
    fprintf(stderr, "[%s; reconnecting (%d of %d)]\n", why, ch->reconnects, CHAT_MAX_RECONNECTS);
    ch->resuming = false;
    ch->reconnect_at = fg_clock_mono_us() + 500000LL * ch->reconnects;
}

static const fg_client_handlers chat_handlers = {chat_on_open, chat_on_message, chat_on_close};

/* A line of input at the prompt. */
static void chat_on_line(chat *ch, cli_line *ln)
{
    size_t len = ln->len;
    while (len && (ln->text[len - 1] == ' ' || ln->text[len - 1] == '\t'))
        len--;
    if (!len) {
        chat_prompt(ch);
        return;
    }
    ch->turn++;
    snprintf(ch->item_event_id, sizeof ch->item_event_id, "cli_item_%u", ch->turn);
    ch->phase = CHAT_ITEM;
    chat_send(ch, fg_client_ev_message(ch->item_event_id, "user", ln->text, len));
}

static void chat_begin_close(chat *ch)
{
    ch->phase = CHAT_CLOSING;
    ch->deadline = fg_clock_mono_us() + CHAT_CLOSE_WAIT_US;
    chat_send(ch, fg_client_ev_session_close("cli_close"));
}

/* One pass of the main loop after a service cycle. */
static void chat_step(chat *ch, int *seen_interrupts)
{
    int64_t now = fg_clock_mono_us();
    if (cli_interrupts != *seen_interrupts) {
        *seen_interrupts = cli_interrupts;
        if (ch->phase == CHAT_RESPONSE && !ch->cancel_sent && ch->conn && !ch->resuming) {
            ch->cancel_sent = true;
            fprintf(stderr, "\n[cancelling]\n");
            chat_send(ch, fg_client_ev_response_cancel("cli_cancel"));
        } else if (ch->phase == CHAT_IDLE && ch->conn && !ch->resuming) {
            fputc('\n', stderr);
            chat_begin_close(ch);
        } else { /* a second Ctrl-C, or nothing to be polite about */
            ch->phase = CHAT_DONE;
            ch->deadline = now;
            if (ch->exit_code == CLI_EXIT_OK)
                ch->exit_code = CLI_EXIT_FAIL;
            return;
        }
    }
    if (!ch->conn && ch->reconnect_at && now >= ch->reconnect_at) {
        ch->reconnect_at = 0;
        if (cli_conn_open(ch->co, ch->loop, &chat_handlers, ch, &ch->conn))
            chat_fail(ch, "%s", "cannot reconnect");
    }
    if (ch->phase == CHAT_CLOSING && now > ch->deadline) {
        fprintf(stderr, "flashgate-cli: no session.closed from the server; closing the connection\n");
        ch->phase = CHAT_DONE;
        ch->deadline = now + CHAT_CLOSE_WAIT_US;
        if (ch->conn)
            fg_client_conn_close(ch->conn, 1000);
    }
    while (ch->phase == CHAT_IDLE && ch->conn && !ch->resuming) {
        cli_line *ln = NULL;
        int r = cli_lines_pop(ch->lines, &ln);
        if (r == 0)
            break;
        if (r < 0) {
            if (ch->interactive)
                fputc('\n', stderr);
            chat_begin_close(ch);
            break;
        }
        chat_on_line(ch, ln);
        free(ln);
    }
}

static int chat_run(chat *ch)
{
    static cli_lines lines; /* static: a reader blocked on a terminal may outlive this frame */
    ch->interactive = isatty(0) && isatty(2);
    if (cli_loop_create(ch->co, 50, 1, &ch->loop))
        return CLI_EXIT_FAIL;
    if (!cli_lines_start(&lines, 0, false, ch->loop)) {
        fprintf(stderr, "flashgate-cli: cannot start the stdin reader\n");
        fg_client_loop_destroy(ch->loop);
        return CLI_EXIT_FAIL;
    }
    ch->lines = &lines;
    ch->phase = CHAT_CREATING;
    if (cli_conn_open(ch->co, ch->loop, &chat_handlers, ch, &ch->conn)) {
        ch->exit_code = CLI_EXIT_FAIL;
        ch->phase = CHAT_DONE;
    }
    int seen_interrupts = cli_interrupts;
    for (;;) {
        if (ch->phase == CHAT_DONE && (!ch->conn || fg_clock_mono_us() > ch->deadline))
            break; /* closed, or the server does not answer the close frame */
        fg_client_loop_service(ch->loop);
        if (ch->phase != CHAT_DONE)
            chat_step(ch, &seen_interrupts);
    }
    cli_lines_stop(ch->lines);
    fg_client_conn_free(ch->conn);
    ch->conn = NULL;
    fg_client_loop_destroy(ch->loop);
    return ch->exit_code;
}

static void chat_usage(FILE *f)
{
    fprintf(f,
            "usage: flashgate-cli chat [options]\n"
            "\n"
            "Talk to the model: each line of stdin is a user message; the response streams to\n"
            "stdout and a usage line goes to stderr. Ctrl-D ends the session (session.close);\n"
            "Ctrl-C cancels a response in progress, or quits at the prompt. stdin may be a pipe.\n"
            "A dropped connection is reopened and the session resumed (up to %d times).\n"
            "\n"
            "options:\n" CLI_COMMON_HELP
            "  --instructions TEXT  the session's system prompt\n"
            "  --max-output-tokens N  per response (1..32768; default: the server's)\n"
            "  --temperature T      0..2 (0 = greedy; default: the server's)\n"
            "  --seed N             a fixed seed for reproducible output\n"
            "\n"
            "exit status: 0 at the end of input, 1 when the connection or session failed, 2 on\n"
            "bad options.\n",
            CHAT_MAX_RECONNECTS);
}

static int chat_main(int argc, char **argv)
{
    cli_common co;
    cli_common_init(&co);
    chat ch;
    memset(&ch, 0, sizeof ch);
    ch.co = &co;
    for (int i = 0; i < argc; i++) {
        const char *v;
        int r;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            chat_usage(stdout);
            return CLI_EXIT_OK;
        }
        if ((r = cli_common_opt(&co, argc, argv, &i)) != 0) {
            if (r < 0)
                return CLI_EXIT_USAGE;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--instructions", &v)) != 0) {
            if (r < 0)
                return CLI_EXIT_USAGE;
            ch.instructions = v;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--max-output-tokens", &v)) != 0) {
            uint64_t n;
            if (r < 0 || !cli_parse_u64(v, 1, 32768, &n)) {
                fprintf(stderr, "flashgate-cli: --max-output-tokens must be 1..32768\n");
                return CLI_EXIT_USAGE;
            }
            ch.sampling.has_max_output_tokens = true;
            ch.sampling.max_output_tokens = (uint32_t)n;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--temperature", &v)) != 0) {
            if (r < 0 || !cli_parse_double(v, 0, 2, &ch.sampling.temperature)) {
                fprintf(stderr, "flashgate-cli: --temperature must be 0..2\n");
                return CLI_EXIT_USAGE;
            }
            ch.sampling.has_temperature = true;
            continue;
        }
        if ((r = cli_opt(argc, argv, &i, "--seed", &v)) != 0) {
            if (r < 0 || !cli_parse_u64(v, 0, FG_PROTO_MAX_SEED, &ch.sampling.seed)) {
                fprintf(stderr, "flashgate-cli: --seed must be 0..2^53\n");
                return CLI_EXIT_USAGE;
            }
            ch.sampling.has_seed = true;
            continue;
        }
        fprintf(stderr, "flashgate-cli chat: unknown argument \"%s\" (see --help)\n", argv[i]);
        return CLI_EXIT_USAGE;
    }
    if (!cli_common_finish(&co))
        return CLI_EXIT_USAGE;
    return chat_run(&ch);
}

#endif
