/* test_pretokenize.c: the piece boundaries of every pre-tokenizer kind, worked
 * out by hand from the regexes in engine/tokenizer/pretokenize.h; invalid UTF-8; the
 * split's contract on random bytes; the generated Unicode table.
 *
 * (Every kind is also checked against its regexes in a real regex engine by
 * tests/tokenizer/check_regex_split.sh, and deepseek-v3 against the real
 * DeepSeek-V3 tokenizer by tests/tokenizer/check_deepseek_v3.sh.)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer/bpe_train.h"
#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/unicode_data.h"
#include "tests/unit/fg_test.h"

#define MAX_PIECES 4096

typedef struct pieces {
    size_t n;
    size_t start[MAX_PIECES], end[MAX_PIECES];
    size_t expect_next; /* the contract: contiguous, non-empty */
    int bad;
} pieces;

static int collect(void *ctx, size_t start, size_t end)
{
    pieces *p = ctx;
    if (start != p->expect_next || end <= start)
        p->bad++;
    p->expect_next = end;
    if (p->n < MAX_PIECES) {
        p->start[p->n] = start;
        p->end[p->n] = end;
    }
    p->n++;
    return 0;
}

static pieces g_p;

static void split(fg_pretok_kind kind, const char *s, size_t len)
{
    memset(&g_p, 0, sizeof g_p);
    CHECK(fg_pretok_split(kind, s, len, collect, &g_p) == 0);
    CHECK_MSG(g_p.bad == 0 && g_p.expect_next == len, "kind %d: pieces not contiguous", (int)kind);
}

typedef struct pcase {
    const char *in;
    size_t len; /* 0: strlen */
    const char *pieces[16];
} pcase;

static void check_cases(fg_pretok_kind kind, const char *name, const pcase *cases, size_t n)
{
    for (size_t c = 0; c < n; c++) {
        const pcase *k = &cases[c];
        size_t len = k->len ? k->len : strlen(k->in);
        split(kind, k->in, len);
        size_t i = 0;
        for (; i < g_p.n && k->pieces[i]; i++) {
            const char *want = k->pieces[i];
            /* Expected pieces are C strings; the one NUL piece is written "\0". */
            size_t wl = want[0] ? strlen(want) : 1;
            bool ok = g_p.end[i] - g_p.start[i] == wl && memcmp(k->in + g_p.start[i], want, wl) == 0;
            CHECK_MSG(ok, "%s case %zu piece %zu: got [%zu,%zu)", name, c, i, g_p.start[i], g_p.end[i]);
            if (!ok)
                break;
        }
        CHECK_MSG(i == g_p.n && (i == 16 || !k->pieces[i]), "%s case %zu: %zu pieces", name, c, g_p.n);
    }
}
#define CASES(kind, arr) check_cases(kind, #kind, arr, sizeof arr / sizeof arr[0])

static void test_legacy(void)
{
    static const pcase cases[] = {
        {"hello world", 0, {"hello", " world"}},
        {" hello world  ", 0, {" hello", " world", "  "}},
        {"don't", 0, {"don", "'t"}},
        {"I'll we've they're she's I'm he'd it't", 0,
         {"I", "'ll", " we", "'ve", " they", "'re", " she", "'s", " I", "'m", " he", "'d", " it", "'t"}},
        {"'S 'x", 0, {"'", "S", " '", "x"}},
        {"...'s", 0, {"...'", "s"}},
        {"abc123def", 0, {"abc", "123", "def"}},
        {"x  42", 0, {"x", " ", " 42"}},
        {"12345 6", 0, {"12345", " 6"}},
        {"hello!!! ...?", 0, {"hello", "!!!", " ...?"}},
        {"  !", 0, {" ", " !"}},
        {"a\n\nb", 0, {"a", "\n", "\n", "b"}},
        {"\n\n", 0, {"\n\n"}},
        {"a\n\n", 0, {"a", "\n\n"}},
        {"a \tb", 0, {"a", " ", "\t", "b"}},
        {"x \n", 0, {"x", " \n"}},
        {"   x", 0, {"  ", " x"}},
        {" ", 0, {" "}},
        {"h\xc3\xa9llo w\xc3\xb6rld", 0, {"h\xc3\xa9llo", " w\xc3\xb6rld"}},
        {"\xe6\x97\xa5\xe6\x9c\xac text", 0, {"\xe6\x97\xa5\xe6\x9c\xac", " text"}},
        {"\xff\xfe" "a1", 0, {"\xff\xfe" "a", "1"}},
        {"a\0b", 3, {"a", "\0", "b"}},
        {"\r\n\r\nok", 0, {"\r\n\r", "\n", "ok"}},
        {"word\xe2\x80\x94word", 0, {"word\xe2\x80\x94word"}}, /* bytes >= 0x80 are letters */
    };
    CASES(FG_PRETOK_LEGACY, cases);
}

static void test_gpt2(void)
{
    static const pcase cases[] = {
        {"hello world", 0, {"hello", " world"}},
        {"don't", 0, {"don", "'t"}},
        {"x  42", 0, {"x", " ", " 42"}},
        {"a\n\nb", 0, {"a", "\n", "\n", "b"}},
        {"  !", 0, {" ", " !"}},
        {"\r\n\r\nok", 0, {"\r\n\r", "\n", "ok"}},
        /* Unicode classes: an em dash is punctuation, U+0663 a digit, NBSP a space. */
        {"word\xe2\x80\x94word", 0, {"word", "\xe2\x80\x94", "word"}},
        {"h\xc3\xa9llo \xd9\xa3\xd9\xa4", 0, {"h\xc3\xa9llo", " \xd9\xa3\xd9\xa4"}},
        {"\xc2\xa0x", 0, {"\xc2\xa0", "x"}},
        {"\xe6\x97\xa5\xe6\x9c\xac text", 0, {"\xe6\x97\xa5\xe6\x9c\xac", " text"}},
        /* Ill-formed bytes are symbols (U+FFFD's class). */
        {"\xff\xfe" "a1", 0, {"\xff\xfe", "a", "1"}},
        {"a\0b", 3, {"a", "\0", "b"}},
    };
    CASES(FG_PRETOK_GPT2, cases);
}

static void test_deepseek3(void)
{
    static const pcase cases[] = {
        {"1234567", 0, {"123", "456", "7"}},
        {"$100", 0, {"$", "100"}},
        {"foo.com", 0, {"foo", ".com"}},
        {"snake_case", 0, {"snake", "_case"}},
        {"Hello, world!", 0, {"Hello", ",", " world", "!"}},
        {"don't", 0, {"don", "'t"}},
        {".h\xc3\xa9llo", 0, {".h", "\xc3\xa9llo"}}, /* [A-Za-z]+ stops at the first non-ASCII letter */
        {"a.\nb", 0, {"a", ".\n", "b"}},
        {"x \r\n\r\n y", 0, {"x", " \r\n\r\n", " y"}},
        {"   x", 0, {"  ", " x"}},
        {"x   ", 0, {"x", "   "}},
        {"\t\tx", 0, {"\t", "\tx"}},
        {"a 1", 0, {"a", " ", "1"}}, /* the digit ends the piece, so the space is at its end */
        /* CJK runs first, then the third regex inside them. */
        {"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa7\xe3\x81\x99\xe3\x80\x82", 0,
         {"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xa7\xe3\x81\x99", "\xe3\x80\x82"}},
        {"abc\xe6\x97\xa5\xe6\x9c\xac" "def", 0, {"abc", "\xe6\x97\xa5\xe6\x9c\xac", "def"}},
        {"\xe6\x97\xa5\xe3\x83\xbb\xe6\x9c\xac", 0, {"\xe6\x97\xa5", "\xe3\x83\xbb", "\xe6\x9c\xac"}},
        /* A mark continues letters, and may start a word (U+FE0F after an emoji). */
        {"e\xcc\x81t\xc3\xa9", 0, {"e\xcc\x81t\xc3\xa9"}},
        {"\xe2\x9d\xa4\xef\xb8\x8fok", 0, {"\xe2\x9d\xa4", "\xef\xb8\x8fok"}},
        /* A ZWJ matches nothing, so it is a gap of its own. */
        {"\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9", 0,
         {"\xf0\x9f\x91\xa8", "\xe2\x80\x8d", "\xf0\x9f\x91\xa9"}},
        {"a\xff" "b", 0, {"a", "\xff", "b"}},
        {"\xc3", 0, {"\xc3"}},
        {"\xed\xa0\x80x", 0, {"\xed\xa0\x80", "x"}}, /* a surrogate: three symbol units */
    };
    CASES(FG_PRETOK_DEEPSEEK3, cases);
}

static void test_deepseek_llm(void)
{
    static const pcase cases[] = {
        {"Hello world", 0, {"Hello", " world"}},
        {"a\nb", 0, {"a", "\n", "b"}},
        {"12345", 0, {"12345"}},
        {"x, y", 0, {"x", ",", " y"}},
        {"x  ", 0, {"x", "  "}},
        {"a  1", 0, {"a", "  ", "1"}},
        {" !!", 0, {" !!"}},
        {"\xe4\xb8\xad\xe6\x96\x87" "abc", 0, {"\xe4\xb8\xad\xe6\x96\x87", "abc"}},
        /* Every regex splits the pieces of the one before, and [:-~] holds a-z:
         * the punctuation regex cuts words with non-ASCII letters apart. */
        {"\xc3\xb1" "and\xc3\xba \xce\xa9mega", 0,
         {"\xc3\xb1", "and", "\xc3\xba", " \xce\xa9", "mega"}},
        {"\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab", 0, {"\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab"}},
        {"\xed\x95\x9c\xea\xb5\xad", 0, {"\xed\x95\x9c\xea\xb5\xad"}},
        /* U+3000 is \s, in the punctuation class and in U+0800..U+4E00: the
         * letters regex takes "\u3000b", the CJK one cuts it again. */
        {"a\xe3\x80\x80\xe3\x80\x80" "b", 0, {"a", "\xe3\x80\x80", "\xe3\x80\x80", "b"}},
    };
    CASES(FG_PRETOK_DEEPSEEK_LLM, cases);
}

static void test_deepseek_coder(void)
{
    static const pcase cases[] = {
        {"def f(x):", 0, {"def", " f", "(", "x", "):"}},
        {"123", 0, {"1", "2", "3"}},
        {"x = 1", 0, {"x", " = ", "1"}}, /* '=' is a symbol, not \p{P} */
        {"a\r\nb", 0, {"a", "\r", "\n", "b"}},
        {"\xe4\xb8\xad\xe6\x96\x87 ok", 0, {"\xe4\xb8\xad\xe6\x96\x87", " ok"}},
    };
    CASES(FG_PRETOK_DEEPSEEK_CODER, cases);
}

static void test_names(void)
{
    static const struct { const char *name; fg_pretok_kind kind; } good[] = {
        {"gpt2", FG_PRETOK_LEGACY}, {"gpt-2", FG_PRETOK_GPT2}, {"deepseek-v3", FG_PRETOK_DEEPSEEK3},
        {"deepseek-llm", FG_PRETOK_DEEPSEEK_LLM}, {"deepseek-coder", FG_PRETOK_DEEPSEEK_CODER},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fg_pretok_kind k = FG_PRETOK_LEGACY;
        CHECK(fg_pretok_kind_from_name(good[i].name, strlen(good[i].name), &k) && k == good[i].kind);
    }
    fg_pretok_kind k;
    CHECK(!fg_pretok_kind_from_name("default", 7, &k));
    CHECK(!fg_pretok_kind_from_name("deepseek-v3x", 12, &k));
    CHECK(!fg_pretok_kind_from_name("deepseek-v3", 8, &k));
    CHECK(!fg_pretok_kind_from_name("", 0, &k));
}

static int stop_at_second(void *ctx, size_t start, size_t end)
{
    (void)start;
    (void)end;
    return ++*(int *)ctx == 2 ? 7 : 0;
}

/* Random bytes (mostly from an alphabet that reaches every rule, invalid
 * sequences included) split without loss under every kind. */
static void test_random(void)
{
    static const char *const alpha[] = {" ", "\n", "\r", "\t", "'", "s", "l", "A", "1", "!", ".",
                                        "_", "\xc3\xa9", "\xcc\x81", "\xe6\x97\xa5", "\xe3\x81\x82",
                                        "\xe2\x80\x8d", "\xf0\x9f\x98\x80", "\xe3\x80\x80",
                                        "\xef\xbc\x81", "\xc2\xa0", "\xd9\xa3", "\xc3", "\xff", "\x80"};
    static char buf[2048];
    rng_seed(42);
    for (int r = 0; r < 3000; r++) {
        size_t len = 0, want = 1 + rng_u32() % 600;
        while (len < want) {
            if (rng_u32() & 1) {
                buf[len++] = (char)rng_u32();
            } else {
                const char *a = alpha[rng_u32() % (sizeof alpha / sizeof alpha[0])];
                size_t n = strlen(a);
                memcpy(buf + len, a, n);
                len += n;
            }
        }
        for (int kind = FG_PRETOK_LEGACY; kind <= FG_PRETOK_DEEPSEEK_CODER; kind++)
            split((fg_pretok_kind)kind, buf, len);
    }
    int calls = 0;
    CHECK(fg_pretok_split(FG_PRETOK_DEEPSEEK3, "a b c", 5, stop_at_second, &calls) == 7 && calls == 2);
    calls = 0;
    CHECK(fg_pretok_split(FG_PRETOK_DEEPSEEK3, "", 0, stop_at_second, &calls) == 0 && calls == 0);
}

/* The generator's BPE trainer splits as "gpt-2"; its built-in corpus is ASCII,
 * where "gpt2" (legacy) agrees, so both names give the vocabulary it made. */
static void test_legacy_matches_gpt2_on_corpus(void)
{
    size_t len;
    const char *corpus = fg_bpe_builtin_corpus(&len);
    static pieces a;
    split(FG_PRETOK_LEGACY, corpus, len);
    a = g_p;
    split(FG_PRETOK_GPT2, corpus, len);
    CHECK(a.n <= MAX_PIECES);
    bool same = a.n == g_p.n;
    for (size_t i = 0; same && i < a.n && i < MAX_PIECES; i++)
        same = a.end[i] == g_p.end[i];
    CHECK_MSG(same, "legacy and gpt-2 split the built-in corpus differently (%zu vs %zu pieces)", a.n, g_p.n);
}

static void test_table(void)
{
    CHECK(fg_ucd_ranges[0].first == 0 && fg_ucd_n_ranges > 100);
    for (size_t i = 1; i < fg_ucd_n_ranges; i++)
        CHECK(fg_ucd_ranges[i].first > fg_ucd_ranges[i - 1].first &&
              fg_ucd_ranges[i].first <= 0x10ffff && fg_ucd_ranges[i].flags != fg_ucd_ranges[i - 1].flags);
    CHECK(fg_ucd_version[0] != '\0');
    CHECK(fg_ucd_ascii['A'] == (FG_UC_L | FG_UC_LLM_LETTER | FG_UC_LLM_PUNCT));
    CHECK(fg_ucd_ascii['$'] == (FG_UC_S | FG_UC_LLM_PUNCT) && fg_ucd_ascii['_'] == (FG_UC_P | FG_UC_LLM_PUNCT));
    CHECK(fg_ucd_ascii['\x0b'] == FG_UC_WS && fg_ucd_ascii['\x1c'] == 0 && fg_ucd_ascii['7'] == FG_UC_N);
}

int main(void)
{
    test_legacy();
    test_gpt2();
    test_deepseek3();
    test_deepseek_llm();
    test_deepseek_coder();
    test_names();
    test_random();
    test_legacy_matches_gpt2_on_corpus();
    test_table();
    return TEST_DONE("test_pretokenize");
}
