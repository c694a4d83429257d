/* fuzz_quants.c: libFuzzer target for the block types' readers (kernels/cpu/quants.h).
 *
 * The first input byte picks a type (every block type the products take), the
 * rest is read as whole blocks of it, a row of up to 8 blocks. For any bytes:
 * validation answers 0 or -1 without reading past the row; where it accepts,
 * every dequantized value is finite (no F16 field is infinite or NaN, and no
 * type's largest value overflows f32), the products' decoded form gives the
 * dequantization's values (the exactness test_quants checks on random
 * blocks), and the scalar product of the row with ones runs (and is finite,
 * but for MXFP4, whose largest valid values may sum past f32).
 *
 * Seeds: tests/fuzz/corpus/fuzz_quants/ (one block of each type).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/quants.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int types[] = {FG_WTYPE_Q4_0, FG_WTYPE_Q4_1, FG_WTYPE_Q5_0, FG_WTYPE_Q5_1, FG_WTYPE_Q8_0,
                            FG_WTYPE_Q2_K, FG_WTYPE_Q3_K, FG_WTYPE_Q4_K, FG_WTYPE_Q5_K, FG_WTYPE_Q6_K,
                            FG_WTYPE_IQ4_NL, FG_WTYPE_IQ4_XS, FG_WTYPE_MXFP4, FG_WTYPE_IQ2_XXS, FG_WTYPE_IQ2_XS,
                            FG_WTYPE_IQ2_S, FG_WTYPE_IQ3_XXS, FG_WTYPE_IQ3_S,
                            FG_WTYPE_IQ1_S, FG_WTYPE_IQ1_M};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int t = types[data[0] % (sizeof types / sizeof types[0])];
    int elems, bytes;
    if (!fg_wtype_block(t, &elems, &bytes))
        abort();
    size_t nb = (size - 1) / (size_t)bytes;
    nb = nb > 8 ? 8 : nb;
    if (nb == 0)
        return 0;
    const int64_t n = (int64_t)nb * elems;
    uint8_t *w = malloc(nb * (size_t)bytes); /* exactly the row: ASan sees any read past it */
    float *y = malloc((size_t)n * sizeof *y), *x = malloc((size_t)n * sizeof *x);
    memcpy(w, data + 1, nb * (size_t)bytes);
    int64_t r, b;
    const int ok = fg_wtype_validate_rows(t, w, n, 1, &r, &b);
    if (ok != 0 && ok != -1)
        abort();
    if (ok == -1 && (r != 0 || b < 0 || b >= (int64_t)nb))
        abort(); /* one row of valid shape: the bad block is in it */
    if (fg_wtype_dequantize_row(t, w, y, n) != 0)
        abort();
    if (ok == 0) {
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(y[i]))
                abort();
        if (fg_quant_decodes(t)) {
            int8_t v[8 * 256];
            float s[8 * 16], m[8 * 16];
            if (fg_quant_decode(t, w, (int)nb, v, s, m) != 0)
                abort();
            for (int64_t i = 0; i < n; i++)
                if (!(s[i / 16] * (float)v[i] + m[i / 16] == y[i]))
                    abort();
        }
        for (int64_t i = 0; i < n; i++)
            x[i] = 1.0f;
        const size_t sb = fg_matmul_scratch_bytes(t, n, 1);
        void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
        float out;
        if (!scratch || fg_matmul(NULL, FG_ISA_SCALAR, t, w, n, 1, x, 1, &out, scratch) != 0)
            abort();
        if (t != FG_WTYPE_MXFP4 && !isfinite(out)) /* MXFP4's largest valid values, 6 * 2^125, may sum past f32 */
            abort();
        free(scratch);
    }
    free(w);
    free(y);
    free(x);
    return 0;
}
