/* forward.c: the deepseek2 forward pass (see forward.h).
 *
 * Per layer, for the n tokens of the batch (shapes as [rows][cols], f32):
 *   xn    = RMSNorm(x) * attn_norm                                [n][d]
 *   q     = q_b(RMSNorm(q_a(xn)) * q_a_norm)   (or attn_q(xn))     [n][H * (nope + rope)]
 *   kva   = kv_a_mqa(xn)                                           [n][kv_lora + rope]
 *   c     = RMSNorm(kva[:kv_lora]) * kv_a_norm  -> cache latent     [n][kv_lora]
 *   kr    = RoPE(kva[kv_lora:], pos)            -> cache rope key   [n][rope]
 * absorbed sequences (decode tokens, short inputs), the absorbed form:
 *   q_lat[h] = k_b[h] q_nope[h]   (absorb: nope -> kv_lora)        [n][H][kv_lora]
 *   o_lat[h] = softmax(scale * (q_lat[h].c + RoPE(q_rope[h]).kr)) c  over the sequence's cache
 *   o[h]  = v_b[h] o_lat[h]        (expand: kv_lora -> v)          [n][H * v]
 * other input tokens, the decompressed form (kernels/cpu/mha_attn.h):
 *   k[h] = k_b[h]^T c, v[h] = v_b[h] c  per cached row, a page at a time
 *   o[h]  = softmax(scale * (q_nope[h].k[h] + RoPE(q_rope[h]).kr)) v[h]
 *   x    += attn_output(o)
 *   xn    = RMSNorm(x) * ffn_norm
 *   x    += SwiGLU dense FFN(xn), or sum_k w_k expert_k(xn) + shared(xn)
 * then logits = output(RMSNorm(x) * output_norm) for the rows asked for.
 *
 * The MTP block (hp.n_nextn == 1, layer n_layer), after the trunk, for every
 * token (position p) of the batch:
 *   h     = RMSNorm(x_trunk) * output_norm      (what the LM head reads)  [n][d]
 *   x     = eh_proj([RMSNorm(embd(t_p)) * enorm | RMSNorm(h_{p-1}) * hnorm])   [n][2d] -> [n][d]
 *   x     = the layer above on x, its cache rows in the MTP block's slot
 *   mtp logits = head(RMSNorm(x) * head_norm)   (a draft of t_{p+1})
 * h_{p-1} is the previous position's h: the token before in the batch, or the
 * hidden rows kept from the sequence's latest run (forward.h); 0 at p = 0.
 */
#include "engine/model/deepseek2/forward.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/hash64.h"
#include "engine/ep/moe_ep.h"
#include "engine/model/deepseek2/moe_route.h"
#include "engine/model/rope.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/mha_attn.h"
#include "kernels/cpu/mla_attn.h"
#include "kernels/cpu/vecops.h"

#define LOGIT_CHUNK 64 /* rows of logits computed per LM-head product */
#define SPLIT_PARTS 4  /* a lone decode's cache parts per thread and round (attention_job) */
#define KEEP_ROWS (FG_DS2_MAX_DRAFTS + 1) /* hidden rows kept per sequence: a verify run's, for any rollback */

/* The trunk hidden rows of one sequence's latest run (the MTP block's h input
 * for the positions after them). row_hash is a hash of the last trunk layer's
 * cache row at each position, written in the same run: a lookup checks it
 * against the sequence's cache, so a reused fg_kv_seq, a cut-back sequence or
 * a rewritten position never hands out a stale row. */
typedef struct mtp_hidden {
    const fg_kv_seq *kv;      /* NULL: free */
    int pos0, count;          /* positions [pos0, pos0 + count) */
    uint64_t used;            /* the run that stored it (the least recent is replaced) */
    uint64_t row_hash[KEEP_ROWS];
} mtp_hidden;

/* A sequence's drafts since the latest run: their MTP rows live in scratch
 * pages (never in the cache), the last one's hidden in draft_h. */
typedef struct mtp_draft {
    const fg_kv_seq *kv;
    int base;                 /* kv->n_tokens at the first draft: the first draft's position */
    int depth;                /* drafts made: the next one is at base + depth */
} mtp_draft;

/* Three lifetimes, as in llama2.c's run.c: the weights (the model's and the
 * copies derived from them at create), the scratch (sized once at create for
 * max_tokens tokens; a run allocates nothing), and the arguments of each
 * pool job (their own small structs below, made per job). */
struct fg_forward {
    /* ---- settings, fixed at create ---- */
    const fg_model *m;
    fg_kv_geometry geo;
    fg_pool_t *pool;
    fg_isa isa;
    int max_tokens;
    fg_rope rope;
    fg_moe_route_params route;
    fg_moe_ep_t *ep;          /* expert parallelism: routed experts run through it; NULL: here */
    _Atomic uint64_t *pick_sink; /* [E] where a run adds its picks (fg_forward_count_experts); NULL: not counted */

    /* ---- weights: the layers as the products read them ----
     * The model's, their Q8_0 matrices replaced (AVX-512) by copies packed
     * at create into 16-row panels (FG_WTYPE_Q8_0_P16, pack_weight), and f32
     * copies for the decompressed form. */
    fg_layer *layers;         /* [n_layer] */
    void **packed;            /* [n_layer][N_PACKED] owned packed buffers (NULL where not packed) */
    fg_weight output, mtp_head, mtp_eh_proj; /* the model's, or their packed copies */
    void *packed_model[3];    /* owned packed buffers of those (NULL where not packed) */
    float *mha_wk;            /* [n_layer][H][nope][kv_lora] k_b, f32 */
    float *mha_wv;            /* [n_layer][kv_lora][H * v] v_b transposed, f32 */

    /* ---- scratch, sized for max_tokens (T) tokens ---- */
    float *x, *xn;            /* [T][d] */
    float *qa;                /* [T][q_lora] */
    float *q;                 /* [T][H * qk] */
    float *kva;               /* [T][kv_lora + rope] */
    float *q_lat, *o_lat;     /* [T][H][kv_lora] */
    float *q_rope;            /* [T][H][rope] */
    float *o;                 /* [T][H * v] */
    float *tmp_d;             /* [T][d] */
    float *xe;                /* [T][d] one expert's gathered inputs */
    float *ff_gate, *ff_up;   /* [T][F] */
    float *router;            /* [T][E] */
    int *sel_ids;             /* [T][k] */
    float *sel_w;             /* [T][k] */
    int *exp_count;           /* [E + 1] */
    int *exp_list;            /* [T * k] token index per routed slot, grouped by expert */
    float *exp_list_w;        /* [T * k] */
    /* Experts run in parallel, one expert (or the shared expert) per task: */
    float *exp_out;           /* [T * k][d] each routed slot's expert output, in exp_list order */
    float *shared_out;        /* [T][d] the shared expert's output */
    int *exp_tasks;           /* [E + 1] the tasks of a layer: -1 the shared expert, else an expert id */
    void *xn_q8;              /* xn's rows quantized once for the expert tasks (fg_q8_rows, [T] rows of d) */
    int *iota;                /* [T] 0, 1, ..: the shared expert's rows of xn_q8 */
    struct fg_expert_scratch *exp_scratch; /* [nth] one per thread */
    float *route_scratch;
    float *logit_rows;        /* [LOGIT_CHUNK][d] */
    float *logit_out;         /* [LOGIT_CHUNK][V] */
    int *tok_pos;             /* [T] position of each token */
    int *tok_seq;             /* [T] sequence index of each token */
    int *tok_nkv;             /* [T] cached tokens each token attends over: its position + 1 */
    float *rope_cs;           /* [T][rope] each token's RoPE cos/sin (fg_rope_coefs), once per run */
    float *part;              /* [SPLIT_PARTS * nth + 1][H * kv_lora + 2H]: a lone decode's parts, the folded m, l */
    float *attn_scratch;      /* [nth][attn_scratch_floats] */
    size_t attn_scratch_floats;
    float *mha_tiles;         /* [nth][mha_tile_floats] each thread's page tile, then its head tile */
    size_t mha_tile_floats, mha_page_tile_floats;
    float *mha_scratch;       /* [nth][mha_scratch_floats] */
    size_t mha_scratch_floats;
    float *mha_m, *mha_l;     /* [T][H] each prompt query's running maximum and denominator */
    void *mm_scratch;
    size_t mm_scratch_bytes;
    uint64_t *picks;          /* [E] routed (token, expert) picks of this run per expert id, all MoE layers */
    fg_err ep_err;            /* first exchange error of this run (the run still completes its exchanges) */
    fg_diag ep_diag;

    /* ---- the MTP block (hp.n_nextn == 1; all NULL otherwise) ---- */
    float *mtp_out;           /* fg_forward_set_mtp_out: [rows][V]; NULL: MTP logits not written */
    float *mtp_in;            /* [T][2d] [enorm(embed) | hnorm(h)] */
    float *h_cur;             /* [T][d] the trunk's normed hidden of each token of this run */
    float *h_prev;            /* [T][d] each token's h input: the previous position's hidden */
    mtp_hidden *hid;          /* [T] the kept hidden rows, one entry per sequence */
    float *hid_rows;          /* [T][KEEP_ROWS][d] */
    uint64_t n_runs;          /* runs so far (hid's clock) */
    mtp_draft *drafts;        /* [T] this forward's drafts since the latest run */
    int n_drafts;
    float *draft_h;           /* [T][d] the MTP hidden of each draft slot's latest draft */
    uint8_t *draft_pages;     /* [T][2][FG_KV_PAGE_TOKENS * row_bytes] the MTP rows from the draft's page on */
    int *draft_slot;          /* [T] each sequence's slot in a draft call */
    fg_kv_seq *draft_kv;      /* [T] the page tables the draft's attention reads */
    fg_fwd_seq *draft_seqs;   /* [T] */
    uint8_t **draft_table;    /* page pointers for draft_kv, grown as sequences grow */
    size_t draft_table_cap;
    bool drafting;            /* a draft is running: experts here even with ep set */
};

/* One thread's buffers for the expert and head tasks, sized for max_tokens (T) tokens. */
typedef struct fg_expert_scratch {
    float *xe;                /* [T][d] the task's gathered inputs */
    float *gate, *up;         /* [T][F] */
    float *head_in;           /* [T][max(nope, kv_lora)] one head's gathered inputs */
    float *head_out;          /* [T][max(kv_lora, v)] one head's outputs */
    void *mm;                 /* matmul scratch */
} fg_expert_scratch;

/* The pool jobs of a run take their arguments from a small struct made for
 * the one job (on the caller's stack), never from fields of the forward:
 * what a job reads is in its struct, and the long-lived struct holds only
 * weights, settings and scratch. */

/* One per-head product over all heads: for every head h and token t < n,
 * dst[t][h * out_w ..] = matrix h of w applied to src[t][h * src_step .. + in_w]. */
typedef struct fg_head_pass {
    const fg_weight *w;
    const float *src;
    int src_stride, src_step;  /* floats */
    float *dst;
    int dst_stride;            /* floats; head h's outputs start at h * w->n_out */
} fg_head_pass;

typedef struct heads_args {
    fg_forward_t *f;
    const fg_head_pass *p;
    int n;                     /* tokens */
    atomic_int next;           /* next head to take */
} heads_args;

/* Absorbed attention of the batch's n tokens in one layer. */
typedef struct attn_args {
    fg_forward_t *f;
    const fg_fwd_seq *seqs;
    int layer, n;
    bool split;                /* one token: its cache's parts over the threads */
    int part0, n_parts;        /* split: this round's parts, dealt to the threads in runs */
    int block;                 /* tokens per block */
} attn_args;

/* Decompressed (MHA) attention of one sequence's prompt tokens
 * [first, first + n) of the batch. */
typedef struct mha_args {
    fg_forward_t *f;
    fg_mha_attn_params p;      /* the sequence and the layer */
    int first, n;
    int rows;                  /* rows of the sequence that the queries may read */
} mha_args;

/* The expert tasks of one MoE layer over the batch's n tokens. */
typedef struct experts_args {
    fg_forward_t *f;
    const fg_layer *ly;
    int n, n_tasks;            /* tokens; tasks in f->exp_tasks */
    bool xn_q8;                /* the tasks read xn through f->xn_q8 */
    atomic_int next;           /* next task to take */
} experts_args;

static void *xalloc(size_t n, int *failed)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        *failed = 1;
        return NULL;
    }
    return p;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Makes *dst the weight the products read for src: src itself, or, where the
 * AVX-512 kernels run, its panel copy (fg_weight_pack_q8_p16): the panel
 * kernel gives a token the same bits in any batch (the raw Q8_0 kernels sum
 * the blocks in another order by row count), which speculative decoding's
 * verify passes need, and runs the expert products of 1 .. 12 tokens about
 * twice as fast (docs/benchmarks.md). Returns 0, or -1 when out of memory
 * (dst is then src). */
static int pack_weight(const fg_forward_t *f, const fg_weight *src, fg_weight *dst, void **owned)
{
    *dst = *src;
    *owned = NULL;
    const fg_isa isa = f->isa == FG_ISA_AUTO ? fg_isa_best() : f->isa;
    if (isa != FG_ISA_AVX512)
        return 0; /* the scalar reference's products are batch-invariant as they are; AVX2's are not */
    return fg_weight_pack_q8_p16(src, f->m->base.weights_file_mapped, dst, owned) < 0 ? -1 : 0;
}

#define N_PACKED 15 /* per layer: the Q8_0 matrices of the products (the routed experts first) */
#define N_PACKED_MODEL 3 /* the output head, the MTP block's head and eh_proj */

/* f->layers: the model's layers, the routed experts packed where
 * pack_weight() packs. */
static int setup_layers(fg_forward_t *f)
{
    const int nl = f->m->base.n_layer_run;
    f->layers = calloc((size_t)nl, sizeof *f->layers);
    f->packed = calloc((size_t)nl * N_PACKED, sizeof *f->packed);
    if (!f->layers || !f->packed)
        return -1;
    for (int il = 0; il < nl; il++) {
        const fg_layer *src = &f->m->layers[il];
        fg_layer *ly = &f->layers[il];
        *ly = *src;
        /* Every product's matrix, not only the routed experts' (where the panel
         * kernel is faster): a lone decode pays for it (the row kernels over the
         * mapped weights were 14 % faster on one thread, docs/benchmarks.md) so
         * that a token's result does not depend on its batch (the router is F32:
         * batch-invariant on AVX-512). */
        const fg_weight *from[N_PACKED] = {&src->gate_exps, &src->up_exps,   &src->down_exps,  &src->q_a,
                                           &src->q_b,       &src->kv_a,      &src->attn_out,   &src->ffn_gate,
                                           &src->ffn_up,    &src->ffn_down,  &src->gate_shexp, &src->up_shexp,
                                           &src->down_shexp, &src->k_b,      &src->v_b};
        fg_weight *to[N_PACKED] = {&ly->gate_exps, &ly->up_exps,  &ly->down_exps, &ly->q_a,
                                   &ly->q_b,       &ly->kv_a,     &ly->attn_out,  &ly->ffn_gate,
                                   &ly->ffn_up,    &ly->ffn_down, &ly->gate_shexp, &ly->up_shexp,
                                   &ly->down_shexp, &ly->k_b,      &ly->v_b};
        for (int i = 0; i < N_PACKED; i++)
            if (pack_weight(f, from[i], to[i], &f->packed[(size_t)il * N_PACKED + i]) != 0)
                return -1;
    }
    const fg_model *m = f->m;
    const fg_weight *from[N_PACKED_MODEL] = {&m->output, &m->mtp.head, &m->mtp.eh_proj};
    fg_weight *to[N_PACKED_MODEL] = {&f->output, &f->mtp_head, &f->mtp_eh_proj};
    for (int i = 0; i < N_PACKED_MODEL; i++)
        if (pack_weight(f, from[i], to[i], &f->packed_model[i]) != 0)
            return -1;
    if (m->mtp.head.data == m->output.data) { /* no shared_head_head: one copy of the output head */
        free(f->packed_model[1]);
        f->packed_model[1] = NULL;
        f->mtp_head = f->output;
    }
    return 0;
}

/* mha_wk and mha_wv: every layer's k_b (transposed: [h][j][l], so a key
 * channel's weights are contiguous) and v_b (transposed: [l][h * v + j]) in
 * f32, the layouts mha_attn.h reads. Returns 0, or -1 when out of memory. */
static int setup_mha_weights(fg_forward_t *f)
{
    const fg_hparams *hp = &f->m->hp;
    const int H = hp->n_head, L = hp->kv_lora, NK = hp->n_nope, NV = hp->n_v;
    float *row = malloc((size_t)(L > NK ? L : NK) * sizeof *row);
    if (!row)
        return -1;
    for (int il = 0; il < f->m->base.n_layer_run; il++) {
        const fg_layer *ly = &f->m->layers[il];
        float *wk = f->mha_wk + (size_t)il * H * NK * L, *wv = f->mha_wv + (size_t)il * L * H * NV;
        for (int h = 0; h < H; h++) {
            fg_weight kb = ly->k_b, vb = ly->v_b; /* matrix h as a 2-D weight */
            kb.data = (const uint8_t *)ly->k_b.data + (size_t)h * ly->k_b.mat_bytes;
            vb.data = (const uint8_t *)ly->v_b.data + (size_t)h * ly->v_b.mat_bytes;
            for (int i = 0; i < L; i++) { /* k_b row i: latent channel i's weights over the nope channels */
                fg_weight_row_f32(&kb, i, row);
                for (int j = 0; j < NK; j++)
                    wk[((size_t)h * NK + j) * L + i] = row[j];
            }
            for (int j = 0; j < NV; j++) { /* v_b row j: value channel j's weights over the latent */
                fg_weight_row_f32(&vb, j, row);
                for (int i = 0; i < L; i++)
                    wv[(size_t)i * H * NV + (size_t)h * NV + j] = row[i];
            }
        }
    }
    free(row);
    return 0;
}

fg_err fg_forward_create(const fg_model *m, const fg_kv_geometry *geo, int max_tokens, fg_pool_t *pool, fg_isa isa,
                         fg_forward_t **out, fg_diag *diag)
{
    *out = NULL;
    if (max_tokens < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "max batch tokens must be >= 1");
    if (geo->n_layer != m->base.n_layer_run)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "cache geometry of %d layers for a model that runs %d",
                           geo->n_layer, m->base.n_layer_run);
    fg_forward_t *f = calloc(1, sizeof *f);
    if (!f)
        return fg_diag_set(diag, FG_ERR_NOMEM, "forward: out of memory");
    const fg_hparams *hp = &m->hp;
    f->m = m;
    f->geo = *geo;
    f->pool = pool;
    f->isa = isa;
    f->max_tokens = max_tokens;
    fg_err e = fg_rope_init(&f->rope, hp, diag);
    if (e != FG_OK) {
        free(f);
        return e;
    }
    f->route = (fg_moe_route_params){
        .n_expert = hp->n_expert,
        .n_used = hp->n_expert_used,
        .gating = hp->gating,
        .bias = NULL, /* per layer */
        .n_group = hp->n_group,
        .n_group_used = hp->n_group_used,
        .norm = hp->expert_weights_norm,
        .scale = hp->expert_weights_scale,
    };

    const size_t T = (size_t)max_tokens, d = (size_t)hp->n_embd, H = (size_t)hp->n_head;
    const size_t qk = (size_t)(hp->n_nope + hp->n_rope), L = (size_t)hp->kv_lora, R = (size_t)hp->n_rope;
    const size_t V = (size_t)hp->n_vocab, E = (size_t)hp->n_expert, K = (size_t)hp->n_expert_used;
    size_t F = max_sz((size_t)hp->n_ff, (size_t)hp->n_ff_exp * max_sz(1, (size_t)hp->n_expert_shared));
    const size_t fl = sizeof(float);
    int failed = 0;
    f->x = xalloc(T * d * fl, &failed);
    f->xn = xalloc(T * d * fl, &failed);
    f->qa = xalloc(T * (size_t)hp->q_lora * fl, &failed);
    f->q = xalloc(T * H * qk * fl, &failed);
    f->kva = xalloc(T * (L + R) * fl, &failed);
    f->q_lat = xalloc(T * H * L * fl, &failed);
    f->o_lat = xalloc(T * H * L * fl, &failed);
    f->q_rope = xalloc(T * H * R * fl, &failed);
    f->o = xalloc(T * H * (size_t)hp->n_v * fl, &failed);
    f->tmp_d = xalloc(T * d * fl, &failed);
    f->xe = xalloc(T * d * fl, &failed);
    f->ff_gate = xalloc(T * F * fl, &failed);
    f->ff_up = xalloc(T * F * fl, &failed);
    f->router = xalloc(T * E * fl, &failed);
    f->sel_ids = xalloc(T * K * sizeof(int), &failed);
    f->sel_w = xalloc(T * K * fl, &failed);
    f->exp_count = xalloc((E + 1) * sizeof(int), &failed);
    f->picks = xalloc((E ? E : 1) * sizeof(uint64_t), &failed);
    f->exp_list = xalloc(T * K * sizeof(int), &failed);
    f->exp_list_w = xalloc(T * K * fl, &failed);
    f->route_scratch = xalloc((size_t)fg_moe_route_scratch_floats(&f->route) * fl, &failed);
    f->logit_rows = xalloc(LOGIT_CHUNK * d * fl, &failed);
    f->logit_out = xalloc(LOGIT_CHUNK * V * fl, &failed);
    f->tok_pos = xalloc(T * sizeof(int), &failed);
    f->tok_seq = xalloc(T * sizeof(int), &failed);
    f->tok_nkv = xalloc(T * sizeof(int), &failed);
    f->rope_cs = xalloc(T * R * fl, &failed);
    f->exp_out = xalloc(T * K * d * fl, &failed);
    f->shared_out = xalloc(T * d * fl, &failed);
    f->exp_tasks = xalloc((E + 1) * sizeof(int), &failed);
    f->xn_q8 = xalloc(fg_q8_rows_bytes((int64_t)d, (int64_t)T), &failed);
    f->iota = xalloc(T * sizeof(int), &failed);
    for (size_t t = 0; f->iota && t < T; t++)
        f->iota[t] = (int)t;

    fg_mla_attn_params ap = {.n_head = hp->n_head, .kv_lora = hp->kv_lora, .n_rope = hp->n_rope,
                             .format = geo->format, .row_bytes = geo->row_bytes, .n_kv = 1};
    f->attn_scratch_floats = (fg_mla_attn_scratch_floats(&ap) + 15) & ~(size_t)15;
    int nth = pool ? fg_pool_size(pool) : 1;
    f->attn_scratch = xalloc((size_t)nth * f->attn_scratch_floats * fl, &failed);
    f->part = xalloc((size_t)(SPLIT_PARTS * nth + 1) * (H * L + 2 * H) * fl, &failed);
    const size_t NL = (size_t)m->base.n_layer_run, NK = (size_t)hp->n_nope, NV = (size_t)hp->n_v;
    f->mha_wk = xalloc(NL * H * NK * L * fl, &failed);
    f->mha_wv = xalloc(NL * L * H * NV * fl, &failed);
    const fg_mha_attn_params mp = {.n_head = hp->n_head, .kv_lora = hp->kv_lora, .n_rope = hp->n_rope,
                                   .n_nope = hp->n_nope, .n_v = hp->n_v};
    f->mha_page_tile_floats = (fg_mha_page_tile_floats(&mp) + 15) & ~(size_t)15;
    f->mha_tile_floats = f->mha_page_tile_floats + ((fg_mha_head_tile_floats(&mp) + 15) & ~(size_t)15);
    f->mha_tiles = xalloc((size_t)nth * f->mha_tile_floats * fl, &failed);
    f->mha_scratch_floats = (fg_mha_scratch_floats(&mp) + 15) & ~(size_t)15;
    f->mha_scratch = xalloc((size_t)nth * f->mha_scratch_floats * fl, &failed);
    f->mha_m = xalloc(T * H * fl, &failed);
    f->mha_l = xalloc(T * H * fl, &failed);

    /* Matmul scratch: the largest need over every product the pass makes. */
    size_t mm = 0;
    const int64_t rows = (int64_t)T;
    const fg_weight *ws[] = {&m->output, &m->tok_embd, &m->mtp.head};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
        if (ws[i]->data)
            mm = max_sz(mm, fg_matmul_scratch_bytes(ws[i]->type, ws[i]->n_in, LOGIT_CHUNK));
    if (m->mtp.eh_proj.data)
        mm = max_sz(mm, fg_matmul_scratch_bytes(m->mtp.eh_proj.type, m->mtp.eh_proj.n_in, rows));
    for (int il = 0; il < m->base.n_layer_run; il++) {
        const fg_layer *ly = &m->layers[il];
        const fg_weight *lw[] = {&ly->q_a, &ly->q_b, &ly->kv_a, &ly->k_b, &ly->v_b, &ly->attn_out,
                                 &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, &ly->router, &ly->gate_exps,
                                 &ly->up_exps, &ly->down_exps, &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp};
        for (size_t i = 0; i < sizeof lw / sizeof *lw; i++)
            if (lw[i]->data)
                mm = max_sz(mm, fg_matmul_scratch_bytes(lw[i]->type, lw[i]->n_in, rows));
    }
    f->mm_scratch_bytes = mm;
    f->mm_scratch = xalloc(mm, &failed);
    if (hp->n_nextn) {
        const size_t page_rows = FG_KV_PAGE_TOKENS * geo->row_bytes;
        f->mtp_in = xalloc(T * 2 * d * fl, &failed);
        f->h_cur = xalloc(T * d * fl, &failed);
        f->h_prev = xalloc(T * d * fl, &failed);
        f->hid = xalloc(T * sizeof *f->hid, &failed);
        f->hid_rows = xalloc(T * KEEP_ROWS * d * fl, &failed);
        f->drafts = xalloc(T * sizeof *f->drafts, &failed);
        f->draft_h = xalloc(T * d * fl, &failed);
        f->draft_pages = xalloc(T * 2 * page_rows, &failed);
        f->draft_slot = xalloc(T * sizeof(int), &failed);
        f->draft_kv = xalloc(T * sizeof *f->draft_kv, &failed);
        f->draft_seqs = xalloc(T * sizeof *f->draft_seqs, &failed);
        if (f->hid)
            memset(f->hid, 0, T * sizeof *f->hid);
    }
    f->exp_scratch = calloc((size_t)nth, sizeof *f->exp_scratch);
    if (!f->exp_scratch)
        failed = 1;
    for (int i = 0; f->exp_scratch && i < nth; i++) {
        f->exp_scratch[i].xe = xalloc(T * d * fl, &failed);
        f->exp_scratch[i].gate = xalloc(T * F * fl, &failed);
        f->exp_scratch[i].up = xalloc(T * F * fl, &failed);
        f->exp_scratch[i].head_in = xalloc(T * max_sz((size_t)hp->n_nope, L) * fl, &failed);
        f->exp_scratch[i].head_out = xalloc(T * max_sz(L, (size_t)hp->n_v) * fl, &failed);
        f->exp_scratch[i].mm = xalloc(mm, &failed);
    }
    if (failed) {
        fg_forward_destroy(f);
        return fg_diag_set(diag, FG_ERR_NOMEM, "forward: cannot allocate scratch for %d tokens", max_tokens);
    }
    if (setup_layers(f) != 0) {
        fg_forward_destroy(f);
        return fg_diag_set(diag, FG_ERR_NOMEM, "forward: cannot allocate the packed weights");
    }
    if (setup_mha_weights(f) != 0) {
        fg_forward_destroy(f);
        return fg_diag_set(diag, FG_ERR_NOMEM, "forward: out of memory");
    }
    *out = f;
    return FG_OK;
}

void fg_forward_destroy(fg_forward_t *f)
{
    if (!f)
        return;
    void *bufs[] = {f->x, f->xn, f->qa, f->q, f->kva, f->q_lat, f->o_lat, f->q_rope,
                    f->o, f->tmp_d, f->xe, f->ff_gate, f->ff_up, f->router, f->sel_ids, f->sel_w, f->exp_count,
                    f->exp_list, f->exp_list_w, f->route_scratch, f->logit_rows, f->logit_out, f->tok_pos,
                    f->tok_seq, f->tok_nkv, f->rope_cs, f->attn_scratch, f->part, f->mm_scratch, f->exp_out,
                    f->shared_out, f->exp_tasks, f->xn_q8, f->iota, f->picks, f->mha_wk, f->mha_wv, f->mha_tiles,
                    f->mha_scratch, f->mha_m, f->mha_l, f->mtp_in, f->h_cur, f->h_prev, f->hid, f->hid_rows,
                    f->drafts, f->draft_h, f->draft_pages, f->draft_slot, f->draft_kv, f->draft_seqs};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        free(bufs[i]);
    const int nth = f->pool ? fg_pool_size(f->pool) : 1;
    for (int i = 0; f->exp_scratch && i < nth; i++) {
        free(f->exp_scratch[i].xe);
        free(f->exp_scratch[i].gate);
        free(f->exp_scratch[i].up);
        free(f->exp_scratch[i].head_in);
        free(f->exp_scratch[i].head_out);
        free(f->exp_scratch[i].mm);
    }
    free(f->exp_scratch);
    free(f->draft_table);
    for (int i = 0; f->packed && i < f->m->base.n_layer_run * N_PACKED; i++)
        free(f->packed[i]);
    free(f->packed);
    for (int i = 0; i < N_PACKED_MODEL; i++)
        free(f->packed_model[i]);
    free(f->layers);
    free(f);
}

int fg_forward_max_tokens(const fg_forward_t *f) { return f->max_tokens; }

/* y[n][w.n_out] = matrix `mat` of w applied to x[n][w.n_in]. */
static void matmul(fg_forward_t *f, const fg_weight *w, int64_t mat, const float *x, int n, float *y)
{
    const uint8_t *data = (const uint8_t *)w->data + (size_t)mat * w->mat_bytes;
    /* Cannot fail: types and shapes were validated at model load. */
    (void)fg_matmul(f->pool, f->isa, w->type, data, w->n_in, w->n_out, x, n, y, f->mm_scratch);
}

/* a[n][wa.n_out] and b[n][wb.n_out]: matrix `mat` of wa and of wb applied to
 * the same x[n][n_in] in one fg_matmul_many call. */
static void matmul2_on(fg_pool_t *pool, fg_isa isa, void *mm_scratch, const fg_weight *wa, float *a,
                       const fg_weight *wb, float *b, int64_t mat, const float *x, int n)
{
    const fg_matmul_op ops[2] = {
        {.wtype = wa->type, .w = (const uint8_t *)wa->data + (size_t)mat * wa->mat_bytes, .n_out = wa->n_out, .y = a},
        {.wtype = wb->type, .w = (const uint8_t *)wb->data + (size_t)mat * wb->mat_bytes, .n_out = wb->n_out, .y = b},
    };
    /* Cannot fail: types and shapes were validated at model load (wa and wb read the same rows). */
    (void)fg_matmul_many(pool, isa, ops, 2, wa->n_in, x, n, mm_scratch);
}

static void matmul2(fg_forward_t *f, const fg_weight *wa, float *a, const fg_weight *wb, float *b, int64_t mat,
                    const float *x, int n)
{
    matmul2_on(f->pool, f->isa, f->mm_scratch, wa, a, wb, b, mat, x, n);
}

static void rmsnorm_rows(const fg_forward_t *f, float *y, const float *x, const float *w, int n, int width,
                         int y_stride, int x_stride, float eps)
{
    for (int t = 0; t < n; t++)
        fg_rmsnorm_isa(f->isa, y + (size_t)t * y_stride, x + (size_t)t * x_stride, w, width, eps);
}

/* Copies column block [col, col + width) of src rows into dst rows (and back). */
static void gather_cols(float *dst, const float *src, int n, int src_stride, int col, int width)
{
    for (int t = 0; t < n; t++)
        memcpy(dst + (size_t)t * width, src + (size_t)t * src_stride + col, (size_t)width * sizeof(float));
}

static void scatter_cols(float *dst, const float *src, int n, int dst_stride, int col, int width)
{
    for (int t = 0; t < n; t++)
        memcpy(dst + (size_t)t * dst_stride + col, src + (size_t)t * width, (size_t)width * sizeof(float));
}

static fg_mla_attn_params attn_params(const attn_args *a, long t)
{
    const fg_forward_t *f = a->f;
    const fg_hparams *hp = &f->m->hp;
    const fg_fwd_seq *s = &a->seqs[f->tok_seq[t]];
    return (fg_mla_attn_params){
        .n_head = hp->n_head,
        .kv_lora = hp->kv_lora,
        .n_rope = hp->n_rope,
        .scale = f->rope.attn_scale,
        .format = f->geo.format,
        .pages = (const uint8_t *const *)s->kv->pages,
        .layer_offset = (size_t)a->layer * FG_KV_PAGE_TOKENS * f->geo.row_bytes,
        .row_bytes = f->geo.row_bytes,
        .n_kv = f->tok_pos[t] + 1, /* causal: itself and everything before */
        .isa = f->isa,
    };
}

/* Several tokens: each thread takes blocks of them, and each run of one
 * sequence's tokens in a block goes through the cache together
 * (fg_mla_attn_multi: a page dequantized once for up to 32 queries, each
 * query's bits as if alone, so how a prefill is chunked or batched changes
 * nothing). One token (a lone decode): the parts of its cache
 * (FG_MLA_ATTN_PART_ROWS rows each) are dealt to the threads, up to
 * SPLIT_PARTS per thread a round, and folded in order after each round: the
 * kernels take every query in those parts, so the token gets the bits it
 * gets in any batch. */
static void attention_job(void *ctx, int ith, int nth)
{
    const attn_args *a = ctx;
    fg_forward_t *f = a->f;
    const fg_hparams *hp = &f->m->hp;
    const int H = hp->n_head, L = hp->kv_lora, R = hp->n_rope;
    float *scratch = f->attn_scratch + (size_t)ith * f->attn_scratch_floats;
    if (a->split) {
        const fg_mla_attn_params p = attn_params(a, 0);
        const int P = FG_MLA_ATTN_PART_ROWS;
        long b, e;
        fg_pool_split(a->n_parts, 1, ith, nth, &b, &e);
        for (long k = b; k < e; k++) {
            float *part = f->part + (size_t)k * (H * L + 2 * H);
            const int t = (a->part0 + (int)k) * P;
            fg_mla_attn_part(&p, t, t + P, f->q_lat, f->q_rope, part, part + H * L, part + H * L + H, scratch);
        }
        return;
    }
    /* Blocks dealt round-robin: a causal prefill's later queries read more
     * rows, so contiguous halves would leave one thread with most of the work. */
    const long B = a->block, n_blocks = (a->n + B - 1) / B;
    for (long blk = ith; blk < n_blocks; blk += nth) {
        const long t1 = (blk + 1) * B < a->n ? (blk + 1) * B : a->n;
        for (long t = blk * B; t < t1;) {
            long e = t + 1;
            while (e < t1 && f->tok_seq[e] == f->tok_seq[t])
                e++;
            if (a->seqs[f->tok_seq[t]].absorbed) {
                const fg_mla_attn_params p = attn_params(a, t);
                fg_mla_attn_multi(&p, (int)(e - t), f->tok_nkv + t, f->q_lat + (size_t)t * H * L,
                                  f->q_rope + (size_t)t * H * R, f->o_lat + (size_t)t * H * L, scratch);
            } else { /* decompressed: mha_prefill writes their o after the v_b pass */
                memset(f->o_lat + (size_t)t * H * L, 0, (size_t)(e - t) * H * L * sizeof(float));
            }
            t = e;
        }
    }
}

/* Prompt attention of one sequence's queries (batch tokens [mha_first,
 * + mha_n)): the threads take heads (and, with more threads than heads,
 * parts of the queries), so they share nothing and the job has no barrier
 * inside. Each thread walks the pages in order: it loads a page once, then
 * for each of its heads expands the page into that head's keys and values
 * (a head tile that stays in its L1/L2) and updates its queries' states.
 * Which thread does a task does not change any bit. */
static void mha_job(void *ctx, int ith, int nth)
{
    const mha_args *a = ctx;
    fg_forward_t *f = a->f;
    const fg_hparams *hp = &f->m->hp;
    const int H = hp->n_head, R = hp->n_rope, qk = hp->n_nope + R, NV = hp->n_v, n = a->n;
    const int parts = nth > H ? nth / H : 1; /* query parts per head */
    long b, e;
    fg_pool_split((long)H * parts, 1, ith, nth, &b, &e);
    if (b >= e)
        return;
    float *page_tile = f->mha_tiles + (size_t)ith * f->mha_tile_floats;
    float *head_tile = page_tile + f->mha_page_tile_floats;
    float *scratch = f->mha_scratch + (size_t)ith * f->mha_scratch_floats;
    const int pages = (a->rows + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    for (int page = 0; page < pages; page++) {
        const int left = a->rows - page * FG_KV_PAGE_TOKENS;
        const int rows = left < FG_KV_PAGE_TOKENS ? left : FG_KV_PAGE_TOKENS;
        fg_mha_load_page(&a->p, page, rows, page_tile, scratch);
        for (long task = b; task < e; task++) {
            const int h = (int)(task / parts), part = (int)(task % parts);
            const int q_begin = a->first + (int)((long)n * part / parts);
            const int q_end = a->first + (int)((long)n * (part + 1) / parts);
            if (q_begin >= q_end)
                continue;
            fg_mha_decompress(&a->p, page_tile, rows, h, head_tile);
            for (int t0 = q_begin; t0 < q_end; t0 += FG_MHA_GROUP) {
                const int g = q_end - t0 < FG_MHA_GROUP ? q_end - t0 : FG_MHA_GROUP;
                const float *qn[FG_MHA_GROUP], *qr[FG_MHA_GROUP];
                float *o[FG_MHA_GROUP], *m[FG_MHA_GROUP], *l[FG_MHA_GROUP];
                for (int i = 0; i < g; i++) {
                    const size_t th = (size_t)(t0 + i) * H + (size_t)h;
                    qn[i] = f->q + (size_t)(t0 + i) * H * qk + (size_t)h * qk;
                    qr[i] = f->q_rope + th * R;
                    o[i] = f->o + th * NV;
                    m[i] = f->mha_m + th;
                    l[i] = f->mha_l + th;
                }
                fg_mha_attend(&a->p, page_tile, head_tile, page, rows, h, g, f->tok_nkv + t0, qn, qr, o, m, l,
                              scratch);
            }
        }
    }
}

/* Attention of one sequence's tokens, batch tokens [first, first + n)
 * (consecutive positions), in the decompressed form, into their rows of o:
 * layer il's weights over the cache rows of layer slot `slot`. */
static void mha_prefill(fg_forward_t *f, const fg_fwd_seq *seqs, int il, int slot, int first, int n)
{
    const fg_hparams *hp = &f->m->hp;
    const int H = hp->n_head, L = hp->kv_lora, NV = hp->n_v;
    const fg_fwd_seq *s = &seqs[f->tok_seq[first]];
    mha_args a = {.f = f, .first = first, .n = n, .rows = f->tok_nkv[first + n - 1]}; /* the last query reads the most */
    a.p = (fg_mha_attn_params){
        .n_head = H,
        .kv_lora = L,
        .n_rope = hp->n_rope,
        .n_nope = hp->n_nope,
        .n_v = NV,
        .scale = f->rope.attn_scale,
        .format = f->geo.format,
        .pages = (const uint8_t *const *)s->kv->pages,
        .layer_offset = (size_t)slot * FG_KV_PAGE_TOKENS * f->geo.row_bytes,
        .row_bytes = f->geo.row_bytes,
        .wk = f->mha_wk + (size_t)il * H * hp->n_nope * L,
        .wv = f->mha_wv + (size_t)il * L * H * NV,
        .isa = f->isa,
    };
    fg_pool_run(f->pool, mha_job, &a);
    for (int t = first; t < first + n; t++)
        for (int h = 0; h < H; h++)
            fg_mha_finish(NV, f->o + ((size_t)t * H + h) * NV, f->mha_l[(size_t)t * H + h]);
}

/* Each thread takes heads until none are left; each head's product runs
 * whole on the thread (the same kernel rows as a split one, so the same bits),
 * one pool barrier for all heads instead of one (or two) per head. */
static void heads_job(void *ctx, int ith, int nth)
{
    (void)nth;
    heads_args *a = ctx;
    const fg_forward_t *f = a->f;
    const fg_head_pass *p = a->p;
    fg_expert_scratch *sc = &f->exp_scratch[ith];
    const int H = (int)p->w->n_mat, in_w = (int)p->w->n_in, out_w = (int)p->w->n_out, n = a->n;
    for (;;) {
        const int h = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (h >= H)
            return;
        gather_cols(sc->head_in, p->src, n, p->src_stride, h * p->src_step, in_w);
        /* Cannot fail: types and shapes were validated at model load. */
        (void)fg_matmul(NULL, f->isa, p->w->type, (const uint8_t *)p->w->data + (size_t)h * p->w->mat_bytes, in_w,
                        out_w, sc->head_in, n, sc->head_out, sc->mm);
        scatter_cols(p->dst, sc->head_out, n, p->dst_stride, h * out_w, out_w);
    }
}

static void run_heads(fg_forward_t *f, const fg_head_pass *p, int n)
{
    heads_args a = {.f = f, .p = p, .n = n};
    atomic_init(&a.next, 0); /* published by fg_pool_run */
    fg_pool_run(f->pool, heads_job, &a);
}

static void absorbed_attention(fg_forward_t *f, const fg_fwd_seq *seqs, const fg_layer *ly, int slot, int n,
                               int n_absorbed);

/* Attention of layer il (weights f->layers[il] = ly) for the batch's n tokens,
 * added into x; its cache rows are those of layer slot `slot` of the
 * sequences' pages (il itself, except for the MTP block's drafts, whose page
 * tables hold that layer's rows alone). */
static void attention_block(fg_forward_t *f, const fg_fwd_seq *seqs, const fg_layer *ly, int il, int slot, int n)
{
    const fg_hparams *hp = &f->m->hp;
    const int d = hp->n_embd, H = hp->n_head, L = hp->kv_lora, R = hp->n_rope, nope = hp->n_nope;
    const int qk = nope + R;

    rmsnorm_rows(f, f->xn, f->x, ly->attn_norm, n, d, d, d, hp->rms_eps);
    /* the two products of xn in one call: xn quantized once, one row job */
    if (hp->q_lora > 0) {
        matmul2(f, &ly->q_a, f->qa, &ly->kv_a, f->kva, 0, f->xn, n);
        rmsnorm_rows(f, f->qa, f->qa, ly->q_a_norm, n, hp->q_lora, hp->q_lora, hp->q_lora, hp->rms_eps);
        matmul(f, &ly->q_b, 0, f->qa, n, f->q);
    } else {
        matmul2(f, &ly->q_b, f->q, &ly->kv_a, f->kva, 0, f->xn, n);
    }

    /* New cache rows: normalised latent and roped key, stored in the cache format. */
    for (int t = 0; t < n; t++) {
        float *kv = f->kva + (size_t)t * (L + R);
        fg_rmsnorm_isa(f->isa, kv, kv, ly->kv_a_norm, L, hp->rms_eps);
        fg_rope_apply_coefs(&f->rope, f->rope_cs + (size_t)t * R, kv + L);
        uint8_t *row = fg_kv_row(&f->geo, seqs[f->tok_seq[t]].kv, slot, f->tok_pos[t]);
        fg_kv_quantize(f->geo.format, kv, L, row);
        fg_kv_quantize(f->geo.format, kv + L, R, row + f->geo.latent_bytes);
    }

    /* Queries: the rope part roped per head (the no-rope part is absorbed for
     * absorbed sequences, used as it is in the decompressed form). */
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            float *qr = f->q_rope + ((size_t)t * H + h) * R;
            memcpy(qr, f->q + (size_t)t * H * qk + (size_t)h * qk + nope, (size_t)R * sizeof(float));
            fg_rope_apply_coefs(&f->rope, f->rope_cs + (size_t)t * R, qr);
        }
    int n_absorbed = 0;
    for (int t = 0; t < n; t++) {
        f->tok_nkv[t] = f->tok_pos[t] + 1; /* causal: itself and everything before */
        n_absorbed += seqs[f->tok_seq[t]].absorbed;
    }
    if (n_absorbed > 0)
        absorbed_attention(f, seqs, ly, slot, n, n_absorbed);
    /* Decompressed-form sequences, one at a time, straight into o. */
    for (int t = 0; t < n;) {
        int e = t + 1;
        while (e < n && f->tok_seq[e] == f->tok_seq[t])
            e++;
        if (!seqs[f->tok_seq[t]].absorbed)
            mha_prefill(f, seqs, il, slot, t, e - t);
        t = e;
    }
    matmul(f, &ly->attn_out, 0, f->o, n, f->tmp_d);
    fg_axpy(f->x, 1.0f, f->tmp_d, n * d); /* x += tmp_d: 1 * v is exact */
}

/* Attention of the batch's absorbed sequences, into their rows of o (the
 * other tokens' rows get zeros; mha_prefill overwrites them). */
static void absorbed_attention(fg_forward_t *f, const fg_fwd_seq *seqs, const fg_layer *ly, int slot, int n,
                               int n_absorbed)
{
    const fg_hparams *hp = &f->m->hp;
    const int H = hp->n_head, L = hp->kv_lora, R = hp->n_rope, V = hp->n_v;
    const int qk = hp->n_nope + R;
    const fg_head_pass kb = {.w = &ly->k_b, .src = f->q, .src_stride = H * qk, .src_step = qk,
                             .dst = f->q_lat, .dst_stride = H * L};
    run_heads(f, &kb, n);

    const int nth = f->pool ? fg_pool_size(f->pool) : 1;
    attn_args a = {.f = f, .seqs = seqs, .layer = slot, .n = n};
    const int P = FG_MLA_ATTN_PART_ROWS, n_parts = (f->tok_pos[0] + P) / P; /* of a lone token's n_kv rows */
    a.split = n == 1 && nth > 1 && n_parts > 1;
    /* Up to FG_MLA_ATTN_MAX_QUERIES tokens a block, fewer when the absorbed
     * tokens (decodes first in the batch, or one short input) would not give
     * every thread one: a query's bits do not depend on its block. */
    const int per_thread = (n_absorbed + nth - 1) / nth;
    a.block = per_thread < 1 ? 1 : per_thread < FG_MLA_ATTN_MAX_QUERIES ? per_thread : FG_MLA_ATTN_MAX_QUERIES;
    if (!a.split) {
        fg_pool_run(f->pool, attention_job, &a);
    } else {
        const int slots = SPLIT_PARTS * nth;
        float *acc = f->part + (size_t)slots * (H * L + 2 * H); /* the folded state's m [H], l [H]; o in o_lat */
        for (a.part0 = 0; a.part0 < n_parts; a.part0 += slots) {
            a.n_parts = n_parts - a.part0 < slots ? n_parts - a.part0 : slots;
            fg_pool_run(f->pool, attention_job, &a);
            for (int k = 0; k < a.n_parts; k++) {
                const float *o = f->part + (size_t)k * (H * L + 2 * H);
                if (a.part0 + k == 0) {
                    memcpy(f->o_lat, o, (size_t)H * L * sizeof(float));
                    memcpy(acc, o + H * L, 2 * (size_t)H * sizeof(float));
                } else {
                    fg_mla_attn_fold(H, L, f->o_lat, acc, acc + H, o, o + H * L, o + H * L + H);
                }
            }
        }
        fg_mla_attn_finish(H, L, f->o_lat, acc + H);
    }

    const fg_head_pass vb = {.w = &ly->v_b, .src = f->o_lat, .src_stride = H * L, .src_step = L,
                             .dst = f->o, .dst_stride = H * V};
    run_heads(f, &vb, n);
}

/* SwiGLU: y[n][d] = down(silu(gate(x)) * up(x)) with matrix `mat` of each. */
static void swiglu(fg_forward_t *f, const fg_weight *gate, const fg_weight *up, const fg_weight *down, int64_t mat,
                   const float *x, int n, float *y)
{
    matmul2(f, gate, f->ff_gate, up, f->ff_up, mat, x, n);
    for (int t = 0; t < n; t++)
        fg_silu_mul_isa(f->isa, f->ff_gate + (size_t)t * gate->n_out, f->ff_up + (size_t)t * gate->n_out,
                        (int)gate->n_out);
    matmul(f, down, mat, f->ff_gate, n, y);
}

/* The weight types whose products read x quantized to Q8_0 (matmul.h), so an
 * expert's gate and up can read the layer's quantized rows (fg_matmul_q8_rows). */
static bool is_q8(const fg_weight *w) { return fg_wtype_reads_q8(w->type); }

/* SwiGLU of one expert task on the calling thread alone: y[n][d] =
 * down(silu(gate(x)) * up(x)) with x = rows rows[0 .. n) of xn (rows NULL:
 * rows 0 .. n - 1). Where the layer quantized xn once (a->xn_q8) and the
 * gate and up are Q8_0, they read its quantized rows: no float gather, no
 * quantization of their own (the same bits either way). */
static void expert_ffn(const experts_args *a, fg_expert_scratch *sc, const fg_weight *gate, const fg_weight *up,
                       const fg_weight *down, int64_t mat, const int *rows, int n, float *y)
{
    const fg_forward_t *f = a->f;
    const int d = f->m->hp.n_embd;
    if (a->xn_q8 && is_q8(gate) && is_q8(up)) {
        const fg_matmul_op ops[2] = {
            {.wtype = gate->type, .w = (const uint8_t *)gate->data + (size_t)mat * gate->mat_bytes,
             .n_out = gate->n_out, .y = sc->gate},
            {.wtype = up->type, .w = (const uint8_t *)up->data + (size_t)mat * up->mat_bytes, .n_out = up->n_out,
             .y = sc->up},
        };
        /* Cannot fail: types and shapes were validated at model load, the rows are tokens of this step. */
        (void)fg_matmul_q8_rows(NULL, f->isa, ops, 2, d, f->xn_q8, a->n, rows ? rows : f->iota, n, sc->mm);
    } else {
        const float *x = f->xn;
        if (rows) {
            for (int j = 0; j < n; j++)
                memcpy(sc->xe + (size_t)j * d, f->xn + (size_t)rows[j] * d, (size_t)d * sizeof(float));
            x = sc->xe;
        }
        matmul2_on(NULL, f->isa, sc->mm, gate, sc->gate, up, sc->up, mat, x, n); /* x quantized once for both */
    }
    for (int t = 0; t < n; t++)
        fg_silu_mul_isa(f->isa, sc->gate + (size_t)t * gate->n_out, sc->up + (size_t)t * gate->n_out,
                        (int)gate->n_out);
    const uint8_t *down_data = (const uint8_t *)down->data + (size_t)mat * down->mat_bytes;
    /* Cannot fail: types and shapes were validated at model load. */
    (void)fg_matmul(NULL, f->isa, down->type, down_data, down->n_in, down->n_out, sc->gate, n, y, sc->mm);
}

/* Each thread takes tasks until none are left: task -1 is the shared expert
 * over all n tokens (into shared_out), task e routed expert e over its slots
 * (into exp_out, at the slots' positions). Tasks write disjoint rows. */
static void experts_job(void *ctx, int ith, int nth)
{
    (void)nth;
    experts_args *a = ctx;
    const fg_forward_t *f = a->f;
    const fg_layer *ly = a->ly;
    const int d = f->m->hp.n_embd;
    fg_expert_scratch *sc = &f->exp_scratch[ith];
    for (;;) {
        const int k = atomic_fetch_add_explicit(&a->next, 1, memory_order_relaxed);
        if (k >= a->n_tasks)
            return;
        const int e = f->exp_tasks[k];
        if (e < 0) {
            expert_ffn(a, sc, &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp, 0, NULL, a->n, f->shared_out);
            continue;
        }
        const int begin = e ? f->exp_count[e - 1] : 0, m = f->exp_count[e] - begin;
        expert_ffn(a, sc, &ly->gate_exps, &ly->up_exps, &ly->down_exps, e, f->exp_list + begin, m,
                   f->exp_out + (size_t)begin * d);
    }
}

/* The routed experts and the shared one for the n tokens of xn, added into x.
 * With enough tasks to share (two per thread), each expert runs whole on one
 * thread, so the layer has one pool barrier instead of several per expert;
 * otherwise each expert's products are split over the threads by rows. The
 * outputs are added to x in the same order either way (experts by id, then
 * the shared one) and every product gives the same bits on one thread as on
 * several, so both ways give identical x. Needs exp_count (slot ends),
 * exp_list and exp_list_w from the routing. */
/* x += the shared expert of every token (layers that have one). */
static void add_shared_expert(fg_forward_t *f, const fg_layer *ly, int n)
{
    const int d = f->m->hp.n_embd;
    if (!ly->gate_shexp.data)
        return;
    swiglu(f, &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp, 0, f->xn, n, f->tmp_d);
    fg_axpy(f->x, 1.0f, f->tmp_d, n * d); /* x += tmp_d: 1 * v is exact */
}

static void run_experts(fg_forward_t *f, const fg_layer *ly, int n)
{
    const int d = f->m->hp.n_embd, E = f->m->hp.n_expert;
    const int nth = f->pool ? fg_pool_size(f->pool) : 1;
    int n_tasks = 0;
    if (ly->gate_shexp.data)
        f->exp_tasks[n_tasks++] = -1; /* the largest task first: the others fill in around it */
    for (int e = 0; e < E; e++)
        if (f->exp_count[e] - (e ? f->exp_count[e - 1] : 0) > 0)
            f->exp_tasks[n_tasks++] = e;

    if (nth > 1 && n_tasks >= 2 * nth) {
        experts_args a = {.f = f, .ly = ly, .n = n, .n_tasks = n_tasks};
        /* every routed token's row is read by K experts' gate and up: quantize it once here */
        a.xn_q8 = (is_q8(&ly->gate_exps) || is_q8(&ly->gate_shexp)) &&
                  fg_q8_rows_quantize(f->pool, f->isa, f->xn, d, n, f->xn_q8) == 0;
        atomic_init(&a.next, 0); /* published by fg_pool_run */
        fg_pool_run(f->pool, experts_job, &a);
        for (int e = 0; e < E; e++)
            for (int slot = e ? f->exp_count[e - 1] : 0; slot < f->exp_count[e]; slot++)
                fg_axpy(f->x + (size_t)f->exp_list[slot] * d, f->exp_list_w[slot], f->exp_out + (size_t)slot * d, d);
        if (ly->gate_shexp.data)
            fg_axpy(f->x, 1.0f, f->shared_out, n * d); /* x += shared_out: 1 * v is exact */
        return;
    }
    for (int e = 0; e < E; e++) {
        const int begin = e ? f->exp_count[e - 1] : 0, m = f->exp_count[e] - begin;
        if (m == 0)
            continue;
        for (int j = 0; j < m; j++)
            memcpy(f->xe + (size_t)j * d, f->xn + (size_t)f->exp_list[begin + j] * d, (size_t)d * sizeof(float));
        swiglu(f, &ly->gate_exps, &ly->up_exps, &ly->down_exps, e, f->xe, m, f->tmp_d);
        for (int j = 0; j < m; j++)
            fg_axpy(f->x + (size_t)f->exp_list[begin + j] * d, f->exp_list_w[begin + j], f->tmp_d + (size_t)j * d, d);
    }
    add_shared_expert(f, ly, n);
}

static void moe_block(fg_forward_t *f, const fg_layer *ly, int n)
{
    const fg_hparams *hp = &f->m->hp;
    const int E = hp->n_expert, K = hp->n_expert_used;

    matmul(f, &ly->router, 0, f->xn, n, f->router);
    fg_moe_route_params rp = f->route;
    rp.bias = ly->exp_probs_b;
    for (int t = 0; t < n; t++)
        fg_moe_route(&rp, f->router + (size_t)t * E, f->sel_ids + (size_t)t * K, f->sel_w + (size_t)t * K,
                     f->route_scratch);
    if (f->pick_sink) /* plain counts here; the shared sink is touched once per run */
        for (int i = 0; i < n * K; i++)
            f->picks[f->sel_ids[i]]++;
    if (f->ep && !f->drafting) {
        /* by layer index: the expert-parallel ranks read the model's unpacked weights */
        fg_err err = fg_moe_ep_experts(f->ep, (int)(ly - f->layers), n, f->sel_ids, f->sel_w, f->xn, f->x, &f->ep_diag);
        if (err != FG_OK && f->ep_err == FG_OK)
            f->ep_err = err;
        add_shared_expert(f, ly, n); /* the shared expert runs where the token is */
        return;
    }

    /* Group the routed (token, weight) slots by expert: a counting sort. */
    memset(f->exp_count, 0, (size_t)(E + 1) * sizeof(int));
    for (int i = 0; i < n * K; i++)
        f->exp_count[f->sel_ids[i] + 1]++;
    for (int e = 0; e < E; e++)
        f->exp_count[e + 1] += f->exp_count[e];
    for (int i = 0; i < n * K; i++) {
        int slot = f->exp_count[f->sel_ids[i]]++;
        f->exp_list[slot] = i / K;
        f->exp_list_w[slot] = f->sel_w[i];
    }
    /* exp_count[e] now holds the end of expert e's slots; its start is exp_count[e - 1]. */
    run_experts(f, ly, n);
}

static void ffn_block(fg_forward_t *f, const fg_layer *ly, int n)
{
    const fg_hparams *hp = &f->m->hp;
    const int d = hp->n_embd;
    rmsnorm_rows(f, f->xn, f->x, ly->ffn_norm, n, d, d, d, hp->rms_eps);
    if (ly->is_moe) {
        moe_block(f, ly, n);
        return;
    }
    swiglu(f, &ly->ffn_gate, &ly->ffn_up, &ly->ffn_down, 0, f->xn, n, f->tmp_d);
    fg_axpy(f->x, 1.0f, f->tmp_d, n * d); /* x += tmp_d: 1 * v is exact */
}

/* Final norm and head for the rows of src [n][d] that asked for logits,
 * LOGIT_CHUNK rows per product: the trunk's (output_norm, output) or the MTP
 * block's (its head_norm and head); norm NULL: src is normed already. Into
 * each sequence's buffer, or (to) into to's rows, counted over the batch in
 * order. */
static void logits_block(fg_forward_t *f, const fg_fwd_seq *seqs, int n_seqs, const float *src, const float *norm,
                         const fg_weight *head, float *to)
{
    const fg_hparams *hp = &f->m->hp;
    const int d = hp->n_embd, V = hp->n_vocab;
    float *dst[LOGIT_CHUNK];
    int rows = 0, first = 0, done = 0;
    for (int si = 0; si < n_seqs; si++) {
        const fg_fwd_seq *s = &seqs[si];
        for (int j = 0; j < s->n_logits; j++) {
            int t = first + s->n_tokens - s->n_logits + j;
            if (norm)
                fg_rmsnorm_isa(f->isa, f->logit_rows + (size_t)rows * d, src + (size_t)t * d, norm, d, hp->rms_eps);
            else
                memcpy(f->logit_rows + (size_t)rows * d, src + (size_t)t * d, (size_t)d * sizeof(float));
            dst[rows++] = to ? to + (size_t)done++ * V : s->logits + (size_t)j * V;
            if (rows == LOGIT_CHUNK) {
                matmul(f, head, 0, f->logit_rows, rows, f->logit_out);
                for (int r = 0; r < rows; r++)
                    memcpy(dst[r], f->logit_out + (size_t)r * V, (size_t)V * sizeof(float));
                rows = 0;
            }
        }
        first += s->n_tokens;
    }
    if (rows) {
        matmul(f, head, 0, f->logit_rows, rows, f->logit_out);
        for (int r = 0; r < rows; r++)
            memcpy(dst[r], f->logit_out + (size_t)r * V, (size_t)V * sizeof(float));
    }
}

void fg_forward_count_experts(fg_forward_t *f, _Atomic uint64_t *sink) { f->pick_sink = sink; }

void fg_forward_set_mtp_out(fg_forward_t *f, float *mtp) { f->mtp_out = mtp; }

void fg_forward_set_ep(fg_forward_t *f, fg_moe_ep_t *ep)
{
    f->ep = ep;
    if (!ep)
        return;
    for (int il = 0; il < f->m->base.n_layer_run; il++) {
        const fg_layer *src = &f->m->layers[il];
        fg_layer *ly = &f->layers[il];
        for (int i = 0; i < 3; i++) { /* the routed experts (first in setup_layers' lists) */
            free(f->packed[(size_t)il * N_PACKED + i]);
            f->packed[(size_t)il * N_PACKED + i] = NULL;
        }
        ly->gate_exps = src->gate_exps;
        ly->up_exps = src->up_exps;
        ly->down_exps = src->down_exps;
    }
}

/* Checks the batch and sets each token's position and sequence; *n_out gets the token count. */
static fg_err plan_batch(fg_forward_t *f, const int32_t *tokens, const fg_fwd_seq *seqs, int n_seqs, int *n_out,
                         fg_diag *diag)
{
    const fg_hparams *hp = &f->m->hp;
    int n = 0;
    *n_out = 0;
    for (int si = 0; si < n_seqs; si++) {
        const fg_fwd_seq *s = &seqs[si];
        if (s->n_tokens < 1 || s->n_tokens > f->max_tokens - n)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "batch exceeds %d tokens", f->max_tokens);
        if (s->n_logits != 0 && s->n_logits != 1 && s->n_logits != s->n_tokens)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "n_logits must be 0, 1 or n_tokens");
        if (s->n_logits && !s->logits)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "logits requested without a buffer");
        int end = s->kv->n_tokens + s->n_tokens;
        if (end > s->kv->n_pages * FG_KV_PAGE_TOKENS)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "sequence %d has no cache pages for %d tokens", si, end);
        for (int j = 0; j < s->n_tokens; j++) {
            int32_t tok = tokens[n + j];
            if (tok < 0 || tok >= hp->n_vocab)
                return fg_diag_set(diag, FG_ERR_TOKEN_ID, "token id %d outside the vocabulary [0, %d)", tok,
                                   hp->n_vocab);
            f->tok_pos[n + j] = s->kv->n_tokens + j;
            f->tok_seq[n + j] = si;
        }
        n += s->n_tokens;
    }
    *n_out = n;
    return FG_OK;
}

/* ---- the MTP block ---- */

/* Hash of the last trunk layer's cache row of kv's position pos. */
static uint64_t trunk_row_hash(const fg_forward_t *f, const fg_kv_seq *kv, int pos)
{
    return fg_fnv1a64(fg_kv_row(&f->geo, kv, f->m->hp.n_layer - 1, pos), f->geo.row_bytes);
}

/* The kept trunk hidden of kv's cached position pos, or NULL. */
static const float *hidden_find(const fg_forward_t *f, const fg_kv_seq *kv, int pos)
{
    if (pos < 0 || pos >= kv->n_tokens)
        return NULL;
    for (int i = 0; i < f->max_tokens; i++) {
        const mtp_hidden *e = &f->hid[i];
        if (e->kv != kv || pos < e->pos0 || pos >= e->pos0 + e->count)
            continue;
        if (e->row_hash[pos - e->pos0] != trunk_row_hash(f, kv, pos))
            return NULL; /* the position was written since: another sequence in kv, or rewritten */
        return f->hid_rows + ((size_t)i * KEEP_ROWS + (size_t)(pos - e->pos0)) * (size_t)f->m->hp.n_embd;
    }
    return NULL;
}

/* Keeps each sequence's last KEEP_ROWS hidden rows of this run (h_cur), in
 * its entry or the least recently used one (a run has at most max_tokens
 * sequences, so none of this run's is replaced). Before kv->n_tokens advances. */
static void hidden_store(fg_forward_t *f, const fg_fwd_seq *seqs, int n_seqs)
{
    const size_t d = (size_t)f->m->hp.n_embd;
    f->n_runs++;
    for (int si = 0, first = 0; si < n_seqs; first += seqs[si].n_tokens, si++) {
        const fg_kv_seq *kv = seqs[si].kv;
        int slot = -1, lru = 0;
        for (int i = 0; i < f->max_tokens && slot < 0; i++) {
            if (f->hid[i].kv == kv)
                slot = i;
            else if (f->hid[i].used < f->hid[lru].used)
                lru = i;
        }
        mtp_hidden *e = &f->hid[slot < 0 ? lru : slot];
        const int n = seqs[si].n_tokens, cnt = n < KEEP_ROWS ? n : KEEP_ROWS;
        e->kv = kv;
        e->pos0 = kv->n_tokens + n - cnt;
        e->count = cnt;
        e->used = f->n_runs;
        float *rows = f->hid_rows + (size_t)(e - f->hid) * KEEP_ROWS * d;
        memcpy(rows, f->h_cur + (size_t)(first + n - cnt) * d, (size_t)cnt * d * sizeof(float));
        for (int j = 0; j < cnt; j++)
            e->row_hash[j] = trunk_row_hash(f, kv, e->pos0 + j);
    }
}

/* The MTP block on the batch's n tokens (positions and sequences in tok_pos,
 * tok_seq and rope_cs, their h input in h_prev): x becomes its output. Its
 * cache rows go to layer slot `slot` of the sequences' pages. */
static void mtp_layer(fg_forward_t *f, const int32_t *tokens, const fg_fwd_seq *seqs, int n, int slot)
{
    const fg_model *m = f->m;
    const fg_hparams *hp = &m->hp;
    const int d = hp->n_embd, NL = hp->n_layer;
    for (int t = 0; t < n; t++) {
        float *in = f->mtp_in + (size_t)t * 2 * d, *e = f->tmp_d + (size_t)t * d;
        fg_weight_row_f32(&m->mtp.embd, tokens[t], e);
        fg_rmsnorm_isa(f->isa, in, e, m->mtp.enorm, d, hp->rms_eps);
        fg_rmsnorm_isa(f->isa, in + d, f->h_prev + (size_t)t * d, m->mtp.hnorm, d, hp->rms_eps);
    }
    matmul(f, &f->mtp_eh_proj, 0, f->mtp_in, n, f->x);
    attention_block(f, seqs, &f->layers[NL], NL, slot, n);
    ffn_block(f, &f->layers[NL], n);
}

/* A run's MTP block, after the trunk: h_cur gets the trunk's normed hidden,
 * each token's h input the previous position's (the token before it, or the
 * sequence's kept row; 0 at position 0 or when none is kept), then the block
 * writes its rows in the MTP slot and leaves its output in x. */
static void mtp_run(fg_forward_t *f, const int32_t *tokens, const fg_fwd_seq *seqs, int n_seqs, int n)
{
    const fg_hparams *hp = &f->m->hp;
    const size_t d = (size_t)hp->n_embd;
    f->n_drafts = 0; /* drafts end where the sequences move on */
    for (int t = 0; t < n; t++)
        fg_rmsnorm_isa(f->isa, f->h_cur + t * d, f->x + t * d, f->m->output_norm, (int)d, hp->rms_eps);
    for (int si = 0, first = 0; si < n_seqs; first += seqs[si].n_tokens, si++)
        for (int j = 0; j < seqs[si].n_tokens; j++) {
            const int t = first + j;
            const float *h = j ? f->h_cur + (size_t)(t - 1) * d : hidden_find(f, seqs[si].kv, f->tok_pos[t] - 1);
            if (h)
                memcpy(f->h_prev + (size_t)t * d, h, d * sizeof(float));
            else
                memset(f->h_prev + (size_t)t * d, 0, d * sizeof(float));
        }
    mtp_layer(f, tokens, seqs, n, hp->n_layer);
}

/* The draft slot of kv since the latest run, or -1. */
static int draft_find(const fg_forward_t *f, const fg_kv_seq *kv)
{
    for (int k = 0; k < f->n_drafts; k++)
        if (f->drafts[k].kv == kv)
            return k;
    return -1;
}

fg_err fg_forward_draft(fg_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    const fg_model *m = f->m;
    const fg_hparams *hp = &m->hp;
    const int NL = hp->n_layer;
    const size_t d = (size_t)hp->n_embd, row = f->geo.row_bytes, page_rows = FG_KV_PAGE_TOKENS * row;
    if (!hp->n_nextn)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "the model has no MTP block (nextn_predict_layers) to draft with");
    if (n_seqs < 0 || n_seqs > f->max_tokens)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "a draft takes 0 .. %d sequences", f->max_tokens);
    if (n_seqs == 0)
        return FG_OK;
    /* every check first: an error changes nothing */
    size_t table = 0;
    int n_new = 0;
    for (int si = 0; si < n_seqs; si++) {
        const fg_fwd_seq *s = &seqs[si];
        if (s->n_tokens != 1 || s->n_logits != 1 || !s->logits)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "draft sequence %d: one token and one row of logits", si);
        if (tokens[si] < 0 || tokens[si] >= hp->n_vocab)
            return fg_diag_set(diag, FG_ERR_TOKEN_ID, "token id %d outside the vocabulary [0, %d)", tokens[si],
                               hp->n_vocab);
        for (int sj = 0; sj < si; sj++)
            if (seqs[sj].kv == s->kv)
                return fg_diag_set(diag, FG_ERR_INVALID_ARG, "draft sequences %d and %d are one sequence", sj, si);
        const int k = draft_find(f, s->kv);
        int pos;
        if (k >= 0) {
            if (s->kv->n_tokens != f->drafts[k].base)
                return fg_diag_set(diag, FG_ERR_STATE,
                                   "draft sequence %d: its cache changed length since its first draft without a run",
                                   si);
            if (f->drafts[k].depth >= FG_DS2_MAX_DRAFTS)
                return fg_diag_set(diag, FG_ERR_INVALID_ARG, "draft sequence %d: more than %d chained drafts", si,
                                   FG_DS2_MAX_DRAFTS);
            pos = f->drafts[k].base + f->drafts[k].depth;
        } else {
            pos = s->kv->n_tokens;
            if (pos > 0 && (s->kv->n_pages <= (pos - 1) / FG_KV_PAGE_TOKENS || !hidden_find(f, s->kv, pos - 1)))
                return fg_diag_set(diag, FG_ERR_STATE,
                                   "draft sequence %d: the hidden state of its last position is not kept (a draft "
                                   "follows the forward_run that computed that position)",
                                   si);
            n_new++;
        }
        f->tok_pos[si] = pos;
        f->tok_seq[si] = si;
        f->draft_slot[si] = k;
        table += (size_t)(pos / FG_KV_PAGE_TOKENS) + 1;
    }
    if (f->n_drafts + n_new > f->max_tokens)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "more than %d sequences drafted since the last run",
                           f->max_tokens);
    if (table > f->draft_table_cap) { /* grows with the longest sequences drafted, not per call */
        uint8_t **t = realloc(f->draft_table, table * 2 * sizeof *t);
        if (!t)
            return fg_diag_set(diag, FG_ERR_NOMEM, "draft: out of memory for page tables");
        f->draft_table = t;
        f->draft_table_cap = table * 2;
    }

    /* Each draft reads the MTP slot of the sequence's pages up to its first
     * draft's page, and from there a scratch copy of that page's MTP rows
     * with the drafts' own rows after them; a page table of pointers to the
     * slot (its rows at layer offset 0) serves both. */
    uint8_t **tab = f->draft_table;
    for (int si = 0; si < n_seqs; si++) {
        const fg_kv_seq *kv = seqs[si].kv;
        const int pos = f->tok_pos[si];
        int k = f->draft_slot[si];
        uint8_t *pg;
        if (k < 0) {
            k = f->draft_slot[si] = f->n_drafts++;
            f->drafts[k] = (mtp_draft){.kv = kv, .base = pos, .depth = 0};
            pg = f->draft_pages + (size_t)k * 2 * page_rows;
            if (pos % FG_KV_PAGE_TOKENS)
                memcpy(pg, kv->pages[pos / FG_KV_PAGE_TOKENS] + (size_t)NL * page_rows,
                       (size_t)(pos % FG_KV_PAGE_TOKENS) * row);
            const float *h = hidden_find(f, kv, pos - 1);
            if (h)
                memcpy(f->h_prev + (size_t)si * d, h, d * sizeof(float));
            else /* position 0 */
                memset(f->h_prev + (size_t)si * d, 0, d * sizeof(float));
        } else {
            pg = f->draft_pages + (size_t)k * 2 * page_rows;
            memcpy(f->h_prev + (size_t)si * d, f->draft_h + (size_t)k * d, d * sizeof(float));
        }
        const int first_page = f->drafts[k].base / FG_KV_PAGE_TOKENS, n_pages = pos / FG_KV_PAGE_TOKENS + 1;
        for (int i = 0; i < n_pages; i++)
            tab[i] = i < first_page ? kv->pages[i] + (size_t)NL * page_rows : pg + (size_t)(i - first_page) * page_rows;
        f->draft_kv[si] = (fg_kv_seq){.pages = tab, .n_pages = n_pages, .cap_pages = n_pages, .n_tokens = pos,
                                      .max_tokens = kv->max_tokens, .owner = kv->owner};
        f->draft_seqs[si] = (fg_fwd_seq){.kv = &f->draft_kv[si], .n_tokens = 1, .n_logits = 1,
                                         .logits = seqs[si].logits, .absorbed = true};
        tab += n_pages;
        fg_rope_coefs(&f->rope, pos, f->rope_cs + (size_t)si * hp->n_rope);
    }
    f->drafting = true; /* a draft is one rank's: its experts run here */
    mtp_layer(f, tokens, f->draft_seqs, n_seqs, 0);
    f->drafting = false;
    for (int si = 0; si < n_seqs; si++) { /* the MTP hidden, for a chained draft and for the logits */
        const int k = f->draft_slot[si];
        fg_rmsnorm_isa(f->isa, f->h_cur + si * d, f->x + si * d, m->mtp.head_norm, (int)d, hp->rms_eps);
        memcpy(f->draft_h + (size_t)k * d, f->h_cur + si * d, d * sizeof(float));
        f->drafts[k].depth++;
    }
    logits_block(f, f->draft_seqs, n_seqs, f->h_cur, NULL, &f->mtp_head, NULL);
    return FG_OK;
}

fg_err fg_forward_run(fg_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    const fg_hparams *hp = &f->m->hp;
    int n;
    fg_err err = plan_batch(f, tokens, seqs, n_seqs, &n, diag);
    if (err != FG_OK || n == 0) {
        if (f->ep) { /* the peers still exchange with us at every MoE layer */
            fg_diag idle_diag;
            fg_err e2 = fg_moe_ep_idle(f->ep, &idle_diag);
            if (err == FG_OK && e2 != FG_OK)
                err = fg_diag_set(diag, e2, "%s", idle_diag.msg);
        }
        return err;
    }

    const int d = hp->n_embd;
    f->ep_err = FG_OK;
    if (f->pick_sink)
        memset(f->picks, 0, (size_t)hp->n_expert * sizeof *f->picks);
    for (int t = 0; t < n; t++)
        fg_weight_row_f32(&f->m->tok_embd, tokens[t], f->x + (size_t)t * d);
    for (int t = 0; t < n; t++) /* every layer and head of a token rotates by the same angles */
        fg_rope_coefs(&f->rope, f->tok_pos[t], f->rope_cs + (size_t)t * hp->n_rope);
    for (int il = 0; il < hp->n_layer; il++) {
        attention_block(f, seqs, &f->layers[il], il, il, n);
        ffn_block(f, &f->layers[il], n);
    }
    if (hp->n_nextn)
        mtp_run(f, tokens, seqs, n_seqs, n);
    if (f->ep_err != FG_OK) /* the cache rows were written but the sequences do not advance */
        return fg_diag_set(diag, f->ep_err, "%s", f->ep_diag.msg);
    for (int e = 0; f->pick_sink && e < hp->n_expert; e++) /* counted once the tokens count: a failed run is redone */
        if (f->picks[e])
            atomic_fetch_add_explicit(&f->pick_sink[e], f->picks[e], memory_order_relaxed);
    if (hp->n_nextn) {
        logits_block(f, seqs, n_seqs, f->h_cur, NULL, &f->output, NULL);
        if (f->mtp_out)
            logits_block(f, seqs, n_seqs, f->x, f->m->mtp.head_norm, &f->mtp_head, f->mtp_out);
        hidden_store(f, seqs, n_seqs);
    } else {
        logits_block(f, seqs, n_seqs, f->x, f->m->output_norm, &f->output, NULL);
    }
    for (int si = 0; si < n_seqs; si++)
        seqs[si].kv->n_tokens += seqs[si].n_tokens;
    return FG_OK;
}
