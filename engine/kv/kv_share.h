/* kv_share.h: the state prefix sharing (kv_share.c) owns: in the engine,
 * the prefix cache; in each session, the chained keys of its full pages,
 * what it offered to the cache, and a fork in progress. Part of
 * engine_internal.h; not for use outside engine/.
 *
 * Locking: [mu] fields are guarded by engine->mu; [step] fields belong to the
 * step thread.
 */
#ifndef FG_KV_SHARE_H
#define FG_KV_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "engine/engine.h"
#include "engine/kv/prefix_cache.h"

/* A session's part. */
typedef struct fg_session_share {
    uint64_t *phash;                /* [step] keys of its full pages [phash_cap] */
    int phash_n, phash_cap;         /* [step] valid keys, room */
    int reg_n;                      /* [step] full pages offered to the prefix cache */
    int miss_at;                    /* [step] token count of the last prefix miss (-1 none) */
    int snap_want;                  /* [step] state geometries: a unit boundary where the cache has the
                                       pages but no snapshot, which this session's prefill takes (0 none) */
    int snap_at;                    /* [step] the boundary this step's chunk was cut at for a snapshot (0 none) */
    int load_k;                     /* [step] state geometries: the page a wait for page files stopped at (-1
                                       none); it reads them again only past it, so loads that push each
                                       other out of a small pool end in computing */
    /* a fork (the forking thread waits on e->done_cv) */
    fg_session_t *fork_src;         /* [mu] */
    bool fork_done;                 /* [mu] */
    fg_err fork_err;                /* [mu] */
} fg_session_share;

/* The engine's part. */
typedef struct fg_engine_share {
    fg_prefix_cache_t *pc;          /* [step] NULL when prefix_cache is off */
} fg_engine_share;

/* kv_share.c */
/* Makes the keys of s's pages 0..upto valid (from its history); false when
 * the history is shorter or out of memory [step]. */
bool fg_share_page_keys(fg_engine_t *e, fg_session_t *s, int upto);
/* Takes prefix-cache hits for the next full pages of s's input. Returns
 * true when the next page is being loaded from its page file: the caller
 * may wait (it is woken when done) or compute it [mu]. */
bool fg_share_attach_hits(fg_engine_t *e, fg_session_t *s);
/* The key of the page a prefill of s computes next, when it is a full page
 * starting at a page boundary that the prefix cache could share; false
 * otherwise [mu]. */
bool fg_share_next_key(fg_engine_t *e, fg_session_t *s, uint64_t *key);
/* The tokens of s's next prefill chunk: want (of left input tokens), cut
 * where the cache should get a state snapshot (state geometries: the last
 * unit boundary of the input, or snap_want) [mu]. */
int fg_share_chunk(fg_engine_t *e, fg_session_t *s, int left, int want);
/* Offers s's newly final pages to the prefix cache, and its state at a
 * snapshot boundary [mu]. */
void fg_share_register(fg_engine_t *e, fg_session_t *s);
/* Frees state snapshots of pages that sessions still hold, least recently
 * used first, until need pages are free (after the cold pages went) [mu]. */
void fg_share_drop_snapshots(fg_engine_t *e, size_t need);
/* After s's cache was cut to n tokens: forgets keys of pages past it. */
void fg_share_truncated(fg_session_t *s, int n_tokens);
/* Makes a fork of src in dst (both adopted, src idle) [mu]. */
fg_err fg_share_fork(fg_engine_t *e, fg_session_t *dst, fg_session_t *src);

#endif
