/* flashgate-bench-spec: single-stream decode with and without speculative
 * decoding (engine.h: speculative, spec_drafts).
 *
 * One serving engine with speculation on; each run is one session that
 * prefills a prompt (not timed) and then decodes --decode greedy tokens
 * alone, timed from the request to DONE. Runs alternate between plain
 * decoding (the response's no_drafts) and speculative decoding, the order
 * swapped every pair, so a neighbour's load on a shared machine falls on
 * both alike; figures are medians over --reps pairs. Two prompts:
 *   free:  the text of --text (default: the first 1500 bytes of
 *          tests/english/heldout.txt), continued by the model;
 *   quote: the same text, a blank line, and its first quarter again: the
 *          continuation that quotes the rest back is what an agent's turn
 *          does with a tool's output, and what prompt lookup drafts.
 * Prints, per prompt: tokens/s plain and speculative (wall clock, medians)
 * and their ratio; the process's CPU time per output token (all threads,
 * waiting workers' polling included), the figure to compare on a shared
 * machine, where the wall-clock rates are this process's share of it; the
 * output tokens per engine step with drafts (1 without; deterministic for
 * greedy decoding), drafts per output token and the acceptance rate
 * (accepted / verified drafts), and the draft source. The machine and its
 * load go first.
 *
 * Then the price of a draft: on a direct-mode engine, one sequence's pass of
 * n tokens (1 + drafts; absorbed, as a verification is) against a pass of
 * one, CPU time, medians over --reps x 4 passes. A verification of n tokens
 * pays when it emits more than cost(n) / cost(1) tokens: on weights that
 * stream from memory the extra rows are nearly free, on weights in cache
 * they cost what a token costs.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/tools/bench_common.h"

typedef struct result {
    double tok_s;       /* wall clock */
    double cpu_ms;      /* process CPU time per output token */
    double per_step;    /* output tokens per engine step */
    int64_t out, drafted, accepted;
} result;

/* Waits for s's DONE; returns it (usage) and counts its tokens. */
static fg_event wait_done(fg_engine_t *e, fg_bench_waker *w, fg_session_t *s, int *tokens)
{
    fg_event ev[64];
    static char text[1 << 16];
    void *ready[16];
    for (;;) {
        fg_bench_wait(w, 50);
        while (fg_engine_take_ready(e, ready, 16) > 0) {
        }
        int m;
        while ((m = fg_session_poll(s, ev, 64, text, sizeof text)) > 0)
            for (int j = 0; j < m; j++) {
                if (ev[j].type == FG_EVENT_TOKEN)
                    (*tokens)++;
                if (ev[j].type == FG_EVENT_DONE)
                    return ev[j];
            }
    }
}

static int run_one(fg_engine_t *e, fg_bench_waker *w, const int32_t *prompt, int n_prompt, int n_decode,
                   bool drafts, result *out)
{
    fg_session_t *s;
    fg_diag d;
    if (fg_session_create(e, NULL, &s) != FG_OK || fg_session_append(s, prompt, n_prompt, &d) != FG_OK)
        return -1;
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = 1, .generate = false};
    int tokens = 0;
    if (fg_session_respond(s, &p, NULL, &d) != FG_OK)
        return -1;
    (void)wait_done(e, w, s, &tokens);
    p.generate = true;
    p.max_tokens = n_decode;
    p.no_drafts = !drafts;
    fg_engine_stats st0, st1;
    fg_engine_get_stats(e, &st0);
    const double t0 = fg_clock_mono_s(), c0 = process_cpu_s();
    if (fg_session_respond(s, &p, NULL, &d) != FG_OK) {
        fprintf(stderr, "respond: %s\n", d.msg);
        return -1;
    }
    fg_event done = wait_done(e, w, s, &tokens);
    const double dt = fg_clock_mono_s() - t0, dc = process_cpu_s() - c0;
    fg_engine_get_stats(e, &st1);
    fg_session_free(s);
    const double n_out = (double)done.usage.output_tokens;
    *out = (result){.tok_s = n_out / dt, .cpu_ms = 1e3 * dc / n_out,
                    .per_step = n_out / (double)(st1.steps - st0.steps > 0 ? st1.steps - st0.steps : 1),
                    .out = done.usage.output_tokens,
                    .drafted = done.usage.draft_tokens, .accepted = done.usage.draft_accepted};
    return 0;
}

/* CPU time of passes of 1 + k tokens of one sequence against passes of one (see the top). */
static void pass_cost(const fg_engine_options *so, const char *text, size_t len, int reps)
{
    fg_engine_options o = *so;
    o.serve = false;
    o.wakeup = NULL;
    fg_engine_t *e;
    fg_session_t *s;
    fg_diag d;
    if (fg_engine_open(&o, &e, &d) != FG_OK || fg_session_create(e, NULL, &s) != FG_OK) {
        fprintf(stderr, "direct engine: %s\n", d.msg);
        return;
    }
    size_t n = 0;
    (void)fg_tokenizer_encode(fg_engine_tokenizer(e), text, len, true, false, NULL, 0, &n);
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    if (!ids || fg_tokenizer_encode(fg_engine_tokenizer(e), text, len, true, false, ids, n + 1, &n) != FG_OK ||
        n < 64) {
        fprintf(stderr, "pass cost: the text is too short\n");
        free(ids);
        fg_engine_close(e);
        return;
    }
    const int prompt = (int)n / 2, sizes[] = {1, 2, 3, 5, 9, 17};
    double base = 0;
    if (fg_session_eval(s, ids, prompt, NULL, false, &d) != FG_OK) {
        fprintf(stderr, "pass cost: %s\n", d.msg);
        return;
    }
    printf("pass of 1 + k tokens of one sequence (absorbed), CPU time, median of %d:", reps);
    int at = prompt;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        double c[256];
        int r_max = reps < 256 ? reps : 256;
        for (int r = 0; r < r_max; r++) {
            if (at + sizes[i] > (int)n)
                at = prompt / 2; /* the text repeats (the tokens only feed the pass) */
            const double c0 = process_cpu_s();
            if (fg_session_eval(s, ids + at, sizes[i], NULL, false, &d) != FG_OK) {
                fprintf(stderr, "\npass cost: %s\n", d.msg);
                r_max = r;
                break;
            }
            c[r] = process_cpu_s() - c0;
            at += sizes[i];
        }
        if (r_max == 0)
            break;
        const double m = median(c, r_max);
        if (i == 0)
            base = m;
        printf("%s k=%d %.2f ms (%.2fx)", i ? "," : "", sizes[i] - 1, 1e3 * m, m / base);
    }
    printf("\n");
    free(ids);
    fg_session_free(s);
    fg_engine_close(e);
}

static char *read_text(const char *path, size_t cap, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(cap + 1);
    *len = buf ? fread(buf, 1, cap, f) : 0;
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    fg_engine_options eo;
    fg_engine_options_default(&eo);
    eo.speculative = true; /* the response's no_drafts gives the plain runs */
    eo.model_path = "models/flash-english.gguf";
    eo.serve = true;
    eo.kv_budget_bytes = (size_t)1 << 30;
    const char *text_path = "tests/english/heldout.txt";
    int n_decode = 128, reps = 5;
    size_t text_bytes = 1500;
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'},   {"decode", required_argument, 0, 'n'},
        {"threads", required_argument, 0, 't'}, {"reps", required_argument, 0, 'r'},
        {"drafts", required_argument, 0, 'k'},  {"text", required_argument, 0, 'f'},
        {"bytes", required_argument, 0, 'c'},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:n:t:r:k:f:c:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model_path = optarg; break;
        case 'n': n_decode = atoi(optarg); break;
        case 't': eo.n_threads = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'k': eo.spec_drafts = atoi(optarg); break;
        case 'f': text_path = optarg; break;
        case 'c': text_bytes = (size_t)atol(optarg); break;
        default:
            fprintf(stderr,
                    "usage: flashgate-bench-spec [--model F] [--decode N] [--threads N] [--reps N] [--drafts K]\n"
                    "                            [--text FILE] [--bytes N]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (reps < 1 || n_decode < 2) {
        fprintf(stderr, "--reps >= 1, --decode >= 2\n");
        return 2;
    }
    fg_bench_waker w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    eo.wakeup = fg_bench_wake;
    eo.wakeup_user = &w;
    fg_engine_t *e;
    fg_diag d;
    if (fg_engine_open(&eo, &e, &d) != FG_OK) {
        fprintf(stderr, "open %s: %s\n", eo.model_path, d.msg);
        return 1;
    }
    size_t len;
    char *text = read_text(text_path, text_bytes, &len);
    if (!text || len == 0) {
        fprintf(stderr, "cannot read %s\n", text_path);
        return 1;
    }
    /* quote: text, a blank line, its first quarter again */
    const size_t quarter = len / 4, qlen = len + 2 + quarter;
    char *quote = malloc(qlen);
    memcpy(quote, text, len);
    memcpy(quote + len, "\n\n", 2);
    memcpy(quote + len + 2, text, quarter);
    const fg_tokenizer_t *tok = fg_engine_tokenizer(e);
    fg_engine_info info;
    fg_engine_get_info(e, &info);
    fg_bench_print_machine();
    printf("model %s, %d threads (%s), drafts up to %d, %d tokens per run, %d alternating pairs; medians\n",
           eo.model_path, info.n_threads, fg_isa_name(info.isa), eo.spec_drafts, n_decode, reps);
    printf("%-6s %6s | %11s %10s %6s | %11s %11s %6s | %9s %9s %9s\n", "prompt", "tokens", "plain tok/s",
           "spec tok/s", "ratio", "plain cpu", "spec cpu", "ratio", "tok/step", "drafts/tok", "accepted");
    printf("%-6s %6s | %11s %10s %6s | %11s %11s %6s |\n", "", "", "(wall)", "(wall)", "", "ms/tok", "ms/tok", "");
    const char *names[2] = {"free", "quote"};
    const char *texts[2] = {text, quote};
    const size_t lens[2] = {len, qlen};
    for (int k = 0; k < 2; k++) {
        size_t n = 0;
        (void)fg_tokenizer_encode(tok, texts[k], lens[k], true, false, NULL, 0, &n);
        int32_t *ids = malloc((n + 1) * sizeof *ids);
        if (!ids || fg_tokenizer_encode(tok, texts[k], lens[k], true, false, ids, n + 1, &n) != FG_OK) {
            fprintf(stderr, "cannot tokenize the prompt\n");
            return 1;
        }
        double plain[64], spec[64], plain_cpu[64], spec_cpu[64], per_step[64];
        int64_t out = 0, drafted = 0, accepted = 0;
        const int r_max = reps < 64 ? reps : 64;
        for (int r = 0; r < r_max; r++)
            for (int half = 0; half < 2; half++) {
                const bool drafts = (half ^ (r & 1)) != 0;
                result res;
                if (run_one(e, &w, ids, (int)n, n_decode, drafts, &res) != 0) {
                    fprintf(stderr, "run failed\n");
                    return 1;
                }
                (drafts ? spec : plain)[r] = res.tok_s;
                (drafts ? spec_cpu : plain_cpu)[r] = res.cpu_ms;
                if (drafts) {
                    per_step[r] = res.per_step;
                    out += res.out;
                    drafted += res.drafted;
                    accepted += res.accepted;
                }
            }
        const double mp = median(plain, r_max), ms = median(spec, r_max);
        const double cp = median(plain_cpu, r_max), cs = median(spec_cpu, r_max);
        printf("%-6s %6zu | %11.1f %10.1f %5.2fx | %11.2f %11.2f %5.2fx | %9.2f %9.2f %8.1f%%\n", names[k], n, mp, ms,
               ms / mp, cp, cs, cp / cs, median(per_step, r_max), out ? (double)drafted / (double)out : 0.0,
               drafted ? 100.0 * (double)accepted / (double)drafted : 0.0);
        free(ids);
    }
    fg_engine_stats st;
    fg_engine_get_stats(e, &st);
    printf("drafts: %llu verified (%llu from the MTP block, the rest prompt lookup), %llu accepted, %llu replayed\n",
           (unsigned long long)st.draft_tokens, (unsigned long long)st.draft_tokens_mtp,
           (unsigned long long)st.draft_accepted, (unsigned long long)st.draft_replayed);
    fg_engine_close(e);
    pass_cost(&eo, text, len, reps * 4);
    free(text);
    free(quote);
    return 0;
}
