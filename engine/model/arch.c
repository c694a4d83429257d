/* arch.c: the table of architectures and loading by general.architecture. */
#include "engine/model/arch.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config/base/hash64.h"
#include "engine/model/deepseek2/model.h"
#include "engine/model/deepseek4/model.h"

static const fg_arch *const ARCHS[] = {&fg_arch_deepseek2, &fg_arch_deepseek4};
#define N_ARCHS (sizeof ARCHS / sizeof ARCHS[0])

const fg_arch *fg_arch_find(const char *name, size_t len)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (strlen(ARCHS[i]->name) == len && memcmp(ARCHS[i]->name, name, len) == 0)
            return ARCHS[i];
    return NULL;
}

fg_err fg_arch_load(const fg_gguf_t *g, fg_arch_model **out, fg_diag *diag)
{
    *out = NULL;
    fg_gguf_str name;
    if (fg_gguf_get_str(g, "general.architecture", &name) != FG_OK)
        return fg_diag_set(diag, FG_ERR_MODEL_ARCH, "general.architecture is missing or not a string");
    const fg_arch *a = fg_arch_find(name.ptr, name.len);
    if (!a) {
        char known[256] = "";
        for (size_t i = 0, n = 0; i < N_ARCHS && n < sizeof known; i++)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s'%s'", i ? ", " : "", ARCHS[i]->name);
        return fg_diag_set(diag, FG_ERR_MODEL_ARCH, "architecture '%.*s' is not supported (need %s)",
                           (int)(name.len > 64 ? 64 : name.len), name.ptr, known);
    }
    return a->load(g, out, diag);
}

void fg_arch_free(fg_arch_model *m)
{
    if (m)
        m->arch->free(m);
}

void fg_arch_model_init(fg_arch_model *m, const fg_arch *a, const fg_gguf_t *g)
{
    m->arch = a;
    m->weights_file_mapped = fg_gguf_is_file_mapping(g);
    /* FNV-1a over the header (metadata + tensor directory) and the file size
     * (little-endian): two files with the same header but different sizes are
     * different models. Its start value is not FNV's (a digit short), and
     * stays: cache files record the identity. */
    uint64_t h = fg_fnv1a64_add(1469598103934665603ull, fg_gguf_file_bytes(g), fg_gguf_data_offset(g));
    const uint64_t size = fg_gguf_file_size(g);
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(size >> (8 * i));
    h = fg_fnv1a64_add(h, le, sizeof le);
    snprintf(m->identity, sizeof m->identity, "%016" PRIx64, h);
}
