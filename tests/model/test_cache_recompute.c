/* Decoding with the KV cache equals recomputing the whole sequence.
 *
 * On the tiny model (F32 weights, F32 cache): the logits of token-by-token
 * decoding, of one whole-sequence pass, of passes split into odd chunks and of
 * a fresh recompute of every prefix agree within 1e-5. The only differences
 * allowed are float summation orders, which stay far below that. */
#include <string.h>

#include "tests/model/model_test.h"

#define N 100 /* past 64 tokens a lone decode splits its cache over the threads */

int main(void)
{
    fg_engine_t *e = open_engine("tiny.gguf", FG_KV_F32, 64, 2);
    fg_engine_t *e_small = open_engine("tiny.gguf", FG_KV_F32, 5, 2); /* forces 5-token chunks */
    fg_engine_info info;
    fg_engine_get_info(e, &info);
    const int V = info.n_vocab;
    int32_t toks[N];
    test_tokens(toks, N, V, 7);
    float *all = malloc(sizeof(float) * N * V), *step = malloc(sizeof(float) * N * V);
    float *chunked = malloc(sizeof(float) * N * V), *one = malloc(sizeof(float) * V);
    fg_diag d = {{0}};

    /* one pass over the whole sequence */
    fg_session_t *s;
    CHECK(fg_session_create(e, NULL, &s) == FG_OK);
    CHECK(fg_session_eval(s, toks, N, all, true, &d) == FG_OK);
    CHECK(fg_session_length(s) == N);
    fg_session_free(s);

    /* token by token */
    CHECK(fg_session_create(e, NULL, &s) == FG_OK);
    for (int i = 0; i < N; i++)
        CHECK(fg_session_eval(s, &toks[i], 1, step + (size_t)i * V, false, &d) == FG_OK);
    fg_session_free(s);
    float dstep = max_abs_diff(all, step, (size_t)N * V);
    CHECK_MSG(dstep <= 1e-5f, "token-by-token vs whole pass: max |dlogit| = %g", dstep);

    /* uneven chunks (3, 10, 1, 34) through an engine whose batch limit is 5 */
    CHECK(fg_session_create(e_small, NULL, &s) == FG_OK);
    const int parts[] = {3, 10, 1, 86};
    int at = 0;
    for (size_t p = 0; p < sizeof parts / sizeof *parts; p++) {
        CHECK(fg_session_eval(s, toks + at, parts[p], chunked + (size_t)at * V, true, &d) == FG_OK);
        at += parts[p];
    }
    fg_session_free(s);
    float dchunk = max_abs_diff(all, chunked, (size_t)N * V);
    CHECK_MSG(dchunk <= 1e-5f, "chunked vs whole pass: max |dlogit| = %g", dchunk);

    /* fresh recompute of prefixes, last logits against the cached decode */
    const int lens[] = {1, 2, 17, 33, N};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        CHECK(fg_session_create(e, NULL, &s) == FG_OK);
        CHECK(fg_session_eval(s, toks, lens[k], one, false, &d) == FG_OK);
        float dd = max_abs_diff(one, step + (size_t)(lens[k] - 1) * V, (size_t)V);
        CHECK_MSG(dd <= 1e-5f, "recompute of %d tokens vs cached decode: max |dlogit| = %g", lens[k], dd);
        fg_session_free(s);
    }
    fprintf(stderr, "max |dlogit|: token-by-token %g, chunked %g\n", dstep, dchunk);

    /* logits must carry information: not all equal, finite */
    int finite = 1;
    for (size_t i = 0; i < (size_t)N * V; i++)
        finite &= isfinite(all[i]);
    CHECK(finite);
    CHECK(max_abs_diff(all, all + V, (size_t)V) > 1e-3f);

    free(all);
    free(step);
    free(chunked);
    free(one);
    fg_engine_close(e_small);
    fg_engine_close(e);
    return TEST_DONE("test_cache_recompute");
}
