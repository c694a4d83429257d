/* device_batch.c: building a device backend's batch description (see device_batch.h). */
#include "engine/backend/device_batch.h"

fg_err fg_device_batch_check(const int32_t *tokens, const fg_fwd_seq *seqs, int n_seqs, int max_tokens, int n_vocab,
                             int *n_tok, fg_diag *diag)
{
    int n = 0;
    *n_tok = 0;
    for (int si = 0; si < n_seqs; si++) {
        const fg_fwd_seq *s = &seqs[si];
        if (s->n_tokens < 1 || s->n_tokens > max_tokens - n)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "batch exceeds %d tokens", max_tokens);
        if (s->n_logits != 0 && s->n_logits != 1 && s->n_logits != s->n_tokens)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "n_logits must be 0, 1 or n_tokens");
        if (s->n_logits && !s->logits)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "logits requested without a buffer");
        const int end = s->kv->n_tokens + s->n_tokens;
        if (end > s->kv->n_pages * FG_KV_PAGE_TOKENS)
            return fg_diag_set(diag, FG_ERR_INVALID_ARG, "sequence %d has no cache pages for %d tokens", si, end);
        for (int j = 0; j < s->n_tokens; j++)
            if (tokens[n + j] < 0 || tokens[n + j] >= n_vocab)
                return fg_diag_set(diag, FG_ERR_TOKEN_ID, "token id %d outside the vocabulary [0, %d)", tokens[n + j],
                                   n_vocab);
        n += s->n_tokens;
    }
    *n_tok = n;
    return FG_OK;
}

size_t fg_device_batch_pages(const fg_fwd_seq *seqs, int n_seqs)
{
    size_t n = 0;
    for (int si = 0; si < n_seqs; si++)
        n += (size_t)seqs[si].kv->n_pages;
    return n;
}

fg_err fg_device_batch_plan(fg_device_batch *b, const fg_kv_store_t *kv, uintptr_t dev_base, const int32_t *tokens,
                            const fg_fwd_seq *seqs, int n_seqs, fg_diag *diag)
{
    const fg_kv_geometry *geo = fg_kv_store_geometry(kv);
    const size_t need = fg_device_batch_pages(seqs, n_seqs);
    if (need > b->cap_pages)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "batch holds %zu pages, the page list %zu", need, b->cap_pages);
    size_t np = 0;
    int t = 0, nl = 0;
    for (int si = 0; si < n_seqs; si++) {
        const fg_kv_seq *q = seqs[si].kv;
        const size_t first = np;
        for (int pi = 0; pi < q->n_pages; pi++)
            b->pages[np++] = dev_base + fg_kv_store_page_index(kv, q->pages[pi]) * geo->page_bytes;
        for (int j = 0; j < seqs[si].n_tokens; j++, t++) {
            const int p = q->n_tokens + j;
            b->tok[t] = tokens[t];
            b->pos[t] = p;
            b->page0[t] = (int32_t)first;
            b->n_kv[t] = p + 1; /* causal: itself and everything before */
            b->rows[t] = b->pages[first + (size_t)(p / FG_KV_PAGE_TOKENS)] +
                         (size_t)(p % FG_KV_PAGE_TOKENS) * geo->row_bytes;
            if (j >= seqs[si].n_tokens - seqs[si].n_logits)
                b->logit_row[nl++] = t;
        }
    }
    b->n_tok = t;
    b->n_logit_rows = nl;
    b->n_pages = np;
    return FG_OK;
}
