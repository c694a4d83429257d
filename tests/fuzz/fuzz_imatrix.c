/* fuzz_imatrix.c: libFuzzer target for engine/model/imatrix.h (the file
 * flashgate-quantize --imatrix reads), in both of llama-imatrix's formats:
 * inputs starting with "GGUF" go through the GGUF reader, others through the
 * legacy .dat reader. Contracts: a refusal comes with a message and no
 * matrix; an accepted matrix has entries with sorted, distinct, non-empty
 * names, at least one finite non-negative weight each, and each is found by
 * its name; matching a made-up tensor to it never fails without a message.
 * Then the first entry's weights (when there are 256) drive the weighted
 * quantizers on a fixed row, which must accept them. A broken contract aborts.
 * The seed corpus is tests/fuzz/corpus/fuzz_imatrix/.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/imatrix.h"
#include "kernels/cpu/quantize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_weights(const float *w)
{
    static float x[256];
    static uint8_t q[256 * sizeof(float)];
    for (int i = 0; i < 256; i++)
        x[i] = sinf((float)i * 0.37f) * (float)(1 + i % 7);
    for (int t = 0; t < 64; t++)
        if (fg_wtype_quantizes(t) && fg_wtype_quantize_row_imatrix(t, x, q, 256, w) != 0)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fg_diag d = {{0}};
    fg_imatrix_t *m = (fg_imatrix_t *)1;
    if (fg_imatrix_parse(data, size, &m, &d) != FG_OK) {
        if (!d.msg[0] || m)
            abort();
        return 0;
    }
    const char *prev = NULL;
    for (size_t i = 0; i < fg_imatrix_count(m); i++) {
        const float *w;
        int64_t n;
        const char *name = fg_imatrix_name_at(m, i, &w, &n);
        if (!name || !name[0] || n < 1 || (prev && strcmp(prev, name) >= 0))
            abort();
        for (int64_t k = 0; k < n; k++)
            if (!isfinite(w[k]) || w[k] < 0)
                abort();
        int64_t n2;
        if (fg_imatrix_find(m, name, &n2) != w || n2 != n)
            abort();
        fg_gguf_tensor t = {.name = name, .n_dims = 3, .type = 0, .ne = {n, 4, 1, 1}};
        const float *tw;
        d.msg[0] = 0;
        if (fg_imatrix_for_tensor(m, &t, &tw, &d) != FG_OK ? !d.msg[0] || tw : tw != w)
            abort();
        if (i == 0 && n == 256)
            check_weights(w);
        prev = name;
    }
    if (fg_imatrix_count(m) == 0)
        abort();
    fg_imatrix_destroy(m);
    return 0;
}
