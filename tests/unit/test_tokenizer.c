/* test_tokenizer.c: the byte-level BPE tokenizer over a small vocabulary
 * written here with the GGUF writer (the pieces it merges are
 * tests/unit/test_pretokenize.c's subject).
 *
 * The vocabulary: ids 0..255 are the byte tokens in byte order (so a byte's
 * id is the byte), then a few merges chosen so that rank order matters
 * (" her" must not become "Ġh"+"er" because "h e" ranks first), then BOS/EOS
 * control tokens, two user-defined tokens (one a prefix of EOS, to check the
 * longest match) and a duplicate of "he". Expected ids below are worked out by
 * hand from that table.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/gguf_writer.h"
#include "engine/tokenizer/byte_unicode.h"
#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/unit/fg_test.h"
#include "tests/unit/fg_test_files.h"

#define BOS_TEXT "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define EOS_TEXT "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define EOS_PREFIX "<\xef\xbd\x9c" "end" /* user-defined, a prefix of EOS */
#define THINK "<think>"

/* G = "Ġ" (space), C = "Ċ" (newline) in GPT-2's byte mapping. */
#define G "\xc4\xa0"
#define C "\xc4\x8a"

enum {
    T_GT = 256, T_HE, T_GTHE, T_IN, T_GA, T_ER, T_LL, T_GH, T_GG, T_GGGG, T_EX2, T_EX4,
    T_HELL, T_HELLO, T_GHELLO, T_APOS_S, T_12, T_CC, T_OR, T_GW, T_GWOR, T_LD, T_GWORLD,
    T_BOS, T_EOS, T_EOS_PREFIX, T_THINK, T_HE_DUP, N_VOCAB
};

static const char *const extra_tokens[] = {
    G "t", "he", G "the", "in", G "a", "er", "ll", G "h", G G, G G G G, "!!", "!!!!",
    "hell", "hello", G "hello", "'s", "12", C C, "or", G "w", G "wor", "ld", G "world",
    BOS_TEXT, EOS_TEXT, EOS_PREFIX, THINK, "he",
};

/* Rank = index. "x y" names real tokens but "xy" is not one: skipped. */
static const char *const base_merges[] = {
    G " t", "h e", G "t he", "i n", G " a", "e r", "l l", G " h", G " " G, G G " " G G, "! !",
    "!! !!", "he ll", "hell o", G " hello", "' s", "1 2", C " " C, "o r", G " w", G "w or",
    "l d", G "wor ld", "x y",
};
#define N_MERGES (sizeof base_merges / sizeof base_merges[0])

/* How a vocabulary file deviates from the good one (all zero: good). */
typedef struct variant {
    const char *name;
    bool no_tokens;
    bool tokens_not_strings;
    bool no_model;
    const char *model; /* NULL: "gpt2" */
    const char *pre;   /* tokenizer.ggml.pre; NULL: absent */
    bool pre_not_string;
    int break_byte;    /* >0: that byte's token gets another text */
    const char *bad_merge; /* appended to the merges */
    bool no_merges;
    bool types_short;
    bool no_bos;
    uint32_t bos;      /* 0: T_BOS */
    int add_bos;       /* 0 absent, 1 true, 2 false */
    bool add_bos_wrong_type;
} variant;

static fg_err write_vocab(const char *path, const variant *v, fg_diag *d)
{
    static char bytes_text[256][4];
    const char *tokens[N_VOCAB];
    int32_t types[N_VOCAB];
    for (int b = 0; b < 256; b++) {
        int n = fg_byte_to_utf8((uint8_t)b, bytes_text[b]);
        bytes_text[b][n] = '\0';
        tokens[b] = bytes_text[b];
        types[b] = 1;
    }
    for (int i = 256; i < N_VOCAB; i++) {
        tokens[i] = extra_tokens[i - 256];
        types[i] = 1;
    }
    types[T_BOS] = types[T_EOS] = 3;
    types[T_EOS_PREFIX] = types[T_THINK] = 4;
    if (v->break_byte > 0)
        tokens[v->break_byte] = "broken";

    const char *merges[N_MERGES + 1];
    size_t n_merges = N_MERGES;
    memcpy(merges, base_merges, sizeof base_merges);
    if (v->bad_merge)
        merges[n_merges++] = v->bad_merge;

    fg_gguf_writer_t *w;
    fg_err e = fg_gguf_writer_create(path, 0, &w, d);
    if (e != FG_OK)
        return e;
    e = fg_gguf_writer_add_str(w, "general.architecture", "test");
    if (!e && !v->no_model)
        e = fg_gguf_writer_add_str(w, "tokenizer.ggml.model", v->model ? v->model : "gpt2");
    if (!e && v->pre)
        e = fg_gguf_writer_add_str(w, "tokenizer.ggml.pre", v->pre);
    if (!e && v->pre_not_string)
        e = fg_gguf_writer_add_u32(w, "tokenizer.ggml.pre", 3);
    if (!e && !v->no_tokens && !v->tokens_not_strings)
        e = fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, N_VOCAB);
    if (!e && v->tokens_not_strings)
        e = fg_gguf_writer_add_arr_i32(w, "tokenizer.ggml.tokens", types, N_VOCAB);
    if (!e)
        e = fg_gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", types,
                                       v->types_short ? N_VOCAB - 1 : N_VOCAB);
    if (!e && !v->no_merges)
        e = fg_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, NULL, n_merges);
    if (!e && !v->no_bos)
        e = fg_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", v->bos ? v->bos : T_BOS);
    if (!e)
        e = fg_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", T_EOS);
    if (!e && v->add_bos)
        e = fg_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos == 1);
    if (!e && v->add_bos_wrong_type)
        e = fg_gguf_writer_add_str(w, "tokenizer.ggml.add_bos_token", "yes");
    if (!e)
        e = fg_gguf_writer_begin_data(w, d);
    if (!e)
        e = fg_gguf_writer_finish(w, d);
    fg_gguf_writer_destroy(w);
    return e;
}

/* Writes, opens and loads a variant. *g must be closed by the caller. */
static fg_err load_variant(const variant *v, fg_gguf_t **g, fg_tokenizer_t **t, fg_diag *d)
{
    char path[128];
    snprintf(path, sizeof path, "%s/vocab.gguf", fg_test_dir);
    *g = NULL;
    *t = NULL;
    fg_err e = write_vocab(path, v, d);
    if (e != FG_OK) {
        fprintf(stderr, "write_vocab(%s): %s: %s\n", v->name, fg_err_name(e), d->msg);
        return e;
    }
    e = fg_gguf_open_file(path, g, d);
    unlink(path);
    if (e != FG_OK) {
        fprintf(stderr, "open(%s): %s: %s\n", v->name, fg_err_name(e), d->msg);
        return e;
    }
    return fg_tokenizer_create(*g, t, d);
}

/* ---------------------------------------------------------------- encode / decode */

static size_t encode(const fg_tokenizer_t *t, const char *s, size_t len, bool bos, bool special,
                     int32_t *out, size_t cap)
{
    size_t n = 0;
    fg_err e = fg_tokenizer_encode(t, s, len, bos, special, out, cap, &n);
    CHECK_MSG(e == FG_OK, "encode: %s (need %zu, cap %zu)", fg_err_name(e), n, cap);
    return e == FG_OK ? n : 0;
}

/* decode(encode(s)) == s, without specials, and with them when asked. */
static bool round_trips(const fg_tokenizer_t *t, const char *s, size_t len, bool special)
{
    size_t cap = len + 2;
    int32_t *ids = malloc(cap * sizeof *ids);
    char *back = malloc(len + 1);
    size_t n = 0, m = 0;
    bool ok = ids && back &&
              fg_tokenizer_encode(t, s, len, false, special, ids, cap, &n) == FG_OK &&
              fg_tokenizer_decode(t, ids, n, special, back, len + 1, &m) == FG_OK && m == len &&
              memcmp(back, s, len) == 0 && back[len] == '\0';
    free(ids);
    free(back);
    return ok;
}

typedef struct enc_case {
    const char *in;
    int32_t ids[8];
    size_t n;
} enc_case;

static void test_expected_ids(const fg_tokenizer_t *t)
{
    static const enc_case cases[] = {
        {"hello world", {T_HELLO, T_GWORLD}, 2},
        {" the", {T_GTHE}, 1},
        {"the", {'t', T_HE}, 2},
        {" her", {' ', T_HE, 'r'}, 3}, /* "h e" ranks before "Ġ h" and "e r" */
        {"  hello", {' ', T_GHELLO}, 2},
        {"!!!!!", {T_EX4, '!'}, 2},
        {"it's", {'i', 't', T_APOS_S}, 3},
        {"12345", {T_12, '3', '4', '5'}, 4},
        {"a\n\nb", {'a', '\n', '\n', 'b'}, 4},
        {"a\n\n", {'a', T_CC}, 2},
        {"      ", {T_GGGG, T_GG}, 2},
        {" hello world  ", {T_GHELLO, T_GWORLD, T_GG}, 3},
        {" in a", {' ', T_IN, T_GA}, 3},
        {"xy", {'x', 'y'}, 2}, /* "x y" has no token for its result: skipped */
        {"he", {T_HE}, 1},     /* the duplicate "he" loses to the first */
    };
    int32_t out[16];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = encode(t, cases[c].in, strlen(cases[c].in), false, false, out, 16);
        bool same = n == cases[c].n && memcmp(out, cases[c].ids, n * sizeof *out) == 0;
        CHECK_MSG(same, "\"%s\": got %zu ids, first %d", cases[c].in, n, n ? out[0] : -1);
    }
}

static void test_round_trips(const fg_tokenizer_t *t)
{
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t id = -1;
        CHECK(encode(t, &c, 1, false, false, &id, 1) == 1 && id == b);
        CHECK_MSG(round_trips(t, &c, 1, false), "byte 0x%02x", b);
    }
    CHECK(round_trips(t, "", 0, false));

    uint32_t seed = 99;
    char buf[700];
    for (int r = 0; r < 400; r++) {
        size_t len = (size_t)r * 7 % sizeof buf;
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1664525u + 1013904223u;
            static const char alpha[] = " hel!o\n'str12 ";
            buf[i] = (seed >> 24) & 1 ? alpha[(seed >> 16) % (sizeof alpha - 1)] : (char)(seed >> 8);
        }
        CHECK_MSG(round_trips(t, buf, len, false), "random string %d (%zu bytes)", r, len);
        CHECK_MSG(round_trips(t, buf, len, true), "random string %d with specials", r);
    }
    static const char mixed[] = "x" BOS_TEXT "y " EOS_PREFIX " " EOS_TEXT THINK "\n";
    CHECK(round_trips(t, mixed, sizeof mixed - 1, false));
    CHECK(round_trips(t, mixed, sizeof mixed - 1, true));
}

static void test_long_runs(const fg_tokenizer_t *t)
{
    const size_t n = 100000;
    char *s = malloc(1 << 20);
    int32_t *ids = malloc(((1 << 20) + 1) * sizeof *ids);
    if (!s || !ids) {
        CHECK(0);
        free(s);
        free(ids);
        return;
    }
    clock_t t0 = clock();
    memset(s, '!', n);
    size_t got = encode(t, s, n, false, false, ids, n);
    bool all4 = got == n / 4;
    for (size_t i = 0; i < got && all4; i++)
        all4 = ids[i] == T_EX4;
    CHECK_MSG(all4, "100k '!': %zu ids", got);
    CHECK(round_trips(t, s, n, false));

    /* 1 MiB of spaces is a single piece; it must merge in O(n log n). */
    memset(s, ' ', 1 << 20);
    got = encode(t, s, 1 << 20, false, false, ids, (1 << 20) + 1);
    bool all_gggg = got == (1 << 18);
    for (size_t i = 0; i < got && all_gggg; i++)
        all_gggg = ids[i] == T_GGGG;
    CHECK_MSG(all_gggg, "1 MiB of spaces: %zu ids", got);

    memset(s, 'a', 1 << 20); /* one piece, no merge applies */
    CHECK(encode(t, s, 1 << 20, false, false, ids, 1 << 20) == 1 << 20);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK_MSG(secs < 20, "long runs took %.1f s", secs);
    free(s);
    free(ids);
}

static void test_specials(const fg_tokenizer_t *t)
{
    CHECK(fg_tokenizer_vocab_size(t) == N_VOCAB);
    CHECK(fg_tokenizer_bos(t) == T_BOS);
    CHECK(fg_tokenizer_eos(t) == T_EOS);
    CHECK(fg_tokenizer_add_bos(t)); /* key absent: default true */
    CHECK(strcmp(fg_tokenizer_token_text(t, T_GT), G "t") == 0);
    CHECK(strcmp(fg_tokenizer_token_text(t, T_HE_DUP), "he") == 0);
    CHECK(fg_tokenizer_token_text(t, N_VOCAB) == NULL);
    CHECK(fg_tokenizer_token_text(t, -1) == NULL);

    int32_t out[128];
    size_t n = encode(t, "hi", 2, true, false, out, 128);
    CHECK(n == 3 && out[0] == T_BOS && out[1] == 'h' && out[2] == 'i');
    n = encode(t, "", 0, true, false, out, 128);
    CHECK(n == 1 && out[0] == T_BOS);
    CHECK(encode(t, "", 0, false, false, out, 128) == 0);

    static const char s[] = "a" BOS_TEXT "b" EOS_TEXT EOS_PREFIX THINK " " EOS_PREFIX "x";
    n = encode(t, s, sizeof s - 1, false, true, out, 128);
    static const int32_t want[] = {'a', T_BOS, 'b', T_EOS, T_EOS_PREFIX, T_THINK, ' ', T_EOS_PREFIX, 'x'};
    CHECK_MSG(n == 9 && memcmp(out, want, sizeof want) == 0, "parse_special: %zu ids", n);

    n = encode(t, s, sizeof s - 1, false, false, out, 128);
    bool plain = n > 9;
    for (size_t i = 0; i < n; i++)
        plain = plain && out[i] < T_BOS;
    CHECK_MSG(plain, "without parse_special no special id may appear");

    /* Specials only where the spans allow them, and only whole inside one:
     * s = "a" BOS "b" EOS EOS_PREFIX THINK " " EOS_PREFIX "x". */
    size_t bos_at = 1, eos_at = 1 + strlen(BOS_TEXT) + 1;
    fg_tok_span sp[] = {{bos_at, bos_at + strlen(BOS_TEXT)}, {eos_at, eos_at + 2}};
    CHECK(fg_tokenizer_encode_spans(t, s, sizeof s - 1, sp, 2, out, 128, &n) == FG_OK);
    CHECK_MSG(n > 3 && out[0] == 'a' && out[1] == T_BOS && out[2] == 'b' && out[3] != T_EOS,
              "spans: BOS inside its span, EOS cut by the span's end stays text");
    bool one_special = true;
    for (size_t i = 2; i < n; i++)
        one_special = one_special && out[i] < T_BOS;
    CHECK(one_special);
    fg_tok_span unsorted[] = {{5, 6}, {1, 2}}, past[] = {{0, sizeof s}}, inverted[] = {{3, 2}};
    CHECK(fg_tokenizer_encode_spans(t, s, sizeof s - 1, unsorted, 2, out, 128, &n) == FG_ERR_INVALID_ARG);
    CHECK(fg_tokenizer_encode_spans(t, s, sizeof s - 1, past, 1, out, 128, &n) == FG_ERR_INVALID_ARG);
    CHECK(fg_tokenizer_encode_spans(t, s, sizeof s - 1, inverted, 1, out, 128, &n) == FG_ERR_INVALID_ARG);
    size_t n_plain = encode(t, s, sizeof s - 1, false, false, out, 128);
    CHECK(fg_tokenizer_encode_spans(t, s, sizeof s - 1, NULL, 0, out, 128, &n) == FG_OK && n == n_plain);
    CHECK(fg_tokenizer_special_id(t, EOS_TEXT, strlen(EOS_TEXT)) == T_EOS);
    CHECK(fg_tokenizer_special_id(t, THINK, strlen(THINK)) == T_THINK);
    CHECK(fg_tokenizer_special_id(t, EOS_TEXT, strlen(EOS_TEXT) - 1) < 0);
    CHECK(fg_tokenizer_special_id(t, "hello", 5) < 0);

    /* Decode: control tokens only with render_special; user-defined always. */
    char buf[128];
    size_t m = 99;
    int32_t ids[] = {T_BOS, T_HELLO, T_EOS, T_THINK};
    CHECK(fg_tokenizer_decode(t, ids, 4, false, buf, sizeof buf, &m) == FG_OK);
    CHECK(m == 12 && strcmp(buf, "hello" THINK) == 0);
    CHECK(fg_tokenizer_decode(t, ids, 4, true, buf, sizeof buf, &m) == FG_OK);
    CHECK(strcmp(buf, BOS_TEXT "hello" EOS_TEXT THINK) == 0);

    const char *p;
    size_t l = 99;
    CHECK(fg_tokenizer_token_bytes(t, T_GHELLO, false, &p, &l) == FG_OK && l == 6 &&
          memcmp(p, " hello", 6) == 0);
    CHECK(fg_tokenizer_token_bytes(t, T_EOS, false, &p, &l) == FG_OK && l == 0);
    CHECK(fg_tokenizer_token_bytes(t, 0, false, &p, &l) == FG_OK && l == 1 && p[0] == 0);
    CHECK(fg_tokenizer_token_bytes(t, N_VOCAB, false, &p, &l) == FG_ERR_TOKEN_ID);
    CHECK(fg_tokenizer_token_bytes(t, -5, false, &p, &l) == FG_ERR_TOKEN_ID);
}

static void test_protocol(const fg_tokenizer_t *t)
{
    int32_t out[4] = {-7, -7, -7, -7};
    size_t n = 99;
    CHECK(fg_tokenizer_encode(t, "hello world", 11, false, false, NULL, 0, &n) == FG_ERR_INVALID_ARG);
    CHECK(n == 2);
    n = 99;
    CHECK(fg_tokenizer_encode(t, "hello world", 11, true, false, out, 2, &n) == FG_ERR_INVALID_ARG);
    CHECK(n == 3 && out[0] == T_BOS && out[1] == T_HELLO && out[2] == -7);
    CHECK(fg_tokenizer_encode(t, "hello world", 11, true, false, out, 3, &n) == FG_OK);
    CHECK(n == 3 && out[2] == T_GWORLD);
    CHECK(fg_tokenizer_encode(t, NULL, 5, false, false, out, 4, &n) == FG_ERR_INVALID_ARG);
    CHECK(fg_tokenizer_encode(t, NULL, 0, false, false, out, 4, &n) == FG_OK && n == 0);

    int32_t ids[] = {T_HELLO, T_GWORLD}; /* "hello world", 11 bytes */
    char buf[16];
    memset(buf, 'Z', sizeof buf);
    size_t m = 99;
    CHECK(fg_tokenizer_decode(t, ids, 2, false, NULL, 0, &m) == FG_ERR_INVALID_ARG && m == 11);
    CHECK(fg_tokenizer_decode(t, ids, 2, false, buf, 5, &m) == FG_ERR_INVALID_ARG && m == 11);
    CHECK(memcmp(buf, "hello", 5) == 0 && buf[5] == 'Z');
    CHECK(fg_tokenizer_decode(t, ids, 2, false, buf, 11, &m) == FG_OK && m == 11);
    CHECK(memcmp(buf, "hello world", 11) == 0 && buf[11] == 'Z'); /* no room for the NUL */
    CHECK(fg_tokenizer_decode(t, ids, 2, false, buf, 12, &m) == FG_OK && m == 11);
    CHECK(strcmp(buf, "hello world") == 0);
    int32_t bad[] = {T_HELLO, N_VOCAB};
    CHECK(fg_tokenizer_decode(t, bad, 2, false, buf, sizeof buf, &m) == FG_ERR_TOKEN_ID);
    CHECK(fg_tokenizer_decode(t, ids, 0, false, buf, sizeof buf, &m) == FG_OK && m == 0 &&
          buf[0] == '\0');
}

/* ---------------------------------------------------------------- bad vocabularies */

static void test_bad_vocabs(void)
{
    static const variant bad[] = {
        {.name = "no tokens", .no_tokens = true},
        {.name = "tokens not strings", .tokens_not_strings = true},
        {.name = "no model", .no_model = true},
        {.name = "wrong model", .model = "llama"},
        {.name = "unknown pre", .pre = "default"},
        {.name = "pre not a string", .pre_not_string = true},
        {.name = "byte without token", .break_byte = 0x41},
        {.name = "merge with two spaces", .bad_merge = "h  e"},
        {.name = "merge without space", .bad_merge = "he"},
        {.name = "merge with leading space", .bad_merge = " he"},
        {.name = "merge of three", .bad_merge = "h e l"},
        {.name = "merge naming unknown token", .bad_merge = "h zz"},
        {.name = "no merges", .no_merges = true},
        {.name = "token_type too short", .types_short = true},
        {.name = "bos out of range", .bos = N_VOCAB},
        {.name = "add_bos_token not bool", .add_bos_wrong_type = true},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fg_gguf_t *g;
        fg_tokenizer_t *t;
        fg_diag d = {{0}};
        fg_err e = load_variant(&bad[i], &g, &t, &d);
        CHECK_MSG(e == FG_ERR_TOKENIZER && t == NULL && d.msg[0], "%s: %s", bad[i].name,
                  fg_err_name(e));
        if (e == FG_ERR_TOKENIZER)
            fprintf(stderr, "  %-28s -> %s\n", bad[i].name, d.msg);
        if (bad[i].pre)
            CHECK_MSG(strstr(d.msg, "tokenizer.ggml.pre") && strstr(d.msg, "\"default\"") &&
                          strstr(d.msg, "deepseek-v3"),
                      "message names the key, the value and what is supported: %s", d.msg);
        if (bad[i].break_byte)
            CHECK_MSG(strstr(d.msg, "0x41") != NULL, "message names the byte: %s", d.msg);
        if (bad[i].bad_merge)
            CHECK_MSG(strstr(d.msg, "[24]") != NULL, "message names merge 24: %s", d.msg);
        fg_tokenizer_destroy(t);
        fg_gguf_close(g);
    }

    /* tokenizer.ggml.pre picks the splitter: "3312" is one piece for "gpt2",
     * "gpt-2" and no key, but "331" + "2" for "deepseek-v3" (digit groups of
     * three), so the "1 2" merge cannot apply there. */
    static const struct { const char *pre; size_t n; } pres[] = {
        {NULL, 3}, {"gpt2", 3}, {"gpt-2", 3}, {"deepseek-v3", 4}, {"deepseek-llm", 3}, {"deepseek-coder", 4},
    };
    for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++) {
        variant pv = {.name = "pre", .pre = pres[i].pre};
        fg_gguf_t *pg;
        fg_tokenizer_t *pt;
        fg_diag pd = {{0}};
        CHECK_MSG(load_variant(&pv, &pg, &pt, &pd) == FG_OK, "pre %s: %s", pres[i].pre, pd.msg);
        int32_t out[8];
        size_t n = 0;
        CHECK_MSG(pt && fg_tokenizer_encode(pt, "3312", 4, false, false, out, 8, &n) == FG_OK &&
                      n == pres[i].n,
                  "pre %s: %zu ids", pres[i].pre ? pres[i].pre : "(none)", n);
        fg_tokenizer_destroy(pt);
        fg_gguf_close(pg);
    }

    /* Good variants: no BOS and add_bos_token false. */
    variant v = {.name = "no bos", .no_bos = true, .add_bos = 2};
    fg_gguf_t *g;
    fg_tokenizer_t *t;
    fg_diag d = {{0}};
    CHECK_MSG(load_variant(&v, &g, &t, &d) == FG_OK, "%s", d.msg);
    if (t) {
        CHECK(fg_tokenizer_bos(t) == -1 && !fg_tokenizer_add_bos(t));
        int32_t out[4];
        size_t n = 0;
        CHECK(fg_tokenizer_encode(t, "hi", 2, true, false, out, 4, &n) == FG_OK && n == 2 &&
              out[0] == 'h');
    }
    fg_tokenizer_destroy(t);
    fg_gguf_close(g);
}

int main(void)
{
    if (!fg_test_dir_make("fg_test_tok"))
        return 1;
    variant good = {.name = "good"};
    fg_gguf_t *g;
    fg_tokenizer_t *t;
    fg_diag d = {{0}};
    fg_err e = load_variant(&good, &g, &t, &d);
    CHECK_MSG(e == FG_OK, "load good vocabulary: %s: %s", fg_err_name(e), d.msg);
    if (e == FG_OK) {
        /* The tokenizer owns copies: it must outlive the GGUF. */
        fg_gguf_close(g);
        g = NULL;
        test_expected_ids(t);
        test_round_trips(t);
        test_specials(t);
        test_protocol(t);
        test_long_runs(t);
    }
    fg_tokenizer_destroy(t);
    fg_gguf_close(g);
    test_bad_vocabs();
    rmdir(fg_test_dir);
    return TEST_DONE("test_tokenizer");
}
