/* matmul.h: dense products of a weight matrix with a batch of activation rows.
 *
 *   y[t, o] = sum_i W[o, i] * x[t, i]      t < n_tok, o < n_out, i < n_in
 *
 * W is row-major [n_out][n_in] in one of the weight types below (a ggml tensor
 * with ne[0] = n_in, ne[1] = n_out has exactly this layout, as does one
 * expert's slice of a 3-D expert tensor). x is [n_tok][n_in] f32, y is
 * [n_tok][n_out] f32 (overwritten).
 *
 * Semantics per weight type (the scalar reference defines them; fast paths
 * must agree within a per-type normalised error):
 *   F32   : f32 products, f32 accumulation.
 *   F16   : W widened to f32 exactly, then as F32.
 *   BF16  : W widened to f32 exactly, then as F32 (the reference, AVX2, and
 *           AVX-512 without avx512_bf16). With avx512_bf16 (see
 *           fg_matmul_bf16_native) x is instead rounded to BF16 once per call,
 *           round to nearest even, and multiplied with W as stored by
 *           vdpbf16ps (exact products, f32 sums; denormal x or W count as 0):
 *           within 2^-8 * sum_i |W[o, i] x[t, i]| (plus f32 summation error)
 *           of the reference.
 *   Q8_0  : x is first quantized to Q8_0 per 32-block (fg_quantize_row_q8_0);
 *           y = sum over blocks of d_w * d_x * (integer dot of the 32 int8 pairs),
 *           as ggml's q8_0 x q8_0 dot does.
 *   MXFP4 : x quantized to Q8_0 as for Q8_0; y = sum over blocks of
 *           (2^(e - 128) * d_x) * (integer dot of the 32 doubled E2M1 values
 *           2 * e2m1, integers in [-12, 12], with the 32 int8 of x), as ggml's
 *           mxfp4 x q8_0 dot does (numeric.h has the layout; the engine
 *           refuses blocks fg_mxfp4_validate_rows rejects).
 *   Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS (quants.h): x
 *           quantized to Q8_0 as for Q8_0; the weights in their decoded form
 *           (fg_quant_decode: per 16 values an int8 v, a scale s and a minimum
 *           m); y = sum over the 32-blocks of
 *             (s0 * I0 + s1 * I1 + m0 * X0 + m1 * X1) * d_x
 *           with I the exact integer dot of v with the block's int8 x over
 *           each half and X the sum of those int8 x, summed in block order.
 *           (ggml dots its K-quants with Q8_K activations, one f32 scale per
 *           256; Q8_0's scale per 32 is as precise or more, and lets one
 *           quantization of x serve every weight type of a layer.) The fast
 *           paths compute the same integers and differ only in f32 rounding
 *           and order; a token's result is the same bits in any batch.
 *
 * Each weight row is read once per call for the whole batch (the batch loop is
 * inside the row loop), which is what makes batching cheap. For Q8_0 packed
 * panels, MXFP4 and native BF16 a token's outputs are bit-identical whatever
 * batch it is computed in; so are F32, F16 and widened BF16 on AVX-512 and
 * AVX2 (one accumulator per row and token, the same in the decode row and the
 * tiles). Raw Q8_0 is not (decode, few-token, tile and panel kernels sum the
 * blocks in other orders). The AMX tile kernels (fg_matmul_amx) compute the
 * same integer block dots and apply the scales in the AVX-512 kernels' order:
 * their results are the AVX-512 bits, so this holds with them too.
 *
 * Thread safety: pure; the work is split over the pool's threads by output rows.
 */
#ifndef FG_MATMUL_H
#define FG_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/pool.h"

/* Weight type ids: identical to ggml's type ids. */
enum fg_wtype {
    FG_WTYPE_F32 = 0,
    FG_WTYPE_F16 = 1,
    FG_WTYPE_Q4_0 = 2,   /* the legacy and K types: layouts in quants.h */
    FG_WTYPE_Q4_1 = 3,
    FG_WTYPE_Q5_0 = 6,
    FG_WTYPE_Q5_1 = 7,
    FG_WTYPE_Q8_0 = 8,
    FG_WTYPE_Q2_K = 10,
    FG_WTYPE_Q3_K = 11,
    FG_WTYPE_Q4_K = 12,
    FG_WTYPE_Q5_K = 13,
    FG_WTYPE_Q6_K = 14,
    FG_WTYPE_IQ2_XXS = 16, /* the lattice IQ types: layouts in quants.h */
    FG_WTYPE_IQ2_XS = 17,
    FG_WTYPE_IQ2_S = 22,
    FG_WTYPE_IQ3_XXS = 18,
    FG_WTYPE_IQ3_S = 21,
    FG_WTYPE_IQ1_S = 19,
    FG_WTYPE_IQ1_M = 29,
    FG_WTYPE_IQ4_NL = 20,
    FG_WTYPE_IQ4_XS = 23,
    FG_WTYPE_BF16 = 30,
    FG_WTYPE_MXFP4 = 39,
    /* Not a ggml type: Q8_0 weights repacked by fg_matmul_pack_q8_p16 into
     * panels of 16 rows (see there). Same values and results as Q8_0. */
    FG_WTYPE_Q8_0_P16 = 1008,
};

/* Instruction sets a kernel can be asked to use; FG_ISA_AUTO picks the best
 * the CPU supports (detected once). */
typedef enum fg_isa {
    FG_ISA_AUTO = 0,
    FG_ISA_SCALAR,  /* the reference: plain C, never optimised */
    FG_ISA_AVX2,    /* AVX2 + FMA + F16C */
    FG_ISA_AVX512,  /* AVX-512 F/BW/VL/DQ + VNNI (without VNNI, AUTO picks AVX2) */
} fg_isa;

/* True when this CPU (and this build) can run the given ISA. */
int fg_isa_supported(fg_isa isa);
/* The ISA FG_ISA_AUTO resolves to. */
fg_isa fg_isa_best(void);
const char *fg_isa_name(fg_isa isa);

/* True when BF16 products on isa (FG_ISA_AUTO: the best) use vdpbf16ps and
 * round x to BF16: isa is AVX-512 and the CPU has avx512_bf16, and the
 * environment did not set FG_NO_AVX512_BF16 (read once, at the first call of
 * any function here), which keeps the F32-widening path. */
int fg_matmul_bf16_native(fg_isa isa);

/* True when the batched Q8_0 products on isa (FG_ISA_AUTO: the best) run on
 * AMX tiles (matmul_amx.c): isa is AVX-512, the CPU has amx_tile and amx_int8,
 * the kernel granted this process the tile state (Linux arch_prctl
 * ARCH_REQ_XCOMP_PERM, asked once at detection; refused: the AVX-512 kernels),
 * and the environment sets FG_AMX=1 (read once, like FG_NO_AVX512_BF16; off
 * by default until the kernels are measured on AMX hardware). The results are the AVX-512 kernels' bits either way. */
int fg_matmul_amx(fg_isa isa);

/* Bytes of scratch fg_matmul needs for this call, whatever the ISA (Q8_0 and
 * MXFP4 need room for the quantized activations, BF16 for the activations
 * rounded to BF16; 0 for other types). */
size_t fg_matmul_scratch_bytes(int wtype, int64_t n_in, int64_t n_tok);

/* Returns 0, or -1 if wtype is unknown, n_in is not a multiple of the type's
 * block, the ISA is not supported, or scratch is NULL where fg_matmul_scratch_bytes
 * is not 0. scratch: at least
 * fg_matmul_scratch_bytes() bytes, 64-byte aligned (may be NULL if 0). */
int fg_matmul(fg_pool_t *pool, fg_isa isa, int wtype, const void *w, int64_t n_in, int64_t n_out,
              const float *x, int64_t n_tok, float *y, void *scratch);

/* One weight of a fg_matmul_many() call: y [n_tok][n_out] = W x. */
typedef struct fg_matmul_op {
    int wtype;
    const void *w;     /* [n_out][n_in] in wtype */
    int64_t n_out;
    float *y;          /* [n_tok][n_out], overwritten */
} fg_matmul_op;

#define FG_MATMUL_MAX_OPS 4

/* Several weights applied to the same x [n_tok][n_in] (an expert's gate and
 * up, the attention's q_a and kv_a): the Q8_0 activations (of Q8_0 and MXFP4
 * weights) are quantized once for all of them, and the rows of every weight
 * are shared out over the pool in one job, so the call costs one or two pool barriers instead of that many
 * per weight. Each op's y is bit-identical to a fg_matmul() of that weight
 * alone. n_ops in [1, FG_MATMUL_MAX_OPS]. Returns 0, or -1 (nothing computed)
 * if any op would make fg_matmul() fail or n_ops is out of range. BF16 ops
 * on fg_matmul_bf16_native share one rounding of x likewise. scratch: the
 * largest fg_matmul_scratch_bytes() of the ops' types (Q8_0, MXFP4, BF16),
 * 64-byte aligned (may be NULL if that is 0); a call that mixes BF16 ops with
 * Q8_0 or MXFP4 ops runs them one after the other. */
int fg_matmul_many(fg_pool_t *pool, fg_isa isa, const fg_matmul_op *ops, int n_ops, int64_t n_in, const float *x,
                   int64_t n_tok, void *scratch);

/* Activations quantized once, for products over subsets of their rows (the
 * MoE experts: each reads a few tokens' rows of the same normalised x, once
 * for its gate and up). Quantizing them once per step instead of once per
 * expert, and copying a quantized row instead of a float row, is the saving.
 *
 * fg_q8_rows_bytes: bytes of the buffer for n_rows rows of n_in (0 when n_in
 * is not a positive multiple of 32 or n_rows <= 0).
 * fg_q8_rows_quantize: quantizes x [n_rows][n_in] into buf (that many bytes,
 * 64-byte aligned), as fg_matmul would (the Q8_0 rule of the top of this
 * file); the rows are split over the pool. Returns 0, or -1 for a bad shape,
 * a NULL pointer or an unsupported ISA.
 * fg_matmul_q8_rows: fg_matmul_many for x = rows rows[0 .. n_tok) of the
 * quantized buffer (n_buf_rows rows): each y bit-identical to fg_matmul_many
 * on those rows of x. Every op must be Q8_0, Q8_0_P16 or MXFP4 (float
 * weights need x itself). Returns 0, or -1 as fg_matmul_many, or for a row
 * outside [0, n_buf_rows) or a float op. */
size_t fg_q8_rows_bytes(int64_t n_in, int64_t n_rows);
int fg_q8_rows_quantize(fg_pool_t *pool, fg_isa isa, const float *x, int64_t n_in, int64_t n_rows, void *buf);
int fg_matmul_q8_rows(fg_pool_t *pool, fg_isa isa, const fg_matmul_op *ops, int n_ops, int64_t n_in,
                      const void *rows_buf, int64_t n_buf_rows, const int *rows, int64_t n_tok, void *scratch);

/* Q8_0 repacked for the AVX-512 panel kernel, once at load, so small batches
 * (the MoE experts' 1 .. 12 tokens) get the panel kernel's cost per product
 * without repacking each block on every call.
 *
 * Layout: the matrix is cut into panels of 16 consecutive rows; a panel is
 * nb = n_in / 32 blocks of 512 bytes, then nb x 16 F16 block scales:
 *   quants[b][g][r][i] = W[16p + r][32b + 4g + i] ^ 0x80   (g < 8, r < 16, i < 4; as uint8)
 *   scales[b][r]       = the F16 scale of row 16p + r, block b
 * so one 64-byte load holds the same 4-byte group of all 16 rows. A panel is
 * 16 * nb * 34 bytes, exactly the Q8_0 rows it replaces: the packed matrix is
 * the size of the original.
 *
 * Returns the packed bytes, or 0 if the shape cannot be packed (n_in not a
 * multiple of 32 or n_out not a multiple of 16). */
size_t fg_matmul_q8_p16_bytes(int64_t n_in, int64_t n_out);

/* Packs the Q8_0 matrix w [n_out][n_in] into dst (fg_matmul_q8_p16_bytes()
 * bytes, 64-byte aligned). Returns 0, or -1 for a shape that cannot be packed.
 * fg_matmul() with FG_WTYPE_Q8_0_P16 and dst then gives the results of Q8_0
 * with w (bit-identical on the scalar reference). */
int fg_matmul_pack_q8_p16(const void *w, int64_t n_in, int64_t n_out, void *dst);

/* True for the weight types whose products read x quantized to Q8_0 (every
 * block type: Q8_0, Q8_0_P16, MXFP4 and those of quants.h); false for the
 * float types. */
int fg_wtype_reads_q8(int wtype);

/* Bytes of one weight row of n_in elements of wtype (0 if not a whole number of blocks). */
size_t fg_wtype_row_bytes(int wtype, int64_t n_in);

#endif
