/* test_mha_attn.c: kernels/cpu/mha_attn.h (the decompressed form of MLA
 * attention) against a reference written here in double: keys and values
 * decompressed from the dequantized latent rows in double, scores, a two-pass
 * softmax and the weighted sum in double. Every kernel (scalar, AVX2,
 * AVX-512) the CPU runs.
 *
 * The cache is laid out as the engine's (pages of FG_KV_PAGE_TOKENS rows,
 * several layers per page, we read layer 1; pages out of address order).
 * n_kv covers one row, both sides of a page boundary and several pages;
 * one case has sharp scores (large queries) so the running maximum moves and
 * o is rescaled; odd widths exercise the masked tails.
 *
 * Also checked bit for bit, because the engine relies on it:
 *  - a decompressed row's bits do not depend on how many rows its page had
 *    when it was decompressed (a page still filling vs a full one);
 *  - a query attended in a group with other queries (other n_kv: the causal
 *    shape of a chunk; groups of 1 to 4 and a group of 4 plus one) gets the
 *    bits it gets alone;
 *  - the AVX2 and AVX-512 kernels give the same bits (where the CPU has both;
 *    the engine's results are meant not to depend on which one ran).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/mha_attn.h"
#include "tests/unit/fg_test.h"

/* max|out - ref| / max|v|: the output is a convex combination of the values.
 * The float error: each key channel sums kv_lora products (a few ulps of the
 * sum of |terms|), each score sums n_nope + n_rope of those, exp turns the
 * absolute score error into a relative weight error, and the running sums
 * over n_kv rows round. Worst observed on these cases: see FG_TEST_VERBOSE
 * (about 1e-6); 1e-5 keeps margin, while a wrong row, page or head moves
 * the output by ~1e-2. */
#define TOL 1e-5

#define N_LAYERS 3
#define LAYER 1
#define GUARD 16
#define PAGE FG_KV_PAGE_TOKENS

static fg_isa g_isa;

/* The AVX2 kernel's states (o, m, l of every query and head, before the
 * division) of each case, in case order, for the AVX-512 run to compare. */
#define MAX_CASES 128
static struct {
    float *o, *m, *l;
    size_t n_o, n_ml;
} g_avx2[MAX_CASES];
static int g_case;

/* Under AVX2 keeps this case's states; under AVX-512 returns how many of
 * them differ from the AVX2 run's (0 where there was none). */
static int isa_compare(const float *o, const float *m, const float *l, size_t n_o, size_t n_ml)
{
    const int c = g_case++;
    int differs = 0;
    if (c >= MAX_CASES)
        return 0;
    if (g_isa == FG_ISA_AVX2) {
        g_avx2[c].o = malloc(n_o * sizeof *o);
        g_avx2[c].m = malloc(n_ml * sizeof *m);
        g_avx2[c].l = malloc(n_ml * sizeof *l);
        memcpy(g_avx2[c].o, o, n_o * sizeof *o);
        memcpy(g_avx2[c].m, m, n_ml * sizeof *m);
        memcpy(g_avx2[c].l, l, n_ml * sizeof *l);
        g_avx2[c].n_o = n_o;
        g_avx2[c].n_ml = n_ml;
    } else if (g_isa == FG_ISA_AVX512 && g_avx2[c].o) {
        for (size_t i = 0; i < n_o; i++)
            differs += memcmp(&o[i], &g_avx2[c].o[i], sizeof *o) != 0;
        for (size_t i = 0; i < n_ml; i++)
            differs += memcmp(&m[i], &g_avx2[c].m[i], sizeof *m) != 0 || memcmp(&l[i], &g_avx2[c].l[i], sizeof *l) != 0;
    }
    return differs;
}

typedef struct cache {
    uint8_t **alloc;
    const uint8_t **table;
    int n_pages;
    size_t row_bytes, lat_bytes, layer_offset;
} cache;

static void cache_make(cache *c, fg_kv_format fmt, int L, int R, int n_rows)
{
    c->lat_bytes = fg_kv_bytes(fmt, L);
    c->row_bytes = c->lat_bytes + fg_kv_bytes(fmt, R);
    c->n_pages = (n_rows + PAGE - 1) / PAGE;
    c->layer_offset = (size_t)LAYER * PAGE * c->row_bytes;
    const size_t page_bytes = (size_t)N_LAYERS * PAGE * c->row_bytes;
    c->alloc = malloc((size_t)c->n_pages * sizeof *c->alloc);
    c->table = malloc((size_t)c->n_pages * sizeof *c->table);
    for (int i = 0; i < c->n_pages; i++) {
        c->alloc[i] = malloc(page_bytes);
        memset(c->alloc[i], 0xee, page_bytes); /* other layers and unused slots: garbage */
    }
    for (int i = 0; i < c->n_pages; i++)
        c->table[i] = c->alloc[c->n_pages - 1 - i];
    float *row = malloc((size_t)(L + R) * sizeof *row);
    for (int t = 0; t < n_rows; t++) {
        for (int i = 0; i < L + R; i++)
            row[i] = rng_f() * (1.0f + (float)((i / 16) % 3));
        uint8_t *dst = (uint8_t *)c->table[t / PAGE] + c->layer_offset + (size_t)(t % PAGE) * c->row_bytes;
        fg_kv_quantize(fmt, row, L, dst);
        fg_kv_quantize(fmt, row + L, R, dst + c->lat_bytes);
    }
    free(row);
}

static void cache_free(cache *c)
{
    for (int i = 0; i < c->n_pages; i++)
        free(c->alloc[i]);
    free(c->alloc);
    free(c->table);
}

static void run_case(fg_kv_format fmt, int H, int L, int R, int NK, int NV, int n_kv, float qscale)
{
    cache c;
    cache_make(&c, fmt, L, R, n_kv);
    float *wk = malloc((size_t)H * NK * L * sizeof *wk), *wv = malloc((size_t)L * H * NV * sizeof *wv);
    const float wscale = 1.0f / sqrtf((float)L);
    for (size_t i = 0; i < (size_t)H * NK * L; i++)
        wk[i] = wscale * rng_f();
    for (size_t i = 0; i < (size_t)L * H * NV; i++)
        wv[i] = wscale * rng_f();
    /* NQ queries: the first is checked against the reference; all are attended
     * as one call (a group of 4 and one of 1, fewer in pages some do not
     * reach), alone, and as calls of 2 and 3, which must give the same bits */
    enum { NQ = 5 };
    const int nkv_q[NQ] = {n_kv, n_kv > 5 ? n_kv - 5 : 1, (n_kv + 1) / 2, n_kv > 1 ? n_kv - 1 : 1, n_kv > 40 ? 40 : 1};
    float *qn = malloc((size_t)NQ * H * NK * sizeof *qn), *qr = malloc((size_t)NQ * H * R * sizeof *qr);
    for (int i = 0; i < NQ * H * NK; i++)
        qn[i] = qscale * rng_f();
    for (int i = 0; i < NQ * H * R; i++)
        qr[i] = qscale * rng_f();
    const float scale = 1.0f / sqrtf((float)(NK + R));

    /* reference in double on the dequantized rows */
    float *lat = malloc((size_t)L * sizeof *lat), *kr = malloc((size_t)R * sizeof *kr);
    double *k = malloc((size_t)n_kv * H * NK * sizeof *k), *v = malloc((size_t)n_kv * H * NV * sizeof *v);
    double *krd = malloc((size_t)n_kv * R * sizeof *krd), vmax = 0.0;
    for (int t = 0; t < n_kv; t++) {
        const uint8_t *src = c.table[t / PAGE] + c.layer_offset + (size_t)(t % PAGE) * c.row_bytes;
        fg_kv_dequantize(fmt, src, L, lat);
        fg_kv_dequantize(fmt, src + c.lat_bytes, R, kr);
        for (int j = 0; j < R; j++)
            krd[(size_t)t * R + j] = kr[j];
        for (int o = 0; o < H * NK; o++) {
            double a = 0.0;
            for (int i = 0; i < L; i++)
                a += (double)wk[(size_t)o * L + i] * lat[i];
            k[(size_t)t * H * NK + o] = a;
        }
        for (int o = 0; o < H * NV; o++) {
            double a = 0.0;
            for (int i = 0; i < L; i++)
                a += (double)wv[(size_t)i * H * NV + o] * lat[i];
            v[(size_t)t * H * NV + o] = a;
            vmax = fmax(vmax, fabs(a));
        }
    }
    double *ref = calloc((size_t)H * NV, sizeof *ref), *s = malloc((size_t)n_kv * sizeof *s);
    for (int h = 0; h < H; h++) {
        double m = -INFINITY, sum = 0.0;
        for (int t = 0; t < n_kv; t++) {
            double d = 0.0;
            for (int j = 0; j < NK; j++)
                d += (double)qn[h * NK + j] * k[(size_t)t * H * NK + (size_t)h * NK + j];
            for (int j = 0; j < R; j++)
                d += (double)qr[h * R + j] * krd[(size_t)t * R + j];
            s[t] = scale * d;
            m = fmax(m, s[t]);
        }
        for (int t = 0; t < n_kv; t++) {
            s[t] = exp(s[t] - m);
            sum += s[t];
        }
        for (int t = 0; t < n_kv; t++)
            for (int j = 0; j < NV; j++)
                ref[h * NV + j] += s[t] / sum * v[(size_t)t * H * NV + (size_t)h * NV + j];
    }

    /* the kernel, a page at a time, with guards after the tile, the scratch and each head's output */
    const fg_mha_attn_params p = {
        .n_head = H, .kv_lora = L, .n_rope = R, .n_nope = NK, .n_v = NV, .scale = scale, .format = fmt,
        .pages = c.table, .layer_offset = c.layer_offset, .row_bytes = c.row_bytes, .wk = wk, .wv = wv,
        .isa = g_isa,
    };
    /* tiles: [0] the page as it is, [1] as it was with fewer rows */
    const size_t npt = fg_mha_page_tile_floats(&p), nht = fg_mha_head_tile_floats(&p), ns = fg_mha_scratch_floats(&p);
    float *pt[2], *ht[2];
    for (int w = 0; w < 2; w++) {
        pt[w] = malloc((npt + GUARD) * sizeof *pt[w]);
        ht[w] = malloc((nht + GUARD) * sizeof *ht[w]);
        for (size_t i = 0; i < GUARD; i++)
            pt[w][npt + i] = ht[w][nht + i] = -1234.5f;
    }
    float *scratch = malloc((ns + GUARD) * sizeof *scratch);
    for (size_t i = 0; i < ns + GUARD; i++)
        scratch[i] = NAN; /* the kernels must not read scratch before writing it */
    /* per (query, head): o with guards; [0] one call, [1] alone, [2] calls of 2 and 3 */
    enum { WAYS = 3 };
    const size_t ow = (size_t)NV + GUARD, qh_n = (size_t)NQ * H;
    float *out[WAYS], *m[WAYS], *l[WAYS];
    for (int w = 0; w < WAYS; w++) {
        out[w] = malloc(qh_n * ow * sizeof *out[w]);
        m[w] = malloc(qh_n * sizeof *m[w]);
        l[w] = malloc(qh_n * sizeof *l[w]);
        for (size_t i = 0; i < qh_n * ow; i++)
            out[w][i] = -1234.5f;
    }
    int partial_differs = 0;
    for (int pg = 0; pg < c.n_pages; pg++) {
        const int rows = n_kv - pg * PAGE < PAGE ? n_kv - pg * PAGE : PAGE;
        const int fewer = rows > 1 ? rows / 2 : 1;
        fg_mha_load_page(&p, pg, rows, pt[0], scratch);
        fg_mha_load_page(&p, pg, fewer, pt[1], scratch);
        for (int h = 0; h < H; h++) {
            fg_mha_decompress(&p, pt[0], rows, h, ht[0]);
            /* the page as it was when it held fewer rows: the same bits for those rows */
            fg_mha_decompress(&p, pt[1], fewer, h, ht[1]);
            for (int r = 0; r < fewer; r++) {
                for (int j = 0; j < NK; j++)
                    partial_differs += memcmp(&ht[0][(size_t)j * PAGE + r], &ht[1][(size_t)j * PAGE + r], 4) != 0;
                const size_t v0 = (size_t)NK * PAGE + (size_t)r * NV;
                partial_differs += memcmp(ht[0] + v0, ht[1] + v0, (size_t)NV * sizeof(float)) != 0;
            }
            const float *qnp[NQ], *qrp[NQ];
            float *op[WAYS][NQ], *mp[WAYS][NQ], *lp[WAYS][NQ];
            for (int q = 0; q < NQ; q++) {
                const size_t qh = (size_t)q * H + (size_t)h;
                qnp[q] = qn + qh * NK;
                qrp[q] = qr + qh * R;
                for (int w = 0; w < WAYS; w++) {
                    op[w][q] = out[w] + qh * ow;
                    mp[w][q] = &m[w][qh];
                    lp[w][q] = &l[w][qh];
                }
            }
            fg_mha_attend(&p, pt[0], ht[0], pg, rows, h, NQ, nkv_q, qnp, qrp, op[0], mp[0], lp[0], scratch);
            for (int q = 0; q < NQ; q++)
                fg_mha_attend(&p, pt[0], ht[0], pg, rows, h, 1, &nkv_q[q], &qnp[q], &qrp[q], &op[1][q], &mp[1][q],
                              &lp[1][q], scratch);
            fg_mha_attend(&p, pt[0], ht[0], pg, rows, h, 2, nkv_q, qnp, qrp, op[2], mp[2], lp[2], scratch);
            fg_mha_attend(&p, pt[0], ht[0], pg, rows, h, NQ - 2, nkv_q + 2, qnp + 2, qrp + 2, op[2] + 2, mp[2] + 2,
                          lp[2] + 2, scratch);
        }
    }
    double err = 0.0;
    int nonfinite = 0, guards = 0, group_differs = 0;
    for (size_t qh = 0; qh < qh_n; qh++) /* the unnormalised states, bit for bit */
        for (int w = 0; w < WAYS; w += 2)
            group_differs += memcmp(out[w] + qh * ow, out[1] + qh * ow, (size_t)NV * sizeof(float)) != 0 ||
                             memcmp(&m[w][qh], &m[1][qh], sizeof(float)) != 0 ||
                             memcmp(&l[w][qh], &l[1][qh], sizeof(float)) != 0;
    const int isa_differs = isa_compare(out[1], m[1], l[1], qh_n * ow, qh_n);
    for (size_t qh = 0; qh < qh_n; qh++)
        for (int w = 0; w < WAYS; w++) {
            fg_mha_finish(NV, out[w] + qh * ow, l[w][qh]);
            for (int i = 0; i < GUARD; i++)
                guards += out[w][qh * ow + (size_t)NV + (size_t)i] != -1234.5f;
        }
    for (int h = 0; h < H; h++) /* query 0 against the reference */
        for (int j = 0; j < NV; j++) {
            const float x = out[0][(size_t)h * ow + (size_t)j];
            nonfinite += !isfinite(x);
            err = fmax(err, fabs(x - ref[h * NV + j]));
        }
    err /= vmax + 1e-30;
    for (int i = 0; i < GUARD; i++)
        guards += pt[0][npt + (size_t)i] != -1234.5f || pt[1][npt + (size_t)i] != -1234.5f ||
                  ht[0][nht + (size_t)i] != -1234.5f || ht[1][nht + (size_t)i] != -1234.5f ||
                  !isnan(scratch[ns + (size_t)i]);
    CHECK_MSG(nonfinite == 0 && err <= TOL && guards == 0 && partial_differs == 0 && group_differs == 0 &&
                  isa_differs == 0,
              "%s %s H=%d L=%d R=%d nope=%d v=%d n_kv=%d q*%g: err %.3g (tol %.3g), %d non-finite, %d guards hit, "
              "%d rows differ when their page held fewer rows, %d (query, head) differ grouped vs alone, "
              "%d differ from the AVX2 kernel's",
              fg_isa_name(g_isa), fg_kv_format_name(fmt), H, L, R, NK, NV, n_kv, qscale, err, TOL, nonfinite, guards,
              partial_differs, group_differs, isa_differs);
    if (getenv("FG_TEST_VERBOSE"))
        fprintf(stderr, "  %s %s H=%d L=%d R=%d nope=%d v=%d n_kv=%d q*%g: err %.3g\n", fg_isa_name(g_isa),
                fg_kv_format_name(fmt), H, L, R, NK, NV, n_kv, qscale, err);

    for (int w = 0; w < WAYS; w++) {
        free(out[w]);
        free(m[w]);
        free(l[w]);
    }
    for (int w = 0; w < 2; w++) {
        free(pt[w]);
        free(ht[w]);
    }
    free(scratch);
    free(ref);
    free(s);
    free(k);
    free(v);
    free(krd);
    free(lat);
    free(kr);
    free(qn);
    free(qr);
    free(wk);
    free(wv);
    cache_free(&c);
}

int main(void)
{
    const fg_isa isas[] = {FG_ISA_SCALAR, FG_ISA_AVX2, FG_ISA_AVX512}; /* AVX2 before AVX-512: isa_compare */
    for (size_t a = 0; a < sizeof isas / sizeof isas[0]; a++) {
        g_isa = isas[a];
        g_case = 0;
        if (!fg_isa_supported(g_isa)) {
            fprintf(stderr, "  skip %s (not on this CPU)\n", fg_isa_name(g_isa));
            continue;
        }
        rng_seed(0x5be6a3c1d2f09e47ull);
        const int n_kvs[] = {1, 2, 63, 64, 65, 200};
        for (int f = 0; f < FG_KV__COUNT; f++)
            for (size_t i = 0; i < sizeof n_kvs / sizeof n_kvs[0]; i++) {
                run_case((fg_kv_format)f, 8, 160, 32, 64, 64, n_kvs[i], 1.0f); /* flash-mini's layer */
                run_case((fg_kv_format)f, 8, 160, 32, 64, 64, n_kvs[i], 8.0f); /* sharp scores */
            }
        /* widths that are not multiples of 16 or 4 (every format but FP4): masked tails */
        for (int f = 0; f < FG_KV__COUNT; f++)
            if (f != FG_KV_FP4) {
                run_case((fg_kv_format)f, 3, 40, 8, 13, 20, 70, 4.0f);
                run_case((fg_kv_format)f, 2, 24, 16, 16, 80, 130, 2.0f); /* values wider than one 64-float block */
            }
    }
    for (int c = 0; c < MAX_CASES; c++) {
        free(g_avx2[c].o);
        free(g_avx2[c].m);
        free(g_avx2[c].l);
    }
    return TEST_DONE("test_mha_attn");
}
