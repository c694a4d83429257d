/* forward.c: the deepseek4 CPU forward pass (forward.h has the equations).
 *
 * Shapes at each buffer: T tokens of the whole batch (<= max_tokens), every
 * sequence's tokens contiguous, E embedding, H x D heads (rd RoPE dims last),
 * Q q-LoRA, Hi x Di indexer, G x R output groups, X experts (K used), F
 * expert width, V vocabulary. Matrices go through kernels/cpu/matmul over all
 * T tokens of all sequences at once (each matrix streamed once per run); the
 * cache writes go token by token in batch order, each token on its own
 * sequence's cache at its own position (tok_kv, tok_pos). A token's attention
 * reads its ring as it stood when the token arrived (a sequence's window rows
 * are decoded once per layer, before the ring moves on) and only rows closed
 * at or before it, so the indexer scores a sequence's tokens together and its
 * tokens attend in parallel, each with the arithmetic it has alone.
 */
#include "engine/model/deepseek4/forward.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ep/moe_ep.h"
#include "engine/model/deepseek4/cache.h"
#include "engine/model/rope.h"
#include "kernels/cpu/ds4_ops.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vecops.h"

#define KEY_TILE 64 /* keys decoded per step of the online softmax */
#define IDX_TILE 64 /* index keys decoded (and transposed) per step of the indexer's scoring */
#define PRUNE_MIN_K 4 /* visible rows per top-k row from which a token's index scores are pruned */
#define SCORE_CAP ((size_t)1 << 21) /* indexer scores held at once (8 MiB): a chunk's tokens go in groups */
#define HCA_CAP 2048 /* HCA rows decoded once per sequence and layer (2 MiB each way at D 256); later ones per token */
#define LOGIT_CHUNK 64 /* rows of logits per LM-head product */
#define PREFETCH_ROWS 6 /* top-k rows fetched ahead of the one being decoded */
/* Multiply-adds below which a token's attention or index scoring stays on the
 * calling thread (a pool barrier costs about as much); low enough that the
 * test fixture takes both paths. */
#define PAR_MIN_WORK 4096
_Static_assert(IDX_TILE == FG_DS4_PRUNE_TILE, "the pruned scoring packs the indexer's tiles");
_Static_assert(KEY_TILE == FG_DS4_ATTN_TILE, "the forward tiles attention as ds4_ops.h (the CUDA reference)");
_Static_assert(FG_DS4_OPS_HC == FG_DS4_HC && FG_DS4_OPS_HC_MIX == FG_DS4_HC_MIX, "ds4_ops.h mixing layout");

/* The scratch of one token's attention. */
typedef struct attn_ws {
    float *keys;                  /* [KEY_TILE][D] */
    float *keys_t;                /* [D][KEY_TILE] the tile transposed, for the dots */
    float *acc;                   /* [H][D] */
    float *mh, *lh;               /* [H] running max and sum */
    float *tile;                  /* [H][KEY_TILE] */
    uint8_t *rowtmp;              /* a row's page parts (cache.h) */
} attn_ws;

struct fg_ds4_forward {
    const fg_ds4_model *m;
    fg_ds4_cache *cache;
    fg_pool_t *pool;
    fg_isa isa;
    int max_tokens;
    int max_rows;                 /* compressed rows a CSA layer can hold (context / 4) */
    fg_rope rope_plain, rope_comp;
    float *mtp_out;
    fg_moe_ep_t *ep;              /* expert parallelism: routed experts go through it; NULL: here */
    fg_err ep_err;                /* this run's first exchange error */
    fg_diag ep_diag;
    _Atomic uint64_t *count_sink;
    uint64_t *counts;             /* [X] picks this run */
    /* scratch, sized at create */
    float *x, *x1, *xm;           /* [T][4][E] streams */
    float *flat;                  /* [T][4E] */
    float *mix;                   /* [T][24] */
    float *hcw;                   /* [T][24]: pre[4], post[4], comb[4][4] (comb[d][s] at 8 + 4d + s) */
    float *y;                     /* [T][E] */
    float *qa;                    /* [T][Q] */
    float *q;                     /* [T][H*D] */
    float *kv;                    /* [T][D] */
    float *ck, *cg;               /* [T][2D] compressor k, gate */
    float *ik, *ig;               /* [T][2Di] indexer compressor */
    float *iq;                    /* [T][Hi*Di] */
    float *iw;                    /* [T][Hi] */
    float *heads;                 /* [T][H*D] */
    float *grp;                   /* [T][H*D/G] */
    float *oa_g;                  /* [T][R] */
    float *oa;                    /* [T][G*R] */
    float *f;                     /* [T][E] sublayer output */
    float *router;                /* [T][X] */
    int *chosen;                  /* [T][K] */
    float *wts;                   /* [T][K] */
    int *tok_of;                  /* [T] tokens routed to the expert in hand */
    float *w_of;                  /* [T] their weights */
    float *ein;                   /* [T][E] */
    float *eg, *eu;               /* [T][F*max(1, shared)] */
    float *ed;                    /* [T][E] */
    float *mtp_in;                /* [T*4][2E] */
    float *hin;                   /* [T][E] head input */
    fg_kv_seq **tok_kv;           /* [T] the sequence of each token of the batch */
    int *tok_pos;                 /* [T] its position there */
    float *logit_out;             /* [LOGIT_CHUNK][V] */
    float **logit_dst;            /* [LOGIT_CHUNK] where each row goes */
    /* attention: one workspace per pool thread (a prompt's tokens attend in
     * parallel), or workspace 0 with its heads shared out (one token) */
    attn_ws *ws;                  /* [n_ws]: one per pool thread */
    int n_ws;
    /* keys that all of a sequence's tokens in the batch read, decoded once
     * per layer, row by row (for the values) and transposed (for the dots) */
    float *win, *win_t;           /* [W - 1 + T][D], [D][W - 1 + T]: window rows, position win_base first */
    int win_base, win_ld;
    float *hca, *hca_t;           /* [hca_cap][D], [D][hca_cap]: HCA rows 0 .. n_hca-1 */
    int hca_cap, n_hca;
    float *row;                   /* [2D] */
    uint8_t *rowtmp;              /* a row's page parts (cache.h) */
    float *scores;                /* [max_rows] the router's scratch */
    float *iscores;               /* [score_cap] indexer scores of a group of tokens, [token][row] */
    size_t score_cap;
    float *key_buf;               /* [pool threads][key_buf_n]: an IDX_TILE of keys, the same transposed, dots */
    size_t key_buf_n;
    int *tok_sel;                 /* [T][max(top_k, 1)] each token's top-k rows */
    int *tok_nsel;                /* [T] their count */
    float *topk_tmp;              /* [pool threads][max_rows] top-k's scratch */
    /* the indexer's pruned scoring (ds4_ops.h): per token its int16 query and bound, per row its key's l1 norm */
    int32_t *pqp;                 /* [T][Hi * Di / 2] */
    float *palpha, *pab;          /* [T][Hi] steps, [T][2] bound coefficients */
    char *pstate;                 /* [T] pruned or not */
    float *pk1;                   /* [max_rows + IDX_TILE] */
    float *pqt;                   /* [T][Di][Hi] the queries transposed */
    uint64_t *pmask;              /* [pool threads][max_rows / 64 + 1] the rows that may be in a token's top-k */
    float *pbuf;                  /* [pool threads][2 * max_rows]: the floors' scratch or the kept rows' scores, the kept rows */
    void *mm_scratch;
    /* drafts (fg_ds4_forward_draft), with an MTP block */
    uint64_t run_gen;             /* forward_run calls so far: a chain of drafts lives within one */
    fg_ds4_cache *dcache;         /* f->cache with the MTP layer's ring at offset 0 (of a slot's copy) */
    struct ds4_draft *drafts;     /* [T] slots, one per sequence drafting */
    int *draft_slot;              /* [T] the slot of each sequence of a draft call */
    uint8_t *draft_ring;          /* [T][W * row_bytes] each slot's copy of its sequence's MTP ring */
    float *draft_h;               /* [T][4][E] the MTP block's streams at the slot's last draft */
    struct packed_w *packed;      /* [n_packed] by model weight address: the copies mm() reads instead */
    int n_packed;
};

/* ---------------------------------------------------------------- helpers */

static const fg_weight *packed_of(const fg_ds4_forward_t *f, const fg_weight *w);

static int mm(fg_ds4_forward_t *f, const fg_weight *w, int64_t mat, const float *x, int n, float *y)
{
    w = packed_of(f, w);
    return fg_matmul(f->pool, f->isa, w->type, (const uint8_t *)w->data + (size_t)mat * w->mat_bytes, w->n_in,
                     w->n_out, x, n, y, f->mm_scratch);
}

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

/* hc_pre: mixing numbers of every token, then y[t] = sum_h pre[h] x[t][h]. */
static void hc_pre(fg_ds4_forward_t *f, const fg_ds4_hc *hc, const float *x, int n, float *y)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const int E = hp->n_embd, E4 = FG_DS4_HC * E;
    for (int t = 0; t < n; t++)
        fg_rmsnorm(f->flat + (size_t)t * E4, x + (size_t)t * E4, NULL, E4, hp->rms_eps);
    mm(f, &hc->fn, 0, f->flat, n, f->mix);
    for (int t = 0; t < n; t++) {
        float *w = f->hcw + (size_t)t * FG_DS4_HC_MIX;
        fg_ds4_hc_weights(f->mix + (size_t)t * FG_DS4_HC_MIX, hc->scale, hc->base, hp->hc_eps, hp->hc_iters, w);
        fg_ds4_hc_pre(w, x + (size_t)t * E4, E, y + (size_t)t * E);
    }
}

/* x'[d] = post[d] * o + sum_s comb[d][s] x[s], per token. */
static void hc_post(const fg_ds4_forward_t *f, const float *o, const float *x, int n, float *out)
{
    const int E = f->m->hp.n_embd, E4 = FG_DS4_HC * E;
    for (int t = 0; t < n; t++)
        fg_ds4_hc_post(f->hcw + (size_t)t * FG_DS4_HC_MIX, o + (size_t)t * E, x + (size_t)t * E4, E,
                       out + (size_t)t * E4);
}

/* The output head: hc pre weights only, output_norm, the vocabulary matrix. */
static void head(fg_ds4_forward_t *f, const float *x, int n, const float *norm, const fg_weight *out, float *logits)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const fg_ds4_hc *hc = &f->m->hc_out;
    const int E = hp->n_embd, E4 = FG_DS4_HC * E;
    for (int t = 0; t < n; t++)
        fg_rmsnorm(f->flat + (size_t)t * E4, x + (size_t)t * E4, NULL, E4, hp->rms_eps);
    mm(f, &hc->fn, 0, f->flat, n, f->mix);
    for (int t = 0; t < n; t++) {
        const float *m = f->mix + (size_t)t * FG_DS4_HC;
        float pre[4];
        for (int h = 0; h < 4; h++)
            pre[h] = (float)(sigm((double)m[h] * hc->scale[0] + hc->base[h]) + hp->hc_eps);
        const float *xt = x + (size_t)t * E4;
        float *yt = f->hin + (size_t)t * E;
        for (int i = 0; i < E; i++)
            yt[i] = pre[0] * xt[i] + pre[1] * xt[E + i] + pre[2] * xt[2 * E + i] + pre[3] * xt[3 * E + i];
        fg_rmsnorm(yt, yt, norm, E, hp->rms_eps);
    }
    mm(f, out, 0, f->hin, n, logits);
}

/* RoPE on the last rd dims of each of n_heads heads of width w; inverse: by -theta. */
static void rope_heads(const fg_rope *r, float *x, int n_heads, int w, int pos, bool inverse)
{
    float cs[FG_ROPE_MAX_DIMS];
    fg_rope_coefs(r, pos, cs);
    if (inverse)
        for (int i = 1; i < r->n_dims; i += 2)
            cs[i] = -cs[i];
    for (int h = 0; h < n_heads; h++)
        fg_rope_apply_coefs(r, cs, x + (size_t)h * w + (w - r->n_dims));
}

void fg_ds4_swiglu(fg_isa isa, float *gate, float *up, int n, float c)
{
    (void)isa; /* the scalar SiLU on every ISA, as this pass has always run it */
    if (c > 1e-6f)
        for (int i = 0; i < n; i++) {
            gate[i] = gate[i] < c ? gate[i] : c;
            up[i] = up[i] < -c ? -c : up[i] > c ? c : up[i];
        }
    fg_silu_mul(gate, up, n);
}

/* ---------------------------------------------------------------- attention */

/* One pool job: heads [h0, h1) over one tile of keys (online softmax). */
typedef struct tile_job {
    const fg_ds4_forward_t *f;
    const attn_ws *ws;   /* the running softmax */
    const float *q;      /* [H][D] */
    const float *keys;   /* [n][D] */
    const float *keys_t; /* [D][ld] */
    int n, ld;
} tile_job;

static void tile_run(void *ctx, int ith, int nth)
{
    const tile_job *j = ctx;
    const fg_ds4_forward_t *f = j->f;
    const int D = f->m->hp.head_dim;
    const float scale = 1.0f / sqrtf((float)D);
    long h0, h1;
    fg_pool_split(f->m->hp.n_head, 1, ith, nth, &h0, &h1);
    if (h0 >= h1)
        return;
    const attn_ws *w = j->ws;
    /* fg_ds4_attn_tile's logits, its heads' dots at once (the same bits) */
    fg_ds4_dots(j->q + (size_t)h0 * D, (int)(h1 - h0), D, j->keys_t, j->ld, j->n, D,
                w->tile + (size_t)h0 * KEY_TILE, KEY_TILE);
    for (long h = h0; h < h1; h++) {
        float *lg = w->tile + (size_t)h * KEY_TILE;
        for (int k = 0; k < j->n; k++)
            lg[k] *= scale;
        fg_ds4_attn_update(lg, j->keys, j->n, D, &w->mh[h], &w->lh[h], w->acc + (size_t)h * D);
    }
}

/* The CSA rows a token at position p sees: the blocks closed up to it. */
static int csa_visible(int p) { return (p + 1) / FG_DS4_CSA; }

/* One pool job: the indexer's scores of tokens [t0, t0 + nt) of one
 * sequence against the rows each sees, into iscores[t - t0][ld] (ld: the
 * last token's rows). Tiles of IDX_TILE rows are shared out; each is decoded
 * and transposed once for all the tokens, then scored as one product per
 * token (fg_ds4_index_scores: the bits of the row-by-row score). */
typedef struct index_job {
    const fg_ds4_forward_t *f;
    const fg_kv_seq *kv;
    int il, t0, nt, ld;
} index_job;

static void index_run(void *ctx, int ith, int nth)
{
    const index_job *j = ctx;
    const fg_ds4_forward_t *f = j->f;
    const int Hi = f->m->hp.idx_head, Di = f->m->hp.idx_dim;
    float *key = f->key_buf + (size_t)ith * f->key_buf_n, *kt = key + (size_t)Di * IDX_TILE, *dots = kt + (size_t)Di * IDX_TILE;
    long b0, b1;
    fg_pool_split((j->ld + IDX_TILE - 1) / IDX_TILE, 1, ith, nth, &b0, &b1);
    for (long b = b0; b < b1; b++) {
        const int r0 = (int)b * IDX_TILE, nk = j->ld - r0 < IDX_TILE ? j->ld - r0 : IDX_TILE;
        for (int k = 0; k < nk; k++)
            fg_ds4_key_load(f->cache, j->kv, j->il, r0 + k, key + (size_t)k * Di);
        fg_ds4_transpose(key, nk, Di, kt, IDX_TILE);
        /* a sequence's positions ascend: its later tokens see at least the rows of the earlier */
        for (int t = j->t0 + j->nt - 1; t >= j->t0; t--) {
            const int vis = csa_visible(f->tok_pos[t]);
            if (vis <= r0)
                break;
            fg_ds4_index_scores(f->iq + (size_t)t * Hi * Di, f->iw + (size_t)t * Hi, kt, IDX_TILE,
                                vis - r0 < nk ? vis - r0 : nk, Hi, Di, dots,
                                f->iscores + (size_t)(t - j->t0) * j->ld + r0);
        }
    }
}

/* One pool job: the top-k of each token of an index_job's scores. */
static void topk_run(void *ctx, int ith, int nth)
{
    const index_job *j = ctx;
    const fg_ds4_forward_t *f = j->f;
    const int top_k = f->m->hp.idx_top_k, ksel = top_k > 1 ? top_k : 1;
    long t0, t1;
    fg_pool_split(j->nt, 1, ith, nth, &t0, &t1);
    for (long i = t0; i < t1; i++) {
        const int t = j->t0 + (int)i;
        f->tok_nsel[t] = fg_ds4_top_k_tmp(f->iscores + (size_t)i * j->ld, csa_visible(f->tok_pos[t]), top_k,
                                          f->tok_sel + (size_t)t * ksel, f->topk_tmp + (size_t)ith * f->max_rows);
    }
}

/* The pruned scoring (ds4_ops.h, docs/engine.md "The indexer's pruned
 * scoring"): every row's bounded pre-score from its FP4 key as stored, the
 * rows that may be in the exact top-k, their exact scores (the bits above),
 * top-k among them; the same rows as topk_run over every exact score. */

/* A thread's packed tile, in key_buf past index_run's part: pk [Di/2][IDX_TILE], then ps [Di/16][IDX_TILE]. */
static int32_t *prune_pk(const fg_ds4_forward_t *f, int ith)
{
    const int Hi = f->m->hp.idx_head, Di = f->m->hp.idx_dim;
    return (int32_t *)(void *)(f->key_buf + (size_t)ith * f->key_buf_n + 2 * (size_t)Di * IDX_TILE +
                               (size_t)(Hi > 0 ? Hi : 1) * IDX_TILE);
}

/* Pass 1: each tile packed once; the pruned tokens' pre-scores, the others' exact scores (index_run's). */
static void prune_pre_run(void *ctx, int ith, int nth)
{
    const index_job *j = ctx;
    const fg_ds4_forward_t *f = j->f;
    const int Hi = f->m->hp.idx_head, Di = f->m->hp.idx_dim;
    float *key = f->key_buf + (size_t)ith * f->key_buf_n, *kt = key + (size_t)Di * IDX_TILE, *dots = kt + (size_t)Di * IDX_TILE;
    int32_t *pk = prune_pk(f, ith);
    float *ps = (float *)(void *)(pk + (size_t)Di / 2 * IDX_TILE);
    long b0, b1;
    fg_pool_split((j->ld + IDX_TILE - 1) / IDX_TILE, 1, ith, nth, &b0, &b1);
    for (long b = b0; b < b1; b++) {
        const int r0 = (int)b * IDX_TILE, nk = j->ld - r0 < IDX_TILE ? j->ld - r0 : IDX_TILE;
        const uint8_t *rows[IDX_TILE];
        for (int k = 0; k < nk; k++)
            rows[k] = fg_ds4_key_at(f->cache, j->kv, j->il, r0 + k);
        fg_ds4_prune_pack(rows, nk, Di, pk, ps, f->pk1 + r0);
        bool decoded = false;
        for (int t = j->t0 + j->nt - 1; t >= j->t0; t--) {
            const int vis = csa_visible(f->tok_pos[t]);
            if (vis <= r0)
                break;
            const int nv = vis - r0 < nk ? vis - r0 : nk;
            float *out = f->iscores + (size_t)(t - j->t0) * j->ld + r0;
            if (f->pstate[t]) {
                fg_ds4_prune_scores(f->pqp + (size_t)t * Hi * (Di / 2), f->palpha + (size_t)t * Hi,
                                    f->iw + (size_t)t * Hi, Hi, Di, pk, ps, nv, out);
                continue;
            }
            if (!decoded) {
                for (int k = 0; k < nk; k++)
                    fg_ds4_key_load(f->cache, j->kv, j->il, r0 + k, key + (size_t)k * Di);
                fg_ds4_transpose(key, nk, Di, kt, IDX_TILE);
                decoded = true;
            }
            fg_ds4_index_scores(f->iq + (size_t)t * Hi * Di, f->iw + (size_t)t * Hi, kt, IDX_TILE, nv, Hi, Di, dots,
                                out);
        }
    }
}

/* Pass 2, per token: a pruned one's floor and the rows at or above it,
 * those rows decoded and scored exactly (IDX_TILE at a time, the heads in
 * the lanes), and its top-k among them in index order, so that ties go as
 * over all rows; topk_run's for the others. */
static void prune_top_run(void *ctx, int ith, int nth)
{
    const index_job *j = ctx;
    const fg_ds4_forward_t *f = j->f;
    const int Hi = f->m->hp.idx_head, Di = f->m->hp.idx_dim, top_k = f->m->hp.idx_top_k;
    const int ksel = top_k > 1 ? top_k : 1;
    float *key = f->key_buf + (size_t)ith * f->key_buf_n, *dots = key + 2 * (size_t)Di * IDX_TILE;
    float *tmp = f->topk_tmp + (size_t)ith * f->max_rows, *pb = f->pbuf + (size_t)ith * 2 * f->max_rows;
    float *lo = pb, *ex = pb; /* the floors' scratch, then (once marked) the kept rows' exact scores */
    int *keep = (int *)(void *)(pb + f->max_rows);
    uint64_t *mask = f->pmask + (size_t)ith * (size_t)(f->max_rows / 64 + 1);
    long t0, t1;
    fg_pool_split(j->nt, 1, ith, nth, &t0, &t1);
    for (long i = t0; i < t1; i++) {
        const int t = j->t0 + (int)i, vis = csa_visible(f->tok_pos[t]);
        const float *sc = f->iscores + (size_t)i * j->ld;
        int *sel = f->tok_sel + (size_t)t * ksel;
        if (!f->pstate[t]) {
            f->tok_nsel[t] = fg_ds4_top_k_tmp(sc, vis, top_k, sel, tmp);
            continue;
        }
        fg_ds4_prune_mark(sc, f->pk1, f->pab + 2 * (size_t)t, vis, top_k, mask, lo, tmp);
        int nk = 0;
        for (int w = 0; w < (vis + 63) / 64; w++)
            for (uint64_t bits = mask[w]; bits; bits &= bits - 1)
                keep[nk++] = 64 * w + __builtin_ctzll(bits);
        const float *qt = f->pqt + (size_t)t * Hi * Di, *wt = f->iw + (size_t)t * Hi;
        for (int c0 = 0; c0 < nk; c0 += IDX_TILE) {
            const int nc = nk - c0 < IDX_TILE ? nk - c0 : IDX_TILE;
            int idx[IDX_TILE];
            for (int c = 0; c < nc; c++) {
                if (c + PREFETCH_ROWS < nc)
                    __builtin_prefetch(fg_ds4_key_at(f->cache, j->kv, j->il, keep[c0 + c + PREFETCH_ROWS]));
                fg_ds4_key_load(f->cache, j->kv, j->il, keep[c0 + c], key + (size_t)c * Di);
                idx[c] = c;
            }
            fg_ds4_index_score_rows(qt, wt, Hi, Di, key, idx, nc, dots, ex + c0);
        }
        const int n = fg_ds4_top_k_tmp(ex, nk, top_k, sel, tmp);
        for (int x = 0; x < n; x++)
            sel[x] = keep[sel[x]];
        f->tok_nsel[t] = n;
    }
}

/* Marks the tokens [g0, g1) to prune: FP4 keys, the ISA, rows enough, a query that bounds. */
static bool prune_plan(fg_ds4_forward_t *f, int g0, int g1)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const int Hi = hp->idx_head, Di = hp->idx_dim;
    const bool can = f->cache->format == FG_KV_FP8 && fg_isa_best() == FG_ISA_AVX512 && hp->idx_top_k >= 1;
    bool any = false;
    for (int t = g0; t < g1; t++) {
        const int vis = csa_visible(f->tok_pos[t]);
        f->pstate[t] = can && vis > hp->idx_top_k && vis >= PRUNE_MIN_K * hp->idx_top_k &&
                       fg_ds4_prune_query(f->iq + (size_t)t * Hi * Di, f->iw + (size_t)t * Hi, Hi, Di,
                                          f->pqp + (size_t)t * Hi * (Di / 2), f->palpha + (size_t)t * Hi,
                                          f->pab + 2 * (size_t)t);
        if (f->pstate[t]) { /* the query transposed, for the exact scores of scattered rows */
            const float *q = f->iq + (size_t)t * Hi * Di;
            float *qt = f->pqt + (size_t)t * Hi * Di;
            for (int h = 0; h < Hi; h++)
                for (int i = 0; i < Di; i++)
                    qt[(size_t)i * Hi + h] = q[(size_t)h * Di + i];
            any = true;
        }
    }
    return any;
}

static void run_par(fg_ds4_forward_t *f, bool par, void (*fn)(void *, int, int), index_job *job)
{
    if (par)
        fg_pool_run(f->pool, fn, job);
    else
        fn(job, 0, 1);
}

/* The indexer of CSA layer il for the batch's n tokens: every token's top-k
 * rows (tok_sel, tok_nsel), a sequence's tokens scored together in groups
 * whose scores fit in iscores. The compressor must have taken them all. */
static void index_batch(fg_ds4_forward_t *f, int il, int n)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    for (int g0 = 0; g0 < n;) {
        const fg_kv_seq *kv = f->tok_kv[g0];
        int g1 = g0 + 1;
        while (g1 < n && f->tok_kv[g1] == kv &&
               (size_t)(g1 + 1 - g0) * (size_t)csa_visible(f->tok_pos[g1]) <= f->score_cap)
            g1++;
        index_job job = {.f = f, .kv = kv, .il = il, .t0 = g0, .nt = g1 - g0,
                         .ld = csa_visible(f->tok_pos[g1 - 1])};
        const long work = (long)job.nt * job.ld;
        const bool par = work * hp->idx_head * hp->idx_dim >= PAR_MIN_WORK, par_t = job.nt > 1 && work >= PAR_MIN_WORK;
        if (job.ld > 0 && prune_plan(f, g0, g1)) {
            run_par(f, par, prune_pre_run, &job);
            run_par(f, par_t, prune_top_run, &job);
        } else {
            if (job.ld > 0)
                run_par(f, par, index_run, &job);
            run_par(f, par_t, topk_run, &job);
        }
        g0 = g1;
    }
}

typedef struct key_src {
    int n_window;        /* window positions first..p, decoded in f->win */
    int first;
    int n_rows;          /* then compressed rows: rows[i] (or 0..n_rows-1 when rows is NULL) */
    const int *rows;
} key_src;

/* softmax(q k / sqrt(D)) with the sink in the denominator, over the keys of
 * src, into out [H][D]; par_heads: the heads shared out over the pool (else
 * all on this thread, one of the pool's). */
static void attend(const fg_ds4_forward_t *f, attn_ws *w, int il, const fg_kv_seq *kv, const float *q,
                   const key_src *src, bool par_heads, float *out)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const fg_ds4_cache *c = f->cache;
    const int H = hp->n_head, D = hp->head_dim;
    for (int h = 0; h < H; h++) {
        w->mh[h] = -INFINITY;
        w->lh[h] = 0;
    }
    memset(w->acc, 0, (size_t)H * D * sizeof(float));
    const int total = src->n_window + src->n_rows, nw = src->n_window, w0 = src->first - f->win_base;
    for (int k0 = 0; k0 < total; k0 += KEY_TILE) {
        const int nk = total - k0 < KEY_TILE ? total - k0 : KEY_TILE;
        tile_job job = {.f = f, .ws = w, .q = q, .n = nk};
        if (k0 + nk <= nw) { /* all window rows: read where they lie */
            job.keys = f->win + (size_t)(w0 + k0) * D;
            job.keys_t = f->win_t + w0 + k0;
            job.ld = f->win_ld;
        } else if (k0 >= nw && !src->rows && k0 - nw + nk <= f->n_hca) { /* all decoded HCA rows */
            job.keys = f->hca + (size_t)(k0 - nw) * D;
            job.keys_t = f->hca_t + (k0 - nw);
            job.ld = f->hca_cap;
        } else {
            for (int k = 0; k < nk; k++) {
                const int i = k0 + k;
                float *dst = w->keys + (size_t)k * D;
                const int j = i - nw;
                if (src->rows && j + PREFETCH_ROWS >= 0 && j + PREFETCH_ROWS < src->n_rows)
                    fg_ds4_comp_prefetch(c, kv, il, hp->ratio[il], src->rows[j + PREFETCH_ROWS]);
                if (i < nw)
                    memcpy(dst, f->win + (size_t)(w0 + i) * D, (size_t)D * sizeof(float));
                else if (!src->rows && j < f->n_hca)
                    memcpy(dst, f->hca + (size_t)j * D, (size_t)D * sizeof(float));
                else
                    fg_ds4_comp_load(c, kv, il, hp->ratio[il], src->rows ? src->rows[j] : j, dst, w->rowtmp);
            }
            fg_ds4_transpose(w->keys, nk, D, w->keys_t, KEY_TILE);
            job.keys = w->keys;
            job.keys_t = w->keys_t;
            job.ld = KEY_TILE;
        }
        if (par_heads && nk * H * D >= PAR_MIN_WORK)
            fg_pool_run(f->pool, tile_run, &job);
        else
            tile_run(&job, 0, 1);
    }
    const float *sinks = f->m->layers[il].sinks;
    for (int h = 0; h < H; h++)
        fg_ds4_attn_finish(w->mh[h], w->lh[h], w->acc + (size_t)h * D, sinks[h], D, out + (size_t)h * D);
}

/* ---------------------------------------------------------------- compressors */

/* RMSNorm * norm, RoPE at the block's first position: a pooled row's last steps. */
static void finish_row(const fg_ds4_forward_t *f, int width, const float *norm, int pos0, float *row)
{
    fg_rmsnorm(row, row, norm, width, f->m->hp.rms_eps);
    rope_heads(&f->rope_comp, row, 1, width, pos0, false);
}

/* CSA's pooled row of a closed block: per channel a softmax over the block's
 * entries (its last width channels) and the previous block's (its first
 * width), weighting their k. cur/prev: [r][2][2*width] (k | score); prev NULL
 * for block 0 (its half counts as -inf). */
static void pool_csa(const fg_ds4_forward_t *f, int r, int width, const float *cur, const float *prev,
                     const float *norm, int pos0, float *row)
{
    fg_ds4_pool_csa(r, width, cur, prev, row);
    finish_row(f, width, norm, pos0, row);
}

/* HCA's pooling as an online softmax: the state keeps, per channel, the
 * running max score m, sum of exp(score - m) and the k weighted by them
 * ([3][D] f32), so an open block costs 3 D floats instead of 128 x 2 D. Each
 * token folds in when it arrives, in position order whatever the chunking. */
static void hca_token(const fg_ds4_layer *L, float *st, const float *k, const float *g,
                      int slot, int D)
{
    fg_ds4_hca_fold(st, k, g, L->comp.ape + (size_t)slot * D, slot, D);
}

/* Appends token t (position p) to the layer's compressor(s); a token that
 * closes a block writes its compressed row (and index key). */
static void compress_token(fg_ds4_forward_t *f, int il, const fg_kv_seq *kv, int t, int p)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const fg_ds4_layer *L = &f->m->layers[il];
    const fg_ds4_cache *c = f->cache;
    const int r = L->ratio, D = hp->head_dim, Di = hp->idx_dim;
    const int slot = p % r;
    if (r == FG_DS4_HCA) {
        float *st = (float *)(void *)(kv->state + c->layer[il].state_comp);
        hca_token(L, st, f->ck + (size_t)t * D, f->cg + (size_t)t * D, slot, D);
        if ((p + 1) % r == 0) {
            fg_ds4_hca_row(st, D, f->row);
            finish_row(f, D, L->comp.norm, p + 1 - r, f->row);
            fg_ds4_comp_store(c, kv, il, r, p / r, f->row, f->rowtmp);
        }
        return;
    }
    const int blk = (p / r) % 2;
    for (int which = 0; which < 2; which++) {
        const int width = which ? Di : D, cw = 2 * width;
        const fg_ds4_compressor *cp = which ? &L->idx_comp : &L->comp;
        float *st = (float *)(void *)(kv->state + (which ? c->layer[il].state_idx : c->layer[il].state_comp));
        float *e = st + ((size_t)blk * r + slot) * 2 * cw;
        const float *k = (which ? f->ik : f->ck) + (size_t)t * cw, *g = (which ? f->ig : f->cg) + (size_t)t * cw;
        memcpy(e, k, (size_t)cw * sizeof(float));
        for (int i = 0; i < cw; i++)
            e[cw + i] = g[i] + cp->ape[(size_t)slot * cw + i];
        if ((p + 1) % r)
            continue;
        const int j = p / r;
        const float *cur = st + (size_t)blk * r * 2 * cw;
        const float *prev = j > 0 ? st + (size_t)(blk ^ 1) * r * 2 * cw : NULL;
        pool_csa(f, r, width, cur, prev, cp->norm, j * r, f->row);
        if (which)
            fg_ds4_key_store(c, kv, il, j, f->row);
        else
            fg_ds4_comp_store(c, kv, il, r, j, f->row, f->rowtmp);
    }
}

/* ---------------------------------------------------------------- layers */

/* The keys that tokens [t0, t1) (one sequence) share, decoded once: into
 * f->win the ring's rows before the first token, then each token's own row
 * as the ring stores it (written there, in order, as before); into f->hca
 * an HCA layer's rows. */
static void window_rows(fg_ds4_forward_t *f, int il, int t0, int t1)
{
    const fg_ds4_cache *c = f->cache;
    const int D = f->m->hp.head_dim, W = f->m->hp.window;
    uint8_t *ring = f->tok_kv[t0]->state + c->layer[il].state_window;
    const int p0 = f->tok_pos[t0];
    f->win_base = p0 - W + 1 > 0 ? p0 - W + 1 : 0;
    for (int p = f->win_base; p < p0; p++)
        fg_ds4_row_get(c, ring + (size_t)(p % W) * c->row_bytes, f->win + (size_t)(p - f->win_base) * D);
    for (int t = t0; t < t1; t++) {
        const int p = f->tok_pos[t];
        uint8_t *slot = ring + (size_t)(p % W) * c->row_bytes;
        fg_ds4_row_put(c, f->kv + (size_t)t * D, slot);
        fg_ds4_row_get(c, slot, f->win + (size_t)(p - f->win_base) * D);
    }
    fg_ds4_transpose(f->win, f->tok_pos[t1 - 1] + 1 - f->win_base, D, f->win_t, f->win_ld);
    /* an HCA layer's rows that the last token sees (the others see the same or fewer) */
    f->n_hca = 0;
    if (f->m->layers[il].ratio == FG_DS4_HCA) {
        const int n = (f->tok_pos[t1 - 1] + 1) / FG_DS4_HCA;
        f->n_hca = n < f->hca_cap ? n : f->hca_cap;
        for (int j = 0; j < f->n_hca; j++)
            fg_ds4_comp_load(c, f->tok_kv[t0], il, FG_DS4_HCA, j, f->hca + (size_t)j * D, f->rowtmp);
        fg_ds4_transpose(f->hca, f->n_hca, D, f->hca_t, f->hca_cap);
    }
}

/* Token t's attention into heads[t]: its window, then the HCA rows it sees or
 * its top-k CSA rows (index_batch ran). */
static void attend_token(const fg_ds4_forward_t *f, attn_ws *w, int il, int t, bool par_heads)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const int H = hp->n_head, D = hp->head_dim, W = hp->window, r = f->m->layers[il].ratio;
    const int p = f->tok_pos[t];
    key_src src = {.first = p - W + 1 > 0 ? p - W + 1 : 0};
    src.n_window = p - src.first + 1;
    if (r == FG_DS4_HCA) {
        src.n_rows = (p + 1) / r;
    } else if (r == FG_DS4_CSA) {
        src.n_rows = f->tok_nsel[t];
        src.rows = f->tok_sel + (size_t)t * (hp->idx_top_k > 1 ? hp->idx_top_k : 1);
    }
    float *o = f->heads + (size_t)t * H * D;
    attend(f, w, il, f->tok_kv[t], f->q + (size_t)t * H * D, &src, par_heads, o);
    rope_heads(r ? &f->rope_comp : &f->rope_plain, o, H, D, p, true);
}

/* One pool job: tokens [t0, t0 + nt) of one sequence, each whole on one
 * thread (its workspace), dealt round-robin (a token's cost grows with its
 * position). The same arithmetic as one token with its heads shared out. */
typedef struct attn_job {
    const fg_ds4_forward_t *f;
    int il, t0, nt;
} attn_job;

static void attn_run(void *ctx, int ith, int nth)
{
    const attn_job *j = ctx;
    for (int i = ith; i < j->nt; i += nth)
        attend_token(j->f, &j->f->ws[ith], j->il, j->t0 + i, false);
}

static void attention(fg_ds4_forward_t *f, int il, int n)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const fg_ds4_layer *L = &f->m->layers[il];
    const int E = hp->n_embd, H = hp->n_head, D = hp->head_dim, Q = hp->q_lora, r = L->ratio;
    const int Hi = hp->idx_head, Di = hp->idx_dim, G = hp->out_groups, R = hp->out_lora;
    const fg_rope *rope = r ? &f->rope_comp : &f->rope_plain;
    for (int t = 0; t < n; t++)
        fg_rmsnorm(f->y + (size_t)t * E, f->y + (size_t)t * E, L->attn_norm, E, hp->rms_eps);
    mm(f, &L->q_a, 0, f->y, n, f->qa);
    mm(f, &L->kv, 0, f->y, n, f->kv);
    if (r) {
        mm(f, &L->comp.kv, 0, f->y, n, f->ck);
        mm(f, &L->comp.gate, 0, f->y, n, f->cg);
    }
    if (r == FG_DS4_CSA) {
        mm(f, &L->idx_comp.kv, 0, f->y, n, f->ik);
        mm(f, &L->idx_comp.gate, 0, f->y, n, f->ig);
        mm(f, &L->idx_proj, 0, f->y, n, f->iw);
    }
    for (int t = 0; t < n; t++)
        fg_rmsnorm(f->qa + (size_t)t * Q, f->qa + (size_t)t * Q, L->q_a_norm, Q, hp->rms_eps);
    mm(f, &L->q_b, 0, f->qa, n, f->q);
    if (r == FG_DS4_CSA)
        mm(f, &L->idx_q_b, 0, f->qa, n, f->iq);
    const float iw_scale = 1.0f / sqrtf((float)Di * (float)Hi);
    for (int t = 0; t < n; t++) {
        float *qt = f->q + (size_t)t * H * D, *kt = f->kv + (size_t)t * D;
        for (int h = 0; h < H; h++)
            fg_rmsnorm(qt + (size_t)h * D, qt + (size_t)h * D, NULL, D, hp->rms_eps);
        const int p = f->tok_pos[t];
        rope_heads(rope, qt, H, D, p, false);
        fg_rmsnorm(kt, kt, L->kv_norm, D, hp->rms_eps);
        rope_heads(rope, kt, 1, D, p, false);
        if (r == FG_DS4_CSA) {
            rope_heads(&f->rope_comp, f->iq + (size_t)t * Hi * Di, Hi, Di, p, false);
            for (int h = 0; h < Hi; h++)
                f->iw[(size_t)t * Hi + h] *= iw_scale;
        }
    }
    /* The compressors first: a token's attention reads only rows closed at
     * or before it, and the indexer scores all the tokens against them at once. */
    for (int t = 0; t < n && r; t++)
        compress_token(f, il, f->tok_kv[t], t, f->tok_pos[t]);
    if (r == FG_DS4_CSA)
        index_batch(f, il, n);
    for (int t0 = 0; t0 < n;) {
        int t1 = t0 + 1;
        while (t1 < n && f->tok_kv[t1] == f->tok_kv[t0])
            t1++;
        window_rows(f, il, t0, t1);
        attn_job job = {.f = f, .il = il, .t0 = t0, .nt = t1 - t0};
        if (job.nt > 1 && fg_pool_size(f->pool) > 1)
            fg_pool_run(f->pool, attn_run, &job);
        else
            for (int t = t0; t < t1; t++)
                attend_token(f, &f->ws[0], il, t, true);
        t0 = t1;
    }
    /* grouped output LoRA: group g (heads g*H/G ..) through out_a[g], concatenated, out_b */
    const int gd = H * D / G;
    for (int g = 0; g < G; g++) {
        for (int t = 0; t < n; t++)
            memcpy(f->grp + (size_t)t * gd, f->heads + (size_t)t * H * D + (size_t)g * gd, (size_t)gd * sizeof(float));
        mm(f, &L->out_a, g, f->grp, n, f->oa_g);
        for (int t = 0; t < n; t++)
            memcpy(f->oa + (size_t)t * G * R + (size_t)g * R, f->oa_g + (size_t)t * R, (size_t)R * sizeof(float));
    }
    mm(f, &L->out_b, 0, f->oa, n, f->f);
}

static void moe(fg_ds4_forward_t *f, int il, const int32_t *tokens, int n)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const fg_ds4_layer *L = &f->m->layers[il];
    const int E = hp->n_embd, X = hp->n_expert, K = hp->n_expert_used, F = hp->n_ff_exp;
    mm(f, &L->router, 0, f->y, n, f->router);
    for (int t = 0; t < n; t++) {
        float *p = f->router + (size_t)t * X;
        for (int e = 0; e < X; e++) { /* sqrt(softplus) */
            const double v = p[e];
            p[e] = (float)sqrt(v > 0 ? v + log1p(exp(-v)) : log1p(exp(v)));
        }
        int *ch = f->chosen + (size_t)t * K;
        if (L->tid2eid) {
            memcpy(ch, L->tid2eid + (size_t)tokens[t] * K, (size_t)K * sizeof *ch);
        } else {
            float *b = f->scores; /* X <= max_rows: checked at create */
            for (int e = 0; e < X; e++)
                b[e] = p[e] + L->exp_probs_b[e];
            fg_ds4_top_k(b, X, K, ch);
        }
        double sum = 0;
        for (int k = 0; k < K; k++)
            sum += p[ch[k]];
        if (sum < 6.103515625e-5)
            sum = 6.103515625e-5;
        for (int k = 0; k < K; k++) {
            double w = p[ch[k]];
            if (hp->expert_weights_norm)
                w /= sum;
            f->wts[(size_t)t * K + k] = (float)(w * hp->expert_weights_scale);
            f->counts[ch[k]]++;
        }
    }
    memset(f->f, 0, (size_t)n * E * sizeof(float));
    if (f->ep) {
        /* Each token's routed experts run on the ranks that hold them and come back summed into f in
         * ascending id order, as the loop below adds them; a failed exchange is kept and the pass goes on, so
         * the peers complete every layer. */
        const fg_err err = fg_moe_ep_experts(f->ep, il, n, f->chosen, f->wts, f->y, f->f, &f->ep_diag);
        if (err != FG_OK && f->ep_err == FG_OK)
            f->ep_err = err;
    }
    for (int e = 0; e < X && !f->ep; e++) {
        int cnt = 0;
        for (int t = 0; t < n; t++)
            for (int k = 0; k < K; k++)
                if (f->chosen[(size_t)t * K + k] == e) {
                    f->tok_of[cnt] = t;
                    f->w_of[cnt] = f->wts[(size_t)t * K + k];
                    memcpy(f->ein + (size_t)cnt * E, f->y + (size_t)t * E, (size_t)E * sizeof(float));
                    cnt++;
                }
        if (!cnt)
            continue;
        mm(f, &L->gate_exps, e, f->ein, cnt, f->eg);
        mm(f, &L->up_exps, e, f->ein, cnt, f->eu);
        for (int i = 0; i < cnt; i++)
            fg_ds4_swiglu(f->isa, f->eg + (size_t)i * F, f->eu + (size_t)i * F, F, hp->clamp_exp[il]);
        mm(f, &L->down_exps, e, f->eg, cnt, f->ed);
        for (int i = 0; i < cnt; i++)
            fg_axpy(f->f + (size_t)f->tok_of[i] * E, f->w_of[i], f->ed + (size_t)i * E, E);
    }
    if (hp->n_expert_shared > 0) {
        const int Fs = F * hp->n_expert_shared;
        mm(f, &L->gate_shexp, 0, f->y, n, f->eg);
        mm(f, &L->up_shexp, 0, f->y, n, f->eu);
        for (int t = 0; t < n; t++)
            fg_ds4_swiglu(f->isa, f->eg + (size_t)t * Fs, f->eu + (size_t)t * Fs, Fs, hp->clamp_shexp[il]);
        mm(f, &L->down_shexp, 0, f->eg, n, f->ed);
        for (int t = 0; t < n; t++)
            fg_axpy(f->f + (size_t)t * E, 1.0f, f->ed + (size_t)t * E, E);
    }
}

/* One block over the n tokens' streams x (updated in place). */
static void layer(fg_ds4_forward_t *f, int il, float *x, const int32_t *tokens, int n)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const fg_ds4_layer *L = &f->m->layers[il];
    const int E = hp->n_embd;
    hc_pre(f, &L->hc_attn, x, n, f->y);
    attention(f, il, n);
    hc_post(f, f->f, x, n, f->x1);
    hc_pre(f, &L->hc_ffn, f->x1, n, f->y);
    for (int t = 0; t < n; t++)
        fg_rmsnorm(f->y + (size_t)t * E, f->y + (size_t)t * E, L->ffn_norm, E, hp->rms_eps);
    moe(f, il, tokens, n);
    hc_post(f, f->f, f->x1, n, x);
}

/* ---------------------------------------------------------------- run */

/* The head over the nr gathered rows in x1, each row to its logit_dst. */
static void head_flush(fg_ds4_forward_t *f, int nr, const float *norm, const fg_weight *out)
{
    const int V = f->m->hp.n_vocab;
    head(f, f->x1, nr, norm, out, f->logit_out);
    for (int r = 0; r < nr; r++)
        memcpy(f->logit_dst[r], f->logit_out + (size_t)r * V, (size_t)V * sizeof(float));
}

/* The logits of the rows the sequences ask for, LOGIT_CHUNK rows per head
 * product: into each sequence's buffer, or (mtp) into mtp's rows in batch
 * order. x: the batch's final streams. */
static void heads_of(fg_ds4_forward_t *f, const float *x, const fg_fwd_seq *seqs, int n_seqs, const float *norm,
                     const fg_weight *out, float *mtp)
{
    const int E4 = FG_DS4_HC * f->m->hp.n_embd, V = f->m->hp.n_vocab;
    const int chunk = f->max_tokens < LOGIT_CHUNK ? f->max_tokens : LOGIT_CHUNK;
    int nr = 0, done = 0;
    for (int i = 0, at = 0; i < n_seqs; at += seqs[i].n_tokens, i++)
        for (int j = 0; j < seqs[i].n_logits; j++) {
            const int t = at + seqs[i].n_tokens - seqs[i].n_logits + j;
            memcpy(f->x1 + (size_t)nr * E4, x + (size_t)t * E4, (size_t)E4 * sizeof(float));
            f->logit_dst[nr++] = mtp ? mtp + (size_t)done++ * V : seqs[i].logits + (size_t)j * V;
            if (nr == chunk) {
                head_flush(f, nr, norm, out);
                nr = 0;
            }
        }
    if (nr)
        head_flush(f, nr, norm, out);
}

static float *last_h_of(const fg_ds4_forward_t *f, const fg_kv_seq *kv)
{
    return (float *)(void *)(kv->state + f->cache->state_h);
}

/* The MTP block's input rows of batch token t: per stream
 * [enorm(embed(token)); hnorm(h[stream])], into mtp_in. */
static void mtp_input(fg_ds4_forward_t *f, int t, int32_t token, const float *h)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const fg_ds4_layer *L = &f->m->layers[hp->n_layer];
    const int E = hp->n_embd;
    float *e = f->hin;
    fg_weight_row_f32(&f->m->mtp_embd, token, e);
    fg_rmsnorm(e, e, L->enorm, E, hp->rms_eps);
    for (int st = 0; st < FG_DS4_HC; st++) {
        float *row = f->mtp_in + ((size_t)t * FG_DS4_HC + st) * 2 * E;
        memcpy(row, e, (size_t)E * sizeof(float));
        fg_rmsnorm(row + E, h + (size_t)st * E, L->hnorm, E, hp->rms_eps);
    }
}

/* Every sequence of the batch at once: n tokens through each matrix. */
static void run_batch(fg_ds4_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, int n)
{
    const fg_ds4_model *m = f->m;
    const fg_ds4_hparams *hp = &m->hp;
    const int E = hp->n_embd, E4 = FG_DS4_HC * E;
    for (int i = 0, at = 0; i < n_seqs; at += seqs[i].n_tokens, i++) {
        fg_kv_seq *kv = seqs[i].kv;
        if (kv->n_tokens == 0) {
            ((fg_ds4_state_head *)(void *)kv->state)->n_tokens = 0;
            memset(last_h_of(f, kv), 0, (size_t)E4 * sizeof(float));
        }
        for (int t = 0; t < seqs[i].n_tokens; t++) {
            f->tok_kv[at + t] = kv;
            f->tok_pos[at + t] = kv->n_tokens + t;
        }
    }
    for (int t = 0; t < n; t++) {
        fg_weight_row_f32(&m->tok_embd, tokens[t], f->x + (size_t)t * E4);
        for (int h = 1; h < FG_DS4_HC; h++)
            memcpy(f->x + (size_t)t * E4 + (size_t)h * E, f->x + (size_t)t * E4, (size_t)E * sizeof(float));
    }
    for (int il = 0; il < hp->n_layer; il++)
        layer(f, il, f->x, tokens, n);
    heads_of(f, f->x, seqs, n_seqs, m->output_norm, &m->output, NULL);
    if (hp->n_nextn) {
        /* per stream [enorm(embed(token)); hnorm(h_{p-1})], h_{p-1} from the
         * token before in the batch or, first of its sequence, the state */
        for (int t = 0; t < n; t++) {
            const float *h = f->tok_pos[t] && t && f->tok_kv[t - 1] == f->tok_kv[t] ? f->x + (size_t)(t - 1) * E4
                                                                                    : last_h_of(f, f->tok_kv[t]);
            mtp_input(f, t, tokens[t], h);
        }
    }
    for (int i = 0, at = 0; i < n_seqs; at += seqs[i].n_tokens, i++)
        memcpy(last_h_of(f, seqs[i].kv), f->x + (size_t)(at + seqs[i].n_tokens - 1) * E4, (size_t)E4 * sizeof(float));
    if (hp->n_nextn) {
        const fg_ds4_layer *L = &m->layers[hp->n_layer];
        mm(f, &L->eh_proj, 0, f->mtp_in, n * FG_DS4_HC, f->xm);
        layer(f, hp->n_layer, f->xm, tokens, n);
        if (f->mtp_out)
            heads_of(f, f->xm, seqs, n_seqs, m->mtp_norm, &m->mtp_output, f->mtp_out);
    }
}

/* Checks a batch; *n_out gets its tokens. */
static fg_err check_batch(const fg_ds4_forward_t *f, const int32_t *tokens, const fg_fwd_seq *seqs, int n_seqs,
                          int *n_out, fg_diag *diag)
{
    const int V = f->m->hp.n_vocab;
    int total = 0;
    *n_out = 0;
    for (int i = 0; i < n_seqs; i++) {
        const fg_fwd_seq *s = &seqs[i];
        if (s->n_tokens < 1 || s->n_tokens > f->max_tokens)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "sequence %d: %d tokens (1..%d per run)", i, s->n_tokens,
                               f->max_tokens);
        if (s->n_logits != 0 && s->n_logits != 1 && s->n_logits != s->n_tokens)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "sequence %d: n_logits %d", i, s->n_logits);
        if (s->n_logits && !s->logits)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "sequence %d: no logits buffer", i);
        const fg_kv_seq *kv = s->kv;
        const int end = kv->n_tokens + s->n_tokens;
        if (!kv->state || (int64_t)kv->n_pages * FG_KV_PAGE_TOKENS < end)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "sequence %d: no pages or state for %d tokens", i, end);
        if (end > f->max_rows * FG_DS4_CSA)
            return fg_diag_set(diag, FG_ERR_CONTEXT_FULL, "sequence %d: %d tokens exceed the context %d", i, end,
                               f->max_rows * FG_DS4_CSA);
        if (kv->n_tokens && ((const fg_ds4_state_head *)(const void *)kv->state)->n_tokens != kv->n_tokens)
            return fg_diag_set(diag, FG_ERR_STATE,
                               "sequence %d: its deepseek4 cache state holds %d tokens, the sequence %d (a "
                               "deepseek4 sequence cannot be truncated or rewound; start it again)",
                               i, ((const fg_ds4_state_head *)(const void *)kv->state)->n_tokens, kv->n_tokens);
        for (int t = 0; t < s->n_tokens; t++)
            if (tokens[total + t] < 0 || tokens[total + t] >= V)
                return fg_diag_set(diag, FG_ERR_TOKEN_ID, "token id %d outside the vocabulary [0, %d)",
                                   tokens[total + t], V);
        total += s->n_tokens;
    }
    if (total > f->max_tokens)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "%d tokens in one run (at most %d)", total, f->max_tokens);
    *n_out = total;
    return FG_OK;
}

fg_err fg_ds4_forward_run(fg_ds4_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    int total;
    f->run_gen++; /* ends every chain of drafts */
    const fg_err bad = check_batch(f, tokens, seqs, n_seqs, &total, diag);
    if (bad != FG_OK) {
        if (f->ep) { /* a refused batch still takes part in the exchanges, so that the peers complete */
            fg_diag idle;
            (void)fg_moe_ep_idle(f->ep, &idle);
        }
        return bad;
    }
    memset(f->counts, 0, (size_t)f->m->hp.n_expert * sizeof *f->counts);
    f->ep_err = FG_OK;
    if (total)
        run_batch(f, tokens, seqs, n_seqs, total);
    else if (f->ep) /* no tokens here: the peers still exchange with us at every layer */
        f->ep_err = fg_moe_ep_idle(f->ep, &f->ep_diag);
    if (f->ep_err != FG_OK) {
        /* The rings and compressor blocks took this run's tokens but the sequences do not advance: their state
         * no longer matches their length, so a later run refuses them (FG_ERR_STATE) rather than go on from it. */
        for (int i = 0; i < n_seqs && total; i++)
            if (seqs[i].kv->n_tokens)
                ((fg_ds4_state_head *)(void *)seqs[i].kv->state)->n_tokens = -1;
        return fg_diag_set(diag, f->ep_err, "%s", f->ep_diag.msg);
    }
    for (int i = 0; i < n_seqs; i++) {
        fg_kv_seq *kv = seqs[i].kv;
        kv->n_tokens += seqs[i].n_tokens;
        ((fg_ds4_state_head *)(void *)kv->state)->n_tokens = kv->n_tokens;
    }
    if (f->count_sink)
        for (int e = 0; e < f->m->hp.n_expert; e++)
            if (f->counts[e])
                atomic_fetch_add_explicit(&f->count_sink[e], f->counts[e], memory_order_relaxed);
    return FG_OK;
}

/* ---------------------------------------------------------------- create */

static void *alloc_f(size_t n_floats, bool *ok)
{
    void *p = NULL;
    size_t bytes = (n_floats * sizeof(float) + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, bytes ? bytes : 64))
        p = NULL;
    if (!p)
        *ok = false;
    return p;
}

/* ---------------------------------------------------------------- packed weights */

/* On AVX-512 every Q8_0 matrix with rows in multiples of 16 is read as a
 * panel copy packed at create (fg_weight_pack_q8_p16): the panel kernel gives
 * a token the same bits in any batch, which raw Q8_0's decode, few-token,
 * tile and panel kernels do not (kernels/cpu/matmul.h), so a verify pass of
 * k + 1 tokens gives the logits of k + 1 single steps, and a prompt's the
 * same in any chunking. mm() finds a weight's copy by the model weight's
 * address. */
typedef struct packed_w {
    const fg_weight *src; /* the model's */
    fg_weight w;          /* what the products read */
    void *owned;          /* the copy (NULL: shared with an earlier entry of the same data) */
} packed_w;

static int packed_cmp(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t)((const packed_w *)a)->src, y = (uintptr_t)((const packed_w *)b)->src;
    return x < y ? -1 : x > y;
}

static const fg_weight *packed_of(const fg_ds4_forward_t *f, const fg_weight *w)
{
    int lo = 0, hi = f->n_packed;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if ((uintptr_t)f->packed[mid].src < (uintptr_t)w)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f->n_packed && f->packed[lo].src == w ? &f->packed[lo].w : w;
}

/* Adds src's copy to f->packed (room for it reserved); one copy per data. */
static int pack_one(fg_ds4_forward_t *f, const fg_weight *src)
{
    packed_w *p = &f->packed[f->n_packed];
    for (int i = 0; i < f->n_packed; i++)
        if (src->data && f->packed[i].src->data == src->data && f->packed[i].src->type == src->type) {
            *p = (packed_w){.src = src, .w = f->packed[i].w};
            f->n_packed++;
            return 0;
        }
    const int r = fg_weight_pack_q8_p16(src, f->m->base.weights_file_mapped, &p->w, &p->owned);
    p->src = src;
    f->n_packed += r == 1;
    return r < 0 ? -1 : 0;
}

#define PACK_PER_LAYER 21 /* the fg_weight members of fg_ds4_layer */

static fg_err pack_weights(fg_ds4_forward_t *f, fg_diag *diag)
{
    const fg_ds4_model *m = f->m;
    const fg_isa isa = f->isa == FG_ISA_AUTO ? fg_isa_best() : f->isa;
    if (isa != FG_ISA_AVX512)
        return FG_OK; /* the scalar reference's products are batch-invariant as they are; AVX2's are not */
    f->packed = calloc((size_t)m->hp.n_layer_all * PACK_PER_LAYER + 3, sizeof *f->packed);
    if (!f->packed)
        return fg_diag_set(diag, FG_ERR_NOMEM, "forward: out of memory for the packed weights");
    int bad = 0;
    for (int il = 0; il < m->hp.n_layer_all; il++) {
        const fg_ds4_layer *L = &m->layers[il];
        const fg_weight *ws[PACK_PER_LAYER] = {
            &L->hc_attn.fn, &L->hc_ffn.fn, &L->q_a, &L->q_b, &L->kv, &L->out_a, &L->out_b,
            &L->comp.kv, &L->comp.gate, &L->idx_proj, &L->idx_q_b, &L->idx_comp.kv, &L->idx_comp.gate,
            &L->router, &L->gate_exps, &L->up_exps, &L->down_exps, &L->gate_shexp, &L->up_shexp,
            &L->down_shexp, &L->eh_proj};
        for (int i = 0; i < PACK_PER_LAYER; i++)
            bad |= pack_one(f, ws[i]);
    }
    bad |= pack_one(f, &m->output) | pack_one(f, &m->mtp_output) | pack_one(f, &m->hc_out.fn);
    if (bad)
        return fg_diag_set(diag, FG_ERR_NOMEM, "forward: out of memory for the packed weights");
    qsort(f->packed, (size_t)f->n_packed, sizeof *f->packed, packed_cmp);
    return FG_OK;
}

static void pack_destroy(fg_ds4_forward_t *f)
{
    for (int i = 0; i < f->n_packed; i++)
        free(f->packed[i].owned);
    free(f->packed);
}

/* ---------------------------------------------------------------- drafts */

/* A chain of drafts of one sequence: the MTP block at positions base,
 * base + 1, .. on a copy of the sequence's MTP ring (the block's only cache:
 * its compress ratio is 0, model.c), so the sequence itself is only read. */
typedef struct ds4_draft {
    const fg_kv_seq *kv;  /* the sequence; NULL: free */
    uint64_t gen;         /* run_gen of its chain (another: free) */
    int base;             /* kv->n_tokens when the chain began */
    int depth;            /* drafts made in the chain before this call; -1: claimed by this call */
    fg_kv_seq shadow;     /* kv with state = the slot's ring copy, in dcache's layout */
} ds4_draft;

static fg_err draft_create(fg_ds4_forward_t *f, fg_diag *diag)
{
    const fg_ds4_hparams *hp = &f->m->hp;
    const size_t T = (size_t)f->max_tokens, E4 = (size_t)FG_DS4_HC * (size_t)hp->n_embd;
    const size_t cache_bytes = sizeof *f->cache + (size_t)hp->n_layer_all * sizeof f->cache->layer[0];
    bool ok = true;
    f->dcache = malloc(cache_bytes);
    f->drafts = calloc(T, sizeof *f->drafts);
    f->draft_slot = calloc(T, sizeof *f->draft_slot);
    /* row_bytes is a multiple of 4 */
    f->draft_ring = alloc_f(T * (size_t)hp->window * f->cache->row_bytes / sizeof(float), &ok);
    f->draft_h = alloc_f(T * E4, &ok);
    if (!ok || !f->dcache || !f->drafts || !f->draft_slot)
        return fg_diag_set(diag, FG_ERR_NOMEM, "forward: out of memory for the drafts of %d sequences", f->max_tokens);
    memcpy(f->dcache, f->cache, cache_bytes);
    f->dcache->layer[hp->n_layer].state_window = 0;
    return FG_OK;
}

static void draft_destroy(fg_ds4_forward_t *f)
{
    free(f->dcache);
    free(f->drafts);
    free(f->draft_slot);
    free(f->draft_ring);
    free(f->draft_h);
}

/* The slot of seqs[i]'s chain, or a free one claimed (depth -1). Errors:
 * FG_ERR_INVALID_ARG (every slot in use by this chain's sequences). */
static fg_err draft_claim(fg_ds4_forward_t *f, const fg_kv_seq *kv, int i, fg_diag *diag)
{
    int free_slot = -1;
    for (int s = 0; s < f->max_tokens; s++) {
        ds4_draft *d = &f->drafts[s];
        const bool live = d->kv && d->gen == f->run_gen;
        if (live && d->kv == kv && d->base == kv->n_tokens && d->depth >= 0) {
            f->draft_slot[i] = s;
            return FG_OK;
        }
        if (!live && free_slot < 0)
            free_slot = s;
    }
    if (free_slot < 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "more than %d sequences drafting between two runs",
                           f->max_tokens);
    ds4_draft *d = &f->drafts[free_slot];
    *d = (ds4_draft){.kv = kv, .gen = f->run_gen, .base = kv->n_tokens, .depth = -1, .shadow = *kv};
    d->shadow.state = f->draft_ring + (size_t)free_slot * (size_t)f->m->hp.window * f->cache->row_bytes;
    f->draft_slot[i] = free_slot;
    return FG_OK;
}

/* Checks a draft call and claims each sequence's slot; on an error the slots
 * claimed here are released and nothing else changed. */
static fg_err draft_check(fg_ds4_forward_t *f, const int32_t *tokens, const fg_fwd_seq *seqs, int n_seqs,
                          fg_diag *diag)
{
    const int V = f->m->hp.n_vocab;
    if (n_seqs < 0 || n_seqs > f->max_tokens)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "%d sequences in one draft call (at most %d)", n_seqs,
                           f->max_tokens);
    for (int i = 0; i < n_seqs; i++) {
        const fg_fwd_seq *s = &seqs[i];
        const fg_kv_seq *kv = s->kv;
        if (s->n_tokens != 1 || s->n_logits != 1 || !s->logits)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                               "sequence %d: a draft takes 1 token and 1 row of logits (%d tokens, %d logits)", i,
                               s->n_tokens, s->n_logits);
        if (!kv || !kv->state)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "sequence %d: no cache state", i);
        if (kv->n_tokens && ((const fg_ds4_state_head *)(const void *)kv->state)->n_tokens != kv->n_tokens)
            return fg_diag_set(diag, FG_ERR_STATE,
                               "sequence %d: its deepseek4 cache state holds %d tokens, the sequence %d (a "
                               "deepseek4 sequence cannot be truncated or rewound; start it again)",
                               i, ((const fg_ds4_state_head *)(const void *)kv->state)->n_tokens, kv->n_tokens);
        if (tokens[i] < 0 || tokens[i] >= V)
            return fg_diag_set(diag, FG_ERR_TOKEN_ID, "token id %d outside the vocabulary [0, %d)", tokens[i], V);
        for (int j = 0; j < i; j++)
            if (seqs[j].kv == kv)
                return fg_diag_set(diag, FG_ERR_INVALID_ARG, "sequences %d and %d: the same sequence twice", j, i);
    }
    for (int i = 0; i < n_seqs; i++) {
        fg_err e = draft_claim(f, seqs[i].kv, i, diag);
        const ds4_draft *d = e == FG_OK ? &f->drafts[f->draft_slot[i]] : NULL;
        if (d && d->base + d->depth + 1 >= f->max_rows * FG_DS4_CSA)
            e = fg_diag_set(diag, FG_ERR_CONTEXT_FULL, "sequence %d: a draft at position %d exceeds the context %d",
                            i, d->base + d->depth + 1, f->max_rows * FG_DS4_CSA);
        if (e != FG_OK) {
            for (int j = 0; j < i + (d != NULL); j++)
                if (f->drafts[f->draft_slot[j]].depth < 0)
                    f->drafts[f->draft_slot[j]].kv = NULL;
            return e;
        }
    }
    return FG_OK;
}

fg_err fg_ds4_forward_draft(fg_ds4_forward_t *f, const int32_t *tokens, fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    const fg_ds4_model *m = f->m;
    const fg_ds4_hparams *hp = &m->hp;
    if (!hp->n_nextn)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "this deepseek4 model has no MTP block to draft with");
    if (f->ep)
        return fg_diag_set(diag, FG_ERR_UNSUPPORTED,
                           "drafts with expert parallelism (a draft is not a collective step of the ranks)");
    const fg_err bad = draft_check(f, tokens, seqs, n_seqs, diag);
    if (bad != FG_OK || n_seqs == 0)
        return bad;
    const int il = hp->n_layer, E4 = FG_DS4_HC * hp->n_embd;
    const size_t ring_bytes = (size_t)hp->window * f->cache->row_bytes;
    for (int i = 0; i < n_seqs; i++) {
        const fg_kv_seq *kv = seqs[i].kv;
        ds4_draft *d = &f->drafts[f->draft_slot[i]];
        float *h = f->draft_h + (size_t)f->draft_slot[i] * E4;
        if (d->depth < 0) { /* the chain's first: the trunk's h of the last cached position, as a run has it */
            memcpy(d->shadow.state, kv->state + f->cache->layer[il].state_window, ring_bytes);
            if (kv->n_tokens)
                memcpy(h, last_h_of(f, kv), (size_t)E4 * sizeof(float));
            else
                memset(h, 0, (size_t)E4 * sizeof(float));
        }
        d->depth++;
        f->tok_kv[i] = &d->shadow;
        f->tok_pos[i] = d->base + d->depth;
        mtp_input(f, i, tokens[i], h);
    }
    memset(f->counts, 0, (size_t)hp->n_expert * sizeof *f->counts);
    mm(f, &m->layers[il].eh_proj, 0, f->mtp_in, n_seqs * FG_DS4_HC, f->xm);
    fg_ds4_cache *const cache = f->cache;
    f->cache = f->dcache; /* the MTP layer's ring: the slots' copies */
    layer(f, il, f->xm, tokens, n_seqs);
    f->cache = cache;
    heads_of(f, f->xm, seqs, n_seqs, m->mtp_norm, &m->mtp_output, NULL);
    for (int i = 0; i < n_seqs; i++)
        memcpy(f->draft_h + (size_t)f->draft_slot[i] * E4, f->xm + (size_t)i * E4, (size_t)E4 * sizeof(float));
    if (f->count_sink)
        for (int e = 0; e < hp->n_expert; e++)
            if (f->counts[e])
                atomic_fetch_add_explicit(&f->count_sink[e], f->counts[e], memory_order_relaxed);
    return FG_OK;
}

fg_err fg_ds4_forward_create(const fg_ds4_model *m, const fg_kv_geometry *geo, int max_tokens, fg_pool_t *pool,
                             fg_isa isa, fg_ds4_forward_t **out, fg_diag *diag)
{
    *out = NULL;
    if (max_tokens < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "max_tokens %d < 1", max_tokens);
    const fg_ds4_hparams *hp = &m->hp;
    fg_ds4_forward_t *f = calloc(1, sizeof *f);
    if (!f)
        return fg_diag_set(diag, FG_ERR_NOMEM, "forward: out of memory");
    f->m = m;
    f->pool = pool;
    f->isa = isa;
    f->max_tokens = max_tokens;
    fg_err e = fg_ds4_cache_layout(hp, geo->format, &f->cache, diag);
    if (e != FG_OK)
        goto fail;
    if (f->cache->page_bytes != geo->page_bytes || f->cache->seq_bytes != geo->seq_bytes) {
        e = fg_diag_set(diag, FG_ERR_INVALID_ARG, "KV geometry is not this deepseek4 model's");
        goto fail;
    }
    const fg_rope_params plain = {.n_dims = hp->n_rope, .base = hp->rope_base, .unit_magnitude = true};
    const fg_rope_params comp = {.n_dims = hp->n_rope, .base = hp->compress_rope_base,
                                 .yarn_factor = hp->yarn_factor, .yarn_orig_ctx = hp->yarn_orig_ctx,
                                 .beta_fast = hp->yarn_beta_fast, .beta_slow = hp->yarn_beta_slow,
                                 .unit_magnitude = true};
    if ((e = fg_rope_init_params(&f->rope_plain, &plain, diag)) ||
        (e = fg_rope_init_params(&f->rope_comp, &comp, diag)))
        goto fail;
    const size_t T = (size_t)max_tokens, E = (size_t)hp->n_embd, E4 = FG_DS4_HC * E, H = (size_t)hp->n_head;
    const size_t D = (size_t)hp->head_dim, Q = (size_t)hp->q_lora, Hi = (size_t)hp->idx_head,
                 Di = (size_t)hp->idx_dim;
    const size_t G = (size_t)hp->out_groups, R = (size_t)hp->out_lora, X = (size_t)hp->n_expert,
                 K = (size_t)hp->n_expert_used;
    const size_t Fw = (size_t)hp->n_ff_exp * (size_t)(hp->n_expert_shared > 1 ? hp->n_expert_shared : 1);
    f->max_rows = hp->n_ctx_train / FG_DS4_CSA + 1;
    const size_t score_n = (size_t)f->max_rows > X ? (size_t)f->max_rows : X;
    bool ok = true;
    f->x = alloc_f(T * E4, &ok);
    f->x1 = alloc_f(T * E4, &ok);
    f->xm = alloc_f(T * E4, &ok);
    f->flat = alloc_f(T * E4, &ok);
    f->mix = alloc_f(T * FG_DS4_HC_MIX, &ok);
    f->hcw = alloc_f(T * FG_DS4_HC_MIX, &ok);
    f->y = alloc_f(T * E, &ok);
    f->qa = alloc_f(T * Q, &ok);
    f->q = alloc_f(T * H * D, &ok);
    f->kv = alloc_f(T * D, &ok);
    f->ck = alloc_f(T * 2 * D, &ok);
    f->cg = alloc_f(T * 2 * D, &ok);
    f->ik = alloc_f(T * 2 * Di, &ok);
    f->ig = alloc_f(T * 2 * Di, &ok);
    f->iq = alloc_f(T * Hi * Di, &ok);
    f->iw = alloc_f(T * Hi, &ok);
    f->heads = alloc_f(T * H * D, &ok);
    f->grp = alloc_f(T * H * D / G, &ok);
    f->oa_g = alloc_f(T * R, &ok);
    f->oa = alloc_f(T * G * R, &ok);
    f->f = alloc_f(T * E, &ok);
    f->router = alloc_f(T * X, &ok);
    f->chosen = alloc_f(T * K, &ok);
    f->wts = alloc_f(T * K, &ok);
    f->tok_of = alloc_f(T * K, &ok);
    f->w_of = alloc_f(T * K, &ok);
    f->ein = alloc_f(T * K * E, &ok);
    f->eg = alloc_f(T * K * Fw, &ok);
    f->eu = alloc_f(T * K * Fw, &ok);
    f->ed = alloc_f(T * K * E, &ok);
    f->mtp_in = alloc_f(T * FG_DS4_HC * 2 * E, &ok);
    f->hin = alloc_f(T * E, &ok);
    f->tok_pos = alloc_f(T, &ok);
    f->tok_kv = malloc(T * sizeof *f->tok_kv);
    f->logit_dst = malloc(LOGIT_CHUNK * sizeof *f->logit_dst);
    f->logit_out = alloc_f((size_t)LOGIT_CHUNK * (size_t)hp->n_vocab, &ok);
    if (!f->tok_kv || !f->logit_dst)
        ok = false;
    f->ws = calloc((size_t)fg_pool_size(pool), sizeof *f->ws);
    if (f->ws)
        f->n_ws = fg_pool_size(pool);
    else
        ok = false;
    for (int i = 0; i < f->n_ws; i++) {
        attn_ws *w = &f->ws[i];
        w->keys = alloc_f((size_t)KEY_TILE * D, &ok);
        w->keys_t = alloc_f(D * KEY_TILE, &ok);
        w->acc = alloc_f(H * D, &ok);
        w->mh = alloc_f(H, &ok);
        w->lh = alloc_f(H, &ok);
        w->tile = alloc_f(H * KEY_TILE, &ok);
        w->rowtmp = alloc_f(f->cache->part_bytes * (FG_DS4_HCA / FG_KV_PAGE_TOKENS) + f->cache->row_bytes, &ok);
    }
    f->win_ld = hp->window - 1 + (int)T;
    f->win = alloc_f((size_t)f->win_ld * D, &ok);
    f->win_t = alloc_f((size_t)f->win_ld * D, &ok);
    f->hca_cap = hp->n_ctx_train / FG_DS4_HCA + 1 < HCA_CAP ? hp->n_ctx_train / FG_DS4_HCA + 1 : HCA_CAP;
    f->hca = alloc_f((size_t)f->hca_cap * D, &ok);
    f->hca_t = alloc_f((size_t)f->hca_cap * D, &ok);
    f->row = alloc_f(2 * (D > Di ? D : Di), &ok);
    /* a 128-ratio row is gathered as its page parts, which may pad past row_bytes */
    f->rowtmp = alloc_f(f->cache->part_bytes * (FG_DS4_HCA / FG_KV_PAGE_TOKENS) + f->cache->row_bytes, &ok);
    f->scores = alloc_f(score_n, &ok);
    /* every token's scores when they fit in SCORE_CAP, else groups of fewer (one at least) */
    f->score_cap = T * (size_t)f->max_rows;
    if (f->score_cap > SCORE_CAP)
        f->score_cap = SCORE_CAP > (size_t)f->max_rows ? SCORE_CAP : (size_t)f->max_rows;
    f->iscores = alloc_f(f->score_cap, &ok);
    /* keys, transposed, dots, then the pruned scoring's packed tile (pairs, block scales) */
    f->key_buf_n = 2 * (size_t)Di * IDX_TILE + (size_t)(Hi > 0 ? Hi : 1) * IDX_TILE + (size_t)Di / 2 * IDX_TILE +
                   (size_t)Di / 16 * IDX_TILE;
    f->key_buf = alloc_f((size_t)fg_pool_size(pool) * f->key_buf_n, &ok);
    const size_t ksel = (size_t)(hp->idx_top_k > 1 ? hp->idx_top_k : 1);
    f->tok_sel = alloc_f(T * ksel, &ok);
    f->tok_nsel = alloc_f(T, &ok);
    f->topk_tmp = alloc_f((size_t)fg_pool_size(pool) * (size_t)f->max_rows, &ok);
    f->pqp = alloc_f(T * (size_t)(Hi > 0 ? Hi : 1) * (size_t)(Di / 2 > 0 ? Di / 2 : 1), &ok);
    f->palpha = alloc_f(T * (size_t)(Hi > 0 ? Hi : 1), &ok);
    f->pab = alloc_f(2 * T, &ok);
    f->pstate = alloc_f(T / 4 + 1, &ok);
    f->pk1 = alloc_f((size_t)f->max_rows + IDX_TILE, &ok);
    f->pqt = alloc_f(T * (size_t)(Hi > 0 ? Hi : 1) * (size_t)(Di > 0 ? Di : 1), &ok);
    f->pmask = alloc_f(2 * (size_t)fg_pool_size(pool) * (size_t)(f->max_rows / 64 + 1), &ok);
    f->pbuf = alloc_f((size_t)fg_pool_size(pool) * 2 * (size_t)f->max_rows, &ok);
    f->counts = calloc(X, sizeof *f->counts);
    /* matmul scratch: the largest input width over every type that needs it */
    const int64_t widths[] = {(int64_t)E, (int64_t)E4, 2 * (int64_t)E, (int64_t)Q, (int64_t)(H * D / G),
                              (int64_t)(G * R), (int64_t)Fw};
    const int types[] = {FG_WTYPE_Q8_0, FG_WTYPE_MXFP4, FG_WTYPE_BF16};
    size_t mmb = 0;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            /* the MTP input is 4 rows per token, experts up to T*K rows */
            const size_t b = fg_matmul_scratch_bytes(types[k], widths[i], (int64_t)(T * FG_DS4_HC * K));
            mmb = b > mmb ? b : mmb;
        }
    if (mmb && posix_memalign(&f->mm_scratch, 64, mmb))
        f->mm_scratch = NULL;
    if (!ok || !f->counts || (mmb && !f->mm_scratch)) {
        e = fg_diag_set(diag, FG_ERR_NOMEM, "forward: out of memory for the scratch of %d tokens", max_tokens);
        goto fail;
    }
    if (hp->n_nextn && (e = draft_create(f, diag)) != FG_OK)
        goto fail;
    if ((e = pack_weights(f, diag)) != FG_OK)
        goto fail;
    *out = f;
    return FG_OK;
fail:
    fg_ds4_forward_destroy(f);
    return e;
}

void fg_ds4_forward_destroy(fg_ds4_forward_t *f)
{
    if (!f)
        return;
    void *bufs[] = {f->x, f->x1, f->xm, f->flat, f->mix, f->hcw, f->y, f->qa, f->q, f->kv, f->ck, f->cg,
                    f->ik, f->ig, f->iq, f->iw, f->heads, f->grp, f->oa_g, f->oa, f->f, f->router, f->chosen,
                    f->wts, f->tok_of, f->w_of, f->ein, f->eg, f->eu, f->ed, f->mtp_in, f->hin, f->row,
                    f->rowtmp, f->scores, f->key_buf, f->counts, f->mm_scratch,
                    f->cache, f->tok_pos, f->tok_kv, f->logit_dst, f->logit_out,
                    f->win, f->win_t, f->hca, f->hca_t, f->iscores, f->tok_sel, f->tok_nsel, f->topk_tmp,
                    f->pqp, f->palpha, f->pab, f->pstate, f->pk1, f->pqt, f->pmask, f->pbuf};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    for (int i = 0; i < f->n_ws; i++) {
        attn_ws *w = &f->ws[i];
        void *wb[] = {w->keys, w->keys_t, w->acc, w->mh, w->lh, w->tile, w->rowtmp};
        for (size_t k = 0; k < sizeof wb / sizeof wb[0]; k++)
            free(wb[k]);
    }
    free(f->ws);
    draft_destroy(f);
    pack_destroy(f);
    free(f);
}

void fg_ds4_forward_set_mtp_out(fg_ds4_forward_t *f, float *mtp) { f->mtp_out = mtp; }

void fg_ds4_forward_count_experts(fg_ds4_forward_t *f, _Atomic uint64_t *sink) { f->count_sink = sink; }

void fg_ds4_forward_set_ep(fg_ds4_forward_t *f, fg_moe_ep_t *ep) { f->ep = ep; }
