/* matmul_isa.h: internal to matmul*.c. The interface between the dispatcher
 * (matmul.c) and the ISA-specific kernels (matmul_avx2.c, matmul_avx512.c,
 * matmul_amx.c).
 * Nothing outside kernels/cpu/matmul*.c includes this.
 */
#ifndef FG_MATMUL_ISA_H
#define FG_MATMUL_ISA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Q8_0-quantized activations as the fast kernels want them: the int8 values
 * of each token contiguous, the block scales apart. Built in the caller's
 * scratch by the ISA's quantizer, bit-identical to fg_quantize_row_q8_0. */
typedef struct fg_q8_act {
    int8_t *qs;        /* [n_tok][qs_stride] quantized x */
    int32_t *corr;     /* [n_tok][corr_stride] -128 * (sum of qs[4j .. 4j+3]); AVX-512 tiles only (n_tok >= 4) */
    float *d;          /* [n_tok][d_stride] block scale, f16-rounded then widened */
    int64_t qs_stride; /* elements; multiples of 64 bytes so every row is aligned */
    int64_t corr_stride;
    int64_t d_stride;
    /* The same data interleaved by groups of 8 tokens (FG_Q8_PANEL_TOKENS), for
     * the AVX-512 panel kernel (n_tok >= 8): for token group g and block b, the
     * 8 tokens' values sit side by side, so one pointer reaches all of them at
     * constant offsets. Tokens past n_tok in the last group are zero. */
    int8_t *pq;        /* [n_groups][nb][8][32] */
    float *pd;         /* [n_groups][nb][8] block scales */
    int32_t *pc;       /* [n_groups][nb][8] -128 * (sum of the block's 32 qs) */
} fg_q8_act;

#define FG_Q8_PANEL_TOKENS 8

/* One matmul call, as validated by fg_matmul(). */
typedef struct fg_matmul_args {
    int wtype;
    const void *w;     /* [n_out][row_bytes] */
    size_t row_bytes;
    int64_t n_in, n_out, n_tok;
    const float *x;    /* [n_tok][n_in] */
    float *y;          /* [n_tok][n_out] */
    fg_q8_act xq;      /* Q8_0 only */
    /* Which parts of xq the AVX-512 quantizer fills, beyond qs and d: the
     * union over every product that reads this quantization (fg_matmul_many) */
    int q8_corr;       /* corr (the Q8_0 tiles) */
    int q8_panels;     /* pq, pd, pc (the panels, repacked here or at load) */
    int q8_pad;        /* zeros for the last panel group's tokens past n_tok (the repacking panel kernel) */
    /* Set (fg_matmul_q8_rows): token t is row src_rows[t] of activations
     * quantized earlier, [rows][src_qs_stride] int8 and [rows][src_d_stride]
     * scales; the quantizer copies it rather than quantizing x (then NULL). */
    const int8_t *src_qs;
    const float *src_d;
    int64_t src_qs_stride, src_d_stride;
    const int *src_rows;
    void *scratch;     /* scalar Q8_0: [n_tok][n_in / 32] fg_block_q8_0 */
    /* BF16 by vdpbf16ps (AVX-512 with avx512_bf16), else 0: x rounded to BF16
     * once per call, [n_tok][xb_stride] raw BF16 bits in scratch, zero past n_in. */
    int bf16_native;
    uint16_t *xb;
    int64_t xb_stride; /* elements; a multiple of 32 (64 bytes) */
    int amx;           /* the rows run on AMX tiles (fg_matmul_amx and fg_matmul_amx_wants) */
} fg_matmul_args;

/* MXFP4: the scale of a block for ggml's doubled E2M1 values, 2^(e - 128)
 * (half the E8M0 scale), NaN for e = 0xFF; bit for bit the reference's
 * 0.5f * fg_e8m0_to_f32(e), inline for the fast kernels' row decoders. */
static inline float fg_mxfp4_half_scale(uint8_t e)
{
    /* e >= 2: the biased exponent e - 1; e = 1, 0: the subnormals 2^-127, 2^-128 */
    const uint32_t bits = e == 0xff ? 0x7fc00000u : e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Rows of MXFP4 are decoded into the fast kernels' own form this many blocks
 * at a time (a few KB on the stack, in L1 while every token passes over
 * them); each token's sum over a chunk is reduced to one float and the chunks'
 * sums added in order, so a token's result does not depend on the batch. */
#define FG_MXFP4_CHUNK_BLOCKS 128

/* Quantize tokens [t_begin, t_end) of a->x into a->xq (or copy them from a->src_qs). */
void fg_matmul_quant_q8_avx2(const fg_matmul_args *a, int64_t t_begin, int64_t t_end);
void fg_matmul_quant_q8_avx512(const fg_matmul_args *a, int64_t t_begin, int64_t t_end);

/* Which parts of fg_q8_act the AVX-512 kernels read for a product of wtype
 * over n_tok tokens (the q8_* fields of fg_matmul_args); each is 0 or 1. */
void fg_matmul_q8_needs_avx512(int wtype, int64_t n_tok, int *corr, int *panels, int *pad);

/* Rounds tokens [t_begin, t_end) of a->x to BF16 into a->xb (bf16_native only). */
void fg_matmul_round_bf16_avx512(const fg_matmul_args *a, int64_t t_begin, int64_t t_end);

/* y[:, o_begin:o_end] for all tokens. */
void fg_matmul_rows_avx2(const fg_matmul_args *a, int64_t o_begin, int64_t o_end);
void fg_matmul_rows_avx512(const fg_matmul_args *a, int64_t o_begin, int64_t o_end);

/* AMX tiles (matmul_amx.c). fg_matmul_amx_permit: 1 when CPUID leaf 7's EDX
 * and XCR0 show amx_tile and amx_int8 enabled and the kernel granted this
 * process the tile state (Linux arch_prctl), else 0; called once, at
 * detection. fg_matmul_amx_wants: 1 when a product of wtype over n_tok tokens
 * runs on the tiles where they are allowed. fg_matmul_rows_amx: as
 * fg_matmul_rows_avx512 for such a product (it reads xq's qs, d and pc). */
int fg_matmul_amx_permit(uint32_t cpuid7_edx, uint64_t xcr0);
int fg_matmul_amx_wants(int wtype, int64_t n_tok);
void fg_matmul_rows_amx(const fg_matmul_args *a, int64_t o_begin, int64_t o_end);

/* The types of quants.h (matmul_quant_avx2.c, matmul_quant_avx512.c). */
void fg_matmul_rows_quant_avx2(const fg_matmul_args *a, int64_t o_begin, int64_t o_end);
void fg_matmul_rows_quant_avx512(const fg_matmul_args *a, int64_t o_begin, int64_t o_end);

#endif
