/* test_matmul_amx_emu.c: test_matmul_amx's checks on CPUs without AMX: the
 * AMX kernel compiled in here with its tile instructions emulated in C
 * (amx_emulate.h), so the tile layout, the configuration and the tails are
 * tested wherever AVX-512 runs (the kernel's scale arithmetic is AVX-512).
 * This object defines the kernel's symbols, so the library's matmul_amx.o
 * is not linked and fg_matmul reaches the emulated kernel. Its main is
 * amx_emu_main.c's, which checks the CPU first. */
#define FG_AMX_EMULATE 1
#include "tests/unit/amx_emulate.h"

#include "kernels/cpu/matmul_amx.c"

#define AMX_TEST_NAME "test_matmul_amx_emu"
#define AMX_TEST_MAIN fg_amx_emu_test_main
#include "tests/unit/test_matmul_amx.c"
