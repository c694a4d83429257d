/* gguf_writer.c: streaming GGUF v3 writer.
 *
 * Design: keys and tensor infos are serialized into two memory buffers as
 * they are added (they are small next to the data), so begin_data() can write
 * the whole header in one go; tensor data is then streamed straight to the
 * file, each tensor padded with zeros to the alignment, and never held. All
 * output goes to "<path>.tmp"; finish() fsyncs it and renames it over <path>,
 * so a reader never sees a half-written model.
 *
 * Validation is deliberately absent (tests build malformed files with this
 * writer): duplicate names, unknown tensor types and impossible shapes are
 * written as given. A tensor whose size cannot be computed is declared with
 * 0 data bytes.
 */
#include "engine/model/gguf_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/gguf.h"

typedef struct byte_buf {
    uint8_t *p;
    size_t len, cap;
} byte_buf;

typedef enum writer_state {
    W_DECLARE, /* adding keys and tensor infos */
    W_DATA,    /* header written, streaming tensor data */
    W_DONE,    /* renamed into place */
    W_FAILED,  /* an I/O error happened; only destroy is useful */
} writer_state;

typedef struct declared_tensor {
    char *name;      /* for messages */
    uint64_t nbytes; /* data bytes the caller must supply */
} declared_tensor;

struct fg_gguf_writer {
    char *path;
    char *tmp_path;
    FILE *f;
    uint64_t alignment;
    writer_state state;

    byte_buf kv;
    uint64_t n_kv;
    byte_buf info;
    declared_tensor *tensors;
    uint64_t n_tensors, cap_tensors;
    uint64_t next_offset; /* data-section offset of the next declared tensor */

    uint64_t n_written; /* tensors whose data has been written */
    uint64_t pos;       /* bytes written to the file so far */
};

/* ---------------------------------------------------------- serialization */

static fg_err buf_put(byte_buf *b, const void *src, size_t n)
{
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2)
                return FG_ERR_NOMEM;
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            return FG_ERR_NOMEM;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, src, n);
    b->len += n;
    return FG_OK;
}

/* Little-endian by construction, whatever the host. */
static fg_err buf_le(byte_buf *b, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    for (unsigned i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    return buf_put(b, tmp, n);
}

static fg_err buf_str(byte_buf *b, const char *s, uint64_t len)
{
    fg_err e = buf_le(b, len, 8);
    return e ? e : buf_put(b, s, (size_t)len);
}

static uint32_t f32_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

/* Starts a key: name and value type. Keys may be added only before begin_data.
 * On failure the buffer is rolled back so a later add does not see half a key. */
static fg_err kv_begin(fg_gguf_writer_t *w, const char *key, fg_gguf_vtype type, size_t *mark)
{
    if (!w || !key)
        return FG_ERR_INVALID_ARG;
    if (w->state != W_DECLARE)
        return FG_ERR_INVALID_ARG;
    *mark = w->kv.len;
    fg_err e = buf_str(&w->kv, key, strlen(key));
    if (!e)
        e = buf_le(&w->kv, (uint32_t)type, 4);
    if (e)
        w->kv.len = *mark;
    return e;
}

static fg_err kv_end(fg_gguf_writer_t *w, size_t mark, fg_err e)
{
    if (e)
        w->kv.len = mark;
    else
        w->n_kv++;
    return e;
}

static fg_err add_scalar(fg_gguf_writer_t *w, const char *key, fg_gguf_vtype type, uint64_t bits, unsigned n)
{
    size_t mark;
    fg_err e = kv_begin(w, key, type, &mark);
    if (e)
        return e;
    return kv_end(w, mark, buf_le(&w->kv, bits, n));
}

fg_err fg_gguf_writer_add_u32(fg_gguf_writer_t *w, const char *key, uint32_t v)
{
    return add_scalar(w, key, FG_GGUF_UINT32, v, 4);
}

fg_err fg_gguf_writer_add_i32(fg_gguf_writer_t *w, const char *key, int32_t v)
{
    return add_scalar(w, key, FG_GGUF_INT32, (uint32_t)v, 4);
}

fg_err fg_gguf_writer_add_u64(fg_gguf_writer_t *w, const char *key, uint64_t v)
{
    return add_scalar(w, key, FG_GGUF_UINT64, v, 8);
}

fg_err fg_gguf_writer_add_f32(fg_gguf_writer_t *w, const char *key, float v)
{
    return add_scalar(w, key, FG_GGUF_FLOAT32, f32_bits(v), 4);
}

fg_err fg_gguf_writer_add_bool(fg_gguf_writer_t *w, const char *key, bool v)
{
    return add_scalar(w, key, FG_GGUF_BOOL, v ? 1 : 0, 1);
}

fg_err fg_gguf_writer_add_str(fg_gguf_writer_t *w, const char *key, const char *v)
{
    if (!v)
        return FG_ERR_INVALID_ARG;
    size_t mark;
    fg_err e = kv_begin(w, key, FG_GGUF_STRING, &mark);
    if (e)
        return e;
    return kv_end(w, mark, buf_str(&w->kv, v, strlen(v)));
}

fg_err fg_gguf_writer_add_raw(fg_gguf_writer_t *w, const char *key, uint32_t type, const void *value, uint64_t len)
{
    if (len && !value)
        return FG_ERR_INVALID_ARG;
    size_t mark;
    fg_err e = kv_begin(w, key, (fg_gguf_vtype)type, &mark);
    if (e)
        return e;
    return kv_end(w, mark, buf_put(&w->kv, value, (size_t)len));
}

/* Array header: element type and count, after the key's own header. */
static fg_err arr_begin(fg_gguf_writer_t *w, const char *key, fg_gguf_vtype elem, uint64_t n, const void *v,
                        size_t *mark)
{
    if (n && !v)
        return FG_ERR_INVALID_ARG;
    fg_err e = kv_begin(w, key, FG_GGUF_ARRAY, mark);
    if (e)
        return e;
    e = buf_le(&w->kv, (uint32_t)elem, 4);
    if (!e)
        e = buf_le(&w->kv, n, 8);
    if (e)
        w->kv.len = *mark;
    return e;
}

fg_err fg_gguf_writer_add_arr_str(fg_gguf_writer_t *w, const char *key, const char *const *v, const uint64_t *lens,
                                  uint64_t n)
{
    size_t mark;
    fg_err e = arr_begin(w, key, FG_GGUF_STRING, n, v, &mark);
    if (e)
        return e;
    for (uint64_t i = 0; i < n && !e; i++) {
        uint64_t len = lens ? lens[i] : (v[i] ? strlen(v[i]) : 0);
        if (!v[i] && len)
            e = FG_ERR_INVALID_ARG;
        else
            e = buf_str(&w->kv, v[i], len);
    }
    return kv_end(w, mark, e);
}

fg_err fg_gguf_writer_add_arr_i32(fg_gguf_writer_t *w, const char *key, const int32_t *v, uint64_t n)
{
    size_t mark;
    fg_err e = arr_begin(w, key, FG_GGUF_INT32, n, v, &mark);
    if (e)
        return e;
    for (uint64_t i = 0; i < n && !e; i++)
        e = buf_le(&w->kv, (uint32_t)v[i], 4);
    return kv_end(w, mark, e);
}

fg_err fg_gguf_writer_add_arr_f32(fg_gguf_writer_t *w, const char *key, const float *v, uint64_t n)
{
    size_t mark;
    fg_err e = arr_begin(w, key, FG_GGUF_FLOAT32, n, v, &mark);
    if (e)
        return e;
    for (uint64_t i = 0; i < n && !e; i++)
        e = buf_le(&w->kv, f32_bits(v[i]), 4);
    return kv_end(w, mark, e);
}

fg_err fg_gguf_writer_add_tensor(fg_gguf_writer_t *w, const char *name, uint32_t ggml_type, uint32_t n_dims,
                                 const int64_t *ne)
{
    if (!w || !name || (n_dims && !ne) || w->state != W_DECLARE)
        return FG_ERR_INVALID_ARG;
    uint64_t nbytes = 0;
    /* An impossible shape or type is written anyway (see the top note). */
    if (fg_ggml_tensor_bytes(ggml_type, n_dims, ne, &nbytes, NULL) != FG_OK)
        nbytes = 0;
    uint64_t padded = nbytes + (w->alignment - nbytes % w->alignment) % w->alignment;
    if (padded < nbytes || w->next_offset > UINT64_MAX - padded)
        return FG_ERR_INVALID_ARG;

    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        declared_tensor *t = realloc(w->tensors, (size_t)cap * sizeof *t);
        if (!t)
            return FG_ERR_NOMEM;
        w->tensors = t;
        w->cap_tensors = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return FG_ERR_NOMEM;

    size_t mark = w->info.len;
    fg_err e = buf_str(&w->info, name, strlen(name));
    if (!e)
        e = buf_le(&w->info, n_dims, 4);
    for (uint32_t d = 0; d < n_dims && !e; d++)
        e = buf_le(&w->info, (uint64_t)ne[d], 8); /* negative dims wrap, as a malformed file would hold */
    if (!e)
        e = buf_le(&w->info, ggml_type, 4);
    if (!e)
        e = buf_le(&w->info, w->next_offset, 8);
    if (e) {
        w->info.len = mark;
        free(copy);
        return e;
    }
    w->tensors[w->n_tensors++] = (declared_tensor){copy, nbytes};
    w->next_offset += padded;
    return FG_OK;
}

/* ------------------------------------------------------------------ output */

static fg_err io_fail(fg_gguf_writer_t *w, fg_diag *diag, const char *what)
{
    w->state = W_FAILED;
    return fg_diag_set(diag, FG_ERR_IO, "gguf writer: %s %s: %s", what, w->tmp_path, strerror(errno));
}

static fg_err out_write(fg_gguf_writer_t *w, const void *p, uint64_t n, fg_diag *diag)
{
    if (n && fwrite(p, 1, (size_t)n, w->f) != n)
        return io_fail(w, diag, "write");
    w->pos += n;
    return FG_OK;
}

static fg_err out_pad(fg_gguf_writer_t *w, fg_diag *diag)
{
    static const uint8_t zeros[4096];
    uint64_t pad = (w->alignment - w->pos % w->alignment) % w->alignment;
    while (pad) {
        uint64_t n = pad < sizeof zeros ? pad : sizeof zeros;
        fg_err e = out_write(w, zeros, n, diag);
        if (e)
            return e;
        pad -= n;
    }
    return FG_OK;
}

static fg_err check_state(fg_gguf_writer_t *w, writer_state want, const char *call, fg_diag *diag)
{
    if (!w)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "gguf writer: %s on NULL", call);
    if (w->state == W_FAILED)
        return fg_diag_set(diag, FG_ERR_IO, "gguf writer: %s after an earlier I/O error on %s", call, w->tmp_path);
    if (w->state != want)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "gguf writer: %s called out of order", call);
    return FG_OK;
}

fg_err fg_gguf_writer_create(const char *path, uint32_t alignment, fg_gguf_writer_t **out, fg_diag *diag)
{
    if (!path || !out)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "gguf writer: NULL path or out pointer");
    *out = NULL;
    if (alignment == 0)
        alignment = FG_GGUF_DEFAULT_ALIGNMENT;
    if (alignment & (alignment - 1))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "gguf writer: alignment %" PRIu32 " is not a power of two",
                           alignment);
    fg_gguf_writer_t *w = calloc(1, sizeof *w);
    if (!w)
        return fg_diag_set(diag, FG_ERR_NOMEM, "gguf writer: out of memory");
    w->alignment = alignment;
    w->path = strdup(path);
    w->tmp_path = malloc(strlen(path) + 5);
    if (!w->path || !w->tmp_path) {
        fg_gguf_writer_destroy(w);
        return fg_diag_set(diag, FG_ERR_NOMEM, "gguf writer: out of memory");
    }
    snprintf(w->tmp_path, strlen(path) + 5, "%s.tmp", path);
    int fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || !(w->f = fdopen(fd, "wb"))) {
        fg_err e = fg_diag_set(diag, FG_ERR_IO, "gguf writer: create %s: %s", w->tmp_path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(w->tmp_path);
        }
        free(w->tmp_path);
        w->tmp_path = NULL; /* nothing of ours to remove */
        fg_gguf_writer_destroy(w);
        return e;
    }
    *out = w;
    return FG_OK;
}

fg_err fg_gguf_writer_begin_data(fg_gguf_writer_t *w, fg_diag *diag)
{
    fg_err e = check_state(w, W_DECLARE, "begin_data", diag);
    if (e)
        return e;
    byte_buf head = {0};
    e = buf_put(&head, "GGUF", 4);
    if (!e)
        e = buf_le(&head, 3, 4);
    if (!e)
        e = buf_le(&head, w->n_tensors, 8);
    if (!e)
        e = buf_le(&head, w->n_kv, 8);
    if (e) {
        free(head.p);
        return fg_diag_set(diag, e, "gguf writer: out of memory");
    }
    e = out_write(w, head.p, head.len, diag);
    free(head.p);
    if (!e)
        e = out_write(w, w->kv.p, w->kv.len, diag);
    if (!e)
        e = out_write(w, w->info.p, w->info.len, diag);
    if (!e)
        e = out_pad(w, diag);
    if (e)
        return e;
    /* The header is out; its buffers (a vocabulary can be megabytes) are not needed again. */
    free(w->kv.p);
    free(w->info.p);
    w->kv = (byte_buf){0};
    w->info = (byte_buf){0};
    w->state = W_DATA;
    return FG_OK;
}

fg_err fg_gguf_writer_write_tensor(fg_gguf_writer_t *w, const void *data, uint64_t nbytes, fg_diag *diag)
{
    fg_err e = check_state(w, W_DATA, "write_tensor", diag);
    if (e)
        return e;
    if (w->n_written == w->n_tensors)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "gguf writer: all %" PRIu64 " declared tensors already written",
                           w->n_tensors);
    const declared_tensor *t = &w->tensors[w->n_written];
    if (nbytes != t->nbytes || (nbytes && !data))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "gguf writer: tensor '%s' takes %" PRIu64 " bytes, %" PRIu64 " given%s", t->name,
                           t->nbytes, nbytes, nbytes && !data ? " with a NULL pointer" : "");
    if ((e = out_write(w, data, nbytes, diag)) || (e = out_pad(w, diag)))
        return e;
    w->n_written++;
    return FG_OK;
}

/* fsync the directory so that the rename itself survives a crash. */
static int sync_dir(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return -1;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

fg_err fg_gguf_writer_finish(fg_gguf_writer_t *w, fg_diag *diag)
{
    fg_err e = check_state(w, W_DATA, "finish", diag);
    if (e)
        return e;
    if (w->n_written != w->n_tensors)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG,
                           "gguf writer: finish after %" PRIu64 " of %" PRIu64 " tensors (next: '%s')", w->n_written,
                           w->n_tensors, w->tensors[w->n_written].name);
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
        return io_fail(w, diag, "flush");
    FILE *f = w->f;
    w->f = NULL;
    if (fclose(f) != 0)
        return io_fail(w, diag, "close");
    if (rename(w->tmp_path, w->path) != 0)
        return io_fail(w, diag, "rename");
    w->state = W_DONE;
    if (sync_dir(w->path) != 0)
        return fg_diag_set(diag, FG_ERR_IO, "gguf writer: fsync directory of %s: %s", w->path, strerror(errno));
    return FG_OK;
}

void fg_gguf_writer_destroy(fg_gguf_writer_t *w)
{
    if (!w)
        return;
    if (w->f)
        fclose(w->f);
    if (w->state != W_DONE && w->tmp_path)
        unlink(w->tmp_path);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv.p);
    free(w->info.p);
    free(w->path);
    free(w->tmp_path);
    free(w);
}
