/* An input's attention form is chosen by its length (FG_SHORT_INPUT,
 * engine.h): a short input attends in the absorbed form, a long one in the
 * decompressed form, however either is cut into steps. Tiny model, F32 cache,
 * scalar kernels (every product independent of the batch size, so equal
 * means bit-equal); the bit comparisons run on one thread.
 *
 *  1. Direct mode, after a 100-token prompt: a 10-token input gives exactly
 *     the logits of its tokens fed one at a time as samples (the absorbed
 *     form); the same tokens at the head of a 64-token input differ from
 *     them (the decompressed form: so 1 can fail) but agree within 1e-4 of
 *     the logit range; that long input gives the same logits in steps of 7.
 *  2. Serving mode: a second turn with a short input (the pending sampled
 *     token and 9 new ones), and a prefill-only response of a short input
 *     followed by a response with no new input at all (its last token
 *     evaluated again, alone), produce the greedy tokens of direct mode fed
 *     the same inputs, and the engine counts those 21 tokens as short input.
 */
#include <string.h>
#include <unistd.h>

#include "tests/model/model_test.h"

#define PROMPT 100
#define SHORT 10
#define LONG FG_SHORT_INPUT
#define GEN 4

static fg_engine_t *open_scalar(int max_batch, int n_threads, bool serve)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path("tiny.gguf");
    o.kv_format = FG_KV_F32;
    o.max_batch_tokens = max_batch;
    o.n_threads = n_threads;
    o.isa = FG_ISA_SCALAR;
    o.kv_budget_bytes = (size_t)64 << 20;
    o.serve = serve;
    return open_engine_with(&o);
}

/* A direct-mode session holding the prompt. */
static fg_session_t *with_prompt(fg_engine_t *e, const int32_t *prompt)
{
    fg_session_t *s = NULL;
    fg_diag d;
    CHECK(fg_session_create(e, NULL, &s) == FG_OK);
    CHECK_MSG(fg_session_eval(s, prompt, PROMPT, NULL, false, &d) == FG_OK, "%s", d.msg);
    return s;
}

static void check_direct(const int32_t *prompt, const int32_t *input, int V)
{
    /* one thread: a lone absorbed token would otherwise split its rows over
     * the threads and merge the parts, another order of the same sums */
    fg_engine_t *e = open_scalar(256, 1, false), *e7 = open_scalar(7, 1, false);
    float *one_call = malloc(sizeof(float) * SHORT * V), *as_samples = malloc(sizeof(float) * SHORT * V);
    float *long_in = malloc(sizeof(float) * LONG * V), *long7 = malloc(sizeof(float) * LONG * V);
    fg_diag d;

    fg_session_t *s = with_prompt(e, prompt);
    CHECK(fg_session_eval(s, input, SHORT, one_call, true, &d) == FG_OK);
    fg_session_free(s);
    s = with_prompt(e, prompt);
    for (int i = 0; i < SHORT; i++)
        CHECK(fg_session_eval_sampled(s, input[i], as_samples + (size_t)i * V, &d) == FG_OK);
    fg_session_free(s);
    CHECK_MSG(memcmp(one_call, as_samples, sizeof(float) * SHORT * V) == 0,
              "a %d-token input is not in the absorbed form (max diff %g from its tokens fed as samples)", SHORT,
              (double)max_abs_diff(one_call, as_samples, (size_t)SHORT * V));

    s = with_prompt(e, prompt);
    CHECK(fg_session_eval(s, input, LONG, long_in, true, &d) == FG_OK);
    fg_session_free(s);
    s = with_prompt(e7, prompt);
    CHECK(fg_session_eval(s, input, LONG, long7, true, &d) == FG_OK);
    fg_session_free(s);
    CHECK_MSG(memcmp(long_in, long7, sizeof(float) * LONG * V) == 0,
              "a %d-token input gives other logits in steps of 7 (max diff %g)", LONG,
              (double)max_abs_diff(long_in, long7, (size_t)LONG * V));

    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < (size_t)SHORT * V; i++) {
        lo = fminf(lo, as_samples[i]);
        hi = fmaxf(hi, as_samples[i]);
    }
    const float diff = max_abs_diff(one_call, long_in, (size_t)SHORT * V);
    CHECK_MSG(diff > 0, "a %d-token input took the absorbed form too (its logits equal the short input's)", LONG);
    CHECK_MSG(diff <= 1e-4f * (hi - lo), "the forms disagree: %g of a logit range of %g", (double)diff,
              (double)(hi - lo));
    fprintf(stderr, "forms: the long input's logits %g from the short input's (range %g)\n", (double)diff,
            (double)(hi - lo));
    free(one_call);
    free(as_samples);
    free(long_in);
    free(long7);
    fg_engine_close(e);
    fg_engine_close(e7);
}

/* Greedy tokens of one serving response (none when !generate); appends `n_in` tokens first. */
static int serve_turn(fg_session_t *s, const int32_t *in, int n_in, bool generate, int32_t *out)
{
    fg_diag d;
    if (n_in)
        CHECK(fg_session_append(s, in, n_in, &d) == FG_OK);
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = GEN, .generate = generate};
    CHECK_MSG(fg_session_respond(s, &p, NULL, &d) == FG_OK, "%s", d.msg);
    int n = 0;
    fg_event ev[16];
    char text[4096];
    for (int spins = 0; spins < 240000; spins++) {
        int k = fg_session_poll(s, ev, 16, text, sizeof text);
        for (int i = 0; i < k; i++) {
            if (ev[i].type == FG_EVENT_TOKEN && n < GEN)
                out[n++] = ev[i].token;
            if (ev[i].type == FG_EVENT_DONE)
                return n;
        }
        if (k <= 0)
            usleep(1000);
    }
    CHECK_MSG(false, "a response did not finish");
    return n;
}

/* Direct mode's greedy tokens after `in` (an input) evaluated in one call. */
static int direct_turn(fg_session_t *s, const int32_t *in, int n_in, int V, int32_t *out)
{
    float *lg = malloc(sizeof(float) * V);
    fg_diag d;
    CHECK(fg_session_eval(s, in, n_in, lg, false, &d) == FG_OK);
    int n = 0;
    for (;;) {
        out[n] = fg_argmax(lg, V);
        if (++n == GEN)
            break;
        CHECK(fg_session_eval_sampled(s, out[n - 1], lg, &d) == FG_OK);
    }
    free(lg);
    return n;
}

static void check_serving(const int32_t *prompt, const int32_t *input, int V)
{
    int32_t want[3][GEN], got[3][GEN], in[1 + SHORT];
    /* direct: the prompt; then [last sampled token + 9 new], twice (the
     * second time served as a prefill, then a response with nothing new) */
    fg_engine_t *e = open_scalar(256, 2, false);
    fg_session_t *s = NULL;
    CHECK(fg_session_create(e, NULL, &s) == FG_OK);
    direct_turn(s, prompt, PROMPT, V, want[0]);
    in[0] = want[0][GEN - 1];
    memcpy(in + 1, input, sizeof(int32_t) * (SHORT - 1));
    direct_turn(s, in, SHORT, V, want[1]);
    in[0] = want[1][GEN - 1];
    direct_turn(s, in, SHORT, V, want[2]);
    fg_session_free(s);
    fg_engine_close(e);

    e = open_scalar(256, 2, true);
    fg_session_params sp = {.tenant = 1, .weight = 1};
    CHECK(fg_session_create(e, &sp, &s) == FG_OK);
    int n0 = serve_turn(s, prompt, PROMPT, true, got[0]);
    int n1 = serve_turn(s, input, SHORT - 1, true, got[1]);
    CHECK(serve_turn(s, input, SHORT - 1, false, got[2]) == 0);
    int n2 = serve_turn(s, NULL, 0, true, got[2]);
    CHECK(n0 == GEN && n1 == GEN && n2 == GEN);
    for (int t = 0; t < 3; t++)
        CHECK_MSG(memcmp(want[t], got[t], sizeof want[t]) == 0, "serving turn %d: greedy tokens differ from direct mode",
                  t + 1);
    /* tokens may agree in either form: the engine's count says which ran */
    fg_engine_stats st;
    fg_engine_get_stats(e, &st);
    CHECK_MSG(st.short_input_tokens == 2 * SHORT + 1 && st.prefill_tokens == PROMPT + 2 * SHORT + 1,
              "%llu of %llu input tokens in the absorbed form, want the two short inputs and the re-evaluated token "
              "(%d of %d)",
              (unsigned long long)st.short_input_tokens, (unsigned long long)st.prefill_tokens, 2 * SHORT + 1,
              PROMPT + 2 * SHORT + 1);
    fg_session_free(s);
    fg_engine_close(e);
}

int main(void)
{
    fg_engine_t *probe = open_scalar(8, 1, false);
    fg_engine_info info;
    fg_engine_get_info(probe, &info);
    fg_engine_close(probe);
    int32_t prompt[PROMPT], input[LONG];
    test_tokens(prompt, PROMPT, info.n_vocab, 5);
    test_tokens(input, LONG, info.n_vocab, 6);
    check_direct(prompt, input, info.n_vocab);
    check_serving(prompt, input, info.n_vocab);
    return TEST_DONE("test_input_forms");
}
