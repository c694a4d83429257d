/* flashgate-bench-agent: agent-style sessions over a growing history.
 *
 * N sessions (one tenant) each run --turns turns of a tool-call exchange: a
 * new input (the tool's result) of --history / --turns - --output tokens,
 * then a greedy reply of --output tokens, so the history grows to --history
 * tokens. With --first F, turn 1 is a long task of F - --output tokens and the
 * later turns share the rest (short tool results over a long history). Each
 * session starts its next turn as soon as its reply is done (closed loop, all
 * sessions at once). Measured per turn: the time to first
 * token (respond to the first TOKEN event) against the history before the
 * turn, in wall time and in the process's CPU time over the same interval
 * (with one session, the CPU spent on that turn's prefill: on a shared
 * machine it moves far less with the neighbours' load than wall time does);
 * overall: the share of input tokens served from the cache
 * (cached_tokens / input_tokens of each DONE), resident KV bytes per token.
 *
 * --reprefill is the comparison: each turn starts a fresh session and
 * prefills the whole history again (the prefix cache off, so nothing is
 * reused).
 *
 * With --persist-dir (persistent mode): after the turns every session is
 * saved (fg_engine_save_all, timed), the engine is closed and opened again,
 * and every session is restored (fg_session_restore, timed) and runs one
 * more turn: disk bytes per token, save and restore times, the TTFT of the
 * first turn after a restart, and the engine's spill counters (spills happen
 * when --kv-budget is smaller than the working set).
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/tools/bench_common.h"

#define TENANT "bench"


typedef struct agent {
    int id;
    char name[32];
    fg_session_t *s;
    int32_t *hist;          /* [history + output + slack]: every token of the conversation */
    int n_hist;
    int turn;               /* turns started */
    bool responding, got_first, done;
    double t_start, cpu_start;
    double *ttft;           /* [turns + 1] seconds */
    double *ttft_cpu;       /* [turns + 1] process CPU seconds over the same interval */
    int *hist_at;           /* [turns + 1] history tokens before each turn */
} agent;

typedef struct bench {
    fg_engine_t *e;
    fg_bench_waker w;
    agent *a;
    int n, turns, n_first, n_in, n_out, n_vocab; /* n_first: turn 1's input, n_in: a later turn's */
    bool reprefill;
    int64_t input_tokens, cached_tokens;
} bench;

static int input_len(const bench *b, int turn_index)
{
    return turn_index == 0 ? b->n_first : b->n_in;
}

/* A tool result: tokens that differ per session and turn. */
static void make_input(const bench *b, agent *a, int32_t *out)
{
    for (int j = 0; j < input_len(b, a->turn); j++)
        out[j] = (int32_t)(((unsigned)(a->id * 7919 + a->turn * 104729 + j * 31337)) % (unsigned)(b->n_vocab - 2)) + 1;
}

static int start_turn(bench *b, agent *a, int turn_index)
{
    fg_diag d = {{0}};
    int32_t *in = a->hist + a->n_hist;
    a->turn = turn_index;
    make_input(b, a, in);
    a->hist_at[turn_index] = a->n_hist;
    fg_err e = FG_OK;
    if (b->reprefill) {
        /* the comparison: a new session that prefills everything again */
        if (a->s)
            fg_session_free(a->s);
        fg_session_params sp = {.weight = 1, .user = a, .tenant_name = TENANT};
        e = fg_session_create(b->e, &sp, &a->s);
        if (e == FG_OK)
            e = fg_session_append(a->s, a->hist, a->n_hist + input_len(b, turn_index), &d);
    } else {
        e = fg_session_append(a->s, in, input_len(b, turn_index), &d);
    }
    a->n_hist += input_len(b, turn_index);
    fg_response_params rp = {.sampling = fg_sampling_default(), .generate = true, .max_tokens = b->n_out};
    rp.sampling.temperature = 0;
    a->t_start = fg_clock_mono_s();
    a->cpu_start = process_cpu_s();
    if (e == FG_OK)
        e = fg_session_respond(a->s, &rp, NULL, &d);
    if (e != FG_OK) {
        fprintf(stderr, "error: session %d turn %d: %s %s\n", a->id, turn_index, fg_err_name(e), d.msg);
        return -1;
    }
    a->responding = true;
    a->got_first = false;
    return 0;
}

/* Runs turns [from, to) of every agent, closed loop. */
static int run_turns(bench *b, int from, int to)
{
    fg_event ev[64];
    static char text[1 << 16];
    void *ready[256];
    int left = b->n;
    for (int i = 0; i < b->n; i++) {
        b->a[i].done = false;
        if (start_turn(b, &b->a[i], from))
            return -1;
    }
    while (left > 0) {
        fg_bench_wait(&b->w, 20);
        int k;
        while ((k = fg_engine_take_ready(b->e, ready, 256)) > 0) {
            for (int r = 0; r < k; r++) {
                agent *a = ready[r];
                int m;
                while ((m = fg_session_poll(a->s, ev, 64, text, sizeof text)) > 0) {
                    double t = fg_clock_mono_s(), cpu = process_cpu_s();
                    for (int j = 0; j < m; j++) {
                        if (ev[j].type == FG_EVENT_TOKEN) {
                            if (!a->got_first) {
                                a->got_first = true;
                                a->ttft[a->turn] = t - a->t_start;
                                a->ttft_cpu[a->turn] = cpu - a->cpu_start;
                            }
                            a->hist[a->n_hist++] = ev[j].token;
                        } else if (ev[j].type == FG_EVENT_DONE) {
                            if (ev[j].finish == FG_FINISH_ERROR) {
                                fprintf(stderr, "error: session %d: %s\n", a->id, fg_err_name(ev[j].error));
                                return -1;
                            }
                            b->input_tokens += ev[j].usage.input_tokens;
                            b->cached_tokens += ev[j].usage.cached_tokens;
                            a->responding = false;
                            if (a->turn + 1 < to) {
                                if (start_turn(b, a, a->turn + 1))
                                    return -1;
                            } else if (!a->done) {
                                a->done = true;
                                left--;
                            }
                        }
                    }
                }
            }
        }
    }
    return 0;
}

static void print_turns(const bench *b, int from, int to)
{
    double *v = malloc((size_t)b->n * sizeof *v);
    printf("%6s %10s %12s %12s %12s %12s %12s\n", "turn", "history", "ttft p50 ms", "ttft p90 ms", "vs turn 1",
           "cpu p50 ms", "vs turn 1");
    double first = 0, first_cpu = 0;
    for (int t = from; t < to; t++) {
        double hist = 0;
        for (int i = 0; i < b->n; i++) {
            v[i] = b->a[i].ttft[t];
            hist += b->a[i].hist_at[t];
        }
        double p50 = percentile(v, (size_t)b->n, 0.5), p90 = percentile(v, (size_t)b->n, 0.9);
        for (int i = 0; i < b->n; i++)
            v[i] = b->a[i].ttft_cpu[t];
        double cpu50 = percentile(v, (size_t)b->n, 0.5);
        if (t == 0) {
            first = p50;
            first_cpu = cpu50;
        }
        printf("%6d %10.0f %12.1f %12.1f %11.2fx %12.1f %11.2fx\n", t + 1, hist / b->n, 1e3 * p50, 1e3 * p90,
               first > 0 ? p50 / first : 0, 1e3 * cpu50, first_cpu > 0 ? cpu50 / first_cpu : 0);
    }
    free(v);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows as they come: long runs */
    fg_engine_options eo;
    fg_engine_options_default(&eo);
    eo.model_path = "models/flash-mini.gguf";
    eo.serve = true;
    eo.kv_budget_bytes = (size_t)2 << 30;
    bench b = {.n = 4, .turns = 10, .n_out = 16};
    int history = 16000, first = 0;
    const char *persist_dir = NULL;
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'},     {"sessions", required_argument, 0, 's'},
        {"turns", required_argument, 0, 'T'},     {"history", required_argument, 0, 'H'},
        {"output", required_argument, 0, 'o'},    {"reprefill", no_argument, 0, 'R'},
        {"persist-dir", required_argument, 0, 'P'}, {"kv-budget", required_argument, 0, 'B'},
        {"threads", required_argument, 0, 't'},   {"prefill-chunk", required_argument, 0, 'C'},
        {"max-batch", required_argument, 0, 'M'}, {"prefill-alone", required_argument, 0, 'A'},
        {"first", required_argument, 0, 'F'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:s:T:H:o:RP:B:t:C:M:A:F:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model_path = optarg; break;
        case 's': b.n = atoi(optarg); break;
        case 'T': b.turns = atoi(optarg); break;
        case 'H': history = atoi(optarg); break;
        case 'o': b.n_out = atoi(optarg); break;
        case 'R': b.reprefill = true; break;
        case 'P': persist_dir = optarg; break;
        case 'B': eo.kv_budget_bytes = (size_t)atoll(optarg) << 20; break;
        case 't': eo.n_threads = atoi(optarg); break;
        case 'C': eo.prefill_chunk = atoi(optarg); break;
        case 'M': eo.max_batch_tokens = atoi(optarg); break;
        case 'A': eo.prefill_alone_tokens = atoi(optarg); break;
        case 'F': first = atoi(optarg); break;
        case 'h':
            printf("usage: flashgate-bench-agent [--model PATH] [--sessions 4] [--turns 10] [--history 16000] "
                   "[--output 16] [--reprefill] [--persist-dir DIR] [--kv-budget MiB] [--threads N] [--prefill-chunk 128] "
                   "[--max-batch 256] [--prefill-alone 512] [--first N]\n");
            return 0;
        default: return 2;
        }
    }
    /* Turn 1 takes --first tokens when given (a long task, then short tool
     * results), else every turn takes the same. */
    if (first > 0) {
        b.n_first = first - b.n_out;
        b.n_in = b.turns > 1 ? (history - first) / (b.turns - 1) - b.n_out : 0;
    } else {
        b.n_first = b.n_in = b.turns > 0 ? history / b.turns - b.n_out : 0;
    }
    if (b.n < 1 || b.turns < 1 || b.n_out < 1 || b.n_in < 1 || b.n_first < 1 || (b.reprefill && persist_dir)) {
        fprintf(stderr, "error: bad arguments (see --help; --reprefill runs without --persist-dir)\n");
        return 2;
    }
    b.w = (fg_bench_waker){PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    eo.wakeup = fg_bench_wake;
    eo.wakeup_user = &b.w;
    eo.persist_dir = persist_dir;
    eo.prefix_cache = !b.reprefill;
    fg_diag d = {{0}};
    if (fg_engine_open(&eo, &b.e, &d) != FG_OK) {
        fprintf(stderr, "error: %s\n", d.msg);
        return 1;
    }
    fg_engine_info info;
    fg_engine_get_info(b.e, &info);
    b.n_vocab = info.n_vocab;
    if (history + b.n_out + 8 > info.n_ctx) {
        fprintf(stderr, "error: --history %d does not fit the context (%d)\n", history, info.n_ctx);
        return 2;
    }
    fg_bench_print_machine();
    printf("model %s: kv %s %zu B/token, %d threads, prefill chunks of %d in steps of %d tokens (%d with no decode); "
           "%d sessions x %d turns: %d new tokens (turn 1: %d) + %d output per turn, history to %d tokens; %s\n",
           eo.model_path, fg_kv_format_name(info.kv_format), info.kv_bytes_per_token, info.n_threads,
           eo.prefill_chunk, eo.max_batch_tokens, eo.prefill_alone_tokens, b.n, b.turns, b.n_in, b.n_first, b.n_out,
           history, b.reprefill ? "re-prefill of the whole history each turn" : "persistent KV");
    const int cap = history + 2 * (b.n_first + b.n_in + b.n_out) + 16;
    b.a = calloc((size_t)b.n, sizeof *b.a);
    for (int i = 0; i < b.n; i++) {
        agent *a = &b.a[i];
        a->id = i;
        snprintf(a->name, sizeof a->name, "agent-%d", i);
        a->hist = malloc((size_t)cap * sizeof *a->hist);
        a->ttft = calloc((size_t)b.turns + 1, sizeof *a->ttft);
        a->ttft_cpu = calloc((size_t)b.turns + 1, sizeof *a->ttft_cpu);
        a->hist_at = calloc((size_t)b.turns + 1, sizeof *a->hist_at);
        if (!b.reprefill) {
            fg_session_params sp = {.weight = 1, .user = a, .name = a->name, .tenant_name = TENANT};
            if (fg_session_create(b.e, &sp, &a->s) != FG_OK) {
                fprintf(stderr, "error: cannot create session %d\n", i);
                return 1;
            }
        }
    }
    double t0 = fg_clock_mono_s();
    if (run_turns(&b, 0, b.turns))
        return 1;
    double wall = fg_clock_mono_s() - t0;
    print_turns(&b, 0, b.turns);
    printf("load average after the turns %.2f\n", fg_bench_load1());
    int64_t tokens = 0;
    for (int i = 0; i < b.n; i++)
        tokens += b.a[i].n_hist;
    fg_engine_stats st;
    fg_engine_get_stats(b.e, &st);
    fg_tenant_kv_usage u;
    bool have_usage = fg_engine_tenant_usage(b.e, TENANT, &u) == FG_OK;
    printf("wall %.1f s; input tokens served from cache %.1f %% (%lld of %lld); prefilled %llu tokens; %llu steps, "
           "%llu of them prompt only\n",
           wall, b.input_tokens ? 100.0 * (double)b.cached_tokens / (double)b.input_tokens : 0.0,
           (long long)b.cached_tokens, (long long)b.input_tokens, (unsigned long long)st.prefill_tokens,
           (unsigned long long)st.steps, (unsigned long long)st.steps_alone);
    if (have_usage)
        printf("resident KV %.1f MB for %lld tokens: %.0f B/token in memory (%d sessions resident, %d on disk)\n",
               u.resident_kv_bytes / 1e6, (long long)tokens, (double)u.resident_kv_bytes / (double)tokens,
               u.sessions_resident, u.sessions_on_disk);
    printf("spills %llu (%.1f ms each), restores %llu (%.1f ms each), saves %llu, save errors %llu\n",
           (unsigned long long)st.spills, st.spills ? 1e3 * st.spill_seconds / (double)st.spills : 0.0,
           (unsigned long long)st.restores, st.restores ? 1e3 * st.restore_seconds / (double)st.restores : 0.0,
           (unsigned long long)st.saves, (unsigned long long)st.save_errors);

    if (persist_dir) {
        /* A restart: save everything, close, open again, restore every session, one more turn. */
        double ts = fg_clock_mono_s();
        fg_err e = fg_engine_save_all(b.e, &d);
        double save_s = fg_clock_mono_s() - ts;
        if (e != FG_OK)
            fprintf(stderr, "warning: save_all: %s\n", d.msg);
        for (int i = 0; i < b.n; i++)
            fg_session_free(b.a[i].s);
        fg_engine_close(b.e);
        if (fg_engine_open(&eo, &b.e, &d) != FG_OK) {
            fprintf(stderr, "error: reopen: %s\n", d.msg);
            return 1;
        }
        bool ok = fg_engine_tenant_usage(b.e, TENANT, &u) == FG_OK;
        double tr = fg_clock_mono_s();
        for (int i = 0; i < b.n; i++) {
            agent *a = &b.a[i];
            fg_session_params sp = {.weight = 1, .user = a, .name = a->name, .tenant_name = TENANT};
            if ((e = fg_session_restore(b.e, &sp, &a->s, &d)) != FG_OK) {
                fprintf(stderr, "error: restore %s: %s\n", a->name, d.msg);
                return 1;
            }
        }
        double restore_s = fg_clock_mono_s() - tr;
        if (ok)
            printf("on disk %.1f MB for %lld tokens: %.0f B/token; save_all %.1f ms (%.2f ms per session), "
                   "restore %.2f ms per session\n",
                   u.disk_bytes / 1e6, (long long)tokens, (double)u.disk_bytes / (double)tokens, 1e3 * save_s,
                   1e3 * save_s / b.n, 1e3 * restore_s / b.n);
        if (run_turns(&b, b.turns, b.turns + 1))
            return 1;
        double *v = malloc((size_t)b.n * sizeof *v), *vc = malloc((size_t)b.n * sizeof *vc);
        for (int i = 0; i < b.n; i++) {
            v[i] = b.a[i].ttft[b.turns];
            vc[i] = b.a[i].ttft_cpu[b.turns];
        }
        printf("turn %d after the restart (history %d): ttft p50 %.1f ms, p90 %.1f ms; cpu p50 %.1f ms\n",
               b.turns + 1, b.a[0].hist_at[b.turns], 1e3 * percentile(v, (size_t)b.n, 0.5),
               1e3 * percentile(v, (size_t)b.n, 0.9), 1e3 * percentile(vc, (size_t)b.n, 0.5));
        free(vc);
        fg_engine_get_stats(b.e, &st);
        printf("after the restart: restores %llu (%.1f ms each)\n", (unsigned long long)st.restores,
               st.restores ? 1e3 * st.restore_seconds / (double)st.restores : 0.0);
        free(v);
    }
    for (int i = 0; i < b.n; i++) {
        fg_session_free(b.a[i].s);
        free(b.a[i].hist);
        free(b.a[i].ttft);
        free(b.a[i].ttft_cpu);
        free(b.a[i].hist_at);
    }
    free(b.a);
    fg_engine_close(b.e);
    return 0;
}
