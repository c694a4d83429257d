/* flashgate-gpucheck: the GPU self-check.
 *
 *  1. the device: name, compute capability, memory, the peak memory bandwidth
 *     from the device attributes, and a measured device-to-device copy rate;
 *  2. every CUDA op against its CPU reference (engine/backend/cuda/selfcheck.h);
 *  3. the whole forward pass of each --model on the CUDA backend against the
 *     CPU backend: a prompt, then greedy decode; the greedy tokens must be
 *     equal and the logits within FWD_TOL of the largest CPU logit (F32 KV, so
 *     only the order of sums differs); FP8 and FP4 KV are reported, not gated;
 *  4. a decode benchmark on the last --model: one session, then a batch of
 *     sessions decoding together, in tokens/s and achieved memory bandwidth.
 *
 * Exit status: 0 all checks passed; 1 a check failed; 2 no usable GPU, a
 * build without CUDA, or bad arguments (with a message saying which).
 * Figures go to stdout and, with --out, to a file.
 */
#include <getopt.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "engine/kv/kv_store.h"
#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "engine/tools/bench_common.h"

#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "engine/backend/cuda/selfcheck.h"
#include "kernels/cuda/launch_check.h"

#define FWD_TOL 1e-3  /* max |cuda - cpu| / max |cpu| over every logit of the run */
#define MAX_MODELS 8

static FILE *g_out;
static int g_device; /* --device */

/* printf to stdout and the --out file. */
__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (g_out) {
        va_start(ap, fmt);
        vfprintf(g_out, fmt, ap);
        va_end(ap);
    }
}

typedef struct device_info {
    char name[256];
    int sm;
    double mem_gib;
    double peak_bw;      /* bytes/s from the memory clock and bus width; 0 if unknown */
    double copy_bw;      /* bytes/s moved (read + write) by a device-to-device copy */
} device_info;

static int device_probe(int dev, device_info *di)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        fprintf(stderr, "flashgate-gpucheck: no usable CUDA GPU on this machine (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    if (dev >= count) {
        fprintf(stderr, "flashgate-gpucheck: device %d asked for, %d present\n", dev, count);
        return 0;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess) {
        fprintf(stderr, "flashgate-gpucheck: cannot query or select device %d\n", dev);
        return 0;
    }
    snprintf(di->name, sizeof di->name, "%s", p.name);
    di->sm = p.major * 10 + p.minor;
    di->mem_gib = (double)p.totalGlobalMem / (1 << 30);
    int clock_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess)
        di->peak_bw = 2.0 * clock_khz * 1e3 * bus_bits / 8.0; /* double data rate */
    if (!fg_cuda_arch_supported(di->sm)) {
        fprintf(stderr, "flashgate-gpucheck: %s is sm_%d; this build has kernels for sm_90a and sm_100a/sm_103a only\n",
                di->name, di->sm);
        return 0;
    }
    /* Copy rate: 1 GiB device to device, best of 5 (each byte read once and written once). */
    const size_t bytes = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess) {
        cudaMemset(a, 1, bytes);
        cudaEvent_t t0, t1;
        cudaEventCreate(&t0);
        cudaEventCreate(&t1);
        float best = 1e30f;
        for (int r = 0; r < 5; r++) {
            float ms = 0;
            cudaEventRecord(t0, 0);
            cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
            cudaEventRecord(t1, 0);
            cudaEventSynchronize(t1);
            cudaEventElapsedTime(&ms, t0, t1);
            best = ms < best ? ms : best;
        }
        di->copy_bw = 2.0 * bytes / (best * 1e-3);
        cudaEventDestroy(t0);
        cudaEventDestroy(t1);
    }
    cudaFree(a);
    cudaFree(b);
    cudaGetLastError();
    return 1;
}

static fg_err open_engine(const char *path, int backend, int kv_format, int max_batch, fg_engine_t **e, fg_diag *d)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = path;
    o.kv_format = kv_format;
    o.max_batch_tokens = max_batch;
    o.kv_budget_bytes = (size_t)1 << 30;
    o.backend = backend;
    o.gpu_device = g_device;
    return fg_engine_open(&o, e, d);
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        b = x[i] > x[b] ? i : b;
    return b;
}

/* Prompt then greedy decode of n steps; logits of each step into lg[n][V]. */
static int greedy_run(fg_engine_t *e, int V, int n, int32_t *toks, float *lg, fg_diag *d)
{
    fg_session_t *s;
    if (fg_session_create(e, NULL, &s) != FG_OK)
        return -1;
    int32_t prompt[16];
    for (int i = 0; i < 16; i++)
        prompt[i] = (int32_t)(1 + (i * 7919) % (V - 3));
    int rc = fg_session_eval(s, prompt, 16, lg, false, d) == FG_OK ? 0 : -1;
    for (int i = 0; i < n && rc == 0; i++) {
        toks[i] = argmax(lg + (size_t)i * V, V);
        if (i + 1 < n && fg_session_eval_sampled(s, toks[i], lg + (size_t)(i + 1) * V, d) != FG_OK)
            rc = -1;
    }
    fg_session_free(s);
    return rc;
}

/* Returns 1 when the CUDA forward matches the CPU forward (gated), 0 otherwise. */
static int check_forward(const char *path, int kv_format, int gated)
{
    enum { N = 32 };
    fg_engine_t *cpu = NULL, *gpu = NULL;
    fg_diag d = {{0}};
    const char *kvn = fg_kv_format_name((fg_kv_format)kv_format);
    if (open_engine(path, FG_ENGINE_BACKEND_CPU, kv_format, 64, &cpu, &d) != FG_OK ||
        open_engine(path, FG_ENGINE_BACKEND_CUDA, kv_format, 64, &gpu, &d) != FG_OK) {
        say("forward  %-40s kv %-4s FAIL cannot open: %s\n", path, kvn, d.msg);
        fg_engine_close(cpu);
        return 0;
    }
    fg_engine_info info;
    fg_engine_get_info(cpu, &info);
    const int V = info.n_vocab;
    float *lc = malloc((size_t)N * V * sizeof(float)), *lgp = malloc((size_t)N * V * sizeof(float));
    int32_t tc[N], tg[N];
    int ok = 0;
    if (lc && lgp && greedy_run(cpu, V, N, tc, lc, &d) == 0 && greedy_run(gpu, V, N, tg, lgp, &d) == 0) {
        double amax = 0, emax = 0;
        size_t nonfinite = 0;
        int same = 0;
        while (same < N && tc[same] == tg[same])
            same++;
        /* Logits compared only while the token streams agree (after that the inputs differ). */
        const int n_cmp = same < N ? same + 1 : N;
        for (size_t i = 0; i < (size_t)n_cmp * V; i++) {
            if (!isfinite(lgp[i])) {
                nonfinite++;
                continue;
            }
            amax = fmax(amax, fabs(lc[i]));
            emax = fmax(emax, fabs((double)lc[i] - lgp[i]));
        }
        const double err = emax / (amax > 0 ? amax : 1);
        ok = same == N && nonfinite == 0 && err <= FWD_TOL;
        say("forward  %-40s kv %-4s %s greedy tokens equal %d/%d, logit error %.3g (tolerance %.0e%s), non-finite %zu\n",
            path, kvn, !gated ? "info" : ok ? "ok  " : "FAIL", same, N, err, FWD_TOL, gated ? "" : ", not gated",
            nonfinite);
    } else {
        say("forward  %-40s kv %-4s FAIL run: %s\n", path, kvn, d.msg);
    }
    free(lc);
    free(lgp);
    fg_engine_close(gpu);
    fg_engine_close(cpu);
    return ok || !gated;
}

/* Decode benchmark through the backend directly: B sequences, each with a
 * prompt of P tokens, then S steps of one token per sequence in one batch. */
static int bench(const char *path, int B, int P, int S, const device_info *di)
{
    fg_diag d = {{0}};
    fg_gguf_t *g = NULL;
    fg_model *m = NULL;
    fg_kv_store_t *kv = NULL;
    fg_backend_t *be = NULL;
    fg_kv_seq *seqs = calloc((size_t)B, sizeof *seqs);
    fg_fwd_seq *fs = calloc((size_t)B, sizeof *fs);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B > P ? B : P));
    float *logits = NULL;
    int rc = 0;
    fg_kv_geometry geo;
    if (!seqs || !fs || !tok || fg_gguf_open_file(path, &g, &d) || fg_model_load(g, &m, &d) ||
        fg_kv_geometry_init(&geo, &m->hp, fg_kv_bytes(FG_KV_FP4, m->hp.kv_lora) ? FG_KV_FP4 : FG_KV_F16, &d) ||
        fg_kv_store_create(&geo, geo.page_bytes * (size_t)B * ((P + S) / FG_KV_PAGE_TOKENS + 2), &kv, &d)) {
        say("bench    %s: cannot set up: %s\n", path, d.msg);
        rc = -1;
        goto done;
    }
    fg_backend_options bo = {.kind = FG_BACKEND_CUDA, .model = &m->base, .geo = &geo, .kv = kv,
                             .max_tokens = B > P ? B : P, .device = g_device};
    if (fg_backend_open(&bo, &be, &d) || !(logits = malloc(sizeof(float) * (size_t)B * m->hp.n_vocab))) {
        say("bench    %s: cannot open the cuda backend: %s\n", path, d.msg);
        rc = -1;
        goto done;
    }
    for (int b = 0; b < B; b++) {
        fg_kv_seq_init(&seqs[b], P + S + 1);
        if (fg_kv_seq_reserve(kv, &seqs[b], P + S) != FG_OK) {
            say("bench    KV pool too small\n");
            rc = -1;
            goto done;
        }
        for (int i = 0; i < P; i++)
            tok[i] = (int32_t)(1 + (i * 7919 + b * 104729) % (m->hp.n_vocab - 3));
        fg_fwd_seq one = {.kv = &seqs[b], .n_tokens = P, .n_logits = 0};
        if (fg_backend_run(be, tok, &one, 1, &d) != FG_OK) {
            say("bench    prefill: %s\n", d.msg);
            rc = -1;
            goto done;
        }
    }
    double t0 = 0;
    for (int s = -2; s < S; s++) { /* two warm-up steps */
        if (s == 0)
            t0 = fg_clock_mono_s();
        for (int b = 0; b < B; b++) {
            tok[b] = (int32_t)(1 + (s * 31 + b) % (m->hp.n_vocab - 3));
            fs[b] = (fg_fwd_seq){.kv = &seqs[b], .n_tokens = 1, .n_logits = 1,
                                 .logits = logits + (size_t)b * m->hp.n_vocab};
        }
        if (fg_backend_run(be, tok, fs, B, &d) != FG_OK) {
            say("bench    decode: %s\n", d.msg);
            rc = -1;
            goto done;
        }
    }
    const double dt = (fg_clock_mono_s() - t0) / S;
    /* Bytes one step must read at least: the active weights once (more experts are
     * touched when B > 1, so this is a lower bound) and every sequence's cache. */
    const double ctx_avg = P + 2 + S / 2.0;
    const double bytes = (double)m->base.weight_bytes_active + (double)B * ctx_avg * (double)geo.bytes_per_token;
    say("bench    %-40s batch %3d: %8.1f tokens/s (%.3f ms/step), >= %.1f GB/s achieved = %.1f%% of peak %.0f GB/s, "
        "%.1f%% of measured copy %.0f GB/s\n",
        path, B, B / dt, dt * 1e3, bytes / dt / 1e9, di->peak_bw > 0 ? 100.0 * bytes / dt / di->peak_bw : 0.0,
        di->peak_bw / 1e9, di->copy_bw > 0 ? 100.0 * bytes / dt / di->copy_bw : 0.0, di->copy_bw / 1e9);
done:
    for (int b = 0; b < B && seqs && kv; b++)
        fg_kv_seq_free(kv, &seqs[b]);
    fg_backend_close(be);
    fg_kv_store_destroy(kv);
    fg_model_free(m);
    fg_gguf_close(g);
    free(seqs);
    free(fs);
    free(tok);
    free(logits);
    return rc;
}
#endif

int main(int argc, char **argv)
{
    const char *models[8];
    int n_models = 0, device = 0, batch = 64, skip_bench = 0;
    const char *out = NULL;
    static const struct option longs[] = {{"model", required_argument, 0, 'm'},  {"out", required_argument, 0, 'o'},
                                          {"device", required_argument, 0, 'd'}, {"batch", required_argument, 0, 'b'},
                                          {"no-bench", no_argument, 0, 'n'},     {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:o:d:b:nh", longs, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (n_models == 8) {
                fprintf(stderr, "flashgate-gpucheck: at most 8 --model\n");
                return 2;
            }
            models[n_models++] = optarg;
            break;
        case 'o': out = optarg; break;
        case 'd': device = atoi(optarg); break;
        case 'b': batch = atoi(optarg); break;
        case 'n': skip_bench = 1; break;
        case 'h':
            printf("usage: flashgate-gpucheck [--model PATH]... [--out FILE] [--device N] [--batch N] [--no-bench]\n"
                   "Checks every CUDA op against the CPU reference, the CUDA forward pass of each model against\n"
                   "the CPU backend, then benchmarks decode on the last model. Exit 0 pass, 1 fail, 2 no GPU.\n");
            return 0;
        default: return 2;
        }
    }
    if (device < 0 || batch < 1 || batch > 1024) {
        fprintf(stderr, "flashgate-gpucheck: --device >= 0 and --batch 1..1024\n");
        return 2;
    }
#ifndef FG_HAVE_CUDA
    (void)models, (void)out, (void)skip_bench;
    fprintf(stderr, "flashgate-gpucheck: this build has no CUDA (nvcc was not found at build time); "
                    "rebuild with -DFG_CUDA=ON on a machine with the CUDA toolkit\n");
    return 2;
#else
    device_info di;
    memset(&di, 0, sizeof di);
    g_device = device;
    if (!device_probe(device, &di))
        return 2;
    if (out && !(g_out = fopen(out, "w"))) {
        fprintf(stderr, "flashgate-gpucheck: cannot write %s\n", out);
        return 2;
    }
    say("device   %s, sm_%d, %.1f GiB, peak memory bandwidth %.0f GB/s (attributes), device copy %.0f GB/s "
        "(measured, read + write)\n",
        di.name, di.sm, di.mem_gib, di.peak_bw / 1e9, di.copy_bw / 1e9);
    int failed = fg_cuda_selfcheck_ops(g_out, di.sm);
    for (int i = 0; i < n_models; i++) {
        failed += !check_forward(models[i], FG_KV_F32, 1);
        check_forward(models[i], FG_KV_FP8, 0);
        check_forward(models[i], FG_KV_FP4, 0);
    }
    if (!skip_bench && n_models > 0) {
        const char *m = models[n_models - 1];
        if (bench(m, 1, 512, 128, &di) || bench(m, batch, 512, 64, &di))
            failed++;
    }
    say("result   %s (%d failed)\n", failed ? "FAIL" : "PASS", failed);
    if (g_out)
        fclose(g_out);
    return failed ? 1 : 0;
#endif
}
