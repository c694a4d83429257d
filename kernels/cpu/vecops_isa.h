/* vecops_isa.h: internal to vecops*.c. The ISA-specific versions of the
 * vecops.h operations that have one; vecops.c dispatches to them.
 */
#ifndef FG_VECOPS_ISA_H
#define FG_VECOPS_ISA_H

/* fg_silu_mul with an AVX-512 exp (vecops_avx512.c: the error bound there). */
void fg_silu_mul_avx512(float *gate, const float *up, int n);

#endif
