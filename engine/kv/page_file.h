/* page_file.h: the on-disk form of one cold shared KV page (<key hex>.fgp in
 * <persist_dir>/<tenant>/pages/), written when the prefix cache lets a page
 * go under memory pressure and read back on a later miss of the same key.
 *
 * A page file is a session file (session_file.h: magic, version, model
 * identity, KV format, geometry, checksum, atomic write) of exactly
 * FG_KV_PAGE_TOKENS tokens with KV, no pending tokens, and a meta blob of
 * FG_PFILE_META_BYTES:
 *     0 magic "FGPAGE\0\0"   8 u64 key   16 u64 previous key   24 u64 tenant salt
 * A cache with per-sequence state (deepseek4: version 3) holds its one page
 * as stored, the header's first token is the page's position in its
 * sequence, and the last page of a unit of sharing (kv_store.h,
 * share_tokens) may carry the prefix cache's snapshot of the state there as
 * the file's state (its token count: position + 64, which the session
 * reader checks), so the page and its snapshot are one checksummed file:
 * read back together or refused together. Version 2 files (deepseek2) hold
 * rows and never a state, as before.
 *
 * The session reader validates everything but the page's own identity,
 * which fg_pfile_check adds: the key must be the chained hash of (previous
 * key, salt, the 64 tokens), the salt the tenant's, the key the one the
 * file is named for, and in version 3 the position the one the reader's
 * chain puts the page at, with a state only at a unit's end.
 *
 * Thread safety: pure functions.
 */
#ifndef FG_PAGE_FILE_H
#define FG_PAGE_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/kv/session_file.h"

#define FG_PFILE_META_BYTES 32
#define FG_PFILE_SUFFIX ".fgp"

/* The meta blob of a page file. */
void fg_pfile_meta(uint8_t out[FG_PFILE_META_BYTES], uint64_t key, uint64_t prev, uint64_t tenant_salt);

/* Checks that a parsed session file v (of an engine with geometry geo) is
 * the page file of key for the tenant with this salt, for the page whose
 * first token is at position at (a multiple of 64); on success *prev is its
 * previous key. Errors: FG_ERR_SESSION_CORRUPT (not a page file, wrong key,
 * wrong tenant, another position, a state on a page that ends no unit). */
fg_err fg_pfile_check(const fg_sfile_view *v, const fg_kv_geometry *geo, uint64_t key, uint64_t tenant_salt, int at,
                      uint64_t *prev, fg_diag *diag);

/* The file size of one page for this geometry, with a snapshot of the
 * state (geometries with state only) or without. */
uint64_t fg_pfile_size(const fg_kv_geometry *geo, bool snapshot);

/* Writes the 16 lower-case hex digits of key and a NUL into out[17]. */
void fg_pfile_name(uint64_t key, char out[17]);
/* Parses a file name "<16 hex>.fgp" into *key. Returns false for any other name. */
bool fg_pfile_parse_name(const char *file_name, uint64_t *key);

#endif
