/* modelgen.h: writes deterministic random-weight GGUF files of architecture
 * `deepseek2` (MLA attention with split attn_k_b/attn_v_b, DeepSeek MoE) or
 * `deepseek4` (DeepSeek V4: hyper-connections, compressed sparse attention,
 * hash-routed MoE, an MTP block), with llama.cpp's key names, tensor names,
 * shapes and type conventions, so that both flashgate and llama.cpp can load
 * them. deepseek2 files may carry DeepSeek-V3's MTP block as llama.cpp's
 * converters store it (nextn_predict_layers = 1, block blk.N with N = the
 * trunk's layer count: a whole MoE layer plus nextn.eh_proj {2d, d},
 * nextn.enorm, nextn.hnorm and nextn.shared_head_norm; the embedding and head
 * are the trunk's). One generator: both architectures share the vocabulary, the random
 * numbers and the tensor writer; only the key and tensor lists differ.
 *
 * A spec holds every hyperparameter and option; presets fill one in. The same
 * spec (seed included) always produces a byte-identical file: weights come from
 * a private counter-based generator seeded per tensor (seed and tensor name),
 * with integer-only arithmetic up to one final double multiply, so the values
 * do not depend on libm, on the weight type or on the order of generation.
 *
 * Initialisation (keeps activations O(1) and greedy argmax margins clear):
 * matrices N(0, 1/sqrt(n_in)) with n_in = ggml ne[0]; token_embd N(0, 1);
 * output N(0, 3/sqrt(d)); norm weights 1 + N(0, 0.1); exp_probs_b N(0, 0.05);
 * router N(0, 1/sqrt(d)). "N" is a 4-term Irwin-Hall approximation of the
 * normal (unit variance, tails cut at +-3.46 sigma). deepseek4 adds (as
 * tests/reference/make_v4_fixture.py): hc_*_fn N(0, 0.5/sqrt(4d)), hc_*_base
 * N(0, 0.5), hc_*_scale N(0.75, 0.15), output_hc_scale 0.7, attn_sinks N(0, 1),
 * compressor APE N(0, 0.5), exp_probs_b N(0, 0.1); tid2eid lists, per token,
 * K distinct experts drawn by a partial Fisher-Yates shuffle (integers only).
 *
 * Vocabulary: byte-level BPE trained on a built-in text (engine/tokenizer/bpe_train.h):
 * tokens 0..255 are the bytes, then the merges, then BOS and EOS as control
 * tokens (DeepSeek's "<｜begin▁of▁sentence｜>" / "<｜end▁of▁sentence｜>").
 *
 * Memory: the data is streamed one tensor at a time (the largest buffer is one
 * encoded tensor, e.g. 18 MB for flash-mini's Q8_0 expert stacks).
 * Thread safety: all functions are reentrant; one write per output path.
 */
#ifndef FG_MODELGEN_H
#define FG_MODELGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

/* Gating function ids as stored in <arch>.expert_gating_func. */
#define FG_MODELGEN_GATING_SOFTMAX 1u
#define FG_MODELGEN_GATING_SIGMOID 2u
#define FG_MODELGEN_GATING_SQRT_SOFTPLUS 4u /* deepseek4's only one */

typedef enum fg_modelgen_arch {
    FG_MODELGEN_DEEPSEEK2 = 0, /* the default of a zeroed spec */
    FG_MODELGEN_DEEPSEEK4 = 1,
} fg_modelgen_arch;

#define FG_MODELGEN_V4_MAX_LAYERS 128u

/* What only deepseek4 has (zero for deepseek2). Its n_layer counts the trunk
 * layers; block_count = n_layer + n_nextn, the MTP block last with ratio 0. */
typedef struct fg_modelgen_v4 {
    uint32_t head_dim;              /* D: key_length = value_length (one KV head, K = V) */
    uint32_t window;                /* attention.sliding_window (tokens) */
    uint32_t ratios[FG_MODELGEN_V4_MAX_LAYERS]; /* compress ratio per trunk layer: 0, 4 (CSA) or 128 (HCA) */
    uint32_t n_indexer_head;        /* Hi */
    uint32_t indexer_dim;           /* Di */
    uint32_t indexer_top_k;         /* compressed rows a CSA query keeps */
    uint32_t n_out_group;           /* G: output LoRA groups (divides n_head) */
    uint32_t out_lora_rank;         /* R */
    uint32_t n_hash_layer;          /* hash_layer_count: the first ones route by ffn_gate_tid2eid */
    uint32_t n_nextn;               /* MTP blocks after the trunk: 0 or 1 */
    uint32_t hc_sinkhorn_iters;     /* hyper_connection.sinkhorn_iterations (hc count is 4) */
    float hc_eps;                   /* hyper_connection.epsilon */
    float compress_rope_base;       /* attention.compress_rope_freq_base */
    float swiglu_clamp;             /* swiglu_clamp_exp, written once per block */
    float yarn_beta_fast, yarn_beta_slow;
    uint32_t embd_type;             /* token_embd, output, ffn_gate_inp, indexer.proj: F32, F16, BF16, Q8_0 */
    uint32_t expert_type;           /* ffn_*_exps: the same or MXFP4 */
} fg_modelgen_v4;

/* One spec for both architectures; fields a deepseek4 file has no key for
 * (n_layer_dense_lead, n_ff, kv_lora_rank, nope_dim, v_dim, yarn_log_mul,
 * expert groups, tied_embeddings) must be 0 there. */
typedef struct fg_modelgen_spec {
    fg_modelgen_arch arch;
    char name[64];                 /* general.name */
    /* sizes */
    uint32_t n_vocab;              /* all tokens: 256 bytes + merges + BOS + EOS (+ chat markers) */
    bool chat_markers;             /* after EOS, DeepSeek-V3's chat and tool markers (<｜User｜>,
                                      <｜tool▁calls▁begin｜>, ...) as control tokens; false: none,
                                      the file is as before the option existed */
    bool v4_chat_markers;          /* after EOS, DeepSeek-V4's chat markers (<｜User｜>, <｜Assistant｜>,
                                      <｜latest_reminder｜>, <think>, </think>, ｜DSML｜); not with chat_markers */
    uint32_t n_ctx;                /* context_length (tokens) */
    uint32_t n_embd;               /* d */
    uint32_t n_layer;              /* block_count (deepseek2: the trunk's blocks, block_count - n_nextn) */
    uint32_t n_nextn;              /* deepseek2: nextn_predict_layers, the MTP block after the trunk (0 or 1;
                                      0 writes no key and the file is as before the option existed; deepseek4
                                      has v4.n_nextn) */
    uint32_t n_layer_dense_lead;   /* leading_dense_block_count (<= n_layer) */
    uint32_t n_ff;                 /* feed_forward_length: dense SwiGLU width */
    /* MLA attention */
    uint32_t n_head;               /* H */
    uint32_t q_lora_rank;          /* 0: plain attn_q ("lite" layout) */
    uint32_t kv_lora_rank;         /* latent width */
    uint32_t rope_dim;             /* RoPE dims per head (even) */
    uint32_t nope_dim;             /* non-RoPE query/key dims per head */
    uint32_t v_dim;                /* value dims per head */
    float rope_freq_base;
    float rms_eps;
    /* YaRN rope scaling: yarn_factor 0 writes no rope.scaling.* keys */
    float yarn_factor;
    uint32_t yarn_orig_ctx;        /* rope.scaling.original_context_length */
    float yarn_log_mul;            /* rope.scaling.yarn_log_multiplier (DeepSeek-V2: 0.1) */
    /* MoE */
    uint32_t n_expert;             /* routed experts E */
    uint32_t n_expert_used;        /* top-k */
    uint32_t n_expert_shared;      /* shared experts (fused into one branch of width n_ff_exp * this) */
    uint32_t n_ff_exp;             /* expert_feed_forward_length */
    uint32_t n_expert_groups;      /* 0: no group-limited routing (keys omitted) */
    uint32_t n_expert_groups_used;
    uint32_t gating;               /* FG_MODELGEN_GATING_*; sigmoid also writes exp_probs_b */
    bool expert_weights_norm;
    float expert_weights_scale;
    /* file */
    bool tied_embeddings;          /* omit output.weight */
    uint32_t weight_type;          /* ggml id for matrices: 0 F32, 1 F16, 30 BF16, 8 Q8_0
                                    * (deepseek4: the dense ones; v4 below has the rest) */
    uint64_t seed;
    fg_modelgen_v4 v4;             /* deepseek4 only */
    /* sources (NULL: the built-in BPE text; random weights from seed) */
    const char *bpe_text;          /* text to train the BPE merges on, bpe_text_len bytes */
    size_t bpe_text_len;
    const char *weights_path;      /* trained weights, an FGW1 file (below), instead of random ones */
    const char *source_path;       /* an F32 GGUF of the same spec (a trained model): its vocabulary
                                    * and weights, re-encoded to weight_type (bpe_text is unused) */
} fg_modelgen_spec;

/* FGW1 weights file (little-endian; what engine/tools/train/ writes): magic
 * "FGW1", u32 n_tensors, then per tensor in the file's tensor order: u32
 * name_len, the name (no NUL), u64 n_elems, f32[n_elems] in ggml order (ne[0]
 * fastest). Names, counts and order must match the spec's tensors exactly;
 * the values are encoded to each tensor's type as random ones would be. */

/* Fills *out with a preset: "tiny" (~1.8M params, F32, for tests),
 * "flash-mini" (~380M total / ~60M active, Q8_0, for benchmarks),
 * "english" (the geometry of the trained default model, models/flash-english.gguf;
 * F32 here, docs/english-model.md), "v4-tiny" (deepseek4, ~0.5M, F32, for
 * tests) or "v4-mini" (deepseek4, ~430M total / ~88M active, MXFP4 experts,
 * Q8_0 and BF16 as llama.cpp's converter writes them; docs/engine.md,
 * "Generated models").
 * Errors: FG_ERR_INVALID_ARG (NULL or unknown name). */
fg_err fg_modelgen_preset(const char *name, fg_modelgen_spec *out);

/* Checks a spec for consistency and for limits (e.g. dimensions up to 2^20,
 * groups that divide the experts, top-k reachable within the used groups;
 * deepseek4: ratios in {0, 4, 128}, output groups that divide the heads,
 * RoPE dims within the head and indexer dims, hash layers within the trunk).
 * Errors: FG_ERR_INVALID_ARG naming the field. */
fg_err fg_modelgen_validate(const fg_modelgen_spec *spec, fg_diag *diag);

/* Parameter counts of the file a spec describes (every tensor element).
 * active: what one token uses, i.e. total minus the routed experts it does not
 * visit (token_embd and output included). Undefined for an invalid spec. */
void fg_modelgen_param_counts(const fg_modelgen_spec *spec, uint64_t *total, uint64_t *active);

/* Writes the GGUF to path (through "<path>.tmp" and a rename: a failed write
 * leaves no partial file at path). Matrices whose ne[0] is not a multiple of 32
 * fall back from Q8_0 (or MXFP4) to F16, as llama.cpp's converter does for Q8_0.
 * MXFP4 bytes are those of kernels/cpu's fg_quantize_row_mxfp4 (ggml's, whose
 * block exponent comes from log2f: the one libm call on the data path).
 * Errors: FG_ERR_INVALID_ARG (bad spec; the BPE text cannot reach n_vocab),
 * FG_ERR_IO, FG_ERR_NOMEM. */
fg_err fg_modelgen_write(const fg_modelgen_spec *spec, const char *path, fg_diag *diag);

#endif
