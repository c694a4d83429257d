/* tokenizer.c: byte-level BPE over a GGUF vocabulary.
 *
 * Design.
 *  - Create copies every token string into one arena, together with the bytes
 *    the token stands for (decoded once here, so decode is a memcpy per token).
 *    Normal tokens are GPT-2 byte-mapped text and decode through
 *    fg_utf8_to_byte; a normal token whose text is not byte-mapped (no encode
 *    path produces one) decodes to its raw text. Control (type 3) and
 *    user-defined (type 4) tokens decode to their raw text; control ones only
 *    when render_special.
 *  - BPE runs on normal tokens only: the text -> id table holds normal tokens
 *    (first occurrence of a duplicated string wins), byte_tok[] gives the token
 *    of each byte, and a (left id, right id) -> (rank, merged id) table holds
 *    the merges. Both tables are open addressing, so create is O(vocab +
 *    merges) and every lookup O(1).
 *  - Control and user-defined texts sit in a byte trie (edges in the same kind
 *    of hash table), used only when the caller asks for parse_special; the
 *    trie gives the longest match at a position in O(match length).
 *  - Encode splits the text at special tokens (if asked), then into pieces
 *    (engine/tokenizer/pretokenize.h), and merges each piece with a binary heap of
 *    candidate pairs ordered by (rank, position). Merging always folds the
 *    right symbol into the left one, and a heap entry records the two ids it
 *    was made from, so a stale entry is recognised on pop and dropped. A piece
 *    of n bytes costs O(n log n): a 1 MB run of one symbol is fine.
 *  - Scratch for a piece (symbols and heap) is allocated per encode call and
 *    grown to the longest piece, never per token; the tokenizer itself stays
 *    immutable so concurrent encodes need no lock.
 */
#include "engine/tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/base/hash64.h"
#include "engine/tokenizer/byte_unicode.h"
#include "engine/tokenizer/pretokenize.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"
#define KEY_BOS "tokenizer.ggml.bos_token_id"
#define KEY_EOS "tokenizer.ggml.eos_token_id"
#define KEY_ADD_BOS "tokenizer.ggml.add_bos_token"
#define KEY_PRE "tokenizer.ggml.pre"

enum { TOK_NORMAL = 0, TOK_CONTROL = 3, TOK_USER = 4 };

/* Largest text encode accepts: piece positions are 32-bit in the scratch. */
#define MAX_ENCODE_LEN ((size_t)UINT32_MAX - 1)

typedef struct token {
    const char *text;   /* NUL-terminated (may also hold NULs), in the arena */
    const char *bytes;  /* what the token decodes to, in the arena */
    uint32_t text_len;
    uint32_t bytes_len;
    uint8_t type;       /* TOK_NORMAL, TOK_CONTROL or TOK_USER */
} token;

/* Open-addressing map from a uint64 key to a uint64 value (linear probing).
 * EMPTY marks a free slot, so keys must never equal it. */
#define MAP_EMPTY UINT64_MAX
typedef struct u64map {
    uint64_t *keys;
    uint64_t *vals;
    size_t mask;
    size_t count;
} u64map;

struct fg_tokenizer {
    int32_t n_vocab;
    int32_t bos, eos;  /* -1 when absent */
    bool add_bos;
    fg_pretok_kind pre; /* from tokenizer.ggml.pre */
    token *tok;        /* [n_vocab] */
    char *arena;

    int32_t *text_ids; /* string table: slots hold normal token ids or -1 */
    size_t text_mask;

    int32_t byte_tok[256];

    u64map merges;     /* (left << 32 | right) -> (rank << 32 | merged id) */

    /* Trie of special texts: node 0 is the root; edges (node << 8 | byte) ->
     * child; node_tok[node] is the special ending there or -1. */
    u64map trie;
    int32_t *node_tok;
    uint32_t n_nodes;
    bool first_byte[256]; /* a special starts with this byte: cheap skip */
    bool has_special;
};

/* ---------------------------------------------------------------- hashing */

static uint64_t hash_u64(uint64_t x)
{
    /* splitmix64 finaliser: pair keys differ in few bits, so mix them well. */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Smallest power of two >= 2 * n (load factor <= 1/2), at least 16. */
static size_t table_size(size_t n)
{
    size_t s = 16;
    while (s < 2 * n)
        s <<= 1;
    return s;
}

static bool map_init(u64map *m, size_t expected)
{
    size_t n = table_size(expected);
    m->keys = malloc(n * sizeof *m->keys);
    m->vals = malloc(n * sizeof *m->vals);
    if (!m->keys || !m->vals)
        return false;
    memset(m->keys, 0xff, n * sizeof *m->keys); /* all MAP_EMPTY */
    m->mask = n - 1;
    m->count = 0;
    return true;
}

static void map_free(u64map *m)
{
    free(m->keys);
    free(m->vals);
}

static bool map_get(const u64map *m, uint64_t key, uint64_t *val)
{
    for (size_t i = hash_u64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return true;
        }
        if (m->keys[i] == MAP_EMPTY)
            return false;
    }
}

/* Inserts key if absent (an existing value is kept). The caller sized the
 * table for every insert it will make, so it never fills. */
static void map_put_new(u64map *m, uint64_t key, uint64_t val)
{
    size_t i = hash_u64(key) & m->mask;
    while (m->keys[i] != MAP_EMPTY) {
        if (m->keys[i] == key)
            return;
        i = (i + 1) & m->mask;
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->count++;
}

/* Normal token with exactly this text, or -1. */
static int32_t text_lookup(const fg_tokenizer_t *t, const char *s, size_t n)
{
    for (size_t i = fg_fnv1a64(s, n) & t->text_mask;; i = (i + 1) & t->text_mask) {
        int32_t id = t->text_ids[i];
        if (id < 0)
            return -1;
        const token *k = &t->tok[id];
        if (k->text_len == n && memcmp(k->text, s, n) == 0)
            return id;
    }
}

/* Adds id unless a token with the same text is there already (first wins). */
static void text_insert(fg_tokenizer_t *t, int32_t id)
{
    const token *k = &t->tok[id];
    size_t i = fg_fnv1a64(k->text, k->text_len) & t->text_mask;
    for (; t->text_ids[i] >= 0; i = (i + 1) & t->text_mask) {
        const token *o = &t->tok[t->text_ids[i]];
        if (o->text_len == k->text_len && memcmp(o->text, k->text, k->text_len) == 0)
            return;
    }
    t->text_ids[i] = id;
}

/* ---------------------------------------------------------------- create */

/* Writes s[0..n) into dst as a short, single-line, quoted-safe excerpt for a
 * diagnostic: non-printable ASCII bytes become \xNN, long strings are cut. */
static const char *excerpt(char *dst, size_t cap, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 8 >= cap) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        if (c < 0x20 || c == 0x7f || c == '"' || c == '\\')
            o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
        else
            dst[o++] = (char)c;
    }
    dst[o] = '\0';
    return dst;
}

/* Reads an optional token id key: -1 when absent, else checked < n_vocab. */
static fg_err read_opt_id(const fg_gguf_t *g, const char *key, int32_t n_vocab, int32_t *out,
                          fg_diag *diag)
{
    uint32_t v;
    fg_err e = fg_gguf_get_u32(g, key, &v);
    if (e == FG_ERR_NOT_FOUND) {
        *out = -1;
        return FG_OK;
    }
    if (e != FG_OK)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s: not an unsigned 32-bit integer (%s)", key,
                           fg_err_name(e));
    if (v >= (uint32_t)n_vocab)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s = %u is outside the vocabulary of %d tokens",
                           key, v, n_vocab);
    *out = (int32_t)v;
    return FG_OK;
}

/* Fills tok[] and the arena from the tokens (and token_type) arrays. */
static fg_err load_tokens(fg_tokenizer_t *t, const fg_gguf_t *g, fg_diag *diag)
{
    fg_gguf_vtype et;
    uint64_t n;
    fg_err e = fg_gguf_get_arr(g, KEY_TOKENS, &et, &n);
    if (e == FG_ERR_NOT_FOUND)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is missing", KEY_TOKENS);
    if (e != FG_OK || et != FG_GGUF_STRING)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is not an array of strings", KEY_TOKENS);
    if (n == 0 || n > INT32_MAX)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s has %llu entries (need 1..%d)", KEY_TOKENS,
                           (unsigned long long)n, INT32_MAX);
    t->n_vocab = (int32_t)n;

    bool have_types = false;
    uint64_t n_types;
    e = fg_gguf_get_arr(g, KEY_TYPES, &et, &n_types);
    if (e == FG_OK) {
        bool integer = et == FG_GGUF_INT32 || et == FG_GGUF_UINT32 || et == FG_GGUF_INT8 ||
                       et == FG_GGUF_UINT8 || et == FG_GGUF_INT16 || et == FG_GGUF_UINT16 ||
                       et == FG_GGUF_INT64 || et == FG_GGUF_UINT64;
        if (!integer)
            return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is not an integer array", KEY_TYPES);
        if (n_types != n)
            return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s has %llu entries but %s has %llu",
                               KEY_TYPES, (unsigned long long)n_types, KEY_TOKENS,
                               (unsigned long long)n);
        have_types = true;
    } else if (e != FG_ERR_NOT_FOUND) {
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s: %s", KEY_TYPES, fg_err_name(e));
    }

    t->tok = calloc((size_t)n, sizeof *t->tok);
    if (!t->tok)
        return fg_diag_set(diag, FG_ERR_NOMEM, "tokenizer: %llu tokens", (unsigned long long)n);

    /* Pass 1: types and the arena size (text + NUL + decoded bytes, which are
     * never longer than the text). Lengths are bounded by the GGUF reader's
     * string limit, and their sum by the file size. */
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        fg_gguf_str s;
        if (fg_gguf_get_arr_str(g, KEY_TOKENS, i, &s) != FG_OK || s.len > UINT32_MAX)
            return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s[%llu] is unreadable", KEY_TOKENS,
                               (unsigned long long)i);
        total += 2 * (size_t)s.len + 1;
        int64_t ty = TOK_NORMAL;
        if (have_types && fg_gguf_get_arr_i64(g, KEY_TYPES, i, &ty) != FG_OK)
            return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s[%llu] is unreadable", KEY_TYPES,
                               (unsigned long long)i);
        t->tok[i].type = ty == TOK_CONTROL ? TOK_CONTROL : ty == TOK_USER ? TOK_USER : TOK_NORMAL;
        t->tok[i].text_len = (uint32_t)s.len;
    }
    t->arena = malloc(total ? total : 1);
    if (!t->arena)
        return fg_diag_set(diag, FG_ERR_NOMEM, "tokenizer: %zu bytes of token text", total);

    /* Pass 2: copy the text, then decode it right behind. */
    char *p = t->arena;
    for (uint64_t i = 0; i < n; i++) {
        token *k = &t->tok[i];
        fg_gguf_str s;
        (void)fg_gguf_get_arr_str(g, KEY_TOKENS, i, &s); /* read fine in pass 1 */
        memcpy(p, s.ptr, k->text_len);
        p[k->text_len] = '\0';
        k->text = p;
        p += k->text_len + 1;

        k->bytes = p;
        size_t o = 0, pos = 0;
        if (k->type == TOK_NORMAL) {
            while (pos < k->text_len) {
                size_t used;
                int b = fg_utf8_to_byte(k->text + pos, k->text_len - pos, &used);
                if (b < 0)
                    break;
                p[o++] = (char)b;
                pos += used;
            }
        }
        if (pos < k->text_len) {
            /* Special, or not byte-mapped text: the bytes are the text itself. */
            memcpy(p, k->text, k->text_len);
            o = k->text_len;
        }
        k->bytes_len = (uint32_t)o;
        p += k->text_len;
    }
    return FG_OK;
}

static fg_err build_text_table(fg_tokenizer_t *t, fg_diag *diag)
{
    size_t size = table_size((size_t)t->n_vocab);
    t->text_ids = malloc(size * sizeof *t->text_ids);
    if (!t->text_ids)
        return fg_diag_set(diag, FG_ERR_NOMEM, "tokenizer: string table");
    memset(t->text_ids, 0xff, size * sizeof *t->text_ids); /* all -1 */
    t->text_mask = size - 1;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tok[id].type == TOK_NORMAL && t->tok[id].text_len > 0)
            text_insert(t, id);

    for (int b = 0; b < 256; b++) {
        char u[4];
        int n = fg_byte_to_utf8((uint8_t)b, u);
        t->byte_tok[b] = text_lookup(t, u, (size_t)n);
        if (t->byte_tok[b] < 0) {
            u[n] = '\0';
            return fg_diag_set(diag, FG_ERR_TOKENIZER,
                               "byte 0x%02x has no normal token (expected the text \"%s\")", b, u);
        }
    }
    return FG_OK;
}

static fg_err load_merges(fg_tokenizer_t *t, const fg_gguf_t *g, fg_diag *diag)
{
    fg_gguf_vtype et;
    uint64_t n;
    fg_err e = fg_gguf_get_arr(g, KEY_MERGES, &et, &n);
    if (e == FG_ERR_NOT_FOUND)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is missing", KEY_MERGES);
    if (e != FG_OK || (n > 0 && et != FG_GGUF_STRING))
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is not an array of strings", KEY_MERGES);
    if (n >= UINT32_MAX)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s has too many entries (%llu)", KEY_MERGES,
                           (unsigned long long)n);
    if (!map_init(&t->merges, (size_t)n))
        return fg_diag_set(diag, FG_ERR_NOMEM, "tokenizer: merge table");

    char *cat = NULL; /* "A" "B" joined, for the result lookup; grown as needed */
    size_t cat_cap = 0;
    char ex[96];
    fg_err rc = FG_OK;
    for (uint64_t i = 0; i < n && rc == FG_OK; i++) {
        fg_gguf_str s;
        if (fg_gguf_get_arr_str(g, KEY_MERGES, i, &s) != FG_OK) {
            rc = fg_diag_set(diag, FG_ERR_TOKENIZER, "%s[%llu] is unreadable", KEY_MERGES,
                             (unsigned long long)i);
            break;
        }
        const char *sp = s.len ? memchr(s.ptr, ' ', (size_t)s.len) : NULL;
        size_t a_len = sp ? (size_t)(sp - s.ptr) : 0;
        size_t b_len = sp ? (size_t)s.len - a_len - 1 : 0;
        if (!sp || a_len == 0 || b_len == 0 || memchr(sp + 1, ' ', b_len)) {
            rc = fg_diag_set(diag, FG_ERR_TOKENIZER,
                             "%s[%llu] \"%s\" is not two tokens separated by one space", KEY_MERGES,
                             (unsigned long long)i, excerpt(ex, sizeof ex, s.ptr, (size_t)s.len));
            break;
        }
        int32_t a = text_lookup(t, s.ptr, a_len);
        int32_t b = text_lookup(t, sp + 1, b_len);
        if (a < 0 || b < 0) {
            const char *bad = a < 0 ? s.ptr : sp + 1;
            rc = fg_diag_set(diag, FG_ERR_TOKENIZER, "%s[%llu] names unknown token \"%s\"",
                             KEY_MERGES, (unsigned long long)i,
                             excerpt(ex, sizeof ex, bad, a < 0 ? a_len : b_len));
            break;
        }
        if (a_len + b_len > cat_cap) {
            size_t nc = (a_len + b_len) * 2;
            char *c = realloc(cat, nc);
            if (!c) {
                rc = fg_diag_set(diag, FG_ERR_NOMEM, "tokenizer: merge text");
                break;
            }
            cat = c;
            cat_cap = nc;
        }
        memcpy(cat, s.ptr, a_len);
        memcpy(cat + a_len, sp + 1, b_len);
        int32_t r = text_lookup(t, cat, a_len + b_len);
        /* A merge whose result is not in the vocabulary can never apply (as
         * in llama.cpp): skip it. A repeated pair keeps its first (best) rank. */
        if (r >= 0)
            map_put_new(&t->merges, (uint64_t)(uint32_t)a << 32 | (uint32_t)b,
                        (uint64_t)i << 32 | (uint32_t)r);
    }
    free(cat);
    return rc;
}

static fg_err build_special_trie(fg_tokenizer_t *t, fg_diag *diag)
{
    size_t max_nodes = 1;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->tok[id].type != TOK_NORMAL)
            max_nodes += t->tok[id].text_len;
    if (max_nodes > UINT32_MAX / 2)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "special token texts are too long in total");
    if (!map_init(&t->trie, max_nodes))
        return fg_diag_set(diag, FG_ERR_NOMEM, "tokenizer: special token trie");
    t->node_tok = malloc(max_nodes * sizeof *t->node_tok);
    if (!t->node_tok)
        return fg_diag_set(diag, FG_ERR_NOMEM, "tokenizer: special token trie");
    t->node_tok[0] = -1;
    t->n_nodes = 1;

    for (int32_t id = 0; id < t->n_vocab; id++) {
        const token *k = &t->tok[id];
        if (k->type == TOK_NORMAL || k->text_len == 0)
            continue;
        uint32_t node = 0;
        for (uint32_t i = 0; i < k->text_len; i++) {
            uint64_t key = (uint64_t)node << 8 | (unsigned char)k->text[i], child;
            if (!map_get(&t->trie, key, &child)) {
                child = t->n_nodes++;
                t->node_tok[child] = -1;
                map_put_new(&t->trie, key, child);
            }
            node = (uint32_t)child;
        }
        if (t->node_tok[node] < 0) /* duplicate special text: first wins */
            t->node_tok[node] = id;
        t->first_byte[(unsigned char)k->text[0]] = true;
        t->has_special = true;
    }
    return FG_OK;
}

fg_err fg_tokenizer_create(const fg_gguf_t *g, fg_tokenizer_t **out, fg_diag *diag)
{
    if (!g || !out)
        return fg_diag_set(diag, FG_ERR_INVALID_ARG, "fg_tokenizer_create: NULL argument");
    *out = NULL;

    fg_gguf_str model;
    fg_err e = fg_gguf_get_str(g, KEY_MODEL, &model);
    if (e == FG_ERR_NOT_FOUND)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is missing", KEY_MODEL);
    if (e != FG_OK)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is not a string", KEY_MODEL);
    if (model.len != 4 || memcmp(model.ptr, "gpt2", 4) != 0) {
        char ex[64];
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is \"%s\"; only \"gpt2\" (byte-level BPE) is supported",
                           KEY_MODEL, excerpt(ex, sizeof ex, model.ptr, (size_t)model.len));
    }

    /* No key: the splitter this project's generated models had before they
     * wrote one, so their ids stay what they were. */
    fg_pretok_kind pre = FG_PRETOK_LEGACY;
    fg_gguf_str pre_name;
    e = fg_gguf_get_str(g, KEY_PRE, &pre_name);
    if (e != FG_OK && e != FG_ERR_NOT_FOUND)
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is not a string", KEY_PRE);
    if (e == FG_OK && !fg_pretok_kind_from_name(pre_name.ptr, (size_t)pre_name.len, &pre)) {
        char ex[64];
        return fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is \"%s\"; supported: %s", KEY_PRE,
                           excerpt(ex, sizeof ex, pre_name.ptr, (size_t)pre_name.len), FG_PRETOK_NAMES);
    }

    fg_tokenizer_t *t = calloc(1, sizeof *t);
    if (!t)
        return fg_diag_set(diag, FG_ERR_NOMEM, "tokenizer");
    t->pre = pre;
    if ((e = load_tokens(t, g, diag)) != FG_OK || (e = build_text_table(t, diag)) != FG_OK ||
        (e = load_merges(t, g, diag)) != FG_OK || (e = build_special_trie(t, diag)) != FG_OK ||
        (e = read_opt_id(g, KEY_BOS, t->n_vocab, &t->bos, diag)) != FG_OK ||
        (e = read_opt_id(g, KEY_EOS, t->n_vocab, &t->eos, diag)) != FG_OK)
        goto fail;

    t->add_bos = true;
    e = fg_gguf_get_bool(g, KEY_ADD_BOS, &t->add_bos);
    if (e == FG_ERR_NOT_FOUND) {
        t->add_bos = true;
    } else if (e != FG_OK) {
        e = fg_diag_set(diag, FG_ERR_TOKENIZER, "%s is not a bool", KEY_ADD_BOS);
        goto fail;
    }
    *out = t;
    return FG_OK;
fail:
    fg_tokenizer_destroy(t);
    return e;
}

void fg_tokenizer_destroy(fg_tokenizer_t *t)
{
    if (!t)
        return;
    free(t->tok);
    free(t->arena);
    free(t->text_ids);
    map_free(&t->merges);
    map_free(&t->trie);
    free(t->node_tok);
    free(t);
}

int32_t fg_tokenizer_vocab_size(const fg_tokenizer_t *t) { return t->n_vocab; }
int32_t fg_tokenizer_bos(const fg_tokenizer_t *t) { return t->bos; }
int32_t fg_tokenizer_eos(const fg_tokenizer_t *t) { return t->eos; }
bool fg_tokenizer_add_bos(const fg_tokenizer_t *t) { return t->add_bos; }

const char *fg_tokenizer_token_text(const fg_tokenizer_t *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_vocab)
        return NULL;
    return t->tok[id].text;
}

/* ---------------------------------------------------------------- encode */

typedef struct sym {
    int32_t id;    /* -1 once folded into its left neighbour */
    uint32_t prev; /* NONE at the ends */
    uint32_t next;
} sym;
#define NONE UINT32_MAX

typedef struct cand {
    uint32_t rank;
    uint32_t left;   /* index of the left symbol */
    int32_t left_id; /* ids when the entry was made: if either symbol changed */
    int32_t right_id;/* since, the entry is stale */
    int32_t merged;
} cand;

/* Per-call state: scratch buffers sized for the longest piece so far, and
 * the output cursor of the cap/n_out protocol. */
typedef struct enc {
    const fg_tokenizer_t *t;
    sym *syms;
    cand *heap;
    size_t cap_syms; /* heap capacity is 3 * cap_syms */
    size_t n_heap;
    int32_t *out;
    size_t cap;
    size_t n;
} enc;

static void emit(enc *s, int32_t id)
{
    if (s->n < s->cap)
        s->out[s->n] = id;
    s->n++;
}

static bool cand_less(const cand *a, const cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(enc *s, cand c)
{
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

static cand heap_pop(enc *s)
{
    cand top = s->heap[0];
    cand last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && cand_less(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!cand_less(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

/* Queues the pair starting at symbol l if a merge exists for it. */
static void try_pair(enc *s, uint32_t l)
{
    uint32_t r = s->syms[l].next;
    if (r == NONE)
        return;
    uint64_t v;
    int32_t a = s->syms[l].id, b = s->syms[r].id;
    if (!map_get(&s->t->merges, (uint64_t)(uint32_t)a << 32 | (uint32_t)b, &v))
        return;
    heap_push(s, (cand){(uint32_t)(v >> 32), l, a, b, (int32_t)(uint32_t)v});
}

static bool reserve(enc *s, size_t n)
{
    if (n <= s->cap_syms)
        return true;
    size_t c = s->cap_syms ? s->cap_syms : 64;
    while (c < n)
        c *= 2;
    /* Each merge queues at most two new pairs, on top of n - 1 initial ones. */
    sym *ns = realloc(s->syms, c * sizeof *ns);
    if (!ns)
        return false;
    s->syms = ns;
    cand *nh = realloc(s->heap, 3 * c * sizeof *nh);
    if (!nh)
        return false;
    s->heap = nh;
    s->cap_syms = c;
    return true;
}

/* BPE over one piece p[0..n), n >= 1. */
static fg_err bpe_piece(enc *s, const unsigned char *p, size_t n)
{
    const fg_tokenizer_t *t = s->t;
    if (n == 1) {
        emit(s, t->byte_tok[p[0]]);
        return FG_OK;
    }
    if (!reserve(s, n))
        return FG_ERR_NOMEM;
    sym *y = s->syms;
    for (size_t i = 0; i < n; i++) {
        y[i].id = t->byte_tok[p[i]];
        y[i].prev = i ? (uint32_t)(i - 1) : NONE;
        y[i].next = i + 1 < n ? (uint32_t)(i + 1) : NONE;
    }
    s->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++)
        try_pair(s, (uint32_t)i);

    while (s->n_heap) {
        cand c = heap_pop(s);
        sym *l = &y[c.left];
        /* A left symbol that kept its id also kept its right neighbour
         * (absorbing it would have changed the id), so checking both ids is
         * enough to know the pair is still there. */
        if (l->id != c.left_id || l->next == NONE || y[l->next].id != c.right_id)
            continue;
        uint32_t r = l->next;
        l->id = c.merged;
        l->next = y[r].next;
        if (l->next != NONE)
            y[l->next].prev = c.left;
        y[r].id = -1;
        if (l->prev != NONE)
            try_pair(s, l->prev);
        try_pair(s, c.left);
    }
    /* Symbol 0 is never folded away: merges fold right into left. */
    for (uint32_t i = 0; i != NONE; i = y[i].next)
        emit(s, y[i].id);
    return FG_OK;
}

typedef struct plain_ctx {
    enc *s;
    const unsigned char *text;
} plain_ctx;

static int plain_piece(void *ctx, size_t start, size_t end)
{
    plain_ctx *c = ctx;
    return bpe_piece(c->s, c->text + start, end - start);
}

/* Text without specials: pieces, then BPE on each. */
static fg_err encode_plain(enc *s, const char *text, size_t len)
{
    plain_ctx c = {s, (const unsigned char *)text};
    return (fg_err)fg_pretok_split(s->t->pre, text, len, plain_piece, &c);
}

/* Longest special token starting at text[pos]; returns its id and sets *end,
 * or returns -1. */
static int32_t match_special(const fg_tokenizer_t *t, const char *text, size_t len, size_t pos,
                             size_t *end)
{
    int32_t best = -1;
    uint64_t node = 0;
    for (size_t i = pos; i < len; i++) {
        if (!map_get(&t->trie, node << 8 | (unsigned char)text[i], &node))
            break;
        if (t->node_tok[node] >= 0) {
            best = t->node_tok[node];
            *end = i + 1;
        }
    }
    return best;
}

/* Encodes text, matching specials only inside the spans (all of it: NULL). */
static fg_err encode_impl(const fg_tokenizer_t *t, const char *text, size_t len, bool add_bos,
                          const fg_tok_span *spans, size_t n_spans, int32_t *out, size_t cap, size_t *n_out)
{
    enc s = {.t = t, .out = out, .cap = cap};
    if (add_bos && t->bos >= 0)
        emit(&s, t->bos);

    fg_err e = FG_OK;
    size_t pos = 0;
    fg_tok_span all = {0, len};
    if (!spans) {
        spans = &all;
        n_spans = 1;
    }
    for (size_t k = 0; k < n_spans && t->has_special && e == FG_OK; k++) {
        size_t span_end = spans[k].end;
        for (size_t i = spans[k].start > pos ? spans[k].start : pos; i < span_end && e == FG_OK;) {
            size_t end;
            int32_t id;
            if (!t->first_byte[(unsigned char)text[i]] ||
                (id = match_special(t, text, span_end, i, &end)) < 0) {
                i++;
                continue;
            }
            e = encode_plain(&s, text + pos, i - pos);
            emit(&s, id);
            pos = i = end;
        }
    }
    if (e == FG_OK)
        e = encode_plain(&s, text + pos, len - pos);
    free(s.syms);
    free(s.heap);
    if (e != FG_OK)
        return e;
    *n_out = s.n;
    return s.n > cap ? FG_ERR_INVALID_ARG : FG_OK;
}

fg_err fg_tokenizer_encode(const fg_tokenizer_t *t, const char *text, size_t len, bool add_bos,
                           bool parse_special, int32_t *out, size_t cap, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!t || !n_out || (len && !text) || (cap && !out) || len > MAX_ENCODE_LEN)
        return FG_ERR_INVALID_ARG;
    static const fg_tok_span none = {0, 0};
    return encode_impl(t, text, len, add_bos, parse_special ? NULL : &none, parse_special ? 0 : 1, out, cap,
                       n_out);
}

fg_err fg_tokenizer_encode_spans(const fg_tokenizer_t *t, const char *text, size_t len, const fg_tok_span *spans,
                                 size_t n_spans, int32_t *out, size_t cap, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!t || !n_out || (len && !text) || (cap && !out) || (n_spans && !spans) || len > MAX_ENCODE_LEN)
        return FG_ERR_INVALID_ARG;
    for (size_t k = 0; k < n_spans; k++)
        if (spans[k].start > spans[k].end || spans[k].end > len || (k && spans[k].start < spans[k - 1].end))
            return FG_ERR_INVALID_ARG;
    static const fg_tok_span none = {0, 0};
    return encode_impl(t, text, len, false, n_spans ? spans : &none, n_spans ? n_spans : 1, out, cap, n_out);
}

int32_t fg_tokenizer_special_id(const fg_tokenizer_t *t, const char *s, size_t len)
{
    size_t end = 0;
    if (!t || !s || len == 0 || !t->has_special)
        return -1;
    int32_t id = match_special(t, s, len, 0, &end);
    return id >= 0 && end == len ? id : -1;
}

/* ---------------------------------------------------------------- decode */

fg_err fg_tokenizer_token_bytes(const fg_tokenizer_t *t, int32_t id, bool render_special,
                                const char **ptr, size_t *len)
{
    if (!t || !ptr || !len)
        return FG_ERR_INVALID_ARG;
    if (id < 0 || id >= t->n_vocab)
        return FG_ERR_TOKEN_ID;
    const token *k = &t->tok[id];
    *ptr = k->bytes;
    *len = k->type == TOK_CONTROL && !render_special ? 0 : k->bytes_len;
    return FG_OK;
}

fg_err fg_tokenizer_decode(const fg_tokenizer_t *t, const int32_t *ids, size_t n, bool render_special,
                           char *buf, size_t cap, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!t || !n_out || (n && !ids) || (cap && !buf))
        return FG_ERR_INVALID_ARG;
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        fg_err e = fg_tokenizer_token_bytes(t, ids[i], render_special, &p, &l);
        if (e != FG_OK)
            return e;
        if (need < cap) {
            size_t room = cap - need;
            memcpy(buf + need, p, l < room ? l : room);
        }
        need += l;
    }
    *n_out = need;
    if (need < cap)
        buf[need] = '\0';
    return need > cap ? FG_ERR_INVALID_ARG : FG_OK;
}
