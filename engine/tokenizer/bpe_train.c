/* bpe_train.c: deterministic byte-level BPE training (see bpe_train.h).
 *
 * Design: the pieces are stored back to back as arrays of token ids (one
 * uint32 per symbol) with a start and a length per piece. Each round rebuilds
 * a pair -> count table (open addressing, keyed by (left << 32 | right)) from
 * scratch, picks the winner by (count desc, key asc) so the table's internal
 * order never matters, and rewrites every piece in place, left to right,
 * without overlap. For the few-KB texts the generator uses this is a few
 * million operations; no incremental pair bookkeeping is needed.
 *
 * Token texts are checked for uniqueness with a small hash set over the text
 * strings; a pair whose result already exists is banned for the rest of the
 * run (it would add a duplicate token string, which GGUF readers key by text).
 */
#include "engine/tokenizer/bpe_train.h"

#include <stdlib.h>
#include <string.h>

#include "config/base/hash64.h"
#include "engine/tokenizer/byte_unicode.h"
#include "engine/tokenizer/pretokenize.h"

/* ---- pair count table ---- */

typedef struct pair_table {
    uint64_t *key;     /* pair key; EMPTY_KEY marks a free slot */
    uint64_t *count;
    size_t cap;        /* power of two */
} pair_table;

#define EMPTY_KEY UINT64_MAX

static uint64_t pair_key(uint32_t left, uint32_t right)
{
    return ((uint64_t)left << 32) | right;
}

static size_t hash_u64(uint64_t x)
{
    /* splitmix64 finaliser: a good spread for sequential ids */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (size_t)x;
}

static void pair_table_clear(pair_table *t)
{
    for (size_t i = 0; i < t->cap; i++)
        t->key[i] = EMPTY_KEY;
}

static void pair_table_add(pair_table *t, uint64_t key)
{
    size_t i = hash_u64(key) & (t->cap - 1);
    while (t->key[i] != EMPTY_KEY && t->key[i] != key)
        i = (i + 1) & (t->cap - 1);
    if (t->key[i] == EMPTY_KEY) {
        t->key[i] = key;
        t->count[i] = 0;
    }
    t->count[i]++;
}

/* ---- token text set ---- */

typedef struct text_set {
    uint32_t *slot;    /* token id + 1; 0 marks a free slot */
    size_t cap;        /* power of two, at least twice the token count */
} text_set;

static int text_set_has(const text_set *ts, char *const *texts, const char *s)
{
    size_t i = (size_t)fg_fnv1a64(s, strlen(s)) & (ts->cap - 1);
    while (ts->slot[i]) {
        if (strcmp(texts[ts->slot[i] - 1], s) == 0)
            return 1;
        i = (i + 1) & (ts->cap - 1);
    }
    return 0;
}

static void text_set_put(text_set *ts, char *const *texts, uint32_t id)
{
    size_t i = (size_t)fg_fnv1a64(texts[id], strlen(texts[id])) & (ts->cap - 1);
    while (ts->slot[i])
        i = (i + 1) & (ts->cap - 1);
    ts->slot[i] = id + 1;
}

/* ---- training ---- */

void fg_bpe_vocab_free(fg_bpe_vocab *v)
{
    if (!v)
        return;
    if (v->text) {
        for (uint32_t i = 0; i < v->n_tokens; i++)
            free(v->text[i]);
    }
    free(v->text);
    free(v->merge);
    memset(v, 0, sizeof *v);
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

/* Replaces every non-overlapping (left, right) in each piece by id. */
static void apply_merge(uint32_t *sym, const size_t *start, size_t *plen, size_t n_pieces, uint32_t left,
                        uint32_t right, uint32_t id)
{
    for (size_t p = 0; p < n_pieces; p++) {
        uint32_t *s = sym + start[p];
        size_t n = plen[p], w = 0;
        for (size_t r = 0; r < n; r++) {
            if (r + 1 < n && s[r] == left && s[r + 1] == right) {
                s[w++] = id;
                r++;
            } else {
                s[w++] = s[r];
            }
        }
        plen[p] = w;
    }
}

typedef struct pieces {
    size_t *start;
    size_t *len;
    size_t n;
} pieces;

static int add_piece(void *ctx, size_t start, size_t end)
{
    pieces *p = ctx;
    p->start[p->n] = start;
    p->len[p->n++] = end - start;
    return 0;
}

fg_err fg_bpe_train(const char *text, size_t len, uint32_t n_merges, fg_bpe_vocab *out, fg_diag *diag)
{
    if (!out || (!text && len))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "bpe_train: NULL argument");
    memset(out, 0, sizeof *out);
    if (n_merges > (1u << 24))
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "bpe_train: %u merges is too many", n_merges);

    fg_err err = FG_OK;
    const uint32_t n_tok_max = FG_BPE_BYTE_TOKENS + n_merges;
    uint32_t *sym = malloc((len ? len : 1) * sizeof *sym);
    size_t *start = malloc((len ? len : 1) * sizeof *start);
    size_t *plen = malloc((len ? len : 1) * sizeof *plen);
    pair_table pt = {0};
    pt.cap = pow2_at_least(2 * len + 2);
    pt.key = malloc(pt.cap * sizeof *pt.key);
    pt.count = malloc(pt.cap * sizeof *pt.count);
    text_set ts = {0};
    ts.cap = pow2_at_least(2 * (size_t)n_tok_max);
    ts.slot = calloc(ts.cap, sizeof *ts.slot);
    uint64_t *banned = NULL;
    size_t n_banned = 0, cap_banned = 0;
    out->text = calloc(n_tok_max, sizeof *out->text);
    out->merge = n_merges ? malloc(n_merges * sizeof *out->merge) : NULL;
    if (!sym || !start || !plen || !pt.key || !pt.count || !ts.slot || !out->text || (n_merges && !out->merge)) {
        err = fg_diag_set(diag, FG_ERR_NOMEM, "bpe_train: out of memory");
        goto done;
    }

    /* Byte tokens. */
    for (uint32_t b = 0; b < FG_BPE_BYTE_TOKENS; b++) {
        char u[4];
        int n = fg_byte_to_utf8((uint8_t)b, u);
        out->text[b] = malloc((size_t)n + 1);
        if (!out->text[b]) {
            err = fg_diag_set(diag, FG_ERR_NOMEM, "bpe_train: out of memory");
            goto done;
        }
        memcpy(out->text[b], u, (size_t)n);
        out->text[b][n] = '\0';
        out->n_tokens = b + 1;
        text_set_put(&ts, out->text, b);
    }

    /* Pieces. */
    pieces pc = {start, plen, 0};
    (void)fg_pretok_split(FG_PRETOK_GPT2, text, len, add_piece, &pc);
    size_t n_pieces = pc.n;
    for (size_t i = 0; i < len; i++)
        sym[i] = (unsigned char)text[i];

    while (out->n_merges < n_merges) {
        pair_table_clear(&pt);
        for (size_t p = 0; p < n_pieces; p++) {
            const uint32_t *s = sym + start[p];
            for (size_t i = 0; i + 1 < plen[p]; i++)
                pair_table_add(&pt, pair_key(s[i], s[i + 1]));
        }
        /* Best pair by (count desc, key asc), skipping banned pairs; a pair whose
         * text already exists is banned and the search repeats. */
        for (;;) {
            uint64_t best_key = EMPTY_KEY, best_count = 0;
            for (size_t i = 0; i < pt.cap; i++) {
                uint64_t k = pt.key[i];
                if (k == EMPTY_KEY)
                    continue;
                if (pt.count[i] < best_count || (pt.count[i] == best_count && k > best_key))
                    continue;
                int is_banned = 0;
                for (size_t j = 0; j < n_banned && !is_banned; j++)
                    is_banned = banned[j] == k;
                if (is_banned)
                    continue;
                best_key = k;
                best_count = pt.count[i];
            }
            if (best_key == EMPTY_KEY) {
                err = fg_diag_set(diag, FG_ERR_INVALID_ARG,
                                  "bpe_train: the text yields only %u of %u merges (too little text)",
                                  out->n_merges, n_merges);
                goto done;
            }
            uint32_t left = (uint32_t)(best_key >> 32), right = (uint32_t)best_key;
            size_t ll = strlen(out->text[left]), lr = strlen(out->text[right]);
            char *t = malloc(ll + lr + 1);
            if (!t) {
                err = fg_diag_set(diag, FG_ERR_NOMEM, "bpe_train: out of memory");
                goto done;
            }
            memcpy(t, out->text[left], ll);
            memcpy(t + ll, out->text[right], lr + 1);
            if (text_set_has(&ts, out->text, t)) {
                free(t);
                if (n_banned == cap_banned) {
                    size_t nc = cap_banned ? 2 * cap_banned : 16;
                    uint64_t *nb = realloc(banned, nc * sizeof *nb);
                    if (!nb) {
                        err = fg_diag_set(diag, FG_ERR_NOMEM, "bpe_train: out of memory");
                        goto done;
                    }
                    banned = nb;
                    cap_banned = nc;
                }
                banned[n_banned++] = best_key;
                continue;
            }
            uint32_t id = out->n_tokens;
            out->text[id] = t;
            out->n_tokens++;
            text_set_put(&ts, out->text, id);
            out->merge[out->n_merges][0] = left;
            out->merge[out->n_merges][1] = right;
            out->n_merges++;
            apply_merge(sym, start, plen, n_pieces, left, right, id);
            break;
        }
    }

done:
    free(sym);
    free(start);
    free(plen);
    free(pt.key);
    free(pt.count);
    free(ts.slot);
    free(banned);
    if (err)
        fg_bpe_vocab_free(out);
    return err;
}
