/* quantize.h: the quantizers, from F32 values to the block types of quants.h
 * and numeric.h, writing the bytes ggml's quantizers write (llama-quantize
 * without an importance matrix; with one, fg_wtype_quantize_row_imatrix
 * below): quantize_row_*_ref in ggml-quants.c for Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and MXFP4, and
 * quantize_iq4_nl / quantize_iq4_xs without weights for IQ4_NL and IQ4_XS
 * (the scale search with 7 tries on each side that llama-quantize runs; the
 * IQ4_NL row function of recent ggml skips that search), and the lattice types
 * IQ3_XXS and IQ3_S (quantize_row_iq3_xxs_impl / quantize_row_iq3_s_impl,
 * quantize_iq3.c), IQ2_XXS, IQ2_XS and IQ2_S (quantize_row_iq2_*_impl,
 * quantize_iq2.c; their tables are built at the first call). F16 and BF16 round to
 * nearest even as ggml's conversions do; F32 is copied.
 *
 * Byte identity rests on doing every float operation in ggml's order, in
 * single precision, without contraction into fused multiply-adds (this file
 * is compiled with -ffp-contract=off) and with ggml's rounding
 * (nearest_int: the 1.5 * 2^23 trick, ties to even; truncation where ggml
 * truncates; roundf for Q8_0).
 *
 * Thread safety: pure functions.
 */
#ifndef FG_QUANTIZE_H
#define FG_QUANTIZE_H

#include <stdint.h>

/* 1 if fg_wtype_quantize_row writes wtype (matmul.h's ids, ggml's), else 0. */
int fg_wtype_quantizes(int wtype);

/* Quantizes n values (a positive multiple of the type's block; any n >= 1 for
 * F32, F16, BF16) to wtype, writing fg_ggml_row_bytes(wtype, n) bytes to y.
 * Returns 0, or -1 for a type it does not write, a bad n, or x holding a NaN
 * or an infinity (ggml's rounding is undefined there; nothing is written). */
int fg_wtype_quantize_row(int wtype, const float *x, void *y, int64_t n);

/* 1 if wtype is written only with importance weights (ggml's
 * ggml_quantize_requires_imatrix: IQ2_XXS, IQ2_XS), else 0. */
int fg_wtype_requires_imatrix(int wtype);

/* fg_wtype_quantize_row with an importance matrix: qw holds n weights, one
 * per column of the row (llama-imatrix's mean squared activations), and the
 * types with an importance-weighted search (Q2_K .. Q6_K, Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_*) write what ggml_quantize_chunk
 * writes with that imatrix (the quantize_row_*_impl paths); the others ignore
 * it. qw NULL is fg_wtype_quantize_row, which returns -1 for the
 * fg_wtype_requires_imatrix types. Returns -1 also for a weight that is
 * negative, NaN or infinite. */
int fg_wtype_quantize_row_imatrix(int wtype, const float *x, void *y, int64_t n, const float *qw);

#endif
