/* ds4_probe: runs a deepseek4 model's forward pass directly (below the
 * engine) for tests/reference/check_deepseek4.py, which compares what it
 * writes with the numpy reference.
 *
 *   ds4_probe MODEL TOKENS OUT_LOGITS OUT_MTP CHUNK FORMAT [ISA]
 *
 * TOKENS: comma-separated ids. The tokens go through one sequence in chunks
 * of CHUNK (the last may be shorter), logits at every position; OUT_LOGITS
 * and OUT_MTP get [n][V] raw little-endian f32 (the trunk's logits and the
 * MTP block's drafts). FORMAT: f32, f16 or fp8. ISA: scalar, avx2, avx512
 * (default: the best). Exit 0, or 1 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"
#include "engine/model/deepseek4/forward.h"
#include "engine/model/deepseek4/model.h"
#include "kernels/cpu/pool.h"

static int fail(const char *what, const fg_diag *d)
{
    fprintf(stderr, "ds4_probe: %s: %s\n", what, d ? d->msg : "");
    return 1;
}

static int write_f32(const char *path, const float *v, size_t n)
{
    FILE *fp = fopen(path, "wb");
    int ok = fp && fwrite(v, sizeof *v, n, fp) == n;
    if (fp && fclose(fp))
        ok = 0;
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: ds4_probe MODEL TOKENS OUT_LOGITS OUT_MTP CHUNK FORMAT [ISA]\n");
        return 2;
    }
    fg_isa isa = FG_ISA_AUTO;
    if (argc == 8)
        isa = !strcmp(argv[7], "scalar") ? FG_ISA_SCALAR : !strcmp(argv[7], "avx2") ? FG_ISA_AVX2 : FG_ISA_AVX512;
    if (!fg_isa_supported(isa))
        return fail("ISA not available here", NULL);
    const int chunk = atoi(argv[5]);
    const int format = fg_kv_format_parse(argv[6]);
    int n = 1;
    for (const char *p = argv[2]; *p; p++)
        n += *p == ',';
    int32_t *tok = malloc(sizeof *tok * (size_t)n);
    char *s = argv[2];
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)strtol(s, &s, 10), s += *s == ',';
    if (chunk < 1 || format < 0)
        return 2;
    fg_diag d = {{0}};
    fg_gguf_t *g;
    fg_arch_model *am;
    if (fg_gguf_open_file(argv[1], &g, &d) != FG_OK)
        return fail("open", &d);
    if (fg_arch_load(g, &am, &d) != FG_OK)
        return fail("load", &d);
    const fg_ds4_model *m = fg_deepseek4_of(am);
    if (!m)
        return fail("not a deepseek4 model", NULL);
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    if (am->arch->cache(am, (fg_kv_format)format, &geo, &d) != FG_OK)
        return fail("cache", &d);
    const size_t pages = (size_t)(n + FG_KV_PAGE_TOKENS) / FG_KV_PAGE_TOKENS + 1;
    if (fg_kv_store_create(&geo, pages * geo.page_bytes, &kv, &d) != FG_OK)
        return fail("store", &d);
    fg_pool_t *pool = fg_pool_create(2);
    fg_ds4_forward_t *f;
    if (fg_ds4_forward_create(m, &geo, chunk, pool, isa, &f, &d) != FG_OK)
        return fail("forward", &d);
    const size_t V = (size_t)am->n_vocab;
    float *logits = calloc((size_t)n * V, sizeof *logits), *mtp = calloc((size_t)n * V, sizeof *mtp);
    fg_kv_seq q;
    fg_kv_seq_init(&q, n);
    if (fg_kv_seq_reserve(kv, &q, n) != FG_OK)
        return fail("reserve", NULL);
    for (int at = 0; at < n; at += chunk) {
        const int c = n - at < chunk ? n - at : chunk;
        fg_fwd_seq fs = {.kv = &q, .n_tokens = c, .n_logits = c, .logits = logits + (size_t)at * V};
        fg_ds4_forward_set_mtp_out(f, mtp + (size_t)at * V);
        if (fg_ds4_forward_run(f, tok + at, &fs, 1, &d) != FG_OK)
            return fail("run", &d);
    }
    int rc = write_f32(argv[3], logits, (size_t)n * V) || write_f32(argv[4], mtp, (size_t)n * V);
    fg_kv_seq_free(kv, &q);
    fg_ds4_forward_destroy(f);
    fg_pool_destroy(pool);
    fg_kv_store_destroy(kv);
    fg_arch_free(am);
    fg_gguf_close(g);
    free(logits);
    free(mtp);
    free(tok);
    return rc ? fail("write", NULL) : 0;
}
