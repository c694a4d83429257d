/* flashgate-perplexity: perplexity of models on real text, per KV format, and
 * top-1 agreement with a baseline run (docs/engine.md, "Accuracy").
 *
 * The text is a token id file (u32 little-endian, flashgate-tokenize --docs).
 * It is cut into consecutive windows of --ctx tokens; each window is a fresh
 * session whose tokens are fed one at a time as decode steps (the absorbed
 * attention reading the stored, possibly quantized, KV of every earlier
 * token, as served generation does). Every window position but the last
 * predicts the next id: perplexity = exp(mean negative log-likelihood), in
 * double precision. The first run (first --model, first --kv) is the
 * baseline: top-1 agreement is the share of positions whose argmax equals the
 * baseline's (ties to the lower id).
 *
 * Exit status: 0 on success, 1 on an error, 2 on a bad command line.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

#define MAX_MODELS 8

static void usage(FILE *f)
{
    fprintf(f, "usage: flashgate-perplexity --ids FILE --model GGUF [--model GGUF ...] [options]\n"
               "  --kv LIST        KV formats, comma-separated (default f32,f16,int8,fp8,fp4)\n"
               "  --ctx N          window length in tokens (default 128)\n"
               "  --positions N    predictions to score, at most (default: the whole file)\n"
               "  --threads N      worker threads (default 1)\n");
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int32_t *read_ids(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    int32_t *ids = NULL;
    size_t cap = 0, len = 0;
    uint32_t v;
    while (fread(&v, 4, 1, f) == 1) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            int32_t *nb = realloc(ids, cap * sizeof *nb);
            if (!nb) {
                free(ids);
                fclose(f);
                return NULL;
            }
            ids = nb;
        }
        ids[len++] = v > INT32_MAX ? -1 : (int32_t)v;
    }
    int bad = ferror(f) || (len == 0);
    fclose(f);
    if (bad) {
        free(ids);
        return NULL;
    }
    *n = len;
    return ids;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static double nll(const float *x, int n, int target)
{
    double m = x[0];
    for (int i = 1; i < n; i++)
        m = x[i] > m ? x[i] : m;
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    return log(s) + m - (double)x[target];
}

/* Scores one (model, kv) run; top1[p] gets each position's argmax. */
static int run_one(const char *model, int kv, const int32_t *ids, size_t n_ids, int ctx, size_t positions,
                   int threads, int32_t *top1, double *ppl_out, size_t *scored_out)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model;
    o.kv_format = kv;
    o.n_threads = threads;
    o.kv_budget_bytes = 64u << 20;
    fg_diag d = {{0}};
    fg_engine_t *eng = NULL;
    fg_err e = fg_engine_open(&o, &eng, &d);
    if (e) {
        fprintf(stderr, "flashgate-perplexity: %s, kv %s: %s (%s)\n", model, fg_kv_format_name(kv), d.msg,
                fg_err_name(e));
        return -1;
    }
    fg_engine_info info;
    fg_engine_get_info(eng, &info);
    const int V = info.n_vocab;
    float *logits = malloc((size_t)V * sizeof *logits);
    int rc = logits ? 0 : -1;
    double sum = 0.0;
    size_t p = 0;
    for (size_t w = 0; rc == 0 && w + 1 < n_ids && p < positions; w += (size_t)ctx) {
        size_t end = w + (size_t)ctx < n_ids ? w + (size_t)ctx : n_ids;
        fg_session_t *s = NULL;
        if (fg_session_create(eng, NULL, &s) != FG_OK) {
            rc = -1;
            break;
        }
        for (size_t i = w; i + 1 < end && p < positions; i++) {
            if (ids[i] < 0 || ids[i] >= V || ids[i + 1] < 0 || ids[i + 1] >= V) {
                fprintf(stderr, "flashgate-perplexity: token id at %zu is outside the vocabulary (%d)\n", i, V);
                rc = -1;
                break;
            }
            if ((e = fg_session_eval_sampled(s, ids[i], logits, &d)) != FG_OK) {
                fprintf(stderr, "flashgate-perplexity: eval: %s (%s)\n", d.msg, fg_err_name(e));
                rc = -1;
                break;
            }
            sum += nll(logits, V, ids[i + 1]);
            top1[p++] = argmax(logits, V);
        }
        fg_session_free(s);
    }
    free(logits);
    fg_engine_close(eng);
    if (rc == 0 && p == 0) {
        fprintf(stderr, "flashgate-perplexity: nothing to score (the id file is too short)\n");
        rc = -1;
    }
    *ppl_out = p ? exp(sum / (double)p) : 0.0;
    *scored_out = p;
    return rc;
}

int main(int argc, char **argv)
{
    const char *ids_path = NULL, *models[MAX_MODELS], *kv_list = "f32,f16,int8,fp8,fp4";
    int n_models = 0, ctx = 128, threads = 1, positions = 0;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        int ok = v != NULL;
        if (ok && !strcmp(a, "--ids"))
            ids_path = v;
        else if (ok && !strcmp(a, "--model") && n_models < MAX_MODELS)
            models[n_models++] = v;
        else if (ok && !strcmp(a, "--kv"))
            kv_list = v;
        else if (ok && !strcmp(a, "--ctx"))
            ok = parse_int(v, 2, 1 << 20, &ctx) == 0;
        else if (ok && !strcmp(a, "--positions"))
            ok = parse_int(v, 1, 1 << 30, &positions) == 0;
        else if (ok && !strcmp(a, "--threads"))
            ok = parse_int(v, 1, 1024, &threads) == 0;
        else
            ok = 0;
        if (!ok) {
            fprintf(stderr, "flashgate-perplexity: bad or incomplete argument '%s' (at most %d --model)\n", a,
                    MAX_MODELS);
            usage(stderr);
            return 2;
        }
    }
    if (!ids_path || n_models == 0) {
        usage(stderr);
        return 2;
    }
    int kvs[FG_KV__COUNT * 2], n_kv = 0;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", kv_list);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int f = fg_kv_format_parse(tok);
        if (f < 0 || n_kv == (int)(sizeof kvs / sizeof kvs[0])) {
            fprintf(stderr, "flashgate-perplexity: unknown KV format '%s' (f32, f16, int8, fp8, fp4)\n", tok);
            return 2;
        }
        kvs[n_kv++] = f;
    }
    if (n_kv == 0) {
        fprintf(stderr, "flashgate-perplexity: --kv names no format\n");
        return 2;
    }

    size_t n_ids = 0;
    int32_t *ids = read_ids(ids_path, &n_ids);
    if (!ids) {
        fprintf(stderr, "flashgate-perplexity: cannot read token ids from %s\n", ids_path);
        return 1;
    }
    size_t cap = positions ? (size_t)positions : n_ids;
    int32_t *base = malloc(cap * sizeof *base), *cur = malloc(cap * sizeof *cur);
    if (!base || !cur) {
        fprintf(stderr, "flashgate-perplexity: out of memory\n");
        return 1;
    }
    printf("%-40s %-5s %9s %10s %8s\n", "model", "kv", "positions", "perplexity", "top1");
    int rc = 0;
    size_t base_n = 0;
    for (int m = 0; m < n_models && rc == 0; m++) {
        for (int k = 0; k < n_kv && rc == 0; k++) {
            double ppl = 0.0;
            size_t n = 0;
            int32_t *dst = (m == 0 && k == 0) ? base : cur;
            if (run_one(models[m], kvs[k], ids, n_ids, ctx, cap, threads, dst, &ppl, &n)) {
                rc = 1;
                break;
            }
            if (dst == base)
                base_n = n;
            size_t same = 0;
            for (size_t i = 0; i < n && i < base_n; i++)
                same += dst[i] == base[i];
            const char *slash = strrchr(models[m], '/');
            printf("%-40s %-5s %9zu %10.4f %8.4f\n", slash ? slash + 1 : models[m], fg_kv_format_name(kvs[k]), n,
                   ppl, (double)same / (double)n);
            fflush(stdout);
        }
    }
    free(base);
    free(cur);
    free(ids);
    return rc;
}
