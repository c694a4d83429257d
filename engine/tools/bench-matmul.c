/* flashgate-bench-matmul: the BF16 matrix product on its two AVX-512 paths,
 * the F32-widening one (what CPUs without avx512_bf16 run) and vdpbf16ps
 * (activations rounded to BF16 once per call), on a few shapes.
 *
 * With --types (--types=q4_K,iq2_xxs,...: those only): one token's product
 * (decode) on one thread for every weight type, in GB/s of weights read,
 * against the limit that applies: one thread's read bandwidth over a set the
 * size of the matrix (in whichever cache level holds it), or the kernel's own
 * peak on an L2-resident matrix (bench_share: never a share above 100 %).
 *
 * With --amx: Q8_0 and packed Q8_0 batches, AMX tiles (where the CPU and the
 * kernel allow them; run it with FG_AMX=1) against the AVX-512 kernels, in a
 * child process with FG_AMX=0 like the BF16 widening path below, with a check that both
 * give the same bits.
 *
 * The CPU's features are detected once per process, so the widening path is
 * measured in a child process started with FG_NO_AVX512_BF16=1 (matmul.h),
 * before this process makes its first product; the child sends its times
 * back through a pipe. Each figure is the median of --reps timings of one
 * thread's CPU time (the machine is shared: wall time would measure the
 * neighbours), each timing long enough (>= 20 ms) to be above the clock's
 * resolution; GFLOP/s counts 2 * n_in * n_out per token. Both paths run on
 * the same weights and activations, and the tool reports the largest
 * normalised difference between them (the BF16 rounding of x, ~1e-3).
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/tools/bench_common.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/quants.h"

#define MAX_SHAPES 16

typedef struct shape {
    int64_t n_in, n_out, n_tok;
    int wtype; /* FG_WTYPE_BF16, or (--amx) FG_WTYPE_Q8_0 / FG_WTYPE_Q8_0_P16 */
} shape;


/* Median seconds per product of `reps` timings, and the first product's
 * output in y. Returns -1 if the product fails. */
static double time_product(const shape *sh, int reps, float *y_out)
{
    uint64_t seed = 7;
    const int64_t n_in = sh->n_in, n_out = sh->n_out, n_tok = sh->n_tok;
    const int wt = sh->wtype;
    const size_t wb = fg_wtype_row_bytes(wt, n_in) * (size_t)n_out;
    uint8_t *w = aligned_alloc(64, (wb + 63) / 64 * 64), *wq = NULL;
    float *x = malloc((size_t)(n_in * n_tok) * sizeof *x);
    float *y = malloc((size_t)(n_out * n_tok) * sizeof *y);
    const size_t sb = fg_matmul_scratch_bytes(wt, n_in, n_tok);
    void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
    double *t = malloc((size_t)reps * sizeof *t);
    double result = -1.0;
    if (!wb || !w || !x || !y || !scratch || !t)
        goto out;
    if (wt == FG_WTYPE_BF16) {
        for (int64_t i = 0; i < n_in * n_out; i++)
            ((uint16_t *)w)[i] = fg_f32_to_bf16(next_value(&seed));
    } else { /* Q8_0 (packed from it for Q8_0_P16): bytes in [0x20, 0x3b], normal F16 scales */
        wq = malloc(wb);
        if (!wq)
            goto out;
        for (size_t i = 0; i < wb; i++)
            wq[i] = (uint8_t)(0x20 + (next_value(&seed) + 0.5f) * 27.99f);
        if (wt == FG_WTYPE_Q8_0)
            memcpy(w, wq, wb);
        else if (fg_matmul_pack_q8_p16(wq, n_in, n_out, w) != 0)
            goto out;
    }
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = next_value(&seed);
    if (fg_matmul(NULL, FG_ISA_AVX512, wt, w, n_in, n_out, x, n_tok, y, scratch) != 0)
        goto out;
    memcpy(y_out, y, (size_t)(n_out * n_tok) * sizeof *y);
    /* iterations per timing: about 20 ms, from one timed product */
    double t0 = thread_cpu_s();
    (void)fg_matmul(NULL, FG_ISA_AVX512, wt, w, n_in, n_out, x, n_tok, y, scratch);
    const double one = thread_cpu_s() - t0;
    const int iters = one > 0.02 ? 1 : (int)(0.02 / (one > 1e-7 ? one : 1e-7)) + 1;
    for (int r = 0; r < reps; r++) {
        t0 = thread_cpu_s();
        for (int i = 0; i < iters; i++)
            (void)fg_matmul(NULL, FG_ISA_AVX512, wt, w, n_in, n_out, x, n_tok, y, scratch);
        t[r] = (thread_cpu_s() - t0) / iters;
    }
    result = median(t, reps);
out:
    free(w);
    free(wq);
    free(x);
    free(y);
    free(scratch);
    free(t);
    return result;
}

/* ---- --types: GB/s of one product per weight type ---- */

static const struct {
    int wtype;
    const char *name;
} bench_types[] = {
    {FG_WTYPE_F32, "f32"},     {FG_WTYPE_F16, "f16"},     {FG_WTYPE_BF16, "bf16"},   {FG_WTYPE_Q8_0, "q8_0"},
    {FG_WTYPE_MXFP4, "mxfp4"}, {FG_WTYPE_Q4_0, "q4_0"},   {FG_WTYPE_Q4_1, "q4_1"},   {FG_WTYPE_Q5_0, "q5_0"},
    {FG_WTYPE_Q5_1, "q5_1"},   {FG_WTYPE_Q2_K, "q2_K"},   {FG_WTYPE_Q3_K, "q3_K"},   {FG_WTYPE_Q4_K, "q4_K"},
    {FG_WTYPE_Q5_K, "q5_K"},   {FG_WTYPE_Q6_K, "q6_K"},   {FG_WTYPE_IQ4_NL, "iq4_nl"}, {FG_WTYPE_IQ4_XS, "iq4_xs"},
    {FG_WTYPE_IQ2_XXS, "iq2_xxs"}, {FG_WTYPE_IQ2_XS, "iq2_xs"}, {FG_WTYPE_IQ2_S, "iq2_s"},
    {FG_WTYPE_IQ3_XXS, "iq3_xxs"}, {FG_WTYPE_IQ3_S, "iq3_s"},   {FG_WTYPE_IQ1_S, "iq1_s"},
    {FG_WTYPE_IQ1_M, "iq1_m"},
};

/* Median seconds of one product of n_tok tokens on isa (one thread), or -1. */
static double time_type(int wtype, fg_isa isa, int64_t n_in, int64_t n_out, int64_t n_tok, int reps)
{
    uint64_t seed = 11;
    const size_t wb = fg_wtype_row_bytes(wtype, n_in) * (size_t)n_out;
    uint8_t *w = malloc(wb);
    float *x = malloc((size_t)(n_in * n_tok) * sizeof *x), *y = malloc((size_t)(n_out * n_tok) * sizeof *y);
    const size_t sb = fg_matmul_scratch_bytes(wtype, n_in, n_tok);
    void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
    double *t = malloc((size_t)reps * sizeof *t), result = -1.0;
    if (!wb || !w || !x || !y || (sb && !scratch) || !t)
        goto out;
    /* Every byte in [0x20, 0x3b]: each F16 field of a block a normal number
     * below 1 (and an E8M0 scale a normal one), so no NaN or subnormal slows
     * the arithmetic; the float types get ordinary values. */
    for (size_t i = 0; i < wb; i++)
        w[i] = (uint8_t)(0x20 + (next_value(&seed) + 0.5f) * 27.99f);
    if (wtype == FG_WTYPE_F32)
        for (size_t i = 0; i < wb / 4; i++)
            ((float *)w)[i] = next_value(&seed);
    for (int64_t i = 0; i < n_in * n_tok; i++)
        x[i] = next_value(&seed);
    if (fg_matmul(NULL, isa, wtype, w, n_in, n_out, x, n_tok, y, scratch) != 0)
        goto out;
    for (int r = 0; r < reps; r++) {
        const double t0 = thread_cpu_s();
        (void)fg_matmul(NULL, isa, wtype, w, n_in, n_out, x, n_tok, y, scratch);
        t[r] = thread_cpu_s() - t0;
    }
    result = median(t, reps);
out:
    free(w);
    free(x);
    free(y);
    free(scratch);
    free(t);
    return result;
}

/* Whether name is one of the comma-separated names of list (NULL: all). */
static int type_listed(const char *list, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = list; p;) {
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return list == NULL;
}

/* Each type's rate against two limits (bench_share): one thread's read
 * bandwidth over a set the size of its matrix (the product repeats over the
 * same weights, so they stay in whichever level holds them, which is named),
 * and the kernel's own peak, the same product on a matrix cut to half the L2
 * (its compute bound). */
static int bench_types_run(int64_t n_in, int64_t n_out, int reps, const char *only, fg_isa isa, const int64_t *toks,
                           int n_toks)
{
    if (only) { /* every listed name a type of the table */
        int listed = 1, known = 0;
        for (const char *p = only; *p; p++)
            listed += *p == ',';
        for (size_t i = 0; i < sizeof bench_types / sizeof bench_types[0]; i++)
            known += type_listed(only, bench_types[i].name);
        if (known != listed) {
            fprintf(stderr, "error: --types=%s: an unknown or repeated type name\n", only);
            return 2;
        }
    }
    if (!fg_isa_supported(isa)) {
        fprintf(stderr, "error: --isa=%s: this CPU (or this build) cannot run it\n", fg_isa_name(isa));
        return 2;
    }
    const fg_bench_caches c = bench_caches();
    fg_pool_t *one = fg_pool_create(1);
    if (!one)
        return 1;
    printf("one token's product, %lld x %lld (n_out x n_in), %s, 1 thread (CPU time, median of %d)\n",
           (long long)n_out, (long long)n_in, fg_isa_name(isa), reps);
    printf("caches: L1d %zu KiB, L2 %zu KiB per core, L3 %zu MiB; limits: read bandwidth over the matrix's size "
           "(1 thread), the kernel on an L2-resident matrix\n",
           c.l1d >> 10, c.l2 >> 10, c.l3 >> 20);
    printf("  %-7s %9s %10s %9s %6s %10s %10s  %s\n", "type", "MB", "us", "GB/s", "level", "bw GB/s", "peak GB/s",
           "share");
    for (size_t i = 0; i < sizeof bench_types / sizeof bench_types[0]; i++) {
        const int wt = bench_types[i].wtype;
        if (!type_listed(only, bench_types[i].name))
            continue;
        const size_t row = fg_wtype_row_bytes(wt, n_in);
        const double mb = (double)(row * (size_t)n_out);
        const double s = time_type(wt, isa, n_in, n_out, 1, reps);
        if (s <= 0 || !row) {
            printf("  %-7s failed\n", bench_types[i].name);
            continue;
        }
        int64_t small = (int64_t)((c.l2 ? c.l2 : (size_t)1 << 20) / 2 / row) / 16 * 16;
        small = small < 16 ? 16 : small > n_out ? n_out : small;
        const double ps = time_type(wt, isa, n_in, small, 1, reps);
        const double bw = measure_bandwidth_ws(one, (size_t)mb, 3);
        const double rate = mb / s, peak = ps > 0 ? (double)(row * (size_t)small) / ps : 0.0;
        const fg_bench_limit lims[] = {{"bandwidth", bw}, {"compute", peak}};
        char share[256];
        const fg_bench_limit *which;
        const double f = bench_share(rate, lims, 2, share, sizeof share, &which);
        printf("  %-7s %9.2f %10.1f %9.2f %6s %10.2f %10.2f  ", bench_types[i].name, mb * 1e-6, s * 1e6, rate * 1e-9,
               bench_level(&c, (size_t)mb, 1), bw * 1e-9, peak * 1e-9);
        if (which)
            printf("%3.0f%% of %s\n", 100.0 * f, which->name);
        else
            printf("%s\n", share);
    }
    if (toks) { /* --tokens: the few-token products (a verify pass), per type */
        printf("few-token products, CPU us per product (median of %d):\n  %-7s", reps, "type");
        for (int i = 0; i < n_toks; i++)
            printf(" %7lld tok", (long long)toks[i]);
        printf("\n");
        for (size_t i = 0; i < sizeof bench_types / sizeof bench_types[0]; i++) {
            if (!type_listed(only, bench_types[i].name))
                continue;
            printf("  %-7s", bench_types[i].name);
            for (int k = 0; k < n_toks; k++)
                printf(" %11.2f", time_type(bench_types[i].wtype, isa, n_in, n_out, toks[k], reps) * 1e6);
            printf("\n");
        }
    }
    fg_pool_destroy(one);
    return 0;
}

static size_t out_floats(const shape *sh, int n)
{
    size_t f = 0;
    for (int i = 0; i < n; i++)
        f += (size_t)(sh[i].n_out * sh[i].n_tok);
    return f;
}

/* The products in a child process with the environment variable env set
 * (FG_NO_AVX512_BF16=1: the widening path; FG_AMX=0: the AVX-512 Q8_0
 * kernels), times[n] and outputs through a pipe. Returns 0, or -1 if the
 * child failed. */
static int run_child(const char *env, const shape *sh, int n, int reps, double *times, float *outs)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    const pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(fd[0]);
        setenv(env, strcmp(env, "FG_AMX") ? "1" : "0", 1);
        float *o = outs;
        for (int i = 0; i < n; i++) {
            times[i] = time_product(&sh[i], reps, o);
            o += sh[i].n_out * sh[i].n_tok;
        }
        const size_t tb = (size_t)n * sizeof *times, ob = out_floats(sh, n) * sizeof *outs;
        const int ok = write(fd[1], times, tb) == (ssize_t)tb && write(fd[1], outs, ob) == (ssize_t)ob;
        _exit(ok ? 0 : 1);
    }
    close(fd[1]);
    const size_t want = (size_t)n * sizeof *times + out_floats(sh, n) * sizeof *outs;
    uint8_t *buf = malloc(want);
    size_t got = 0;
    while (buf && got < want) {
        const ssize_t r = read(fd[0], buf + got, want - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const int ok = buf && got == want && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) {
        memcpy(times, buf, (size_t)n * sizeof *times);
        memcpy(outs, buf + (size_t)n * sizeof *times, want - (size_t)n * sizeof *times);
    }
    free(buf);
    return ok ? 0 : -1;
}

/* --amx: Q8_0 and packed Q8_0 batches on AMX tiles (this process) against
 * the AVX-512 kernels (a child with FG_AMX=0), same weights and inputs;
 * the outputs must be the same bits (matmul.h). */
static int bench_amx_run(int64_t n_in, int64_t n_out, const int64_t *toks, int n_toks, int reps)
{
    shape sh[2 * MAX_SHAPES];
    int n = 0;
    for (int i = 0; i < n_toks; i++) {
        sh[n++] = (shape){n_in, n_out, toks[i], FG_WTYPE_Q8_0};
        sh[n++] = (shape){n_in, n_out, toks[i], FG_WTYPE_Q8_0_P16};
    }
    double off[2 * MAX_SHAPES], on[2 * MAX_SHAPES];
    const size_t n_outs = out_floats(sh, n);
    float *out_off = malloc(n_outs * sizeof(float)), *out_on = malloc(n_outs * sizeof(float));
    if (!out_off || !out_on || n_out % 16) {
        fprintf(stderr, "error: %s\n", n_out % 16 ? "--amx wants --n-out a multiple of 16 (packed panels)" : "out of memory");
        return 1;
    }
    /* the child first, before this process detects the CPU (as for BF16 above) */
    if (run_child("FG_AMX", sh, n, reps, off, out_off) != 0) {
        fprintf(stderr, "error: the AVX-512 run failed%s\n",
                fg_isa_supported(FG_ISA_AVX512) ? "" : " (this CPU has no AVX-512 F/BW/VL/DQ/VNNI)");
        return 1;
    }
    const int amx = fg_matmul_amx(FG_ISA_AVX512);
    float *o = out_on;
    for (int i = 0; i < n; i++) {
        on[i] = time_product(&sh[i], reps, o);
        o += sh[i].n_out * sh[i].n_tok;
    }
    printf("Q8_0 weights %lld x %lld (n_out x n_in, %.2f MB), 1 thread (CPU time, median of %d); AMX tiles %s\n",
           (long long)n_out, (long long)n_in, (double)(fg_wtype_row_bytes(FG_WTYPE_Q8_0, n_in) * (size_t)n_out) * 1e-6,
           reps, amx ? "on in the right-hand column" : "NOT available here: both columns are AVX-512");
    printf("  %-9s %6s  %28s  %28s  %7s  %s\n", "type", "tokens", "AVX-512 (FG_AMX=0)", amx ? "AMX" : "AVX-512",
           "speedup", "same bits");
    const float *po = out_off, *pn = out_on;
    for (int i = 0; i < n; i++) {
        const double flop = 2.0 * (double)(n_in * n_out * sh[i].n_tok);
        const double mb = (double)(fg_wtype_row_bytes(FG_WTYPE_Q8_0, n_in) * (size_t)n_out);
        const size_t ny = (size_t)(sh[i].n_out * sh[i].n_tok);
        const int same = memcmp(po, pn, ny * sizeof *po) == 0;
        printf("  %-9s %6lld  %9.1f us %6.1f GF/s %5.1f GB/s  %9.1f us %6.1f GF/s %5.1f GB/s  %6.2fx  %s\n",
               sh[i].wtype == FG_WTYPE_Q8_0 ? "q8_0" : "q8_0_p16", (long long)sh[i].n_tok, off[i] * 1e6,
               flop / off[i] * 1e-9, mb / off[i] * 1e-9, on[i] * 1e6, flop / on[i] * 1e-9, mb / on[i] * 1e-9,
               off[i] / on[i], same ? "yes" : "NO");
        po += ny;
        pn += ny;
    }
    free(out_off);
    free(out_on);
    return 0;
}

int main(int argc, char **argv)
{
    int64_t n_in = 1024, n_out = 1024;
    int reps = 7;
    int64_t toks[MAX_SHAPES] = {1, 8, 64};
    int n_toks = 3, types = 0, amx = 0, toks_given = 0;
    const char *only = NULL; /* --types=LIST */
    fg_isa isa = FG_ISA_AUTO; /* --isa, for --types */
    static const struct option longs[] = {{"n-in", required_argument, 0, 'i'}, {"n-out", required_argument, 0, 'o'},
                                          {"tokens", required_argument, 0, 't'}, {"reps", required_argument, 0, 'r'},
                                          {"types", optional_argument, 0, 'T'}, {"amx", no_argument, 0, 'A'},
                                          {"isa", required_argument, 0, 'I'}, {"help", no_argument, 0, 'h'},
                                          {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "i:o:t:r:h", longs, NULL)) != -1) {
        switch (c) {
        case 'i': n_in = atoll(optarg); break;
        case 'o': n_out = atoll(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'T':
            types = 1;
            only = optarg;
            break;
        case 'A': amx = 1; break;
        case 'I':
            isa = strcmp(optarg, "scalar") == 0 ? FG_ISA_SCALAR
                  : strcmp(optarg, "avx2") == 0 ? FG_ISA_AVX2
                  : strcmp(optarg, "avx512") == 0 ? FG_ISA_AVX512
                                                  : (fg_isa)-1;
            break;
        case 't': {
            toks_given = 1;
            n_toks = 0;
            for (char *s = optarg; *s && n_toks < MAX_SHAPES;) {
                toks[n_toks++] = strtoll(s, &s, 10);
                if (*s == ',')
                    s++;
                else if (*s)
                    toks[n_toks - 1] = 0; /* rejected below */
            }
            break;
        }
        default:
            fprintf(stderr,
                    "usage: flashgate-bench-matmul [--n-in 1024] [--n-out 1024] [--tokens 1,8,64] [--reps 7]\n"
                    "       flashgate-bench-matmul --types[=q4_K,iq2_xxs,...] [--n-in 1024] [--n-out 1024] [--reps 7]\n"
                    "                              [--isa=scalar|avx2|avx512] [--tokens 1,2,3]\n"
                    "       flashgate-bench-matmul --amx [--n-in 1024] [--n-out 1024] [--tokens 1,8,64] [--reps 7]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    int bad = n_in < 1 || n_out < 1 || n_in * n_out > (1ll << 28) || reps < 1 || reps > 101 || n_toks < 1;
    for (int i = 0; i < n_toks; i++)
        bad |= toks[i] < 1 || toks[i] > 4096;
    if (bad) {
        fprintf(stderr, "error: --n-in, --n-out >= 1 (at most 2^28 weights), --tokens 1..4096 each, --reps 1..101\n");
        return 2;
    }
    if (isa == (fg_isa)-1 || (isa != FG_ISA_AUTO && !types)) {
        fprintf(stderr, "error: --isa is scalar, avx2 or avx512, and only with --types\n");
        return 2;
    }
    if (types)
        return bench_types_run(n_in, n_out, reps, only, isa == FG_ISA_AUTO ? fg_isa_best() : isa,
                               toks_given ? toks : NULL, n_toks);
    if (amx)
        return bench_amx_run(n_in, n_out, toks, n_toks, reps);
    shape sh[MAX_SHAPES];
    for (int i = 0; i < n_toks; i++)
        sh[i] = (shape){n_in, n_out, toks[i], FG_WTYPE_BF16};
    double wide[MAX_SHAPES], native[MAX_SHAPES];
    const size_t n_outs = out_floats(sh, n_toks);
    float *out_w = malloc(n_outs * sizeof(float)), *out_n = malloc(n_outs * sizeof(float));
    if (!out_w || !out_n) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    /* the child first, while this process has not detected the CPU (no
     * kernels/cpu call before this line: the child would inherit the result) */
    if (run_child("FG_NO_AVX512_BF16", sh, n_toks, reps, wide, out_w) != 0) {
        fprintf(stderr, "error: the F32-widening run failed%s\n",
                fg_isa_supported(FG_ISA_AVX512) ? "" : " (this CPU has no AVX-512 F/BW/VL/DQ/VNNI)");
        return 1;
    }
    const int has_native = fg_matmul_bf16_native(FG_ISA_AVX512);
    float *o = out_n;
    for (int i = 0; i < n_toks; i++) {
        native[i] = has_native ? time_product(&sh[i], reps, o) : -1.0;
        o += sh[i].n_out * sh[i].n_tok;
    }
    printf("BF16 weights %lld x %lld (n_out x n_in), AVX-512, 1 thread (CPU time, median of %d)\n", (long long)n_out,
           (long long)n_in, reps);
    printf("  %6s  %22s  %22s  %7s  %s\n", "tokens", "f32-widened", "vdpbf16ps", "speedup", "max |diff| / max |y|");
    const float *pw = out_w, *pn = out_n;
    for (int i = 0; i < n_toks; i++) {
        const double flop = 2.0 * (double)(n_in * n_out * sh[i].n_tok);
        const size_t ny = (size_t)(sh[i].n_out * sh[i].n_tok);
        double diff = 0.0, ymax = 0.0;
        for (size_t k = 0; has_native && k < ny; k++) {
            diff = fmax(diff, fabs((double)pn[k] - pw[k]));
            ymax = fmax(ymax, fabs((double)pw[k]));
        }
        if (has_native)
            printf("  %6lld  %9.1f us %6.1f GF/s  %9.1f us %6.1f GF/s  %6.2fx  %.2g\n", (long long)sh[i].n_tok,
                   wide[i] * 1e6, flop / wide[i] * 1e-9, native[i] * 1e6, flop / native[i] * 1e-9, wide[i] / native[i],
                   diff / (ymax + 1e-30));
        else
            printf("  %6lld  %9.1f us %6.1f GF/s  %22s\n", (long long)sh[i].n_tok, wide[i] * 1e6,
                   flop / wide[i] * 1e-9, "n/a (no avx512_bf16)");
        pw += ny;
        pn += ny;
    }
    free(out_w);
    free(out_n);
    return 0;
}
