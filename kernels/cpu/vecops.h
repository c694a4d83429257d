/* vecops.h: small per-row vector operations of the forward pass.
 * Pure functions on f32 rows; safe from any thread. Scalar C, with AVX-512
 * versions (vecops_avx512.c) of the ones that were 2-3 % each of a 64-session
 * step: SiLU (its expf), RMSNorm (a serial double sum) and axpy.
 */
#ifndef FG_VECOPS_H
#define FG_VECOPS_H

#include <stdint.h>

#include "kernels/cpu/matmul.h" /* fg_isa */

/* y = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no gain). y may alias x.
 * The scalar reference. */
void fg_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* The same on the given ISA (FG_ISA_AUTO: the best here). AVX-512 sums the
 * squares (in double) in another order: within 1e-6 relative of fg_rmsnorm,
 * nearly always the same bits; deterministic for a given row. */
void fg_rmsnorm_isa(fg_isa isa, float *y, const float *x, const float *w, int n, float eps);

/* In-place softmax over n values (max-subtracted, f64-free). */
void fg_softmax(float *x, int n);

/* gate[i] = silu(gate[i]) * up[i]   (SwiGLU's elementwise part); the scalar
 * reference, with expf. */
void fg_silu_mul(float *gate, const float *up, int n);

/* The same on the given ISA (FG_ISA_AUTO: the best here). AVX-512 computes
 * exp with its own polynomial: within 1e-6 relative of fg_silu_mul (NaN and
 * infinities where it has them); the other ISAs run fg_silu_mul. Deterministic:
 * a value's result never depends on n or its position. */
void fg_silu_mul_isa(fg_isa isa, float *gate, const float *up, int n);

/* y[i] += a * x[i], the same bits on every ISA (AVX-512 where the CPU has it). */
void fg_axpy(float *y, float a, const float *x, int n);

/* Index of the largest value (first on ties); -1 if n <= 0. NaN never wins. */
int fg_argmax(const float *x, int n);

#endif
