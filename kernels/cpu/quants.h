/* quants.h: the block-quantized weight types beyond Q8_0 and MXFP4 (those are
 * numeric.h's): ggml's legacy types Q4_0, Q4_1, Q5_0, Q5_1, its K-quants
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, the non-linear IQ4_NL, IQ4_XS, and the lattice
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M. For every block type, matmul.h's included:
 * the block sizes, the reference dequantization, the check a loader runs over
 * a tensor's blocks, and the decoded form the products compute with.
 *
 * Layouts are ggml's (ggml-common.h), byte for byte, little-endian; the code
 * is written from these definitions (F16 fields widened exactly; "q" the
 * unsigned code stored in the block):
 *   Q4_0 (id 2, 32 values, 18 B):  d:f16, qs[16]: value j = d*(lo(qs[j]) - 8),
 *        value j+16 = d*(hi(qs[j]) - 8)                       (lo, hi: nibbles)
 *   Q4_1 (id 3, 32, 20 B): d:f16, m:f16, qs[16]: value = d*q + m
 *   Q5_0 (id 6, 32, 22 B): d:f16, qh[4] (u32 LE), qs[16]: value j's fifth bit
 *        is bit j of qh, value j+16's bit j+16; value = d*(q - 16)
 *   Q5_1 (id 7, 32, 24 B): d:f16, m:f16, qh[4], qs[16]: value = d*q + m
 *   K-quants: 256 values in sub-blocks of 16 or 32 with 4-, 6- or 8-bit scales:
 *   Q2_K (id 10, 84 B): scales[16], qs[64], d:f16, dmin:f16. Value i = 128h +
 *        32j + l (h < 2, j < 4, l < 32): q = (qs[32h + l] >> 2j) & 3, sub-block
 *        s = 8h + 2j + l/16, value = (d*(scales[s] & 15))*q - dmin*(scales[s] >> 4)
 *   Q3_K (id 11, 110 B): hmask[32], qs[64], scales[12], d:f16. Value i = 128h +
 *        32j + l: q = ((qs[32h + l] >> 2j) & 3) - (bit 4h+j of hmask[l] ? 0 : 4),
 *        s = 8h + 2j + l/16, value = (d*(sc[s] - 32))*q with the 6-bit sc[s] =
 *        (s < 8 ? scales[s] & 15 : scales[s-8] >> 4) | ((scales[8 + s%4] >> 2(s/4)) & 3) << 4
 *   Q4_K (id 12, 144 B): d:f16, dmin:f16, scales[12], qs[128]. Value i = 64p +
 *        32k + l (p < 4, k < 2): q = k ? hi(qs[32p + l]) : lo(qs[32p + l]),
 *        s = 2p + k, value = (d*sc[s])*q - dmin*mn[s] with the 6-bit pairs
 *        s < 4: sc = scales[s] & 63, mn = scales[s+4] & 63;
 *        else sc = (scales[s+4] & 15) | (scales[s-4] >> 6) << 4,
 *             mn = (scales[s+4] >> 4) | (scales[s] >> 6) << 4
 *   Q5_K (id 13, 176 B): d, dmin, scales[12], qh[32], qs[128]: as Q4_K with
 *        q += 16 where bit 2p+k of qh[l] is set
 *   Q6_K (id 14, 210 B): ql[128], qh[64], scales[16] (int8), d:f16. Value i =
 *        128h + 32c + l (c < 4): low nibble of ql[64h + l + 32(c&1)], the low
 *        one for c < 2, the high one else; top bits (qh[32h + l] >> 2c) & 3;
 *        q = that 6-bit code - 32; s = 8h + 2c + l/16, value = (d*scales[s])*q
 *   IQ4_NL (id 20, 32, 18 B): d:f16, qs[16]: value j = d*K[lo(qs[j])], value
 *        j+16 = d*K[hi(qs[j])], with the 16 non-linear levels
 *        K = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
 *   IQ4_XS (id 23, 256, 136 B): d:f16, scales_h:u16 LE, scales_l[4], qs[128].
 *        Sub-block b < 8 of 32 values: the 6-bit ls = ((scales_l[b/2] >> 4(b%2))
 *        & 15) | ((scales_h >> 2b) & 3) << 4; value 32b + j = (d*(ls - 32))*K[lo(qs[16b + j])],
 *        value 32b + 16 + j the same with hi(qs[16b + j]) (j < 16)
 *   The lattice IQ types: 256 values in sub-blocks of 32 (ib < 8), each 8
 *   values (l < 4, value 32ib + 8l + j) one entry of a grid of iq_grids.h
 *   (entry byte j is value j), the format's sign bits on it (bit j set: value j
 *   negated), times the sub-block's scale; F16 d at byte 0 but for IQ1_M;
 *   "ks[k]" is fg_iq_ksigns[k] (7 sign bits made 8 by parity):
 *   IQ2_XXS (id 16, 66 B): d, qs[64]: per ib 8 bytes, bytes 0-3 the 4 indices
 *        into iq2xxs_grid, bytes 4-7 a u32 a: signs of entry l ks[(a >> 7l) & 127],
 *        scale d*(0.5 + (a >> 28))*0.25
 *   IQ2_XS (id 17, 74 B): d, qs[32] u16, scales[8]: entry l of ib is q =
 *        qs[4ib + l], index q & 511 into iq2xs_grid, signs ks[q >> 9]; scale
 *        d*(0.5 + sc)*0.25, sc the low nibble of scales[ib] for l < 2, else the high
 *   IQ2_S (id 22, 82 B): d, qs[32], signs[32], qh[8], scales[8]: index
 *        qs[4ib + l] | ((qh[ib] >> 2l) & 3) << 8 into iq2s_grid, signs the byte
 *        signs[4ib + l]; scales as IQ2_XS
 *   IQ3_XXS (id 18, 98 B): d, qs[64], ss[8] u32: entry l of ib is the two
 *        4-value entries iq3xxs_grid[qs[8ib + 2l]], [qs[8ib + 2l + 1]]; signs
 *        ks[(ss[ib] >> 7l) & 127], scale d*(0.5 + (ss[ib] >> 28))*0.5
 *   IQ3_S (id 21, 110 B): d, qs[64], qh[8], signs[32], scales[4]: as IQ3_XXS
 *        with 9-bit indices qs[8ib + 2l + k] | ((qh[ib] >> (2l + k)) & 1) << 8
 *        into iq3s_grid, signs the byte signs[4ib + l], scale d*(1 + 2 sc) with
 *        sc the nibble ib % 2 of scales[ib / 2]
 *   IQ1_S (id 19, 50 B): d, qs[32], qh[8] u16: entry l of ib is int8 values
 *        g in {-1, 0, 1} of iq1s_grid[qs[4ib + l] | ((qh[ib] >> 3l) & 7) << 8];
 *        value = (d*(2((qh[ib] >> 12) & 7) + 1))*(g + delta), delta = -1/8 if
 *        bit 15 of qh[ib] is set, else +1/8
 *   IQ1_M (id 29, 56 B): qs[32], qh[16], sc[4] u16 (no d field: d is the F16
 *        whose nibble k is the top nibble of sc[k]): nibble l % 2 (low first)
 *        of qh[2ib + l/2] holds index bits 8-10 (its low 3) and delta's sign
 *        (bit 3) of entry l, index qs[4ib + l] into iq1s_grid; value =
 *        (d*(2((sc[ib/2] >> (6(ib%2) + 3(l/2))) & 7) + 1))*(g + delta)
 *
 * Thread safety: pure functions.
 */
#ifndef FG_QUANTS_H
#define FG_QUANTS_H

#include <stdint.h>

/* Values per block and bytes per block of a block type (matmul.h's ids,
 * which are ggml's); 0 (both) for a type that is not one. */
int fg_wtype_block(int wtype, int *elems, int *bytes);

/* n values (a whole number of blocks) of one row of a weight type, as the
 * type defines them (numeric.h for F16, BF16, Q8_0, MXFP4; the definitions
 * above for the others). Returns 0, or -1 for an unknown type or a length
 * that is not a positive multiple of the type's block. */
int fg_wtype_dequantize_row(int wtype, const void *row, float *y, int64_t n);

/* Checks a matrix [n_rows][n_in] of a weight type for blocks that do not
 * stand for finite numbers: an F16 scale or minimum (IQ1_M's is spread over
 * its scale words) that is an infinity or NaN (ggml's quantizers never write
 * one), MXFP4 as fg_mxfp4_validate_rows.
 * Types without scales (F32, F16, BF16) always pass. Returns 0 if every block
 * is valid; -1 otherwise, with *bad_row and *bad_block (either may be NULL) the
 * first bad block's row and block index in its row, or both -1 if the shape is
 * invalid (n_in not a positive multiple of the type's block, n_rows < 0, w
 * NULL with rows to check, an unknown type). */
int fg_wtype_validate_rows(int wtype, const void *w, int64_t n_in, int64_t n_rows, int64_t *bad_row,
                           int64_t *bad_block);

/* The decoded form of the types above (legacy and K), in groups of 32 values
 * (the Q8_0 activation block): value i of group g is, bit for bit as the
 * reference dequantization gives it,
 *     s[g][h] * v[g][i] + m[g][h]          h = i / 16 (the half of the group)
 * with v an int8 in [-32, 31] (the IQ4 types: [-127, 113]; IQ2: +-{8, 25, 43};
 * IQ3_XXS: [-62, 62]; IQ3_S: [-15, 15]; IQ1: 8g +- 1 in [-9, 9] with s the
 * sub-block scale / 8, exact) and s, m f32 (m = 0 for the types without a
 * minimum). So a product against Q8_0 activations (int8 qx, scale dx) is, per
 * group, dx * sum over h of (s * (sum v*qx) + m * (sum qx)) over the half:
 * exact integer sums, a few f32 products. fg_quant_decode writes n_blocks
 * blocks' groups (block_elems / 32 each) into v [groups][32], s and m
 * [groups][2]. Returns 0, or -1 for a type it does not decode. */
#define FG_QUANT_GROUP 32
int fg_quant_decodes(int wtype);
int fg_quant_has_min(int wtype);
int fg_quant_decode(int wtype, const void *blocks, int n_blocks, int8_t *v, float *s, float *m);

#endif
