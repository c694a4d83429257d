/* flashgate-bench: single-sequence prefill and decode rates, reported against
 * the limit that applies on this machine.
 *
 * Decode of one sequence reads every active weight once per token, so it is
 * bound by active bytes / bandwidth, at the bandwidth of wherever the weights
 * live between tokens, or by the product kernel's own speed on weights in
 * cache. Three limits are measured (bench_common.h): DRAM (a set 4x the LLC),
 * a working set the size of the active weights (the level it fits is named:
 * a model whose weights the LLC holds is read at LLC speed, not DRAM's), and
 * compute (the Q8_0 one-token product on an L2-resident matrix, all threads,
 * in weight bytes/s; DRAM counts only when the weights outgrow the LLC).
 * Decode is reported against the tightest limit it does not exceed
 * (bench_share), never above 100 %. Each figure is the median of --reps runs
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
#include "kernels/cpu/matmul.h"
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

/* The one-token Q8_0 product's rate on weights in cache, bytes of weights per
 * second over the pool's threads: each thread's share of a 1024-wide matrix
 * is half its L2. Median of reps timings of >= 20 ms each; 0 on failure. */
static double measure_q8_peak(fg_pool_t *pool, const fg_bench_caches *c, int reps)
{
    const int64_t n_in = 1024;
    const size_t row = fg_wtype_row_bytes(FG_WTYPE_Q8_0, n_in);
    const size_t l2 = c->l2 ? c->l2 : (size_t)1 << 20;
    int64_t n_out = (int64_t)(l2 / 2 / row) / 16 * 16 * fg_pool_size(pool);
    n_out = n_out < 16 ? 16 : n_out;
    const size_t wb = row * (size_t)n_out, sb = fg_matmul_scratch_bytes(FG_WTYPE_Q8_0, n_in, 1);
    uint8_t *w = malloc(wb);
    float *x = malloc((size_t)n_in * sizeof *x), *y = malloc((size_t)n_out * sizeof *y);
    void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
    double r[32], result = 0;
    uint64_t seed = 3;
    reps = reps > 32 ? 32 : reps;
    if (!w || !x || !y || !scratch)
        goto out;
    for (size_t i = 0; i < wb; i++) /* every F16 scale a normal number below 1 */
        w[i] = (uint8_t)(0x20 + (next_value(&seed) + 0.5f) * 27.99f);
    for (int64_t i = 0; i < n_in; i++)
        x[i] = next_value(&seed);
    if (fg_matmul(pool, FG_ISA_AUTO, FG_WTYPE_Q8_0, w, n_in, n_out, x, 1, y, scratch) != 0)
        goto out;
    double t = fg_clock_mono_s();
    (void)fg_matmul(pool, FG_ISA_AUTO, FG_WTYPE_Q8_0, w, n_in, n_out, x, 1, y, scratch);
    const double one = fg_clock_mono_s() - t;
    const int iters = one > 0.02 ? 1 : (int)(0.02 / (one > 1e-7 ? one : 1e-7)) + 1;
    for (int i = 0; i < reps; i++) {
        t = fg_clock_mono_s();
        for (int k = 0; k < iters; k++)
            (void)fg_matmul(pool, FG_ISA_AUTO, FG_WTYPE_Q8_0, w, n_in, n_out, x, 1, y, scratch);
        r[i] = (double)wb * iters / (fg_clock_mono_s() - t);
    }
    result = median(r, reps);
out:
    free(w);
    free(x);
    free(y);
    free(scratch);
    return result;
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
    const fg_bench_caches caches = bench_caches();
    const double bw = measure_bandwidth(pool, reps);
    const double bw_ws = measure_bandwidth_ws(pool, (size_t)info.weight_bytes_active, reps);
    const double peak = measure_q8_peak(pool, &caches, reps);
    fg_pool_destroy(pool);
    const char *ws_level = bench_level(&caches, (size_t)info.weight_bytes_active, info.n_threads);
    const char *all_level = bench_level(&caches, (size_t)info.weight_bytes_total, info.n_threads);

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
    const double act = (double)info.weight_bytes_active;
    char ws_name[32];
    snprintf(ws_name, sizeof ws_name, "%s bandwidth", ws_level);
    /* the DRAM limit's premise (weights streamed from memory) fails outright when the LLC holds them all */
    const int dram_applies = strcmp(all_level, "DRAM") == 0;
    const fg_bench_limit lims[] = {
        {"DRAM bandwidth", dram_applies ? bw / act : 0}, {ws_name, bw_ws / act}, {"compute", peak / act}};
    char share[256];
    bench_share(d, lims, 3, share, sizeof share, NULL);
    printf("model                     %s\n", eo.model_path);
    printf("threads / isa             %d / %s%s\n", info.n_threads, fg_isa_name(info.isa),
           fg_matmul_amx(info.isa) ? "+amx (FG_NO_AMX=1: without)" : "");
    printf("caches                    L1d %zu KiB, L2 %zu KiB per core, L3 %zu MiB\n", caches.l1d >> 10,
           caches.l2 >> 10, caches.l3 >> 20);
    printf("weights total / active    %.1f MB (fits %s) / %.1f MB per token (fits %s)\n", info.weight_bytes_total / 1e6,
           all_level, act / 1e6, ws_level);
    printf("kv cache                  %s, %.2f bytes/token + %zu bytes per sequence\n", fg_kv_format_name(info.kv_format),
           (double)info.kv_page_bytes / 64, info.kv_seq_bytes);
    printf("DRAM bandwidth (read)     %.2f GB/s (median of %d) -> %.1f tokens/s%s\n", bw / 1e9, reps, bw / act,
           dram_applies ? "" : " (not a limit: the LLC holds every weight)");
    printf("%-4s bandwidth, %6.1f MB  %.2f GB/s (a working set the size of the active weights) -> %.1f tokens/s\n",
           ws_level, act / 1e6, bw_ws / 1e9, bw_ws / act);
    printf("compute (q8_0 product)    %.2f GB/s of weights in L2, one token -> %.1f tokens/s\n", peak / 1e9,
           peak / act);
    printf("prefill (%4d tokens)      %.1f tokens/s (median of %d)\n", n_prompt, p, reps);
    printf("decode  (%4d tokens)      %.1f tokens/s (median of %d) = %s\n", n_decode, d, reps, share);
    free(toks);
    free(logits);
    fg_engine_close(eng);
    return 0;
}
