/* quantize_lattice.c: the tables the lattice IQ quantizers search (the map
 * from code combinations to grid entries and the neighbour lists, as ggml's
 * iq3_init_impl and iq2_init_impl build them) and their nearest-neighbour
 * search. The tables are built from iq_grids.h at first use, once per lattice
 * (pthread_once), and live for the process: this file owns them.
 */
#include "kernels/cpu/quantize_lattice.h"

#include <float.h>
#include <pthread.h>
#include <stdlib.h>

#include "kernels/cpu/iq_grids.h"

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

/* Entry k of grid: value i in byte i (u32 entries for dim 4, u64 for dim 8). */
static uint64_t grid_entry(const fg_lattice *g, const void *grid, int k)
{
    return g->dim == 4 ? ((const uint32_t *)grid)[k] : ((const uint64_t *)grid)[k];
}

/* Builds g from grid whose values are levels[l] for code l. */
static void lattice_build(fg_lattice *g, const void *grid, const uint8_t *levels, int nlevels)
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
        const uint64_t e = grid_entry(g, grid, k);
        int index = 0;
        for (int i = 0; i < g->dim; i++) {
            int l = level_of(levels, nlevels, (int)(e >> 8 * i & 255));
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
        const size_t start = len;
        if (!push_u16(&nb, &len, &cap, 0))
            goto fail;
        g->map[i] = -(int32_t)start - 1;
        bool formed = true; /* the quantizers clamp codes to the grid's levels: others keep an empty list */
        for (int k = 0; k < g->dim; k++)
            formed &= (i >> g->bits * k & mask) < nlevels;
        if (!formed)
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
    }
    free(d2);
    g->neighbours = nb;
    g->ok = true;
    return;
fail:
    free(nb);
    free(d2);
}

static fg_lattice iq3xxs_lattice = {.size = 256, .dim = 4, .bits = 3, .nwant = 2, .map_size = 4096};
static fg_lattice iq3s_lattice = {.size = 512, .dim = 4, .bits = 3, .nwant = 3, .map_size = 4096};
static fg_lattice iq2xxs_lattice = {.size = 256, .dim = 8, .bits = 2, .nwant = 2, .map_size = 43692};
static fg_lattice iq2xs_lattice = {.size = 512, .dim = 8, .bits = 2, .nwant = 2, .map_size = 43692};
static fg_lattice iq2s_lattice = {.size = 1024, .dim = 8, .bits = 2, .nwant = 1, .map_size = 43692};
static pthread_once_t iq3xxs_once = PTHREAD_ONCE_INIT, iq3s_once = PTHREAD_ONCE_INIT;
static pthread_once_t iq2xxs_once = PTHREAD_ONCE_INIT, iq2xs_once = PTHREAD_ONCE_INIT, iq2s_once = PTHREAD_ONCE_INIT;
static const uint8_t iq2_levels[3] = {8, 25, 43};

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

static void iq2xxs_build(void) { lattice_build(&iq2xxs_lattice, fg_iq2xxs_grid, iq2_levels, 3); }
static void iq2xs_build(void) { lattice_build(&iq2xs_lattice, fg_iq2xs_grid, iq2_levels, 3); }
static void iq2s_build(void) { lattice_build(&iq2s_lattice, fg_iq2s_grid, iq2_levels, 3); }

const fg_lattice *fg_lattice_of(int wtype)
{
    switch (wtype) {
    case FG_WTYPE_IQ3_XXS: pthread_once(&iq3xxs_once, iq3xxs_build); return &iq3xxs_lattice;
    case FG_WTYPE_IQ3_S: pthread_once(&iq3s_once, iq3s_build); return &iq3s_lattice;
    case FG_WTYPE_IQ2_XXS: pthread_once(&iq2xxs_once, iq2xxs_build); return &iq2xxs_lattice;
    case FG_WTYPE_IQ2_XS: pthread_once(&iq2xs_once, iq2xs_build); return &iq2xs_lattice;
    case FG_WTYPE_IQ2_S: pthread_once(&iq2s_once, iq2s_build); return &iq2s_lattice;
    default: return NULL;
    }
}

int fg_quant_lattice_ready(int wtype)
{
    const fg_lattice *g = fg_lattice_of(wtype);
    return !g || g->ok;
}

int fg_lattice_nearest(const fg_lattice *g, int u, const float *xval, const float *w, float scale, int8_t *L)
{
    const uint16_t *nb = fg_lattice_neighbours(g, u);
    float best = FLT_MAX;
    int k = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const int8_t *pg = g->pos[nb[j]];
        float d2 = 0;
        for (int i = 0; i < g->dim; i++) {
            float diff = scale * pg[i] - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            k = nb[j];
        }
    }
    for (int i = 0; i < g->dim; i++)
        L[i] = (int8_t)((g->pos[k][i] - 1) / 2);
    return k;
}
