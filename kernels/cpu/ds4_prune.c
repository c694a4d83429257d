/* ds4_prune.c: the V4 indexer's bounded pre-scores (ds4_ops.h): int16 codes
 * of a query against the FP4 index keys as the cache stores them, and the
 * rows that may be in the exact top-k. The bound and its proof are in
 * docs/engine.md ("The indexer's pruned scoring"). */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ds4_dots_isa.h"
#include "kernels/cpu/ds4_ops.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"

#define BIG 0x1p40   /* |q| and |w| above this: scored exactly (nothing overflows below it) */
#define SMALL 0x1p-40 /* a head's non-zero max |q| or |w| below this too (no product underflows) */
#define QMAX 32767    /* the int16 codes' range */

/* x rounded up to a float */
static float up(double x)
{
    const float f = (float)x;
    return (double)f >= x ? f : nextafterf(f, INFINITY);
}

bool fg_ds4_prune_query(const float *q, const float *w, int Hi, int Di, int32_t *qp, float *alpha, float *ab)
{
    if (Hi < 1 || Hi > FG_DS4_PRUNE_MAX_DIM || Di < 16 || Di % 16 || Di > FG_DS4_PRUNE_MAX_DIM)
        return false;
    const double eps = (double)(Di + Di / 16 + Hi + 16) * 0x1p-24;
    double b0 = 0, wsum = 0;
    for (int h = 0; h < Hi; h++) {
        const float *qh = q + (size_t)h * Di;
        const double wa = fabs((double)w[h]);
        if (!(wa <= BIG) || (wa > 0 && wa < SMALL))
            return false;
        double m = 0;
        for (int i = 0; i < Di; i++) {
            const double v = fabs((double)qh[i]);
            if (!(v <= BIG))
                return false;
            m = v > m ? v : m;
        }
        if (m > 0 && m < SMALL)
            return false;
        const float a = (float)m / (float)QMAX; /* q ~ a code; 2 alpha = a exactly (a is normal) */
        double delta = 0;                      /* max |q - a code|, from the codes as rounded */
        for (int g = 0; g < Di / 2; g++) {
            int32_t c[2];
            for (int e = 0; e < 2; e++) {
                const float x = qh[2 * g + e];
                long v = a > 0 ? lrintf(x / a) : 0;
                v = v > QMAX ? QMAX : v < -QMAX ? -QMAX : v;
                c[e] = (int32_t)v;
                const double d = fabs((double)x - (double)a * (double)v);
                delta = d > delta ? d : delta;
            }
            qp[(size_t)h * (Di / 2) + g] = (int32_t)((uint32_t)(uint16_t)(int16_t)c[0] | (uint32_t)c[1] << 16);
        }
        alpha[h] = a / 2;
        b0 += wa * (delta + eps * (m + delta));
        wsum += wa;
    }
    /* the absolute term: products that underflow in the exact path's dots,
     * subnormal results of the sums and of the final casts */
    const double b1 = (wsum * Di + Hi + 8) * 0x1p-149;
    ab[0] = up(b0 * (1 + 0x1p-16));
    ab[1] = up(b1 * (1 + 0x1p-16));
    return true;
}

/* 2 x the E2M1 value of a code, an integer in [-12, 12] */
static int32_t twice_e2m1(unsigned c)
{
    static const int8_t v[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    return c & 8 ? -v[c & 7] : v[c & 7];
}

static fg_ds4_prune_tables tables;
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_build(void)
{
    for (unsigned c = 0; c < 16; c++) {
        tables.lo[c] = (int32_t)(uint16_t)(int16_t)twice_e2m1(c);
        tables.hi[c] = (int32_t)((uint32_t)twice_e2m1(c) << 16);
    }
    for (int v = 0; v < 256; v++)
        tables.e4m3[v] = fg_e4m3_to_f32((uint8_t)v);
}

void fg_ds4_prune_pack(const uint8_t *const *keys, int n, int Di, int32_t *pk, float *ps, float *k1)
{
    pthread_once(&tables_once, tables_build);
    if (fg_isa_best() == FG_ISA_AVX512) {
        fg_ds4_prune_pack_avx512(keys, n, Di, pk, ps, k1, &tables);
        return;
    }
    const int G = Di / 2, NB = Di / 16, T = FG_DS4_PRUNE_TILE;
    for (int j = 0; j < T; j++) {
        const uint8_t *codes = j < n ? keys[j] : NULL;
        float sum = 0;
        for (int b = 0; b < NB; b++) {
            const float sc = codes ? tables.e4m3[codes[G + b]] : 0;
            int32_t bs = 0;
            for (int g = 8 * b; g < 8 * b + 8; g++) {
                const unsigned x = codes ? codes[g] : 0;
                pk[(size_t)g * T + j] = tables.lo[x & 15] | tables.hi[x >> 4];
                bs += abs(twice_e2m1(x & 15)) + abs(twice_e2m1(x >> 4));
            }
            ps[(size_t)b * T + j] = sc;
            const float t = (float)bs * sc; /* exact: a 4-bit scale times an integer under 2^8 */
            sum = sum + t;
        }
        k1[j] = sum * (0.5f * FG_DS4_PRUNE_K1_UP); /* the pairs hold 2 x the values */
    }
}

void fg_ds4_prune_scores(const int32_t *qp, const float *alpha, const float *w, int Hi, int Di, const int32_t *pk,
                         const float *ps, int n, float *pre)
{
    if (fg_isa_best() == FG_ISA_AVX512) {
        fg_ds4_prune_scores_avx512(qp, alpha, w, Hi, Di, pk, ps, n, pre);
        return;
    }
    const int G = Di / 2, NB = Di / 16;
    for (int j = 0; j < n; j++) {
        float s = 0;
        for (int h = 0; h < Hi; h++) {
            const int32_t *qh = qp + (size_t)h * G;
            float acc = 0;
            for (int b = 0; b < NB; b++) {
                int32_t d = 0;
                for (int g = 8 * b; g < 8 * b + 8; g++) {
                    const int32_t x = qh[g], y = pk[(size_t)g * FG_DS4_PRUNE_TILE + j];
                    d += (int32_t)(int16_t)x * (int16_t)y + (x >> 16) * (y >> 16);
                }
                acc = fmaf((float)d, ps[(size_t)b * FG_DS4_PRUNE_TILE + j], acc);
            }
            const float p = acc * alpha[h];
            if (p > 0)
                s = fmaf(w[h], p, s);
        }
        pre[j] = s;
    }
}

int fg_ds4_prune_mark(const float *pre, const float *k1, const float *ab, int n, int k, uint64_t *mask, float *lo,
                      float *tmp)
{
    if (fg_isa_best() == FG_ISA_AVX512)
        return fg_ds4_prune_mark_avx512(pre, k1, ab, n, k, mask, lo, tmp);
    for (int r = 0; r < n; r++) {
        const float b = ab[0] * k1[r];
        lo[r] = pre[r] - (b + ab[1]);
    }
    const float floor = fg_ds4_kth(lo, n, k, tmp);
    int m = 0;
    memset(mask, 0, sizeof(uint64_t) * (size_t)((n + 63) / 64));
    for (int r = 0; r < n; r++) {
        const float b = ab[0] * k1[r];
        const bool keep = !(pre[r] + (b + ab[1]) < floor); /* a NaN is kept */
        mask[r / 64] |= (uint64_t)keep << (r % 64);
        m += keep;
    }
    return m;
}

void fg_ds4_index_score_rows(const float *qt, const float *w, int Hi, int Di, const float *keys, const int *idx, int m,
                             float *dots, float *out)
{
    if (fg_isa_best() == FG_ISA_AVX512) {
        fg_ds4_index_score_rows_avx512(qt, w, Hi, Di, keys, idx, m, dots, out);
        return;
    }
    for (int c = 0; c < m; c++) {
        const float *k = keys + (size_t)idx[c] * Di;
        double s = 0; /* as fg_ds4_index_score */
        for (int h = 0; h < Hi; h++) {
            float d = 0;
            for (int i = 0; i < Di; i++)
                d += qt[(size_t)i * Hi + h] * k[i];
            if (d > 0)
                s += (double)d * w[h];
        }
        out[c] = (float)s;
    }
}
