/* Batched equals alone, at the level of logits: 64 sequences of different
 * lengths go through fg_forward_run together (prefill chunks of several
 * sequences in one pass, then decode steps of all 64 in one pass) and each
 * sequence's logits match a run of that sequence alone within 1e-4 (F32
 * weights and cache; the only difference is summation order in batched
 * products). */
#include <string.h>

#include "engine/kv/kv_store.h"
#include "engine/model/deepseek2/forward.h"
#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "tests/model/model_test.h"

#define NSEQ 64
#define MAXLEN 80
#define DECODE 6

typedef struct seq {
    int32_t tok[MAXLEN + DECODE];
    int len;
    fg_kv_seq kv;
} seq;

int main(void)
{
    fg_gguf_t *g;
    fg_model *m;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path("tiny.gguf"), &g, &d) != FG_OK || fg_model_load(g, &m, &d) != FG_OK) {
        fprintf(stderr, "%s\n", d.msg);
        return 1;
    }
    const int V = m->hp.n_vocab, T = 512;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    fg_pool_t *pool = fg_pool_create(2);
    fg_forward_t *f;
    CHECK(fg_kv_geometry_init(&geo, &m->hp, FG_KV_F32, &d) == FG_OK);
    CHECK(fg_kv_store_create(&geo, (size_t)256 << 20, &kv, &d) == FG_OK);
    CHECK(fg_forward_create(m, &geo, T, pool, FG_ISA_AUTO, &f, &d) == FG_OK);

    static seq a[NSEQ], b[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        a[i].len = 1 + (i * 29) % MAXLEN;
        test_tokens(a[i].tok, a[i].len + DECODE, V, 500 + (unsigned)i);
        b[i] = a[i];
        CHECK(fg_kv_seq_init(&a[i].kv, 1024) == FG_OK && fg_kv_seq_init(&b[i].kv, 1024) == FG_OK);
        CHECK(fg_kv_seq_reserve(kv, &a[i].kv, a[i].len + DECODE) == FG_OK);
        CHECK(fg_kv_seq_reserve(kv, &b[i].kv, b[i].len + DECODE) == FG_OK);
    }
    float *alone = malloc(sizeof(float) * (MAXLEN + DECODE) * V);
    float *batched = malloc(sizeof(float) * (size_t)T * V);
    float worst = 0;

    /* Prefill: batches packed with whole sequences up to T tokens, logits of every token. */
    int32_t btok[512];
    fg_fwd_seq fs[NSEQ];
    for (int i = 0; i < NSEQ;) {
        int n = 0, ntok = 0;
        while (i + n < NSEQ && ntok + a[i + n].len <= T) {
            seq *s = &a[i + n];
            memcpy(btok + ntok, s->tok, sizeof(int32_t) * s->len);
            fs[n] = (fg_fwd_seq){.kv = &s->kv, .n_tokens = s->len, .n_logits = s->len,
                                 .logits = batched + (size_t)ntok * V};
            ntok += s->len;
            n++;
        }
        CHECK(fg_forward_run(f, btok, fs, n, &d) == FG_OK);
        for (int k = 0; k < n; k++) {
            seq *s = &b[i + k];
            fg_fwd_seq one = {.kv = &s->kv, .n_tokens = s->len, .n_logits = s->len, .logits = alone};
            CHECK(fg_forward_run(f, s->tok, &one, 1, &d) == FG_OK);
            float dd = max_abs_diff(alone, fs[k].logits, (size_t)s->len * V);
            worst = dd > worst ? dd : worst;
        }
        i += n;
    }
    /* Decode: all 64 sequences, one token each, in one pass per step. */
    for (int step = 0; step < DECODE; step++) {
        for (int i = 0; i < NSEQ; i++) {
            btok[i] = a[i].tok[a[i].len + step];
            fs[i] = (fg_fwd_seq){.kv = &a[i].kv, .n_tokens = 1, .n_logits = 1, .logits = batched + (size_t)i * V};
        }
        CHECK(fg_forward_run(f, btok, fs, NSEQ, &d) == FG_OK);
        for (int i = 0; i < NSEQ; i++) {
            fg_fwd_seq one = {.kv = &b[i].kv, .n_tokens = 1, .n_logits = 1, .logits = alone};
            CHECK(fg_forward_run(f, &b[i].tok[b[i].len + step], &one, 1, &d) == FG_OK);
            float dd = max_abs_diff(alone, batched + (size_t)i * V, (size_t)V);
            worst = dd > worst ? dd : worst;
        }
    }
    fprintf(stderr, "batched vs alone over %d sequences: max |dlogit| = %g\n", NSEQ, worst);
    CHECK_MSG(worst <= 1e-4f, "max |dlogit| %g > 1e-4", worst);

    /* Misuse is refused, not crashed on. */
    fg_fwd_seq bad = {.kv = &a[0].kv, .n_tokens = T + 1, .n_logits = 0};
    CHECK(fg_forward_run(f, btok, &bad, 1, &d) == FG_ERR_INVALID_ARG);
    bad = (fg_fwd_seq){.kv = &a[0].kv, .n_tokens = 1, .n_logits = 1, .logits = batched};
    int32_t oov = V;
    CHECK(fg_forward_run(f, &oov, &bad, 1, &d) == FG_ERR_TOKEN_ID);

    for (int i = 0; i < NSEQ; i++) {
        fg_kv_seq_free(kv, &a[i].kv);
        fg_kv_seq_free(kv, &b[i].kv);
    }
    CHECK(fg_kv_store_pages_free(kv) == fg_kv_store_pages_total(kv)); /* every page came back */
    free(alone);
    free(batched);
    fg_forward_destroy(f);
    fg_kv_store_destroy(kv);
    fg_pool_destroy(pool);
    fg_model_free(m);
    fg_gguf_close(g);
    return TEST_DONE("test_batch_logits");
}
