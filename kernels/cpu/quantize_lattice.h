/* quantize_lattice.h: the lattice IQ types' block quantizers and the tables
 * they search, internal to kernels/cpu/quantize.c (quantize.h is the public
 * interface). Each block function writes one 256-value super-block as ggml's
 * quantize_row_*_impl does, with importance weights qw (NULL: x^2). Call
 * fg_quant_lattice_ready first.
 *
 * A lattice type stores each group of dim values as the index of one entry of
 * a fixed grid (iq_grids.h) and the signs apart. Its quantizer codes a group
 * on the uniform grid of levels 2l + 1, then looks the codes up in a map from
 * every code combination to its grid entry; a combination off the grid has a
 * list of neighbours instead (the grid entries at the nwant smallest squared
 * distances, in (distance, index) order, as ggml's qsort leaves them; an
 * empty list for a combination with a code past the grid's levels, which the
 * quantizers never form).
 *
 * Thread safety: the tables are built once per lattice (pthread_once) and only
 * read after that, so the block functions are pure. */
#ifndef FG_QUANTIZE_LATTICE_H
#define FG_QUANTIZE_LATTICE_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/cpu/matmul.h"

#define FG_LATTICE_MAX_SIZE 2048
#define FG_LATTICE_MAX_DIM 8

typedef struct fg_lattice {
    int size;     /* grid entries */
    int dim;      /* values per entry */
    int bits;     /* bits of one level code in a map index */
    int nwant;    /* distinct distances in a neighbour list */
    int map_size; /* codes mapped: every index the quantizer can form */
    int8_t pos[FG_LATTICE_MAX_SIZE][FG_LATTICE_MAX_DIM]; /* entry k's values 2l + 1 */
    int32_t *map;         /* code -> entry, or -(offset + 1): neighbours[offset] is the list's length */
    uint16_t *neighbours; /* the lists, each its length then its entries */
    bool ok;              /* built (false only when out of memory) */
} fg_lattice;

/* 0 when wtype is a lattice type whose tables could not be built (out of
 * memory), else 1, after building them if this is their first use. */
int fg_quant_lattice_ready(int wtype);

/* wtype's lattice (built), or NULL for another type. */
const fg_lattice *fg_lattice_of(int wtype);

/* The list of code u's neighbours (u off the grid): its length, then entries. */
static inline const uint16_t *fg_lattice_neighbours(const fg_lattice *g, int u)
{
    return g->neighbours - g->map[u] - 1;
}

/* The neighbour of code u (off the grid) with the least weighted squared
 * error at scale (ggml's iq*_find_best_neighbour); its codes to L, its entry
 * returned. */
int fg_lattice_nearest(const fg_lattice *g, int u, const float *xval, const float *w, float scale, int8_t *L);

void fg_quant_iq3_xxs_block(const float *x, uint8_t *b, const float *qw, float row_sigma2);
void fg_quant_iq3_s_block(const float *x, uint8_t *b, const float *qw, float row_sigma2);
/* IQ2_XXS and IQ2_XS need qw (ggml's quantizers assert it; without, b is
 * zeroed and fg_wtype_quantize_row_imatrix refuses first); IQ2_S takes NULL. */
void fg_quant_iq2_xxs_block(const float *x, uint8_t *b, const float *qw, float row_sigma2);
void fg_quant_iq2_xs_block(const float *x, uint8_t *b, const float *qw, float row_sigma2);
void fg_quant_iq2_s_block(const float *x, uint8_t *b, const float *qw, float row_sigma2);

#endif
