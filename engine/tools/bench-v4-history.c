/* flashgate-bench-v4-history: what one decoded token of a deepseek4 model
 * costs after a long history, without prefilling it.
 *
 * Prefilling 64K tokens through the model on a small machine takes far longer
 * than the decode step we want to time (the indexer scores every visible CSA
 * row for every prompt token: quadratic). So the tool writes the history's
 * cache directly: per compressed layer its rows j < H / r, per CSA layer the
 * index keys, per layer the window ring, each a random unit-RMS vector
 * through the format's codec (cache.h), the compressor blocks empty; the
 * state then says it holds H tokens, and --decode tokens run one at a time
 * through the real forward pass (fg_ds4_forward_run) at positions H, H+1, ...
 * The step's cost minus the cost at a short history is what attention,
 * index scoring and top-k add with H; the rest (every matrix) does not
 * depend on H. Random rows give the indexer and attention the same work as
 * real ones (every visible row is scored, top-k keeps idx_top_k of them).
 *
 * Reports per history the median over --reps of the wall time and of the
 * process's CPU time per decoded token (the machine is shared: CPU time is
 * less disturbed by neighbours), histories in alternating order.
 *
 * With --prompt P, each run first prefills a turn's new input of P tokens
 * over the history (chunks of --chunk tokens, as the engine's prefill_chunk
 * cuts a prompt; the last chunk asks for its logits): the time to first token
 * of a turn at that history, less sampling and the serving loop. History 0
 * is turn 1 (the same input with nothing before it); the ratio is against
 * the first history given.
 *
 *   flashgate-bench-v4-history --model M [--history 128,4096,65536] [--decode 8]
 *                              [--prompt 0] [--chunk 128]
 *                              [--reps 3] [--threads 2] [--kv-format fp8]
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"
#include "engine/model/deepseek4/cache.h"
#include "engine/model/deepseek4/forward.h"
#include "engine/model/deepseek4/model.h"
#include "engine/model/gguf.h"
#include "engine/tools/bench_common.h"
#include "kernels/cpu/pool.h"

#define MAX_HIST 8

static void unit_rms(float *x, int n, uint64_t *s)
{
    double ss = 0;
    for (int i = 0; i < n; i++) {
        x[i] = next_value(s);
        ss += (double)x[i] * x[i];
    }
    const float k = (float)(1.0 / sqrt(ss / n + 1e-12));
    for (int i = 0; i < n; i++)
        x[i] *= k;
}

/* Writes H tokens' worth of cache into q (pages reserved for H + decode). */
static void fill_history(const fg_ds4_model *m, const fg_ds4_cache *c, fg_kv_seq *q, int H, float *x, uint8_t *tmp)
{
    const fg_ds4_hparams *hp = &m->hp;
    uint64_t s = 12345;
    for (int il = 0; il < hp->n_layer_all; il++) {
        const int r = hp->ratio[il];
        uint8_t *ring = q->state + c->layer[il].state_window;
        for (int p = H - hp->window > 0 ? H - hp->window : 0; p < H; p++) {
            unit_rms(x, hp->head_dim, &s);
            fg_ds4_row_put(c, x, ring + (size_t)(p % hp->window) * c->row_bytes);
        }
        if (!r)
            continue;
        for (int j = 0; j < H / r; j++) {
            unit_rms(x, hp->head_dim, &s);
            fg_ds4_comp_store(c, q, il, r, j, x, tmp);
            if (r == 4) {
                unit_rms(x, hp->idx_dim, &s);
                fg_ds4_key_store(c, q, il, j, x);
            }
        }
    }
    q->n_tokens = H;
    ((fg_ds4_state_head *)q->state)->n_tokens = H;
}

int main(int argc, char **argv)
{
    const char *model = "models/v4-mini.gguf", *hist_arg = "128,4096,65536";
    int reps = 3, n_decode = 8, threads = 2, format = FG_KV_FP8, n_prompt = 0, chunk = 128;
    static const struct option longs[] = {{"model", required_argument, 0, 'm'},   {"history", required_argument, 0, 'H'},
                                          {"decode", required_argument, 0, 'n'},  {"reps", required_argument, 0, 'r'},
                                          {"threads", required_argument, 0, 't'}, {"kv-format", required_argument, 0, 'k'},
                                          {"prompt", required_argument, 0, 'p'},  {"chunk", required_argument, 0, 'c'},
                                          {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "m:H:n:r:t:k:p:c:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'm': model = optarg; break;
        case 'H': hist_arg = optarg; break;
        case 'n': n_decode = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'k': format = fg_kv_format_parse(optarg); break;
        case 'p': n_prompt = atoi(optarg); break;
        case 'c': chunk = atoi(optarg); break;
        case 'h':
            printf("usage: flashgate-bench-v4-history --model M [--history 128,4096,65536] [--decode 8] [--prompt 0] "
                   "[--chunk 128] [--reps 3] [--threads 2] [--kv-format fp8]\n"
                   "  --prompt P: also time a turn's input of P tokens prefilled over each history (TTFT)\n");
            return 0;
        default: return 2;
        }
    }
    int hist[MAX_HIST], n_hist = 0;
    for (const char *p = hist_arg; *p;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || n_hist == MAX_HIST || v > (1L << 30)) {
            fprintf(stderr, "error: --history takes up to %d comma-separated token counts\n", MAX_HIST);
            return 2;
        }
        hist[n_hist++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (reps < 1 || reps > 32 || n_decode < 1 || threads < 1 || format < 0 || n_hist < 1 || n_prompt < 0 ||
        n_prompt > (1 << 20) || chunk < 1 || chunk > 4096) {
        fprintf(stderr, "error: --reps 1..32, --decode >= 1, --threads >= 1, a valid --kv-format, --history N,..., "
                        "--prompt >= 0, --chunk 1..4096\n");
        return 2;
    }
    int max_h = 0;
    for (int i = 0; i < n_hist; i++) {
        if (hist[i] < 0) {
            fprintf(stderr, "error: --history values must be >= 0\n");
            return 2;
        }
        max_h = hist[i] > max_h ? hist[i] : max_h;
    }
    fg_diag d = {{0}};
    fg_gguf_t *g;
    fg_arch_model *am;
    if (fg_gguf_open_file(model, &g, &d) != FG_OK || fg_arch_load(g, &am, &d) != FG_OK) {
        fprintf(stderr, "error: cannot load %s: %s\n", model, d.msg);
        return 1;
    }
    const fg_ds4_model *m = fg_deepseek4_of(am);
    if (!m) {
        fprintf(stderr, "error: %s is not a deepseek4 model\n", model);
        fg_arch_free(am);
        fg_gguf_close(g);
        return 1;
    }
    fg_kv_geometry geo;
    fg_ds4_cache *c;
    fg_kv_store_t *kv;
    const int n_tok = max_h + n_prompt + n_decode;
    if (am->arch->cache(am, (fg_kv_format)format, &geo, &d) != FG_OK ||
        fg_ds4_cache_layout(&m->hp, (fg_kv_format)format, &c, &d) != FG_OK) {
        fprintf(stderr, "error: cache: %s\n", d.msg);
        return 1;
    }
    /* the sequence's pages plus those its state holds off the pool (kv_store.h) */
    const size_t pages = (size_t)n_tok / FG_KV_PAGE_TOKENS + 2 + (geo.seq_bytes + geo.page_bytes - 1) / geo.page_bytes;
    if (fg_kv_store_create(&geo, pages * geo.page_bytes, &kv, &d) != FG_OK) {
        fprintf(stderr, "error: cache: %s\n", d.msg);
        return 1;
    }
    fg_pool_t *pool = fg_pool_create(threads);
    fg_ds4_forward_t *f;
    if (fg_ds4_forward_create(m, &geo, n_prompt > 0 ? (n_prompt < chunk ? n_prompt : chunk) : 1, pool, FG_ISA_AUTO, &f, &d) != FG_OK) {
        fprintf(stderr, "error: forward: %s\n", d.msg);
        return 1;
    }
    const size_t V = (size_t)am->n_vocab;
    float *logits = malloc(V * sizeof *logits), *x = malloc((size_t)(m->hp.head_dim + m->hp.idx_dim) * sizeof *x);
    uint8_t *tmp = malloc(c->part_bytes * (FG_DS4_HCA / FG_KV_PAGE_TOKENS) + c->row_bytes); /* cache.h */
    double wall[MAX_HIST][32], cpu[MAX_HIST][32], pwall[MAX_HIST][32], pcpu[MAX_HIST][32];
    int32_t *ptok = malloc((size_t)(n_prompt > 0 ? n_prompt : 1) * sizeof *ptok);
    if (!logits || !x || !tmp || !ptok)
        return 1;
    fg_bench_print_machine();
    printf("model %s, kv %s, %d threads, %d decoded tokens per run, %d runs per history", model,
           fg_kv_format_name((fg_kv_format)format), threads, n_decode, reps);
    if (n_prompt > 0)
        printf(", a turn's input of %d tokens prefilled first in chunks of %d", n_prompt, chunk);
    printf("\n");
    for (int r = 0; r < reps; r++) {
        for (int k = 0; k < n_hist; k++) {
            const int i = r % 2 ? n_hist - 1 - k : k; /* alternate the order: drift hits every history */
            fg_kv_seq q;
            fg_kv_seq_init(&q, n_tok);
            if (fg_kv_seq_reserve(kv, &q, hist[i] + n_prompt + n_decode) != FG_OK) {
                fprintf(stderr, "error: no pages for %d tokens\n", hist[i] + n_prompt + n_decode);
                return 1;
            }
            fill_history(m, c, &q, hist[i], x, tmp);
            const double tp = fg_clock_mono_s(), up = process_cpu_s();
            for (int j = 0; j < n_prompt; j += chunk) {
                const int n = n_prompt - j < chunk ? n_prompt - j : chunk;
                for (int k2 = 0; k2 < n; k2++)
                    ptok[k2] = (int32_t)(((unsigned)(j + k2) * 104729u + (unsigned)r) % (unsigned)V);
                fg_fwd_seq fs = {.kv = &q, .n_tokens = n, .n_logits = j + n == n_prompt, .logits = logits};
                if (fg_ds4_forward_run(f, ptok, &fs, 1, &d) != FG_OK) {
                    fprintf(stderr, "error: prompt at %d: %s\n", hist[i] + j, d.msg);
                    return 1;
                }
            }
            pwall[i][r] = fg_clock_mono_s() - tp;
            pcpu[i][r] = process_cpu_s() - up;
            const int at = hist[i] + n_prompt;
            const double t = fg_clock_mono_s(), u = process_cpu_s();
            for (int j = 0; j < n_decode; j++) {
                int32_t tok = (int32_t)((at + j * 7919) % (int)V);
                fg_fwd_seq fs = {.kv = &q, .n_tokens = 1, .n_logits = 1, .logits = logits};
                if (fg_ds4_forward_run(f, &tok, &fs, 1, &d) != FG_OK) {
                    fprintf(stderr, "error: decode at %d: %s\n", at + j, d.msg);
                    return 1;
                }
            }
            wall[i][r] = (fg_clock_mono_s() - t) / n_decode;
            cpu[i][r] = (process_cpu_s() - u) / n_decode;
            fg_kv_seq_free(kv, &q);
        }
    }
    const fg_ds4_hparams *hp = &m->hp;
    int n_csa = 0, n_hca = 0;
    for (int il = 0; il < hp->n_layer; il++)
        n_csa += hp->ratio[il] == 4, n_hca += hp->ratio[il] == 128;
    double base = 0, pbase = 0, pcbase = 0;
    for (int i = 0; n_prompt > 0 && i < n_hist; i++) {
        const double w = median(pwall[i], reps), u = median(pcpu[i], reps);
        pbase = i == 0 ? w : pbase;
        pcbase = i == 0 ? u : pcbase;
        printf("history %7d: turn input of %d tokens to its first logits %9.1f ms wall (%.2fx history %d), "
               "%9.1f ms CPU (%.2fx)\n",
               hist[i], n_prompt, w * 1e3, pbase > 0 ? w / pbase : 0, hist[0], u * 1e3, pcbase > 0 ? u / pcbase : 0);
    }
    for (int i = 0; i < n_hist; i++) {
        const double w = median(wall[i], reps), u = median(cpu[i], reps);
        base = i == 0 ? w : base;
        const int csa_rows = hist[i] / 4, top = csa_rows < hp->idx_top_k ? csa_rows : hp->idx_top_k;
        printf("history %7d: %7.2f ms/token wall (%+.2f vs history %d), %7.2f ms CPU; per CSA layer %d rows "
               "scored, %d attended; per HCA layer %d rows; window %d\n",
               hist[i], w * 1e3, (w - base) * 1e3, hist[0], u * 1e3, csa_rows, top, hist[i] / 128, hp->window);
    }
    printf("load average at the end %.2f\n", fg_bench_load1());
    printf("layers: %d CSA, %d HCA, %d window-only; indexer %d heads x %d, top-k %d\n", n_csa, n_hca,
           hp->n_layer - n_csa - n_hca, hp->idx_head, hp->idx_dim, hp->idx_top_k);
    free(logits);
    free(ptok);
    free(x);
    free(tmp);
    free(c);
    fg_ds4_forward_destroy(f);
    fg_pool_destroy(pool);
    fg_kv_store_destroy(kv);
    fg_arch_free(am);
    fg_gguf_close(g);
    return 0;
}
