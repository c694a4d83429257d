/* amx_emulate.h: the AMX tile instructions that kernels/cpu/matmul_amx.c
 * uses, in plain C, for test_matmul_amx_emu (the kernel compiled into the
 * test with FG_AMX_EMULATE). It checks what the hardware would fault on or
 * silently get wrong: a tile used before LDTILECFG, a palette other than 1,
 * more than 16 rows or 64 bytes a row, and shapes that do not chain
 * (C rows = A rows, A bytes per row = 4 x B rows, C bytes = B bytes per row).
 * A load reads exactly rows x colsb bytes at base + r * stride, so the
 * sanitizers see any read past a buffer as they would the real load's.
 * Tile state is per thread, as on the hardware. */
#ifndef FG_AMX_EMULATE_H
#define FG_AMX_EMULATE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/matmul_isa.h" /* fg_matmul_amx_permit */

typedef struct fg_amx_emu_state {
    int configured;
    uint8_t rows[8];
    uint16_t colsb[8];
    uint8_t t[8][16][64];
} fg_amx_emu_state;

static _Thread_local fg_amx_emu_state fg_amx_emu;

static void fg_amx_emu_fail(const char *what)
{
    fprintf(stderr, "amx_emulate: %s\n", what);
    abort();
}

/* LDTILECFG: byte 0 palette, bytes 16 + 2 i colsb of tile i, byte 48 + i its rows (Intel SDM) */
static void fg_amx_emu_config(const void *cfg)
{
    const uint8_t *c = cfg;
    if (c[0] != 1)
        fg_amx_emu_fail("palette is not 1");
    for (int i = 0; i < 8; i++) {
        fg_amx_emu.rows[i] = c[48 + i];
        fg_amx_emu.colsb[i] = (uint16_t)(c[16 + 2 * i] | c[17 + 2 * i] << 8);
        if (fg_amx_emu.rows[i] > 16 || fg_amx_emu.colsb[i] > 64)
            fg_amx_emu_fail("a tile of more than 16 rows or 64 bytes a row");
    }
    memset(fg_amx_emu.t, 0, sizeof fg_amx_emu.t);
    fg_amx_emu.configured = 1;
}

static void fg_amx_emu_check(int t)
{
    if (!fg_amx_emu.configured)
        fg_amx_emu_fail("tile instruction before LDTILECFG");
    if (t < 0 || t > 7 || !fg_amx_emu.rows[t] || !fg_amx_emu.colsb[t])
        fg_amx_emu_fail("an unconfigured tile");
}

static void fg_amx_emu_zero(int t)
{
    fg_amx_emu_check(t);
    memset(fg_amx_emu.t[t], 0, sizeof fg_amx_emu.t[t]);
}

static void fg_amx_emu_load(int t, const void *base, long stride)
{
    fg_amx_emu_check(t);
    memset(fg_amx_emu.t[t], 0, sizeof fg_amx_emu.t[t]);
    for (int r = 0; r < fg_amx_emu.rows[t]; r++)
        memcpy(fg_amx_emu.t[t][r], (const uint8_t *)base + (long)r * stride, fg_amx_emu.colsb[t]);
}

static void fg_amx_emu_store(int t, void *base, long stride)
{
    fg_amx_emu_check(t);
    for (int r = 0; r < fg_amx_emu.rows[t]; r++)
        memcpy((uint8_t *)base + (long)r * stride, fg_amx_emu.t[t][r], fg_amx_emu.colsb[t]);
}

/* TDPBSUD: C[m].dword[n] += sum_{k, i < 4} (int8) A[m][4k + i] * (uint8) B[k][4n + i] */
static void fg_amx_emu_dpbsud(int c, int a, int b)
{
    fg_amx_emu_check(c);
    fg_amx_emu_check(a);
    fg_amx_emu_check(b);
    const int M = fg_amx_emu.rows[c], K = fg_amx_emu.colsb[a] / 4, N = fg_amx_emu.colsb[c] / 4;
    if (fg_amx_emu.rows[a] != M || fg_amx_emu.colsb[a] % 4 || fg_amx_emu.rows[b] != K ||
        fg_amx_emu.colsb[b] != fg_amx_emu.colsb[c] || fg_amx_emu.colsb[c] % 4)
        fg_amx_emu_fail("tdpbsud shapes do not chain");
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int32_t acc;
            memcpy(&acc, &fg_amx_emu.t[c][m][4 * n], 4);
            for (int k = 0; k < K; k++)
                for (int i = 0; i < 4; i++)
                    acc += (int32_t)(int8_t)fg_amx_emu.t[a][m][4 * k + i] * (int32_t)fg_amx_emu.t[b][k][4 * n + i];
            memcpy(&fg_amx_emu.t[c][m][4 * n], &acc, 4);
        }
}

#define AMX_BARRIER() ((void)0)
#define AMX_CONFIG(cfg) fg_amx_emu_config(cfg)
#define AMX_RELEASE() (fg_amx_emu.configured = 0)
#define AMX_ZERO(t) fg_amx_emu_zero(t)
#define AMX_LOAD(t, base, stride) fg_amx_emu_load(t, base, stride)
#define AMX_STORE(t, base, stride) fg_amx_emu_store(t, base, stride)
#define AMX_DPBSUD(c, a, b) fg_amx_emu_dpbsud(c, a, b)

/* Every CPU with AVX-512 "has" emulated tiles. */
int fg_matmul_amx_permit(uint32_t cpuid7_edx, uint64_t xcr0)
{
    (void)cpuid7_edx;
    (void)xcr0;
    return 1;
}

#endif
