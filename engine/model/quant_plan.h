/* quant_plan.h: which type each tensor of a model gets when it is quantized
 * (flashgate-quantize), the way llama-quantize chooses (src/llama-quant.cpp):
 *
 *   1. Only weights are quantized: tensors with two or more dimensions whose
 *      name ends in "weight", not the norms, not the router (ffn_gate_inp),
 *      not deepseek4's token-id table, nor the small tensors llama.cpp keeps.
 *   2. An override (PATTERN=TYPE, the first whose regex matches the name)
 *      replaces the choice; otherwise the file type (a "mix" such as Q4_K_M)
 *      picks per tensor from its default type, by category and layer:
 *      output.weight (token_embd.weight when the model ties them) Q6_K;
 *      ffn_down of the layers that use_more_bits() selects (the first and
 *      last eighth, and every third between) one step up (Q4_K_M, Q5_K_M:
 *      Q6_K); attn_v-like tensors (attn_v, attn_qkv, attn_kv_b) likewise;
 *      the 8-expert rules for attn_output, attn_v and attn_k; and so on for
 *      each mix. DeepSeek's split attn_k_b/attn_v_b are in no category (as
 *      in llama.cpp) and take the default type.
 *   3. A row (ne[0]) that is not a whole number of the chosen type's blocks
 *      falls back: Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K ->
 *      Q8_0; IQ4_XS -> IQ4_NL; F16 if even that does not fit.
 *
 * With an importance matrix (fg_quant_plan_set_imatrix) llama-quantize's
 * imatrix rules apply: IQ4_NL/IQ4_XS keep the first eighth of ffn_down in
 * their type (no Q5_K), Q4_0/Q5_0 put it in Q4_1/Q5_1. Q2_K_S (Q2_K, attn_v
 * Q4_K where n_gqa >= 4, the first eighth of ffn_down Q4_K) requires one.
 *
 * Types and file types are ggml's ids and llama.cpp's LLAMA_FTYPE numbers.
 * Mixes whose rules need types this build cannot write (the IQ1 and
 * ternary families) are refused by name.
 *
 * Thread safety: a plan is used by one thread.
 */
#ifndef FG_QUANT_PLAN_H
#define FG_QUANT_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/model/gguf.h"

typedef struct fg_quant_plan fg_quant_plan_t;

/* A plan for file type `ftype` (case-insensitive: "q4_k_m", "Q8_0", "f16",
 * "mxfp4_moe", ...). Errors: FG_ERR_INVALID_ARG for a name that is no file
 * type, FG_ERR_UNSUPPORTED for one this build cannot write; both with a diag
 * that lists the names it can. */
fg_err fg_quant_plan_create(const char *ftype, fg_quant_plan_t **out, fg_diag *diag);
void fg_quant_plan_destroy(fg_quant_plan_t *p);

/* Adds an override "PATTERN=TYPE": PATTERN a POSIX extended regular
 * expression searched in each tensor name, TYPE a type name ("q6_k"), tried
 * in the order added. Errors (FG_ERR_INVALID_ARG, diag naming the argument):
 * no '=', an empty pattern, a pattern that does not compile, a type that is
 * unknown or not written by this build. */
fg_err fg_quant_plan_add_override(fg_quant_plan_t *p, const char *arg, fg_diag *diag);

/* Reads what the rules depend on from the model: the block count, expert
 * count and heads per KV head of general.architecture, whether output.weight
 * exists, and how many attn_v-like tensors there are. Call once, before
 * choosing. Errors: FG_ERR_MODEL_HPARAM (diag names the key) when the block
 * count is missing. */
fg_err fg_quant_plan_begin(fg_quant_plan_t *p, const fg_gguf_t *g, fg_diag *diag);

typedef struct fg_quant_choice {
    uint32_t type;      /* the type to write */
    uint32_t wanted;    /* the type chosen before the row fallback (== type without one) */
    bool quantizable;   /* false: a tensor kept as it is (norms, router, 1-D, ...) */
    bool manual;        /* an override chose it */
    bool fallback;      /* wanted's blocks do not divide the row */
} fg_quant_choice;

/* The type of tensor t, called once per tensor in the order llama-quantize
 * visits them (flashgate-quantize's llama_order), since the attn_v layer
 * counter advances per call as llama-quantize's does. Errors: FG_ERR_MODEL_SHAPE (diag
 * names the tensor) when a fallback type is needed and none is defined, or
 * the layer in a tensor name is outside the block count. */
fg_err fg_quant_plan_choose(fg_quant_plan_t *p, const fg_gguf_tensor *t, fg_quant_choice *out, fg_diag *diag);

/* Whether the mix cannot be made without an importance matrix (Q2_K_S, as
 * llama-quantize refuses it). */
bool fg_quant_plan_requires_imatrix(const fg_quant_plan_t *p);

/* Tells the plan whether an importance matrix is given; before choosing. */
void fg_quant_plan_set_imatrix(fg_quant_plan_t *p, bool has_imatrix);

/* Whether tensor `name` quantized to `type` needs importance weights, as
 * llama-quantize refuses to write it without (tensor_requires_imatrix): the
 * lattice types but IQ3_S (IQ3_XXS and IQ2_* are written here), and Q2_K in a
 * Q2_K_S file; never token_embd or output. */
bool fg_quant_plan_tensor_needs_imatrix(const fg_quant_plan_t *p, const char *name, uint32_t type);

/* llama.cpp's LLAMA_FTYPE number of the plan (general.file_type). */
uint32_t fg_quant_plan_file_type(const fg_quant_plan_t *p);

/* A type id from its name (case-insensitive), or -1. */
int fg_quant_type_from_name(const char *name);

#endif
