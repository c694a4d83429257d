/* The serving engine with expert parallelism: 12 sessions served at once by
 * 2, 3 and 4 in-process ranks (threads; sessions spread over the ranks,
 * experts sharded: 3 ranks own the 16 experts unevenly, 6/5/5, and with 2
 * replicas and a receive capacity of 16 rows every exchange of a big step
 * runs in rounds; strided with replicas for 4) produce exactly the greedy
 * tokens each session produces alone on the plain engine; the direct mode
 * over 2 ranks does too. Engine options whose placement or capacity does
 * not fit the model are refused with the topology key named, and the NCCL
 * transport without NCCL or a GPU fails cleanly. Tiny model, F32 weights
 * and cache. */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "engine/model/gguf.h"
#include "engine/model/deepseek2/model.h"
#include "kernels/cpu/vecops.h"
#include "tests/model/ep_test.h"

#define N 12
#define MAXGEN 10

typedef struct run {
    fg_session_t *s;
    int32_t prompt[64];
    int n_prompt, max_tokens;
    int32_t want[MAXGEN], got[MAXGEN];
    int n_want, n_got;
    bool done;
} run;

static fg_err open_ep(int ranks, int redundant, int placement, int64_t cap, bool serve, fg_engine_t **e,
                      fg_diag *d)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path("tiny.gguf");
    o.kv_format = FG_KV_F32;
    o.max_batch_tokens = 128;
    o.prefill_chunk = 32;
    o.n_threads = 2;
    o.kv_budget_bytes = (size_t)32 << 20;
    o.serve = serve;
    o.ep_ranks = ranks;
    o.ep_redundant = redundant;
    o.ep_placement = placement;
    o.ep_recv_capacity_rows = cap;
    return fg_engine_open(&o, e, d);
}

/* Routed picks one token makes over the whole model: k experts in each MoE layer. */
static uint64_t picks_per_token(void)
{
    fg_gguf_t *g;
    fg_model *m;
    fg_diag d;
    uint64_t n = 0;
    if (fg_gguf_open_file(model_path("tiny.gguf"), &g, &d) != FG_OK)
        return 0;
    if (fg_model_load(g, &m, &d) == FG_OK) {
        for (int il = 0; il < m->hp.n_layer; il++)
            n += m->layers[il].is_moe ? (uint64_t)m->hp.n_expert_used : 0;
        fg_model_free(m);
    }
    fg_gguf_close(g);
    return n;
}

static void serve_all(fg_engine_t *e, run *runs, const char *what)
{
    for (int i = 0; i < N; i++) {
        run *r = &runs[i];
        ep_test_start(e, r->prompt, r->n_prompt, r->max_tokens, &r->s);
        r->n_got = 0;
        r->done = false;
    }
    /* Backstop only (sanitizer builds are slow); ctest's timeout is the real one. */
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 240;) {
        int left = 0;
        for (int i = 0; i < N; i++) {
            fg_event ev[16];
            char text[4096];
            int n;
            while (!runs[i].done && (n = fg_session_poll(runs[i].s, ev, 16, text, sizeof text)) > 0)
                for (int k = 0; k < n; k++) {
                    if (ev[k].type == FG_EVENT_TOKEN && runs[i].n_got < MAXGEN)
                        runs[i].got[runs[i].n_got++] = ev[k].token;
                    if (ev[k].type == FG_EVENT_DONE)
                        runs[i].done = true;
                }
            left += !runs[i].done;
        }
        if (!left)
            break;
        usleep(1000);
    }
    for (int i = 0; i < N; i++) {
        const run *r = &runs[i];
        CHECK_MSG(r->done && r->n_got == r->n_want && memcmp(r->got, r->want, sizeof(int32_t) * (size_t)r->n_got) == 0,
                  "%s: session %d: %d tokens, alone %d, or they differ", what, i, r->n_got, r->n_want);
        fg_session_free(r->s);
    }
}

int main(void)
{
    fg_engine_t *plain;
    fg_diag d = {{0}};
    CHECK(open_ep(0, 0, 0, 0, false, &plain, &d) == FG_OK);
    fg_engine_info info;
    static run runs[N];
    for (int i = 0; i < N; i++)
        ep_test_plan(plain, i, MAXGEN, 300, runs[i].prompt, &runs[i].n_prompt, &runs[i].max_tokens, runs[i].want,
                     &runs[i].n_want);
    fg_engine_close(plain);

    /* Direct mode over 2 ranks (sessions alternate ranks). */
    fg_engine_t *e;
    fg_err err = open_ep(2, 0, 0, 0, false, &e, &d);
    CHECK_MSG(err == FG_OK, "%s", d.msg);
    if (err == FG_OK) {
        fg_engine_get_info(e, &info);
        CHECK(info.n_threads == 2); /* one per rank */
        for (int i = 0; i < N; i++) {
            int32_t got[MAXGEN];
            const int n = greedy_alone(e, runs[i].prompt, runs[i].n_prompt, runs[i].max_tokens, got);
            CHECK_MSG(n == runs[i].n_want && memcmp(got, runs[i].want, sizeof(int32_t) * (size_t)n) == 0,
                      "direct, 2 ranks: session %d differs", i);
        }
        fg_engine_close(e);
    }

    /* Serving: 2 ranks contiguous, 4 ranks strided with replicas. */
    const struct {
        int ranks, redundant, placement;
        int64_t cap;
        const char *what;
    } cfg[] = {{2, 0, 0, 0, "serving, 2 ranks"},
               {3, 0, 0, 0, "serving, 3 ranks (6/5/5 experts)"},
               {3, 2, 0, 16, "serving, 3 ranks, 2 replicas, receive capacity 16 rows"},
               {4, 4, 1, 0, "serving, 4 ranks strided, 4 replicas"}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        err = open_ep(cfg[c].ranks, cfg[c].redundant, cfg[c].placement, cfg[c].cap, true, &e, &d);
        CHECK_MSG(err == FG_OK, "%s: %s", cfg[c].what, d.msg);
        if (err != FG_OK)
            continue;
        serve_all(e, runs, cfg[c].what);
        fg_engine_stats st;
        fg_engine_get_stats(e, &st);
        /* Every evaluated token's picks are counted once, whichever rank routed it. */
        uint64_t tokens[64] = {0}, sum = 0;
        CHECK(fg_engine_expert_tokens(e, tokens, 64) == 16);
        for (int x = 0; x < 16; x++)
            sum += tokens[x];
        CHECK_MSG(sum > 0 && sum == (st.prefill_tokens + st.decode_tokens) * picks_per_token(),
                  "%s: %llu expert picks for %llu tokens", cfg[c].what, (unsigned long long)sum,
                  (unsigned long long)(st.prefill_tokens + st.decode_tokens));
        fprintf(stderr, "%s: %llu steps for %d sessions\n", cfg[c].what, (unsigned long long)st.steps, N);
        fg_engine_close(e);
    }

    /* Placements that do not fit the tiny model's 16 experts. */
    CHECK(open_ep(17, 0, 0, 0, true, &e, &d) == FG_ERR_CONFIG &&
          strstr(d.msg, "topology.ranks (17) is more than the model's 16 experts"));
    CHECK(open_ep(4, 2, 0, 0, true, &e, &d) == FG_ERR_CONFIG && strstr(d.msg, "topology.redundant_experts (2)") &&
          strstr(d.msg, "use 0 (no replicas) or 4"));
    CHECK_MSG(open_ep(2, 0, 0, 3, true, &e, &d) == FG_ERR_CONFIG &&
                  strstr(d.msg, "topology.recv_capacity_rows (3) is too small") && strstr(d.msg, "at least 4"),
              "%s", d.msg);
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path("tiny.gguf");
    o.ep_hot_experts = "3,99"; /* checked on one rank too */
    CHECK(fg_engine_open(&o, &e, &d) == FG_ERR_CONFIG && strstr(d.msg, "topology.hot_experts: entry 2 ('99')"));
    o.ep_hot_experts = NULL;
    o.ep_experts_per_rank = 8; /* one rank holds all 16 */
    CHECK(fg_engine_open(&o, &e, &d) == FG_ERR_CONFIG && strstr(d.msg, "topology.experts_per_rank (8)"));
    o.ep_experts_per_rank = 0;
    o.ep_ranks = 2;
    o.ep_transport = 1;
    fg_err nccl_err = fg_engine_open(&o, &e, &d);
    if (nccl_err == FG_OK)
        fg_engine_close(e); /* a GPU machine: two GPUs joined (test_ep_nodes --nccl checks the tokens) */
    else /* no NCCL in the build, or no GPU: a clear refusal, never a hang */
        CHECK_MSG((nccl_err == FG_ERR_UNSUPPORTED && strstr(d.msg, "nccl")) || nccl_err == FG_ERR_IO, "%s: %s",
                  fg_err_name(nccl_err), d.msg);
    fprintf(stderr, "nccl, 2 ranks: %s %s\n", fg_err_name(nccl_err), nccl_err ? d.msg : "");
    o.ep_transport = 0;
    o.ep_placement = 7;
    CHECK(fg_engine_open(&o, &e, &d) == FG_ERR_INVALID_ARG);
    return TEST_DONE("test_ep_serve");
}
