/* gguf_writer.h: writes GGUF v3 files (model generator, tests).
 *
 * Usage: create; add keys and tensor infos (in the order they will appear);
 * fg_gguf_writer_begin_data() writes the header; then fg_gguf_writer_write_tensor()
 * once per declared tensor, in declaration order (data streamed, never held);
 * fg_gguf_writer_finish() pads, fsyncs and renames "<path>.tmp" to <path>.
 *
 * The writer does not reject duplicate names or odd values on purpose: tests use
 * it to build malformed files. The reader is where validation lives.
 *
 * Thread safety: one writer per thread.
 */
#ifndef FG_GGUF_WRITER_H
#define FG_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

typedef struct fg_gguf_writer fg_gguf_writer_t;

/* alignment 0 means the default (32); a non-default one is also written as
 * general.alignment by the caller if wanted (the writer only pads with it). */
fg_err fg_gguf_writer_create(const char *path, uint32_t alignment, fg_gguf_writer_t **out, fg_diag *diag);
/* Abandons the write (removes the temp file) if not finished. */
void fg_gguf_writer_destroy(fg_gguf_writer_t *w);

/* The add_* calls are valid only before begin_data. Errors: FG_ERR_INVALID_ARG
 * (a NULL argument, or called after begin_data), FG_ERR_NOMEM. */
fg_err fg_gguf_writer_add_u32(fg_gguf_writer_t *w, const char *key, uint32_t v);
fg_err fg_gguf_writer_add_i32(fg_gguf_writer_t *w, const char *key, int32_t v);
fg_err fg_gguf_writer_add_u64(fg_gguf_writer_t *w, const char *key, uint64_t v);
fg_err fg_gguf_writer_add_f32(fg_gguf_writer_t *w, const char *key, float v);
fg_err fg_gguf_writer_add_bool(fg_gguf_writer_t *w, const char *key, bool v);
fg_err fg_gguf_writer_add_str(fg_gguf_writer_t *w, const char *key, const char *v);
/* Arrays: strings may contain NUL bytes when lens is given (lens NULL: strlen). */
fg_err fg_gguf_writer_add_arr_str(fg_gguf_writer_t *w, const char *key, const char *const *v,
                                  const uint64_t *lens, uint64_t n);
fg_err fg_gguf_writer_add_arr_i32(fg_gguf_writer_t *w, const char *key, const int32_t *v, uint64_t n);
/* A key whose value is already encoded (fg_gguf_key_raw: another file's key,
 * copied unchanged); type is its GGUF value type id. */
fg_err fg_gguf_writer_add_raw(fg_gguf_writer_t *w, const char *key, uint32_t type, const void *value, uint64_t len);
fg_err fg_gguf_writer_add_arr_f32(fg_gguf_writer_t *w, const char *key, const float *v, uint64_t n);

/* Declares a tensor; ne in ggml order (ne[0] contiguous), n_dims entries are
 * read. Offsets are assigned here (each aligned). A type or shape the reader
 * would reject (unknown type, n_dims outside 1..4, ...) is written as given
 * and declared with 0 data bytes. */
fg_err fg_gguf_writer_add_tensor(fg_gguf_writer_t *w, const char *name, uint32_t ggml_type,
                                 uint32_t n_dims, const int64_t *ne);

/* Writes magic, version, counts, keys and tensor infos, and pads to alignment. */
fg_err fg_gguf_writer_begin_data(fg_gguf_writer_t *w, fg_diag *diag);
/* Writes the data of the next declared tensor; nbytes must equal its size. */
fg_err fg_gguf_writer_write_tensor(fg_gguf_writer_t *w, const void *data, uint64_t nbytes, fg_diag *diag);
/* All tensors written: flush, fsync, rename into place. */
fg_err fg_gguf_writer_finish(fg_gguf_writer_t *w, fg_diag *diag);

#endif
