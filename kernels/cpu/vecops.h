/* vecops.h: small per-row vector operations of the forward pass.
 * Pure functions on f32 rows; safe from any thread. Scalar C: they are a tiny
 * share of a step's time next to the matrix products.
 */
#ifndef FG_VECOPS_H
#define FG_VECOPS_H

#include <stdint.h>

/* y = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no gain). y may alias x. */
void fg_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* In-place softmax over n values (max-subtracted, f64-free). */
void fg_softmax(float *x, int n);

/* gate[i] = silu(gate[i]) * up[i]   (SwiGLU's elementwise part) */
void fg_silu_mul(float *gate, const float *up, int n);

/* y[i] += a * x[i] */
void fg_axpy(float *y, float a, const float *x, int n);

/* Index of the largest value (first on ties); -1 if n <= 0. NaN never wins. */
int fg_argmax(const float *x, int n);

#endif
