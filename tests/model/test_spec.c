/* Speculative decoding (engine/serve/spec.h, engine_serve.c): drafts fed
 * after a session's sampled token and verified in the same forward pass.
 *
 * 1. Greedy: the serving engine with drafts gives each session the tokens of
 *    plain decoding (a direct-mode run alone: the prompt, then one sampled
 *    token per pass): deepseek2 Q8_0 (tiny-q8_0), deepseek2 F32 (tiny) and
 *    deepseek4 (v4-tiny, MTP drafts) alone and six batched, two of them
 *    without drafts, and tiny-mtp-q8_0 (drafting with its MTP block) alone.
 *    On AVX-512 and AVX2 a token's products are the same bits in any pass (the Q8_0
 *    matrices are read as panel copies, the F32 rows sum as the tiles do:
 *    kernels/cpu/matmul.h) and so is its attention (every query's cache in
 *    fixed parts folded in order, a lone decode's parts on several threads:
 *    kernels/cpu/mla_attn.h), so a verify pass of several
 *    tokens of one sequence, or a step of several sessions, gives the bits
 *    of passes of one (test_batch_invariant checks the logits below the
 *    engine).
 *    The prompts repeat themselves, so prompt lookup drafts; drafts are
 *    both accepted and rejected (asserted: the counts are deterministic;
 *    the random MTP blocks' drafts are all refused), so the rollback runs:
 *    deepseek2 drops rows, deepseek4 restores its state copy and replays
 *    (draft_replayed > 0).
 * 2. Rollback, below the engine (the backend's forward pass): a sequence fed
 *    [t, d1, d2, d3] with d2 rejected, rolled back as the engine does, then
 *    fed its next token, gives that token's logits bit for bit as a sequence
 *    that never drafted (t, d1 one per pass), deepseek2 and deepseek4. Where
 *    the model has an MTP block, the second sequence also drafts twice
 *    (forward_draft must leave its cache as it was); without one the backend
 *    answers FG_ERR_UNSUPPORTED. With an MTP block the engine drafts with it
 *    in 1 as well (then lookup only where it fills every slot).
 * 3. Sampled: the joint distribution of the first two generated tokens with
 *    drafts (the second is verified against a lookup draft) against the
 *    exact distribution from the model's logits, by a chi-square bound
 *    (below). */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "engine/backend/backend.h"
#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "tests/model/model_test.h"

#define MAXGEN 100 /* long enough for a random model's greedy text to repeat a few n-grams */
#define NRUN 6

typedef struct run {
    fg_session_t *s;
    int32_t prompt[2048];
    int n_prompt;
    bool no_drafts;
    int32_t want[MAXGEN];
    int n_want;
    int32_t got[MAXGEN];
    int n_got;
    bool done, waited;
    fg_event last;
} run;

static void options(fg_engine_options *o, const char *file, bool serve, int max_batch)
{
    fg_engine_options_default(o);
    o->model_path = model_path(file);
    o->kv_format = FG_KV_F32;
    /* Steps of max_batch tokens (128 in every test here; prompts in chunks
     * of as many, the direct-mode reference's too). */
    o->max_batch_tokens = max_batch;
    o->prefill_chunk = max_batch;
    o->prefill_alone_tokens = 0;
    o->n_threads = 2;
    o->kv_budget_bytes = (size_t)64 << 20;
    o->serve = serve;
    o->speculative = true;
    o->spec_drafts = 4;
}

/* A prompt that repeats a phrase of `period` tokens with a change now and then. */
static void repetitive(int32_t *t, int n, int period, int n_vocab, unsigned seed)
{
    int32_t phrase[32];
    test_tokens(phrase, period, n_vocab, seed);
    for (int i = 0; i < n; i++)
        t[i] = phrase[i % period];
    for (int i = period + 3; i < n; i += 2 * period + 1)
        t[i] = (t[i] + 7) % (n_vocab - 3) + 1;
}

static void start(fg_engine_t *e, run *r, const fg_response_params *p0)
{
    fg_diag d;
    CHECK(fg_session_create(e, NULL, &r->s) == FG_OK);
    CHECK(fg_session_append(r->s, r->prompt, r->n_prompt, &d) == FG_OK);
    fg_response_params p = *p0;
    p.no_drafts = r->no_drafts;
    CHECK_MSG(fg_session_respond(r->s, &p, NULL, &d) == FG_OK, "%s", d.msg);
    r->n_got = 0;
    r->done = false;
}

static bool drain_run(void *runs, int i)
{
    run *r = (run *)runs + i;
    if (!r->done)
        fg_test_drain(r->s, r->got, &r->n_got, MAXGEN, &r->done, &r->waited, &r->last);
    return r->done;
}

static bool wait_all(run *runs, int n) { return fg_test_wait_all(runs, n, drain_run); }

/* ---------------------------------------------------------------- 1. greedy */

static void check_greedy(const char *file, int max_batch, bool batched)
{
    fg_engine_options o;
    options(&o, file, false, max_batch);
    fg_engine_t *direct = open_engine_with(&o);
    fg_engine_info info;
    fg_engine_get_info(direct, &info);
    static run runs[NRUN];
    for (int i = 0; i < NRUN; i++) {
        run *r = &runs[i];
        memset(r, 0, sizeof *r);
        r->n_prompt = 40 + 13 * i;
        if (i % 3 == 2)
            test_tokens(r->prompt, r->n_prompt, info.n_vocab, 70 + (unsigned)i); /* no repeats to look up */
        else
            repetitive(r->prompt, r->n_prompt, 5 + i, info.n_vocab, 80 + (unsigned)i);
        r->no_drafts = i == 1 || i == 4;
        r->n_want = greedy_alone(direct, r->prompt, r->n_prompt, MAXGEN, r->want);
    }
    fg_engine_close(direct);

    options(&o, file, true, max_batch);
    fg_engine_t *e = open_engine_with(&o);
    fg_response_params p = {.sampling = fg_sampling_default(), .max_tokens = MAXGEN, .generate = true};
    /* Alone first (one session, nothing beside it), then all six batched. */
    start(e, &runs[0], &p);
    CHECK(wait_all(runs, 1));
    CHECK_MSG(runs[0].n_got == runs[0].n_want && memcmp(runs[0].got, runs[0].want, sizeof(int32_t) * runs[0].n_want) == 0,
              "%s: alone: speculative tokens differ from plain decoding", file);
    fg_session_free(runs[0].s);
    fg_engine_stats st0;
    fg_engine_get_stats(e, &st0);
    /* With an MTP block it drafts (random weights: its drafts are refused, so
     * acceptance is asserted for prompt lookup only) */
    const bool mtp = strstr(file, "mtp") || strstr(file, "v4-");
    if (mtp)
        CHECK_MSG(st0.draft_tokens_mtp > 0, "%s: the MTP block did not draft", file);
    else
        CHECK_MSG(st0.draft_accepted > 0, "%s: prompt lookup on a repetitive prompt: no draft accepted", file);
    CHECK_MSG(runs[0].last.usage.draft_tokens == (int64_t)st0.draft_tokens &&
                  runs[0].last.usage.draft_accepted == (int64_t)st0.draft_accepted,
              "%s: the response's usage counts its drafts", file);

    if (!batched) {
        fg_engine_close(e);
        return;
    }
    for (int i = 0; i < NRUN; i++)
        start(e, &runs[i], &p);
    CHECK(wait_all(runs, NRUN));
    for (int i = 0; i < NRUN; i++) {
        run *r = &runs[i];
        CHECK_MSG(r->last.finish == FG_FINISH_LENGTH || r->last.finish == FG_FINISH_EOS, "%s: run %d finish %d", file,
                  i, (int)r->last.finish);
        CHECK_MSG(r->n_got == r->n_want && memcmp(r->got, r->want, sizeof(int32_t) * r->n_want) == 0,
                  "%s: batched run %d (%s): speculative tokens differ from plain decoding", file, i,
                  r->no_drafts ? "no drafts" : "drafts");
        if (r->no_drafts)
            CHECK(r->last.usage.draft_tokens == 0);
        fg_session_free(r->s);
    }
    fg_engine_stats st;
    fg_engine_get_stats(e, &st);
    printf("%s: drafts %llu (mtp %llu), accepted %llu, replayed %llu\n", file, (unsigned long long)st.draft_tokens,
           (unsigned long long)st.draft_tokens_mtp, (unsigned long long)st.draft_accepted,
           (unsigned long long)st.draft_replayed);
    CHECK_MSG((mtp || st.draft_accepted > st0.draft_accepted) && st.draft_tokens > st.draft_accepted,
              "%s: drafts both accepted and rejected", file);
    if (info.kv_seq_bytes)
        CHECK_MSG(st.draft_replayed > 0, "%s: a stateful cache replays after a rejection", file);
    fg_engine_close(e);
}

/* ---------------------------------------------------------------- 2. rollback */

/* One pass of n tokens on kv; logits of the last into lg (NULL: none). */
static void feed(fg_backend_t *b, fg_kv_seq *kv, const int32_t *t, int n, float *lg)
{
    fg_fwd_seq fs = {.kv = kv, .n_tokens = n, .n_logits = lg ? 1 : 0, .logits = lg, .absorbed = true};
    fg_diag d;
    CHECK_MSG(fg_backend_run(b, t, &fs, 1, &d) == FG_OK, "%s", d.msg);
}

static void check_rollback(const char *file)
{
    fg_gguf_t *g;
    fg_arch_model *m;
    fg_diag d = {{0}};
    CHECK(fg_gguf_open_file(model_path(file), &g, &d) == FG_OK);
    CHECK_MSG(fg_arch_load(g, &m, &d) == FG_OK, "%s", d.msg);
    const fg_arch *a = m->arch;
    fg_kv_geometry geo;
    CHECK(a->cache(m, FG_KV_F32, &geo, &d) == FG_OK);
    fg_kv_store_t *kv;
    CHECK(fg_kv_store_create(&geo, (size_t)32 << 20, &kv, &d) == FG_OK);
    fg_pool_t *pool = fg_pool_create(2);
    fg_backend_t *b;
    fg_backend_options bo = {.kind = FG_BACKEND_CPU, .model = m, .geo = &geo, .kv = kv, .max_tokens = 64,
                             .pool = pool, .isa = FG_ISA_AUTO};
    CHECK_MSG(fg_backend_open(&bo, &b, &d) == FG_OK, "%s", d.msg);
    const int V = m->n_vocab, P = 37;
    int32_t prompt[64], drafts[4];
    test_tokens(prompt, P, V, 9);
    test_tokens(drafts, 4, V, 10); /* [t, d1, d2, d3]: t the sampled token, d2 the rejected draft */
    const int32_t next = (drafts[2] + 1) % V; /* the token sampled instead of d2 */
    float *spec = malloc(sizeof(float) * V * 4), *lg_a = malloc(sizeof(float) * V), *lg_b = malloc(sizeof(float) * V);

    fg_kv_seq sa, sb;
    CHECK(fg_kv_seq_init(&sa, 256) == FG_OK && fg_kv_seq_init(&sb, 256) == FG_OK);
    CHECK(fg_kv_seq_reserve(kv, &sa, 128) == FG_OK && fg_kv_seq_reserve(kv, &sb, 128) == FG_OK);
    /* a: the prompt, then the verification pass, the rollback to [t, d1], and the next token */
    feed(b, &sa, prompt, P, NULL);
    uint8_t *copy = sa.state ? fg_kv_state_copy(kv, sa.state, sa.state_owner) : NULL;
    CHECK(!sa.state || copy);
    fg_fwd_seq fs = {.kv = &sa, .n_tokens = 4, .n_logits = 4, .logits = spec, .absorbed = true};
    CHECK_MSG(fg_backend_run(b, drafts, &fs, 1, &d) == FG_OK, "%s", d.msg);
    if (sa.state) { /* deepseek4: the state back, [t, d1] again */
        memcpy(sa.state, copy, geo.seq_bytes);
        sa.n_tokens = P;
        feed(b, &sa, drafts, 2, NULL);
        fg_kv_state_free(kv, copy, sa.state_owner);
    } else {
        sa.n_tokens = P + 2; /* deepseek2: the rows of d2, d3 dropped */
    }
    feed(b, &sa, &next, 1, lg_a);
    /* b: plain decoding, one token per pass; where the model has an MTP
     * block, two chained drafts first, which by forward_draft's contract
     * leave the cache as it was (so b's logits below are still a's). */
    feed(b, &sb, prompt, P, NULL);
    {
        fg_fwd_seq ds = {.kv = &sb, .n_tokens = 1, .n_logits = 1, .logits = lg_b, .absorbed = true};
        if (fg_backend_can_draft(b)) {
            uint8_t *before = sb.state ? malloc(geo.seq_bytes) : NULL;
            if (before)
                memcpy(before, sb.state, geo.seq_bytes);
            int32_t in = drafts[0];
            for (int k = 0; k < 2; k++) {
                CHECK_MSG(fg_backend_draft(b, &in, &ds, 1, &d) == FG_OK, "%s", d.msg);
                in = fg_argmax(lg_b, V);
                CHECK(in >= 0 && in < V);
            }
            CHECK(sb.n_tokens == P && (!before || memcmp(before, sb.state, geo.seq_bytes) == 0));
            free(before);
        } else {
            CHECK(fg_backend_draft(b, &drafts[0], &ds, 1, &d) == FG_ERR_UNSUPPORTED);
        }
    }
    feed(b, &sb, &drafts[0], 1, NULL);
    feed(b, &sb, &drafts[1], 1, NULL);
    feed(b, &sb, &next, 1, lg_b);
    CHECK(sa.n_tokens == sb.n_tokens);
    const float diff = max_abs_diff(lg_a, lg_b, (size_t)V);
    printf("%s: next-token logits after a rollback vs never drafted: max |d| %g\n", file, (double)diff);
    CHECK_MSG(memcmp(lg_a, lg_b, sizeof(float) * V) == 0, "%s: logits after a rollback differ (max %g)", file,
              (double)diff);
    fg_kv_seq_free(kv, &sa);
    fg_kv_seq_free(kv, &sb);
    free(spec);
    free(lg_a);
    free(lg_b);
    fg_backend_close(b);
    fg_pool_destroy(pool);
    fg_kv_store_destroy(kv);
    fg_arch_free(m);
    fg_gguf_close(g);
}

/* ---------------------------------------------------------------- 3. sampled */

#define TOPK 4
#define NSAMPLE 1600
#define NPAR 16

/* p over the TOPK best logits at temperature temp (the sampler's top-k then softmax), ids into ids. */
static void topk_dist(const float *lg, int V, float temp, int32_t *ids, double *p)
{
    for (int k = 0; k < TOPK; k++) {
        int best = -1;
        for (int i = 0; i < V; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++)
                taken |= ids[j] == i;
            if (!taken && (best < 0 || lg[i] > lg[best]))
                best = i;
        }
        ids[k] = best;
    }
    double sum = 0;
    for (int k = 0; k < TOPK; k++)
        sum += p[k] = exp((double)(lg[ids[k]] - lg[ids[0]]) / temp);
    for (int k = 0; k < TOPK; k++)
        p[k] /= sum;
}

/* The chi-square quantile of df degrees of freedom at upper tail z standard
 * deviations (Wilson-Hilferty: (chi2/df)^(1/3) is close to normal with mean
 * 1 - 2/(9 df) and variance 2/(9 df)). */
static double chi2_quantile(int df, double z)
{
    const double v = 2.0 / (9.0 * df), c = 1.0 - v + z * sqrt(v);
    return df * c * c * c;
}

static void check_sampled(const char *file)
{
    const float temp = 1.5f;
    fg_engine_options o;
    options(&o, file, false, 128);
    fg_engine_t *direct = open_engine_with(&o);
    fg_engine_info info;
    fg_engine_get_info(direct, &info);
    /* A prompt that gives every t1 a lookup draft for t2: it ends with b,
     * and holds "b c y(c)" for every token c, so whatever t1 is sampled the
     * 2-gram (b, t1) occurred and proposes y(t1). For the top-k candidates
     * of t1, y(c) is the model's best t2 after c (from a first pass), so
     * drafts are accepted often and rejected often. */
    const int V = info.n_vocab, P = 3 * (V - 3) + 12;
    static int32_t prompt[2048];
    CHECK(P <= 2048);
    const int32_t anchor = 5;
    float *lg = malloc(sizeof(float) * V);
    int32_t id1[TOPK], id2[TOPK][TOPK];
    double p1[TOPK], p2[TOPK][TOPK];
    fg_diag d;
    fg_session_t *s;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0) {
            test_tokens(prompt, 10, V, 5);
            for (int c = 1; c <= V - 3; c++) {
                prompt[10 + 3 * (c - 1)] = anchor;
                prompt[10 + 3 * (c - 1) + 1] = c;
                prompt[10 + 3 * (c - 1) + 2] = (c * 7 + 3) % (V - 3) + 1;
            }
            prompt[P - 2] = 9;
            prompt[P - 1] = anchor;
        } else {
            for (int a = 0; a < TOPK; a++)
                if (id1[a] >= 1 && id1[a] <= V - 3)
                    prompt[10 + 3 * (id1[a] - 1) + 2] = id2[a][0];
        }
        /* The exact joint distribution of (t1, t2): p(t1) p(t2 | t1) over the top-k. */
        CHECK(fg_session_create(direct, NULL, &s) == FG_OK);
        CHECK(fg_session_eval(s, prompt, P, lg, false, &d) == FG_OK);
        fg_session_free(s);
        topk_dist(lg, V, temp, id1, p1);
        for (int a = 0; a < TOPK; a++) {
            CHECK(fg_session_create(direct, NULL, &s) == FG_OK);
            CHECK(fg_session_eval(s, prompt, P, NULL, false, &d) == FG_OK);
            CHECK(fg_session_eval_sampled(s, id1[a], lg, &d) == FG_OK);
            fg_session_free(s);
            topk_dist(lg, V, temp, id2[a], p2[a]);
        }
    }
    fg_engine_close(direct);

    /* NSAMPLE responses of 3 tokens, seeds 1..NSAMPLE, NPAR at a time: t2 is
     * verified against the lookup draft y(t1). */
    options(&o, file, true, 128);
    fg_engine_t *e = open_engine_with(&o);
    static int count[TOPK][TOPK];
    int other = 0;
    for (int base = 0; base < NSAMPLE; base += NPAR) {
        static run runs[NPAR];
        for (int i = 0; i < NPAR; i++) {
            run *r = &runs[i];
            memset(r, 0, sizeof *r);
            memcpy(r->prompt, prompt, sizeof(int32_t) * P);
            r->n_prompt = P;
            fg_response_params p = {.sampling = {.temperature = temp, .top_k = TOPK, .top_p = 1.0f, .seed = 1 + base + i},
                                    .max_tokens = 3, .generate = true};
            start(e, r, &p);
        }
        CHECK(wait_all(runs, NPAR));
        for (int i = 0; i < NPAR; i++) {
            run *r = &runs[i];
            int a = -1, b = -1;
            for (int k = 0; k < TOPK && r->n_got >= 2; k++)
                if (id1[k] == r->got[0])
                    a = k;
            for (int k = 0; k < TOPK && a >= 0; k++)
                if (id2[a][k] == r->got[1])
                    b = k;
            if (a < 0 || b < 0)
                other++;
            else
                count[a][b]++;
            fg_session_free(r->s);
        }
    }
    fg_engine_stats st;
    fg_engine_get_stats(e, &st);
    fg_engine_close(e);
    CHECK_MSG(other == 0, "%d samples outside the top-%d support", other, TOPK);
    CHECK_MSG(st.draft_tokens > st.draft_accepted && st.draft_accepted > 0,
              "drafts both accepted and rejected (%llu of %llu)", (unsigned long long)st.draft_accepted,
              (unsigned long long)st.draft_tokens);

    /* Pearson's chi-square over the TOPK x TOPK cells, cells expecting fewer
     * than 5 pooled into one (the chi-square approximation needs about 5 per
     * cell). Under the claim (the output is distributed as p) the statistic
     * is chi-square with cells - 1 degrees of freedom; the bound is its
     * quantile at z = 4.26 (upper tail 1e-5), so a correct engine fails with
     * probability 1e-5 at most, and with fixed seeds the outcome is fixed.
     * The test has power: with the rule broken to accept every draft in
     * the support, the statistic measured 153 against this bound of 51. */
    double chi2 = 0, pooled_e = 0, pooled_o = 0;
    int cells = 0;
    for (int a = 0; a < TOPK; a++)
        for (int b = 0; b < TOPK; b++) {
            const double ex = NSAMPLE * p1[a] * p2[a][b];
            if (ex < 5) {
                pooled_e += ex;
                pooled_o += count[a][b];
                continue;
            }
            chi2 += (count[a][b] - ex) * (count[a][b] - ex) / ex;
            cells++;
        }
    if (pooled_e > 0) {
        chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        cells++;
    }
    const double bound = chi2_quantile(cells - 1, 4.26);
    printf("%s: sampled (t1, t2), %d samples, %d cells: chi2 %.2f, bound %.2f; drafts %llu, accepted %llu\n", file,
           NSAMPLE, cells, chi2, bound, (unsigned long long)st.draft_tokens, (unsigned long long)st.draft_accepted);
    CHECK_MSG(cells >= 4 && chi2 < bound, "chi2 %.2f over %d cells exceeds %.2f", chi2, cells, bound);
    free(lg);
}

int main(void)
{
    check_rollback("tiny-q8_0.gguf");
    check_rollback("v4-tiny.gguf");
    check_rollback("tiny-mtp-q8_0.gguf");
    check_greedy("tiny-q8_0.gguf", 128, true);
    check_greedy("tiny.gguf", 128, true);
    check_greedy("v4-tiny.gguf", 128, true);
    check_greedy("tiny-mtp-q8_0.gguf", 128, false);
    check_sampled("tiny-q8_0.gguf");
    return TEST_DONE("test_spec");
}
