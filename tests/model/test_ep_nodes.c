/* Expert parallelism over several nodes, each node an engine of its own
 * (the multi-process layout: one engine per node, its ranks
 * node * ranks_per_node onwards, every step agreed between the nodes). Here
 * the nodes are engines of this one process sharing one in-process
 * transport group, so the agreement rounds, the idle node's zero-row
 * exchanges and the leave announcement run on the CPU:
 *  - 2 nodes x 2 ranks: sessions on both nodes at once;
 *  - 2 nodes x 1 rank: sessions on one node while the other idles, then
 *    sessions joining on the idle node while the first node's run, one
 *    leaving (cancelled and freed) mid-response;
 *  - a node closing: its peer's response in flight and a new one end with
 *    FG_ERR_STATE naming the node, and the peer then closes without a hang;
 * every completed response's greedy tokens equal the same prompt's tokens
 * on a plain 1-rank engine (tiny model, F32 weights and cache). Below the
 * engine, the rounds themselves (fg_ep_ranks_round, one thread per node):
 * 2 nodes x 2 and 2 nodes x 1 ranks give every logit of a batched prefill
 * and decode steps (the last with tokens on node 0 only) within 1e-4 of the
 * plain forward pass; a round where no node has tokens does not step; a
 * leave is seen by every node. Also the option checks: direct mode over nodes, a node outside the job, nodes on
 * the inproc transport without a shared group. */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "config/base/clock.h"
#include "engine/ep/ep_ranks.h"
#include "engine/ep/ep_transport.h"
#include "engine/model/gguf.h"
#include "engine/kv/kv_store.h"
#include "engine/model/deepseek2/forward.h"
#include "engine/model/deepseek2/model.h"
#include "kernels/cpu/vecops.h"
#include "tests/model/ep_test.h"

#define N 12
#define MAXGEN 10

typedef struct run {
    fg_engine_t *e; /* the node serving it */
    fg_session_t *s;
    int32_t prompt[64];
    int n_prompt, max_tokens;
    int32_t want[MAXGEN], got[MAXGEN];
    int n_want, n_got;
    bool started, done, cancelled;
    fg_finish finish;
    fg_err error;
} run;

static fg_engine_options node_options(int ranks, int per_node, int node, fg_ep_inproc_group_t *g, bool serve)
{
    fg_engine_options o;
    fg_engine_options_default(&o);
    o.model_path = model_path("tiny.gguf");
    o.kv_format = FG_KV_F32;
    o.max_batch_tokens = 128;
    o.prefill_chunk = 32;
    o.n_threads = per_node ? per_node : 1; /* one per rank */
    o.kv_budget_bytes = (size_t)32 << 20;
    o.serve = serve;
    o.ep_ranks = ranks;
    o.ep_ranks_per_node = per_node;
    o.ep_node = node;
    o.ep_group = g;
    return o;
}

static void start(run *r)
{
    ep_test_start(r->e, r->prompt, r->n_prompt, r->max_tokens, &r->s);
    r->n_got = 0;
    r->started = true;
    r->done = r->cancelled = false;
}

/* Drains r's events; true when its response is done. */
static bool poll_run(run *r)
{
    fg_event ev[16];
    char text[4096];
    int n;
    while (!r->done && (n = fg_session_poll(r->s, ev, 16, text, sizeof text)) > 0)
        for (int k = 0; k < n; k++) {
            if (ev[k].type == FG_EVENT_TOKEN && r->n_got < MAXGEN)
                r->got[r->n_got++] = ev[k].token;
            if (ev[k].type == FG_EVENT_DONE) {
                r->done = true;
                r->finish = ev[k].finish;
                r->error = ev[k].error;
            }
        }
    return r->done;
}

/* Polls runs[0..n) until every started one is done (or until `until` of them have a token, when >= 0). */
static void poll_until(run *runs, int n, int until_tokens)
{
    /* Backstop only (sanitizer builds are slow); ctest's timeout is the real one. */
    for (double t0 = fg_clock_mono_s(); fg_clock_mono_s() - t0 < 240;) {
        int left = 0, with_token = 0;
        for (int i = 0; i < n; i++) {
            if (!runs[i].started)
                continue;
            left += !poll_run(&runs[i]);
            with_token += runs[i].n_got > 0 || runs[i].done;
        }
        if (until_tokens >= 0 ? with_token >= until_tokens : left == 0)
            return;
        usleep(1000);
    }
}

static void check_greedy(run *runs, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        run *r = &runs[i];
        if (!r->started)
            continue;
        if (!r->cancelled)
            CHECK_MSG(r->done && r->n_got == r->n_want &&
                          memcmp(r->got, r->want, sizeof(int32_t) * (size_t)r->n_got) == 0,
                      "%s: session %d: %d tokens, alone %d, or they differ", what, i, r->n_got, r->n_want);
        fg_session_free(r->s);
        r->s = NULL;
        r->started = false;
    }
}

/* Opens the nodes of one job (ranks over n_nodes) on a fresh shared group. */
static bool open_nodes(int ranks, int n_nodes, fg_ep_inproc_group_t **g, fg_engine_t **nodes)
{
    fg_diag d;
    CHECK(fg_ep_inproc_group_create(ranks, g, &d) == FG_OK);
    for (int k = 0; k < n_nodes; k++) {
        fg_engine_options o = node_options(ranks, ranks / n_nodes, k, *g, true);
        fg_err err = fg_engine_open(&o, &nodes[k], &d);
        CHECK_MSG(err == FG_OK, "node %d of %d ranks: %s", k, ranks, d.msg);
        if (err != FG_OK)
            return false; /* the nodes opened so far would wait for this one forever: leave them */
    }
    return true;
}

/* ---- the rounds below the engine: logits ---- */

#define NSEQ 8
#define MAXLEN 24
#define DECODE 4
#define POS (MAXLEN + DECODE)
#define MAXTOK 256

typedef struct node_round {
    fg_ep_ranks_t *ep;
    int32_t tok[MAXTOK];
    fg_fwd_seq fs[NSEQ];
    int seq_rank[NSEQ], n;
    bool leave;
    fg_ep_round rd;
    fg_err err;
    fg_diag d;
} node_round;

static void *node_round_main(void *arg)
{
    node_round *nr = arg;
    nr->err = fg_ep_ranks_round(nr->ep, nr->tok, nr->fs, nr->seq_rank, nr->n, nr->leave, &nr->rd, &nr->d);
    return NULL;
}

/* One round on both nodes at once (node 1 on a thread of its own). */
static void round_both(node_round *nr)
{
    pthread_t th;
    CHECK(pthread_create(&th, NULL, node_round_main, &nr[1]) == 0);
    node_round_main(&nr[0]);
    pthread_join(th, NULL);
    CHECK_MSG(nr[0].err == FG_OK && nr[1].err == FG_OK, "round: %s / %s", nr[0].d.msg, nr[1].d.msg);
    CHECK(nr[0].rd.stepped == nr[1].rd.stepped && nr[0].rd.job_tokens == nr[1].rd.job_tokens &&
          nr[0].rd.left_node == nr[1].rd.left_node);
}

/* Sequence i runs on node (i / per_node) % 2, local rank i % per_node; n_ranks 0: the plain pass. */
static void rounds_logits(const fg_model *m, const fg_kv_geometry *geo, fg_kv_store_t *kv, int n_ranks, float *logits,
                          int32_t gen[NSEQ][DECODE])
{
    const int V = m->hp.n_vocab, per_node = n_ranks / 2;
    fg_diag d = {{0}};
    fg_forward_t *plain = NULL;
    fg_ep_inproc_group_t *g = NULL;
    static node_round nr[2];
    memset(nr, 0, sizeof nr);
    if (!n_ranks) {
        CHECK(fg_forward_create(m, geo, MAXTOK, NULL, FG_ISA_AUTO, &plain, &d) == FG_OK);
    } else {
        CHECK(fg_ep_inproc_group_create(n_ranks, &g, &d) == FG_OK);
        for (int k = 0; k < 2; k++) {
            fg_ep_ranks_options o = {.n_ranks = n_ranks, .n_local = per_node, .first_rank = k * per_node,
                                     .group = g, .max_tokens = MAXTOK, .n_threads = per_node, .isa = FG_ISA_AUTO};
            fg_err e = fg_ep_ranks_create(&m->base, geo, &o, &nr[k].ep, &d);
            CHECK_MSG(e == FG_OK, "node %d: %s", k, d.msg);
            if (e != FG_OK)
                return;
        }
    }
    for (size_t i = 0; i < (size_t)NSEQ * POS * V; i++)
        logits[i] = NAN;
    fg_kv_seq kvs[NSEQ];
    int32_t seqtok[NSEQ][POS];
    int len[NSEQ];
    for (int i = 0; i < NSEQ; i++) {
        len[i] = 3 + (i * 7) % (MAXLEN - 3);
        test_tokens(seqtok[i], len[i], V, 700 + (unsigned)i);
        CHECK(fg_kv_seq_init(&kvs[i], 1024) == FG_OK);
        CHECK(fg_kv_seq_reserve(kv, &kvs[i], POS) == FG_OK);
    }
    memset(gen, 0xff, sizeof(int32_t) * NSEQ * DECODE);
    for (int s = -1; s < DECODE; s++) { /* -1: the prefill */
        /* The last decode step: sequence 0 only, on node 0; node 1 joins with no tokens. */
        const int n = s == DECODE - 1 ? 1 : NSEQ;
        int32_t tok[MAXTOK];
        fg_fwd_seq fs[NSEQ];
        int ntok = 0;
        for (int k = 0; k < 2; k++)
            nr[k].n = 0;
        for (int i = 0; i < n; i++) {
            const int at = s < 0 ? 0 : len[i] + s;
            const int32_t *src = seqtok[i];
            int32_t next = 0;
            if (s >= 0) {
                next = fg_argmax(logits + ((size_t)i * POS + at - 1) * V, V);
                gen[i][s] = next;
                src = &next;
            }
            const int nt = s < 0 ? len[i] : 1;
            const fg_fwd_seq f = {.kv = &kvs[i], .n_tokens = nt, .n_logits = nt,
                                  .logits = logits + ((size_t)i * POS + at) * V};
            if (!n_ranks) {
                memcpy(tok + ntok, src, sizeof(int32_t) * (size_t)nt);
                fs[i] = f;
                ntok += nt;
                continue;
            }
            node_round *q = &nr[(i / per_node) % 2];
            int at_tok = 0;
            for (int j = 0; j < q->n; j++)
                at_tok += q->fs[j].n_tokens;
            memcpy(q->tok + at_tok, src, sizeof(int32_t) * (size_t)nt);
            q->seq_rank[q->n] = i % per_node;
            q->fs[q->n++] = f;
        }
        if (!n_ranks) {
            CHECK_MSG(fg_forward_run(plain, tok, fs, n, &d) == FG_OK, "plain: %s", d.msg);
            continue;
        }
        round_both(nr);
        CHECK(nr[0].rd.stepped);
        if (s == DECODE - 1)
            CHECK(nr[1].n == 0 && nr[0].rd.job_tokens == n);
    }
    if (n_ranks) {
        /* Nobody has tokens: no step; then node 1 leaves and both see it. */
        nr[0].n = nr[1].n = 0;
        round_both(nr);
        CHECK(!nr[0].rd.stepped && nr[0].rd.job_tokens == 0 && nr[0].rd.left_node == -1);
        nr[1].leave = true;
        round_both(nr);
        CHECK(!nr[0].rd.stepped && nr[0].rd.left_node == 1);
        fg_ep_ranks_destroy(nr[0].ep);
        fg_ep_ranks_destroy(nr[1].ep);
        fg_ep_inproc_group_destroy(g);
    }
    for (int i = 0; i < NSEQ; i++)
        fg_kv_seq_free(kv, &kvs[i]);
    fg_forward_destroy(plain);
}

static void check_rounds_logits(void)
{
    fg_gguf_t *g;
    fg_model *m;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path("tiny.gguf"), &g, &d) != FG_OK || fg_model_load(g, &m, &d) != FG_OK) {
        CHECK_MSG(false, "tiny.gguf: %s", d.msg);
        return;
    }
    const int V = m->hp.n_vocab;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    CHECK(fg_kv_geometry_init(&geo, &m->hp, FG_KV_F32, &d) == FG_OK);
    CHECK(fg_kv_store_create(&geo, (size_t)64 << 20, &kv, &d) == FG_OK);
    static int32_t gen[3][NSEQ][DECODE];
    float *lg[3];
    const int ranks[3] = {0, 4, 2};
    for (int c = 0; c < 3; c++) {
        lg[c] = malloc(sizeof(float) * NSEQ * POS * (size_t)V);
        rounds_logits(m, &geo, kv, ranks[c], lg[c], gen[c]);
    }
    for (int c = 1; c < 3; c++) {
        float worst = 0;
        for (size_t i = 0; i < (size_t)NSEQ * POS * V; i++) {
            const float a = lg[0][i], b = lg[c][i];
            if (isnan(a) != isnan(b)) {
                worst = INFINITY;
                break;
            }
            if (!isnan(a) && fabsf(a - b) > worst)
                worst = fabsf(a - b);
        }
        const bool same = memcmp(gen[0], gen[c], sizeof gen[0]) == 0;
        fprintf(stderr, "rounds, 2 nodes x %d ranks: max |dlogit| = %g, greedy tokens %s\n", ranks[c] / 2, worst,
                same ? "same" : "DIFFER");
        CHECK_MSG(worst <= 1e-4f, "2 nodes x %d ranks: max |dlogit| %g > 1e-4", ranks[c] / 2, worst);
        CHECK_MSG(same, "2 nodes x %d ranks: greedy tokens differ from the plain pass", ranks[c] / 2);
    }
    CHECK(gen[0][0][DECODE - 1] >= 0 && gen[0][NSEQ - 1][DECODE - 2] >= 0); /* the decode steps ran */
    for (int c = 0; c < 3; c++)
        free(lg[c]);
    CHECK(fg_kv_store_pages_free(kv) == fg_kv_store_pages_total(kv));
    fg_kv_store_destroy(kv);
    fg_model_free(m);
    fg_gguf_close(g);
}

/* One node of a job over NCCL, this process being the node (a GPU machine:
 * deploy/ep-nccl-check.sh starts one process per node; local rank i on
 * CUDA device i, so give each process its own CUDA_VISIBLE_DEVICES).
 * Every node serves its share of the sessions (run i on node i % nodes),
 * then node 0 serves all of them again while the others idle except for a
 * 1-token probe every 50 ms; node 0 then closes, and every other node's
 * next probe ends with FG_ERR_STATE naming node 0 before it closes. */
static int nccl_node(run *runs, int node, int n_nodes, int per_node, const char *redis, const char *prefix)
{
    fg_diag d = {{0}};
    fg_engine_options o = node_options(n_nodes * per_node, per_node, node, NULL, true);
    o.ep_transport = 1;
    o.ep_bootstrap_redis = redis;
    o.ep_bootstrap_prefix = prefix;
    o.ep_bootstrap_timeout_ms = 120000;
    fg_engine_t *e;
    fg_err err = fg_engine_open(&o, &e, &d);
    CHECK_MSG(err == FG_OK, "node %d: %s: %s", node, fg_err_name(err), d.msg);
    if (err != FG_OK)
        return TEST_DONE("test_ep_nodes --nccl-node");
    for (int i = 0; i < N; i++) {
        runs[i].e = e;
        runs[i].started = false;
        if (i % n_nodes == node)
            start(&runs[i]);
    }
    poll_until(runs, N, -1);
    check_greedy(runs, N, "nccl, every node busy");
    if (node == 0) {
        for (int i = 0; i < N; i++)
            start(&runs[i]);
        poll_until(runs, N, -1);
        check_greedy(runs, N, "nccl, node 0 busy, the others idle");
    } else {
        run probe = runs[0];
        probe.max_tokens = 1;
        for (int k = 0;; k++) {
            start(&probe);
            poll_until(&probe, 1, -1);
            fg_session_free(probe.s);
            if (probe.finish == FG_FINISH_ERROR) {
                CHECK_MSG(probe.error == FG_ERR_STATE, "probe %d ended with error %s", k, fg_err_name(probe.error));
                break;
            }
            CHECK_MSG(probe.n_got == 1 && probe.got[0] == runs[0].want[0], "probe %d: wrong token", k);
            usleep(50000);
        }
    }
    fg_engine_close(e);
    fprintf(stderr, "node %d of %d (%d ranks each) over NCCL: done\n", node, n_nodes, per_node);
    return TEST_DONE("test_ep_nodes --nccl-node");
}

/* No arguments: the nodes are engines of this process (CI). "--nccl-node
 * NODE NODES RANKS_PER_NODE REDIS PREFIX": this process is one node of a
 * job over NCCL (deploy/ep-nccl-check.sh --nodes on a GPU machine). */
int main(int argc, char **argv)
{
    const bool nccl = argc == 7 && strcmp(argv[1], "--nccl-node") == 0;
    if (argc != 1 && !nccl) {
        fprintf(stderr, "usage: test_ep_nodes [--nccl-node NODE NODES RANKS_PER_NODE REDIS PREFIX]\n");
        return 2;
    }
    fg_diag d = {{0}};
    fg_engine_options po = node_options(0, 0, 0, NULL, false);
    fg_engine_t *plain;
    CHECK(fg_engine_open(&po, &plain, &d) == FG_OK);
    static run runs[N];
    for (int i = 0; i < N; i++)
        ep_test_plan(plain, i, MAXGEN, 500, runs[i].prompt, &runs[i].n_prompt, &runs[i].max_tokens, runs[i].want,
                     &runs[i].n_want);
    fg_engine_close(plain);
    if (nccl)
        return nccl_node(runs, atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argv[5], argv[6]);

    check_rounds_logits();

    fg_ep_inproc_group_t *g;
    fg_engine_t *nodes[2];

    /* 2 nodes x 2 ranks: sessions on both nodes at once. */
    if (open_nodes(4, 2, &g, nodes)) {
        for (int i = 0; i < N; i++) {
            runs[i].e = nodes[i % 2];
            start(&runs[i]);
        }
        poll_until(runs, N, -1);
        check_greedy(runs, N, "2 nodes x 2 ranks, both busy");
        fg_engine_stats st[2];
        fg_engine_get_stats(nodes[0], &st[0]);
        fg_engine_get_stats(nodes[1], &st[1]);
        fprintf(stderr, "2 nodes x 2 ranks: %llu and %llu steps with local tokens\n",
                (unsigned long long)st[0].steps, (unsigned long long)st[1].steps);
        /* Node 0 leaves first while node 1 idles: node 1 learns it and closes without a hang. */
        fg_engine_close(nodes[0]);
        fg_engine_close(nodes[1]);
        fg_ep_inproc_group_destroy(g);
    }

    /* 2 nodes x 1 rank. */
    if (open_nodes(2, 2, &g, nodes)) {
        /* A figure, not a check: the CPU an idle job burns on its agreement rounds. */
        struct rusage ru0, ru1;
        getrusage(RUSAGE_SELF, &ru0);
        const double t0 = fg_clock_mono_s();
        usleep(500000);
        getrusage(RUSAGE_SELF, &ru1);
        const double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec -
                                    ru0.ru_stime.tv_sec) +
                           (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec -
                                    ru0.ru_stime.tv_usec) * 1e-6;
        fprintf(stderr, "2 idle nodes x 1 rank: %.1f %% of one core on rounds\n", 100 * cpu / (fg_clock_mono_s() - t0));
        /* Only node 1 has sessions; node 0 idles and joins every step with zero rows. */
        for (int i = 0; i < N / 2; i++) {
            runs[i].e = nodes[1];
            start(&runs[i]);
        }
        poll_until(runs, N, -1);
        fg_engine_stats st;
        fg_engine_get_stats(nodes[0], &st);
        CHECK_MSG(st.steps == 0, "the idle node counted %llu steps of its own", (unsigned long long)st.steps);
        check_greedy(runs, N, "2 nodes x 1 rank, node 0 idle");

        /* Sessions on node 0 first; once they produce tokens, sessions join on
         * node 1, and one of node 0's leaves mid-response. */
        for (int i = 0; i < N / 2; i++) {
            runs[i].e = nodes[0];
            start(&runs[i]);
        }
        poll_until(runs, N / 2, 1);
        for (int i = N / 2; i < N; i++) {
            runs[i].e = nodes[1];
            start(&runs[i]);
        }
        for (int i = 0; i < N / 2; i++)
            if (!runs[i].done && runs[i].max_tokens > 3) {
                fg_session_cancel(runs[i].s);
                runs[i].cancelled = true;
                break;
            }
        poll_until(runs, N, -1);
        check_greedy(runs, N, "2 nodes x 1 rank, joining and leaving");

        /* Node 1 closes while node 0 has a response in flight: that response,
         * and any later one, ends with FG_ERR_STATE; node 0 then closes. */
        run *r = &runs[N - 1];
        r->e = nodes[0];
        r->max_tokens = MAXGEN;
        start(r);
        poll_until(r, 1, 1);
        fg_engine_close(nodes[1]);
        poll_until(r, 1, -1);
        CHECK_MSG(r->done && (r->finish != FG_FINISH_ERROR || r->error == FG_ERR_STATE),
                  "response across a node's close: finish %d error %d", (int)r->finish, (int)r->error);
        fg_session_free(r->s);
        r->max_tokens = 2;
        start(r);
        poll_until(r, 1, -1);
        CHECK_MSG(r->done && r->finish == FG_FINISH_ERROR && r->error == FG_ERR_STATE,
                  "response after a node left: finish %d error %d", (int)r->finish, (int)r->error);
        fg_session_free(r->s);
        r->started = false;
        fg_engine_close(nodes[0]);
        fg_ep_inproc_group_destroy(g);
    }

    /* Options that cannot make a job. */
    fg_engine_t *e;
    CHECK(fg_ep_inproc_group_create(4, &g, &d) == FG_OK);
    fg_engine_options o = node_options(4, 2, 0, g, false);
    CHECK(fg_engine_open(&o, &e, &d) == FG_ERR_STATE && strstr(d.msg, "serving mode"));
    o = node_options(4, 2, 2, g, true);
    CHECK(fg_engine_open(&o, &e, &d) == FG_ERR_CONFIG && strstr(d.msg, "topology.node (2)"));
    o = node_options(4, 3, 0, g, true);
    CHECK(fg_engine_open(&o, &e, &d) == FG_ERR_CONFIG && strstr(d.msg, "topology.ranks_per_node (3)"));
    o = node_options(4, 2, 0, NULL, true);
    CHECK(fg_engine_open(&o, &e, &d) == FG_ERR_CONFIG && strstr(d.msg, "inproc"));
    fg_ep_inproc_group_destroy(g);
    CHECK(fg_ep_inproc_group_create(2, &g, &d) == FG_OK);
    o = node_options(4, 2, 0, g, true); /* a group of another size */
    CHECK(fg_engine_open(&o, &e, &d) != FG_OK);
    fg_ep_inproc_group_destroy(g);
    return TEST_DONE("test_ep_nodes");
}
