/* Expert parallelism for deepseek4 equals one rank: V4's MoE (a hash-routed
 * first layer through tid2eid, sqrt-softplus routing with a selection bias
 * elsewhere, the clamped SwiGLU, a shared expert, the MTP block's experts)
 * through the same exchange as deepseek2's (engine/ep/), with the ranks
 * running the architecture's forward pass (engine/model/arch.h).
 *
 * 1. Logits, below the engine (fg_ep_ranks over the arch interface): 8
 *    sequences, a batched prefill and greedy decode steps (the last with one
 *    sequence, so the other ranks only serve their experts), on 1, 2 and 3
 *    in-process ranks — contiguous and strided placement; replicas
 *    (topology.redundant_experts: 8 experts on 3 ranks own 3/3/2 and one
 *    replica evens them at 3 slots; 2 and 4 replicas on 2 and 4 ranks) in id
 *    order and in a hot-experts order; a receive capacity below the prefill's
 *    traffic (several rounds, every expert whole) and below one expert's rows
 *    (experts cut over rounds) — against the plain forward pass. Models:
 *    v4-tiny (F32) and v4-tiny-mxexp (F32 dense, MXFP4 experts, the type
 *    V4's converter writes them in). What must hold, and why:
 *      - one rank: every logit bit for bit the plain pass's (the same
 *        batch, each expert's rows in token order, the same kernels, sums in
 *        the same ascending-id order);
 *      - a capacity that keeps every expert whole in one round: bit for bit
 *        the same run without a capacity (the exchange's promise, as for
 *        deepseek2);
 *      - any other run: greedy tokens identical and every logit within 1e-4
 *        of the plain pass (the bound deepseek2's test_ep_logits and
 *        test_batch_logits use). Bit identity is not promised: a rank's
 *        attention, router, shared-expert and head products see only its
 *        own tokens, and kernels/cpu/matmul picks its F32 kernel (one row,
 *        a few, 4x4 tiles, panels) by the number of rows, each summing in
 *        its own order (a decode step of 8 sequences gives 3 ranks 3, 3 and
 *        2 rows); F32 experts whose rows are split between an owner and its
 *        replicas or cut over rounds meet the same. MXFP4 products are
 *        batch-invariant, so with MXFP4 experts only the dense F32 products
 *        differ. Measured (printed below): 0 at 2 ranks without replicas
 *        (both files), up to 7.2e-6 otherwise on F32, 3.8e-6 with MXFP4
 *        experts.
 *    The exchange counts: one per layer with experts (the trunk's 4 and the
 *    MTP block's) per run; a bad token on one rank is refused while the
 *    others complete.
 * 2. The engine with topology.ranks > 1 on a V4 model: direct mode over 2
 *    ranks and serving (12 sessions) over 2 ranks, 3 ranks with a replica
 *    and a receive capacity, 3 ranks strided with hot experts, give each
 *    session the greedy tokens it gets alone on the plain engine; every
 *    evaluated token's routed picks (5 layers x 2) are counted once. */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "engine/ep/ep_ranks.h"
#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "tests/model/ep_test.h"

#define NSEQ 8
#define MAXLEN 64
#define DECODE 5
#define POS (MAXLEN + DECODE)
#define MAXTOK 256
#define CAP_WHOLE 128 /* receive rows per round: more than any expert's rows in one step here */
#define CAP_SPLIT 8  /* fewer than some experts' rows in the prefill */
#define HOT "5,2,7"  /* a heat order for the replicas (the rest follow in id order) */

typedef struct config {
    int ranks; /* 0: the plain forward pass */
    int redundant;
    fg_ep_placement placement;
    const char *hot;
    int64_t cap;   /* topology.recv_capacity_rows; 0: the worst case */
    int base;      /* with a capacity: the index of the same run without one */
    bool splits;   /* with a capacity: some expert has more rows than it */
} config;

typedef struct result {
    int32_t gen[NSEQ][DECODE];
    fg_moe_ep_stats ex;
    float *logits; /* [NSEQ][POS][V], NaN where not evaluated */
} result;

/* ---------------------------------------------------------------- 1. logits */

static void run(const fg_arch_model *m, const fg_kv_geometry *geo, fg_kv_store_t *kv, const config *c,
                result *res)
{
    const fg_arch *a = m->arch;
    const int V = m->n_vocab;
    fg_diag d = {{0}};
    fg_arch_forward_t *plain = NULL;
    fg_ep_ranks_t *ep = NULL;
    if (c->ranks == 0) {
        CHECK_MSG(a->forward_create(m, geo, MAXTOK, NULL, FG_ISA_AUTO, &plain, &d) == FG_OK, "%s", d.msg);
    } else {
        fg_ep_ranks_options o = {.n_ranks = c->ranks, .max_tokens = MAXTOK, .n_threads = c->ranks,
                                 .isa = FG_ISA_AUTO, .redundant = c->redundant, .placement = c->placement,
                                 .hot_experts = c->hot, .recv_capacity_rows = c->cap};
        const fg_err e = fg_ep_ranks_create(m, geo, &o, &ep, &d);
        CHECK_MSG(e == FG_OK, "%d ranks: %s", c->ranks, d.msg);
        if (e != FG_OK)
            return;
    }
    for (size_t i = 0; i < (size_t)NSEQ * POS * V; i++)
        res->logits[i] = NAN;
    fg_kv_seq kvs[NSEQ];
    int32_t seqtok[NSEQ][POS], btok[MAXTOK];
    int len[NSEQ], seq_rank[NSEQ];
    fg_fwd_seq fs[NSEQ];
    int ntok = 0;
    for (int i = 0; i < NSEQ; i++) {
        len[i] = 3 + (i * 11) % (MAXLEN - 3);
        test_tokens(seqtok[i], len[i], V, 700 + (unsigned)i);
        CHECK(fg_kv_seq_init(&kvs[i], 1024) == FG_OK);
        CHECK(fg_kv_seq_reserve(kv, &kvs[i], POS) == FG_OK);
        memcpy(btok + ntok, seqtok[i], sizeof(int32_t) * (size_t)len[i]);
        fs[i] = (fg_fwd_seq){.kv = &kvs[i], .n_tokens = len[i], .n_logits = len[i],
                             .logits = res->logits + (size_t)i * POS * V};
        seq_rank[i] = c->ranks ? i % c->ranks : 0;
        ntok += len[i];
    }
    fg_err e = ep ? fg_ep_ranks_run(ep, btok, fs, seq_rank, NSEQ, &d) : a->forward_run(plain, btok, fs, NSEQ, &d);
    CHECK_MSG(e == FG_OK, "prefill: %s", d.msg);
    memset(res->gen, 0xff, sizeof res->gen);
    for (int s = 0; s < DECODE && e == FG_OK; s++) {
        const int n = s == DECODE - 1 ? 1 : NSEQ; /* last step: one sequence, the other ranks idle */
        for (int i = 0; i < n; i++) {
            const int at = len[i] + s;
            const int32_t next = fg_argmax(res->logits + ((size_t)i * POS + at - 1) * V, V);
            res->gen[i][s] = next;
            btok[i] = next;
            fs[i] = (fg_fwd_seq){.kv = &kvs[i], .n_tokens = 1, .n_logits = 1,
                                 .logits = res->logits + ((size_t)i * POS + at) * V};
        }
        e = ep ? fg_ep_ranks_run(ep, btok, fs, seq_rank, n, &d) : a->forward_run(plain, btok, fs, n, &d);
        CHECK_MSG(e == FG_OK, "decode %d: %s", s, d.msg);
    }
    if (ep) {
        /* One exchange per layer with experts (the trunk's and the MTP block's) per run. */
        int layers = 0;
        for (int il = 0; il < m->n_layer_run; il++) {
            fg_arch_experts x;
            layers += a->layer_experts(m, il, &x);
        }
        CHECK(layers == m->n_layer + 1); /* v4-tiny: every block and the MTP block */
        fg_ep_ranks_exchange_stats(ep, &res->ex);
        const uint64_t one_each = (uint64_t)layers * (1 + DECODE);
        CHECK(res->ex.exchanges == one_each);
        CHECK_MSG(c->cap ? res->ex.rounds >= one_each + (uint64_t)layers : res->ex.rounds == one_each,
                  "ranks %d cap %lld: %llu rounds for %llu exchanges", c->ranks, (long long)c->cap,
                  (unsigned long long)res->ex.rounds, (unsigned long long)one_each);
        CHECK_MSG((res->ex.split_experts > 0) == c->splits, "ranks %d cap %lld: %llu experts split", c->ranks,
                  (long long)c->cap, (unsigned long long)res->ex.split_experts);
    }
    if (ep && c->ranks > 1) {
        /* A bad token on rank 1: that rank refuses its batch, the others finish theirs (no hang). */
        static float scratch[2][1024];
        CHECK(V <= 1024);
        int32_t bad[2] = {btok[0], V};
        fg_fwd_seq two[2] = {{.kv = &kvs[0], .n_tokens = 1, .n_logits = 1, .logits = scratch[0]},
                             {.kv = &kvs[1], .n_tokens = 1, .n_logits = 1, .logits = scratch[1]}};
        const int ranks2[2] = {0, 1};
        CHECK(fg_ep_ranks_run(ep, bad, two, ranks2, 2, &d) == FG_ERR_TOKEN_ID && strstr(d.msg, "rank 1"));
    }
    for (int i = 0; i < NSEQ; i++)
        fg_kv_seq_free(kv, &kvs[i]);
    if (plain)
        a->forward_destroy(plain);
    fg_ep_ranks_destroy(ep);
}

static void check_logits(const char *file)
{
    fg_gguf_t *g;
    fg_arch_model *m;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path(file), &g, &d) != FG_OK || fg_arch_load(g, &m, &d) != FG_OK) {
        CHECK_MSG(false, "%s: %s", file, d.msg);
        return;
    }
    CHECK(strcmp(m->arch->name, "deepseek4") == 0 && m->n_expert == 8 && m->n_expert_used == 2);
    const int V = m->n_vocab;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    CHECK_MSG(m->arch->cache(m, FG_KV_F32, &geo, &d) == FG_OK, "%s", d.msg);
    CHECK(fg_kv_store_create(&geo, (size_t)256 << 20, &kv, &d) == FG_OK);
    /* 8 experts: 2 ranks own 4 each, 3 ranks 3/3/2 (one replica evens them at 3), 4 ranks 2 each. */
    const config configs[] = {
        {0, 0, FG_EP_CONTIGUOUS, NULL, 0, 0, false}, /* 0: the reference */
        {1, 0, FG_EP_CONTIGUOUS, NULL, 0, 0, false}, /* 1: bit for bit the reference */
        {2, 0, FG_EP_CONTIGUOUS, NULL, 0, 0, false}, /* 2 */
        {2, 0, FG_EP_STRIDED, NULL, 0, 0, false},
        {3, 0, FG_EP_CONTIGUOUS, NULL, 0, 0, false},
        {3, 0, FG_EP_STRIDED, NULL, 0, 0, false},
        {3, 1, FG_EP_CONTIGUOUS, NULL, 0, 0, false}, /* 6 */
        {3, 1, FG_EP_STRIDED, HOT, 0, 0, false},
        {2, 2, FG_EP_CONTIGUOUS, HOT, 0, 0, false},  /* 8 */
        {4, 4, FG_EP_STRIDED, NULL, 0, 0, false},
        /* several rounds, every expert whole: bit for bit the run without the capacity */
        {2, 0, FG_EP_CONTIGUOUS, NULL, CAP_WHOLE, 2, false},
        {3, 1, FG_EP_CONTIGUOUS, NULL, CAP_WHOLE, 6, false},
        {2, 2, FG_EP_CONTIGUOUS, HOT, CAP_WHOLE, 8, false},
        /* below some experts' rows: those are cut over rounds */
        {2, 0, FG_EP_CONTIGUOUS, NULL, CAP_SPLIT, 2, true},
        {3, 1, FG_EP_CONTIGUOUS, NULL, CAP_SPLIT, 6, true},
    };
    enum { NC = sizeof configs / sizeof configs[0] };
    static result res[NC];
    const size_t n_logits = (size_t)NSEQ * POS * (size_t)V;
    for (int c = 0; c < NC; c++) {
        res[c].logits = malloc(sizeof(float) * n_logits);
        CHECK(res[c].logits != NULL);
        run(m, &geo, kv, &configs[c], &res[c]);
    }
    for (int c = 1; c < NC; c++) {
        const config *cf = &configs[c];
        float worst = 0;
        for (size_t i = 0; i < n_logits; i++) {
            const float x = res[0].logits[i], y = res[c].logits[i];
            if (isnan(x) != isnan(y)) {
                worst = INFINITY; /* evaluated in one run, not the other */
                break;
            }
            if (!isnan(x) && fabsf(x - y) > worst)
                worst = fabsf(x - y);
        }
        const bool same = memcmp(res[0].gen, res[c].gen, sizeof res[0].gen) == 0;
        const int ref = cf->cap ? cf->base : 0;
        const bool exact = memcmp(res[c].logits, res[ref].logits, sizeof(float) * n_logits) == 0;
        fprintf(stderr,
                "%s: ranks %d, redundant %d%s%s, %s, capacity %lld (%llu rounds for %llu exchanges, %llu experts "
                "cut): max |dlogit| = %g%s, greedy tokens %s\n",
                file, cf->ranks, cf->redundant, cf->hot ? ", hot " : "", cf->hot ? cf->hot : "",
                cf->placement == FG_EP_STRIDED ? "strided" : "contiguous", (long long)cf->cap,
                (unsigned long long)res[c].ex.rounds, (unsigned long long)res[c].ex.exchanges,
                (unsigned long long)res[c].ex.split_experts, worst,
                exact ? (cf->cap ? " (bit-identical to the run without capacity)" : " (bit-identical)") : "",
                same ? "same" : "DIFFER");
        CHECK_MSG(worst <= 1e-4f, "%s, ranks %d: max |dlogit| %g > 1e-4", file, cf->ranks, worst);
        CHECK_MSG(same, "%s, ranks %d: greedy tokens differ from one rank", file, cf->ranks);
        if (cf->ranks == 1 || (cf->cap && !cf->splits))
            CHECK_MSG(exact, "%s, ranks %d, capacity %lld: logits differ bit-wise from run %d", file, cf->ranks,
                      (long long)cf->cap, ref);
    }
    CHECK(res[0].gen[0][DECODE - 1] >= 0 && res[0].gen[1][DECODE - 2] >= 0); /* the decode steps ran */
    for (int c = 0; c < NC; c++)
        free(res[c].logits);
    CHECK(fg_kv_store_pages_free(kv) == fg_kv_store_pages_total(kv));
    fg_kv_store_destroy(kv);
    fg_arch_free(m);
    fg_gguf_close(g);
}

/* ---------------------------------------------------------------- 2. the engine */

#define N 12
#define MAXGEN 10

typedef struct srun {
    fg_session_t *s;
    int32_t prompt[64];
    int n_prompt, max_tokens;
    int32_t want[MAXGEN], got[MAXGEN];
    int n_want, n_got;
    bool done;
} srun;

static fg_err open_v4(int ranks, int redundant, int placement, const char *hot, int64_t cap, bool serve,
                      fg_engine_t **e, fg_diag *d)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path("v4-tiny.gguf");
    o.kv_format = FG_KV_F32;
    o.max_batch_tokens = 128;
    o.prefill_chunk = 16;
    o.n_threads = 2;
    o.kv_budget_bytes = (size_t)64 << 20;
    o.serve = serve;
    o.ep_ranks = ranks;
    o.ep_redundant = redundant;
    o.ep_placement = placement;
    o.ep_hot_experts = hot;
    o.ep_recv_capacity_rows = cap;
    return fg_engine_open(&o, e, d);
}

static void serve_all(fg_engine_t *e, srun *runs, const char *what)
{
    for (int i = 0; i < N; i++) {
        srun *r = &runs[i];
        ep_test_start(e, r->prompt, r->n_prompt, r->max_tokens, &r->s);
        r->n_got = 0;
        r->done = false;
    }
    /* Backstop only (sanitizer builds are slow); ctest's timeout is the real one. */
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 240;) {
        int left = 0;
        for (int i = 0; i < N; i++) {
            bool waited = false;
            fg_event last;
            if (!runs[i].done)
                fg_test_drain(runs[i].s, runs[i].got, &runs[i].n_got, MAXGEN, &runs[i].done, &waited, &last);
            left += !runs[i].done;
        }
        if (!left)
            break;
        usleep(1000);
    }
    for (int i = 0; i < N; i++) {
        const srun *r = &runs[i];
        CHECK_MSG(r->done && r->n_got == r->n_want && memcmp(r->got, r->want, sizeof(int32_t) * (size_t)r->n_got) == 0,
                  "%s: session %d: %d tokens, alone %d, or they differ", what, i, r->n_got, r->n_want);
        fg_session_free(r->s);
    }
}

static void check_engine(void)
{
    fg_engine_t *plain, *e;
    fg_diag d = {{0}};
    fg_err err = open_v4(0, 0, 0, NULL, 0, false, &plain, &d);
    CHECK_MSG(err == FG_OK, "%s", d.msg);
    if (err != FG_OK)
        return;
    static srun runs[N];
    for (int i = 0; i < N; i++)
        ep_test_plan(plain, i, MAXGEN, 500, runs[i].prompt, &runs[i].n_prompt, &runs[i].max_tokens, runs[i].want,
                     &runs[i].n_want);
    fg_engine_close(plain);

    /* Direct mode over 2 ranks (sessions alternate ranks). */
    err = open_v4(2, 0, 0, NULL, 0, false, &e, &d);
    CHECK_MSG(err == FG_OK, "direct, 2 ranks: %s", d.msg);
    if (err == FG_OK) {
        for (int i = 0; i < N; i++) {
            int32_t got[MAXGEN];
            const int n = greedy_alone(e, runs[i].prompt, runs[i].n_prompt, runs[i].max_tokens, got);
            CHECK_MSG(n == runs[i].n_want && memcmp(got, runs[i].want, sizeof(int32_t) * (size_t)n) == 0,
                      "direct, 2 ranks: session %d differs", i);
        }
        fg_engine_close(e);
    }

    const struct {
        int ranks, redundant, placement;
        const char *hot;
        int64_t cap;
        const char *what;
    } cfg[] = {{2, 0, 0, NULL, 0, "v4 serving, 2 ranks"},
               {3, 1, 0, NULL, 16, "v4 serving, 3 ranks, 1 replica, receive capacity 16 rows"},
               {3, 1, 1, HOT, 0, "v4 serving, 3 ranks strided, 1 replica of the hottest"}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        err = open_v4(cfg[c].ranks, cfg[c].redundant, cfg[c].placement, cfg[c].hot, cfg[c].cap, true, &e, &d);
        CHECK_MSG(err == FG_OK, "%s: %s", cfg[c].what, d.msg);
        if (err != FG_OK)
            continue;
        serve_all(e, runs, cfg[c].what);
        fg_engine_stats st;
        fg_engine_get_stats(e, &st);
        /* Every evaluated token's picks are counted once, on its home rank: 2 in each of the 5 layers. */
        uint64_t tokens[16] = {0}, sum = 0;
        CHECK(fg_engine_expert_tokens(e, tokens, 16) == 8);
        for (int x = 0; x < 8; x++)
            sum += tokens[x];
        CHECK_MSG(sum > 0 && sum == (st.prefill_tokens + st.decode_tokens) * 5 * 2,
                  "%s: %llu expert picks for %llu tokens", cfg[c].what, (unsigned long long)sum,
                  (unsigned long long)(st.prefill_tokens + st.decode_tokens));
        fprintf(stderr, "%s: %llu steps for %d sessions\n", cfg[c].what, (unsigned long long)st.steps, N);
        fg_engine_close(e);
    }
    /* Placements that do not fit the model's 8 experts, with the key named. */
    CHECK(open_v4(9, 0, 0, NULL, 0, true, &e, &d) == FG_ERR_CONFIG && strstr(d.msg, "topology.ranks (9)"));
    CHECK_MSG(open_v4(3, 2, 0, NULL, 0, true, &e, &d) == FG_ERR_CONFIG &&
                  strstr(d.msg, "topology.redundant_experts (2)"),
              "%s", d.msg);
}

int main(void)
{
    check_logits("v4-tiny.gguf");
    check_logits("v4-tiny-mxexp.gguf");
    check_engine();
    return TEST_DONE("test_ep_v4");
}
