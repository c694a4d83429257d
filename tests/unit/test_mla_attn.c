/* test_mla_attn.c: kernels/cpu/mla_attn.h against a straightforward reference
 * written here: scores in double, a two-pass softmax in double, the weighted
 * sum in double. The reference reads the cache through fg_kv_dequantize, so for
 * every format the kernel is compared on the same dequantized rows and only its
 * own float rounding remains.
 *
 * The cache is built as the engine lays it out: pages of FG_KV_PAGE_TOKENS
 * tokens, several layers per page (we attend over layer 1, so layer_offset
 * matters), pages allocated separately and listed out of address order. n_kv
 * covers one token, both sides of a page boundary and several pages; scores are
 * made to rise along the sequence in one case so the running maximum is
 * replaced often (the online rescale), and flat in another.
 *
 * Every case runs on each kernel the CPU has (scalar, AVX2, AVX-512), chosen
 * through the params' isa, each held to its own normalised tolerance, with
 * non-finite outputs counted apart and a NaN in the cache checked to reach
 * the output.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/mla_attn.h"
#include "tests/unit/fg_test.h"

/* max|out - ref| / max|c|: the output is a convex combination of the cached
 * latents, so its error is measured against their size. A kernel's float
 * error: each score's dot product (kv_lora + n_rope terms) rounds by a few ulps
 * of the sum of |terms|, an absolute score error that exp turns into a relative
 * error of the weights; then the running sums over n_kv rows round. Per kernel
 * the worst observed over this file's cases (the 16-head, latent-512
 * "rising" case, whose scores reach ~20):
 *   scalar  7.9e-7  one row at a time, eight interleaved partial sums per dot;
 *   AVX-512 6.3e-7  16-lane partial sums, chunked softmax;
 *   AVX2    8.9e-7  8-lane partial sums, the same chunked softmax.
 * 2e-6 keeps over 2x of margin for each, while a wrongly decoded FP4 sign
 * moves the output by ~1e-2 and one score off by 1e-4 of itself by ~7e-5. */
static double tolerance(fg_isa isa)
{
    switch (isa) {
    case FG_ISA_AVX2:
        return 2e-6;
    case FG_ISA_AVX512:
        return 2e-6;
    default:
        return 2e-6;
    }
}

#define N_LAYERS 3
#define LAYER 1
#define GUARD 16


static fg_isa g_isa; /* the kernel under test */

static void run_case(fg_kv_format fmt, int H, int L, int R, int n_kv, int rising, float scale)
{
    const size_t lat_bytes = fg_kv_bytes(fmt, L), rope_bytes = fg_kv_bytes(fmt, R);
    const size_t row_bytes = lat_bytes + rope_bytes;
    const int n_pages = (n_kv + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    const size_t page_bytes = (size_t)N_LAYERS * FG_KV_PAGE_TOKENS * row_bytes;

    /* pages, listed in reverse allocation order */
    uint8_t **alloc = malloc((size_t)n_pages * sizeof *alloc);
    const uint8_t **table = malloc((size_t)n_pages * sizeof *table);
    for (int i = 0; i < n_pages; i++) {
        alloc[i] = malloc(page_bytes);
        memset(alloc[i], 0xee, page_bytes); /* other layers and unused slots: garbage */
    }
    for (int i = 0; i < n_pages; i++)
        table[i] = alloc[n_pages - 1 - i];
    const size_t layer_offset = (size_t)LAYER * FG_KV_PAGE_TOKENS * row_bytes;

    float *q_lat = malloc((size_t)H * L * sizeof *q_lat), *q_rope = malloc((size_t)H * R * sizeof *q_rope);
    for (int i = 0; i < H * L; i++)
        q_lat[i] = rng_f();
    for (int i = 0; i < H * R; i++)
        q_rope[i] = rng_f();

    /* write the rows; "rising" adds t/n_kv * q to every row so scores grow along the sequence */
    float *row = malloc((size_t)(L + R) * sizeof *row);
    for (int t = 0; t < n_kv; t++) {
        for (int i = 0; i < L + R; i++)
            row[i] = rng_f() * (1.0f + (float)((i / 16) % 3));
        if (rising)
            for (int i = 0; i < L; i++)
                row[i] += 2.0f * (float)t / (float)n_kv * q_lat[i % L];
        uint8_t *dst = (uint8_t *)table[t / FG_KV_PAGE_TOKENS] + layer_offset +
                       (size_t)(t % FG_KV_PAGE_TOKENS) * row_bytes;
        fg_kv_quantize(fmt, row, L, dst);
        fg_kv_quantize(fmt, row + L, R, dst + lat_bytes);
    }

    /* reference, in double, on the dequantized rows */
    float *c = malloc((size_t)n_kv * L * sizeof *c), *kr = malloc((size_t)n_kv * R * sizeof *kr);
    double cmax = 0.0;
    for (int t = 0; t < n_kv; t++) {
        const uint8_t *src = table[t / FG_KV_PAGE_TOKENS] + layer_offset + (size_t)(t % FG_KV_PAGE_TOKENS) * row_bytes;
        fg_kv_dequantize(fmt, src, L, c + (size_t)t * L);
        fg_kv_dequantize(fmt, src + lat_bytes, R, kr + (size_t)t * R);
        for (int i = 0; i < L; i++)
            cmax = fmax(cmax, fabs(c[(size_t)t * L + i]));
    }
    double *ref = calloc((size_t)H * L, sizeof *ref), *s = malloc((size_t)n_kv * sizeof *s);
    for (int h = 0; h < H; h++) {
        double m = -INFINITY;
        for (int t = 0; t < n_kv; t++) {
            double d = 0.0;
            for (int i = 0; i < L; i++)
                d += (double)q_lat[h * L + i] * c[(size_t)t * L + i];
            for (int i = 0; i < R; i++)
                d += (double)q_rope[h * R + i] * kr[(size_t)t * R + i];
            s[t] = scale * d;
            m = fmax(m, s[t]);
        }
        double sum = 0.0;
        for (int t = 0; t < n_kv; t++) {
            s[t] = exp(s[t] - m);
            sum += s[t];
        }
        for (int t = 0; t < n_kv; t++)
            for (int i = 0; i < L; i++)
                ref[h * L + i] += s[t] / sum * c[(size_t)t * L + i];
    }

    /* the kernel, with guard floats around its output and its scratch */
    const fg_mla_attn_params p = {
        .n_head = H, .kv_lora = L, .n_rope = R, .scale = scale, .format = fmt,
        .pages = table, .layer_offset = layer_offset, .row_bytes = row_bytes, .n_kv = n_kv, .isa = g_isa,
    };
    const size_t ns = fg_mla_attn_scratch_floats(&p);
    float *scratch = malloc((ns + GUARD) * sizeof *scratch);
    float *out = malloc(((size_t)H * L + 2 * GUARD) * sizeof *out);
    for (size_t i = 0; i < ns + GUARD; i++)
        scratch[i] = NAN; /* the kernel must not read scratch before writing it */
    for (size_t i = 0; i < (size_t)H * L + 2 * GUARD; i++)
        out[i] = -1234.5f;
    fg_mla_attn(&p, q_lat, q_rope, out + GUARD, scratch);

    double err = 0.0;
    int nonfinite = 0, guards = 0;
    for (int i = 0; i < H * L; i++) {
        if (!isfinite(out[GUARD + i]))
            nonfinite++; /* counted apart: fmax would skip a NaN */
        else
            err = fmax(err, fabs(out[GUARD + i] - ref[i]));
    }
    err /= cmax + 1e-30;
    for (int i = 0; i < GUARD; i++) {
        guards += out[i] != -1234.5f || out[GUARD + H * L + i] != -1234.5f;
        guards += !isnan(scratch[ns + (size_t)i]);
    }
    const double tol = tolerance(g_isa);
    CHECK_MSG(nonfinite == 0 && err <= tol && guards == 0,
              "%s %s H=%d L=%d R=%d n_kv=%d rising=%d: err %.3g (tol %.3g), %d non-finite, %d guards hit",
              fg_isa_name(g_isa), fg_kv_format_name(fmt), H, L, R, n_kv, rising, err, tol, nonfinite, guards);
    if (getenv("FG_TEST_VERBOSE"))
        fprintf(stderr, "  %s %s H=%d L=%d R=%d n_kv=%d rising=%d: err %.3g\n", fg_isa_name(g_isa),
                fg_kv_format_name(fmt), H, L, R, n_kv, rising, err);

    free(out);
    free(scratch);
    free(ref);
    free(s);
    free(c);
    free(kr);
    free(row);
    free(q_lat);
    free(q_rope);
    for (int i = 0; i < n_pages; i++)
        free(alloc[i]);
    free(alloc);
    free(table);
}

/* fg_mla_attn_multi: n_q queries over one cache of n_rows rows, query i over
 * n_kv[i] of them (a prefill chunk's causal shape, shuffled, with an empty
 * query and more queries than one group), each output compared bit for bit
 * with fg_mla_attn alone at that n_kv and the same isa. fg_mla_attn is held to
 * the double-precision reference above, so equality carries its tolerance;
 * equality is what the engine relies on (a query's bits must not depend on
 * which queries share its prefill chunk). So is each query's parts of
 * FG_MLA_ATTN_PART_ROWS rows computed
 * apart (fg_mla_attn_part, last part first) and folded in order (a lone
 * decode's cache split over threads). */
static void run_multi_case(fg_kv_format fmt, int H, int L, int R, int n_rows, int n_q)
{
    const size_t lat_bytes = fg_kv_bytes(fmt, L), row_bytes = lat_bytes + fg_kv_bytes(fmt, R);
    const int n_pages = (n_rows + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    const size_t page_bytes = (size_t)N_LAYERS * FG_KV_PAGE_TOKENS * row_bytes;
    const size_t layer_offset = (size_t)LAYER * FG_KV_PAGE_TOKENS * row_bytes;
    uint8_t **pages = malloc((size_t)n_pages * sizeof *pages);
    for (int i = 0; i < n_pages; i++) {
        pages[i] = malloc(page_bytes);
        memset(pages[i], 0xee, page_bytes);
    }
    float *row = malloc((size_t)(L + R) * sizeof *row);
    for (int t = 0; t < n_rows; t++) {
        for (int i = 0; i < L + R; i++)
            row[i] = rng_f() * (1.0f + (float)(t % 5));
        uint8_t *dst = pages[t / FG_KV_PAGE_TOKENS] + layer_offset + (size_t)(t % FG_KV_PAGE_TOKENS) * row_bytes;
        fg_kv_quantize(fmt, row, L, dst);
        fg_kv_quantize(fmt, row + L, R, dst + lat_bytes);
    }
    const size_t qw = (size_t)H * L, rw = (size_t)H * R;
    float *q_lat = malloc((size_t)n_q * qw * sizeof *q_lat), *q_rope = malloc((size_t)n_q * rw * sizeof *q_rope);
    for (size_t i = 0; i < (size_t)n_q * qw; i++)
        q_lat[i] = 2.0f * rng_f();
    for (size_t i = 0; i < (size_t)n_q * rw; i++)
        q_rope[i] = 2.0f * rng_f();
    int *n_kv = malloc((size_t)n_q * sizeof *n_kv);
    for (int i = 0; i < n_q; i++) /* the causal shape of a chunk ending at n_rows, then shuffled */
        n_kv[i] = n_rows - i;
    for (int i = n_q - 1; i > 0; i--) {
        const int j = (int)(rng_u32() % (uint32_t)(i + 1)), tmp = n_kv[i];
        n_kv[i] = n_kv[j];
        n_kv[j] = tmp;
    }
    n_kv[n_q / 2] = 0;

    const fg_mla_attn_params p = {
        .n_head = H, .kv_lora = L, .n_rope = R, .scale = 1.0f / sqrtf((float)(L + R)), .format = fmt,
        .pages = (const uint8_t *const *)pages, .layer_offset = layer_offset, .row_bytes = row_bytes,
        .n_kv = 1, .isa = g_isa,
    };
    const size_t ns = fg_mla_attn_scratch_floats(&p);
    float *scratch = malloc((ns + GUARD) * sizeof *scratch);
    for (size_t i = 0; i < ns + GUARD; i++)
        scratch[i] = NAN;
    float *out = malloc(((size_t)n_q * qw + GUARD) * sizeof *out), *one = malloc(qw * sizeof *one);
    for (size_t i = 0; i < (size_t)n_q * qw + GUARD; i++)
        out[i] = -1234.5f;
    fg_mla_attn_multi(&p, n_q, n_kv, q_lat, q_rope, out, scratch);

    const int max_parts = (n_rows + FG_MLA_ATTN_PART_ROWS - 1) / FG_MLA_ATTN_PART_ROWS;
    float *parts = malloc((size_t)max_parts * (qw + 2 * (size_t)H) * sizeof *parts);
    int differ = 0, guards = 0, nonzero_empty = 0, parts_differ = 0;
    for (int i = 0; i < n_q; i++) {
        if (n_kv[i] == 0) {
            for (size_t k = 0; k < qw; k++)
                nonzero_empty += out[(size_t)i * qw + k] != 0.0f;
            continue;
        }
        fg_mla_attn_params pi = p;
        pi.n_kv = n_kv[i];
        fg_mla_attn(&pi, q_lat + (size_t)i * qw, q_rope + (size_t)i * rw, one, scratch);
        differ += memcmp(one, out + (size_t)i * qw, qw * sizeof *one) != 0;
        const int np = (n_kv[i] + FG_MLA_ATTN_PART_ROWS - 1) / FG_MLA_ATTN_PART_ROWS;
        for (int k = np - 1; k >= 0; k--) {
            float *o = parts + (size_t)k * (qw + 2 * (size_t)H);
            fg_mla_attn_part(&pi, k * FG_MLA_ATTN_PART_ROWS, (k + 1) * FG_MLA_ATTN_PART_ROWS,
                             q_lat + (size_t)i * qw, q_rope + (size_t)i * rw, o, o + qw, o + qw + H, scratch);
        }
        for (int k = 1; k < np; k++) {
            const float *o = parts + (size_t)k * (qw + 2 * (size_t)H);
            fg_mla_attn_fold(H, L, parts, parts + qw, parts + qw + H, o, o + qw, o + qw + H);
        }
        fg_mla_attn_finish(H, L, parts, parts + qw + H);
        parts_differ += memcmp(parts, one, qw * sizeof *one) != 0;
    }
    for (int i = 0; i < GUARD; i++)
        guards += out[(size_t)n_q * qw + i] != -1234.5f || !isnan(scratch[ns + (size_t)i]);
    CHECK_MSG(differ == 0 && guards == 0 && nonzero_empty == 0,
              "multi %s %s H=%d L=%d R=%d rows=%d queries=%d: %d queries differ from fg_mla_attn, %d guards hit, "
              "%d non-zero in the empty query",
              fg_isa_name(g_isa), fg_kv_format_name(fmt), H, L, R, n_rows, n_q, differ, guards, nonzero_empty);
    CHECK_MSG(parts_differ == 0, "parts %s %s H=%d L=%d R=%d rows=%d: %d queries' folded parts differ from the call",
              fg_isa_name(g_isa), fg_kv_format_name(fmt), H, L, R, n_rows, parts_differ);
    free(parts);

    free(one);
    free(out);
    free(scratch);
    free(n_kv);
    free(q_lat);
    free(q_rope);
    free(row);
    for (int i = 0; i < n_pages; i++)
        free(pages[i]);
    free(pages);
}

/* NaN in the cache, checked apart from the tolerance: one row of a 70-row
 * cache holds a NaN in each format's own way (an F32/F16 element, an INT8
 * scale, an FP8 code 0x7f, an FP4 block scale 0x7f). A query that reaches that
 * row must come out all NaN, never a finite value that silently skipped it;
 * one that stops before the row must stay finite. Through fg_mla_attn and
 * fg_mla_attn_multi alike. */
static void run_nan_case(fg_kv_format fmt)
{
    const int H = 4, L = 64, R = 16, n_rows = 70, bad = 66;
    const size_t lat_bytes = fg_kv_bytes(fmt, L), row_bytes = lat_bytes + fg_kv_bytes(fmt, R);
    const int n_pages = (n_rows + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    uint8_t *pages[2];
    float row[80];
    for (int i = 0; i < n_pages; i++)
        pages[i] = malloc((size_t)FG_KV_PAGE_TOKENS * row_bytes);
    for (int t = 0; t < n_rows; t++) {
        for (int i = 0; i < L + R; i++)
            row[i] = rng_f();
        uint8_t *dst = pages[t / FG_KV_PAGE_TOKENS] + (size_t)(t % FG_KV_PAGE_TOKENS) * row_bytes;
        fg_kv_quantize(fmt, row, L, dst);
        fg_kv_quantize(fmt, row + L, R, dst + lat_bytes);
    }
    uint8_t *victim = pages[bad / FG_KV_PAGE_TOKENS] + (size_t)(bad % FG_KV_PAGE_TOKENS) * row_bytes;
    switch (fmt) {
    case FG_KV_F32: {
        const float nan = NAN;
        memcpy(victim + 4 * 5, &nan, 4);
        break;
    }
    case FG_KV_F16:
        victim[2 * 5] = 0x00, victim[2 * 5 + 1] = 0x7e;
        break;
    case FG_KV_INT8: {
        const float nan = NAN;
        memcpy(victim, &nan, 4);
        break;
    }
    case FG_KV_FP8:
        victim[4 + 9] = 0x7f;
        break;
    default: /* FP4: the third block scale of the latent */
        victim[L / 2 + 2] = 0x7f;
        break;
    }
    float q_lat[4 * 64], q_rope[4 * 16], out[2][4 * 64];
    for (int i = 0; i < H * L; i++)
        q_lat[i] = rng_f();
    for (int i = 0; i < H * R; i++)
        q_rope[i] = rng_f();
    fg_mla_attn_params p = {
        .n_head = H, .kv_lora = L, .n_rope = R, .scale = 0.3f, .format = fmt,
        .pages = (const uint8_t *const *)pages, .layer_offset = 0, .row_bytes = row_bytes, .n_kv = n_rows,
        .isa = g_isa,
    };
    float *scratch = malloc(fg_mla_attn_scratch_floats(&p) * sizeof *scratch);
    const int n_kv[2] = {bad, n_rows}; /* stops just before the row; reaches it */
    float q2_lat[2][4 * 64], q2_rope[2][4 * 16];
    for (int k = 0; k < 2; k++) {
        memcpy(q2_lat[k], q_lat, sizeof q_lat);
        memcpy(q2_rope[k], q_rope, sizeof q_rope);
    }
    for (int via_multi = 0; via_multi < 2; via_multi++) {
        if (via_multi) {
            fg_mla_attn_multi(&p, 2, n_kv, &q2_lat[0][0], &q2_rope[0][0], &out[0][0], scratch);
        } else {
            for (int k = 0; k < 2; k++) {
                p.n_kv = n_kv[k];
                fg_mla_attn(&p, q_lat, q_rope, out[k], scratch);
            }
        }
        int finite_before = 0, nan_after = 0;
        for (int i = 0; i < H * L; i++) {
            finite_before += isfinite(out[0][i]) != 0;
            nan_after += isnan(out[1][i]) != 0;
        }
        CHECK_MSG(finite_before == H * L && nan_after == H * L,
                  "nan %s %s %s: %d of %d finite before the NaN row, %d of %d NaN once it is reached",
                  fg_isa_name(g_isa), fg_kv_format_name(fmt), via_multi ? "multi" : "single", finite_before, H * L,
                  nan_after, H * L);
    }
    free(scratch);
    for (int i = 0; i < n_pages; i++)
        free(pages[i]);
}

int main(void)
{
    /* every kernel, chosen through the params' isa whatever the CPU's best */
    const fg_isa isas[] = {FG_ISA_SCALAR, FG_ISA_AVX2, FG_ISA_AVX512};
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        g_isa = isas[k];
        if (!fg_isa_supported(g_isa)) {
            fprintf(stderr, "  skip %s (not on this CPU)\n", fg_isa_name(g_isa));
            continue;
        }
        rng_seed(0x8cb92ba72f3d8dd7ull);
        const int n_kvs[] = {1, 2, 63, 64, 65, 128, 200, 256, 257, 600};
        for (int f = 0; f < FG_KV__COUNT; f++)
            for (size_t a = 0; a < sizeof n_kvs / sizeof n_kvs[0]; a++) {
                run_case((fg_kv_format)f, 4, 64, 16, n_kvs[a], 0, 1.0f / sqrtf(80.0f));
                run_case((fg_kv_format)f, 4, 64, 16, n_kvs[a], 1, 0.5f);
            }
        /* DeepSeek-V2-Lite's shape: 16 heads, latent 512, rope 64 */
        for (int f = 0; f < FG_KV__COUNT; f++) {
            run_case((fg_kv_format)f, 16, 512, 64, 65, 1, 1.0f / sqrtf(192.0f));
            run_case((fg_kv_format)f, 16, 512, 64, 200, 0, 1.0f / sqrtf(192.0f));
        }
        /* flash-mini's shape (latent 160: a 32-float tail after 64-float column blocks) */
        for (int f = 0; f < FG_KV__COUNT; f++)
            run_case((fg_kv_format)f, 8, 160, 32, 130, 1, 1.0f / sqrtf(96.0f));
        /* widths that are not multiples of 16 (every format but FP4): masked tails */
        for (int f = 0; f < FG_KV__COUNT; f++)
            if (f != FG_KV_FP4)
                run_case((fg_kv_format)f, 3, 40, 8, 70, 1, 0.5f);
        /* the multi-query path: one group inside a page, several groups across pages */
        for (int f = 0; f < FG_KV__COUNT; f++) {
            run_multi_case((fg_kv_format)f, 4, 64, 16, 20, 7);
            run_multi_case((fg_kv_format)f, 8, 160, 32, 200, 70);
            run_multi_case((fg_kv_format)f, 4, 64, 16, 200, 100); /* queries ending in the first part and the second */
            run_multi_case((fg_kv_format)f, 8, 160, 32, 700, 40); /* three parts */
            if (f != FG_KV_FP4)
                run_multi_case((fg_kv_format)f, 3, 40, 8, 130, 40);
        }
        for (int f = 0; f < FG_KV__COUNT; f++)
            run_nan_case((fg_kv_format)f);
    }
    return TEST_DONE("test_mla_attn");
}
