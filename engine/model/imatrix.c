/* imatrix.c: imatrix.h's two readers and the tensor match. The GGUF form is
 * read with gguf.h's validating reader; the legacy form with a bounds-checked
 * cursor. Entries are sorted by name once, then found by binary search.
 */
#include "engine/model/imatrix.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/file.h"

#define MAX_NAME 4096                       /* longer than any tensor name (ggml's is 64) */
#define MAX_LEGACY_FILE ((size_t)1 << 34)   /* 16 GiB */

typedef struct entry {
    char *name;
    float *w;  /* n weights */
    int64_t n;
} entry;

struct fg_imatrix {
    entry *e;
    size_t n, cap;
    char *dataset; /* NULL: none */
    int64_t chunks;
    bool legacy;
};

static fg_err nomem(fg_diag *diag)
{
    return fg_diag_set(diag, FG_ERR_NOMEM, "imatrix: out of memory");
}

/* Takes name and w (both malloc'd) into m, or frees them on error. */
static fg_err add_entry(fg_imatrix_t *m, char *name, float *w, int64_t n, fg_diag *diag)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        entry *e = realloc(m->e, cap * sizeof *e);
        if (!e) {
            free(name);
            free(w);
            return nomem(diag);
        }
        m->e = e;
        m->cap = cap;
    }
    m->e[m->n++] = (entry){name, w, n};
    return FG_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

/* Sorts the entries and refuses an empty matrix or a repeated name. */
static fg_err finish(fg_imatrix_t *m, fg_diag *diag)
{
    if (m->n == 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: no entries (no data in the file)");
    qsort(m->e, m->n, sizeof *m->e, by_name);
    for (size_t i = 1; i < m->n; i++)
        if (strcmp(m->e[i - 1].name, m->e[i].name) == 0)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: entry '%s' appears twice", m->e[i].name);
    return FG_OK;
}

static float get_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static bool good_value(float v)
{
    return isfinite(v) && v >= 0.0f;
}

/* ---- GGUF ---- */

static bool strip_suffix(const char *name, const char *suffix, char *out, size_t cap)
{
    size_t n = strlen(name), m = strlen(suffix);
    if (n <= m || n - m >= cap || strcmp(name + n - m, suffix) != 0)
        return false;
    memcpy(out, name, n - m);
    out[n - m] = 0;
    return true;
}

static fg_err check_f32_2d(const fg_gguf_tensor *t, fg_diag *diag)
{
    if (t->type != FG_GGML_F32)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: tensor %s has type %s, not f32", t->name,
                           fg_ggml_type_name(t->type) ? fg_ggml_type_name(t->type) : "?");
    if (t->ne[2] != 1 || t->ne[3] != 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: tensor %s has more than two dimensions", t->name);
    return FG_OK;
}

/* One entry from its in_sum2 and counts tensors. */
static fg_err gguf_entry(fg_imatrix_t *m, const char *name, const fg_gguf_tensor *sums, const fg_gguf_tensor *counts,
                         fg_diag *diag)
{
    FG_TRY(check_f32_2d(sums, diag));
    FG_TRY(check_f32_2d(counts, diag));
    const int64_t ne0 = sums->ne[0], n_mat = sums->ne[1];
    if (counts->ne[0] * counts->ne[1] != n_mat)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: %s: %lld counts for %lld matrices of sums", name,
                           (long long)(counts->ne[0] * counts->ne[1]), (long long)n_mat);
    if (ne0 < 1 || n_mat < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: %s has no values", name);
    char *nm = strdup(name);
    float *w = malloc((size_t)(ne0 * n_mat) * sizeof *w);
    if (!nm || !w) {
        free(nm);
        free(w);
        return nomem(diag);
    }
    const uint8_t *s = sums->data, *c = counts->data;
    for (int64_t j = 0; j < n_mat; j++) {
        const float count = get_f32(c + 4 * j);
        if (!good_value(count)) {
            free(nm);
            free(w);
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: %s: count %lld is %g (negative or not finite)",
                               name, (long long)j, (double)count);
        }
        for (int64_t i = 0; i < ne0; i++) {
            const float v = get_f32(s + 4 * (j * ne0 + i));
            if (!good_value(v)) {
                free(nm);
                free(w);
                return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: %s: value %lld of matrix %lld is %g "
                                   "(a sum of squares is finite and not negative)", name, (long long)i,
                                   (long long)j, (double)v);
            }
            /* a matrix that saw no input (partial data) weighs every column 1, as llama-quantize does */
            w[j * ne0 + i] = count > 0.0f ? v / count : 1.0f;
            if (!isfinite(w[j * ne0 + i])) {
                free(nm);
                free(w);
                return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: %s: value %lld of matrix %lld divided by its "
                                   "count %g is not finite", name, (long long)i, (long long)j, (double)count);
            }
        }
    }
    return add_entry(m, nm, w, ne0 * n_mat, diag);
}

static fg_err gguf_meta(fg_imatrix_t *m, const fg_gguf_t *g, fg_diag *diag)
{
    static const char *const need[] = {"imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (fg_gguf_find_key(g, need[i]) < 0)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: key %s is missing (is this llama-imatrix's "
                               "output?)", need[i]);
    uint32_t chunks = 0, chunk_size = 0;
    if (fg_gguf_get_u32(g, "imatrix.chunk_count", &chunks) || fg_gguf_get_u32(g, "imatrix.chunk_size", &chunk_size))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: imatrix.chunk_count and imatrix.chunk_size must be "
                           "unsigned 32-bit integers");
    m->chunks = chunks;
    fg_gguf_vtype et;
    uint64_t nd = 0;
    if (fg_gguf_get_arr(g, "imatrix.datasets", &et, &nd) || (nd > 0 && et != FG_GGUF_STRING))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: imatrix.datasets must be an array of strings");
    if (nd > 0) {
        fg_gguf_str ds;
        if (fg_gguf_get_arr_str(g, "imatrix.datasets", 0, &ds) || memchr(ds.ptr, 0, (size_t)ds.len))
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: imatrix.datasets[0] is not a string");
        m->dataset = strndup(ds.ptr, (size_t)ds.len);
        if (!m->dataset)
            return nomem(diag);
    }
    return FG_OK;
}

static fg_err parse_gguf(fg_imatrix_t *m, const fg_gguf_t *g, fg_diag *diag)
{
    FG_TRY(gguf_meta(m, g, diag));
    const uint64_t nt = fg_gguf_tensor_count(g);
    char base[256], other[256 + 16];
    for (uint64_t i = 0; i < nt; i++) {
        const fg_gguf_tensor *t = fg_gguf_tensor_at(g, i);
        if (strip_suffix(t->name, ".counts", base, sizeof base)) {
            snprintf(other, sizeof other, "%s.in_sum2", base);
            if (!fg_gguf_find_tensor(g, other))
                return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: %s has counts but no in_sum2 tensor", base);
            continue;
        }
        if (!strip_suffix(t->name, ".in_sum2", base, sizeof base))
            continue; /* other tensors are ignored, as llama-quantize ignores them */
        snprintf(other, sizeof other, "%s.counts", base);
        const fg_gguf_tensor *c = fg_gguf_find_tensor(g, other);
        if (!c)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: %s has in_sum2 but no counts tensor", base);
        FG_TRY(gguf_entry(m, base, t, c, diag));
    }
    if (m->n == 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: no <name>.in_sum2 tensors (a model file rather than "
                           "llama-imatrix's output?)");
    return FG_OK;
}

/* ---- legacy ---- */

typedef struct cursor {
    const uint8_t *p;
    size_t left, at;
} cursor;

static fg_err take(cursor *c, size_t n, const void **out, const char *what, fg_diag *diag)
{
    if (n > c->left)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: the file ends inside %s (byte %zu, %zu wanted, %zu "
                           "left)", what, c->at, n, c->left);
    *out = c->p;
    c->p += n;
    c->left -= n;
    c->at += n;
    return FG_OK;
}

static fg_err take_i32(cursor *c, int32_t *v, const char *what, fg_diag *diag)
{
    const void *p = NULL;
    FG_TRY(take(c, 4, &p, what, diag));
    memcpy(v, p, 4);
    return FG_OK;
}

static fg_err legacy_entry(fg_imatrix_t *m, cursor *c, int32_t k, fg_diag *diag)
{
    int32_t len, ncall, nval;
    const void *p = NULL;
    char what[64];
    snprintf(what, sizeof what, "entry %d's name length", (int)k);
    FG_TRY(take_i32(c, &len, what, diag));
    if (len < 1 || len > MAX_NAME)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: entry %d's name length %d is not 1..%d", (int)k,
                           (int)len, MAX_NAME);
    snprintf(what, sizeof what, "entry %d's name", (int)k);
    FG_TRY(take(c, (size_t)len, &p, what, diag));
    if (memchr(p, 0, (size_t)len))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: entry %d's name holds a NUL byte", (int)k);
    char *name = strndup(p, (size_t)len);
    if (!name)
        return nomem(diag);
    fg_err e;
    snprintf(what, sizeof what, "entry %d (%.32s)'s counts", (int)k, name);
    if ((e = take_i32(c, &ncall, what, diag)) || (e = take_i32(c, &nval, what, diag))) {
        free(name);
        return e;
    }
    if (ncall < 0 || nval < 1 || (size_t)nval > c->left / 4) {
        e = fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: entry %s: ncall %d, %d values (%zu bytes left): %s",
                        name, (int)ncall, (int)nval, c->left, ncall < 0 ? "a negative call count" :
                        nval < 1 ? "no values" : "the file ends inside its values");
        free(name);
        return e;
    }
    float *w = malloc((size_t)nval * sizeof *w);
    if (!w) {
        free(name);
        return nomem(diag);
    }
    (void)take(c, (size_t)nval * 4, &p, what, diag);
    for (int32_t i = 0; i < nval; i++) {
        float v = get_f32((const uint8_t *)p + 4 * (size_t)i);
        if (!good_value(v)) {
            e = fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: entry %s: value %d is %g (a sum of squares is finite "
                            "and not negative)", name, (int)i, (double)v);
            free(name);
            free(w);
            return e;
        }
        w[i] = ncall > 0 ? v / (float)ncall : v;
    }
    return add_entry(m, name, w, nval, diag);
}

static fg_err parse_legacy(fg_imatrix_t *m, const uint8_t *data, size_t size, fg_diag *diag)
{
    cursor c = {data, size, 0};
    int32_t n;
    m->legacy = true;
    FG_TRY(take_i32(&c, &n, "the entry count", diag));
    if (n < 1)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: entry count %d (no data in the file)", (int)n);
    if ((size_t)n > size / 16) /* each entry takes at least 16 bytes */
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: entry count %d does not fit in %zu bytes", (int)n,
                           size);
    for (int32_t k = 0; k < n; k++)
        FG_TRY(legacy_entry(m, &c, k, diag));
    if (c.left == 0)
        return FG_OK;
    /* the trailer of recent legacy files: chunk count and dataset name */
    int32_t chunks, len;
    const void *p = NULL;
    FG_TRY(take_i32(&c, &chunks, "the trailer's chunk count", diag));
    FG_TRY(take_i32(&c, &len, "the trailer's dataset length", diag));
    if (chunks < 0 || len < 0 || (size_t)len != c.left)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: trailer: chunk count %d, dataset of %d bytes, %zu "
                           "bytes left: not the end of a legacy imatrix", (int)chunks, (int)len, c.left);
    FG_TRY(take(&c, (size_t)len, &p, "the dataset name", diag));
    if (memchr(p, 0, (size_t)len))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "imatrix: the dataset name holds a NUL byte");
    m->chunks = chunks;
    m->dataset = strndup(p, (size_t)len);
    return m->dataset ? FG_OK : nomem(diag);
}

/* ---- public ---- */

static bool is_gguf(const void *data, size_t size)
{
    return size >= 4 && memcmp(data, "GGUF", 4) == 0;
}

static fg_err parse_common(const void *data, size_t size, const fg_gguf_t *g, fg_imatrix_t **out, fg_diag *diag)
{
    fg_imatrix_t *m = calloc(1, sizeof *m);
    if (!m)
        return nomem(diag);
    fg_err e = g ? parse_gguf(m, g, diag) : parse_legacy(m, data, size, diag);
    if (!e)
        e = finish(m, diag);
    if (e) {
        fg_imatrix_destroy(m);
        return e;
    }
    *out = m;
    return FG_OK;
}

static fg_err gguf_failed(fg_err e, fg_diag *diag)
{
    char msg[sizeof diag->msg];
    snprintf(msg, sizeof msg, "%s", diag->msg);
    return fg_diag_set(diag, e, "imatrix (GGUF): %s", msg);
}

fg_err fg_imatrix_parse(const void *data, size_t size, fg_imatrix_t **out, fg_diag *diag)
{
    *out = NULL;
    if (!is_gguf(data, size))
        return parse_common(data, size, NULL, out, diag);
    fg_gguf_t *g = NULL;
    fg_err e = fg_gguf_open_memory(data, size, &g, diag);
    if (e)
        return gguf_failed(e, diag);
    e = parse_common(NULL, 0, g, out, diag);
    fg_gguf_close(g);
    return e;
}

fg_err fg_imatrix_open_file(const char *path, fg_imatrix_t **out, fg_diag *diag)
{
    *out = NULL;
    uint8_t magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return fg_diag_set(diag, FG_ERR_IO, "imatrix %s: %s", path, strerror(errno));
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (is_gguf(magic, got)) { /* mapped, not read: a GGUF imatrix of a large MoE model is large */
        fg_gguf_t *g = NULL;
        fg_err e = fg_gguf_open_file(path, &g, diag);
        if (e)
            return gguf_failed(e, diag);
        e = parse_common(NULL, 0, g, out, diag);
        fg_gguf_close(g);
        return e;
    }
    char *buf = NULL;
    size_t len = 0;
    int rc = fg_file_read(path, MAX_LEGACY_FILE, &buf, &len);
    if (rc)
        return fg_diag_set(diag, FG_ERR_IO, "imatrix %s: %s", path, strerror(rc));
    fg_err e = parse_common(buf, len, NULL, out, diag);
    free(buf);
    return e;
}

void fg_imatrix_destroy(fg_imatrix_t *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->e[i].name);
        free(m->e[i].w);
    }
    free(m->e);
    free(m->dataset);
    free(m);
}

size_t fg_imatrix_count(const fg_imatrix_t *m)
{
    return m->n;
}

const char *fg_imatrix_name_at(const fg_imatrix_t *m, size_t i, const float **w, int64_t *n)
{
    if (i >= m->n)
        return NULL;
    *w = m->e[i].w;
    *n = m->e[i].n;
    return m->e[i].name;
}

const float *fg_imatrix_find(const fg_imatrix_t *m, const char *name, int64_t *n)
{
    entry key = {(char *)name, NULL, 0};
    const entry *e = bsearch(&key, m->e, m->n, sizeof *m->e, by_name);
    *n = e ? e->n : 0;
    return e ? e->w : NULL;
}

const char *fg_imatrix_dataset(const fg_imatrix_t *m)
{
    return m->dataset;
}

int64_t fg_imatrix_chunks(const fg_imatrix_t *m)
{
    return m->chunks;
}

bool fg_imatrix_is_legacy(const fg_imatrix_t *m)
{
    return m->legacy;
}

fg_err fg_imatrix_for_tensor(const fg_imatrix_t *m, const fg_gguf_tensor *t, const float **w, fg_diag *diag)
{
    int64_t n = 0;
    *w = fg_imatrix_find(m, t->name, &n);
    if (!*w)
        return FG_OK;
    if (t->ne[3] > 1) {
        *w = NULL;
        return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "tensor %s has four dimensions: an importance matrix covers "
                           "two or three", t->name);
    }
    if (n == t->ne[0] * t->ne[2])
        return FG_OK;
    *w = NULL;
    if (strcmp(t->name, "token_embd.weight") == 0) /* llama-quantize ignores this mismatch (its rows are tokens) */
        return FG_OK;
    return fg_diag_set(diag, FG_ERR_MODEL_SHAPE, "tensor %s: the importance matrix has %lld weights, the tensor wants "
                       "%lld (%lld columns x %lld experts); was it computed on another model?", t->name, (long long)n,
                       (long long)(t->ne[0] * t->ne[2]), (long long)t->ne[0], (long long)t->ne[2]);
}
