/* kv_store.h: the paged latent KV cache: a fixed pool of pages sized from a
 * memory budget, and per-sequence page tables.
 *
 * A page holds FG_KV_PAGE_TOKENS (64) tokens for every layer; its layout is the
 * one kernels/cpu/mla_attn.h reads. Each row stores only the latent (kv_lora)
 * and the RoPE key (n_rope), in the chosen format.
 *
 * Ownership: a page is owned by reference count; a sequence's page table holds
 * one reference per page, and the prefix cache, forks and save snapshots add
 * more holders. A page with more than one holder is read-only: a sequence
 * that must write it copies it first (fg_kv_seq_make_writable).
 *
 * Each page is charged to an owner (the engine's tenant index), so resident
 * bytes per tenant are counted once per page however many hold it.
 *
 * Thread safety: a store and its sequences belong to one thread (the engine's
 * step thread); the counters may be read from any thread.
 */
#ifndef FG_KV_STORE_H
#define FG_KV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "config/fg_error.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/mla_attn.h"

/* The cache layout of a model and format, from its architecture
 * (engine/model/arch.h). The store needs only the row, page and sequence
 * sizes; kv_lora and n_rope say how deepseek2's attention reads a row. */
typedef struct fg_kv_geometry {
    fg_kv_format format;
    int n_layer;
    int kv_lora;
    int n_rope;
    size_t latent_bytes;     /* stored bytes of the latent segment of one row */
    size_t row_bytes;        /* latent + rope segments: one token, one layer */
    size_t page_bytes;       /* FG_KV_PAGE_TOKENS * n_layer * row_bytes */
    size_t bytes_per_token;  /* n_layer * row_bytes */
    size_t seq_bytes;        /* what a sequence holds besides its pages, in fg_kv_seq.state (deepseek2: nothing) */
    int share_tokens;        /* the unit of sharing, a multiple of FG_KV_PAGE_TOKENS (0: one page): a row
                                written for a token may land in any page of that token's unit (deepseek4: 128,
                                a 128-ratio row spans two pages and is written when its block closes), so
                                pages are final, shareable and copied on write per unit, and a state snapshot
                                at a unit boundary is exact (every compressor block closed there) */
} fg_kv_geometry;

/* geo->share_tokens, or FG_KV_PAGE_TOKENS where it is 0. */
static inline int fg_kv_share_tokens(const fg_kv_geometry *geo)
{
    return geo->share_tokens > 0 ? geo->share_tokens : FG_KV_PAGE_TOKENS;
}


typedef struct fg_kv_store fg_kv_store_t;

/* Reserves address space for budget_bytes / page_bytes pages (touched lazily).
 * Errors: FG_ERR_INVALID_ARG (budget below one page), FG_ERR_NOMEM. */
fg_err fg_kv_store_create(const fg_kv_geometry *geo, size_t budget_bytes, fg_kv_store_t **out, fg_diag *diag);
void fg_kv_store_destroy(fg_kv_store_t *s);

const fg_kv_geometry *fg_kv_store_geometry(const fg_kv_store_t *s);
size_t fg_kv_store_pages_total(const fg_kv_store_t *s);
size_t fg_kv_store_pages_free(const fg_kv_store_t *s);
/* Pages a sequence's state stands for (ceil(seq_bytes / page_bytes); 0 without
 * state): held off the pool while the sequence has its state, so admission
 * and the owners' counts see the state as pages; its memory is the
 * sequence's own allocation, the held pages stay untouched. */
size_t fg_kv_store_state_pages(const fg_kv_store_t *s);
/* Pages held for states now (in use, not free, never resident). */
size_t fg_kv_store_pages_held(const fg_kv_store_t *s);
/* A copy of a sequence's state (seq_bytes) that belongs to no sequence (the
 * prefix cache's snapshots), holding fg_kv_store_state_pages pages off the
 * pool charged to owner like a sequence's state. NULL when the pool has too
 * few free pages or memory is short. */
uint8_t *fg_kv_state_copy(fg_kv_store_t *s, const uint8_t *state, int owner);
/* Frees such a copy and returns its pages to the pool (owner as at the copy). */
void fg_kv_state_free(fg_kv_store_t *s, uint8_t *copy, int owner);

/* The index in [0, fg_kv_store_pages_total) of a page of this store: a backend
 * keeping the resident copy of each page elsewhere (GPU memory) keys it by this. */
size_t fg_kv_store_page_index(const fg_kv_store_t *s, const uint8_t *page);


#define FG_KV_MAX_OWNERS 4096

/* A page with one reference charged to owner 0, or NULL when the pool is empty. */
uint8_t *fg_kv_page_alloc(fg_kv_store_t *s);
/* The same, charged to owner (0..FG_KV_MAX_OWNERS-1). */
uint8_t *fg_kv_page_alloc_for(fg_kv_store_t *s, int owner);
/* Holders of a page. */
uint32_t fg_kv_page_refs(const fg_kv_store_t *s, const uint8_t *page);
/* Pages in use charged to owner. */
size_t fg_kv_owner_pages(const fg_kv_store_t *s, int owner);
/* Pages in use with more than one holder (a scan of the pool: for stats). */
size_t fg_kv_pages_shared(const fg_kv_store_t *s);
void fg_kv_page_retain(fg_kv_store_t *s, uint8_t *page);
/* Drops one reference; the page returns to the pool at zero. */
void fg_kv_page_release(fg_kv_store_t *s, uint8_t *page);

/* One sequence's cache: its page table and length. */
typedef struct fg_kv_seq {
    uint8_t **pages;   /* [cap_pages]; the first n_pages hold pages */
    int n_pages;
    int cap_pages;     /* grows by doubling as the sequence grows */
    int n_tokens;      /* rows written */
    int max_tokens;
    int owner;         /* pages allocated for it are charged to this owner */
    uint8_t *state;    /* geo->seq_bytes of per-sequence cache state (the architecture's: deepseek4's
                          window rings and open compressor blocks), zeroed at allocation by the first
                          fg_kv_seq_reserve, which also takes fg_kv_store_state_pages pages off the pool
                          for it (charged to owner, so the budget counts it); NULL when the geometry has
                          none */
    int state_owner;   /* the owner its state pages are charged to */
} fg_kv_seq;

/* An empty sequence of at most max_tokens tokens; allocates nothing. Always FG_OK. */
fg_err fg_kv_seq_init(fg_kv_seq *q, int max_tokens);
/* Releases every page and the table. */
void fg_kv_seq_free(fg_kv_store_t *s, fg_kv_seq *q);
/* Frees the state of a sequence truncated to 0 and returns its pages to the
 * pool (a spilled session: the next fg_kv_seq_reserve allocates it zeroed
 * again). No-op without state. */
void fg_kv_seq_drop_state(fg_kv_store_t *s, fg_kv_seq *q);
/* Makes sure pages exist for n_tokens rows (and the state, first). Errors:
 * FG_ERR_CONTEXT_FULL (past max_tokens), FG_ERR_KV_FULL (pool empty, or too
 * few pages for the state; pages allocated so far are kept),
 * FG_ERR_NOMEM (the page table could not grow). */
fg_err fg_kv_seq_reserve(fg_kv_store_t *s, fg_kv_seq *q, int n_tokens);
/* Drops rows from n_tokens on (and pages no longer needed). The per-sequence
 * state is not rewound: an architecture with state refuses to continue a
 * sequence cut anywhere but at 0 (deepseek4: FG_ERR_STATE). */
void fg_kv_seq_truncate(fg_kv_store_t *s, fg_kv_seq *q, int n_tokens);
/* Copy-on-write: makes the pages that writing row t can touch private to q
 * (copies those another holder shares): the page holding row t and, where
 * share_tokens spans pages, the earlier pages of t's unit (deepseek4 writes
 * a 128-ratio row into the page before t's when t closes its block). Pages
 * past q's are skipped. Errors: FG_ERR_KV_FULL (no page for a copy; the
 * pages copied so far stay copied, which changes no content). */
fg_err fg_kv_seq_make_writable(fg_kv_store_t *s, fg_kv_seq *q, int t);
/* The first page that writing row t can touch (kv_seq_make_writable). */
static inline int fg_kv_first_written_page(const fg_kv_geometry *geo, int t)
{
    const int unit = fg_kv_share_tokens(geo);
    return t / unit * (unit / FG_KV_PAGE_TOKENS);
}
/* Makes the empty dst hold src's first n_tokens rows by sharing its pages;
 * with per-sequence state, also a copy of src's state (charged to dst's
 * owner), which matches only src's whole length. Errors: FG_ERR_NOMEM (page
 * table, state), FG_ERR_CONTEXT_FULL (n_tokens past dst's max),
 * FG_ERR_UNSUPPORTED (state, and n_tokens is not src's length: a state
 * cannot be cut back), FG_ERR_KV_FULL (no pages for dst's state). */
fg_err fg_kv_seq_share(fg_kv_store_t *s, fg_kv_seq *dst, const fg_kv_seq *src, int n_tokens);
/* Copies state (seq_bytes, a snapshot taken with fg_kv_state_copy) into q's
 * state, allocating that first (as fg_kv_seq_reserve does); the caller sets
 * q->n_tokens to the length the snapshot matches. Errors: FG_ERR_KV_FULL (too
 * few pages for the state), FG_ERR_NOMEM. */
fg_err fg_kv_seq_set_state(fg_kv_store_t *s, fg_kv_seq *q, const uint8_t *state);
/* Puts page (retained by the caller for q) at index idx == q->n_pages, or
 * replaces the page there (released). Used to attach prefix-cache hits. */
void fg_kv_seq_set_page(fg_kv_store_t *s, fg_kv_seq *q, int idx, uint8_t *page);
/* Grows q's page table to hold n_pages. Errors: FG_ERR_NOMEM. */
fg_err fg_kv_seq_grow_table(fg_kv_seq *q, int n_pages);

/* Address of the row of token t in layer il. */
static inline uint8_t *fg_kv_row(const fg_kv_geometry *geo, const fg_kv_seq *q, int il, int t)
{
    return q->pages[t / FG_KV_PAGE_TOKENS] + ((size_t)il * FG_KV_PAGE_TOKENS + (size_t)(t % FG_KV_PAGE_TOKENS)) * geo->row_bytes;
}

#endif
