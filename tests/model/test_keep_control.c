/* keep_control: a response that asks for it releases the text of control
 * tokens (what a tool-call parser needs to see: DeepSeek's markers are control
 * tokens), one that does not releases none, and the ids are the same either
 * way. Tiny model, whose EOS is a control token: a high temperature makes
 * sampled runs reach it; the seeds are fixed, so the run is the same each
 * time. */
#include <string.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "tests/model/model_test.h"

#define MAXGEN 64

typedef struct out {
    int32_t ids[MAXGEN];
    char text[MAXGEN][64];
    uint32_t len[MAXGEN];
    int n;
    fg_finish finish;
} out;

static void run(fg_engine_t *e, uint64_t seed, bool keep, out *o)
{
    fg_session_t *s;
    fg_diag d;
    int32_t prompt[4] = {65, 66, 67, 68};
    CHECK(fg_session_create(e, NULL, &s) == FG_OK);
    CHECK(fg_session_append(s, prompt, 4, &d) == FG_OK);
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = MAXGEN, .generate = true,
                            .keep_control = keep};
    p.sampling.temperature = 50.0f; /* close to uniform over the vocabulary */
    p.sampling.seed = seed;
    CHECK_MSG(fg_session_respond(s, &p, NULL, &d) == FG_OK, "%s", d.msg);
    o->n = 0;
    o->finish = 0;
    fg_event ev[16];
    char text[8192];
    for (double t0 = fg_clock_mono_s(); !o->finish && fg_clock_mono_s() - t0 < 240;) {
        int n = fg_session_poll(s, ev, 16, text, sizeof text);
        for (int i = 0; i < n; i++) {
            if (ev[i].type == FG_EVENT_TOKEN && o->n < MAXGEN) {
                o->ids[o->n] = ev[i].token;
                o->len[o->n] = ev[i].text_len < 64 ? ev[i].text_len : 63;
                memcpy(o->text[o->n], text + ev[i].text_off, o->len[o->n]);
                o->n++;
            }
            if (ev[i].type == FG_EVENT_DONE)
                o->finish = ev[i].finish;
        }
        if (n == 0)
            usleep(1000);
    }
    CHECK(o->finish != 0);
    fg_session_free(s);
}

int main(void)
{
    fg_engine_options opt;
    fg_engine_options_default(&opt);
    opt.model_path = model_path("tiny.gguf");
    opt.kv_format = FG_KV_F32;
    opt.n_threads = 2;
    opt.kv_budget_bytes = (size_t)64 << 20;
    opt.serve = true;
    fg_engine_t *e = open_engine_with(&opt);
    const fg_tokenizer_t *tok = fg_engine_tokenizer(e);
    int32_t eos = fg_tokenizer_eos(tok);
    const char *eos_text = fg_tokenizer_token_text(tok, eos);
    CHECK(eos >= 0 && eos_text && strlen(eos_text) > 0);
    /* (the generated models carry no chat template: the gateway then goes by the vocabulary) */
    const char *tmpl = "x";
    size_t tmpl_len = 1;
    CHECK(fg_engine_chat_template(e, &tmpl, &tmpl_len) == FG_ERR_NOT_FOUND && !tmpl && tmpl_len == 0);

    static out plain, kept;
    int reached = 0;
    for (uint64_t seed = 1; seed <= 40 && reached < 2; seed++) {
        run(e, seed, false, &plain);
        run(e, seed, true, &kept);
        CHECK(plain.n == kept.n && !memcmp(plain.ids, kept.ids, sizeof(int32_t) * (size_t)plain.n));
        for (int i = 0; i < plain.n; i++) {
            const char *b;
            size_t nb;
            CHECK(fg_tokenizer_token_bytes(tok, plain.ids[i], true, &b, &nb) == FG_OK);
            bool control = plain.ids[i] == eos || plain.ids[i] == fg_tokenizer_bos(tok);
            /* a normal token's text is the same in both modes */
            CHECK(kept.len[i] == nb && !memcmp(kept.text[i], b, nb));
            CHECK(control ? plain.len[i] == 0 : plain.len[i] == nb && !memcmp(plain.text[i], b, nb));
        }
        if (kept.finish == FG_FINISH_EOS) {
            reached++;
            CHECK(kept.ids[kept.n - 1] == eos && plain.len[plain.n - 1] == 0);
            CHECK(kept.len[kept.n - 1] == strlen(eos_text) && !memcmp(kept.text[kept.n - 1], eos_text, strlen(eos_text)));
        }
    }
    CHECK_MSG(reached == 2, "only %d of the sampled runs reached EOS", reached);
    fg_engine_close(e);
    return TEST_DONE("test_keep_control");
}
