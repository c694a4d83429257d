/* engine_serve.c: serving mode: the step thread, the sessions' output queues
 * and the thread-safe session calls (see engine.h for the contract and
 * engine_internal.h for which thread owns which field).
 *
 * A response is admitted when the KV pages for its whole run (history, new
 * input and max_tokens, capped at the context) can be reserved, oldest
 * request first; until then it waits and the owner gets one WAITING event.
 * Admitted responses never wait for memory again, so sessions cannot
 * deadlock each other over pages; unused reserved pages return at the end.
 *
 * One step: take requests (under the lock), choose decode tokens then prefill
 * chunks by deficit round robin over tenants (no lock), run one forward pass
 * for the whole batch (no lock), sample, then queue events (under the lock)
 * and call the wakeup callback. Nothing in a step allocates except growing a
 * session's token arrays when input arrives.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "engine/serve/stop.h"
#include "kernels/cpu/vecops.h"

#define SCHED_QUANTUM 16 /* tokens of credit per unit of tenant weight per DRR round */
#define EVENTS_PER_STEP 3 /* TOKEN, DONE and WAITING at most, per session and step */

/* The stats histogram bucket of v (fg_engine_stats): the smallest i with v <= 2^i, the last bucket above. */
static int pow2_bucket(double v)
{
    int i = 0;
    for (double bound = 1.0; i < FG_ENGINE_HIST_BUCKETS - 1 && v > bound; bound *= 2.0)
        i++;
    return i;
}


/* ---- output queue [mu] ---- */

static uint32_t text_room(const fg_engine_t *e)
{
    return FG_MAX_STOP_BYTES + (uint32_t)e->max_token_bytes;
}

static bool outq_has_room(const fg_engine_t *e, const fg_outq *q)
{
    if (!q->ev)
        return false;
    return q->ev_cap - q->ev_count >= EVENTS_PER_STEP && q->text_cap - q->text_count >= text_room(e);
}

static void mark_ready(fg_engine_t *e, fg_session_t *s)
{
    /* Not a freed one: the owner may free a session while its step runs
     * (unlocked), and must not hear of it again (its user pointer is gone). */
    if (!fg_list_linked(&s->serve.ready_link) && !s->serve.freed)
        fg_list_push_front(&e->serve.ready, &s->serve.ready_link);
}

/* Queues an event with text; room was checked before the step. */
static void outq_push(fg_engine_t *e, fg_session_t *s, fg_event ev, const char *text, uint32_t len)
{
    fg_outq *q = &s->serve.out;
    if (q->ev_count == q->ev_cap || q->text_cap - q->text_count < len)
        return; /* cannot happen: outq_has_room gates every session in a batch */
    ev.text_off = (q->text_head + q->text_count) % q->text_cap;
    ev.text_len = len;
    for (uint32_t i = 0; i < len; i++)
        q->text[(ev.text_off + i) % q->text_cap] = text[i];
    q->text_count += len;
    q->ev[(q->ev_head + q->ev_count) % q->ev_cap] = ev;
    q->ev_count++;
    mark_ready(e, s);
    e->serve.wake_owner = true;
}

/* ---- lists ---- */

void fg_serve_mark_dirty(fg_engine_t *e, fg_session_t *s)
{
    if (!fg_list_linked(&s->serve.dirty_link))
        fg_list_push_front(&e->serve.dirty, &s->serve.dirty_link);
    e->serve.work = true;
    pthread_cond_signal(&e->serve.work_cv);
}

static void mark_dirty(fg_engine_t *e, fg_session_t *s) { fg_serve_mark_dirty(e, s); }

static void free_session(fg_engine_t *e, fg_session_t *s)
{
    if (s->serve.adopted)
        fg_list_remove(&s->serve.all_link);
    if (fg_list_linked(&s->serve.ready_link))
        fg_list_remove(&s->serve.ready_link);
    if (s->tier.delete_file)
        fg_tier_remove_owned(e, s);
    fg_tier_release_load(e, s);
    if (s->serve.spec_state)
        fg_kv_state_free(e->kv, s->serve.spec_state, s->seq.state_owner);
    fg_session_dealloc(s);
}

/* Tokens whose KV the session holds, resident or on disk. */
static int cache_len(const fg_session_t *s)
{
    return s->tier.on_disk ? (int)s->hist.n : s->seq.n_tokens;
}

/* ---- responses [step, under mu where they queue events] ---- */

static int reserve_need(const fg_engine_t *e, const fg_session_t *s)
{
    long need = (long)cache_len(s) + s->todo.n + (s->serve.resp.p.generate ? s->serve.resp.p.max_tokens : 0);
    return need > e->n_ctx ? e->n_ctx : (int)need;
}

static void finish(fg_engine_t *e, fg_session_t *s, fg_finish why, fg_err err)
{
    fg_response *r = &s->serve.resp;
    /* Text held back for a possible stop string is released unless it stopped. */
    const char *text = why == FG_FINISH_STOP ? "" : r->hold;
    uint32_t len = why == FG_FINISH_STOP ? 0 : (uint32_t)r->hold_len;
    fg_event ev = {.type = FG_EVENT_DONE, .response_id = r->id, .finish = why, .error = err,
                   .usage = {.input_tokens = r->input_tokens, .cached_tokens = r->cached_tokens,
                             .output_tokens = r->generated, .draft_tokens = r->drafted,
                             .draft_accepted = r->accepted}};
    outq_push(e, s, ev, text, len);
    /* A sampled but unevaluated token becomes the first input of the next turn,
     * after the tokens a rolled-back stateful cache still had to replay. */
    const int rep = s->serve.n_replay, add = rep + (r->have_next ? 1 : 0);
    if (add && fg_tokens_reserve(&s->todo, s->todo.n + add) == 0) {
        memmove(s->todo.v + add, s->todo.v, (size_t)s->todo.n * sizeof *s->todo.v);
        memcpy(s->todo.v, s->serve.replay, (size_t)rep * sizeof *s->todo.v);
        if (r->have_next)
            s->todo.v[rep] = r->next_token;
        s->todo.n += add;
        s->todo_sampled = r->have_next && rep == 0; /* (a fork keeps todo[0] only) */
    }
    s->serve.n_replay = 0;
    if (s->serve.spec_state) {
        fg_kv_state_free(e->kv, s->serve.spec_state, s->seq.state_owner);
        s->serve.spec_state = NULL;
    }
    if (r->admitted)
        fg_kv_seq_truncate(e->kv, &s->seq, s->seq.n_tokens); /* return unused reserved pages */
    memset(r, 0, sizeof *r);
    s->serve.responding = false;
    s->tier.last_used = fg_clock_mono_s();
    s->tier.gen++;
    if (s->hist.n > 0 || s->todo.n > 0)
        fg_tier_save(e, s, false); /* the file follows every completed response */
    if (s->serve.in.n)
        mark_dirty(e, s); /* input that arrived during the response */
}

/* Where a session that must drop its rows from keep on can restart: keep, or
 * 0 where the cache has state that cannot be cut back (fg_engine_seq_state):
 * then it recomputes its whole history, which gives the same state. The
 * cache may be resident or in the session's file (whose state is whole too). */
static int rewind_point(const fg_engine_t *e, const fg_session_t *s, int keep)
{
    return keep < cache_len(s) && fg_engine_seq_state(e) ? 0 : keep;
}

/* Restores the session to its state before a response that failed mid-way:
 * its evaluated tokens go back to the input queue and their pages are freed. */
static void rewind_to_start(fg_engine_t *e, fg_session_t *s)
{
    s->serve.n_replay = 0; /* generated tokens: discarded with the response */
    const int keep = rewind_point(e, s, (int)s->serve.resp.cached_tokens), extra = s->seq.n_tokens - keep;
    if (extra > 0 && fg_tokens_reserve(&s->todo, s->todo.n + extra) == 0) {
        memmove(s->todo.v + extra, s->todo.v, (size_t)s->todo.n * sizeof *s->todo.v);
        memcpy(s->todo.v, s->hist.v + keep, (size_t)extra * sizeof *s->todo.v);
        s->todo_sampled = false;
        s->todo.n += extra;
        s->hist.n = keep;
        fg_kv_seq_truncate(e->kv, &s->seq, keep);
        fg_share_truncated(s, keep);
    }
}

/* fg_session_truncate's work: the first n cached tokens stay (all of them
 * when n is past the cache), the rest of the cache and every queued input
 * token go, the last response's sampled token too. The partial page at the
 * cut stays in the table: the next response's admission copies it first
 * when anyone else holds it (own_written_pages; the prefix cache holds every
 * page it lists), so a listed or shared page is never written. A cache in
 * its file is cut there: its load and a save from the file take the first n
 * rows. Direct mode: only the sequence (it keeps no history or queue). */
static fg_err cut_to(fg_engine_t *e, fg_session_t *s, int n)
{
    if (!e->opt.serve) {
        if (n < s->seq.n_tokens && n > 0 && fg_engine_seq_state(e))
            return FG_ERR_UNSUPPORTED;
        if (n < s->seq.n_tokens)
            fg_kv_seq_truncate(e->kv, &s->seq, n);
        if (n == 0)
            fg_kv_seq_drop_state(e->kv, &s->seq);
        return FG_OK;
    }
    if (s->serve.resp.active || s->serve.respond_req || s->serve.responding)
        return FG_ERR_BUSY;
    const int len = cache_len(s);
    if (n > len)
        n = len;
    if (n < len && n > 0 && fg_engine_seq_state(e))
        return FG_ERR_UNSUPPORTED; /* its state (window rings, open blocks) cannot be rewound */
    s->todo.n = 0;
    s->todo_sampled = false;
    s->serve.in.n = 0;
    if (n < len) {
        s->hist.n = n;
        if (!s->tier.on_disk) {
            fg_kv_seq_truncate(e->kv, &s->seq, n);
            if (n == 0)
                fg_kv_seq_drop_state(e->kv, &s->seq);
        }
        fg_share_truncated(s, n);
        s->share.miss_at = -1; /* the tokens after the cut are new: look them up again */
    }
    s->serve.committed = s->hist.n;
    s->serve.length_snapshot = n;
    s->tier.gen++; /* its file holds the uncut session until the next save */
    return FG_OK;
}

static void start_response(fg_engine_t *e, fg_session_t *s)
{
    fg_response *r = &s->serve.resp;
    memset(r, 0, sizeof *r);
    r->active = true;
    r->id = s->serve.req_id;
    r->p = s->serve.req;
    r->rng = fg_sampler_rng_init(r->p.sampling.seed);
    r->order = s->serve.req_order; /* request order: oldest is admitted first */
    /* Generation needs the logits of the last context token: if everything is
     * already cached, evaluate the last one again. */
    if (r->p.generate && s->todo.n == 0 && s->hist.n > 0) {
        const int keep = rewind_point(e, s, (int)s->hist.n - 1);
        const int back = (int)s->hist.n - keep;
        if (fg_tokens_reserve(&s->todo, back) == 0) {
            memcpy(s->todo.v, s->hist.v + keep, (size_t)back * sizeof *s->todo.v);
            s->todo.n = back;
            s->hist.n = keep;
            if (!s->tier.on_disk)
                fg_kv_seq_truncate(e->kv, &s->seq, fg_engine_seq_state(e) ? keep : s->seq.n_tokens - back);
            fg_share_truncated(s, s->hist.n);
        }
    }
    r->cached_tokens = cache_len(s);
    r->input_tokens = (int64_t)cache_len(s) + s->todo.n;
    /* The form of the input's attention, by its length (forward.h), fixed for
     * the response however the input is cut into steps. */
    r->input_absorbed = s->todo.n < FG_SHORT_INPUT;
}

static void note_waiting(fg_engine_t *e, fg_session_t *s);

/* Input tokens a response leaves unevaluated: a response that only prefills
 * keeps its last input token back where the cache cannot drop a row
 * (fg_engine_seq_state), so that the generating response after it has a
 * token to evaluate for its first logits instead of recomputing the history
 * (start_response). */
static int held_input(const fg_engine_t *e, const fg_session_t *s)
{
    return !s->serve.resp.p.generate && fg_engine_seq_state(e) ? 1 : 0;
}

/* The pages the response writes first must be its own (copy-on-write): the
 * page of its first row and, where a row is written into an earlier page of
 * its unit (kv_store.h: deepseek4's 128-ratio rows), those too. A copy is
 * made from the host page, so that must be current. */
static fg_err own_written_pages(fg_engine_t *e, fg_session_t *s)
{
    const int t = s->seq.n_tokens;
    fg_err err = FG_OK;
    for (int idx = fg_kv_first_written_page(fg_kv_store_geometry(e->kv), t);
         err == FG_OK && idx <= t / FG_KV_PAGE_TOKENS && idx < s->seq.n_pages; idx++) {
        uint8_t *before = s->seq.pages[idx];
        if (fg_kv_page_refs(e->kv, before) > 1)
            err = fg_engine_page_to_host(e, before, NULL);
        if (err == FG_OK)
            err = fg_kv_seq_make_writable(e->kv, &s->seq, idx * FG_KV_PAGE_TOKENS);
        if (err == FG_OK && s->seq.pages[idx] != before)
            err = fg_engine_page_to_device(e, s->seq.pages[idx], NULL);
    }
    return err;
}

/* Reserves the pages of a waiting response. Returns true when admitted. */
static bool admit(fg_engine_t *e, fg_session_t *s)
{
    fg_response *r = &s->serve.resp;
    int need = reserve_need(e, s);
    /* in pages, the state's included (kv_store.h): deepseek4's bytes are its rows' and its state's */
    size_t pages = (size_t)(need + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS +
                   (s->seq.state ? 0 : fg_kv_store_state_pages(e->kv));
    if (pages > fg_kv_store_pages_total(e->kv)) {
        finish(e, s, FG_FINISH_ERROR, FG_ERR_KV_FULL); /* could never fit */
        return false;
    }
    if (fg_tokens_reserve(&s->hist, need + 1) != 0)
        return false; /* out of memory: try again next step */
    if (s->tier.on_disk) {
        /* Its KV comes back from the file first. */
        fg_diag d;
        fg_err err = fg_tier_load(e, s, &d);
        if (err == FG_ERR_BUSY)
            return false; /* its file is being read; the writer wakes the step when done */
        if (err == FG_ERR_KV_FULL) {
            /* Dropping cold pages frees memory at once: then try again now. */
            fg_tier_relieve(e, (size_t)(s->hist.n + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS +
                                   (s->hist.n && fg_engine_seq_state(e) && !s->seq.state ? fg_kv_store_state_pages(e->kv) : 0),
                            s);
            err = fg_tier_load(e, s, &d);
        }
        if (err == FG_ERR_KV_FULL) {
            note_waiting(e, s);
            return false;
        }
        if (err != FG_OK) {
            /* The file is unusable: the session is lost; the response says why. */
            fg_tier_lose(e, s);
            finish(e, s, FG_FINISH_ERROR, err);
            return false;
        }
    }
    if (fg_share_attach_hits(e, s))
        return false; /* shared pages need no reservation; page files being read: the writer wakes the step */
    need = reserve_need(e, s);
    fg_err err = FG_OK;
    for (int attempt = 0; attempt < 2; attempt++) {
        err = fg_kv_seq_reserve(e->kv, &s->seq, need);
        if (err == FG_OK)
            err = own_written_pages(e, s);
        if (err == FG_OK)
            break;
        size_t want = (size_t)(need + FG_KV_PAGE_TOKENS - 1) / FG_KV_PAGE_TOKENS -
                      (size_t)s->seq.n_tokens / FG_KV_PAGE_TOKENS + 1 +
                      (s->seq.state ? 0 : fg_kv_store_state_pages(e->kv)); /* cold snapshots may hold them */
        fg_kv_seq_truncate(e->kv, &s->seq, s->seq.n_tokens); /* keep nothing half-reserved */
        if (attempt == 0)
            fg_tier_relieve(e, want, s); /* cold pages go at once, spills later */
    }
    if (err != FG_OK) {
        note_waiting(e, s);
        return false;
    }
    r->admitted = true;
    return true;
}

/* Emits the WAITING event once per response. */
static void note_waiting(fg_engine_t *e, fg_session_t *s)
{
    if (!s->serve.resp.waiting_reported) {
        s->serve.resp.waiting_reported = true;
        outq_push(e, s, (fg_event){.type = FG_EVENT_WAITING, .response_id = s->serve.resp.id, .error = FG_ERR_KV_FULL},
                  "", 0);
    }
}

/* Admits waiting responses oldest first; once one cannot be admitted, younger
 * ones wait too, so a large request is not starved by a stream of small ones.
 * Quadratic in the number waiting, which is small except at a load spike. */
static void admit_waiting(fg_engine_t *e)
{
    bool blocked = false;
    for (;;) {
        fg_session_t *oldest = NULL;
        for (fg_session_t *s = fg_all_first(e); s; s = fg_all_next(e, s))
            if (s->serve.resp.active && !s->serve.resp.admitted && !s->serve.resp.considered &&
                (!oldest || s->serve.resp.order < oldest->serve.resp.order))
                oldest = s;
        if (!oldest)
            return;
        oldest->serve.resp.considered = true;
        if (blocked)
            note_waiting(e, oldest);
        else if (!admit(e, oldest) && oldest->serve.resp.active && !oldest->tier.load_inflight)
            blocked = true; /* (one whose file is being read holds nobody up) */
    }
}

/* The bytes a new token releases, holding back a possible stop-string start.
 * Sets *stopped when a stop string matched. */
static uint32_t release_text(fg_engine_t *e, fg_session_t *s, int32_t tok, const char **out, bool *stopped)
{
    fg_response *r = &s->serve.resp;
    const char *bytes = "";
    size_t nb = 0;
    fg_tokenizer_token_bytes(e->tok, tok, r->p.keep_control, &bytes, &nb);
    char *buf = e->serve.text_scratch;
    memcpy(buf, r->hold, (size_t)r->hold_len);
    memcpy(buf + r->hold_len, bytes, nb);
    size_t len = (size_t)r->hold_len + nb;
    *out = buf;
    *stopped = false;
    if (r->p.n_stop == 0) {
        r->hold_len = 0;
        return (uint32_t)len;
    }
    const char *stops[FG_MAX_STOPS];
    for (int i = 0; i < r->p.n_stop; i++)
        stops[i] = r->p.stop[i];
    long cut = fg_stop_find(buf, len, (size_t)r->hold_len, stops, r->p.n_stop);
    if (cut >= 0) {
        *stopped = true;
        r->hold_len = 0;
        return (uint32_t)cut;
    }
    /* Hold the longest suffix that is a proper prefix of a stop string. */
    size_t keep = 0;
    for (int i = 0; i < r->p.n_stop; i++) {
        size_t sl = strlen(stops[i]);
        for (size_t k = sl - 1; k > keep; k--)
            if (k <= len && memcmp(buf + len - k, stops[i], k) == 0) {
                keep = k;
                break;
            }
    }
    memcpy(r->hold, buf + len - keep, keep);
    r->hold_len = (int)keep;
    return (uint32_t)(len - keep);
}

/* Queues the TOKEN event of a generated token; returns true (and *why)
 * when the response ends with it. rows: the tokens in the cache when plain
 * decoding emits it (accepted drafts after it do not count). */
static bool emit_token(fg_engine_t *e, fg_session_t *s, int32_t tok, int rows, fg_finish *why)
{
    fg_response *r = &s->serve.resp;
    r->generated++;
    s->serve.committed++;
    const char *text;
    bool stopped;
    uint32_t len = release_text(e, s, tok, &text, &stopped);
    outq_push(e, s, (fg_event){.type = FG_EVENT_TOKEN, .response_id = r->id, .token = tok}, text, len);
    r->have_next = true;
    r->next_token = tok;
    *why = stopped                              ? FG_FINISH_STOP
           : tok == fg_tokenizer_eos(e->tok)    ? FG_FINISH_EOS
           : r->generated >= r->p.max_tokens    ? FG_FINISH_LENGTH
           : rows + 1 > e->n_ctx                ? FG_FINISH_CONTEXT
                                                : (fg_finish)0;
    return *why != 0;
}

/* ---- speculative decoding [step] ---- */

/* Puts a stateful cache back to its copy from before the step: the fed
 * rows of the step go, and the back tokens the step added to the history;
 * the first keep of those become replay, run first in the next step. */
static void spec_restore(fg_engine_t *e, fg_session_t *s, int fed, int back, int keep)
{
    memcpy(s->seq.state, s->serve.spec_state, fg_kv_store_geometry(e->kv)->seq_bytes);
    s->seq.n_tokens -= fed;
    s->hist.n -= back;
    memcpy(s->serve.replay, s->hist.v + s->hist.n, (size_t)keep * sizeof *s->serve.replay);
    s->serve.n_replay = keep;
}

/* Emits this step's tokens of s in order: like plain decoding, the response
 * ends at the first that ends it; the accepted drafts after that one leave
 * the cache (their rows were computed, plain decoding would not have them),
 * and so does that one, which is sampled and not yet evaluated. */
static void emit_outputs(fg_engine_t *e, fg_session_t *s)
{
    fg_response *r = &s->serve.resp;
    const int n = r->n_out;
    r->n_out = 0;
    for (int i = 0; i < n; i++) {
        const int later = n - 1 - i; /* accepted drafts evaluated from out[i] on */
        fg_finish why;
        if (!emit_token(e, s, r->out[i], s->seq.n_tokens + s->serve.n_replay - later, &why))
            continue;
        if (later > 0) {
            if (s->serve.n_replay >= later) {
                s->serve.n_replay -= later; /* rolled back already: replay fewer */
            } else if (s->seq.state) {
                spec_restore(e, s, n, n, n - later); /* every draft accepted, state advanced: back, replay the rest */
            } else {
                s->hist.n -= later;
                s->seq.n_tokens -= later;
            }
        }
        finish(e, s, why, FG_OK);
        return;
    }
}

/* Drafts this decoding session may feed now: within the tokens the response
 * may still produce (the one sampled after the drafts included), the
 * reserved pages and the context, and the room of its output queue for one
 * TOKEN event each. 0 with speculation off and for scripted responses. */
static int spec_cap(const fg_engine_t *e, const fg_session_t *s)
{
    const fg_response *r = &s->serve.resp;
    const fg_outq *q = &s->serve.out;
    if (!e->opt.speculative || r->p.no_drafts || r->p.n_script > 0)
        return 0;
    int m = e->opt.spec_drafts < FG_SPEC_MAX_DRAFTS ? e->opt.spec_drafts : FG_SPEC_MAX_DRAFTS;
    const int rows = s->seq.n_tokens + 1, pages = s->seq.n_pages * FG_KV_PAGE_TOKENS;
    const int lims[] = {r->p.max_tokens - r->generated - 1, (pages < e->n_ctx ? pages : e->n_ctx) - rows,
                        q->ev_cap - q->ev_count - EVENTS_PER_STEP,
                        e->max_token_bytes > 0
                            ? (int)((q->text_cap - q->text_count - text_room(e)) / (uint32_t)e->max_token_bytes)
                            : m};
    for (size_t i = 0; i < sizeof lims / sizeof *lims; i++)
        m = lims[i] < m ? lims[i] : m;
    return m > 0 ? m : 0;
}

/* Chooses a decoding session's drafts for this step (r->draft, n_draft):
 * prompt lookup where it fills every slot (free), else the MTP block where
 * the backend has one (its drafts are computed after the plan), else what
 * lookup found. A stateful cache needs a copy of its state to roll back to;
 * without one (pool short) it does not draft. Returns the tokens the
 * session must feed before any draft: its replay and its sampled token. */
static int spec_plan(fg_engine_t *e, fg_session_t *s)
{
    fg_response *r = &s->serve.resp;
    r->n_draft = 0;
    r->draft_mtp = false;
    if (s->serve.n_replay)
        return s->serve.n_replay + 1; /* no drafts with a replay: its state copy is from before it */
    if (r->spec_skip > 0) {
        r->spec_skip--;
        return 1;
    }
    const int m = spec_cap(e, s);
    if (m == 0)
        return 1;
    int n = fg_spec_lookup(s->hist.v, (int)s->hist.n, r->next_token, m, r->draft);
    if (n < m && e->serve.can_draft) {
        r->draft_mtp = true;
        n = m;
    }
    if (n > 0 && s->seq.state && !s->serve.spec_state &&
        !(s->serve.spec_state = fg_kv_state_copy(e->kv, s->seq.state, s->seq.state_owner))) {
        n = 0;
        r->draft_mtp = false;
    }
    r->n_draft = n;
    return 1;
}

/* The MTP block's drafts for every session of the batch that takes them,
 * chained one call per draft (arch.h), greedy: drafts are deterministic
 * proposals. Written into the batch after each session's sampled token. A
 * failed call leaves that draft a copy of the token: any draft is verified,
 * so the output stays right (only acceptance drops). No lock. */
static void spec_draft_mtp(fg_engine_t *e, int n)
{
    const int V = e->model->n_vocab;
    int nd = 0, rounds = 0;
    for (int i = 0; i < n; i++) {
        fg_session_t *s = e->serve.cand[i];
        fg_response *r = &s->serve.resp;
        if (!r->draft_mtp || !r->n_draft || s->todo.n > 0)
            continue;
        e->serve.draft_sess[nd] = s;
        e->serve.draft_tok[nd] = r->next_token;
        e->serve.draft_seqs[nd] = (fg_fwd_seq){.kv = &s->seq, .n_tokens = 1, .n_logits = 1,
                                               .logits = e->serve.logits + (size_t)nd * V, .absorbed = true};
        rounds = r->n_draft > rounds ? r->n_draft : rounds;
        nd++;
    }
    for (int k = 0; k < rounds; k++) {
        fg_diag d;
        /* One sequence the block refuses (its architecture's rules: a cache
         * rolled back since its last run, say) must not cost the others
         * their drafts: then each alone. */
        const bool all = fg_engine_draft(e, e->serve.draft_tok, e->serve.draft_seqs, nd, &d) == FG_OK;
        for (int a = 0; a < nd; a++) {
            fg_session_t *s = e->serve.draft_sess[a];
            fg_response *r = &s->serve.resp;
            const bool ok = all || fg_engine_draft(e, &e->serve.draft_tok[a], &e->serve.draft_seqs[a], 1, &d) == FG_OK;
            const int32_t t = ok ? fg_argmax(e->serve.draft_seqs[a].logits, V) : r->next_token;
            e->serve.draft_tok[a] = t < 0 ? r->next_token : t;
            if (k < r->n_draft) {
                r->draft[k] = e->serve.draft_tok[a];
                e->serve.btok[s->serve.batch_at + 1 + k] = r->draft[k];
            }
        }
    }
}

/* Step counters of speculative decoding, added to the engine's under the lock. */
typedef struct spec_counts {
    int64_t drafted, drafted_mtp, accepted, replayed;
} spec_counts;

/* After the forward pass, for a decoding session: its replayed tokens and
 * sampled token join the history, its drafts are verified in order
 * (fg_sampler_verify: the longest accepted prefix, then one token sampled
 * after it) into r->out, and the cache keeps the rows of what was accepted:
 * rows past them are dropped, or a stateful cache goes back to its copy and
 * replays them. fs: its share of the batch (logits of the sampled token and
 * each draft). No lock. */
static void spec_verify(fg_engine_t *e, fg_session_t *s, const fg_fwd_seq *fs, spec_counts *c)
{
    fg_response *r = &s->serve.resp;
    const int V = e->model->n_vocab, rep = s->serve.batch_replay;
    memcpy(s->hist.v + s->hist.n, s->serve.replay, (size_t)rep * sizeof *s->hist.v);
    s->hist.n += rep;
    s->serve.n_replay -= rep;
    memmove(s->serve.replay, s->serve.replay + rep, (size_t)s->serve.n_replay * sizeof *s->serve.replay);
    c->replayed += rep;
    r->n_out = 0;
    if (s->serve.batch_tokens == rep)
        return; /* replay only (the grant ended there) */
    s->hist.v[s->hist.n++] = r->next_token;
    r->have_next = false;
    const int m = s->serve.batch_tokens - rep - 1;
    int j = 0;
    for (;; j++) {
        const float *lg = fs->logits + (size_t)j * V;
        bool acc = false;
        const int32_t t = j < m ? fg_sampler_verify(e->serve.sampler, &r->p.sampling, &r->rng, lg, r->draft[j], &acc)
                                : fg_sampler_sample(e->serve.sampler, &r->p.sampling, &r->rng, lg);
        r->out[r->n_out++] = r->generated + j < r->p.n_script ? r->p.script[r->generated + j] : t;
        if (!acc)
            break;
    }
    /* Back off where drafts do not land (text the history does not repeat, a
     * weak MTP block): a verification pays when it emits more tokens than the
     * steps it costs (a stateful rollback costs a replay step); after k that
     * did not in a row, the session decodes 2^k - 1 steps (at most 31) plainly
     * before it drafts again, so at no acceptance the waste is a draft pass
     * in 32 steps. */
    if (m > 0) {
        const bool paid = j > (s->seq.state && j < m ? 1 : 0);
        r->spec_fails = paid ? 0 : r->spec_fails + 1;
        r->spec_skip = paid ? 0 : (1 << (r->spec_fails < 5 ? r->spec_fails : 5)) - 1;
    }
    r->drafted += m;
    r->accepted += j;
    c->drafted += m;
    c->drafted_mtp += r->draft_mtp ? m : 0;
    c->accepted += j;
    memcpy(s->hist.v + s->hist.n, r->draft, (size_t)j * sizeof *s->hist.v);
    s->hist.n += j;
    if (j < m) {
        if (s->seq.state)
            spec_restore(e, s, 1 + m, 1 + j, 1 + j); /* (no replay with drafts) the rows of [next, accepted] are replayed */
        else
            s->seq.n_tokens -= m - j; /* within its reserved pages, which it keeps for the next rows */
    }
}

/* ---- the step ---- */

/* Takes every pending request [mu]. */
static void take_requests(fg_engine_t *e)
{
    fg_list taken; /* requests made while these are handled wait for the next step */
    fg_list_take(&taken, &e->serve.dirty);
    for (fg_list *l; (l = fg_list_pop_front(&taken));) {
        fg_session_t *s = fg_list_entry(l, fg_session_t, serve.dirty_link);
        if (!s->serve.adopted) {
            s->serve.adopted = true;
            fg_list_push_front(&e->serve.all, &s->serve.all_link);
            e->stats.sessions++;
        }
        if (s->serve.freed) {
            e->stats.sessions--;
            free_session(e, s);
            continue;
        }
        if (s->share.fork_src && !s->share.fork_done) {
            s->share.fork_err = fg_share_fork(e, s, s->share.fork_src);
            s->share.fork_done = true;
            s->tier.last_used = fg_clock_mono_s();
            pthread_cond_broadcast(&e->done_cv);
        }
        if (s->serve.cut_req) { /* before the input: what was queued before the cut goes with it */
            s->serve.cut_req = false;
            s->serve.cut_err = cut_to(e, s, s->serve.cut_n);
            s->serve.cut_done = true;
            pthread_cond_broadcast(&e->done_cv);
        }
        if (!s->tier.last_used)
            s->tier.last_used = fg_clock_mono_s();
        /* Input queued during a response waits for it to end: it belongs to the next turn. */
        if (s->serve.in.n && !s->serve.resp.active) {
            if (fg_tokens_reserve(&s->todo, s->todo.n + s->serve.in.n) == 0) {
                memcpy(s->todo.v + s->todo.n, s->serve.in.v, (size_t)s->serve.in.n * sizeof *s->todo.v);
                s->todo.n += s->serve.in.n;
                s->serve.in.n = 0;
                s->tier.gen++;
            } else {
                mark_dirty(e, s); /* retry next step */
            }
        }
        if (s->tier.save_req) {
            s->tier.save_req = false;
            const int queued = s->tier.saves_inflight;
            if (!s->serve.resp.active && !s->serve.respond_req)
                fg_tier_save(e, s, false);
            if (s->tier.saves_inflight == queued)
                s->tier.save_skips++; /* nothing written: fg_session_save returns busy */
            pthread_cond_broadcast(&e->done_cv);
        }
        if (s->serve.respond_req) {
            s->serve.respond_req = false;
            start_response(e, s);
        }
        if (s->serve.cancel_req) {
            s->serve.cancel_req = false;
            if (s->serve.resp.active)
                finish(e, s, FG_FINISH_CANCELLED, FG_OK);
        }
    }
}

/* Whether a prefill already in this step computes s's next page, a full page
 * of its tenant's: s then sits the step out and takes that page from the
 * prefix cache in the next, so sessions that start together with one prompt
 * share it instead of each computing a copy. Otherwise claims the page for s. */
static bool page_claimed(fg_engine_t *e, fg_session_t *s, int *n_claims)
{
    uint64_t key;
    if (!fg_share_next_key(e, s, &key))
        return false;
    for (int c = 0; c < *n_claims; c++)
        if (e->serve.claims[c].key == key && e->serve.claims[c].tenant_ix == s->tenant_ix) {
            s->share.miss_at = -1; /* look it up again next step */
            e->stats.prefix_waits++;
            return true;
        }
    e->serve.claims[(*n_claims)++] = (fg_page_claim){.key = key, .tenant_ix = s->tenant_ix};
    return false;
}

/* Chooses this step's batch [mu held: reads queue room]. Returns the number of
 * sessions in it; fills e->cand with them in batch order. */
static int plan_step(fg_engine_t *e)
{
    const int T = e->opt.max_batch_tokens;
    int n_dec = 0, n_pre = 0, paused = 0, waiting = 0, responding = 0, n_claims = 0;
    fg_sched_item *dec = e->serve.items, *pre = e->serve.items + T;
    fg_session_t **dec_s = e->serve.cand, **pre_s = e->serve.cand + T;

    admit_waiting(e);
    for (fg_session_t *s = fg_all_first(e); s; s = fg_all_next(e, s)) {
        fg_response *r = &s->serve.resp;
        r->considered = false;
        s->serve.batch_tokens = s->serve.batch_logits = 0;
        if (!r->active)
            continue;
        responding++;
        if (!r->admitted) {
            waiting++;
            continue;
        }
        if (!outq_has_room(e, &s->serve.out)) {
            paused++;
            continue;
        }
        if (s->todo.n > 0)
            (void)fg_share_attach_hits(e, s); /* a page still loading is computed: no wait mid-prefill */
        /* Within a tenant and priority, the oldest request first: a session's
         * next turn queues behind requests that were waiting before it. */
        fg_sched_item it = {.tenant = s->params.tenant, .weight = s->params.weight,
                            .priority = s->params.priority, .order = r->order};
        if ((int)s->todo.n > held_input(e, s) && n_pre < T) {
            if (page_claimed(e, s, &n_claims))
                continue;
            pre[n_pre] = it; /* want: below, once it is known whether the step decodes */
            pre_s[n_pre++] = s;
        } else if (s->todo.n == 0 && r->have_next && n_dec < T) {
            it.want = spec_plan(e, s); /* its replay and sampled token; drafts are granted below */
            dec[n_dec] = it;
            dec_s[n_dec++] = s;
        } else if ((int)s->todo.n <= held_input(e, s) && !r->p.generate) {
            finish(e, s, FG_FINISH_PREFILLED, FG_OK); /* nothing left to prefill */
        }
    }
    e->stats.responding = responding;
    e->stats.paused = paused;
    e->stats.waiting_kv = waiting;

    /* A step that decodes nothing delays no one's next token: it may take longer
     * chunks, which also amortise prefill attention's expansion of cached rows
     * over more queries. Results do not depend on the chunking. */
    const bool alone = n_dec == 0 && e->opt.prefill_alone_tokens > 0;
    const int chunk = alone ? e->step_capacity : e->opt.prefill_chunk;
    for (int i = 0; i < n_pre; i++) {
        const int left = (int)pre_s[i]->todo.n - held_input(e, pre_s[i]);
        pre[i].want = fg_share_chunk(e, pre_s[i], left, left < chunk ? left : chunk);
    }
    int budget = alone ? e->step_capacity : T - fg_sched_allocate(e->serve.sched, dec, n_dec, T);
    /* Drafts share what the decodes left with prompt chunks, in one round:
     * a draft is its tenant's token like any other (the same credit), first
     * among its tenant's, and never costs another session its decode token. */
    fg_sched_item *spec = pre + n_pre;
    fg_session_t **spec_s = e->serve.cand + 2 * T;
    int n_spec = 0;
    for (int i = 0; i < n_dec; i++) {
        fg_response *r = &dec_s[i]->serve.resp;
        if (r->n_draft && dec[i].grant == dec[i].want && !alone) {
            spec[n_spec] = dec[i];
            spec[n_spec].want = r->n_draft;
            spec[n_spec].priority = INT_MAX;
            spec_s[n_spec++] = dec_s[i];
        }
        r->n_draft = 0;
    }
    fg_sched_allocate(e->serve.sched, pre, n_pre + n_spec, budget);
    for (int i = 0; i < n_spec; i++)
        spec_s[i]->serve.resp.n_draft = spec[i].grant;
    e->stats.steps_alone += alone && n_pre > 0;

    /* Batch order: decodes, then prefills; contiguous tokens per session:
     * a decode's replay, its sampled token, its drafts. */
    int n = 0, ntok = 0, nrow = 0;
    for (int pass = 0; pass < 2; pass++) {
        fg_sched_item *items = pass ? pre : dec;
        fg_session_t **ss = pass ? pre_s : dec_s;
        int count = pass ? n_pre : n_dec;
        for (int i = 0; i < count; i++) {
            if (!items[i].grant)
                continue;
            fg_session_t *s = ss[i];
            fg_response *r = &s->serve.resp;
            int32_t *dst = e->serve.btok + ntok;
            s->serve.batch_at = ntok;
            s->serve.batch_tokens = items[i].grant;
            if (pass) {
                memcpy(dst, s->todo.v, (size_t)s->serve.batch_tokens * sizeof *dst);
                /* Sample after the chunk that ends the input of a generating response. */
                s->serve.batch_logits = s->serve.batch_tokens == (int)s->todo.n && r->p.generate;
            } else {
                const int rep = s->serve.batch_replay =
                    s->serve.batch_tokens < s->serve.n_replay ? s->serve.batch_tokens : s->serve.n_replay;
                memcpy(dst, s->serve.replay, (size_t)rep * sizeof *dst);
                if (s->serve.batch_tokens > rep) {
                    dst[rep] = r->next_token;
                    for (int k = 0; k < r->n_draft; k++) /* MTP drafts are written over these copies */
                        dst[rep + 1 + k] = r->draft_mtp ? r->next_token : r->draft[k];
                    s->serve.batch_tokens += r->n_draft;
                }
                /* Logits after the sampled token and each draft (none with a replay). */
                s->serve.batch_logits = s->serve.batch_tokens == rep ? 0 : 1 + r->n_draft;
            }
            e->serve.fseqs[n] = (fg_fwd_seq){.kv = &s->seq, .n_tokens = s->serve.batch_tokens, .n_logits = s->serve.batch_logits,
                                       .logits = s->serve.batch_logits ? e->serve.logits + (size_t)nrow * e->model->n_vocab : NULL,
                                       .absorbed = !pass || r->input_absorbed};
            nrow += s->serve.batch_logits;
            e->serve.cand[n++] = s; /* overwrites only entries already read */
            ntok += s->serve.batch_tokens;
        }
    }
    return n;
}

/* Calls the owner's wakeup outside the lock [mu held on entry and exit]. */
static void wake_owner(fg_engine_t *e)
{
    e->serve.wake_owner = false;
    if (!e->opt.wakeup)
        return;
    pthread_mutex_unlock(&e->mu);
    e->opt.wakeup(e->opt.wakeup_user);
    pthread_mutex_lock(&e->mu);
}

/* Several nodes: how long a node with no work, whose peers had none at the
 * last round either, waits for local work before it polls the peers with
 * the next round. Bounds the idle rounds at 500 a second, and the delay
 * before a burst of work elsewhere gets this node's ranks to the step. */
#define NODE_IDLE_WAIT_S 0.002

/* Waits on work_cv for up to wait seconds unless work or a stop is pending [mu]. */
static void wait_for_work(fg_engine_t *e, double wait)
{
    struct timespec ts = fg_clock_deadline(wait);
    if (!e->serve.work && !e->serve.stop)
        pthread_cond_timedwait(&e->serve.work_cv, &e->mu, &ts);
}

/* Why nothing can step once the job of several nodes is down (node: who left; -1: the transport failed). */
static fg_err job_down(int node, fg_diag *diag)
{
    if (node < 0)
        return fg_diag_set(diag, FG_ERR_STATE,
                           "the expert-parallel transport between the nodes failed; restart every node");
    return fg_diag_set(diag, FG_ERR_STATE,
                       "expert-parallel node %d has left the job, and no step can run without its ranks; restart "
                       "every node",
                       node);
}

/* Runs the planned batch of n sessions (no lock held). With several nodes,
 * an agreement round first: *stepped is false when the job did not step
 * (nobody had tokens, or a node left while this one had none); the
 * sessions then have nothing to advance. leave: this node announces that it
 * stops. Errors: as fg_engine_forward, FG_ERR_STATE (a node has left the
 * job: nothing can step any more). */
static fg_err forward_step(fg_engine_t *e, int n, bool leave, bool *stepped, fg_diag *diag)
{
    *stepped = true;
    if (!e->ep_nodes)
        return fg_engine_forward(e, e->serve.btok, e->serve.fseqs, e->serve.cand, n, diag);
    if (e->ep_down)
        return job_down(e->ep_left_node, diag);
    fg_ep_round rd;
    fg_err err = fg_engine_round(e, e->serve.btok, e->serve.fseqs, e->serve.cand, n, leave, &rd, diag);
    e->ep_peers_busy = rd.stepped;
    if (rd.left_node >= 0 || err == FG_ERR_IO) {
        e->ep_down = true; /* the transport is gone, or a node will run no more rounds */
        e->ep_left_node = rd.left_node;
    }
    if (err == FG_OK && rd.left_node >= 0 && n > 0)
        return job_down(rd.left_node, diag);
    *stepped = rd.stepped || err != FG_OK;
    return err;
}

static void *step_main(void *arg)
{
    fg_engine_t *e = arg;
    bool polled = false; /* several nodes: waited for local work once since the last round */
    pthread_mutex_lock(&e->mu);
    for (;;) {
        /* While the nodes' job is up, this node's stop is announced in a round first. */
        const bool rounds = e->ep_nodes && !e->ep_down;
        if (e->serve.stop && !rounds)
            break;
        fg_tier_reap(e);
        take_requests(e);
        if (e->tier.save_all_req) {
            fg_tier_save_all(e);
            e->tier.save_all_req = false;
            e->tier.save_all_target = e->tier.jobs_queued;
            e->tier.save_all_queued = true;
            pthread_cond_broadcast(&e->done_cv);
        }
        fg_tier_idle(e);
        int n = e->serve.stop ? 0 : plan_step(e);
        if (n == 0 && !e->serve.stop) {
            if (e->serve.wake_owner) {
                wake_owner(e);
                continue;
            }
            if (rounds) {
                if (!e->ep_peers_busy && !polled) {
                    /* Nobody had work at the last round: a short wait for local work, then poll the peers. */
                    wait_for_work(e, NODE_IDLE_WAIT_S);
                    e->serve.work = false;
                    polled = true;
                    continue;
                }
            } else {
                if (e->tier.persist && e->opt.idle_spill_seconds > 0) {
                    /* Idle spills are due without any event: look again now and then. */
                    wait_for_work(e, e->opt.idle_spill_seconds / 4 < 1 ? e->opt.idle_spill_seconds / 4 : 1);
                } else {
                    while (!e->serve.work && !e->serve.stop)
                        pthread_cond_wait(&e->serve.work_cv, &e->mu);
                }
                e->serve.work = false;
                continue;
            }
        }
        polled = false;
        e->serve.work = false;
        const bool leave = e->serve.stop;
        pthread_mutex_unlock(&e->mu);

        fg_diag diag;
        bool stepped;
        double t0 = fg_clock_mono_s();
        if (e->serve.can_draft)
            spec_draft_mtp(e, n);
        for (int i = 0; i < n; i++) { /* the states to roll back to */
            fg_session_t *s = e->serve.cand[i];
            if (s->serve.spec_state && s->serve.resp.n_draft && s->todo.n == 0)
                memcpy(s->serve.spec_state, s->seq.state, fg_kv_store_geometry(e->kv)->seq_bytes);
        }
        fg_err err = forward_step(e, n, leave, &stepped, &diag);
        double dt = fg_clock_mono_s() - t0;
        if (!stepped || n == 0) { /* a round without a step, or a step without local tokens */
            pthread_mutex_lock(&e->mu);
            continue;
        }
        int64_t dec_tok = 0, pre_tok = 0, short_tok = 0;
        spec_counts sc = {0};
        for (int i = 0; i < n; i++) {
            fg_session_t *s = e->serve.cand[i];
            if (err != FG_OK)
                break;
            /* The evaluated tokens join the history. */
            if (s->todo.n > 0) {
                memcpy(s->hist.v + s->hist.n, s->todo.v, (size_t)s->serve.batch_tokens * sizeof *s->todo.v);
                s->hist.n += s->serve.batch_tokens;
                memmove(s->todo.v, s->todo.v + s->serve.batch_tokens, (size_t)(s->todo.n - s->serve.batch_tokens) * sizeof *s->todo.v);
                s->todo.n -= s->serve.batch_tokens;
                s->todo_sampled = false;
                pre_tok += s->serve.batch_tokens;
                short_tok += s->serve.resp.input_absorbed ? s->serve.batch_tokens : 0;
                fg_response *r = &s->serve.resp;
                r->n_out = 0;
                if (s->serve.batch_logits) {
                    r->out[0] = fg_sampler_sample(e->serve.sampler, &r->p.sampling, &r->rng, e->serve.fseqs[i].logits);
                    if (r->generated < r->p.n_script) /* a scripted response (test/debug): only the id is replaced */
                        r->out[0] = r->p.script[r->generated];
                    r->n_out = 1;
                }
            } else {
                spec_verify(e, s, &e->serve.fseqs[i], &sc);
                dec_tok += s->serve.batch_tokens;
            }
        }

        pthread_mutex_lock(&e->mu);
        for (int i = 0; i < n; i++) {
            fg_session_t *s = e->serve.cand[i];
            if (err != FG_OK) {
                /* Cannot happen with validated input; end the response, keep the session. */
                rewind_to_start(e, s);
                finish(e, s, FG_FINISH_ERROR, err);
                continue;
            }
            fg_share_register(e, s); /* pages that became full */
            s->tier.gen++;
            emit_outputs(e, s);
            s->serve.length_snapshot = s->seq.n_tokens;
        }
        e->stats.steps++;
        e->stats.decode_tokens += (uint64_t)dec_tok;
        e->stats.prefill_tokens += (uint64_t)pre_tok;
        e->stats.short_input_tokens += (uint64_t)short_tok;
        e->stats.draft_tokens += (uint64_t)sc.drafted;
        e->stats.draft_tokens_mtp += (uint64_t)sc.drafted_mtp;
        e->stats.draft_accepted += (uint64_t)sc.accepted;
        e->stats.draft_replayed += (uint64_t)sc.replayed;
        e->stats.step_seconds += dt;
        e->stats.step_time_hist[pow2_bucket(dt / FG_ENGINE_STEP_HIST_BASE_S)]++;
        e->stats.batch_tokens_hist[pow2_bucket((double)(dec_tok + pre_tok))]++;
        e->stats.batch_sessions_hist[pow2_bucket((double)n)]++;
        e->stats.batch_sessions_sum += (uint64_t)n;
        e->stats.kv_pages_used = fg_kv_store_pages_total(e->kv) - fg_kv_store_pages_free(e->kv);
        if (e->serve.wake_owner)
            wake_owner(e);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- start and stop ---- */

fg_err fg_engine_serve_start(fg_engine_t *e, fg_diag *diag)
{
    const size_t T = (size_t)e->opt.max_batch_tokens, V = (size_t)e->model->n_vocab;
    if (fg_sampler_create((int)V, &e->serve.sampler, diag) != FG_OK ||
        fg_sched_create(2 * (int)T, SCHED_QUANTUM, &e->serve.sched) != FG_OK)
        return fg_diag_set(diag, FG_ERR_NOMEM, "engine: out of memory");
    e->serve.items = calloc(3 * T, sizeof *e->serve.items);
    e->serve.cand = calloc(3 * T, sizeof *e->serve.cand);
    e->serve.draft_tok = calloc(T, sizeof *e->serve.draft_tok);
    e->serve.draft_seqs = calloc(T, sizeof *e->serve.draft_seqs);
    e->serve.draft_sess = calloc(T, sizeof *e->serve.draft_sess);
    e->serve.can_draft = e->opt.speculative && fg_engine_can_draft(e);
    e->serve.claims = calloc(T, sizeof *e->serve.claims);
    e->serve.fseqs = calloc(T, sizeof *e->serve.fseqs);
    e->serve.btok = calloc((size_t)e->step_capacity, sizeof *e->serve.btok);
    e->serve.logits = malloc(T * V * sizeof *e->serve.logits);
    e->serve.text_scratch = malloc((size_t)FG_MAX_STOP_BYTES + (size_t)e->max_token_bytes + 1);
    if (!e->serve.items || !e->serve.cand || !e->serve.claims || !e->serve.fseqs || !e->serve.btok || !e->serve.logits || !e->serve.text_scratch ||
        !e->serve.draft_tok || !e->serve.draft_seqs || !e->serve.draft_sess)
        return fg_diag_set(diag, FG_ERR_NOMEM, "engine: out of memory for %zu batch tokens", T);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->serve.work_cv, NULL);
    e->stats.kv_pages_total = fg_kv_store_pages_total(e->kv);
    e->serve.thread_started = false;
    fg_err terr = fg_tier_open(e, diag);
    if (terr != FG_OK) {
        fg_tier_close(e);
        fg_tier_destroy(e);
        pthread_cond_destroy(&e->serve.work_cv);
        pthread_mutex_destroy(&e->mu);
        e->opt.serve = false; /* nothing of serving mode is left to stop */
        return terr;
    }
    if (pthread_create(&e->serve.thread, NULL, step_main, e) != 0) {
        fg_tier_close(e);
        fg_tier_destroy(e);
        pthread_cond_destroy(&e->serve.work_cv);
        pthread_mutex_destroy(&e->mu);
        return fg_diag_set(diag, FG_ERR_NOMEM, "engine: cannot start the step thread");
    }
    e->serve.thread_started = true;
    return FG_OK;
}

void fg_engine_serve_stop(fg_engine_t *e)
{
    if (e->serve.thread_started) {
        pthread_mutex_lock(&e->mu);
        e->serve.stop = true;
        pthread_cond_signal(&e->serve.work_cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->serve.thread, NULL);
        e->serve.thread_started = false;
        fg_tier_close(e); /* queued writes finish; their snapshots are released */
        /* Sessions the owner never freed, adopted or not. */
        for (fg_list *l; (l = fg_list_pop_front(&e->serve.dirty));) {
            fg_session_t *s = fg_list_entry(l, fg_session_t, serve.dirty_link);
            if (!s->serve.adopted)
                free_session(e, s);
        }
        for (fg_list *l; (l = fg_list_first(&e->serve.all));)
            free_session(e, fg_list_entry(l, fg_session_t, serve.all_link));
        fg_tier_destroy(e);
        pthread_cond_destroy(&e->serve.work_cv);
        pthread_mutex_destroy(&e->mu);
    }
    fg_sampler_destroy(e->serve.sampler);
    fg_sched_destroy(e->serve.sched);
    free(e->serve.items);
    free(e->serve.cand);
    free(e->serve.claims);
    free(e->serve.fseqs);
    free(e->serve.btok);
    free(e->serve.logits);
    free(e->serve.text_scratch);
    free(e->serve.draft_tok);
    free(e->serve.draft_seqs);
    free(e->serve.draft_sess);
}

/* ---- the thread-safe session calls ---- */

/* The output queue is allocated at the first response, so an idle session
 * that never responded costs only its struct. [mu] */
static fg_err outq_alloc(fg_session_t *s)
{
    fg_engine_t *e = s->e;
    if (s->serve.out.ev)
        return FG_OK;
    uint32_t room = 2 * text_room(e);
    uint32_t text_cap = (uint32_t)e->opt.text_capacity > room ? (uint32_t)e->opt.text_capacity : room;
    fg_event *ev = malloc((size_t)e->opt.event_capacity * sizeof *ev);
    char *text = malloc(text_cap);
    if (!ev || !text) {
        free(ev);
        free(text);
        return FG_ERR_NOMEM;
    }
    s->serve.out = (fg_outq){.ev = ev, .ev_cap = e->opt.event_capacity, .text = text, .text_cap = text_cap};
    return FG_OK;
}

fg_err fg_session_serve_init(fg_session_t *s)
{
    fg_engine_t *e = s->e;
    pthread_mutex_lock(&e->mu);
    if (s->name[0])
        for (fg_session_t *o = e->serve.open_head; o; o = o->serve.open_next)
            if (o->tenant_ix == s->tenant_ix && strcmp(o->name, s->name) == 0) {
                pthread_mutex_unlock(&e->mu);
                return FG_ERR_STATE;
            }
    s->serve.open_next = e->serve.open_head;
    e->serve.open_head = s;
    mark_dirty(e, s); /* the step thread adopts it */
    pthread_mutex_unlock(&e->mu);
    return FG_OK;
}

void fg_session_serve_release(fg_session_t *s)
{
    fg_engine_t *e = s->e;
    pthread_mutex_lock(&e->mu);
    for (fg_session_t **p = &e->serve.open_head; *p; p = &(*p)->serve.open_next)
        if (*p == s) {
            *p = s->serve.open_next;
            break;
        }
    s->serve.freed = true;
    if (fg_list_linked(&s->serve.ready_link))
        fg_list_remove(&s->serve.ready_link); /* the owner must not hear of it again */
    mark_dirty(e, s);
    pthread_mutex_unlock(&e->mu);
}

fg_err fg_session_append(fg_session_t *s, const int32_t *tokens, int n, fg_diag *diag)
{
    fg_engine_t *e = s->e;
    if (!e->opt.serve)
        return fg_diag_set(diag, FG_ERR_STATE, "fg_session_append needs a serving engine");
    if (n < 0 || (n > 0 && !tokens))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "bad token list");
    const int V = e->model->n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return fg_diag_set(diag, FG_ERR_TOKEN_ID, "token id %d at index %d outside the vocabulary [0, %d)",
                               tokens[i], i, V);
    fg_err err = FG_OK;
    pthread_mutex_lock(&e->mu);
    if (s->serve.committed + n > e->n_ctx) {
        err = fg_diag_set(diag, FG_ERR_CONTEXT_FULL, "%lld + %d tokens exceed the context of %d tokens",
                          (long long)s->serve.committed, n, e->n_ctx);
    } else if (fg_tokens_reserve(&s->serve.in, s->serve.in.n + n) != 0) {
        err = fg_diag_set(diag, FG_ERR_NOMEM, "out of memory for %d input tokens", n);
    } else if (n > 0) {
        memcpy(s->serve.in.v + s->serve.in.n, tokens, (size_t)n * sizeof *tokens);
        s->serve.in.n += n;
        s->serve.committed += n;
        mark_dirty(e, s);
    }
    pthread_mutex_unlock(&e->mu);
    return err;
}

int fg_session_room(fg_session_t *s)
{
    fg_engine_t *e = s->e;
    if (!e->opt.serve)
        return e->n_ctx - s->seq.n_tokens;
    pthread_mutex_lock(&e->mu);
    int64_t room = e->n_ctx - s->serve.committed;
    pthread_mutex_unlock(&e->mu);
    return room > 0 ? (int)room : 0;
}

static fg_err validate_response(const fg_engine_t *e, const fg_response_params *p, fg_diag *diag)
{
    fg_err err = fg_sampling_validate(&p->sampling, diag);
    if (err != FG_OK)
        return err;
    if (p->generate && (p->max_tokens < 1 || p->max_tokens > e->n_ctx))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "max_tokens %d outside [1, %d]", p->max_tokens, e->n_ctx);
    if (p->n_stop < 0 || p->n_stop > FG_MAX_STOPS)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "at most %d stop strings", FG_MAX_STOPS);
    if (p->n_script < 0 || (p->n_script > 0 && !p->script))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "a script of %d tokens without ids", p->n_script);
    for (int i = 0; i < p->n_script; i++)
        if (p->script[i] < 0 || p->script[i] >= e->model->n_vocab)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "script token %d: id %d outside the vocabulary", i,
                               (int)p->script[i]);
    for (int i = 0; i < p->n_stop; i++) {
        size_t n = strnlen(p->stop[i], FG_MAX_STOP_BYTES + 1);
        if (n == 0 || n > FG_MAX_STOP_BYTES)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "stop string %d must be 1..%d bytes", i, FG_MAX_STOP_BYTES);
    }
    return FG_OK;
}

fg_err fg_session_respond(fg_session_t *s, const fg_response_params *p, uint64_t *response_id, fg_diag *diag)
{
    fg_engine_t *e = s->e;
    if (!e->opt.serve)
        return fg_diag_set(diag, FG_ERR_STATE, "fg_session_respond needs a serving engine");
    fg_err err = validate_response(e, p, diag);
    if (err != FG_OK)
        return err;
    pthread_mutex_lock(&e->mu);
    if (s->serve.responding) {
        err = fg_diag_set(diag, FG_ERR_BUSY, "a response is already in progress");
    } else if (s->serve.committed == 0) {
        err = fg_diag_set(diag, FG_ERR_INVALID_ARG, "nothing to respond to: the session has no input");
    } else if (p->generate && s->serve.committed + 1 > e->n_ctx) {
        err = fg_diag_set(diag, FG_ERR_CONTEXT_FULL, "the context of %d tokens is full", e->n_ctx);
    } else if (outq_alloc(s) != FG_OK) {
        err = fg_diag_set(diag, FG_ERR_NOMEM, "out of memory for the output queue");
    } else {
        s->serve.responding = true;
        s->serve.respond_req = true;
        s->serve.req = *p;
        s->serve.req_id = ++s->serve.next_response_id;
        /* Counted here, not when the step thread takes the request: the order
         * in which the step thread finds dirty sessions is not the order of
         * the requests. */
        s->serve.req_order = e->serve.session_order++;
        if (response_id)
            *response_id = s->serve.req_id;
        mark_dirty(e, s);
    }
    pthread_mutex_unlock(&e->mu);
    return err;
}

void fg_session_cancel(fg_session_t *s)
{
    fg_engine_t *e = s->e;
    if (!e->opt.serve)
        return;
    pthread_mutex_lock(&e->mu);
    if (s->serve.responding) {
        s->serve.cancel_req = true;
        mark_dirty(e, s);
    }
    pthread_mutex_unlock(&e->mu);
}

fg_err fg_session_truncate(fg_session_t *s, int n, fg_diag *diag)
{
    fg_engine_t *e = s->e;
    if (n < 0)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "cannot keep %d tokens", n);
    fg_err err;
    if (!e->opt.serve) {
        err = cut_to(e, s, n);
    } else {
        pthread_mutex_lock(&e->mu);
        if (s->serve.responding) {
            pthread_mutex_unlock(&e->mu);
            return fg_diag_set(diag, FG_ERR_BUSY, "the session has a response in progress");
        }
        s->serve.cut_n = n;
        s->serve.cut_done = false;
        s->serve.cut_req = true;
        mark_dirty(e, s);
        while (!s->serve.cut_done)
            pthread_cond_wait(&e->done_cv, &e->mu);
        err = s->serve.cut_err;
        pthread_mutex_unlock(&e->mu);
    }
    if (err == FG_ERR_UNSUPPORTED)
        return fg_diag_set(diag, err, "this model's cache (%s) cannot be cut back to %d tokens; only to 0 or its "
                           "length", e->model->arch->name, n);
    if (err == FG_ERR_BUSY)
        return fg_diag_set(diag, err, "the session has a response in progress");
    return err;
}

int fg_session_poll(fg_session_t *s, fg_event *ev, int max, char *text, size_t text_cap)
{
    fg_engine_t *e = s->e;
    if (!e->opt.serve)
        return 0;
    pthread_mutex_lock(&e->mu);
    fg_outq *q = &s->serve.out;
    bool had_room = outq_has_room(e, q);
    int n = 0;
    size_t used = 0;
    while (n < max && q->ev_count > 0) {
        fg_event *src = &q->ev[q->ev_head];
        if (used + src->text_len > text_cap)
            break;
        ev[n] = *src;
        for (uint32_t i = 0; i < src->text_len; i++)
            text[used + i] = q->text[(src->text_off + i) % q->text_cap];
        ev[n].text_off = (uint32_t)used;
        used += src->text_len;
        q->text_head = (q->text_head + src->text_len) % q->text_cap;
        q->text_count -= src->text_len;
        q->ev_head = (q->ev_head + 1) % q->ev_cap;
        q->ev_count--;
        n++;
    }
    if (!had_room && outq_has_room(e, q)) {
        e->serve.work = true; /* a paused response can go on */
        pthread_cond_signal(&e->serve.work_cv);
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

bool fg_session_responding(fg_session_t *s)
{
    fg_engine_t *e = s->e;
    if (!e->opt.serve)
        return false;
    pthread_mutex_lock(&e->mu);
    bool r = s->serve.responding;
    pthread_mutex_unlock(&e->mu);
    return r;
}

int fg_engine_take_ready(fg_engine_t *e, void **users, int max)
{
    if (!e->opt.serve)
        return 0;
    pthread_mutex_lock(&e->mu);
    int n = 0;
    for (fg_list *l; n < max && (l = fg_list_pop_front(&e->serve.ready));) {
        fg_session_t *s = fg_list_entry(l, fg_session_t, serve.ready_link);
        users[n++] = s->params.user;
    }
    pthread_mutex_unlock(&e->mu);
    return n;
}

void fg_engine_get_stats(fg_engine_t *e, fg_engine_stats *st)
{
    if (!e->opt.serve) {
        memset(st, 0, sizeof *st);
        st->kv_pages_total = fg_kv_store_pages_total(e->kv);
        st->kv_pages_used = st->kv_pages_total - fg_kv_store_pages_free(e->kv);
        return;
    }
    pthread_mutex_lock(&e->mu);
    *st = e->stats;
    st->kv_pages_used = fg_kv_store_pages_total(e->kv) - fg_kv_store_pages_free(e->kv);
    st->kv_pages_shared = fg_kv_pages_shared(e->kv);
    st->kv_pages_cached = e->share.pc ? fg_prefix_cache_cold_count(e->share.pc, e->kv) +
                                            fg_prefix_cache_snapshot_count(e->share.pc) * fg_kv_store_state_pages(e->kv)
                                      : 0;
    st->disk_bytes = e->tier.disk_bytes;
    st->sessions_on_disk = 0;
    for (fg_session_t *s = e->serve.open_head; s; s = s->serve.open_next)
        st->sessions_on_disk += s->tier.on_disk;
    pthread_mutex_unlock(&e->mu);
}
