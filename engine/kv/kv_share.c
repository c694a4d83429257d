/* kv_share.c: prefix sharing and forks in the serving engine: a session's
 * chained page keys, prefix-cache hits for its input, listing of its full
 * pages, and forks that share a source's pages copy-on-write. Step thread,
 * under engine->mu (see engine_internal.h).
 *
 * A cache with per-sequence state (deepseek4) shares in units of
 * share_tokens (kv_store.h: 128 tokens, two pages): only pages of whole
 * units are listed (a 128-ratio row lands in a unit's first page when its
 * last token arrives), and a hit takes pages up to the deepest unit boundary
 * whose entry also has a state snapshot, and copies that into the session's
 * state; entries that left memory come back from their page files first
 * (with the snapshot where it went with its page, page_tier.c). Snapshots
 * are taken where a prefill chunk is cut for them: at the
 * last unit boundary of a session's input (the next session with that whole
 * prompt, or a client that sends the conversation again, resumes there) and
 * at the deepest boundary where a hit found the pages but no snapshot (the
 * point where sessions with one system prompt part: the third and later
 * sessions resume there). docs/engine.md has the memory accounting. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* Room for n page keys; the array grows by doubling, so a short session holds a short one. */
static bool phash_room(const fg_engine_t *e, fg_session_t *s, int n)
{
    if (n <= s->share.phash_cap)
        return true;
    int cap = s->share.phash_cap ? s->share.phash_cap : 8, most = e->n_ctx / FG_KV_PAGE_TOKENS + 2;
    while (cap < n)
        cap *= 2;
    if (cap > most)
        cap = most > n ? most : n;
    uint64_t *p = realloc(s->share.phash, (size_t)cap * sizeof *p);
    if (!p)
        return false;
    s->share.phash = p;
    s->share.phash_cap = cap;
    return true;
}

bool fg_share_page_keys(fg_engine_t *e, fg_session_t *s, int upto)
{
    if (!phash_room(e, s, upto + 2))
        return false;
    uint64_t salt = e->tier.tenants[s->tenant_ix].salt;
    while (s->share.phash_n <= upto) {
        int k = s->share.phash_n;
        if ((k + 1) * FG_KV_PAGE_TOKENS > (int)s->hist.n)
            return false;
        s->share.phash[k] = fg_page_key(k ? s->share.phash[k - 1] : 0, salt, s->hist.v + (size_t)k * FG_KV_PAGE_TOKENS);
        s->share.phash_n++;
    }
    return true;
}

/* The unit of sharing in tokens (kv_store.h). */
static int unit_tokens(const fg_engine_t *e) { return fg_kv_share_tokens(fg_kv_store_geometry(e->kv)); }

void fg_share_truncated(fg_session_t *s, int n_tokens)
{
    int full = n_tokens / FG_KV_PAGE_TOKENS;
    if (s->share.phash_n > full)
        s->share.phash_n = full;
    if (s->share.reg_n > full)
        s->share.reg_n = full;
}


/* Whether s's next input page is a whole page at a page boundary that a hit
 * could replace. A generating response keeps at least one input token to
 * evaluate: its logits are needed. */
static bool next_page_shareable(const fg_engine_t *e, const fg_session_t *s)
{
    const int keep = s->serve.resp.active && s->serve.resp.p.generate ? 1 : 0;
    return e->share.pc && !s->tier.on_disk && s->seq.n_tokens % FG_KV_PAGE_TOKENS == 0 && (int)s->hist.n == s->seq.n_tokens &&
           (int)s->todo.n >= FG_KV_PAGE_TOKENS + keep;
}

/* The chained key of s's next input page (next_page_shareable holds). */
static bool next_page_key(fg_engine_t *e, fg_session_t *s, uint64_t *prev, uint64_t *key)
{
    int k = s->seq.n_tokens / FG_KV_PAGE_TOKENS;
    if (!fg_share_page_keys(e, s, k - 1))
        return false; /* also allocates the key array */
    *prev = k ? s->share.phash[k - 1] : 0;
    *key = fg_page_key(*prev, e->tier.tenants[s->tenant_ix].salt, s->todo.v);
    return true;
}

bool fg_share_next_key(fg_engine_t *e, fg_session_t *s, uint64_t *key)
{
    uint64_t prev;
    return next_page_shareable(e, s) && next_page_key(e, s, &prev, key);
}

/* State geometries: the pages of whole units from s's position (a unit
 * boundary) to the deepest boundary with a snapshot, and the snapshot as
 * its state. When the walk stops at a page on disk, the page files from
 * there are read back (the pages and snapshots found so far are taken
 * first) and true says to wait for them, as for deepseek2's pages. */
static bool attach_unit_hits(fg_engine_t *e, fg_session_t *s)
{
    fg_response *r = &s->serve.resp;
    const int keep = r->active && r->p.generate ? 1 : 0;
    const int per = unit_tokens(e) / FG_KV_PAGE_TOKENS, k0 = s->seq.n_tokens / FG_KV_PAGE_TOKENS;
    const int avail = ((int)s->todo.n - keep) / FG_KV_PAGE_TOKENS;
    if (!e->share.pc || s->tier.on_disk || k0 % per || s->seq.n_tokens % FG_KV_PAGE_TOKENS ||
        (int)s->hist.n != s->seq.n_tokens || avail < per || s->share.miss_at == s->seq.n_tokens)
        return false;
    if ((k0 && !fg_share_page_keys(e, s, k0 - 1)) || !phash_room(e, s, k0 + avail + 1))
        return false;
    const uint64_t salt = e->tier.tenants[s->tenant_ix].salt;
    const double now = fg_clock_mono_s();
    const uint8_t *snap = NULL;
    int best = -1, matched = k0; /* last page of the deepest unit with a snapshot; pages of whole units found */
    uint64_t prev = k0 ? s->share.phash[k0 - 1] : 0, miss = 0;
    int k = k0;
    for (; k - k0 < avail; k++) {
        const int32_t *tk = s->todo.v + (size_t)(k - k0) * FG_KV_PAGE_TOKENS;
        const uint64_t key = fg_page_key(prev, salt, tk);
        e->stats.prefix_lookups++;
        if (!fg_prefix_cache_find(e->share.pc, key, prev, s->tenant_ix, tk, now)) {
            miss = key;
            break;
        }
        s->share.phash[k] = key; /* past phash_n until taken */
        prev = key;
        if ((k + 1) % per == 0) {
            matched = k + 1;
            const uint8_t *sn = fg_prefix_cache_snapshot(e->share.pc, key);
            if (sn) {
                best = k;
                snap = sn;
            }
        }
    }
    /* Past a page being read back, or one on disk past the last wait's stop (progress, or the pool is too
     * small to hold what the loads bring: then computed). */
    bool wait = false;
    if (k - k0 < avail && e->tier.persist)
        wait = k > s->share.load_k ? fg_ptier_fetch(e, s->tenant_ix, k * FG_KV_PAGE_TOKENS, prev,
                                                    s->todo.v + (size_t)(k - k0) * FG_KV_PAGE_TOKENS, avail - (k - k0))
                                   : fg_ptier_loading(e, s->tenant_ix, miss);
    s->share.load_k = wait ? k : -1;
    if (!wait) {
        if (matched > best + 1 && matched > k0)
            s->share.snap_want = matched * FG_KV_PAGE_TOKENS; /* its prefill leaves a snapshot there */
        s->share.miss_at = s->seq.n_tokens;
    }
    if (best < 0)
        return wait;
    const int add = (best + 1 - k0) * FG_KV_PAGE_TOKENS;
    if (fg_tokens_reserve(&s->hist, s->hist.n + add + 1) != 0 || fg_kv_seq_grow_table(&s->seq, best + 1) != FG_OK)
        return wait; /* out of memory: computed instead */
    /* The pages first: held by the session, they are spared when cold pages make room for its state. */
    for (int i = k0; i <= best; i++) {
        const int32_t *tk = s->todo.v + (size_t)(i - k0) * FG_KV_PAGE_TOKENS;
        uint8_t *page = fg_prefix_cache_find(e->share.pc, s->share.phash[i], i ? s->share.phash[i - 1] : 0,
                                             s->tenant_ix, tk, now);
        fg_kv_page_retain(e->kv, page);
        fg_kv_seq_set_page(e->kv, &s->seq, i, page);
    }
    fg_err err = fg_kv_seq_set_state(e->kv, &s->seq, snap);
    if (err == FG_ERR_KV_FULL) {
        fg_tier_drop_cold(e, fg_kv_store_state_pages(e->kv));
        snap = fg_prefix_cache_snapshot(e->share.pc, s->share.phash[best]); /* snapshots may have gone too */
        err = snap ? fg_kv_seq_set_state(e->kv, &s->seq, snap) : FG_ERR_KV_FULL;
    }
    if (err != FG_OK) {
        fg_kv_seq_truncate(e->kv, &s->seq, s->seq.n_tokens); /* no pages for the state: computed instead */
        return wait;
    }
    e->stats.prefix_hits += (uint64_t)(best + 1 - k0);
    s->seq.n_tokens += add;
    memcpy(s->hist.v + s->hist.n, s->todo.v, (size_t)add * sizeof *s->todo.v);
    s->hist.n += add;
    memmove(s->todo.v, s->todo.v + add, (size_t)(s->todo.n - add) * sizeof *s->todo.v);
    s->todo.n -= add;
    s->todo_sampled = false;
    s->share.phash_n = best + 1;
    s->share.reg_n = best + 1;
    s->share.miss_at = -1;
    if (r->active)
        r->cached_tokens += add;
    s->serve.length_snapshot = s->seq.n_tokens;
    s->tier.gen++;
    return wait;
}

bool fg_share_attach_hits(fg_engine_t *e, fg_session_t *s)
{
    fg_response *r = &s->serve.resp;
    const int keep = r->active && r->p.generate ? 1 : 0;
    if (fg_engine_seq_state(e))
        return attach_unit_hits(e, s);
    while (next_page_shareable(e, s) && s->share.miss_at != s->seq.n_tokens) {
        int k = s->seq.n_tokens / FG_KV_PAGE_TOKENS;
        uint64_t prev, key;
        if (!next_page_key(e, s, &prev, &key))
            return false;
        e->stats.prefix_lookups++;
        uint8_t *page = fg_prefix_cache_find(e->share.pc, key, prev, s->tenant_ix, s->todo.v, fg_clock_mono_s());
        if (!page) {
            /* Its page file (and those of the pages after it) may be loaded instead of computed. */
            if (e->tier.persist &&
                fg_ptier_fetch(e, s->tenant_ix, s->seq.n_tokens, prev, s->todo.v, (s->todo.n - keep) / FG_KV_PAGE_TOKENS))
                return true;
            s->share.miss_at = s->seq.n_tokens;
            return false;
        }
        if (fg_tokens_reserve(&s->hist, s->hist.n + FG_KV_PAGE_TOKENS + 1) != 0 ||
            fg_kv_seq_grow_table(&s->seq, k + 1) != FG_OK)
            return false;
        e->stats.prefix_hits++;
        fg_kv_page_retain(e->kv, page);
        fg_kv_seq_set_page(e->kv, &s->seq, k, page);
        s->seq.n_tokens += FG_KV_PAGE_TOKENS;
        memcpy(s->hist.v + s->hist.n, s->todo.v, FG_KV_PAGE_TOKENS * sizeof *s->todo.v);
        s->hist.n += FG_KV_PAGE_TOKENS;
        memmove(s->todo.v, s->todo.v + FG_KV_PAGE_TOKENS, (size_t)(s->todo.n - FG_KV_PAGE_TOKENS) * sizeof *s->todo.v);
        s->todo.n -= FG_KV_PAGE_TOKENS;
        s->todo_sampled = false;
        s->share.phash[k] = key;
        s->share.phash_n = k + 1;
        s->share.reg_n = k + 1;
        if (r->active)
            r->cached_tokens += FG_KV_PAGE_TOKENS; /* served from the cache, not computed */
        s->serve.length_snapshot = s->seq.n_tokens;
        s->tier.gen++;
    }
    return false;
}

int fg_share_chunk(fg_engine_t *e, fg_session_t *s, int left, int want)
{
    if (!e->share.pc || !fg_engine_seq_state(e) || s->tier.on_disk)
        return want;
    /* The input's last boundary that a session with the same input could take (it keeps a token to evaluate). */
    const int keep = s->serve.resp.active && s->serve.resp.p.generate ? 1 : 0;
    const int unit = unit_tokens(e), n = s->seq.n_tokens, last = (n + left - keep) / unit * unit;
    s->share.snap_at = 0;
    if (s->share.snap_want > n && s->share.snap_want <= n + want)
        s->share.snap_at = s->share.snap_want;
    else if (last > n && last <= n + want)
        s->share.snap_at = last;
    else
        return want;
    return s->share.snap_at - n;
}

void fg_share_register(fg_engine_t *e, fg_session_t *s)
{
    if (!e->share.pc || s->tier.on_disk)
        return;
    /* Pages of whole units only: deepseek4 still writes into a unit's first page until the unit is full. */
    const int unit = unit_tokens(e);
    int full = s->seq.n_tokens / unit * (unit / FG_KV_PAGE_TOKENS);
    if (full > (int)s->hist.n / FG_KV_PAGE_TOKENS)
        full = s->hist.n / FG_KV_PAGE_TOKENS;
    if (full <= 0 || (s->share.reg_n >= full && !s->share.snap_at) || !fg_share_page_keys(e, s, full - 1))
        return;
    double now = fg_clock_mono_s();
    for (int k = s->share.reg_n; k < full; k++)
        fg_prefix_cache_insert(e->share.pc, e->kv, s->share.phash[k], k ? s->share.phash[k - 1] : 0, s->tenant_ix,
                               s->hist.v + (size_t)k * FG_KV_PAGE_TOKENS, k * FG_KV_PAGE_TOKENS, s->seq.pages[k], now);
    if (s->share.reg_n < full)
        s->share.reg_n = full;
    /* The state where a chunk was cut for it, beside the listed page that
     * ends there (this session's, or an equal one another session listed). */
    if (s->seq.state && s->share.snap_at && s->seq.n_tokens == s->share.snap_at &&
        full * FG_KV_PAGE_TOKENS == s->seq.n_tokens &&
        fg_prefix_cache_find(e->share.pc, s->share.phash[full - 1], full > 1 ? s->share.phash[full - 2] : 0,
                             s->tenant_ix, s->hist.v + (size_t)(full - 1) * FG_KV_PAGE_TOKENS, now))
        fg_prefix_cache_set_snapshot(e->share.pc, e->kv, s->share.phash[full - 1], s->seq.state);
    if (s->share.snap_at && s->seq.n_tokens >= s->share.snap_at)
        s->share.snap_at = 0;
    if (s->share.snap_want && s->seq.n_tokens >= s->share.snap_want)
        s->share.snap_want = 0;
}

void fg_share_drop_snapshots(fg_engine_t *e, size_t need)
{
    static fg_evict_candidate cand[4096]; /* step thread only */
    if (!e->share.pc || fg_kv_store_pages_free(e->kv) >= need || !fg_prefix_cache_snapshot_count(e->share.pc))
        return;
    const int n = fg_prefix_cache_snapshots(e->share.pc, e->kv, cand, 4096, fg_clock_mono_s());
    fg_kv_evict_order(cand, n);
    for (int i = 0; i < n && fg_kv_store_pages_free(e->kv) < need; i++)
        fg_prefix_cache_drop_snapshot(e->share.pc, e->kv, cand[i].id);
}

/* ---- forks ---- */

fg_err fg_share_fork(fg_engine_t *e, fg_session_t *dst, fg_session_t *src)
{
    if (src->serve.resp.active || src->serve.respond_req || src->serve.responding)
        return FG_ERR_BUSY; /* its partial page is being written */
    const int n = src->hist.n;
    if (fg_tokens_reserve(&dst->hist, n + 1) != 0)
        return FG_ERR_NOMEM;
    if (src->tier.on_disk) {
        dst->tier.on_disk = true;
        strcpy(dst->tier.load_name, src->tier.load_name);
        dst->tier.load_kept = src->tier.load_kept; /* one more fork the kept file waits for */
    } else {
        fg_err err = fg_kv_seq_share(e->kv, &dst->seq, &src->seq, n);
        if (err == FG_ERR_KV_FULL) { /* no pages for the copy of the state: cold ones go first */
            fg_tier_drop_cold(e, fg_kv_store_state_pages(e->kv));
            err = fg_kv_seq_share(e->kv, &dst->seq, &src->seq, n);
        }
        if (err != FG_OK)
            return err;
    }
    if (n) /* an empty source has no array */
        memcpy(dst->hist.v, src->hist.v, (size_t)n * sizeof *dst->hist.v);
    dst->hist.n = n;
    if (src->share.phash_n > 0 && phash_room(e, dst, src->share.phash_n + 1)) {
        memcpy(dst->share.phash, src->share.phash, (size_t)src->share.phash_n * sizeof *dst->share.phash);
        dst->share.phash_n = src->share.phash_n;
    }
    dst->share.reg_n = src->share.reg_n;
    dst->serve.committed = n;
    /* The token the source's last response sampled is part of the conversation, not queued input. */
    if (src->todo_sampled && src->todo.n > 0 && fg_tokens_reserve(&dst->todo, 1) == 0) {
        dst->todo.v[0] = src->todo.v[0];
        dst->todo.n = 1;
        dst->todo_sampled = true;
        dst->serve.committed++;
    }
    dst->serve.length_snapshot = n;
    dst->tier.gen = 1;
    dst->tier.file_gen = 0;
    if (src->tier.meta_len && (dst->tier.meta = malloc(src->tier.meta_len))) {
        memcpy(dst->tier.meta, src->tier.meta, src->tier.meta_len);
        dst->tier.meta_len = src->tier.meta_len;
    }
    return FG_OK;
}
