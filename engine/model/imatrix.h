/* imatrix.h: an importance matrix as llama-imatrix writes it, read for
 * flashgate-quantize --imatrix, and its entries matched to a model's tensors
 * as llama-quantize matches them (tools/quantize/quantize.cpp load_imatrix,
 * src/llama-quant.cpp).
 *
 * Two formats, told apart by the first four bytes:
 *   GGUF (llama.cpp's current one): per matrix NAME a tensor NAME.in_sum2
 *     (F32 [ne0, n_mat]: per column, the sum of the squared activations) and
 *     NAME.counts (F32 [1, n_mat]: how many activations each sum holds),
 *     n_mat the number of experts of a 3-D expert tensor, else 1; keys
 *     imatrix.datasets (array of strings), imatrix.chunk_count and
 *     imatrix.chunk_size (u32). An entry's weights are in_sum2 / counts
 *     per expert, and 1 for an expert whose count is 0 (it saw no input).
 *   legacy .dat: i32 n_entries, then per entry i32 name length, the name,
 *     i32 ncall, i32 n_values, n_values f32 (sums, divided by ncall when it is
 *     positive); then optionally i32 chunk count, i32 dataset length and the
 *     dataset name. Little-endian throughout.
 *
 * Validation (a clear error naming the entry and what is wrong, never a read
 * out of bounds): truncation, lengths and counts against the file size,
 * names that are empty, hold a NUL or repeat, an in_sum2 without its counts
 * (or the reverse), shapes that do not agree, a type other than F32, missing
 * metadata, values that are negative, NaN or infinite, a file with no entry,
 * trailing bytes after a legacy file's end.
 *
 * Owns: the entries (names and weights), sorted by name. Thread safety:
 * built and destroyed by one thread; the getters are read-only.
 */
#ifndef FG_IMATRIX_H
#define FG_IMATRIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/model/gguf.h"

typedef struct fg_imatrix fg_imatrix_t;

/* Parses an imatrix held in memory (copied out; data may go afterwards).
 * Errors: FG_ERR_INVALID_ARG for anything malformed (the GGUF reader's own
 * codes for a broken GGUF container), FG_ERR_NOMEM; diag says what and where. */
fg_err fg_imatrix_parse(const void *data, size_t size, fg_imatrix_t **out, fg_diag *diag);

/* Reads and parses a file. Errors: FG_ERR_IO (diag has errno's text), and
 * those of fg_imatrix_parse. */
fg_err fg_imatrix_open_file(const char *path, fg_imatrix_t **out, fg_diag *diag);

void fg_imatrix_destroy(fg_imatrix_t *m);

/* Number of entries, and the i-th name (sorted order) with its n weights. */
size_t fg_imatrix_count(const fg_imatrix_t *m);
const char *fg_imatrix_name_at(const fg_imatrix_t *m, size_t i, const float **w, int64_t *n);

/* The entry of that name, or NULL; *n gets its number of weights. */
const float *fg_imatrix_find(const fg_imatrix_t *m, const char *name, int64_t *n);

/* The (first) dataset it was computed on, or NULL where the file names none;
 * the chunk count (0 where the legacy file has no trailer). */
const char *fg_imatrix_dataset(const fg_imatrix_t *m);
int64_t fg_imatrix_chunks(const fg_imatrix_t *m);
bool fg_imatrix_is_legacy(const fg_imatrix_t *m);

/* The weights of tensor t (quantized to another type), as llama-quantize picks
 * them: the entry named as the tensor, ne[0] weights per expert, experts along
 * ne[2] (the weights of expert e start at e * ne[0]). *w is NULL when there is
 * no entry, or when token_embd.weight's entry has the wrong size (llama-quantize
 * quantizes it without). Errors: FG_ERR_MODEL_SHAPE (diag names the tensor and
 * both sizes) for another tensor whose entry's size is not ne[0] * ne[2], or a
 * 4-D tensor. */
fg_err fg_imatrix_for_tensor(const fg_imatrix_t *m, const fg_gguf_tensor *t, const float **w, fg_diag *diag);

#endif
