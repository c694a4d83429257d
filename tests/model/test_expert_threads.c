/* The MoE layer gives the same bits whatever the threading: with a pool of two
 * threads a batch's experts run as parallel tasks (one expert per thread at a
 * time), on one thread they run one after another with their products whole;
 * engine/model/deepseek2/forward.c adds the outputs in the same order both ways, so the logits
 * must be byte-identical, not merely close. Checked on F32 weights (where
 * batched == alone exactness matters) and Q8_0, for prefill batches (many
 * tokens per expert) and decode steps of 48 sequences (a few per expert). */
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/deepseek2/forward.h"
#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "tests/model/model_test.h"

#define NSEQ 48
#define MAXLEN 12
#define DECODE 3
#define T 384 /* >= the prompts' total, 312 tokens */

typedef struct seq {
    int32_t tok[MAXLEN + DECODE];
    int len;
    fg_kv_seq kv[2]; /* [0] run with the pool, [1] on one thread */
} seq;

/* One forward pass of every sequence on forward f (side 0 or 1): step < 0,
 * each whole prompt; else decode token `step` after each prompt. Writes each
 * sequence's last logits to logits[NSEQ][V]. */
static void run(fg_forward_t *f, seq *s, int side, int step, float *logits, int V)
{
    int32_t tok[T];
    fg_fwd_seq fs[NSEQ];
    int ntok = 0;
    fg_diag d = {{0}};
    for (int i = 0; i < NSEQ; i++) {
        seq *q = &s[i];
        const int m = step >= 0 ? 1 : q->len;
        memcpy(tok + ntok, step >= 0 ? &q->tok[q->len + step] : q->tok, sizeof(int32_t) * (size_t)m);
        fs[i] = (fg_fwd_seq){.kv = &q->kv[side], .n_tokens = m, .n_logits = 1, .logits = logits + (size_t)i * V};
        ntok += m;
    }
    CHECK_MSG(fg_forward_run(f, tok, fs, NSEQ, &d) == FG_OK, "forward: %s", d.msg);
}

static void check_model(const char *file)
{
    fg_gguf_t *g;
    fg_model *m;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path(file), &g, &d) != FG_OK || fg_model_load(g, &m, &d) != FG_OK) {
        CHECK_MSG(0, "%s: %s", file, d.msg);
        return;
    }
    const int V = m->hp.n_vocab;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    fg_pool_t *pool = fg_pool_create(2);
    fg_forward_t *f[2];
    CHECK(pool != NULL);
    CHECK(fg_kv_geometry_init(&geo, &m->hp, FG_KV_F32, &d) == FG_OK);
    CHECK(fg_kv_store_create(&geo, (size_t)64 << 20, &kv, &d) == FG_OK);
    CHECK(fg_forward_create(m, &geo, T, pool, FG_ISA_AUTO, &f[0], &d) == FG_OK);
    CHECK(fg_forward_create(m, &geo, T, NULL, FG_ISA_AUTO, &f[1], &d) == FG_OK);

    static seq s[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        s[i].len = 1 + (i * 5) % MAXLEN;
        test_tokens(s[i].tok, s[i].len + DECODE, V, 900 + (unsigned)i);
        for (int k = 0; k < 2; k++) {
            CHECK(fg_kv_seq_init(&s[i].kv[k], 64) == FG_OK);
            CHECK(fg_kv_seq_reserve(kv, &s[i].kv[k], s[i].len + DECODE) == FG_OK);
        }
    }
    float *lg[2] = {malloc(sizeof(float) * NSEQ * (size_t)V), malloc(sizeof(float) * NSEQ * (size_t)V)};
    int differ = 0;
    /* step -1: all prompts in one pass; then decode steps of all NSEQ together */
    for (int step = -1; step < DECODE; step++) {
        for (int k = 0; k < 2; k++)
            run(f[k], s, k, step, lg[k], V);
        differ += memcmp(lg[0], lg[1], sizeof(float) * NSEQ * (size_t)V) != 0;
    }
    CHECK_MSG(differ == 0, "%s: logits with the experts on two threads differ from one thread (%d passes)", file,
              differ);
    for (int i = 0; i < NSEQ; i++)
        for (int k = 0; k < 2; k++)
            fg_kv_seq_free(kv, &s[i].kv[k]);
    free(lg[0]);
    free(lg[1]);
    fg_forward_destroy(f[0]);
    fg_forward_destroy(f[1]);
    fg_kv_store_destroy(kv);
    fg_pool_destroy(pool);
    fg_model_free(m);
    fg_gguf_close(g);
}

int main(void)
{
    check_model("tiny.gguf");
    check_model("tiny-q8_0.gguf");
    return TEST_DONE("test_expert_threads");
}
