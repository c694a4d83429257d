/* gguf.h: a validating reader for GGUF v3 (and v2) files, mmap-backed.
 *
 * Owns: the mapping (or borrowed buffer), the parsed key/value directory and
 * the tensor directory. Everything returned points into the gguf_t and lives
 * until fg_gguf_close().
 *
 * Validation at open time (every check returns an error naming the problem,
 * never reads out of bounds): magic, version, truncation anywhere in the header,
 * counts and string lengths against the file size and hard limits, metadata
 * value types, tensor types (ggml type ids), dimension counts and sizes (no
 * overflow), duplicate key and tensor names, the general.alignment value, and
 * each tensor's data range inside the file and aligned.
 *
 * Thread safety: open/close from one thread; all getters are read-only and may
 * be called concurrently.
 */
#ifndef FG_GGUF_H
#define FG_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"

typedef struct fg_gguf fg_gguf_t;

/* GGUF metadata value types (the on-disk ids). */
typedef enum fg_gguf_vtype {
    FG_GGUF_INVALID = -1, /* never on disk: fg_gguf_key_type() of an out-of-range index */
    FG_GGUF_UINT8 = 0,
    FG_GGUF_INT8 = 1,
    FG_GGUF_UINT16 = 2,
    FG_GGUF_INT16 = 3,
    FG_GGUF_UINT32 = 4,
    FG_GGUF_INT32 = 5,
    FG_GGUF_FLOAT32 = 6,
    FG_GGUF_BOOL = 7,
    FG_GGUF_STRING = 8,
    FG_GGUF_ARRAY = 9,
    FG_GGUF_UINT64 = 10,
    FG_GGUF_INT64 = 11,
    FG_GGUF_FLOAT64 = 12,
} fg_gguf_vtype;

/* ggml tensor type ids (the on-disk ids, as ggml defines them). Only the ones
 * the engine computes with or the model generator writes are named; the
 * reader knows the block sizes of every current ggml type (up to 42, q2_0) so
 * that any valid file parses, and binding refuses the types it cannot compute
 * with by name (fg_ggml_check_computable). */
enum {
    FG_GGML_F32 = 0,
    FG_GGML_F16 = 1,
    FG_GGML_Q8_0 = 8,
    FG_GGML_I32 = 26,   /* deepseek4's ffn_gate_tid2eid (expert ids, not weights) */
    FG_GGML_BF16 = 30,
    FG_GGML_MXFP4 = 39, /* deepseek4's routed experts (kernels/cpu/numeric.h) */
};

/* Hard limits (beyond the file-size bound every count is checked against). */
#define FG_GGUF_MAX_DIMS 4
#define FG_GGUF_MAX_STRING (1u << 24)   /* 16 MiB per string */
#define FG_GGUF_MAX_KEYS (1u << 20)
#define FG_GGUF_MAX_TENSORS (1u << 20)
#define FG_GGUF_DEFAULT_ALIGNMENT 32

/* A string inside the file: NOT NUL-terminated in general. */
typedef struct fg_gguf_str {
    const char *ptr;
    uint64_t len;
} fg_gguf_str;

typedef struct fg_gguf_tensor {
    const char *name;              /* NUL-terminated copy owned by the gguf_t */
    uint32_t n_dims;               /* 1..4 */
    int64_t ne[FG_GGUF_MAX_DIMS];  /* ggml order: ne[0] is the contiguous dimension; unused dims are 1 */
    uint32_t type;                 /* ggml type id */
    uint64_t offset;               /* relative to the start of the data section */
    uint64_t nbytes;               /* size of the data */
    const void *data;              /* pointer into the mapping */
} fg_gguf_tensor;

/* Opens and validates a file (read-only mmap). Errors: FG_ERR_IO and every
 * FG_ERR_GGUF_* code; diag names the problem and the byte offset. */
fg_err fg_gguf_open_file(const char *path, fg_gguf_t **out, fg_diag *diag);

/* Same validation over a caller-owned buffer that must outlive the gguf_t
 * (used by tests and the fuzz target). */
fg_err fg_gguf_open_memory(const void *data, size_t size, fg_gguf_t **out, fg_diag *diag);

void fg_gguf_close(fg_gguf_t *g);

uint32_t fg_gguf_version(const fg_gguf_t *g);
uint64_t fg_gguf_alignment(const fg_gguf_t *g);
uint64_t fg_gguf_data_offset(const fg_gguf_t *g); /* file offset of the data section */
uint64_t fg_gguf_file_size(const fg_gguf_t *g);
const void *fg_gguf_file_bytes(const fg_gguf_t *g); /* start of the whole file */
/* True when the bytes are a private read-only file mapping (fg_gguf_open_file),
 * whose pages can be dropped and fault back from the file unchanged; false for
 * borrowed memory (fg_gguf_open_memory). */
bool fg_gguf_is_file_mapping(const fg_gguf_t *g);

/* ---- metadata ---- */
/* Keys are indexed 0..key_count-1 in file order; names are NUL-terminated
 * (the reader rejects key and tensor names that contain a NUL byte). */
uint64_t fg_gguf_key_count(const fg_gguf_t *g);
/* Index of a key or -1 (hash lookup). */
int64_t fg_gguf_find_key(const fg_gguf_t *g, const char *key);
/* NULL / FG_GGUF_INVALID when i is out of range. */
const char *fg_gguf_key_name(const fg_gguf_t *g, uint64_t i);
fg_gguf_vtype fg_gguf_key_type(const fg_gguf_t *g, uint64_t i);
/* Key i's value exactly as encoded in the file, after its type id (a scalar's
 * bytes; a string's length and bytes; an array's element type, count and
 * elements), validated at open; *len its size. NULL when i is out of range.
 * For copying keys unchanged (fg_gguf_writer_add_raw). */
const void *fg_gguf_key_raw(const fg_gguf_t *g, uint64_t i, uint64_t *len);

/* Typed getters by key name. Return FG_ERR_NOT_FOUND when absent and
 * FG_ERR_GGUF_KEY_TYPE when the stored type cannot represent the request
 * (integers convert between widths/signedness when the value fits; floats
 * accept FLOAT32 and FLOAT64; BOOL is only read by get_bool). */
fg_err fg_gguf_get_u32(const fg_gguf_t *g, const char *key, uint32_t *out);
fg_err fg_gguf_get_i64(const fg_gguf_t *g, const char *key, int64_t *out);
fg_err fg_gguf_get_f32(const fg_gguf_t *g, const char *key, float *out);
fg_err fg_gguf_get_bool(const fg_gguf_t *g, const char *key, bool *out); /* any nonzero byte is true */
fg_err fg_gguf_get_str(const fg_gguf_t *g, const char *key, fg_gguf_str *out);

/* Arrays: element type and count. Nested arrays are parsed and validated but
 * not exposed element-wise (no model key uses them). */
fg_err fg_gguf_get_arr(const fg_gguf_t *g, const char *key, fg_gguf_vtype *elem_type, uint64_t *count);
/* Element i of a STRING array (O(1)). An index >= count is FG_ERR_INVALID_ARG. */
fg_err fg_gguf_get_arr_str(const fg_gguf_t *g, const char *key, uint64_t i, fg_gguf_str *out);
/* Pointer to the packed little-endian elements of a numeric (non-string,
 * non-array) array, unaligned in general: read with memcpy. */
fg_err fg_gguf_get_arr_data(const fg_gguf_t *g, const char *key, const void **data);
/* Element i of an integer array, converted like fg_gguf_get_i64; an index
 * >= count is FG_ERR_INVALID_ARG. */
fg_err fg_gguf_get_arr_i64(const fg_gguf_t *g, const char *key, uint64_t i, int64_t *out);

/* ---- tensors ---- */
uint64_t fg_gguf_tensor_count(const fg_gguf_t *g);
const fg_gguf_tensor *fg_gguf_tensor_at(const fg_gguf_t *g, uint64_t i);
/* NULL when absent. */
const fg_gguf_tensor *fg_gguf_find_tensor(const fg_gguf_t *g, const char *name);

/* ---- ggml type table ---- */
/* Name ("f32", "q8_0", ...) or NULL for an unknown id. */
const char *fg_ggml_type_name(uint32_t type);
/* Elements per block and bytes per block; false for an unknown id. */
bool fg_ggml_type_size(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * (or negative, or the type is unknown, or the size overflows). */
uint64_t fg_ggml_row_bytes(uint32_t type, int64_t n);
/* True for the types the engine's matrix products read: f32, f16, bf16, q8_0. */
bool fg_ggml_type_computable(uint32_t type);
/* FG_OK for a computable type; otherwise FG_ERR_MODEL_TYPE with a message
 * that names the tensor and its type (diag may be NULL). */
fg_err fg_ggml_check_computable(const char *tensor, uint32_t type, fg_diag *diag);
/* Bytes of a whole tensor of shape ne[0..n_dims-1] (ggml order). The one
 * shape rule shared by the reader and the writer. Errors (diag names the
 * problem; diag may be NULL): FG_ERR_GGUF_TENSOR_TYPE for an unknown type,
 * FG_ERR_GGUF_LIMIT for n_dims outside 1..4, a negative dimension, ne[0] not
 * a multiple of the block size, or an element count or byte size that
 * overflows int64. */
fg_err fg_ggml_tensor_bytes(uint32_t type, uint32_t n_dims, const int64_t *ne, uint64_t *nbytes,
                            fg_diag *diag);

#endif
