/* modelgen.h: writes deterministic random-weight GGUF files of architecture
 * `deepseek2` (MLA attention with split attn_k_b/attn_v_b, DeepSeek MoE), with
 * llama.cpp's key names, tensor names, shapes and type conventions, so that
 * both flashgate and llama.cpp can load them.
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
 * normal (unit variance, tails cut at +-3.46 sigma).
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

/* Gating function ids as stored in deepseek2.expert_gating_func. */
#define FG_MODELGEN_GATING_SOFTMAX 1u
#define FG_MODELGEN_GATING_SIGMOID 2u

typedef struct fg_modelgen_spec {
    char name[64];                 /* general.name */
    /* sizes */
    uint32_t n_vocab;              /* all tokens: 256 bytes + merges + BOS + EOS */
    uint32_t n_ctx;                /* context_length (tokens) */
    uint32_t n_embd;               /* d */
    uint32_t n_layer;              /* block_count */
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
    uint32_t weight_type;          /* ggml id for matrices: 0 F32, 1 F16, 30 BF16, 8 Q8_0 */
    uint64_t seed;
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
 * "flash-mini" (~380M total / ~60M active, Q8_0, for benchmarks) or
 * "english" (the geometry of the trained default model, models/flash-english.gguf;
 * F32 here, docs/english-model.md).
 * Errors: FG_ERR_INVALID_ARG (NULL or unknown name). */
fg_err fg_modelgen_preset(const char *name, fg_modelgen_spec *out);

/* Checks a spec for consistency and for limits (e.g. dimensions up to 2^20,
 * groups that divide the experts, top-k reachable within the used groups).
 * Errors: FG_ERR_INVALID_ARG naming the field. */
fg_err fg_modelgen_validate(const fg_modelgen_spec *spec, fg_diag *diag);

/* Parameter counts of the file a spec describes (every tensor element).
 * active: what one token uses, i.e. total minus the routed experts it does not
 * visit (token_embd and output included). Undefined for an invalid spec. */
void fg_modelgen_param_counts(const fg_modelgen_spec *spec, uint64_t *total, uint64_t *active);

/* Writes the GGUF to path (through "<path>.tmp" and a rename: a failed write
 * leaves no partial file at path). Matrices whose ne[0] is not a multiple of 32
 * fall back from Q8_0 to F16, as llama.cpp's converter does.
 * Errors: FG_ERR_INVALID_ARG (bad spec; the BPE text cannot reach n_vocab),
 * FG_ERR_IO, FG_ERR_NOMEM. */
fg_err fg_modelgen_write(const fg_modelgen_spec *spec, const char *path, fg_diag *diag);

#endif
