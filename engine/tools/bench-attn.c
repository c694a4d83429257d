/* flashgate-bench-attn: prefill attention over a long cache, one thread, the
 * kernel alone: a chunk of --queries consecutive queries after --history cached
 * tokens, each attending causally (query i over history + i + 1 rows), run
 * once per query through fg_mla_attn and once as one fg_mla_attn_multi call.
 *
 * Reports the thread's CPU time (the machine is shared: wall time would
 * measure the neighbours), the median of --reps, and GFLOP/s counted as
 * 2 * H * (2 * kv_lora + n_rope) per (query, row) pair. It also checks that
 * both give the same bits, which the engine relies on. The shape defaults to
 * flash-mini's layer (8 heads, latent 160, rope 32, FP4 rows). --isa all runs
 * every kernel this CPU has (scalar, AVX2, AVX-512) on the same cache and
 * queries and adds each one's speed against the scalar reference.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/tools/bench_common.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/mla_attn.h"

static double thread_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A reproducible value in [-0.5, 0.5). */
static float next_value(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(*s >> 40) / 16777216.0f - 0.5f;
}

int main(int argc, char **argv)
{
    int H = 8, L = 160, R = 32, history = 3600, n_q = 384, reps = 5;
    fg_kv_format fmt = FG_KV_FP4;
    fg_isa isa = FG_ISA_AUTO;
    int all = 0; /* --isa all */
    static const struct option longs[] = {
        {"history", required_argument, 0, 'y'}, {"queries", required_argument, 0, 'q'},
        {"heads", required_argument, 0, 'H'},   {"kv-lora", required_argument, 0, 'L'},
        {"rope", required_argument, 0, 'R'},    {"kv-format", required_argument, 0, 'k'},
        {"isa", required_argument, 0, 'i'},     {"reps", required_argument, 0, 'r'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "y:q:H:L:R:k:i:r:h", longs, NULL)) != -1) {
        switch (c) {
        case 'y': history = atoi(optarg); break;
        case 'q': n_q = atoi(optarg); break;
        case 'H': H = atoi(optarg); break;
        case 'L': L = atoi(optarg); break;
        case 'R': R = atoi(optarg); break;
        case 'k': fmt = (fg_kv_format)fg_kv_format_parse(optarg); break;
        case 'i':
            if (strcmp(optarg, "all") == 0) {
                all = 1;
                break;
            }
            isa = (fg_isa)-1;
            for (int k = FG_ISA_AUTO; k <= FG_ISA_AVX512; k++)
                if (strcmp(optarg, fg_isa_name((fg_isa)k)) == 0)
                    isa = (fg_isa)k;
            if ((int)isa < 0 || (isa != FG_ISA_AUTO && !fg_isa_supported(isa))) {
                fprintf(stderr, "error: isa %s is unknown or not on this CPU\n", optarg);
                return 2;
            }
            break;
        case 'r': reps = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: flashgate-bench-attn [--history 3600] [--queries 384] [--heads 8] [--kv-lora 160] "
                            "[--rope 32] [--kv-format fp4] [--isa auto|scalar|avx2|avx512|all] [--reps 5]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (history < 0 || n_q < 1 || H < 1 || L < 16 || R < 0 || reps < 1 || reps > 101 || (int)fmt < 0 ||
        (fmt == FG_KV_FP4 && (L % 16 || R % 16))) {
        fprintf(stderr, "error: bad arguments (fp4 needs widths that are multiples of 16; see --help)\n");
        return 2;
    }

    const int n_rows = history + n_q, n_pages = (n_rows + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    const size_t lat_bytes = fg_kv_bytes(fmt, L), row_bytes = lat_bytes + fg_kv_bytes(fmt, R);
    uint8_t **pages = calloc((size_t)n_pages, sizeof *pages);
    float *row = malloc((size_t)(L + R) * sizeof *row);
    const size_t qw = (size_t)H * L, rw = (size_t)H * R;
    float *q_lat = malloc((size_t)n_q * qw * sizeof *q_lat), *q_rope = malloc((size_t)n_q * rw * sizeof *q_rope);
    float *out1 = malloc((size_t)n_q * qw * sizeof *out1), *outm = malloc((size_t)n_q * qw * sizeof *outm);
    int *n_kv = malloc((size_t)n_q * sizeof *n_kv);
    if (!pages || !row || !q_lat || !q_rope || !out1 || !outm || !n_kv) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    uint64_t seed = 42;
    for (int i = 0; i < n_pages; i++)
        if (!(pages[i] = malloc(FG_KV_PAGE_TOKENS * row_bytes))) {
            fprintf(stderr, "error: out of memory\n");
            return 1;
        }
    for (int t = 0; t < n_rows; t++) {
        for (int i = 0; i < L + R; i++)
            row[i] = next_value(&seed);
        uint8_t *dst = pages[t / FG_KV_PAGE_TOKENS] + (size_t)(t % FG_KV_PAGE_TOKENS) * row_bytes;
        fg_kv_quantize(fmt, row, L, dst);
        fg_kv_quantize(fmt, row + L, R, dst + lat_bytes);
    }
    for (size_t i = 0; i < (size_t)n_q * qw; i++)
        q_lat[i] = next_value(&seed);
    for (size_t i = 0; i < (size_t)n_q * rw; i++)
        q_rope[i] = next_value(&seed);
    double pairs = 0.0;
    for (int i = 0; i < n_q; i++) {
        n_kv[i] = history + i + 1;
        pairs += n_kv[i];
    }

    fg_mla_attn_params p = {.n_head = H, .kv_lora = L, .n_rope = R, .scale = 0.1f, .format = fmt,
                            .pages = (const uint8_t *const *)pages, .layer_offset = 0, .row_bytes = row_bytes,
                            .n_kv = 1, .isa = isa};
    float *scratch = malloc(fg_mla_attn_scratch_floats(&p) * sizeof *scratch);
    double *t_single = malloc((size_t)reps * sizeof *t_single), *t_multi = malloc((size_t)reps * sizeof *t_multi);
    if (!scratch || !t_single || !t_multi) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    const fg_isa every[] = {FG_ISA_SCALAR, FG_ISA_AVX2, FG_ISA_AVX512};
    const int n_runs = all ? 3 : 1;
    const double flop = pairs * H * (2.0 * L + R) * 2.0;
    double scalar_single = 0.0, scalar_multi = 0.0;
    int all_same = 1;
    printf("%s rows, H=%d latent %d rope %d: %d queries after %d cached tokens, one layer, 1 thread (CPU time, "
           "median of %d)\n",
           fg_kv_format_name(fmt), H, L, R, n_q, history, reps);
    for (int k = 0; k < n_runs; k++) {
        p.isa = all ? every[k] : isa;
        if (all && !fg_isa_supported(p.isa)) {
            printf("  %-7s not on this CPU\n", fg_isa_name(p.isa));
            continue;
        }
        for (int r = 0; r < reps; r++) {
            double t0 = thread_cpu_s();
            for (int i = 0; i < n_q; i++) {
                p.n_kv = n_kv[i];
                fg_mla_attn(&p, q_lat + (size_t)i * qw, q_rope + (size_t)i * rw, out1 + (size_t)i * qw, scratch);
            }
            double t1 = thread_cpu_s();
            fg_mla_attn_multi(&p, n_q, n_kv, q_lat, q_rope, outm, scratch);
            double t2 = thread_cpu_s();
            t_single[r] = t1 - t0;
            t_multi[r] = t2 - t1;
        }
        const double single = median(t_single, reps), multi = median(t_multi, reps);
        const int same = memcmp(out1, outm, (size_t)n_q * qw * sizeof *out1) == 0;
        all_same &= same;
        if (p.isa == FG_ISA_SCALAR) {
            scalar_single = single;
            scalar_multi = multi;
        }
        printf("  %s\n", fg_isa_name(p.isa == FG_ISA_AUTO ? fg_isa_best() : p.isa));
        printf("    per query (fg_mla_attn)        %9.1f ms  %6.1f GFLOP/s", single * 1e3, flop / single * 1e-9);
        if (all && scalar_single > 0.0)
            printf("  %5.2fx scalar", scalar_single / single);
        printf("\n    together (fg_mla_attn_multi)   %9.1f ms  %6.1f GFLOP/s  (%.2fx per query)", multi * 1e3,
               flop / multi * 1e-9, single / multi);
        if (all && scalar_multi > 0.0)
            printf("  %5.2fx scalar", scalar_multi / multi);
        printf("\n    outputs %s\n", same ? "bit-identical" : "DIFFER");
    }
    const int same = all_same;
    free(t_single);
    free(t_multi);

    for (int i = 0; i < n_pages; i++)
        free(pages[i]);
    free(pages);
    free(row);
    free(q_lat);
    free(q_rope);
    free(out1);
    free(outm);
    free(n_kv);
    free(scratch);
    return same ? 0 : 1;
}
