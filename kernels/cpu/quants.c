/* quants.c: reference dequantization and validation of quants.h. */
#include "kernels/cpu/quants.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"

int fg_wtype_dequantize_row(int wtype, const void *row, float *y, int64_t n)
{
    if (fg_wtype_row_bytes(wtype, n) == 0 || !row || !y)
        return -1;
    const uint8_t *p = row;
    switch (wtype) {
    case FG_WTYPE_F32:
        memcpy(y, p, (size_t)n * sizeof(float));
        return 0;
    case FG_WTYPE_F16:
    case FG_WTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            y[i] = wtype == FG_WTYPE_F16 ? fg_f16_to_f32(h) : fg_bf16_to_f32(h);
        }
        return 0;
    case FG_WTYPE_Q8_0:
        fg_dequantize_row_q8_0(row, y, n);
        return 0;
    case FG_WTYPE_MXFP4:
        fg_dequantize_row_mxfp4(row, y, n);
        return 0;
    }
    return -1;
}

int fg_wtype_validate_rows(int wtype, const void *w, int64_t n_in, int64_t n_rows, int64_t *bad_row,
                           int64_t *bad_block)
{
    int64_t r_bad = -1, b_bad = -1;
    int ret = 0;
    const size_t row_bytes = fg_wtype_row_bytes(wtype, n_in);
    if (row_bytes == 0 || n_rows < 0 || (!w && n_rows > 0)) {
        ret = -1;
    } else if (wtype == FG_WTYPE_MXFP4) {
        return fg_mxfp4_validate_rows(w, n_in, n_rows, bad_row, bad_block);
    } else if (wtype == FG_WTYPE_Q8_0) {
        const int64_t nb = n_in / FG_Q8_0_BLOCK;
        const fg_block_q8_0 *blk = w;
        for (int64_t r = 0; r < n_rows && !ret; r++)
            for (int64_t b = 0; b < nb; b++)
                if (!isfinite(fg_f16_to_f32(blk[r * nb + b].d))) {
                    r_bad = r;
                    b_bad = b;
                    ret = -1;
                    break;
                }
    }
    if (bad_row)
        *bad_row = r_bad;
    if (bad_block)
        *bad_block = b_bad;
    return ret;
}
