/* quantize_lattice.c: the quantizers of ggml's lattice IQ types, writing the
 * bytes of ggml-quants.c's quantize_row_iq3_xxs_impl and quantize_row_iq3_s_impl
 * (with and without importance weights), and the lattice tables they search.
 *
 * A lattice type stores each group of 4 (IQ3) values as the index of one
 * entry of a fixed grid (iq_grids.h) and the signs apart. Its quantizer codes
 * each group on the uniform grid of levels 2l + 1 (l = 0 .. 7 for IQ3), then
 * looks the codes up in a map from every code combination to its grid entry;
 * a combination off the grid has a list of neighbours instead (the grid
 * entries at the nwant smallest squared distances, in (distance, index)
 * order, as ggml's qsort leaves them), and the neighbour with the least
 * weighted error at the scale being tried is taken. The scale is searched
 * over 2*kMaxQ - 1 + 0.2 is (is = -15..15 for IQ3_XXS, -9..9 for IQ3_S) by the
 * weighted least-squares fit, groups that left the grid re-coded at the best
 * scale, and the sub-block scales quantized against one F16 scale with
 * ggml's fudge factor.
 *
 * The tables are built from iq_grids.h at first use, once per lattice
 * (pthread_once), and live for the process: this file owns them; after the
 * build they are only read, so the quantizers are safe to call from any
 * thread. ggml aborts where a search finds nothing (only with infinite or NaN
 * intermediates from values near FLT_MAX); here the first neighbour is taken.
 */
#include "kernels/cpu/quantize_lattice.h"

#include <float.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/cpu/iq_grids.h"
#include "kernels/cpu/quantize_block.h"

#define QK 256
#define LATTICE_MAX_SIZE 512
#define LATTICE_MAX_DIM 4

typedef struct lattice {
    int size;     /* grid entries */
    int dim;      /* values per entry */
    int bits;     /* bits of one level code in a map index */
    int nwant;    /* distinct distances in a neighbour list */
    int map_size; /* codes mapped: every index the quantizer can form */
    int8_t pos[LATTICE_MAX_SIZE][LATTICE_MAX_DIM]; /* entry k's values 2l + 1 */
    int32_t *map;         /* code -> entry, or -(offset + 1): neighbours[offset] is the list's length */
    uint16_t *neighbours; /* the lists, each its length then its entries */
    bool ok;              /* built (false only when out of memory) */
} lattice;

/* The level l (0..nlevels-1) of value v in levels, -1 if none. */
static int level_of(const uint8_t *levels, int nlevels, int v)
{
    for (int l = 0; l < nlevels; l++)
        if (levels[l] == v)
            return l;
    return -1;
}

/* Appends v to the growing list *buf (its capacity *cap); false when out of memory. */
static bool push_u16(uint16_t **buf, size_t *len, size_t *cap, int v)
{
    if (*len == *cap) {
        size_t ncap = *cap ? *cap * 2 : 4096;
        uint16_t *nb = realloc(*buf, ncap * sizeof *nb);
        if (!nb)
            return false;
        *buf = nb;
        *cap = ncap;
    }
    (*buf)[(*len)++] = (uint16_t)v;
    return true;
}

/* Builds g from grid (entry k's value i in byte i of grid[k]) whose values
 * are levels[l] for code l. */
static void lattice_build(lattice *g, const uint32_t *grid, const uint8_t *levels, int nlevels)
{
    const int mask = (1 << g->bits) - 1;
    g->map = malloc((size_t)g->map_size * sizeof *g->map);
    int *d2 = malloc((size_t)g->size * sizeof *d2);
    if (!g->map || !d2) {
        free(d2);
        return;
    }
    for (int i = 0; i < g->map_size; i++)
        g->map[i] = -1;
    for (int k = 0; k < g->size; k++) {
        int index = 0;
        for (int i = 0; i < g->dim; i++) {
            int l = level_of(levels, nlevels, (int)(grid[k] >> 8 * i & 255));
            g->pos[k][i] = (int8_t)(2 * l + 1);
            index |= l << g->bits * i;
        }
        g->map[index] = k;
    }
    uint16_t *nb = NULL;
    size_t len = 0, cap = 0;
    for (int i = 0; i < g->map_size; i++) {
        if (g->map[i] >= 0)
            continue;
        int dmin = 1 << 30;
        for (int j = 0; j < g->size; j++) {
            int d = 0;
            for (int k = 0; k < g->dim; k++) {
                int diff = g->pos[j][k] - (2 * (i >> g->bits * k & mask) + 1);
                d += diff * diff;
            }
            d2[j] = d;
            dmin = d < dmin ? d : dmin;
        }
        const size_t start = len;
        if (!push_u16(&nb, &len, &cap, 0))
            goto fail;
        /* the entries at the nwant smallest distances, nearest first, ties by index */
        for (int have = 0, dist = dmin; have < g->nwant; have++) {
            int next = 1 << 30;
            for (int j = 0; j < g->size; j++) {
                if (d2[j] == dist && !push_u16(&nb, &len, &cap, j))
                    goto fail;
                if (d2[j] > dist && d2[j] < next)
                    next = d2[j];
            }
            if (next == 1 << 30)
                break;
            dist = next;
        }
        nb[start] = (uint16_t)(len - start - 1);
        g->map[i] = -(int32_t)start - 1;
    }
    free(d2);
    g->neighbours = nb;
    g->ok = true;
    return;
fail:
    free(nb);
    free(d2);
}

static lattice iq3xxs_lattice = {.size = 256, .dim = 4, .bits = 3, .nwant = 2, .map_size = 4096};
static lattice iq3s_lattice = {.size = 512, .dim = 4, .bits = 3, .nwant = 3, .map_size = 4096};
static pthread_once_t iq3xxs_once = PTHREAD_ONCE_INIT, iq3s_once = PTHREAD_ONCE_INIT;

static void iq3xxs_build(void)
{
    static const uint8_t levels[8] = {4, 12, 20, 28, 36, 44, 52, 62};
    lattice_build(&iq3xxs_lattice, fg_iq3xxs_grid, levels, 8);
}

static void iq3s_build(void)
{
    static const uint8_t levels[8] = {1, 3, 5, 7, 9, 11, 13, 15};
    lattice_build(&iq3s_lattice, fg_iq3s_grid, levels, 8);
}

int fg_quant_lattice_ready(int wtype)
{
    switch (wtype) {
    case FG_WTYPE_IQ3_XXS:
        pthread_once(&iq3xxs_once, iq3xxs_build);
        return iq3xxs_lattice.ok;
    case FG_WTYPE_IQ3_S:
        pthread_once(&iq3s_once, iq3s_build);
        return iq3s_lattice.ok;
    default: return 0;
    }
}

/* ---- IQ3 ---- */

/* The neighbour of code u (off the grid) with the least weighted squared
 * error at scale; its codes to L, its entry returned. */
static int iq3_neighbour(const lattice *g, int u, const float *xval, const float *w, float scale, int8_t *L)
{
    const uint16_t *nb = g->neighbours - g->map[u] - 1;
    float best = FLT_MAX;
    int k = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const int8_t *pg = g->pos[nb[j]];
        float d2 = 0;
        for (int i = 0; i < 4; i++) {
            float diff = scale * pg[i] - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            k = nb[j];
        }
    }
    for (int i = 0; i < 4; i++)
        L[i] = (int8_t)((g->pos[k][i] - 1) / 2);
    return k;
}

/* Group k's codes of xval at inverse scale id, clamped to 0..7, into L; the
 * map index of them returned. */
static int iq3_codes(const float *xval, float id, int8_t *L)
{
    int u = 0;
    for (int i = 0; i < 4; i++) {
        int l = nearest_int(0.5f * (id * xval[i] - 1));
        l = l < 0 ? 0 : l > 7 ? 7 : l;
        L[i] = (int8_t)l;
        u |= l << 3 * i;
    }
    return u;
}

static void iq3_fit(const float *xval, const float *w, const int8_t *L, float *sumqx, float *sumq2)
{
    float sx = 0, s2 = 0;
    for (int i = 0; i < 32; i++) {
        float q = 2 * L[i] + 1;
        sx += w[i] * xval[i] * q;
        s2 += w[i] * q * q;
    }
    *sumqx = sx;
    *sumq2 = s2;
}

/* One sub-block of 32 magnitudes xval (largest max > 0; weights w, their
 * roots waux) on lattice g: codes in L (on the grid), the scale returned (>= 0 unless the
 * fit went negative: the caller flips the signs). xxs: IQ3_XXS's search (31
 * scales, groups on the grid left alone when re-coding), else IQ3_S's. */
static float iq3_sub(const lattice *g, const float *xval, float max, const float *w, const float *waux, int8_t *L,
                     bool xxs)
{
    int8_t Laux[32];
    bool on_grid[8], on_grid_aux[8];
    const int ntry = xxs ? 15 : 9;
    memset(L, 0, 32); /* kept when no scale fits (all weights 0): code 0 is on both grids */
    float best = 0, scale = max / 15;
    for (int k = 0; k < 8; k++)
        on_grid[k] = xxs;
    for (int is = -ntry; is <= ntry; is++) {
        const float id = (15 + is * 0.2f) / max;
        const float this_scale = 1 / id;
        for (int k = 0; k < 8; k++) {
            int u = iq3_codes(xval + 4 * k, id, Laux + 4 * k);
            on_grid_aux[k] = g->map[u] >= 0;
            if (!on_grid_aux[k])
                iq3_neighbour(g, u, xval + 4 * k, waux + 4 * k, this_scale, Laux + 4 * k);
        }
        float sumqx, sumq2;
        iq3_fit(xval, w, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, 32);
            memcpy(on_grid, on_grid_aux, sizeof on_grid);
        }
    }
    int off_grid = 0;
    for (int k = 0; k < 8; k++)
        off_grid += !on_grid[k];
    if (off_grid > 0 && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < 8; k++) {
            if (xxs && on_grid[k])
                continue;
            int8_t l4[4];
            int u = iq3_codes(xval + 4 * k, id, l4);
            int e = g->map[u] >= 0 ? g->map[u] : iq3_neighbour(g, u, xval + 4 * k, waux + 4 * k, scale, l4);
            for (int i = 0; i < 4; i++)
                L[4 * k + i] = (int8_t)((g->pos[e][i] - 1) / 2);
        }
        float sumqx, sumq2;
        iq3_fit(xval, w, L, &sumqx, &sumq2);
        if (sumq2 > 0)
            scale = sumqx / sumq2;
    }
    return scale;
}

static float max32(const float *v)
{
    float max = v[0];
    for (int i = 1; i < 32; i++)
        max = max > v[i] ? max : v[i];
    return max;
}

/* The grid entry of group k's codes (on the grid by construction). */
static int iq3_entry(const lattice *g, const int8_t *L)
{
    int u = 0;
    for (int i = 0; i < 4; i++)
        u |= L[i] << 3 * i;
    return g->map[u] >= 0 ? g->map[u] : 0;
}

/* The sub-block weights: importance times sqrt(sigma2 + x^2), or x^2. */
static void iq3_weights(const float *xb, const float *qw, float sigma2, float *w, float *waux)
{
    if (qw)
        imatrix_weights(xb, qw, sigma2, 32, w);
    else
        for (int i = 0; i < 32; i++)
            w[i] = xb[i] * xb[i];
    for (int i = 0; i < 32; i++)
        waux[i] = sqrtf(w[i]);
}

/* IQ3_XXS: d, qs[64] grid entries, 8 u32 of four 7-bit sign codes (the
 * eighth sign from parity: an odd count flips the least important value) and
 * a 4-bit scale. */
void fg_quant_iq3_xxs_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    (void)row_sigma2;
    const lattice *g = &iq3xxs_lattice;
    float scales[8], w[32], waux[32], xval[32];
    int8_t L[32];
    uint32_t ss[8] = {0};
    memset(b, 0, 98);
    float max_scale = 0;
    const float sigma2 = 2 * sum_squares(x, QK) / QK;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        iq3_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, w, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++) {
            int nflip = 0;
            uint8_t s = 0;
            for (int i = 0; i < 8; i++) {
                xval[8 * k + i] = xb[8 * k + i] >= 0 ? xb[8 * k + i] : -xb[8 * k + i];
                if (xb[8 * k + i] < 0) {
                    nflip++;
                    s |= (uint8_t)(1 << i);
                }
            }
            if (nflip % 2) {
                int imin = 0;
                float min = w[8 * k] * xb[8 * k] * xb[8 * k];
                for (int i = 1; i < 8; i++) {
                    float ax = w[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                    if (ax < min) {
                        min = ax;
                        imin = i;
                    }
                }
                xval[8 * k + imin] = -xval[8 * k + imin];
                s ^= (uint8_t)(1 << imin);
            }
            signs[k] = s & 127;
        }
        const float max = max32(xval);
        if (max < 1e-8f) {
            scales[ib] = 0;
            continue;
        }
        float scale = iq3_sub(g, xval, max, w, waux, L, true);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++)
                signs[k] = (uint8_t)~signs[k] & 127;
        }
        for (int k = 0; k < 8; k++)
            b[2 + 8 * ib + k] = (uint8_t)iq3_entry(g, L + 4 * k);
        ss[ib] = signs[0] | (uint32_t)signs[1] << 7 | (uint32_t)signs[2] << 14 | (uint32_t)signs[3] << 21;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        memset(b, 0, 98);
        return;
    }
    const float d = max_scale / 31;
    put_f16(b, d * 1.0125f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) {
        int l = nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 15 ? 15 : l;
        uint32_t v = ss[ib] | (uint32_t)l << 28;
        for (int k = 0; k < 4; k++)
            b[66 + 4 * ib + k] = (uint8_t)(v >> 8 * k);
    }
}

/* IQ3_S: d, qs[64] low bytes of the 9-bit entries, qh[8] their ninth bits,
 * signs[32] (8 per group of 8, no parity), scales[4] two 4-bit codes each. */
void fg_quant_iq3_s_block(const float *x, uint8_t *b, const float *qw, float row_sigma2)
{
    (void)row_sigma2;
    const lattice *g = &iq3s_lattice;
    float scales[8], w[32], waux[32], xval[32];
    int8_t L[32];
    uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *sc = b + 106;
    int kept = 0; /* sub-blocks written to qs and signs */
    memset(b, 0, 110);
    float max_scale = 0;
    const float sigma2 = 2 * sum_squares(x, QK) / QK;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        iq3_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, w, waux);
        uint8_t s4[4];
        for (int k = 0; k < 4; k++) {
            uint8_t s = 0;
            for (int i = 0; i < 8; i++) {
                xval[8 * k + i] = xb[8 * k + i] >= 0 ? xb[8 * k + i] : -xb[8 * k + i];
                if (xb[8 * k + i] < 0)
                    s |= (uint8_t)(1 << i);
            }
            s4[k] = s;
        }
        const float max = max32(xval);
        if (!max) {
            /* ggml skips it without advancing its qs and signs cursors: the
             * next sub-block's entries and signs take this one's place */
            scales[ib] = 0;
            continue;
        }
        float scale = iq3_sub(g, xval, max, w, waux, L, false);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++)
                s4[k] = (uint8_t)~s4[k];
        }
        for (int k = 0; k < 8; k++) {
            int e = iq3_entry(g, L + 4 * k);
            qs[8 * kept + k] = (uint8_t)(e & 255);
            qh[ib] = (uint8_t)(qh[ib] | (e >> 8) << k);
        }
        memcpy(signs + 4 * kept, s4, 4);
        kept++;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale)
        return;
    const float d = max_scale / 31;
    put_f16(b, d * 1.033f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2) {
        int l1 = nearest_int(0.5f * (id * scales[ib] - 1));
        int l2 = nearest_int(0.5f * (id * scales[ib + 1] - 1));
        l1 = l1 < 0 ? 0 : l1 > 15 ? 15 : l1;
        l2 = l2 < 0 ? 0 : l2 > 15 ? 15 : l2;
        sc[ib / 2] = (uint8_t)(l1 | l2 << 4);
    }
}
