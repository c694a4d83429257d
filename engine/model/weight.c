/* weight.c: binding GGUF tensors and keys to fg_weight, shared by the architectures. */
#include "engine/model/weight.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/quants.h"

fg_err fg_weight_get_int(const fg_gguf_t *g, const char *arch, const char *suffix, bool required, int def, int lo, int hi,
                      int *out, fg_diag *diag)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    fg_err e = fg_gguf_get_i64(g, key, &v);
    if (e == FG_ERR_NOT_FOUND && !required) {
        *out = def;
        return FG_OK;
    }
    if (e == FG_ERR_NOT_FOUND)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "missing key %s", key);
    if (e != FG_OK)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "key %s is not an integer", key);
    if (v < lo || v > hi)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "key %s = %" PRId64 " outside [%d, %d]", key, v, lo, hi);
    *out = (int)v;
    return FG_OK;
}

fg_err fg_weight_get_float(const fg_gguf_t *g, const char *arch, const char *suffix, bool required, float def, float *out,
                        fg_diag *diag)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    fg_err e = fg_gguf_get_f32(g, key, out);
    if (e == FG_ERR_NOT_FOUND && !required) {
        *out = def;
        return FG_OK;
    }
    if (e == FG_ERR_NOT_FOUND)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "missing key %s", key);
    if (e != FG_OK || !(*out == *out))
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "key %s is not a number", key);
    return FG_OK;
}

fg_err fg_weight_get_bool(const fg_gguf_t *g, const char *arch, const char *suffix, bool def, bool *out, fg_diag *diag)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    bool v = def;
    fg_err e = fg_gguf_get_bool(g, key, &v);
    if (e != FG_OK && e != FG_ERR_NOT_FOUND)
        return fg_diag_set(diag, FG_ERR_MODEL_HPARAM, "key %s is not a bool", key);
    *out = e == FG_OK ? v : def;
    return FG_OK;
}

fg_err fg_weight_vocab_size(const fg_gguf_t *g, int *n_vocab, fg_diag *diag)
{
    const fg_gguf_tensor *te = fg_gguf_find_tensor(g, "token_embd.weight");
    if (!te)
        return fg_diag_set(diag, FG_ERR_MODEL_TENSOR, "missing tensor token_embd.weight");
    if (te->n_dims != 2 || te->ne[1] < 1 || te->ne[1] > (1 << 24))
        return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "token_embd.weight must be 2-D {n_embd, vocab}");
    *n_vocab = (int)te->ne[1];
    return FG_OK;
}

/* Finds a tensor and checks its shape (ggml order; 0 in want means "1 or absent"). */
fg_err fg_weight_find(const fg_gguf_t *g, const char *name, int n_dims, const int64_t *want, bool required,
                          const fg_gguf_tensor **out, fg_diag *diag)
{
    const fg_gguf_tensor *t = fg_gguf_find_tensor(g, name);
    *out = t;
    if (!t) {
        if (!required)
            return FG_OK;
        return fg_diag_set(diag, FG_ERR_MODEL_TENSOR, "missing tensor %s", name);
    }
    for (int i = 0; i < FG_GGUF_MAX_DIMS; i++) {
        int64_t w = i < n_dims ? want[i] : 1;
        if (t->ne[i] != w)
            return fg_diag_set(diag, FG_ERR_MODEL_SHAPE,
                               "tensor %s has shape {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                               "}, expected {%" PRId64 ", %" PRId64 ", %" PRId64 "}",
                               name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], want[0], n_dims > 1 ? want[1] : 1,
                               n_dims > 2 ? want[2] : 1);
    }
    return FG_OK;
}

fg_err fg_weight_bind_vector(const fg_gguf_t *g, const char *name, int64_t n, bool required, const float **out,
                          fg_diag *diag)
{
    const fg_gguf_tensor *t;
    FG_TRY(fg_weight_find(g, name, 1, &n, required, &t, diag));
    *out = NULL;
    if (!t)
        return FG_OK;
    if (t->type != FG_GGML_F32)
        return fg_diag_set(diag, FG_ERR_MODEL_TYPE, "tensor %s must be f32, is %s", name,
                           fg_ggml_type_name(t->type));
    if ((uintptr_t)t->data % sizeof(float))
        return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "tensor %s data is not 4-byte aligned", name);
    *out = t->data;
    return FG_OK;
}

fg_err fg_weight_bind_matrix(const fg_gguf_t *g, const char *name, int64_t n_in, int64_t n_out, int64_t n_mat,
                          bool required, fg_weight *w, fg_diag *diag)
{
    int64_t want[3] = {n_in, n_out, n_mat};
    const fg_gguf_tensor *t;
    FG_TRY(fg_weight_find(g, name, n_mat > 1 ? 3 : 2, want, required, &t, diag));
    memset(w, 0, sizeof *w);
    if (!t)
        return FG_OK;
    FG_TRY(fg_ggml_check_computable(name, t->type, diag));
    w->data = t->data;
    w->type = (int)t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->n_mat = n_mat;
    w->row_bytes = (size_t)fg_ggml_row_bytes(t->type, n_in);
    if (w->row_bytes == 0)
        return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "tensor %s rows of %" PRId64 " do not fit %s blocks", name, n_in,
                           fg_ggml_type_name(t->type));
    w->mat_bytes = w->row_bytes * (size_t)n_out;
    /* Blocks whose scales stand for no finite number would turn the products
     * into NaN far from their cause: refuse the file here, by name. */
    int64_t bad_row, bad_block;
    if (fg_wtype_validate_rows(w->type, w->data, n_in, n_out * n_mat, &bad_row, &bad_block) != 0)
        return fg_diag_set(diag, FG_ERR_MODEL_TYPE,
                           "tensor %s (%s): block %" PRId64 " of row %" PRId64 " of matrix %" PRId64
                           " has a scale that is not a finite number",
                           name, fg_ggml_type_name(t->type), bad_block, bad_row % n_out, bad_row / n_out);
    return FG_OK;
}

uint64_t fg_weight_bytes(const fg_weight *w)
{
    return w->data ? (uint64_t)w->mat_bytes * (uint64_t)w->n_mat : 0;
}

void fg_weight_row_f32(const fg_weight *w, int64_t row, float *out)
{
    const uint8_t *p = (const uint8_t *)w->data + (size_t)row * w->row_bytes;
    const int64_t n = w->n_in;
    switch (w->type) {
    case FG_GGML_F32:
        memcpy(out, p, (size_t)n * sizeof(float));
        break;
    case FG_GGML_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = fg_f16_to_f32(h);
        }
        break;
    case FG_GGML_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = fg_bf16_to_f32(h);
        }
        break;
    case FG_GGML_Q8_0:
        fg_dequantize_row_q8_0((const fg_block_q8_0 *)p, out, n);
        break;
    default: /* the block types of quants.h; binding accepted only computable ones */
        (void)fg_wtype_dequantize_row(w->type, p, out, n);
        break;
    }
}

int fg_weight_pack_q8_p16(const fg_weight *w, bool drop_src, fg_weight *dst, void **owned)
{
    *dst = *w;
    *owned = NULL;
    if (!w->data || w->type != FG_WTYPE_Q8_0 ||
        fg_matmul_q8_p16_bytes(w->n_in, w->n_out) != (size_t)w->n_out * w->row_bytes ||
        w->mat_bytes != (size_t)w->n_out * w->row_bytes)
        return 0;
    const size_t total = (size_t)w->n_mat * w->mat_bytes;
    void *buf = NULL;
    if (posix_memalign(&buf, 64, total) != 0)
        return -1;
    for (int64_t i = 0; i < w->n_mat; i++)
        (void)fg_matmul_pack_q8_p16((const uint8_t *)w->data + (size_t)i * w->mat_bytes, w->n_in, w->n_out,
                                    (uint8_t *)buf + (size_t)i * w->mat_bytes);
    if (drop_src) {
        const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        const uintptr_t b = ((uintptr_t)w->data + page - 1) / page * page;
        const uintptr_t e = ((uintptr_t)w->data + total) / page * page;
        if (e > b)
            (void)madvise((void *)b, e - b, MADV_DONTNEED); /* an optimisation: failure costs only memory */
    }
    dst->data = buf;
    dst->type = FG_WTYPE_Q8_0_P16;
    *owned = buf;
    return 1;
}
