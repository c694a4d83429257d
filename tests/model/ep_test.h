/* Helpers shared by the expert-parallel serving tests (test_ep_serve,
 * test_ep_nodes, test_ep_v4). */
#ifndef FG_TESTS_EP_TEST_H
#define FG_TESTS_EP_TEST_H

#include "tests/model/model_test.h"

/* Opens a session of e and asks it for a greedy response of max_tokens to prompt. */
static inline void ep_test_start(fg_engine_t *e, const int32_t *prompt, int n_prompt, int max_tokens,
                                 fg_session_t **s)
{
    fg_diag d;
    CHECK(fg_session_create(e, NULL, s) == FG_OK);
    CHECK(fg_session_append(*s, prompt, n_prompt, &d) == FG_OK);
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = max_tokens, .generate = true};
    CHECK_MSG(fg_session_respond(*s, &p, NULL, &d) == FG_OK, "%s", d.msg);
}

/* Run i of a test: a prompt of 2 + (13 i mod 60) tokens (test_tokens, seed + i), a limit of 3 + (i mod
 * (max_gen - 3)) tokens, and want: the greedy tokens plain gives that prompt alone. */
static inline void ep_test_plan(fg_engine_t *plain, int i, int max_gen, unsigned seed, int32_t *prompt,
                                int *n_prompt, int *max_tokens, int32_t *want, int *n_want)
{
    fg_engine_info info;
    fg_engine_get_info(plain, &info);
    *n_prompt = 2 + (i * 13) % 60;
    test_tokens(prompt, *n_prompt, info.n_vocab, seed + (unsigned)i);
    *max_tokens = 3 + i % (max_gen - 3);
    *n_want = greedy_alone(plain, prompt, *n_prompt, *max_tokens, want);
}

#endif
