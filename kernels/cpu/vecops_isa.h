/* vecops_isa.h: internal to vecops*.c. The ISA-specific versions of the
 * vecops.h operations that have one; vecops.c dispatches to them.
 */
#ifndef FG_VECOPS_ISA_H
#define FG_VECOPS_ISA_H

/* fg_silu_mul with an AVX-512 exp (vecops_avx512.c: the error bound there). */
void fg_silu_mul_avx512(float *gate, const float *up, int n);
/* fg_axpy, bit for bit. */
void fg_axpy_avx512(float *y, float a, const float *x, int n);
/* fg_rmsnorm with the sum of squares in two 8-lane partial sums (double). */
void fg_rmsnorm_avx512(float *y, const float *x, const float *w, int n, float eps);

#endif
