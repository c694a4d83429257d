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
 * Prints, per prompt: tokens/s plain and speculative (medians), the ratio,
 * drafts per step and the acceptance rate (accepted / verified drafts), and
 * the draft source. The machine and its load go first: the rates are this
 * process's share of a possibly shared machine, so only the ratio of two
 * alternating columns means much.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/tools/bench_common.h"

typedef struct result {
    double tok_s;
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
    const double t0 = fg_clock_mono_s();
    if (fg_session_respond(s, &p, NULL, &d) != FG_OK) {
        fprintf(stderr, "respond: %s\n", d.msg);
        return -1;
    }
    fg_event done = wait_done(e, w, s, &tokens);
    const double dt = fg_clock_mono_s() - t0;
    fg_session_free(s);
    *out = (result){.tok_s = (double)done.usage.output_tokens / dt, .out = done.usage.output_tokens,
                    .drafted = done.usage.draft_tokens, .accepted = done.usage.draft_accepted};
    return 0;
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
    printf("%-6s %7s %12s %12s %7s %12s %10s\n", "prompt", "tokens", "plain tok/s", "spec tok/s", "ratio",
           "drafts/tok", "accepted");
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
        double plain[64], spec[64];
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
                if (drafts) {
                    out += res.out;
                    drafted += res.drafted;
                    accepted += res.accepted;
                }
            }
        const double mp = median(plain, r_max), ms = median(spec, r_max);
        printf("%-6s %7zu %12.1f %12.1f %6.2fx %12.2f %9.1f%%\n", names[k], n, mp, ms, ms / mp,
               out ? (double)drafted / (double)out : 0.0, drafted ? 100.0 * (double)accepted / (double)drafted : 0.0);
        free(ids);
    }
    fg_engine_stats st;
    fg_engine_get_stats(e, &st);
    printf("drafts: %llu verified (%llu from the MTP block, the rest prompt lookup), %llu accepted, %llu replayed\n",
           (unsigned long long)st.draft_tokens, (unsigned long long)st.draft_tokens_mtp,
           (unsigned long long)st.draft_accepted, (unsigned long long)st.draft_replayed);
    fg_engine_close(e);
    free(text);
    free(quote);
    return 0;
}
