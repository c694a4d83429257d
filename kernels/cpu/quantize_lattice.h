/* quantize_lattice.h: the lattice IQ types' block quantizers, internal to
 * kernels/cpu/quantize.c (quantize.h is the public interface): each writes one
 * 256-value super-block as ggml's quantize_row_*_impl does, with importance
 * weights qw (NULL: x^2). Call fg_quant_lattice_ready first.
 *
 * Thread safety: fg_quant_lattice_ready builds its tables once (pthread_once);
 * after it returned 1 the block functions are pure. */
#ifndef FG_QUANTIZE_LATTICE_H
#define FG_QUANTIZE_LATTICE_H

#include <stdint.h>

#include "kernels/cpu/matmul.h"

/* 1 when wtype is a lattice type written here and its tables are built
 * (building them now if not), 0 for another type or when out of memory. */
int fg_quant_lattice_ready(int wtype);

void fg_quant_iq3_xxs_block(const float *x, uint8_t *b, const float *qw, float row_sigma2);
void fg_quant_iq3_s_block(const float *x, uint8_t *b, const float *qw, float row_sigma2);

#endif
