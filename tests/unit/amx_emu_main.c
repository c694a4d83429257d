/* amx_emu_main.c: test_matmul_amx_emu's entry, built without the AVX-512
 * flags its test object needs: that object's own code (ASan's stack
 * poisoning in its main included) uses AVX-512 instructions, so the CPU is
 * checked here before any of it runs. */
#include <stdio.h>

#include "kernels/cpu/matmul.h"

int fg_amx_emu_test_main(void);

int main(void)
{
    if (!fg_isa_supported(FG_ISA_AVX512)) {
        fprintf(stderr, "test_matmul_amx_emu: skipped: this CPU has no AVX-512 (VNNI)\n");
        return 77;
    }
    return fg_amx_emu_test_main();
}
