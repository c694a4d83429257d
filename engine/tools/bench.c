/* flashgate-bench: single-sequence prefill and decode rates, reported against
 * this machine's measured memory bandwidth.
 *
 * Decode of one sequence must read every active weight once per token, so
 * tokens/s x active weight bytes / measured read bandwidth is the share of the
 * machine's limit the engine reaches. Each figure is the median of --reps runs
 * (the machine is shared and noisy).
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/model/deepseek4/cache.h"
#include "engine/tools/bench_common.h"
#include "kernels/cpu/pool.h"

/* --kv-geometry v4-flash: the deepseek4 cache of V4 Flash's released
 * geometry in each format, from metadata alone (no weights). */
static int kv_geometry_v4_flash(void)
{
    fg_ds4_hparams hp;
    fg_ds4_flash_geometry(&hp);
    const fg_kv_format fmts[] = {FG_KV_F32, FG_KV_F16, FG_KV_FP8};
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++) {
        fg_ds4_cache *c;
        fg_diag d = {{0}};
        if (fg_ds4_cache_layout(&hp, fmts[i], &c, &d) != FG_OK) {
            fprintf(stderr, "error: %s\n", d.msg);
            return 1;
        }
        printf("V4 Flash kv %-4s %9.2f bytes/token growing, %6.2f MB fixed per sequence\n",
               fg_kv_format_name(fmts[i]), (double)c->page_bytes / FG_KV_PAGE_TOKENS, c->seq_bytes / 1e6);
        free(c);
    }
    return 0;
}

int main(int argc, char **argv)
{
    fg_engine_options eo;
    fg_engine_options_default(&eo);
    eo.model_path = "models/flash-mini.gguf";
    int reps = 5, n_prompt = 128, n_decode = 128;
    static const struct option longs[] = {{"model", required_argument, 0, 'm'},  {"reps", required_argument, 0, 'r'},
                                          {"prompt", required_argument, 0, 'p'}, {"decode", required_argument, 0, 'n'},
                                          {"threads", required_argument, 0, 't'}, {"kv-format", required_argument, 0, 'k'},
                                          {"kv-geometry", required_argument, 0, 'g'},
                                          {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:r:p:n:t:k:h", longs, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model_path = optarg; break;
        case 'r': reps = atoi(optarg); break;
        case 'p': n_prompt = atoi(optarg); break;
        case 'n': n_decode = atoi(optarg); break;
        case 't': eo.n_threads = atoi(optarg); break;
        case 'k': eo.kv_format = fg_kv_format_parse(optarg); break;
        case 'g':
            if (strcmp(optarg, "v4-flash")) {
                fprintf(stderr, "error: --kv-geometry knows v4-flash\n");
                return 2;
            }
            return kv_geometry_v4_flash();
        case 'h':
            printf("usage: flashgate-bench [--model PATH] [--reps N] [--prompt N] [--decode N] [--threads N] "
                   "[--kv-format F]\n       flashgate-bench --kv-geometry v4-flash   (cache bytes of V4 Flash's "
                   "released geometry)\n");
            return 0;
        default: return 2;
        }
    }
    if (reps < 1 || reps > 32 || n_prompt < 1 || n_decode < 1 || eo.n_threads < 0 || eo.kv_format < -1) {
        fprintf(stderr, "error: --reps 1..32, --prompt and --decode >= 1, valid --threads and --kv-format\n");
        return 2;
    }
    fg_diag diag = {{0}};
    fg_engine_t *eng;
    fg_err e = fg_engine_open(&eo, &eng, &diag);
    if (e != FG_OK) {
        fprintf(stderr, "error: cannot load %s: %s\n", eo.model_path, diag.msg);
        return 1;
    }
    fg_engine_info info;
    fg_engine_get_info(eng, &info);
    fg_pool_t *pool = fg_pool_create(info.n_threads);
    double bw = measure_bandwidth(pool, reps);
    fg_pool_destroy(pool);

    int32_t *toks = malloc((size_t)(n_prompt + n_decode) * sizeof *toks);
    float *logits = malloc((size_t)info.n_vocab * sizeof *logits);
    double pre[32], dec[32];
    for (int r = 0; r < reps && toks && logits; r++) {
        for (int i = 0; i < n_prompt; i++)
            toks[i] = (int32_t)((i * 7919 + r * 104729) % info.n_vocab);
        fg_session_t *s;
        if (fg_session_create(eng, NULL, &s) != FG_OK)
            return 1;
        double t = fg_clock_mono_s();
        if ((e = fg_session_eval(s, toks, n_prompt, logits, false, &diag)) != FG_OK) {
            fprintf(stderr, "error: %s\n", diag.msg);
            return 1;
        }
        pre[r] = n_prompt / (fg_clock_mono_s() - t);
        t = fg_clock_mono_s();
        int32_t next = 0;
        for (int i = 0; i < n_decode; i++) {
            int best = 0;
            for (int v = 1; v < info.n_vocab; v++)
                best = logits[v] > logits[best] ? v : best;
            next = best;
            if ((e = fg_session_eval_sampled(s, next, logits, &diag)) != FG_OK) {
                fprintf(stderr, "error: %s\n", diag.msg);
                return 1;
            }
        }
        dec[r] = n_decode / (fg_clock_mono_s() - t);
        fg_session_free(s);
    }
    double p = median(pre, reps), d = median(dec, reps);
    double limit = bw / (double)info.weight_bytes_active;
    printf("model                     %s\n", eo.model_path);
    printf("threads / isa             %d / %s\n", info.n_threads, fg_isa_name(info.isa));
    printf("weights total / active    %.1f MB / %.1f MB per token\n", info.weight_bytes_total / 1e6,
           info.weight_bytes_active / 1e6);
    printf("kv cache                  %s, %.2f bytes/token + %zu bytes per sequence\n", fg_kv_format_name(info.kv_format),
           (double)info.kv_page_bytes / 64, info.kv_seq_bytes);
    printf("memory bandwidth (read)   %.2f GB/s (median of %d)\n", bw / 1e9, reps);
    printf("decode limit              %.1f tokens/s (bandwidth / active bytes)\n", limit);
    printf("prefill (%4d tokens)      %.1f tokens/s (median of %d)\n", n_prompt, p, reps);
    printf("decode  (%4d tokens)      %.1f tokens/s (median of %d) = %.0f%% of the bandwidth limit\n", n_decode, d,
           reps, 100.0 * d / limit);
    free(toks);
    free(logits);
    fg_engine_close(eng);
    return 0;
}
