/* model.h: a deepseek4 (DeepSeek V4) model bound to the tensors of an open
 * GGUF file (names, shapes and types as llama.cpp's loader has them; see
 * /work/shared/GGUF-DEEPSEEK4.md and docs/engine.md "The deepseek4 module"),
 * and the deepseek4 architecture (engine/model/arch.h) that serves it.
 *
 * fg_ds4_load() reads every key, checks every tensor's presence, type and
 * shape against them and keeps pointers into the mapping (no copy). Errors
 * name the key or tensor at fault. block_count counts the MTP block when the
 * file has one (blk.L-1.nextn.eh_proj), as in llama.cpp.
 *
 * Owns: the layer table and the hash layers' checked tid2eid pointers; the
 * fg_gguf_t must outlive the model.
 * Thread safety: immutable after load; read from any thread.
 */
#ifndef FG_DS4_MODEL_H
#define FG_DS4_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "engine/model/weight.h"

#define FG_DS4_HC 4       /* hyper-connection streams (the only count llama.cpp builds) */
#define FG_DS4_HC_MIX 24  /* (2 + hc) * hc mixing numbers: pre[4], post[4], comb[4][4] */
#define FG_DS4_CSA 4      /* compress ratio of the overlapping compressor with the indexer */
#define FG_DS4_HCA 128    /* compress ratio of the heavily compressed layers */

typedef struct fg_ds4_hparams {
    int n_vocab;           /* V: token_embd rows */
    int n_ctx_train;
    int n_embd;            /* E */
    int n_layer;           /* trunk layers (block_count minus the MTP block) */
    int n_layer_all;       /* block_count */
    int n_nextn;           /* MTP blocks (0 or 1) */
    int n_head;            /* H */
    int head_dim;          /* D: key_length = value_length; K = V, one shared head */
    int n_rope;            /* rd: RoPE on the last rd dims of a head */
    int q_lora;            /* Q */
    int window;            /* sliding_window */
    int n_expert;          /* X */
    int n_expert_used;     /* K */
    int n_expert_shared;
    int n_ff_exp;          /* F */
    float expert_weights_scale;  /* 1 when the file says 0 (llama.cpp: unscaled) */
    bool expert_weights_norm;
    int idx_head;          /* Hi */
    int idx_dim;           /* Di */
    int idx_top_k;
    int out_groups;        /* G */
    int out_lora;          /* R */
    int hc_iters;          /* Sinkhorn iterations */
    float hc_eps;
    int n_hash;            /* hash-routed layers 0 .. n_hash-1 */
    float rms_eps;
    float rope_base;       /* ratio-0 layers, no YaRN */
    float compress_rope_base; /* compressed layers and the indexer, with YaRN */
    float yarn_factor;     /* 0: no YaRN */
    int yarn_orig_ctx;
    float yarn_beta_fast, yarn_beta_slow;
    int *ratio;            /* [n_layer_all]: 0, 4 or 128 */
    float *clamp_exp;      /* [n_layer_all] SwiGLU clamps of the routed experts (0: none) */
    float *clamp_shexp;    /* [n_layer_all] of the shared expert */
} fg_ds4_hparams;

typedef struct fg_ds4_hc {
    fg_weight fn;          /* 4E -> n_mix (F32) */
    const float *base;     /* [n_mix] */
    const float *scale;    /* [3], or [1] for the head */
} fg_ds4_hc;

typedef struct fg_ds4_compressor {
    fg_weight kv, gate;    /* E -> c * width (c = 2 for ratio 4, else 1) */
    const float *ape;      /* [ratio][c * width], row pos mod ratio */
    const float *norm;     /* [width] */
} fg_ds4_compressor;

typedef struct fg_ds4_layer {
    int ratio;
    fg_ds4_hc hc_attn, hc_ffn;   /* n_mix 24 */
    const float *attn_norm;      /* [E] */
    const float *sinks;          /* [H] */
    fg_weight q_a;               /* E -> Q */
    const float *q_a_norm;       /* [Q] */
    fg_weight q_b;               /* Q -> H*D */
    fg_weight kv;                /* E -> D */
    const float *kv_norm;        /* [D] */
    fg_weight out_a;             /* G matrices H*D/G -> R, stored as one {H*D/G, R*G} */
    fg_weight out_b;             /* G*R -> E */
    fg_ds4_compressor comp;      /* ratio != 0: width D */
    fg_weight idx_proj;          /* ratio 4: E -> Hi */
    fg_weight idx_q_b;           /* ratio 4: Q -> Hi*Di */
    fg_ds4_compressor idx_comp;  /* ratio 4: width Di */
    const float *ffn_norm;       /* [E] */
    fg_weight router;            /* E -> X */
    const int32_t *tid2eid;      /* hash layers: [V][K] expert ids, each < X (checked at load) */
    const float *exp_probs_b;    /* other layers: [X] selection bias */
    fg_weight gate_exps, up_exps;/* X matrices E -> F */
    fg_weight down_exps;         /* X matrices F -> E */
    fg_weight gate_shexp, up_shexp; /* E -> F*shared */
    fg_weight down_shexp;        /* F*shared -> E */
    /* the MTP block only */
    fg_weight eh_proj;           /* 2E -> E */
    const float *enorm, *hnorm;  /* [E] */
} fg_ds4_layer;

typedef struct fg_ds4_model {
    fg_arch_model base;          /* first: what the engine reads */
    fg_ds4_hparams hp;
    fg_weight tok_embd;          /* token -> E (n_out = V) */
    const float *output_norm;    /* [E] */
    fg_weight output;            /* E -> V */
    fg_ds4_hc hc_out;            /* n_mix 4 */
    fg_ds4_layer *layers;        /* [n_layer_all]; the MTP block last */
    /* the MTP block's own head/embedding when the file has them, else the globals */
    const float *mtp_norm;
    fg_weight mtp_output;
    fg_weight mtp_embd;
} fg_ds4_model;

/* Errors: FG_ERR_MODEL_ARCH, FG_ERR_MODEL_HPARAM, FG_ERR_MODEL_TENSOR,
 * FG_ERR_MODEL_SHAPE, FG_ERR_MODEL_TYPE, FG_ERR_NOMEM. */
fg_err fg_ds4_load(const fg_gguf_t *g, fg_ds4_model **out, fg_diag *diag);
void fg_ds4_free(fg_ds4_model *m);

/* The architecture (engine/model/deepseek4/deepseek4.c). */
extern const fg_arch fg_arch_deepseek4;

/* The deepseek4 model behind m, or NULL for another architecture's. */
const fg_ds4_model *fg_deepseek4_of(const fg_arch_model *m);

#endif
