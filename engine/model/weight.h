/* weight.h: weight matrices bound to a GGUF's tensors, and the binding
 * helpers every architecture's loader uses (engine/model/<arch>/model.c):
 * hyperparameter keys read under the architecture's prefix with range checks,
 * tensors found by name with their shape and type checked, errors naming the
 * key or tensor at fault (FG_ERR_MODEL_HPARAM, _TENSOR, _SHAPE, _TYPE).
 *
 * Owns nothing: a bound weight points into the GGUF mapping, which must
 * outlive it (a packed copy, fg_weight_pack_q8_p16, is its caller's). Pure functions; safe from any thread.
 */
#ifndef FG_WEIGHT_H
#define FG_WEIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/model/gguf.h"

/* A weight matrix (or a stack of expert matrices) in row-major form:
 * n_mat matrices of [n_out][n_in], each mat_bytes apart. */
typedef struct fg_weight {
    const void *data;
    int type;           /* ggml type id: one fg_ggml_type_computable says the products read */
    int64_t n_in;       /* ggml ne[0] */
    int64_t n_out;      /* ggml ne[1] */
    int64_t n_mat;      /* ggml ne[2] (experts or heads), 1 for 2-D tensors */
    size_t row_bytes;
    size_t mat_bytes;
} fg_weight;

/* Integer key "<arch>.<suffix>" in [lo, hi]; absent and !required: def. */
fg_err fg_weight_get_int(const fg_gguf_t *g, const char *arch, const char *suffix, bool required, int def, int lo,
                         int hi, int *out, fg_diag *diag);
/* Float key "<arch>.<suffix>" (not NaN); absent and !required: def. */
fg_err fg_weight_get_float(const fg_gguf_t *g, const char *arch, const char *suffix, bool required, float def,
                           float *out, fg_diag *diag);

/* Boolean key "<arch>.<suffix>"; absent: def. */
fg_err fg_weight_get_bool(const fg_gguf_t *g, const char *arch, const char *suffix, bool def, bool *out, fg_diag *diag);

/* The vocabulary size, which is token_embd.weight's row count (a 2-D
 * {n_embd, vocab} tensor of at most 2^24 rows). */
fg_err fg_weight_vocab_size(const fg_gguf_t *g, int *n_vocab, fg_diag *diag);

/* Finds a tensor and checks its shape (ggml order; dims past n_dims must be
 * 1). Absent and !required: *out = NULL, FG_OK. */
fg_err fg_weight_find(const fg_gguf_t *g, const char *name, int n_dims, const int64_t *want, bool required,
                      const fg_gguf_tensor **out, fg_diag *diag);
/* An F32 vector of n (4-byte aligned); absent and !required: *out = NULL. */
fg_err fg_weight_bind_vector(const fg_gguf_t *g, const char *name, int64_t n, bool required, const float **out,
                             fg_diag *diag);
/* A matrix {n_in, n_out} or a stack {n_in, n_out, n_mat} (n_mat > 1) of a
 * computable type; absent and !required: w zeroed (w->data NULL). */
fg_err fg_weight_bind_matrix(const fg_gguf_t *g, const char *name, int64_t n_in, int64_t n_out, int64_t n_mat,
                             bool required, fg_weight *w, fg_diag *diag);

/* Bytes of all of w's matrices (0 when unbound). */
uint64_t fg_weight_bytes(const fg_weight *w);

/* Copies row `row` of a 2-D weight into f32 (used for embeddings). */
void fg_weight_row_f32(const fg_weight *w, int64_t row, float *out);

/* The panel copy of a Q8_0 weight, for the forward passes that pack at
 * create: each of w's matrices repacked into 16-row panels
 * (FG_WTYPE_Q8_0_P16, kernels/cpu/matmul.h: the same values and the same
 * size; the AVX-512 panel kernel gives a token the same bits in any batch,
 * and small batches its cost per product). drop_src: w's pages are then
 * dropped from this process (madvise; for a private file mapping, where they
 * fault back in unchanged if anything reads w again), so the resident memory
 * stays that of one copy. Returns 1 with *dst (data: *owned, to free()), 0
 * when w is not Q8_0 with rows in multiples of 16 (*dst = *w, *owned NULL),
 * -1 when out of memory (the same). The copy is the one thing here that
 * allocates. */
int fg_weight_pack_q8_p16(const fg_weight *w, bool drop_src, fg_weight *dst, void **owned);

#endif
