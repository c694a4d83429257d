/* flashgate-bench-persist: agent-style sessions with persistent KV.
 *
 * N sessions each run --turns turns of tool-call style exchanges: a short new
 * input (--input tokens) and a short greedy output (--output tokens) over a
 * history that starts at --first tokens and grows every turn. All sessions
 * run a turn together; the time to first token (respond to the first TOKEN
 * event) is recorded per session and turn.
 *
 *   --mode persist   sessions keep their KV between turns (the engine's way);
 *                    with --persist-dir and a small --kv-budget they spill to
 *                    disk and come back, and spill/restore times are reported
 *   --mode reprefill every turn is a fresh session that prefills the whole
 *                    history (no prefix cache): the comparison only
 *
 * Prints, per turn, the median history length and time to first token, then
 * the share of input tokens served from the cache, KV bytes per token in
 * memory and on disk, and spill/restore counts and times.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/tools/bench_common.h"

typedef struct sess {
    fg_session_t *s;
    int32_t *hist;       /* the conversation so far (reprefill mode resends it) */
    int hist_n;
    bool done, first_seen;
    double t_start, ttft;
    int64_t cached, input;
} sess;

static void usage(void)
{
    fprintf(stderr, "usage: flashgate-bench-persist --model PATH [--sessions N] [--turns T] [--first TOKENS]\n"
                    "       [--input TOKENS] [--output TOKENS] [--mode persist|reprefill] [--kv-budget MiB]\n"
                    "       [--persist-dir DIR] [--threads N]\n");
    exit(2);
}

static void fill(int32_t *t, int n, int n_vocab, unsigned seed)
{
    unsigned s = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        t[i] = 1 + (int32_t)((s >> 8) % (unsigned)(n_vocab - 300)); /* clear of special tokens */
    }
}

int main(int argc, char **argv)
{
    const char *model = NULL, *dir = NULL, *mode = "persist";
    int n_sess = 8, turns = 8, first = 1024, in_n = 32, out_n = 16, threads = 0;
    long budget_mib = 2048;
    static struct option opts[] = {{"model", 1, 0, 'm'},  {"sessions", 1, 0, 's'}, {"turns", 1, 0, 't'},
                                   {"first", 1, 0, 'f'},  {"input", 1, 0, 'i'},    {"output", 1, 0, 'o'},
                                   {"mode", 1, 0, 'M'},   {"kv-budget", 1, 0, 'b'}, {"persist-dir", 1, 0, 'd'},
                                   {"threads", 1, 0, 'T'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 's': n_sess = atoi(optarg); break;
        case 't': turns = atoi(optarg); break;
        case 'f': first = atoi(optarg); break;
        case 'i': in_n = atoi(optarg); break;
        case 'o': out_n = atoi(optarg); break;
        case 'M': mode = optarg; break;
        case 'b': budget_mib = atol(optarg); break;
        case 'd': dir = optarg; break;
        case 'T': threads = atoi(optarg); break;
        default: usage();
        }
    }
    bool reprefill = strcmp(mode, "reprefill") == 0;
    if (!model || n_sess < 1 || turns < 1 || first < 1 || in_n < 1 || out_n < 1 || budget_mib < 1 ||
        (!reprefill && strcmp(mode, "persist") != 0))
        usage();
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model;
    o.serve = true;
    o.n_threads = threads;
    o.kv_budget_bytes = (size_t)budget_mib << 20;
    o.prefix_cache = !reprefill;
    o.persist_dir = reprefill ? NULL : dir;
    o.event_capacity = 4 * out_n + 8;
    o.text_capacity = 1 << 16;
    fg_engine_t *e;
    fg_diag d = {{0}};
    if (fg_engine_open(&o, &e, &d) != FG_OK) {
        fprintf(stderr, "cannot open engine: %s\n", d.msg);
        return 1;
    }
    fg_engine_info info;
    fg_engine_get_info(e, &info);
    int cap = first + turns * (in_n + out_n) + 1;
    if (cap > info.n_ctx) {
        fprintf(stderr, "history of %d tokens exceeds the context of %d\n", cap, info.n_ctx);
        return 1;
    }
    sess *S = calloc((size_t)n_sess, sizeof *S);
    int32_t *input = malloc((size_t)(first > in_n ? first : in_n) * sizeof *input);
    for (int i = 0; i < n_sess; i++) {
        S[i].hist = malloc((size_t)cap * sizeof *S[i].hist);
        if (!reprefill) {
            char name[32];
            snprintf(name, sizeof name, "bench%d", i);
            fg_session_params p = {.weight = 1, .name = dir ? name : NULL, .tenant_name = "bench"};
            if (fg_session_create(e, &p, &S[i].s) != FG_OK) {
                fprintf(stderr, "cannot create session %d\n", i);
                return 1;
            }
        }
    }
    printf("mode %s, %d sessions, %d turns, first history %d, +%d input +%d output per turn, KV %s %zu B/token\n",
           mode, n_sess, turns, first, in_n, out_n, fg_kv_format_name(info.kv_format), info.kv_bytes_per_token);
    printf("| turn | history (tokens) | time to first token p50 | max |\n|---|---|---|---|\n");
    int64_t sum_in = 0, sum_cached = 0;
    double second_ttft = 0, last_ttft = 0;
    for (int t = 0; t < turns; t++) {
        int n_new = t == 0 ? first : in_n;
        for (int i = 0; i < n_sess; i++) {
            sess *x = &S[i];
            fill(input, n_new, info.n_vocab, (unsigned)(i * 1000 + t + 1));
            memcpy(x->hist + x->hist_n, input, (size_t)n_new * sizeof *input);
            x->hist_n += n_new;
            if (reprefill) {
                fg_session_create(e, NULL, &x->s);
                fg_session_append(x->s, x->hist, x->hist_n, &d);
            } else {
                fg_session_append(x->s, input, n_new, &d);
            }
            x->done = x->first_seen = false;
        }
        fg_response_params rp = {.sampling = fg_sampling_default(), .max_tokens = out_n, .generate = true};
        for (int i = 0; i < n_sess; i++) {
            S[i].t_start = now_s();
            if (fg_session_respond(S[i].s, &rp, NULL, &d) != FG_OK) {
                fprintf(stderr, "respond: %s\n", d.msg);
                return 1;
            }
        }
        static fg_event ev[256];
        static char text[1 << 16];
        for (int left = n_sess; left > 0;) {
            left = 0;
            for (int i = 0; i < n_sess; i++) {
                sess *x = &S[i];
                if (x->done)
                    continue;
                int m = fg_session_poll(x->s, ev, 256, text, sizeof text);
                for (int k = 0; k < m; k++) {
                    if (ev[k].type == FG_EVENT_TOKEN) {
                        if (!x->first_seen) {
                            x->first_seen = true;
                            x->ttft = now_s() - x->t_start;
                        }
                        if (x->hist_n < cap)
                            x->hist[x->hist_n++] = ev[k].token;
                    } else if (ev[k].type == FG_EVENT_DONE) {
                        x->done = true;
                        x->cached = ev[k].usage.cached_tokens;
                        x->input = ev[k].usage.input_tokens;
                    }
                }
                left += !x->done;
            }
            if (left)
                usleep(200);
        }
        double tt[4096], hl[4096], mx = 0;
        int m = n_sess < 4096 ? n_sess : 4096;
        for (int i = 0; i < m; i++) {
            tt[i] = S[i].ttft;
            hl[i] = S[i].hist_n;
            mx = S[i].ttft > mx ? S[i].ttft : mx;
            sum_in += S[i].input;
            sum_cached += S[i].cached;
            if (reprefill) {
                fg_session_free(S[i].s);
                S[i].s = NULL;
            }
        }
        double p50 = median(tt, m);
        if (t == 1)
            second_ttft = p50;
        last_ttft = p50;
        printf("| %d | %.0f | %.1f ms | %.1f ms |\n", t + 1, median(hl, m), p50 * 1e3, mx * 1e3);
        fflush(stdout);
    }
    fg_engine_stats st;
    if (dir && !reprefill)
        fg_engine_save_all(e, &d);
    fg_engine_get_stats(e, &st);
    int64_t tokens_on_disk = 0;
    for (int i = 0; i < n_sess; i++)
        tokens_on_disk += S[i].hist_n;
    if (turns > 2)
        printf("\nturn %d / turn 2 time to first token: %.2fx (turn 1 includes the first history's prefill)\n", turns,
               last_ttft / (second_ttft > 0 ? second_ttft : 1));
    printf("input tokens served from cache: %.1f %%\n", sum_in ? 100.0 * (double)sum_cached / (double)sum_in : 0.0);
    printf("KV bytes per token: %zu in memory", info.kv_bytes_per_token);
    if (dir && !reprefill && tokens_on_disk)
        printf(", %.0f on disk (files %llu bytes for %lld tokens)", (double)st.disk_bytes / (double)tokens_on_disk,
               (unsigned long long)st.disk_bytes, (long long)tokens_on_disk);
    printf("\nspills %llu (%.2f ms each), restores %llu (%.2f ms each), saves %llu, save errors %llu, prefix hits %llu of %llu\n",
           (unsigned long long)st.spills, st.spills ? st.spill_seconds * 1e3 / (double)st.spills : 0.0,
           (unsigned long long)st.restores, st.restores ? st.restore_seconds * 1e3 / (double)st.restores : 0.0,
           (unsigned long long)st.saves, (unsigned long long)st.save_errors, (unsigned long long)st.prefix_hits,
           (unsigned long long)st.prefix_lookups);
    for (int i = 0; i < n_sess; i++) {
        if (S[i].s)
            fg_session_free(S[i].s);
        free(S[i].hist);
    }
    free(S);
    free(input);
    fg_engine_close(e);
    return 0;
}
