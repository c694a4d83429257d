/* modelgen_plan.h: what the generator's two architectures share, private to
 * modelgen.c (deepseek2, presets, random numbers, writing, vocabulary) and
 * modelgen_v4.c (deepseek4's presets, checks, keys and tensor list).
 *
 * A tensor list is a visit function that hands every tensor of the file, in
 * file order, to a callback as a fg_modelgen_tensor (name, ggml shape, type,
 * initialiser). modelgen.c runs the same visit to declare the tensors, to
 * write their data and to count parameters, so the three never disagree.
 */
#ifndef FG_MODELGEN_PLAN_H
#define FG_MODELGEN_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/modelgen.h"

typedef enum fg_modelgen_init {
    FG_MODELGEN_INIT_NORMAL,     /* value = mean + sigma * N(0, 1) */
    FG_MODELGEN_INIT_EXPERT_IDS, /* I32 rows of ne[0] distinct ids in [0, id_range) */
} fg_modelgen_init;

typedef struct fg_modelgen_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[3];          /* ggml order; unused dims are 1 */
    uint32_t type;          /* ggml type id */
    fg_modelgen_init init;
    double mean, sigma;     /* FG_MODELGEN_INIT_NORMAL */
    uint32_t id_range;      /* FG_MODELGEN_INIT_EXPERT_IDS: the expert count */
    bool routed;            /* ne[2] indexes the routed experts */
} fg_modelgen_tensor;

typedef void (*fg_modelgen_visit_fn)(void *ctx, const fg_modelgen_tensor *t);

/* Hands one tensor to fn. */
void fg_modelgen_emit(fg_modelgen_visit_fn fn, void *ctx, const char *name, uint32_t n_dims, int64_t ne0,
                      int64_t ne1, int64_t ne2, uint32_t type, double mean, double sigma, bool routed);
/* A norm weight {n}: F32, 1 + N(0, 0.1). */
void fg_modelgen_emit_norm(fg_modelgen_visit_fn fn, void *ctx, const char *name, int64_t n);
/* The type a matrix of rows ne0 is stored in: a 32-element block type (Q8_0,
 * MXFP4) whose rows do not fill whole blocks falls back to F16. */
uint32_t fg_modelgen_block_type(uint32_t type, int64_t ne0);
/* One spec field's range check for fg_modelgen_check_dims: 1..max. */
typedef struct fg_modelgen_dim {
    const char *field;
    uint32_t v, max;
} fg_modelgen_dim;

/* FG_ERR_INVALID_ARG naming the first of n fields outside 1..max, else FG_OK. */
fg_err fg_modelgen_check_dims(const fg_modelgen_dim *dims, size_t n, fg_diag *diag);

/* F32, F16, BF16 or Q8_0: the types the generator stores a matrix in. */
bool fg_modelgen_matrix_type(uint32_t type);

/* Finite and > 0. */
bool fg_modelgen_positive(float v);

/* llama.cpp's general.file_type (LLAMA_FTYPE_*) for a matrix type. */
uint32_t fg_modelgen_file_type(uint32_t weight_type);

/* ---- deepseek4 (modelgen_v4.c) ---- */

/* Fills *out for "v4-tiny" or "v4-mini"; false for another name. */
bool fg_modelgen_v4_preset(const char *name, fg_modelgen_spec *out);
/* fg_modelgen_validate for a deepseek4 spec. */
fg_err fg_modelgen_v4_validate(const fg_modelgen_spec *s, fg_diag *diag);
/* Every deepseek4 tensor in file order, shapes as llama.cpp's
 * llama_model_deepseek4::load_arch_tensors creates them. */
void fg_modelgen_v4_visit(const fg_modelgen_spec *s, fg_modelgen_visit_fn fn, void *ctx);
/* The general.* and deepseek4.* keys (the vocabulary follows, from
 * modelgen.c); *err_key names the key that failed. Errors: FG_ERR_NOMEM. */
fg_err fg_modelgen_v4_add_keys(fg_gguf_writer_t *w, const fg_modelgen_spec *s, const char **err_key);

#endif
