/* Prompt tokens attend in the decompressed (MHA) form, sampled tokens in the
 * absorbed form (engine/model/deepseek2/forward.h, fg_fwd_seq.absorbed). Through fg_forward_run
 * on a generated model, two threads:
 *
 *  1. Chunk invariance: one prompt prefilled in one chunk, in chunks of 1, 7
 *     and 64 tokens, and in chunks of 7 batched after another sequence's
 *     chunk, gives byte-identical logits for every token and byte-identical
 *     cache rows for every layer: a prompt token's result depends on what it
 *     is, not on how the prompt was cut or what shared its batch. Byte
 *     equality is checked with the scalar kernels, where every other product
 *     of the pass is also independent of the batch size; with the AVX-512
 *     kernels the dense products take other paths for 1, 2-3 and 4+ tokens
 *     (kernels/cpu/matmul_avx512.c), so there the check is 1e-5 of the
 *     largest logit (the decompression and attention kernels' own invariance
 *     is checked bit for bit in tests/unit/test_mha_attn.c).
 *  2. The two forms agree: the same prompt with its tokens marked sampled
 *     (the absorbed form, the reference) gives logits within 1e-4 of the
 *     largest logit, and the same greedy token at every position; a decode
 *     after either prefill agrees likewise.
 *
 * Runs tiny.gguf (a small MoE model): the scalar kernels with an F32 cache,
 * the best kernels with an F32 and an FP4 cache. On flash-mini the logits of a random-token prompt
 * are not a usable comparison: its MoE routing is a discontinuous top-k, so
 * float-rounding differences (from either form, or from the absorbed form
 * cut into other chunks) flip expert choices and move logits by ~0.5 of
 * their range. flash-mini's attention itself is compared by
 * flashgate-bench-attn --model models/flash-mini.gguf (its first layer's
 * k_b and v_b, both forms on one cache).
 */
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/deepseek2/forward.h"
#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "tests/model/model_test.h"

#define N 100    /* prompt tokens: two pages, the last one partly filled */
#define T 256    /* max batch tokens */
#define OTHER 40 /* the neighbour's prompt */

typedef struct run {
    fg_kv_seq kv;
    float *logits; /* [N][V] */
    float *dec;    /* [V] a decode after the prompt */
} run;

static fg_model *g_m;
static fg_kv_geometry g_geo;
static fg_kv_store_t *g_kv;
static fg_forward_t *g_f;
static int32_t g_tok[N], g_other[OTHER];

/* Prefills the prompt in chunks of `chunk` tokens (marked `sampled`), the
 * neighbour's prompt first in every batch when `neighbour`; then one decode. */
static void prefill(run *r, int chunk, bool sampled, bool neighbour)
{
    const int V = g_m->hp.n_vocab;
    fg_diag d = {{0}};
    r->logits = malloc(sizeof(float) * N * (size_t)V);
    r->dec = malloc(sizeof(float) * (size_t)V);
    fg_kv_seq other;
    CHECK(fg_kv_seq_init(&r->kv, 1024) == FG_OK && fg_kv_seq_reserve(g_kv, &r->kv, N + 1) == FG_OK);
    CHECK(fg_kv_seq_init(&other, 4096) == FG_OK);
    if (neighbour)
        CHECK(fg_kv_seq_reserve(g_kv, &other, OTHER * (N / chunk + 1)) == FG_OK);
    int32_t btok[T];
    float *olog = malloc(sizeof(float) * OTHER * (size_t)V);
    for (int at = 0; at < N; at += chunk) {
        const int m = N - at < chunk ? N - at : chunk;
        fg_fwd_seq fs[2];
        int ns = 0, nt = 0;
        if (neighbour) {
            fs[ns++] = (fg_fwd_seq){.kv = &other, .n_tokens = OTHER, .n_logits = OTHER, .logits = olog};
            memcpy(btok, g_other, sizeof g_other);
            nt = OTHER;
        }
        fs[ns++] = (fg_fwd_seq){.kv = &r->kv, .n_tokens = m, .n_logits = m, .logits = r->logits + (size_t)at * V,
                                .absorbed = sampled};
        memcpy(btok + nt, g_tok + at, sizeof(int32_t) * (size_t)m);
        CHECK_MSG(fg_forward_run(g_f, btok, fs, ns, &d) == FG_OK, "%s", d.msg);
    }
    int32_t next = 0;
    for (int v = 1; v < V; v++)
        next = r->logits[(size_t)(N - 1) * V + v] > r->logits[(size_t)(N - 1) * V + next] ? v : next;
    fg_fwd_seq fs = {.kv = &r->kv, .n_tokens = 1, .n_logits = 1, .logits = r->dec, .absorbed = true};
    CHECK_MSG(fg_forward_run(g_f, &next, &fs, 1, &d) == FG_OK, "%s", d.msg);
    free(olog);
    fg_kv_seq_free(g_kv, &other);
}

static void run_free(run *r)
{
    free(r->logits);
    free(r->dec);
    fg_kv_seq_free(g_kv, &r->kv);
}

/* Rows [0, N] of every layer of a's and b's caches: equal bytes? */
static bool same_rows(const run *a, const run *b)
{
    for (int il = 0; il < g_m->hp.n_layer; il++)
        for (int t = 0; t <= N; t++)
            if (memcmp(fg_kv_row(&g_geo, &a->kv, il, t), fg_kv_row(&g_geo, &b->kv, il, t), g_geo.row_bytes) != 0)
                return false;
    return true;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        b = x[i] > x[b] ? i : b;
    return b;
}

static void check_model(const char *path, fg_kv_format fmt, fg_isa isa)
{
    fg_gguf_t *g;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(path, &g, &d) != FG_OK || fg_model_load(g, &g_m, &d) != FG_OK) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        exit(1);
    }
    const int V = g_m->hp.n_vocab;
    fg_pool_t *pool = fg_pool_create(2);
    CHECK(fg_kv_geometry_init(&g_geo, &g_m->hp, fmt, &d) == FG_OK);
    CHECK(fg_kv_store_create(&g_geo, (size_t)256 << 20, &g_kv, &d) == FG_OK);
    CHECK(fg_forward_create(g_m, &g_geo, T, pool, isa, &g_f, &d) == FG_OK);
    test_tokens(g_tok, N, V, 11);
    test_tokens(g_other, OTHER, V, 12);

    /* 1. chunk invariance */
    run whole, parts[4];
    prefill(&whole, T, false, false);
    const int chunks[] = {1, 7, 64, 7};
    for (int k = 0; k < 4; k++) {
        prefill(&parts[k], chunks[k], false, k == 3);
        if (isa == FG_ISA_SCALAR) {
            CHECK_MSG(memcmp(whole.logits, parts[k].logits, sizeof(float) * N * (size_t)V) == 0,
                      "%s %s: logits of a prompt prefilled in chunks of %d%s differ from one chunk", path,
                      fg_kv_format_name(fmt), chunks[k], k == 3 ? " after a neighbour" : "");
            CHECK_MSG(same_rows(&whole, &parts[k]), "%s %s: cache rows of a prompt prefilled in chunks of %d%s differ",
                      path, fg_kv_format_name(fmt), chunks[k], k == 3 ? " after a neighbour" : "");
        } else {
            float lmax = 0.0f;
            for (size_t i = 0; i < (size_t)N * V; i++)
                lmax = fabsf(whole.logits[i]) > lmax ? fabsf(whole.logits[i]) : lmax;
            const float err = max_abs_diff(whole.logits, parts[k].logits, (size_t)N * V) / lmax;
            CHECK_MSG(err <= 1e-5f, "%s %s %s: chunks of %d%s: max |dlogit| / max |logit| = %g", path,
                      fg_kv_format_name(fmt), fg_isa_name(isa), chunks[k], k == 3 ? " after a neighbour" : "", err);
        }
        run_free(&parts[k]);
    }

    /* 2. the decompressed form against the absorbed one */
    run ref;
    prefill(&ref, T, true, false);
    float lmax = 0.0f;
    for (size_t i = 0; i < (size_t)N * V; i++)
        lmax = fabsf(ref.logits[i]) > lmax ? fabsf(ref.logits[i]) : lmax;
    const float err = max_abs_diff(whole.logits, ref.logits, (size_t)N * V) / lmax;
    const float err_dec = max_abs_diff(whole.dec, ref.dec, (size_t)V) / lmax;
    int greedy_differ = argmax(whole.dec, V) != argmax(ref.dec, V);
    for (int t = 0; t < N; t++)
        greedy_differ += argmax(whole.logits + (size_t)t * V, V) != argmax(ref.logits + (size_t)t * V, V);
    CHECK_MSG(err <= 1e-4f && err_dec <= 1e-4f,
              "%s %s %s: decompressed vs absorbed: max |dlogit| / max |logit| = %g (prompt), %g (decode after)", path,
              fg_kv_format_name(fmt), fg_isa_name(isa), err, err_dec);
    CHECK_MSG(greedy_differ == 0, "%s %s %s: %d greedy tokens differ between the forms", path, fg_kv_format_name(fmt),
              fg_isa_name(isa), greedy_differ);
    fprintf(stderr, "  %s %s %s: decompressed vs absorbed: max |dlogit| / max |logit| %.3g (prompt), %.3g (decode "
                    "after); %d of %d greedy tokens differ\n",
            path, fg_kv_format_name(fmt), fg_isa_name(isa), err, err_dec, greedy_differ, N + 1);
    run_free(&ref);
    run_free(&whole);

    fg_forward_destroy(g_f);
    fg_kv_store_destroy(g_kv);
    fg_pool_destroy(pool);
    fg_model_free(g_m);
    fg_gguf_close(g);
}

int main(void)
{
    check_model(model_path("tiny.gguf"), FG_KV_F32, FG_ISA_SCALAR);
    check_model(model_path("tiny.gguf"), FG_KV_F32, FG_ISA_AUTO);
    check_model(model_path("tiny.gguf"), FG_KV_FP4, FG_ISA_AUTO);
    return TEST_DONE("test_prefill_forms");
}
