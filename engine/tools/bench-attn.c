/* flashgate-bench-attn: prefill attention over a long cache, one thread, the
 * kernel alone: a chunk of --queries consecutive queries after --history cached
 * tokens, each attending causally (query i over history + i + 1 rows), run
 * once per query through fg_mla_attn, once as one fg_mla_attn_multi call
 * (the absorbed form), and once in the decompressed form (mha_attn.h: each
 * page expanded through k_b and v_b once, then every query over it), which
 * is what the engine runs for prompt tokens.
 *
 * Reports the thread's CPU time (the machine is shared: wall time would
 * measure the neighbours), the median of --reps, GFLOP/s counted as
 * 2 * H * (2 * kv_lora + n_rope) per (query, row) pair for the absorbed form,
 * and queries per second of one layer for both forms. It checks that the two
 * absorbed calls give the same bits, which the engine relies on, and that the
 * decompressed form's outputs equal the absorbed form's expanded through v_b
 * within 1e-4 of their largest value. k_b and v_b are random, or with
 * --model those of the model's first layer (e.g. flash-mini's). The shape
 * defaults to flash-mini's layer (8 heads, latent 160, rope 32, nope 64,
 * v 64, FP4 rows). --isa all runs every absorbed kernel this CPU has
 * (scalar, AVX2, AVX-512) on the same cache and queries and adds each one's
 * speed against the scalar reference.
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "engine/tools/bench_common.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/mha_attn.h"
#include "kernels/cpu/mla_attn.h"


/* The decompressed form of the same attention: k_b and v_b (the model's first
 * layer's, or random), fresh q_nope, and q_lat recomputed from them through
 * k_b (in double), so that both forms compute the same scores. Times decompress + attend
 * over all pages (best of reps) into *best_s and writes the largest difference
 * between the outputs and the absorbed form's (fg_mla_attn_multi, expanded
 * through v_b), over the largest output, into *err. Overwrites q_lat and
 * out_lat. Returns 0, or -1 when out of memory. */
static int mha_form(fg_mla_attn_params *p, int NK, int NV, const fg_model *mdl, int n_q, const int *n_kv,
                    float *q_lat, const float *q_rope, float *out_lat, int reps, double *best_s, double *err)
{
    const int H = p->n_head, L = p->kv_lora, R = p->n_rope;
    float *wk = malloc((size_t)H * NK * L * sizeof *wk), *wv = malloc((size_t)L * H * NV * sizeof *wv);
    float *qn = malloc((size_t)n_q * H * NK * sizeof *qn), *out = malloc((size_t)n_q * H * NV * sizeof *out);
    float *m = malloc((size_t)n_q * H * sizeof *m), *l = malloc((size_t)n_q * H * sizeof *l);
    float *wrow = malloc((size_t)(L > NK ? L : NK) * sizeof *wrow);
    uint64_t seed = 7;
    if (!wk || !wv || !qn || !out || !m || !l || !wrow)
        return -1;
    for (int h = 0; h < H; h++) {
        if (mdl) {
            fg_weight kb = mdl->layers[0].k_b, vb = mdl->layers[0].v_b;
            kb.data = (const uint8_t *)kb.data + (size_t)h * kb.mat_bytes;
            vb.data = (const uint8_t *)vb.data + (size_t)h * vb.mat_bytes;
            for (int i = 0; i < L; i++) {
                fg_weight_row_f32(&kb, i, wrow);
                for (int j = 0; j < NK; j++)
                    wk[((size_t)h * NK + j) * L + i] = wrow[j];
            }
            for (int j = 0; j < NV; j++) {
                fg_weight_row_f32(&vb, j, wrow);
                for (int i = 0; i < L; i++)
                    wv[(size_t)i * H * NV + (size_t)h * NV + j] = wrow[i];
            }
        } else {
            for (size_t i = 0; i < (size_t)NK * L; i++)
                wk[(size_t)h * NK * L + i] = next_value(&seed) * 0.2f;
            for (int i = 0; i < L; i++)
                for (int j = 0; j < NV; j++)
                    wv[(size_t)i * H * NV + (size_t)h * NV + j] = next_value(&seed) * 0.2f;
        }
    }
    for (size_t i = 0; i < (size_t)n_q * H * NK; i++)
        qn[i] = next_value(&seed) * 4.0f;
    /* the absorbed queries of the same q_nope: q_lat[h][l] = sum_j wk[h][j][l] q_nope[h][j] */
    for (int q = 0; q < n_q; q++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < L; i++) {
                double a = 0.0;
                for (int j = 0; j < NK; j++)
                    a += (double)wk[((size_t)h * NK + j) * L + i] * qn[((size_t)q * H + h) * NK + j];
                q_lat[((size_t)q * H + h) * L + i] = (float)a;
            }
    float *ref_scratch = malloc(fg_mla_attn_scratch_floats(p) * sizeof *ref_scratch);
    if (!ref_scratch)
        return -1;
    fg_mla_attn_multi(p, n_q, n_kv, q_lat, q_rope, out_lat, ref_scratch);
    free(ref_scratch);

    fg_mha_attn_params mp = {.n_head = H, .kv_lora = L, .n_rope = R, .n_nope = NK, .n_v = NV, .scale = p->scale,
                             .format = p->format, .pages = p->pages, .layer_offset = p->layer_offset,
                             .row_bytes = p->row_bytes, .wk = wk, .wv = wv, .isa = p->isa};
    float *page_tile = malloc(fg_mha_page_tile_floats(&mp) * sizeof *page_tile);
    float *head_tile = malloc(fg_mha_head_tile_floats(&mp) * sizeof *head_tile);
    float *scratch = malloc(fg_mha_scratch_floats(&mp) * sizeof *scratch);
    if (!page_tile || !head_tile || !scratch)
        return -1;
    int n_rows = 0;
    for (int q = 0; q < n_q; q++)
        n_rows = n_kv[q] > n_rows ? n_kv[q] : n_rows;
    const int pages = (n_rows + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    *best_s = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = thread_cpu_s();
        for (int pg = 0; pg < pages; pg++) {
            const int rows = n_rows - pg * FG_KV_PAGE_TOKENS < FG_KV_PAGE_TOKENS ? n_rows - pg * FG_KV_PAGE_TOKENS
                                                                                 : FG_KV_PAGE_TOKENS;
            fg_mha_load_page(&mp, pg, rows, page_tile, scratch);
            for (int h = 0; h < H; h++) {
                fg_mha_decompress(&mp, page_tile, rows, h, head_tile);
                for (int q0 = 0; q0 < n_q; q0 += FG_MHA_GROUP) {
                    const int g = n_q - q0 < FG_MHA_GROUP ? n_q - q0 : FG_MHA_GROUP;
                    const float *qnp[FG_MHA_GROUP], *qrp[FG_MHA_GROUP];
                    float *op[FG_MHA_GROUP], *mp_[FG_MHA_GROUP], *lp[FG_MHA_GROUP];
                    for (int i = 0; i < g; i++) {
                        const size_t qh = (size_t)(q0 + i) * H + (size_t)h;
                        qnp[i] = qn + qh * NK;
                        qrp[i] = q_rope + qh * R;
                        op[i] = out + qh * NV;
                        mp_[i] = &m[qh];
                        lp[i] = &l[qh];
                    }
                    fg_mha_attend(&mp, page_tile, head_tile, pg, rows, h, g, n_kv + q0, qnp, qrp, op, mp_, lp,
                                  scratch);
                }
            }
        }
        for (size_t qh = 0; qh < (size_t)n_q * H; qh++)
            fg_mha_finish(NV, out + qh * NV, l[qh]);
        const double dt = thread_cpu_s() - t0;
        *best_s = dt < *best_s ? dt : *best_s;
    }
    /* the absorbed outputs expanded through v_b, against the decompressed ones */
    double dmax = 0.0, omax = 0.0;
    for (int q = 0; q < n_q; q++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < NV; j++) {
                double a = 0.0;
                for (int i = 0; i < L; i++)
                    a += (double)wv[(size_t)i * H * NV + (size_t)h * NV + j] * out_lat[((size_t)q * H + h) * L + i];
                const double x = out[((size_t)q * H + h) * NV + j];
                dmax = fabs(x - a) > dmax ? fabs(x - a) : dmax;
                omax = fabs(a) > omax ? fabs(a) : omax;
            }
    *err = dmax / (omax > 0.0 ? omax : 1.0);
    free(wk);
    free(wv);
    free(qn);
    free(out);
    free(m);
    free(l);
    free(wrow);
    free(page_tile);
    free(head_tile);
    free(scratch);
    return 0;
}

int main(int argc, char **argv)
{
    int H = 8, L = 160, R = 32, NK = 64, NV = 64, history = 3600, n_q = 384, reps = 5;
    const char *model = NULL;
    fg_kv_format fmt = FG_KV_FP4;
    fg_isa isa = FG_ISA_AUTO;
    int all = 0; /* --isa all */
    static const struct option longs[] = {
        {"history", required_argument, 0, 'y'}, {"queries", required_argument, 0, 'q'},
        {"heads", required_argument, 0, 'H'},   {"kv-lora", required_argument, 0, 'L'},
        {"rope", required_argument, 0, 'R'},    {"kv-format", required_argument, 0, 'k'},
        {"isa", required_argument, 0, 'i'},     {"reps", required_argument, 0, 'r'},
        {"nope", required_argument, 0, 'n'},    {"v", required_argument, 0, 'v'},
        {"model", required_argument, 0, 'm'},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "y:q:H:L:R:k:i:r:n:v:m:h", longs, NULL)) != -1) {
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
        case 'n': NK = atoi(optarg); break;
        case 'v': NV = atoi(optarg); break;
        case 'm': model = optarg; break;
        default:
            fprintf(stderr, "usage: flashgate-bench-attn [--history 3600] [--queries 384] [--heads 8] [--kv-lora 160] "
                            "[--rope 32] [--nope 64] [--v 64] [--kv-format fp4] [--isa auto|scalar|avx2|avx512|all] [--reps 5] "
                            "[--model PATH (its first layer's k_b, v_b and shape)]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    fg_gguf_t *gg = NULL;
    fg_model *mdl = NULL;
    if (model) {
        fg_diag d = {{0}};
        if (fg_gguf_open_file(model, &gg, &d) != FG_OK || fg_model_load(gg, &mdl, &d) != FG_OK) {
            fprintf(stderr, "error: %s: %s\n", model, d.msg);
            return 1;
        }
        H = mdl->hp.n_head, L = mdl->hp.kv_lora, R = mdl->hp.n_rope, NK = mdl->hp.n_nope, NV = mdl->hp.n_v;
    }
    if (history < 0 || n_q < 1 || H < 1 || L < 16 || R < 0 || NK < 1 || NV < 1 || reps < 1 || reps > 101 || (int)fmt < 0 ||
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
    double best_mha = 0.0, mha_err = 0.0;
    if (mha_form(&p, NK, NV, mdl, n_q, n_kv, q_lat, q_rope, outm, reps, &best_mha, &mha_err) != 0) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    printf("  decompressed (mha_attn, %s)   %9.1f ms  %6.0f queries/s\n", fg_isa_name(p.isa == FG_ISA_AUTO ? fg_isa_best() : p.isa),
           best_mha * 1e3, n_q / best_mha);
    printf("  decompressed vs absorbed (expanded through v_b%s): max |d| / max |out| = %.3g\n",
           mdl ? ", the model's" : ", random", mha_err);

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
    if (mdl)
        fg_model_free(mdl);
    if (gg)
        fg_gguf_close(gg);
    return same && mha_err <= 1e-4 ? 0 : 1;
}
