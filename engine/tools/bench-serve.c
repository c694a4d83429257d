/* flashgate-bench-serve: the serving engine under concurrency.
 *
 * For each concurrency level N: N sessions each get a prompt of --prompt
 * tokens (prefilled together, generate=false, timed as prefill tokens/s), then
 * all respond at once with --decode greedy tokens (aggregate decode tokens/s,
 * and the time between consecutive tokens of each session, observed as the
 * events are polled). Prints one table row per level plus the machine's
 * cache sizes, its read bandwidth from DRAM and over a set the size of the
 * active weights, and the single-sequence limit of the level that holds the
 * weights (DRAM only when they outgrow the LLC). Each
 * level runs --reps times; figures are medians. "cpu ms/tok" is the process's
 * CPU time (all threads, waiting workers' polling included) over the decode
 * phase per generated token: on a shared machine it moves far less than the
 * wall-clock rates when neighbours take the cores, so it is the figure to
 * compare two builds by.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "engine/engine.h"
#include "engine/tools/bench_common.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"

/* The wakeup callback: the step thread says events are ready. */
/* CPU seconds used by the whole process so far (every thread). */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

typedef struct client {
    fg_session_t *s;
    int done;
    int tokens;
    double last;
} client;

/* Polls until every client is done; collects inter-token gaps. */
static void run_until_done(fg_engine_t *e, fg_bench_waker *w, client *c, int n, double *gaps, size_t *n_gaps, size_t cap)
{
    fg_event ev[64];
    static char text[1 << 16];
    void *ready[256];
    int left = n;
    while (left > 0) {
        fg_bench_wait(w, 50);
        int k;
        while ((k = fg_engine_take_ready(e, ready, 256)) > 0) {
            for (int i = 0; i < k; i++) {
                client *cl = ready[i];
                int m;
                while ((m = fg_session_poll(cl->s, ev, 64, text, sizeof text)) > 0) {
                    double t = fg_clock_mono_s();
                    for (int j = 0; j < m; j++) {
                        if (ev[j].type == FG_EVENT_TOKEN) {
                            if (cl->tokens > 0 && *n_gaps < cap)
                                gaps[(*n_gaps)++] = t - cl->last;
                            cl->last = t;
                            cl->tokens++;
                        } else if (ev[j].type == FG_EVENT_DONE && !cl->done) {
                            cl->done = 1;
                            left--;
                        }
                    }
                }
            }
        }
    }
}

/* The routed picks per expert, hottest first, as topology.hot_experts (--ep-hot) takes them. */
static void print_expert_heat(const fg_engine_t *e)
{
    const int n = fg_engine_expert_tokens(e, NULL, 0);
    uint64_t *t = calloc((size_t)(n > 0 ? n : 1), sizeof *t);
    int *order = calloc((size_t)(n > 0 ? n : 1), sizeof *order);
    if (n <= 0 || !t || !order) {
        free(t);
        free(order);
        return;
    }
    fg_engine_expert_tokens(e, t, n);
    for (int i = 0; i < n; i++) { /* insertion sort: hottest first, equal counts in id order */
        int j = i;
        while (j > 0 && t[order[j - 1]] < t[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += t[i];
    printf("expert heat (routed picks over all layers, %llu in all; hottest first): ", (unsigned long long)sum);
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? "," : "", order[i]);
    printf("\n  hottest %d: %.2f%% of picks, coldest %d: %.2f%% (even: %.2f%%)\n", order[0],
           sum ? 100.0 * (double)t[order[0]] / (double)sum : 0, order[n - 1],
           sum ? 100.0 * (double)t[order[n - 1]] / (double)sum : 0, 100.0 / n);
    free(t);
    free(order);
}

int main(int argc, char **argv)
{
    fg_engine_options eo;
    fg_engine_options_default(&eo);
    eo.model_path = "models/flash-mini.gguf";
    eo.serve = true;
    eo.kv_budget_bytes = (size_t)2 << 30;
    int n_prompt = 128, n_decode = 128, reps = 1;
    char levels_arg[256] = "1,8,64,256,1024";
    static const struct option longs[] = {
        {"model", required_argument, 0, 'm'},    {"sessions", required_argument, 0, 's'},
        {"prompt", required_argument, 0, 'p'},   {"decode", required_argument, 0, 'n'},
        {"threads", required_argument, 0, 't'},  {"batch", required_argument, 0, 'b'},
        {"reps", required_argument, 0, 'r'},     {"kv-format", required_argument, 0, 'k'},
        {"ep-ranks", required_argument, 0, 'E'}, {"ep-redundant", required_argument, 0, 'R'},
        {"ep-capacity", required_argument, 0, 'C'}, {"ep-hot", required_argument, 0, 'H'},
        {"backend", required_argument, 0, 'B'},  {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:s:p:n:t:b:r:k:E:R:C:H:B:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model_path = optarg; break;
        case 's': snprintf(levels_arg, sizeof levels_arg, "%s", optarg); break;
        case 'p': n_prompt = atoi(optarg); break;
        case 'n': n_decode = atoi(optarg); break;
        case 't': eo.n_threads = atoi(optarg); break;
        case 'b': eo.max_batch_tokens = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'k': eo.kv_format = fg_kv_format_parse(optarg); break;
        case 'E': eo.ep_ranks = atoi(optarg); break; /* in-process expert-parallel ranks (docs/parallel.md) */
        case 'R': eo.ep_redundant = atoi(optarg); break;
        case 'C': eo.ep_recv_capacity_rows = atoll(optarg); break; /* topology.recv_capacity_rows */
        case 'H': eo.ep_hot_experts = optarg; break;               /* topology.hot_experts */
        case 'B': /* model.backend; with --ep-ranks and cuda, rank i on GPU i */
            if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0) {
                fprintf(stderr, "error: --backend is cpu or cuda\n");
                return 2;
            }
            eo.backend = strcmp(optarg, "cuda") == 0 ? FG_ENGINE_BACKEND_CUDA : FG_ENGINE_BACKEND_CPU;
            break;
        case 'h':
            printf("usage: flashgate-bench-serve [--model PATH] [--sessions 1,8,64,256,1024] [--prompt 128] "
                   "[--decode 128] [--threads N] [--batch 256] [--reps 1] [--kv-format F] [--ep-ranks N] "
                   "[--ep-redundant N] [--ep-capacity ROWS] [--ep-hot 5,0,9] [--backend cpu|cuda]\n");
            return 0;
        default: return 2;
        }
    }
    if (n_prompt < 1 || n_decode < 1 || reps < 1 || reps > 15 || eo.kv_format < -1) {
        fprintf(stderr, "error: bad arguments (see --help)\n");
        return 2;
    }
    fg_bench_waker w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    eo.wakeup = fg_bench_wake;
    eo.wakeup_user = &w;
    fg_diag d = {{0}};
    fg_engine_t *e;
    if (fg_engine_open(&eo, &e, &d) != FG_OK) {
        fprintf(stderr, "error: %s\n", d.msg);
        return 1;
    }
    fg_engine_info info;
    fg_engine_get_info(e, &info);
    printf("model %s: %.1f MB weights, %.1f MB active per token; kv %s %zu B/token + %zu B per session; %d threads "
           "%s%s; batch %d\n",
           eo.model_path, info.weight_bytes_total / 1e6, info.weight_bytes_active / 1e6,
           fg_kv_format_name(info.kv_format), info.kv_bytes_per_token, info.kv_seq_bytes, info.n_threads,
           fg_isa_name(info.isa), fg_matmul_amx(info.isa) ? "+amx" : "", eo.max_batch_tokens);
    {
        fg_pool_t *pool = fg_pool_create(info.n_threads);
        const fg_bench_caches cc = bench_caches();
        const double bw = measure_bandwidth(pool, 3);
        const double bw_ws = measure_bandwidth_ws(pool, (size_t)info.weight_bytes_active, 3);
        fg_pool_destroy(pool);
        /* the single-sequence bound reads the active weights at the speed of the level that holds them */
        const char *lv = bench_level(&cc, (size_t)info.weight_bytes_total, info.n_threads);
        const double lim = strcmp(lv, "DRAM") == 0 ? bw : bw_ws;
        printf("caches L1d %zu KiB, L2 %zu KiB per core, L3 %zu MiB; read bandwidth %.2f GB/s (DRAM), %.2f GB/s over "
               "%.1f MB (%s): single-sequence decode limit %.1f tokens/s (weights in %s)\n",
               cc.l1d >> 10, cc.l2 >> 10, cc.l3 >> 20, bw / 1e9, bw_ws / 1e9, info.weight_bytes_active / 1e6,
               bench_level(&cc, (size_t)info.weight_bytes_active, info.n_threads), lim / (double)info.weight_bytes_active,
               lv);
    }
    printf("%8s %14s %14s %12s %12s %10s %12s\n", "sessions", "decode tok/s", "prefill tok/s", "itl p50 ms",
           "itl p99 ms", "steps", "cpu ms/tok");

    char *save, *tok = strtok_r(levels_arg, ",", &save);
    while (tok) {
        int n = atoi(tok);
        tok = strtok_r(NULL, ",", &save);
        if (n < 1)
            continue;
        double dec[16], pre[16], p50[16], p99[16], cpu[16];
        uint64_t steps = 0;
        for (int r = 0; r < reps; r++) {
            client *cl = calloc((size_t)n, sizeof *cl);
            size_t cap = (size_t)n * (size_t)n_decode, n_gaps = 0;
            double *gaps = malloc(cap * sizeof *gaps);
            int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
            fg_engine_stats st0, st1;
            fg_engine_get_stats(e, &st0);
            double t0 = fg_clock_mono_s();
            for (int i = 0; i < n; i++) {
                fg_session_params sp = {.tenant = (uint32_t)(i % 4), .weight = 1, .user = &cl[i]};
                for (int j = 0; j < n_prompt; j++)
                    prompt[j] = (int32_t)(((unsigned)(i * 7919 + j * 104729 + r)) % (unsigned)(info.n_vocab - 2));
                fg_response_params rp = {.sampling = fg_sampling_default(), .generate = false};
                if (fg_session_create(e, &sp, &cl[i].s) != FG_OK ||
                    fg_session_append(cl[i].s, prompt, n_prompt, &d) != FG_OK ||
                    fg_session_respond(cl[i].s, &rp, NULL, &d) != FG_OK) {
                    fprintf(stderr, "error: session %d: %s\n", i, d.msg);
                    return 1;
                }
            }
            run_until_done(e, &w, cl, n, gaps, &n_gaps, 0);
            double t1 = fg_clock_mono_s(), c1 = cpu_s();
            for (int i = 0; i < n; i++) {
                fg_response_params rp = {.sampling = fg_sampling_default(), .generate = true, .max_tokens = n_decode};
                cl[i].done = 0;
                cl[i].tokens = 0;
                if (fg_session_respond(cl[i].s, &rp, NULL, &d) != FG_OK) {
                    fprintf(stderr, "error: respond %d: %s\n", i, d.msg);
                    return 1;
                }
            }
            run_until_done(e, &w, cl, n, gaps, &n_gaps, cap);
            double t2 = fg_clock_mono_s(), c2 = cpu_s();
            long generated = 0;
            for (int i = 0; i < n; i++) {
                generated += cl[i].tokens;
                fg_session_free(cl[i].s);
            }
            fg_engine_get_stats(e, &st1);
            steps += st1.steps - st0.steps;
            pre[r] = (double)n * n_prompt / (t1 - t0);
            dec[r] = (double)generated / (t2 - t1);
            cpu[r] = generated ? 1e3 * (c2 - c1) / (double)generated : 0.0;
            p50[r] = 1e3 * percentile(gaps, n_gaps, 0.50);
            p99[r] = 1e3 * percentile(gaps, n_gaps, 0.99);
            free(gaps);
            free(prompt);
            free(cl);
        }
        printf("%8d %14.1f %14.1f %12.2f %12.2f %10llu %12.3f\n", n, percentile(dec, (size_t)reps, 0.5),
               percentile(pre, (size_t)reps, 0.5), percentile(p50, (size_t)reps, 0.5), percentile(p99, (size_t)reps, 0.5),
               (unsigned long long)(steps / (uint64_t)reps), percentile(cpu, (size_t)reps, 0.5));
        fflush(stdout);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak resident memory %.1f MB (model pages mapped from the file count when touched)\n", ru.ru_maxrss / 1024.0);
    print_expert_heat(e);
    fg_engine_close(e);
    return 0;
}
