/* Expert parallelism equals one rank: the tiny model (F32 cache; sigmoid,
 * softmax and group-limited routing; F32 and Q8_0 weights) runs the same
 * sessions — a batched prefill of 8 sequences, then greedy
 * decode steps, the last one with a single sequence so most ranks have no
 * tokens of their own — through the plain forward pass and through 1, 2, 3
 * and 4 in-process ranks (contiguous and strided placement, with and without
 * replicated experts; 3 ranks own 16 experts unevenly, 6/5/5, and 2 replicas
 * even them out at 6 slots), and at 2 and 4 ranks with a receive capacity
 * far below the worst case, so that every MoE layer's exchange runs in
 * several rounds. Every configuration must pick the same greedy tokens and
 * give every logit within 1e-4 of the plain pass. A batch with a bad token
 * on one rank is refused while the other ranks complete (no hang), and so is
 * an exchange between ranks made with different batch sizes or expert
 * placements; a capacity
 * below one row per rank and a placement the model cannot take are refused
 * at create with the key named. tiny-mtp.gguf (the MTP block) the same way
 * on CPU ranks. */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "engine/ep/ep_ranks.h"
#include "engine/ep/moe_ep.h"
#include "engine/kv/kv_store.h"
#include "engine/model/deepseek2/forward.h"
#include "engine/model/deepseek2/model.h"
#include "engine/model/gguf.h"
#include "tests/model/model_test.h"

#define NSEQ 8
#define MAXLEN 24
#define DECODE 5
#define POS (MAXLEN + DECODE)
#define MAXTOK 256
#define CAP_WHOLE 64 /* receive rows per round: more than any expert's rows in one step here */
#define CAP_SPLIT 8  /* fewer than some experts' rows in the prefill */

typedef struct config {
    int ranks; /* 0: the plain forward pass */
    int redundant;
    fg_ep_placement placement;
    int64_t cap; /* topology.recv_capacity_rows; 0: the worst case */
    int base;    /* with a capacity: the index of the same run without one */
    bool splits; /* with a capacity: some expert has more rows than it (else every expert fits one round) */
} config;

typedef struct result {
    int32_t gen[NSEQ][DECODE];
    fg_moe_ep_stats ex; /* the ranks' exchanges over all MoE layers and steps */
    float *logits; /* [NSEQ][POS][V], NaN where not evaluated */
} result;

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

typedef struct runner {
    fg_forward_t *plain;
    fg_ep_ranks_t *ep;
    int ranks;
} runner;

static fg_err step(runner *r, const int32_t *tok, fg_fwd_seq *fs, const int *seq_rank, int n, fg_diag *d)
{
    return r->ep ? fg_ep_ranks_run(r->ep, tok, fs, seq_rank, n, d) : fg_forward_run(r->plain, tok, fs, n, d);
}

/* --nccl: the ranks talk over NCCL (one GPU each) instead of in-process; set by main. */
static uint8_t nccl_id[FG_EP_NCCL_ID_BYTES];
static bool use_nccl;
static bool use_cuda; /* --cuda: the ranks compute on the cuda backend, rank i on device i */
static int max_ranks = 4;

static void run(const fg_model *m, const fg_kv_geometry *geo, fg_kv_store_t *kv, config c, result *res)
{
    const int V = m->hp.n_vocab;
    fg_diag d = {{0}};
    runner r = {.ranks = c.ranks};
    if (c.ranks == 0) {
        CHECK(fg_forward_create(m, geo, MAXTOK, NULL, FG_ISA_AUTO, &r.plain, &d) == FG_OK);
    } else {
        if (use_nccl && fg_ep_nccl_unique_id(nccl_id, &d) != FG_OK) { /* a fresh communicator per run */
            CHECK_MSG(false, "%s", d.msg);
            return;
        }
        fg_ep_ranks_options o = {.n_ranks = c.ranks, .max_tokens = MAXTOK, .n_threads = c.ranks, .isa = FG_ISA_AUTO,
                                 .redundant = c.redundant, .placement = c.placement, .recv_capacity_rows = c.cap,
                                 .nccl_id = use_nccl ? nccl_id : NULL,
                                 .backend = use_cuda ? FG_BACKEND_CUDA : FG_BACKEND_CPU, .kv = kv};
        fg_err e = fg_ep_ranks_create(&m->base, geo, &o, &r.ep, &d);
        CHECK_MSG(e == FG_OK, "%s", d.msg);
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
        len[i] = 3 + (i * 7) % (MAXLEN - 3);
        test_tokens(seqtok[i], len[i], V, 900 + (unsigned)i);
        CHECK(fg_kv_seq_init(&kvs[i], 1024) == FG_OK);
        CHECK(fg_kv_seq_reserve(kv, &kvs[i], POS) == FG_OK);
        memcpy(btok + ntok, seqtok[i], sizeof(int32_t) * (size_t)len[i]);
        fs[i] = (fg_fwd_seq){.kv = &kvs[i], .n_tokens = len[i], .n_logits = len[i],
                             .logits = res->logits + (size_t)i * POS * V};
        seq_rank[i] = c.ranks ? i % c.ranks : 0;
        ntok += len[i];
    }
    fg_err e = step(&r, btok, fs, seq_rank, NSEQ, &d);
    CHECK_MSG(e == FG_OK, "prefill: %s", d.msg);

    memset(res->gen, 0xff, sizeof res->gen);
    for (int s = 0; s < DECODE && e == FG_OK; s++) {
        const int n = s == DECODE - 1 ? 1 : NSEQ; /* last step: one sequence, the other ranks idle */
        for (int i = 0; i < n; i++) {
            const int at = len[i] + s; /* position of the token fed now */
            const int32_t next = argmax(res->logits + ((size_t)i * POS + at - 1) * V, V);
            res->gen[i][s] = next;
            btok[i] = next;
            fs[i] = (fg_fwd_seq){.kv = &kvs[i], .n_tokens = 1, .n_logits = 1,
                                 .logits = res->logits + ((size_t)i * POS + at) * V};
        }
        e = step(&r, btok, fs, seq_rank, n, &d);
        CHECK_MSG(e == FG_OK, "decode %d: %s", s, d.msg);
    }
    if (r.ep) {
        /* Without a capacity every MoE layer of every step is one round; with one far below the prefill's
         * traffic, the prefill's exchanges need more (at least one more per MoE layer over the run). */
        int moe = 0; /* the MTP block's layer (tiny-mtp) exchanges too */
        for (int il = 0; il < m->base.n_layer_run; il++)
            moe += m->layers[il].is_moe;
        fg_ep_ranks_exchange_stats(r.ep, &res->ex);
        const uint64_t rounds = res->ex.rounds, one_each = (uint64_t)moe * (1 + DECODE);
        CHECK(res->ex.exchanges == one_each);
        CHECK_MSG(c.cap ? rounds >= one_each + (uint64_t)moe : rounds == one_each,
                  "ranks %d cap %lld: %llu exchange rounds for %llu layer exchanges", c.ranks, (long long)c.cap,
                  (unsigned long long)rounds, (unsigned long long)one_each);
        CHECK_MSG((res->ex.split_experts > 0) == c.splits, "ranks %d cap %lld: %llu experts split", c.ranks,
                  (long long)c.cap, (unsigned long long)res->ex.split_experts);
    }

    if (r.ep && c.ranks > 1) {
        /* A bad token on rank 1: that rank refuses its batch, the others finish theirs. */
        float scratch[2][4096];
        CHECK(V <= 4096);
        int32_t bad[2] = {btok[0], V};
        fg_fwd_seq two[2] = {{.kv = &kvs[0], .n_tokens = 1, .n_logits = 1, .logits = scratch[0]},
                             {.kv = &kvs[1], .n_tokens = 1, .n_logits = 1, .logits = scratch[1]}};
        const int ranks2[2] = {0, 1};
        CHECK(fg_ep_ranks_run(r.ep, bad, two, ranks2, 2, &d) == FG_ERR_TOKEN_ID);
        CHECK(strstr(d.msg, "rank 1") != NULL);
        const int out_of_range[1] = {c.ranks};
        CHECK(fg_ep_ranks_run(r.ep, bad, two, out_of_range, 1, &d) == FG_ERR_INVALID_ARG);
    }
    for (int i = 0; i < NSEQ; i++)
        fg_kv_seq_free(kv, &kvs[i]);
    fg_forward_destroy(r.plain);
    fg_ep_ranks_destroy(r.ep);
}

/* Two ranks made with different max tokens (a misconfigured job): rank 1
 * sends rank 0 more rows than it has room for. Both get an error, rank 0's
 * names the cause, nothing overruns (ASan) and nobody hangs. */
typedef struct mismatch_rank {
    fg_moe_ep_t *ep;
    int il; /* a MoE layer */
    int n;
    int ids[64 * 4];
    float w[64 * 4];
    float *xn, *x;
    fg_err err;
    fg_diag diag;
} mismatch_rank;

static void *mismatch_main(void *arg)
{
    mismatch_rank *r = arg;
    r->err = fg_moe_ep_experts(r->ep, r->il, r->n, r->ids, r->w, r->xn, r->x, &r->diag);
    return NULL;
}

static void check_mismatched_ranks(const fg_model *m)
{
    const fg_layer *ly = NULL;
    for (int il = 0; il < m->hp.n_layer && !ly; il++)
        if (m->layers[il].is_moe)
            ly = &m->layers[il];
    CHECK(ly != NULL && m->hp.n_expert_used == 4);
    if (!ly || m->hp.n_expert_used != 4)
        return;
    fg_diag d = {{0}};
    fg_ep_shard_t *shard;
    fg_ep_shard_options so = {.n_expert = m->hp.n_expert, .n_ranks = 2};
    fg_ep_inproc_group_t *g;
    CHECK(fg_ep_shard_create(&so, &shard, &d) == FG_OK && fg_ep_inproc_group_create(2, &g, &d) == FG_OK);
    static mismatch_rank r[2];
    fg_ep_transport_t *t[2];
    const int max_tokens[2] = {1, 64};
    const size_t dsz = (size_t)m->hp.n_embd;
    for (int i = 0; i < 2; i++) {
        CHECK(fg_ep_inproc_transport_create(g, i, &t[i], &d) == FG_OK);
        CHECK(fg_moe_ep_create(&m->base, shard, t[i], max_tokens[i], 0, NULL, FG_ISA_AUTO, &r[i].ep, &d) == FG_OK);
        r[i].il = (int)(ly - m->layers);
        r[i].xn = calloc(64 * dsz, sizeof(float));
        r[i].x = calloc(64 * dsz, sizeof(float));
    }
    r[0].n = 0;
    r[1].n = 64; /* every token's 4 experts are rank 0's (contiguous: 0..7) */
    for (int i = 0; i < 64 * 4; i++) {
        r[1].ids[i] = i % 4;
        r[1].w[i] = 0.25f;
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&th[i], NULL, mismatch_main, &r[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_MSG(r[0].err == FG_ERR_INVALID_ARG && strstr(r[0].diag.msg, "same max tokens"), "rank 0: %s",
              r[0].diag.msg);
    CHECK_MSG(r[1].err == FG_ERR_INVALID_ARG, "rank 1: %s", r[1].diag.msg);
    for (int i = 0; i < 2; i++) {
        fg_moe_ep_destroy(r[i].ep);
        fg_ep_transport_destroy(t[i]);
        free(r[i].xn);
        free(r[i].x);
    }
    fg_ep_inproc_group_destroy(g);
    fg_ep_shard_destroy(shard);
}

/* Two ranks whose expert placements differ (a node started with another
 * topology.placement or hot_experts): both see it in the headers, both get
 * the error naming the keys, nobody computes a row it does not hold and
 * nobody hangs. */
static void check_mismatched_placement(const fg_model *m)
{
    const fg_layer *ly = NULL;
    for (int il = 0; il < m->hp.n_layer && !ly; il++)
        if (m->layers[il].is_moe)
            ly = &m->layers[il];
    if (!ly || m->hp.n_expert_used != 4)
        return;
    fg_diag d = {{0}};
    fg_ep_shard_t *shard[2];
    fg_ep_inproc_group_t *g;
    fg_ep_shard_options so = {.n_expert = m->hp.n_expert, .n_ranks = 2, .placement = FG_EP_CONTIGUOUS};
    CHECK(fg_ep_shard_create(&so, &shard[0], &d) == FG_OK);
    so.placement = FG_EP_STRIDED;
    CHECK(fg_ep_shard_create(&so, &shard[1], &d) == FG_OK);
    CHECK(fg_ep_inproc_group_create(2, &g, &d) == FG_OK);
    static mismatch_rank r[2];
    fg_ep_transport_t *t[2];
    const size_t dsz = (size_t)m->hp.n_embd;
    for (int i = 0; i < 2; i++) {
        CHECK(fg_ep_inproc_transport_create(g, i, &t[i], &d) == FG_OK);
        CHECK(fg_moe_ep_create(&m->base, shard[i], t[i], 64, 0, NULL, FG_ISA_AUTO, &r[i].ep, &d) == FG_OK);
        r[i].il = (int)(ly - m->layers);
        r[i].n = 8;
        r[i].xn = calloc(64 * dsz, sizeof(float));
        r[i].x = calloc(64 * dsz, sizeof(float));
        for (int j = 0; j < 8 * 4; j++) {
            r[i].ids[j] = (j * 5) % 16;
            r[i].w[j] = 0.25f;
        }
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&th[i], NULL, mismatch_main, &r[i]) == 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_MSG(r[i].err == FG_ERR_INVALID_ARG && strstr(r[i].diag.msg, "places the experts differently") &&
                      strstr(r[i].diag.msg, "hot_experts"),
                  "rank %d: %s", i, r[i].diag.msg);
        fg_moe_ep_destroy(r[i].ep);
        fg_ep_transport_destroy(t[i]);
        free(r[i].xn);
        free(r[i].x);
        fg_ep_shard_destroy(shard[i]);
    }
    fg_ep_inproc_group_destroy(g);
}

/* All configurations on one model; returns through CHECK. */
static void check_model(const char *file)
{
    fg_gguf_t *g;
    fg_model *m;
    fg_diag d = {{0}};
    if (fg_gguf_open_file(model_path(file), &g, &d) != FG_OK || fg_model_load(g, &m, &d) != FG_OK) {
        CHECK_MSG(false, "%s: %s", file, d.msg);
        return;
    }
    const int V = m->hp.n_vocab;
    fg_kv_geometry geo;
    fg_kv_store_t *kv;
    CHECK(fg_kv_geometry_init(&geo, &m->hp, FG_KV_F32, &d) == FG_OK);
    CHECK(fg_kv_store_create(&geo, (size_t)64 << 20, &kv, &d) == FG_OK);

    /* Indices 2, 5 and 9 are the runs the capacity ones repeat. */
    const config configs[] = {
        {0, 0, FG_EP_CONTIGUOUS, 0, 0, false}, /* the reference */
        {1, 0, FG_EP_CONTIGUOUS, 0, 0, false}, {2, 0, FG_EP_CONTIGUOUS, 0, 0, false},
        {4, 0, FG_EP_CONTIGUOUS, 0, 0, false}, {2, 0, FG_EP_STRIDED, 0, 0, false},
        {4, 4, FG_EP_STRIDED, 0, 0, false},    {2, 6, FG_EP_CONTIGUOUS, 0, 0, false},
        /* uneven: 16 experts on 3 ranks own 6/5/5; 2 replicas make 6 slots each */
        {3, 0, FG_EP_CONTIGUOUS, 0, 0, false}, {3, 0, FG_EP_STRIDED, 0, 0, false},
        {3, 2, FG_EP_CONTIGUOUS, 0, 0, false},
        /* A receive capacity far below the worst case (2 * 256 * 4 = 2048 rows at 2 ranks, 4096 at 4) but above
         * any one expert's rows: the prefill's exchanges run in several rounds, every expert whole in one. */
        {2, 0, FG_EP_CONTIGUOUS, CAP_WHOLE, 2, false}, {4, 4, FG_EP_STRIDED, CAP_WHOLE, 5, false},
        {3, 2, FG_EP_CONTIGUOUS, CAP_WHOLE, 9, false},
        /* Below some experts' rows: those are cut over rounds. */
        {2, 0, FG_EP_CONTIGUOUS, CAP_SPLIT, 2, true},  {4, 4, FG_EP_STRIDED, CAP_SPLIT, 5, true},
    };
    enum { NC = sizeof configs / sizeof configs[0] };
    static result res[NC];
    for (int c = 0; c < NC; c++) {
        res[c].logits = malloc(sizeof(float) * NSEQ * POS * (size_t)V);
        if (configs[c].ranks <= max_ranks)
            run(m, &geo, kv, configs[c], &res[c]);
    }
    /* Q8_0 weights: the kernels quantize and sum a batch by its size (tiles from 4 tokens, panels from 8), so an
     * expert cut over rounds sees other batch sizes than in one piece; measured 8.9e-3 on tiny-q8_0. */
    const bool q8 = strstr(file, "q8_0") != NULL;
    float amax = 0; /* --cuda: the GPU sums in other orders; its bound is relative to the largest logit */
    for (size_t i = 0; i < (size_t)NSEQ * POS * V; i++)
        if (!isnan(res[0].logits[i]))
            amax = fmaxf(amax, fabsf(res[0].logits[i]));
    for (int c = 1; c < NC; c++) {
        const config *cf = &configs[c];
        if (cf->ranks > max_ranks)
            continue;
        float worst = 0;
        for (size_t i = 0; i < (size_t)NSEQ * POS * V; i++) {
            const float a = res[0].logits[i], b = res[c].logits[i];
            if (isnan(a) != isnan(b)) {
                worst = INFINITY; /* evaluated in one run, not the other */
                break;
            }
            if (!isnan(a) && fabsf(a - b) > worst)
                worst = fabsf(a - b);
        }
        const bool same = memcmp(res[0].gen, res[c].gen, sizeof res[0].gen) == 0;
        /* Whole experts: bit for bit the run without the capacity. */
        const bool exact = cf->cap && !cf->splits &&
                           memcmp(res[c].logits, res[cf->base].logits, sizeof(float) * NSEQ * POS * (size_t)V) == 0;
        fprintf(stderr,
                "%s: ranks %d, redundant %d, %s, capacity %lld (%llu rounds for %llu exchanges, %llu experts cut): "
                "max |dlogit| = %g%s, greedy tokens %s\n",
                file, cf->ranks, cf->redundant, cf->placement == FG_EP_STRIDED ? "strided" : "contiguous",
                (long long)cf->cap, (unsigned long long)res[c].ex.rounds, (unsigned long long)res[c].ex.exchanges,
                (unsigned long long)res[c].ex.split_experts, worst, exact ? " (bit-identical without capacity)" : "",
                same ? "same" : "DIFFER");
        const float tol = cf->splits && q8 ? 2e-2f : use_cuda ? 1e-3f * fmaxf(amax, 1) : 1e-4f;
        CHECK_MSG(worst <= tol, "%s, ranks %d: max |dlogit| %g > %g", file, cf->ranks, worst, tol);
        CHECK_MSG(same, "%s, ranks %d: greedy tokens differ from one rank", file, cf->ranks);
        if (cf->cap && !cf->splits && !use_cuda) /* the GPU's grouped kernels tile by the round's slots */
            CHECK_MSG(exact, "%s, ranks %d, capacity %lld: logits differ from the same run without it", file,
                      cf->ranks, (long long)cf->cap);
    }
    CHECK(res[0].gen[0][DECODE - 1] >= 0 && res[0].gen[1][DECODE - 2] >= 0); /* the decode steps ran */

    /* A placement that does not fit the model is refused with the key named. */
    fg_ep_ranks_t *bad;
    fg_ep_ranks_options o = {.n_ranks = m->hp.n_expert + 1, .max_tokens = 8, .n_threads = 1};
    CHECK_MSG(fg_ep_ranks_create(&m->base, &geo, &o, &bad, &d) == FG_ERR_CONFIG && strstr(d.msg, "topology.ranks (17)"),
              "%s", d.msg);
    o = (fg_ep_ranks_options){.n_ranks = 3, .max_tokens = 8, .n_threads = 1, .redundant = 1};
    CHECK_MSG(fg_ep_ranks_create(&m->base, &geo, &o, &bad, &d) == FG_ERR_CONFIG &&
                  strstr(d.msg, "topology.redundant_experts (1) must even the ranks out"),
              "%s", d.msg);
    /* A capacity that cannot take one row from every rank in a round. */
    o = (fg_ep_ranks_options){.n_ranks = 4, .max_tokens = 8, .n_threads = 1, .recv_capacity_rows = 3};
    CHECK_MSG(fg_ep_ranks_create(&m->base, &geo, &o, &bad, &d) == FG_ERR_CONFIG &&
                  strstr(d.msg, "topology.recv_capacity_rows (3) is too small") && strstr(d.msg, "at least 4"),
              "%s", d.msg);
    if (strcmp(file, "tiny.gguf") == 0 && !use_nccl) {
        check_mismatched_ranks(m);
        check_mismatched_placement(m);
    }

    for (int c = 0; c < NC; c++)
        free(res[c].logits);
    CHECK(fg_kv_store_pages_free(kv) == fg_kv_store_pages_total(kv));
    fg_kv_store_destroy(kv);
    fg_model_free(m);
    fg_gguf_close(g);
}

/* No arguments: in-process ranks (CI). "--nccl N": NCCL between up to N
 * ranks, one GPU each (deploy/ep-nccl-check.sh on a GPU machine). "--cuda
 * N": in-process ranks computing on the cuda backend, up to N ranks, rank i
 * on GPU i, against the plain CPU pass within 1e-3 of its largest logit
 * (deploy/gpu-selfcheck.sh). */
int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--nccl") == 0) {
        use_nccl = true;
        max_ranks = atoi(argv[2]);
        if (!fg_ep_nccl_available() || max_ranks < 1) {
            fprintf(stderr, "test_ep_logits: --nccl needs a build with NCCL and a GPU count >= 1\n");
            return 2;
        }
    } else if (argc == 3 && strcmp(argv[1], "--cuda") == 0) {
        use_cuda = true;
        max_ranks = atoi(argv[2]);
        if (!fg_backend_compiled(FG_BACKEND_CUDA) || max_ranks < 1) {
            fprintf(stderr, "test_ep_logits: --cuda needs a build with CUDA and a GPU count >= 1\n");
            return 2;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: test_ep_logits [--nccl GPUS | --cuda GPUS]\n");
        return 2;
    }
    /* sigmoid routing with a bias; softmax; group-limited routing; Q8_0 weights */
    static const char *const models[] = {"tiny.gguf", "tiny-softmax.gguf", "tiny-groups.gguf", "tiny-q8_0.gguf"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        check_model(models[i]);
    /* the MTP block's layer runs its experts through the exchange after the trunk's (CPU ranks; the cuda
     * backend computes the trunk's layers only) */
    if (!use_cuda)
        check_model("tiny-mtp.gguf");
    return TEST_DONE("test_ep_logits");
}
