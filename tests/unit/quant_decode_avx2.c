/* quant_decode_avx2.c: part of test_quants, compiled with AVX2 and F16C
 * (tests/CMakeLists.txt): the fast kernels' decoders (matmul_quant_decode.h,
 * inline there) made callable, so the test compares their bytes with
 * fg_quant_decode's. */
#include "tests/unit/quant_decode_avx2.h"

#include "kernels/cpu/matmul_quant_decode.h"

int fg_test_qd_decode(int wtype, const void *blocks, int n_blocks, int8_t *v, float *s, float *m)
{
    return qd_decode(wtype, blocks, n_blocks, v, s, m);
}
