/* fuzz_quant_plan.c: libFuzzer target for engine/model/quant_plan.h (the
 * TYPE and --tensor-type arguments of flashgate-quantize) and for
 * kernels/cpu/quantize.h.
 *
 * The input's lines: the first is a file type name, the others are tried as
 * overrides (PATTERN=TYPE, a regex) and as tensor names. Contracts: every
 * refusal comes with a message; an accepted plan gives each tensor a type
 * whose blocks divide its rows (or F16), and keeps the type of tensors it
 * does not quantize. Then the input's bytes, read as floats, are quantized
 * to every type written: finite input is always accepted, and a block the
 * validator passes dequantizes to finite values. A broken contract aborts.
 * The seed corpus is tests/fuzz/corpus/fuzz_quant_plan/.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/quant_plan.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cpu/quants.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINES 16

static void check_plan(char **lines, int n)
{
    fg_diag d = {{0}};
    fg_quant_plan_t *p = NULL;
    if (fg_quant_plan_create(lines[0], &p, &d) != FG_OK) {
        if (!d.msg[0] || p)
            abort();
        return;
    }
    for (int i = 1; i < n; i++) {
        d.msg[0] = 0;
        if (fg_quant_plan_add_override(p, lines[i], &d) != FG_OK && !d.msg[0])
            abort();
    }
    static const int64_t shapes[][3] = {{256, 64, 1}, {128, 32, 4}, {33, 7, 1}, {512, 16, 8}, {64, 1, 1}};
    for (int i = 0; i < n; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            fg_gguf_tensor t = {.name = lines[i], .n_dims = 3, .type = FG_GGML_F32};
            t.ne[0] = shapes[s][0];
            t.ne[1] = shapes[s][1];
            t.ne[2] = shapes[s][2];
            t.ne[3] = 1;
            fg_quant_choice c;
            d.msg[0] = 0;
            if (fg_quant_plan_choose(p, &t, &c, &d) != FG_OK) {
                if (!d.msg[0])
                    abort();
                continue;
            }
            if (!c.quantizable && c.type != t.type)
                abort();
            if (c.quantizable && fg_ggml_row_bytes(c.type, t.ne[0]) == 0)
                abort();
        }
    fg_quant_plan_destroy(p);
}

static void check_quantizers(const uint8_t *data, size_t size)
{
    static float x[256], y[256], ones[256];
    static uint8_t q[256 * sizeof(float)]; /* F32 is the largest */
    memset(x, 0, sizeof x);
    memcpy(x, data, size < sizeof x ? size : sizeof x);
    for (int i = 0; i < 256; i++)
        ones[i] = 1;
    int finite = 1;
    for (int i = 0; i < 256; i++)
        finite &= isfinite(x[i]) != 0;
    for (int t = 0; t < 64; t++) {
        if (!fg_wtype_quantizes(t))
            continue;
        if (fg_wtype_requires_imatrix(t) && fg_wtype_quantize_row(t, x, q, 256) != -1)
            abort(); /* refused without weights, as ggml asserts */
        int r = fg_wtype_quantize_row_imatrix(t, x, q, 256, fg_wtype_requires_imatrix(t) ? ones : NULL);
        if (r != (finite ? 0 : -1))
            abort();
        if (r || t == 0)
            continue;
        int64_t row, block;
        if (fg_wtype_validate_rows(t, q, 256, 1, &row, &block) != 0)
            continue; /* F16 scales too large: the tool refuses such a tensor */
        if (fg_wtype_dequantize_row(t, q, y, 256) != 0)
            abort();
        for (int i = 0; i < 256; i++)
            if (!isfinite(y[i]) && t != 1 && t != 30)
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *lines[MAX_LINES];
    int n = 0;
    for (char *s = text; n < MAX_LINES;) {
        lines[n++] = s;
        char *nl = strchr(s, '\n');
        if (!nl)
            break;
        *nl = 0;
        s = nl + 1;
    }
    check_plan(lines, n);
    free(text);
    check_quantizers(data, size);
    return 0;
}
