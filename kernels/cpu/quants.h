/* quants.h: the block-quantized weight types beyond Q8_0 (numeric.h has
 * Q8_0 and MXFP4): their block layouts, their reference dequantization, the
 * check a loader runs over a tensor's blocks, and the decoded form the
 * products of matmul.h compute with.
 *
 * Layouts are ggml's (ggml-common.h), byte for byte; the code is written from
 * the definitions. Pure functions; safe from any thread.
 */
#ifndef FG_QUANTS_H
#define FG_QUANTS_H

#include <stdint.h>

/* Checks a matrix [n_rows][n_in] of a weight type (matmul.h's ids) for blocks
 * that do not stand for finite numbers: an F16 scale or minimum that is an
 * infinity or NaN (ggml's quantizers never write one), MXFP4 as
 * fg_mxfp4_validate_rows. Types without scales (F32, F16, BF16) always pass.
 * Returns 0 if every block is valid; -1 otherwise, with *bad_row and
 * *bad_block (either may be NULL) the first bad block's row and block index
 * in its row, or both -1 if the shape is invalid (n_in not a positive multiple
 * of the type's block, n_rows < 0, w NULL with rows to check, an unknown type). */
/* n values (a whole number of blocks) of one row of a weight type, as the
 * type defines them (numeric.h for F16, BF16, Q8_0, MXFP4; the definitions
 * below for the others). Returns 0, or -1 for an unknown type or a length
 * that is not a positive multiple of the type's block. */
int fg_wtype_dequantize_row(int wtype, const void *row, float *y, int64_t n);

int fg_wtype_validate_rows(int wtype, const void *w, int64_t n_in, int64_t n_rows, int64_t *bad_row,
                           int64_t *bad_block);

#endif
