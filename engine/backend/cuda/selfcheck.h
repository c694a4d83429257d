/* selfcheck.h: the per-op part of the GPU self-check (flashgate-gpucheck):
 * every CUDA op of kernels/cuda/ against the CPU reference of the same
 * semantics, on random data shaped like DeepSeek-V3 layers (and the edges
 * of each kernel's tiling), in every weight type and KV format each op takes.
 *
 * Each comparison reports the normalised mean squared error
 *   nmse = sum (gpu - ref)^2 / sum ref^2
 * against a per-op tolerance; a NaN or Inf in the GPU output where the
 * reference is finite fails apart from the error, and every output buffer
 * has guard bytes on both sides that must come back untouched. Ops defined
 * bit for bit (KV row writes, embedding rows, greedy sampling) must match
 * exactly. Only in CUDA builds; needs a GPU this build has kernels for.
 */
#ifndef FG_CUDA_SELFCHECK_H
#define FG_CUDA_SELFCHECK_H

#include <stdio.h>

/* Runs every op check on the current device; one line per case to out (and
 * stdout). Returns the number of failed cases (0: all passed). */
int fg_cuda_selfcheck_ops(FILE *out, int sm);

#endif
