/* session_file.h: the on-disk format of one session (<name>.fgs) and its
 * reader and atomic writer.
 *
 * Two versions, by the cache's layout (kv_store.h): a cache without
 * per-sequence state (deepseek2: a page is [n_layer][64] rows) is written as
 * version 2, token-major rows, byte for byte as before version 3 existed; a
 * cache with state (deepseek4: pages of compressed rows and index keys, plus
 * window rings and open compressor blocks) as version 3, its pages as stored
 * and the state. The reader reads both, each into the engine whose layout it
 * describes.
 *
 * Layout, little-endian:
 *   header (version 2: FG_SFILE_HEADER_BYTES; version 3: FG_SFILE_HEADER_V3_BYTES):
 *     0  magic "FGSESS\r\n"     8  u32 format version    12 u32 KV cache format
 *     16 model identity (16 hex chars, fg_engine_info.model_identity)
 *     32 u32 n_layer  36 u32 kv_lora (deepseek4: head_dim)  40 u32 n_rope  44 u32 row_bytes
 *     48 u32 page tokens (64)  52 u32 n_tokens  56 u32 meta_len  60 u32 n_pending
 *     64 u64 KV bytes (v2: n_tokens * n_layer * row_bytes; v3: ceil(n_tokens / 64) * page_bytes)
 *     72..95 zero
 *     96 tenant name, 160 file name (session id, or a page file's key): each
 *        1..64 bytes of [A-Za-z0-9_-], NUL-padded to 64
 *     version 3 only:
 *     224 u32 layout kind (FG_SFILE_LAYOUT_PAGES, "pags")  228 u32 page_bytes
 *     232 u32 state bytes in the file (0: none; else the geometry's seq_bytes)
 *     236 u32 first token: the position in its sequence of the file's first
 *         token, a multiple of 64 (0 in a session file, whose history starts
 *         there; a page file's page: page_file.h); zero before page files used it
 *     240 architecture name (general.architecture), 1..15 bytes, NUL-padded to 16
 *   A file is read only as the file it names (fg_sfile_check_owner): a copy
 *   of another session's file is refused instead of adopted. Version 1 files
 *   (without the names) are refused with FG_ERR_SESSION_VERSION.
 *   tokens   [n_tokens + n_pending] i32: the history whose KV follows, then
 *            input queued but not yet evaluated (e.g. the last sampled token)
 *   meta     [meta_len] bytes: the owner's blob
 *   KV       v2: rows [n_tokens][n_layer][row_bytes], as stored in the pages;
 *            v3: pages [ceil(n_tokens / 64)][page_bytes], as stored (the last
 *            one whole), then the state [state bytes], as stored; a state
 *            begins with the i32 count of tokens it holds (deepseek4's
 *            fg_ds4_state_head), which must be first token + n_tokens
 *   checksum u64: fg_hash64 of every byte before it (seed FG_SFILE_MAGIC_SEED)
 *
 * The reader trusts no size from the file: each is bounded by what the
 * engine expects and by the file's length before anything is read through it.
 *
 * Thread safety: pure functions, except that the writer and reader touch the
 * named files; callers serialise writes to one path.
 */
#ifndef FG_SESSION_FILE_H
#define FG_SESSION_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/kv/kv_store.h"

#define FG_SFILE_VERSION 2        /* caches without state: token-major rows */
#define FG_SFILE_VERSION_PAGES 3  /* caches with state: pages and the state, the architecture named */
#define FG_SFILE_HEADER_BYTES 224
#define FG_SFILE_HEADER_V3_BYTES 256
#define FG_SFILE_ARCH_BYTES 16
#define FG_SFILE_LAYOUT_PAGES 0x73676170u /* "pags" as the bytes of a little-endian u32 */
#define FG_SFILE_OWNER_BYTES 64 /* each of the tenant and file name fields */
#define FG_SFILE_META_MAX 65536
#define FG_SFILE_MAGIC_SEED 0x666c617368676174ull /* "flashgat" */

/* What this engine can load: a file must match it. */
typedef struct fg_sfile_expect {
    const char *model_identity;  /* 16 hex chars */
    const char *arch;            /* the architecture's name; a version 3 file must name it */
    fg_kv_geometry geo;          /* seq_bytes != 0: version 3 files only, else version 2 only */
    int max_tokens;              /* the engine's context */
    int n_vocab;                 /* token ids must be below it */
} fg_sfile_expect;

/* A validated file in memory; pointers into the caller's buffer. */
typedef struct fg_sfile_view {
    int n_tokens;                /* with KV rows */
    int n_pending;               /* queued after them, without KV */
    const uint8_t *tokens;       /* [n_tokens + n_pending] little-endian i32 */
    const uint8_t *meta;
    uint32_t meta_len;
    int version;                 /* FG_SFILE_VERSION or FG_SFILE_VERSION_PAGES */
    const uint8_t *rows;         /* v2: [n_tokens][n_layer][row_bytes] */
    const uint8_t *pages;        /* v3: [ceil(n_tokens / 64)][page_bytes] */
    const uint8_t *state;        /* v3: [state_len], or NULL when the file holds none */
    uint32_t state_len;
    int first_token;             /* v3: the sequence position of token 0 (0 in a session file); v2: 0 */
    char tenant[FG_SFILE_OWNER_BYTES + 1]; /* the names the file gives itself */
    char name[FG_SFILE_OWNER_BYTES + 1];
} fg_sfile_view;

/* Bytes of a session file with n_tokens (with KV), n_pending and meta_len
 * (with the state where the geometry has one and n_tokens > 0). */
uint64_t fg_sfile_size(const fg_kv_geometry *geo, int n_tokens, int n_pending, uint32_t meta_len);
/* The same with state_bytes of state (0 or geo->seq_bytes; ignored for version 2). */
uint64_t fg_sfile_size_with(const fg_kv_geometry *geo, int n_tokens, int n_pending, uint32_t meta_len,
                            size_t state_bytes);

/* The largest file the reader accepts for this engine. */
uint64_t fg_sfile_max_size(const fg_sfile_expect *ex);

/* Validates a whole file (buf[0..len)). Checks, in order: length of the
 * header and magic (FG_ERR_SESSION_TRUNCATED / _CORRUPT), format version
 * (_VERSION; version 3 also its layout kind), sizes and the first token's
 * position against the engine's bounds (_CORRUPT) and against len (_TRUNCATED when short, _CORRUPT when
 * long), checksum (_CORRUPT), model identity, architecture and geometry
 * (_MODEL), KV cache format, row, page and state sizes and the file version
 * the engine's layout needs (_VERSION), the state's token count, token ids
 * and the tenant and file names (_CORRUPT). So a bit flip anywhere is
 * _CORRUPT (in the version or layout field: _VERSION), while an intact file
 * from another model, architecture or format gets its own code. */
fg_err fg_sfile_parse(const uint8_t *buf, size_t len, const fg_sfile_expect *ex, fg_sfile_view *v, fg_diag *diag);

/* A parsed file is the one of tenant/name: FG_OK, else FG_ERR_SESSION_CORRUPT
 * naming both (a file copied or renamed over another's). */
fg_err fg_sfile_check_owner(const fg_sfile_view *v, const char *tenant, const char *name, fg_diag *diag);

/* Token i of a parsed file. */
int32_t fg_sfile_token(const fg_sfile_view *v, int i);

/* Copies the rows of tokens [0, n) of a parsed file into a sequence's pages
 * (reserved for at least n tokens). */
void fg_sfile_copy_rows(const fg_sfile_view *v, const fg_kv_geometry *geo, const fg_kv_seq *q, int n);

/* The stored row of token t (< n_tokens) in layer il of a parsed version 2 file. */
const uint8_t *fg_sfile_row(const fg_sfile_view *v, const fg_kv_geometry *geo, int il, int t);

/* Page k (< ceil(n_tokens / 64)) of a parsed version 3 file, page_bytes long. */
const uint8_t *fg_sfile_page(const fg_sfile_view *v, const fg_kv_geometry *geo, int k);

/* Reads a whole file into a malloc'd buffer (the caller frees it). Errors:
 * FG_ERR_NOT_FOUND (no such file), FG_ERR_SESSION_CORRUPT (larger than
 * max_bytes), FG_ERR_IO, FG_ERR_NOMEM. */
fg_err fg_sfile_read(const char *path, uint64_t max_bytes, uint8_t **buf, size_t *len, fg_diag *diag);

/* What to write: the history, the blob, and the pages holding its rows. */
typedef struct fg_sfile_content {
    const char *model_identity;
    const char *arch;            /* version 3 (geo->seq_bytes != 0): the architecture's name */
    const char *tenant;          /* written into the header with the file's name */
    const fg_kv_geometry *geo;
    const int32_t *tokens;       /* [n_tokens + n_pending] */
    int n_tokens;
    int n_pending;
    const void *meta;
    uint32_t meta_len;
    uint8_t *const *pages;       /* [ceil(n_tokens / 64)], or NULL with rows */
    const uint8_t *rows;         /* instead of pages: v2 [n_tokens][n_layer][row_bytes], v3
                                    [ceil(n_tokens / 64)][page_bytes], as in a file */
    const uint8_t *state;        /* v3: [geo->seq_bytes] of state, or NULL for none */
    int first_token;             /* v3: the sequence position of tokens[0] (0 but in a page file) */
} fg_sfile_content;

/* Writes <dir>/<name>.fgs atomically (version 2, or 3 where geo has state): <name>.fgs.tmp, fsync, rename, fsync
 * of dir; the old file stays whole until the rename. Creates dir when
 * missing. The header names c->tenant and name. Errors: FG_ERR_DISK_FULL
 * (ENOSPC, EDQUOT, EFBIG), FG_ERR_IO; FG_ERR_INVALID_ARG (tenant or name not
 * 1..64 of [A-Za-z0-9_-]); on error the temp file is removed. */
fg_err fg_sfile_write(const char *dir, const char *name, const fg_sfile_content *c, fg_diag *diag);
/* The same with another file suffix (".fgp" for page files): <dir>/<name><suffix>. */
fg_err fg_sfile_write_as(const char *dir, const char *name, const char *suffix, const fg_sfile_content *c,
                         fg_diag *diag);

#endif
