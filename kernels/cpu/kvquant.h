/* kvquant.h: the storage formats of the latent KV cache, and row (de)quantization.
 *
 * A cache row segment of n channels is stored as:
 *   F32  : n x f32                                    4n bytes
 *   F16  : n x f16                                    2n bytes
 *   INT8 : f32 scale, then n x int8; x = scale * q     n + 4 bytes  (scale = amax/127)
 *   FP8  : f32 scale, then n x E4M3; x = scale * e     n + 4 bytes  (scale = amax/448)
 *   FP4  : n/2 bytes of E2M1 codes (element 2j in the low nibble of byte j),
 *          then n/16 E4M3 scales, one per 16 channels;
 *          x = scale_k * e2m1                        n/2 + n/16 bytes (n % 16 == 0)
 *          (scale_k = E4M3 rounding of amax_k / 6, rounded up so no code saturates)
 * An all-zero segment stores scale 0 and dequantizes to zeros.
 *
 * Pure functions; safe from any thread.
 */
#ifndef FG_KVQUANT_H
#define FG_KVQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/matmul.h" /* fg_isa */

typedef enum fg_kv_format {
    FG_KV_F32 = 0,
    FG_KV_F16,
    FG_KV_INT8,
    FG_KV_FP8,
    FG_KV_FP4,
    FG_KV__COUNT
} fg_kv_format;

/* "f32", "f16", "int8", "fp8", "fp4"; NULL if out of range. */
const char *fg_kv_format_name(fg_kv_format f);
/* Parses a name; returns -1 if unknown. */
int fg_kv_format_parse(const char *name);

/* Bytes for n channels in format f; 0 when n is not usable in f
 * (n <= 0, or FP4 with n % 16 != 0). */
size_t fg_kv_bytes(fg_kv_format f, int n);

/* Quantizes x [n] into dst (fg_kv_bytes(f, n) bytes); nothing for an unusable n.
 * The same bytes on every ISA: fg_kv_quantize picks the best (AVX-512 for FP4),
 * fg_kv_quantize_isa the one asked for (FG_ISA_SCALAR: the reference). */
void fg_kv_quantize(fg_kv_format f, const float *x, int n, void *dst);
void fg_kv_quantize_isa(fg_isa isa, fg_kv_format f, const float *x, int n, void *dst);
void fg_kv_dequantize(fg_kv_format f, const void *src, int n, float *y);

#endif
