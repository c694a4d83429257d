/* matmul_amx.c: the batched Q8_0 products of matmul.h on AMX tiles
 * (amx_tile + amx_int8), for the CPUs that have them (Sapphire Rapids and
 * later Xeons). Compiled with the AVX-512 flags and -mamx-tile -mamx-int8;
 * matmul.c calls in only after fg_matmul_amx_permit() said yes.
 *
 * What runs here: FG_WTYPE_Q8_0_P16 from AMX_P16_MIN_TOKENS tokens, and
 * FG_WTYPE_Q8_0 in whole 16-row panels from AMX_Q8_MIN_TOKENS tokens (the
 * rows past the last whole panel go to the AVX-512 kernels, as there).
 *
 * One tile product per Q8_0 block and 16 x 16 (tokens x rows):
 *   A  [m tokens][32]  int8   the tokens' quantized x of the block (fg_q8_act.qs, stride qs_stride)
 *   B  [8][16 rows x 4] uint8 the block's weights w ^ 0x80 = w + 128, 4-byte groups of the
 *                             16 rows side by side: exactly the packed panel layout of matmul.h
 *                             (Q8_0_P16 as stored; plain Q8_0 repacked here, AMX_CHUNK blocks at a time)
 *   C  [m][16] int32          tdpbsud: sum_k x[t][k] * (w[r][k] + 128), exact
 * so C + pc (= -128 * the block's sum of x, fg_q8_act.pc) is the exact
 * integer block dot I[t][r], the one the AVX-512 panel kernels compute with
 * vpdpbusd. The block scales cannot enter the tile (they change every 32
 * products), so C goes to memory per block and the AVX-512 tail applies
 *   y[t][r] = fma((float)I[t][r], d_w[r] * d_x[t], y[t][r])        block by block, in order,
 * the panel kernels' arithmetic and order exactly: a token's outputs are the
 * bits the AVX-512 panels give (Q8_0, 13+ tokens) and the packed kernel gives
 * at any batch (Q8_0_P16), so batch invariance is what it was.
 *
 * Tile registers: 0, 1 C; 2, 3 A; 4, 5 B: two blocks in flight; 6, 7 C and A
 * of the last token tile when it is shorter (n_tok > 16, not a multiple of
 * 16), so one configuration, loaded once per call, serves the whole call;
 * tiles are released at its end.
 *
 * Built with FG_AMX_EMULATE (tests/unit/test_matmul_amx_emu.c only), the tile
 * instructions are plain C from tests/unit/amx_emulate.h, so the layout and
 * the configuration are tested on CPUs without AMX.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_isa.h"
#include "kernels/cpu/numeric.h"

#ifndef FG_AMX_EMULATE
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
/* gcc's tile loads are asm without a memory operand: the barrier keeps the
 * stores of a repacked panel or a configuration before the instruction reads them. */
#define AMX_BARRIER() __asm__ __volatile__("" ::: "memory")
#define AMX_CONFIG(cfg) _tile_loadconfig(cfg)
#define AMX_RELEASE() _tile_release()
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, base, stride) _tile_loadd(t, base, stride)
#define AMX_STORE(t, base, stride) _tile_stored(t, base, stride)
#define AMX_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#endif

#define AMX_ROWS 16         /* weight rows of a B tile: one packed panel */
#define AMX_TOKENS 16       /* tokens of an A tile (the most rows a tile has) */
#define AMX_CHUNK 16        /* plain Q8_0 blocks repacked at a time: 8 KB of weights, in L1 */
#define AMX_PANEL_BLOCK 512 /* bytes of one block of a packed panel */
/* Plain Q8_0 from where the AVX-512 kernel takes its panels (more than its
 * few-token row kernel's 12), so the results are the panels' bits. */
#define AMX_Q8_MIN_TOKENS 13
/* Packed Q8_0: any batch gives the same bits; below this many tokens the
 * AVX-512 kernel keeps it (a tile of 1 .. 7 rows wastes most of the unit).
 * Not tuned on hardware yet (docs/benchmarks.md). */
#define AMX_P16_MIN_TOKENS 8

/* The 64-byte tile configuration, palette 1 (Intel SDM, LDTILECFG). */
typedef struct amx_cfg {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile i */
    uint8_t rows[16];
} amx_cfg;
_Static_assert(sizeof(amx_cfg) == 64, "LDTILECFG reads 64 bytes");

#ifndef FG_AMX_EMULATE
int fg_matmul_amx_permit(uint32_t cpuid7_edx, uint64_t xcr0)
{
    /* leaf 7 EDX: bit 24 amx_tile, bit 25 amx_int8; XCR0 bits 17, 18: XTILECFG, XTILEDATA */
    if (!((cpuid7_edx >> 24) & 1) || !((cpuid7_edx >> 25) & 1) || (xcr0 & 0x60000) != 0x60000)
        return 0;
#if defined(__linux__) && defined(SYS_arch_prctl)
    /* Linux hands the 8 KB tile state to a process only on request
     * (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); without it the first tile
     * instruction faults. A refusal (old kernel, seccomp, sigaltstack too
     * small) leaves the AVX-512 kernels. */
    const long ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        return 0;
    unsigned long perm = 0;
    return syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) == 0 && ((perm >> XFEATURE_XTILEDATA) & 1);
#else
    return 0;
#endif
}
#endif

int fg_matmul_amx_wants(int wtype, int64_t n_tok)
{
    return (wtype == FG_WTYPE_Q8_0 && n_tok >= AMX_Q8_MIN_TOKENS) ||
           (wtype == FG_WTYPE_Q8_0_P16 && n_tok >= AMX_P16_MIN_TOKENS);
}

/* Tiles 0, 1: C [m][16] int32; 2, 3: A [m][32] int8; 4, 5: B [8][64] uint8,
 * m = m_main, the tokens of every token tile but a last shorter one; 6: C,
 * 7: A of that last tile (m_tail tokens, 0: none), which shares B tile 4. One
 * configuration then serves a whole call. */
static void amx_configure(int m_main, int m_tail)
{
    amx_cfg c __attribute__((aligned(64)));
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 2; i++) {
        c.rows[i] = (uint8_t)m_main;
        c.colsb[i] = AMX_ROWS * 4;
        c.rows[2 + i] = (uint8_t)m_main;
        c.colsb[2 + i] = FG_Q8_0_BLOCK;
        c.rows[4 + i] = FG_Q8_0_BLOCK / 4;
        c.colsb[4 + i] = AMX_ROWS * 4;
    }
    if (m_tail) {
        c.rows[6] = (uint8_t)m_tail;
        c.colsb[6] = AMX_ROWS * 4;
        c.rows[7] = (uint8_t)m_tail;
        c.colsb[7] = FG_Q8_0_BLOCK;
    }
    AMX_BARRIER();
    AMX_CONFIG(&c);
}

/* A chunk of blocks of one 16-row panel as B tiles read it. */
typedef struct amx_panel {
    const uint8_t *q;   /* [cb][8][16][4] w ^ 0x80 */
    const uint16_t *dw; /* [cb][16] F16 block scales of the 16 rows */
} amx_panel;

/* Plain Q8_0 rows o .. o + 15, blocks [b0, b0 + cb), into the packed layout. */
static void amx_repack(const fg_matmul_args *a, int64_t o, int64_t b0, int cb, uint8_t *q, uint16_t *dw)
{
    const size_t bs = sizeof(fg_block_q8_0);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    /* dword g of a row's block goes to byte 64 g + 4 r of the packed block */
    const __m256i at = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
    for (int r = 0; r < AMX_ROWS; r++) {
        const uint8_t *row = (const uint8_t *)a->w + (size_t)(o + r) * a->row_bytes + (size_t)b0 * bs;
        for (int i = 0; i < cb; i++) {
            memcpy(&dw[i * AMX_ROWS + r], row + (size_t)i * bs, 2);
            const __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(row + (size_t)i * bs + 2)), flip);
            _mm256_i32scatter_epi32((int *)(q + (size_t)i * AMX_PANEL_BLOCK + 4 * r), at, v, 4);
        }
    }
}

/* One block's C (c [16][16]) into the token tile's sums, as the panels do. */
static inline __attribute__((always_inline)) void amx_apply(const fg_matmul_args *a, const int32_t (*c)[AMX_ROWS],
                                                            const uint16_t *dw16, int64_t b, int64_t t0, int m,
                                                            __m512 *yacc)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK;
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dw16));
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOKENS; t++) {
        if (t >= m)
            break;
        const int64_t tt = t0 + t;
        const int32_t corr = a->xq.pc[((tt / FG_Q8_PANEL_TOKENS) * nb + b) * FG_Q8_PANEL_TOKENS + tt % FG_Q8_PANEL_TOKENS];
        const __m512i dot = _mm512_add_epi32(_mm512_load_si512((const void *)c[t]), _mm512_set1_epi32(corr));
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(a->xq.d[tt * a->xq.d_stride + b]));
        yacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, yacc[t]);
    }
}

/* Tokens t0 .. t0 + m - 1 against blocks [b0, b0 + cb) of the panel at rows
 * o .. o + 15; first: the sums start at 0, else from y (the previous chunk's).
 * tail: m is the configuration's m_tail (tiles 6, 7), else its m_main. */
static void amx_tokens(const fg_matmul_args *a, const amx_panel *p, int64_t o, int64_t b0, int cb, int64_t t0,
                       int m, int first, int tail)
{
    const long stride = (long)a->xq.qs_stride;
    const int8_t *qs = a->xq.qs + t0 * a->xq.qs_stride + b0 * FG_Q8_0_BLOCK;
    float *y = a->y + t0 * a->n_out + o;
    int32_t c[2][AMX_TOKENS][AMX_ROWS] __attribute__((aligned(64)));
    __m512 yacc[AMX_TOKENS];
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOKENS; t++)
        yacc[t] = first || t >= m ? _mm512_setzero_ps() : _mm512_loadu_ps(y + t * a->n_out);
    int i = 0;
    if (tail) { /* one block at a time: the last token tile is at most one per panel and chunk */
        for (; i < cb; i++) {
            AMX_ZERO(6);
            AMX_LOAD(7, qs + (size_t)i * FG_Q8_0_BLOCK, stride);
            AMX_LOAD(4, p->q + (size_t)i * AMX_PANEL_BLOCK, AMX_ROWS * 4);
            AMX_DPBSUD(6, 7, 4);
            AMX_STORE(6, c[0], AMX_ROWS * 4);
            amx_apply(a, (const int32_t (*)[AMX_ROWS])c[0], p->dw + (size_t)i * AMX_ROWS, b0 + i, t0, m, yacc);
        }
    }
    for (; i + 2 <= cb; i += 2) {
        AMX_ZERO(0);
        AMX_ZERO(1);
        AMX_LOAD(2, qs + (size_t)i * FG_Q8_0_BLOCK, stride);
        AMX_LOAD(3, qs + (size_t)(i + 1) * FG_Q8_0_BLOCK, stride);
        AMX_LOAD(4, p->q + (size_t)i * AMX_PANEL_BLOCK, AMX_ROWS * 4);
        AMX_LOAD(5, p->q + (size_t)(i + 1) * AMX_PANEL_BLOCK, AMX_ROWS * 4);
        AMX_DPBSUD(0, 2, 4);
        AMX_DPBSUD(1, 3, 5);
        AMX_STORE(0, c[0], AMX_ROWS * 4);
        AMX_STORE(1, c[1], AMX_ROWS * 4);
        amx_apply(a, (const int32_t (*)[AMX_ROWS])c[0], p->dw + (size_t)i * AMX_ROWS, b0 + i, t0, m, yacc);
        amx_apply(a, (const int32_t (*)[AMX_ROWS])c[1], p->dw + (size_t)(i + 1) * AMX_ROWS, b0 + i + 1, t0, m, yacc);
    }
    if (i < cb) { /* an odd block count */
        AMX_ZERO(0);
        AMX_LOAD(2, qs + (size_t)i * FG_Q8_0_BLOCK, stride);
        AMX_LOAD(4, p->q + (size_t)i * AMX_PANEL_BLOCK, AMX_ROWS * 4);
        AMX_DPBSUD(0, 2, 4);
        AMX_STORE(0, c[0], AMX_ROWS * 4);
        amx_apply(a, (const int32_t (*)[AMX_ROWS])c[0], p->dw + (size_t)i * AMX_ROWS, b0 + i, t0, m, yacc);
    }
#pragma GCC unroll 16
    for (int t = 0; t < AMX_TOKENS; t++)
        if (t < m)
            _mm512_storeu_ps(y + t * a->n_out, yacc[t]);
}

void fg_matmul_rows_amx(const fg_matmul_args *a, int64_t o_begin, int64_t o_end)
{
    const int64_t nb = a->n_in / FG_Q8_0_BLOCK, n_tok = a->n_tok;
    const int packed = a->wtype == FG_WTYPE_Q8_0_P16;
    const int64_t o_panels = o_begin + (o_end - o_begin) / AMX_ROWS * AMX_ROWS;
    uint8_t q[AMX_CHUNK * AMX_PANEL_BLOCK] __attribute__((aligned(64)));
    uint16_t dw[AMX_CHUNK * AMX_ROWS];
    const int m_main = (int)(n_tok < AMX_TOKENS ? n_tok : AMX_TOKENS);
    const int m_tail = n_tok > AMX_TOKENS ? (int)(n_tok % AMX_TOKENS) : 0;
    if (o_panels > o_begin)
        amx_configure(m_main, m_tail);
    for (int64_t o = o_begin; o < o_panels; o += AMX_ROWS) {
        /* a packed panel is one chunk of all its blocks; plain rows are repacked AMX_CHUNK blocks at a time */
        const int64_t chunk = packed ? nb : AMX_CHUNK;
        for (int64_t b0 = 0; b0 < nb; b0 += chunk) {
            const int cb = (int)(nb - b0 < chunk ? nb - b0 : chunk);
            amx_panel p;
            if (packed) {
                const uint8_t *pw = (const uint8_t *)a->w + (size_t)o * a->row_bytes;
                p.q = pw;
                p.dw = (const uint16_t *)(pw + (size_t)nb * AMX_PANEL_BLOCK);
            } else {
                amx_repack(a, o, b0, cb, q, dw);
                AMX_BARRIER();
                p.q = q;
                p.dw = dw;
            }
            for (int64_t t0 = 0; t0 < n_tok; t0 += AMX_TOKENS) {
                const int m = (int)(n_tok - t0 < AMX_TOKENS ? n_tok - t0 : AMX_TOKENS);
                amx_tokens(a, &p, o, b0, cb, t0, m, b0 == 0, m != m_main);
            }
        }
    }
    if (o_panels > o_begin)
        AMX_RELEASE();
    if (o_panels < o_end) /* plain Q8_0's last rows: the AVX-512 tiles, as without AMX */
        fg_matmul_rows_avx512(a, o_panels, o_end);
}
