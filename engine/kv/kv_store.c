/* kv_store.c: page pool (one anonymous mapping, a free stack, reference
 * counts) and sequence page tables. */
#include "engine/kv/kv_store.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct fg_kv_store {
    fg_kv_geometry geo;
    uint8_t *base;         /* n_pages * page_bytes, mapped with MAP_NORESERVE */
    size_t map_bytes;
    size_t n_pages;
    uint32_t *refs;        /* [n_pages] */
    uint16_t *owner;       /* [n_pages] owner of a page in use */
    size_t owner_pages[FG_KV_MAX_OWNERS];
    uint32_t *free_stack;  /* [n_pages] page indices */
    size_t n_free;
    /* Pages standing for sequences' state (geo.seq_bytes, which lives in the
     * sequence's own allocation): taken off the free stack so the budget and
     * the owners count the state, never touched (the mapping stays unbacked). */
    uint32_t *held_stack;  /* [n_pages] */
    size_t n_held;
    size_t state_pages;    /* held per sequence with state: ceil(seq_bytes / page_bytes) */
};

fg_err fg_kv_store_create(const fg_kv_geometry *geo, size_t budget_bytes, fg_kv_store_t **out, fg_diag *diag)
{
    *out = NULL;
    size_t n = geo->page_bytes ? budget_bytes / geo->page_bytes : 0;
    if (n == 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "KV budget %zu bytes is below one page (%zu bytes)", budget_bytes,
                           geo->page_bytes);
    if (n > UINT32_MAX)
        n = UINT32_MAX;
    fg_kv_store_t *s = calloc(1, sizeof *s);
    if (!s)
        return fg_diag_set(diag, FG_ERR_NOMEM, "kv store: out of memory");
    s->geo = *geo;
    s->n_pages = n;
    s->map_bytes = n * geo->page_bytes;
    s->refs = calloc(n, sizeof *s->refs);
    s->owner = calloc(n, sizeof *s->owner);
    s->free_stack = malloc(n * sizeof *s->free_stack);
    s->held_stack = malloc(n * sizeof *s->held_stack);
    s->state_pages = (geo->seq_bytes + geo->page_bytes - 1) / geo->page_bytes;
    void *base = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!s->refs || !s->owner || !s->free_stack || !s->held_stack || base == MAP_FAILED) {
        if (base != MAP_FAILED)
            munmap(base, s->map_bytes);
        free(s->refs);
        free(s->owner);
        free(s->free_stack);
        free(s->held_stack);
        free(s);
        return fg_diag_set(diag, FG_ERR_NOMEM, "kv store: cannot reserve %zu bytes", n * geo->page_bytes);
    }
    s->base = base;
    /* Lowest page index on top of the stack, so a fresh store fills from the start. */
    for (size_t i = 0; i < n; i++)
        s->free_stack[i] = (uint32_t)(n - 1 - i);
    s->n_free = n;
    *out = s;
    return FG_OK;
}

size_t fg_kv_store_page_index(const fg_kv_store_t *s, const uint8_t *page)
{
    return (size_t)(page - s->base) / s->geo.page_bytes;
}

void fg_kv_store_destroy(fg_kv_store_t *s)
{
    if (!s)
        return;
    munmap(s->base, s->map_bytes);
    free(s->refs);
    free(s->owner);
    free(s->free_stack);
    free(s->held_stack);
    free(s);
}

const fg_kv_geometry *fg_kv_store_geometry(const fg_kv_store_t *s) { return &s->geo; }
size_t fg_kv_store_pages_total(const fg_kv_store_t *s) { return s->n_pages; }
size_t fg_kv_store_pages_free(const fg_kv_store_t *s) { return s->n_free; }
size_t fg_kv_store_state_pages(const fg_kv_store_t *s) { return s->state_pages; }
size_t fg_kv_store_pages_held(const fg_kv_store_t *s) { return s->n_held; }

static size_t page_index(const fg_kv_store_t *s, const uint8_t *page)
{
    return (size_t)(page - s->base) / s->geo.page_bytes;
}

/* An owner index in range (others are charged to owner 0). */
static int owner_of(int owner) { return owner >= 0 && owner < FG_KV_MAX_OWNERS ? owner : 0; }

uint8_t *fg_kv_page_alloc_for(fg_kv_store_t *s, int owner)
{
    if (s->n_free == 0)
        return NULL;
    owner = owner_of(owner);
    uint32_t i = s->free_stack[--s->n_free];
    s->refs[i] = 1;
    s->owner[i] = (uint16_t)owner;
    s->owner_pages[owner]++;
    uint8_t *page = s->base + (size_t)i * s->geo.page_bytes;
    /* A cache with state writes its pages sparsely (compressed rows as blocks
     * close) and its session files hold whole pages: no byte of a previous
     * holder, perhaps another tenant, may reach a file. */
    if (s->geo.seq_bytes)
        memset(page, 0, s->geo.page_bytes);
    return page;
}

uint8_t *fg_kv_page_alloc(fg_kv_store_t *s) { return fg_kv_page_alloc_for(s, 0); }

uint32_t fg_kv_page_refs(const fg_kv_store_t *s, const uint8_t *page) { return s->refs[page_index(s, page)]; }

size_t fg_kv_owner_pages(const fg_kv_store_t *s, int owner)
{
    return owner >= 0 && owner < FG_KV_MAX_OWNERS ? s->owner_pages[owner] : 0;
}

size_t fg_kv_pages_shared(const fg_kv_store_t *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_pages; i++)
        n += s->refs[i] > 1;
    return n;
}

void fg_kv_page_retain(fg_kv_store_t *s, uint8_t *page)
{
    s->refs[page_index(s, page)]++;
}

void fg_kv_page_release(fg_kv_store_t *s, uint8_t *page)
{
    size_t i = page_index(s, page);
    if (s->refs[i] == 0)
        return; /* double release: a bug, but never corrupt the free stack */
    if (--s->refs[i] == 0) {
        s->owner_pages[s->owner[i]]--;
        s->free_stack[s->n_free++] = (uint32_t)i;
    }
}

/* Takes the pages standing for one state off the pool (the caller checked
 * that they are free), charged to owner. */
static void hold_state_pages(fg_kv_store_t *s, int owner)
{
    for (size_t i = 0; i < s->state_pages; i++)
        s->held_stack[s->n_held++] = s->free_stack[--s->n_free];
    s->owner_pages[owner] += s->state_pages;
}

static void unhold_state_pages(fg_kv_store_t *s, int owner)
{
    for (size_t i = 0; i < s->state_pages; i++)
        s->free_stack[s->n_free++] = s->held_stack[--s->n_held];
    s->owner_pages[owner] -= s->state_pages;
}

fg_err fg_kv_seq_init(fg_kv_seq *q, int max_tokens)
{
    memset(q, 0, sizeof *q);
    q->max_tokens = max_tokens;
    return FG_OK; /* the page table grows with the sequence: an empty session costs nothing */
}

void fg_kv_seq_free(fg_kv_store_t *s, fg_kv_seq *q)
{
    fg_kv_seq_truncate(s, q, 0);
    free(q->pages);
    q->pages = NULL;
    q->cap_pages = 0;
    fg_kv_seq_drop_state(s, q);
}

void fg_kv_seq_drop_state(fg_kv_store_t *s, fg_kv_seq *q)
{
    if (q->state)
        unhold_state_pages(s, q->state_owner);
    free(q->state);
    q->state = NULL;
}

/* The state and the pages standing for it, all or nothing. */
static fg_err state_alloc(fg_kv_store_t *s, fg_kv_seq *q)
{
    if (s->n_free < s->state_pages)
        return FG_ERR_KV_FULL;
    if (!(q->state = calloc(1, s->geo.seq_bytes)))
        return FG_ERR_NOMEM;
    q->state_owner = owner_of(q->owner);
    hold_state_pages(s, q->state_owner);
    return FG_OK;
}

uint8_t *fg_kv_state_copy(fg_kv_store_t *s, const uint8_t *state, int owner)
{
    owner = owner_of(owner);
    uint8_t *copy = s->geo.seq_bytes && s->n_free >= s->state_pages ? malloc(s->geo.seq_bytes) : NULL;
    if (!copy)
        return NULL;
    memcpy(copy, state, s->geo.seq_bytes);
    hold_state_pages(s, owner);
    return copy;
}

void fg_kv_state_free(fg_kv_store_t *s, uint8_t *copy, int owner)
{
    if (!copy)
        return;
    unhold_state_pages(s, owner_of(owner));
    free(copy);
}

fg_err fg_kv_seq_set_state(fg_kv_store_t *s, fg_kv_seq *q, const uint8_t *state)
{
    fg_err e;
    if (!q->state && (e = state_alloc(s, q)) != FG_OK)
        return e;
    memcpy(q->state, state, s->geo.seq_bytes);
    return FG_OK;
}

fg_err fg_kv_seq_grow_table(fg_kv_seq *q, int need)
{
    if (need > q->cap_pages) {
        int cap = q->cap_pages ? q->cap_pages : 4;
        while (cap < need)
            cap *= 2;
        uint8_t **pages = realloc(q->pages, (size_t)cap * sizeof *pages);
        if (!pages)
            return FG_ERR_NOMEM;
        q->pages = pages;
        q->cap_pages = cap;
    }
    return FG_OK;
}

fg_err fg_kv_seq_reserve(fg_kv_store_t *s, fg_kv_seq *q, int n_tokens)
{
    if (n_tokens > q->max_tokens)
        return FG_ERR_CONTEXT_FULL;
    fg_err e;
    if (s->geo.seq_bytes && !q->state && (e = state_alloc(s, q)) != FG_OK)
        return e;
    int need = (n_tokens + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    if (fg_kv_seq_grow_table(q, need) != FG_OK)
        return FG_ERR_NOMEM;
    while (q->n_pages < need) {
        uint8_t *p = fg_kv_page_alloc_for(s, q->owner);
        if (!p)
            return FG_ERR_KV_FULL;
        q->pages[q->n_pages++] = p;
    }
    return FG_OK;
}

void fg_kv_seq_truncate(fg_kv_store_t *s, fg_kv_seq *q, int n_tokens)
{
    if (n_tokens < q->n_tokens)
        q->n_tokens = n_tokens;
    int keep = (n_tokens + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    while (q->n_pages > keep) {
        q->n_pages--;
        fg_kv_page_release(s, q->pages[q->n_pages]);
        q->pages[q->n_pages] = NULL;
    }
}

fg_err fg_kv_seq_make_writable(fg_kv_store_t *s, fg_kv_seq *q, int t)
{
    if (t < 0)
        return FG_OK;
    for (int idx = fg_kv_first_written_page(&s->geo, t); idx <= t / FG_KV_PAGE_TOKENS && idx < q->n_pages; idx++) {
        if (s->refs[page_index(s, q->pages[idx])] <= 1)
            continue;
        uint8_t *copy = fg_kv_page_alloc_for(s, s->owner[page_index(s, q->pages[idx])]);
        if (!copy)
            return FG_ERR_KV_FULL;
        memcpy(copy, q->pages[idx], s->geo.page_bytes);
        fg_kv_page_release(s, q->pages[idx]);
        q->pages[idx] = copy;
    }
    return FG_OK;
}

fg_err fg_kv_seq_share(fg_kv_store_t *s, fg_kv_seq *dst, const fg_kv_seq *src, int n_tokens)
{
    if (n_tokens > dst->max_tokens)
        return FG_ERR_CONTEXT_FULL;
    if (s->geo.seq_bytes && (n_tokens != src->n_tokens || (n_tokens && !src->state)))
        return FG_ERR_UNSUPPORTED; /* the state (window rings, open blocks) matches src's whole length only */
    int need = (n_tokens + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS;
    if (fg_kv_seq_grow_table(dst, need) != FG_OK)
        return FG_ERR_NOMEM;
    fg_err e;
    if (s->geo.seq_bytes && n_tokens && !dst->state && (e = state_alloc(s, dst)) != FG_OK)
        return e;
    if (s->geo.seq_bytes && n_tokens)
        memcpy(dst->state, src->state, s->geo.seq_bytes);
    fg_kv_seq_truncate(s, dst, 0);
    for (int i = 0; i < need; i++) {
        fg_kv_page_retain(s, src->pages[i]);
        dst->pages[i] = src->pages[i];
    }
    dst->n_pages = need;
    dst->n_tokens = n_tokens;
    return FG_OK;
}

void fg_kv_seq_set_page(fg_kv_store_t *s, fg_kv_seq *q, int idx, uint8_t *page)
{
    if (idx < q->n_pages) {
        fg_kv_page_release(s, q->pages[idx]);
        q->pages[idx] = page;
    } else {
        q->pages[q->n_pages++] = page;
    }
}
