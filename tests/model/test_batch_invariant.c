/* A token's logits are the same bits in any batch (deepseek2, the forward
 * pass directly, 2 threads): a sequence's prompt and then its decode tokens
 * one per pass alone, against the same sequence beside other sequences in
 * every pass (other prompts, other decodes, a several-token input), compared
 * with memcmp; Q8_0 on the best ISA and the scalar one, F32, and 8 heads
 * (mini8-q8_0). The prompt is long enough that a lone decode deals its
 * cache's parts to the threads (forward.c, attn_args.split). Speculative
 * decoding's batched greedy check (test_spec) relies on it. A lone decode
 * that split its cache over the threads and merged the parts by one softmax
 * failed here (tiny F32: up to 5e-6 of logit; mini8-q8_0: 0.1). */
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/deepseek2/forward.h"
#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "tests/model/model_test.h"

#define PROMPT 1060 /* a lone decode's cache in 9 parts of FG_MLA_ATTN_PART_ROWS: 2 rounds on 2 threads */
#define DECODE 8
#define NOTHER 3
#define OTHER 200 /* tokens of each other sequence, at most */

static void check_model(const char *file, fg_isa isa)
{
    fg_gguf_t *g;
    fg_model *m;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path(file), &g, &d) != FG_OK || fg_model_load(g, &m, &d) != FG_OK) {
        fprintf(stderr, "%s\n", d.msg);
        exit(1);
    }
    const int V = m->hp.n_vocab, T = 2048;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    fg_pool_t *pool = fg_pool_create(2);
    fg_forward_t *f;
    CHECK(fg_kv_geometry_init(&geo, &m->hp, FG_KV_F32, &d) == FG_OK);
    CHECK(fg_kv_store_create(&geo, (size_t)64 << 20, &kv, &d) == FG_OK);
    CHECK(fg_forward_create(m, &geo, T, pool, isa, &f, &d) == FG_OK);

    int32_t tok[PROMPT + DECODE], other[NOTHER][OTHER];
    test_tokens(tok, PROMPT + DECODE, V, 7);
    for (int k = 0; k < NOTHER; k++)
        test_tokens(other[k], OTHER, V, 100 + (unsigned)k);
    fg_kv_seq alone, beside, o[NOTHER];
    CHECK(fg_kv_seq_init(&alone, 2048) == FG_OK && fg_kv_seq_init(&beside, 2048) == FG_OK);
    CHECK(fg_kv_seq_reserve(kv, &alone, PROMPT + DECODE) == FG_OK);
    CHECK(fg_kv_seq_reserve(kv, &beside, PROMPT + DECODE) == FG_OK);
    for (int k = 0; k < NOTHER; k++) {
        CHECK(fg_kv_seq_init(&o[k], 1024) == FG_OK);
        CHECK(fg_kv_seq_reserve(kv, &o[k], OTHER) == FG_OK);
    }
    float *want = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * (size_t)T * V);

    /* The prompts: alone, then beside the other sequences' prompts of other lengths. */
    fg_fwd_seq one = {.kv = &alone, .n_tokens = PROMPT, .n_logits = 1, .logits = want};
    CHECK(fg_forward_run(f, tok, &one, 1, &d) == FG_OK);
    int32_t btok[2048];
    fg_fwd_seq fs[NOTHER + 1];
    int n = 0, ntok = 0, olen[NOTHER];
    for (int k = 0; k < NOTHER; k++) {
        olen[k] = 40 + 30 * k;
        memcpy(btok + ntok, other[k], sizeof(int32_t) * olen[k]);
        fs[n++] = (fg_fwd_seq){.kv = &o[k], .n_tokens = olen[k], .n_logits = 1, .logits = got + (size_t)k * V};
        ntok += olen[k];
        if (k == 0) {
            memcpy(btok + ntok, tok, sizeof(int32_t) * PROMPT);
            fs[n++] = (fg_fwd_seq){.kv = &beside, .n_tokens = PROMPT, .n_logits = 1, .logits = got + (size_t)3 * V};
            ntok += PROMPT;
        }
    }
    CHECK(ntok <= T);
    CHECK(fg_forward_run(f, btok, fs, n, &d) == FG_OK);
    CHECK_MSG(memcmp(want, got + (size_t)3 * V, sizeof(float) * V) == 0, "%s: prompt logits differ beside others (max %g)",
              file, max_abs_diff(want, got + (size_t)3 * V, V));

    /* Decode steps: alone one token a pass; beside, step s puts the sequence
     * among decodes of the others and (odd steps) a several-token input. */
    for (int s = 0; s < DECODE; s++) {
        one = (fg_fwd_seq){.kv = &alone, .n_tokens = 1, .n_logits = 1, .logits = want, .absorbed = true};
        CHECK(fg_forward_run(f, tok + PROMPT + s, &one, 1, &d) == FG_OK);
        n = ntok = 0;
        int mine = 0;
        for (int k = 0; k < NOTHER; k++) {
            const int len = (s & 1) && k == 2 ? 3 : 1;
            if (k == s % NOTHER) {
                mine = n;
                btok[ntok++] = tok[PROMPT + s];
                fs[n] = (fg_fwd_seq){.kv = &beside, .n_tokens = 1, .n_logits = 1, .logits = got + (size_t)n * V,
                                     .absorbed = true};
                n++;
            }
            memcpy(btok + ntok, other[k] + olen[k], sizeof(int32_t) * len);
            fs[n] = (fg_fwd_seq){.kv = &o[k], .n_tokens = len, .n_logits = 1, .logits = got + (size_t)n * V,
                                 .absorbed = true};
            n++;
            ntok += len;
            olen[k] += len;
        }
        CHECK(fg_forward_run(f, btok, fs, n, &d) == FG_OK);
        CHECK_MSG(memcmp(want, fs[mine].logits, sizeof(float) * V) == 0,
                  "%s: decode step %d logits differ beside others (max %g)", file, s,
                  max_abs_diff(want, fs[mine].logits, V));
    }

    fg_kv_seq_free(kv, &alone);
    fg_kv_seq_free(kv, &beside);
    for (int k = 0; k < NOTHER; k++)
        fg_kv_seq_free(kv, &o[k]);
    free(want);
    free(got);
    fg_forward_destroy(f);
    fg_kv_store_destroy(kv);
    fg_pool_destroy(pool);
    fg_model_free(m);
    fg_gguf_close(g);
}

int main(void)
{
    check_model("tiny-q8_0.gguf", FG_ISA_AUTO);
    check_model("tiny-q8_0.gguf", FG_ISA_SCALAR);
    check_model("tiny.gguf", FG_ISA_AUTO);
    check_model("mini8-q8_0.gguf", FG_ISA_AUTO);
    return TEST_DONE("test_batch_invariant");
}
