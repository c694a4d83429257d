/* ds2_mtp_probe: runs a deepseek2 model with an MTP block through its forward
 * pass directly (below the engine) for tests/reference/check_deepseek2_mtp.py,
 * which compares what it writes with the numpy reference.
 *
 *   ds2_mtp_probe MODEL TOKENS OUT_LOGITS OUT_MTP CHUNK FORMAT
 *
 * TOKENS: comma-separated ids, through one sequence in chunks of CHUNK (the
 * last may be shorter; chunks of one token in the absorbed form, longer ones
 * decompressed), logits at every position. OUT_LOGITS and OUT_MTP get [n][V]
 * raw little-endian f32: the trunk's logits and the MTP block's (row p: the
 * draft of token p + 1). FORMAT: f32, f16 or fp8 (the cache). Exit 0, or 1
 * with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/deepseek2/forward.h"
#include "engine/model/deepseek2/model.h"
#include "kernels/cpu/pool.h"
#include "tests/model/probe.h"

static int fail(const char *what, const fg_diag *d) { return probe_fail("ds2_mtp_probe", what, d); }

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: ds2_mtp_probe MODEL TOKENS OUT_LOGITS OUT_MTP CHUNK f32|f16|fp8\n");
        return 2;
    }
    const int chunk = atoi(argv[5]);
    fg_kv_format fmt = strcmp(argv[6], "f16") == 0 ? FG_KV_F16 : strcmp(argv[6], "fp8") == 0 ? FG_KV_FP8 : FG_KV_F32;
    int n = 0, cap = 64;
    int32_t *tok = malloc(sizeof *tok * (size_t)cap);
    for (char *p = argv[2]; tok && *p;) {
        if (n == cap && !(tok = realloc(tok, sizeof *tok * (size_t)(cap *= 2))))
            break;
        tok[n++] = (int32_t)strtol(p, &p, 10);
        if (*p == ',')
            p++;
    }
    if (!tok || n == 0 || chunk < 1)
        return fail("arguments", NULL);

    fg_diag d = {{0}};
    fg_gguf_t *g;
    fg_model *m;
    if (fg_gguf_open_file(argv[1], &g, &d) || fg_model_load(g, &m, &d))
        return fail("load", &d);
    const int V = m->hp.n_vocab;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    fg_forward_t *f;
    fg_pool_t *pool = fg_pool_create(2);
    if (fg_kv_geometry_init(&geo, &m->hp, fmt, &d) || fg_kv_store_create(&geo, (size_t)64 << 20, &kv, &d) ||
        fg_forward_create(m, &geo, chunk, pool, FG_ISA_AUTO, &f, &d))
        return fail("setup", &d);
    float *logits = malloc(sizeof(float) * (size_t)n * V), *mtp = malloc(sizeof(float) * (size_t)n * V);
    fg_kv_seq q;
    fg_kv_seq_init(&q, n);
    if (!logits || !mtp || fg_kv_seq_reserve(kv, &q, n))
        return fail("memory", NULL);
    for (int at = 0; at < n; at += chunk) {
        const int c = n - at < chunk ? n - at : chunk;
        fg_fwd_seq s = {.kv = &q, .n_tokens = c, .n_logits = c, .logits = logits + (size_t)at * V,
                        .absorbed = c == 1};
        fg_forward_set_mtp_out(f, mtp + (size_t)at * V);
        if (fg_forward_run(f, tok + at, &s, 1, &d))
            return fail("run", &d);
    }
    if (probe_write_f32(argv[3], logits, (size_t)n * V) || probe_write_f32(argv[4], mtp, (size_t)n * V))
        return fail("write", NULL);
    fg_kv_seq_free(kv, &q);
    fg_forward_destroy(f);
    fg_kv_store_destroy(kv);
    fg_pool_destroy(pool);
    fg_model_free(m);
    fg_gguf_close(g);
    free(logits);
    free(mtp);
    free(tok);
    return 0;
}
