/* model.h: a deepseek2 model bound to the tensors of an open GGUF file, and
 * the deepseek2 architecture (engine/model/arch.h) that serves it to the
 * engine.
 *
 * fg_model_load() reads the hyperparameters, checks every required tensor's
 * presence, type and shape against them, and keeps pointers into the GGUF
 * mapping (no copy of the weights). Errors name the key or tensor at fault.
 *
 * The MTP block: with nextn_predict_layers = 1 the last of block_count's
 * blocks is the MTP block (a whole attention + FFN layer plus the nextn.*
 * tensors; every one checked), and the trunk is the blocks before it. A file
 * that declares the block but holds none of its tensors (llama.cpp's
 * trunk-only export) loads without it; a partial block is an error.
 * base.n_layer counts the trunk, base.n_layer_run the trunk and the MTP block.
 *
 * Owns: nothing but the layer table; the fg_gguf_t must outlive the model.
 * Thread safety: immutable after load; read from any thread.
 */
#ifndef FG_MODEL_H
#define FG_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/kv/kv_store.h"
#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "engine/model/weight.h"

typedef enum fg_gating { FG_GATING_SOFTMAX = 1, FG_GATING_SIGMOID = 2 } fg_gating;

typedef struct fg_hparams {
    int n_vocab;
    int n_ctx_train;      /* context_length */
    int n_embd;           /* d */
    int n_layer;          /* trunk layers: block_count - n_nextn */
    int n_nextn;          /* nextn_predict_layers: MTP blocks after the trunk (0 or 1) */
    int n_ff;             /* dense FFN width */
    int n_head;           /* H */
    int q_lora;           /* 0: plain attn_q */
    int kv_lora;          /* latent width */
    int n_rope;           /* RoPE dims of q and k */
    int n_nope;           /* key_length_mla - n_rope */
    int n_v;              /* value_length_mla */
    float rms_eps;
    float rope_base;
    /* YaRN (rope.scaling.type == "yarn"); yarn_factor 0 when absent */
    float yarn_factor;
    int yarn_orig_ctx;
    float yarn_log_mul;
    /* MoE */
    int n_expert;
    int n_expert_used;
    int n_expert_shared;
    int n_ff_exp;
    int n_dense_lead;     /* leading_dense_block_count */
    float expert_weights_scale;
    bool expert_weights_norm;
    fg_gating gating;
    int n_group;          /* 1: no group limit */
    int n_group_used;
} fg_hparams;

typedef struct fg_layer {
    const float *attn_norm;        /* [d] */
    fg_weight q_a;                 /* d -> q_lora (absent when q_lora == 0) */
    const float *q_a_norm;         /* [q_lora] */
    fg_weight q_b;                 /* q_lora -> H*(nope+rope), or attn_q: d -> H*(nope+rope) */
    fg_weight kv_a;                /* d -> kv_lora + rope */
    const float *kv_a_norm;        /* [kv_lora] */
    fg_weight k_b;                 /* per head: nope -> kv_lora (H matrices) */
    fg_weight v_b;                 /* per head: kv_lora -> v (H matrices) */
    fg_weight attn_out;            /* H*v -> d */
    const float *ffn_norm;         /* [d] */
    bool is_moe;
    /* dense */
    fg_weight ffn_gate, ffn_up;    /* d -> ff */
    fg_weight ffn_down;            /* ff -> d */
    /* MoE */
    fg_weight router;              /* d -> E (F32) */
    const float *exp_probs_b;      /* [E] or NULL */
    fg_weight gate_exps, up_exps;  /* E matrices d -> f */
    fg_weight down_exps;           /* E matrices f -> d */
    fg_weight gate_shexp, up_shexp;/* d -> f*n_shared (absent when n_shared == 0) */
    fg_weight down_shexp;
} fg_layer;

/* The MTP ("nextn") block, llama.cpp's blk.N.nextn.* with N = block_count - 1:
 * a full layer (layers[n_layer]) fed with eh_proj([enorm(embed(t)); hnorm(h)]),
 * its output through head_norm and head (forward.h). */
typedef struct fg_mtp {
    fg_weight eh_proj;             /* 2d -> d: input [enorm(embed) | hnorm(h)] */
    const float *enorm, *hnorm;    /* [d] */
    const float *head_norm;        /* [d] shared_head_norm, or output_norm when the file has none */
    fg_weight head;                /* d -> vocab: shared_head_head, or the model's output */
    fg_weight embd;                /* rows: token -> d: embed_tokens, or the model's tok_embd */
} fg_mtp;

typedef struct fg_model {
    fg_arch_model base;            /* first: what the engine reads (vocabulary, weight bytes, identity) */
    fg_hparams hp;
    fg_weight tok_embd;            /* rows: token -> d (n_out = vocab) */
    const float *output_norm;      /* [d] */
    fg_weight output;              /* d -> vocab; equals tok_embd when tied */
    fg_layer *layers;              /* [n_layer + n_nextn]; the MTP block's layer last */
    fg_mtp mtp;                    /* bound when hp.n_nextn == 1 */
} fg_model;

/* Errors: FG_ERR_MODEL_ARCH, FG_ERR_MODEL_HPARAM, FG_ERR_MODEL_TENSOR,
 * FG_ERR_MODEL_SHAPE, FG_ERR_MODEL_TYPE, FG_ERR_NOMEM. */
fg_err fg_model_load(const fg_gguf_t *g, fg_model **out, fg_diag *diag);
void fg_model_free(fg_model *m);

/* The architecture (engine/model/deepseek2/deepseek2.c): fg_model_load,
 * fg_kv_geometry_init and engine/model/deepseek2/forward.h behind arch.h.
 * Its model's base.weight_bytes_active counts attention, dense, shared,
 * top-k experts and the head. */
extern const fg_arch fg_arch_deepseek2;
/* The same architecture with forward_draft: base.arch of a model with the MTP block. */
extern const fg_arch fg_arch_deepseek2_mtp;

/* The deepseek2 model behind m, or NULL when m is another architecture's
 * (for the parts that read deepseek2's layers: the CUDA backend, expert
 * parallelism). */
const fg_model *fg_deepseek2_of(const fg_arch_model *m);

/* The deepseek2 cache: per token and layer one row of the latent (kv_lora)
 * and the RoPE key (n_rope) in the chosen format, for the trunk's layers and
 * then the MTP block's (n_layer + n_nextn rows a token); nothing per sequence
 * besides pages. Errors: FG_ERR_KV_FORMAT when a width does not fit the
 * format (FP4 needs multiples of 16). */
fg_err fg_kv_geometry_init(fg_kv_geometry *geo, const fg_hparams *hp, fg_kv_format format, fg_diag *diag);

#endif
