/* pretokenize.c: the pre-tokenizers of engine/tokenizer/pretokenize.h as hand-written
 * matchers (no regex library).
 *
 * Design.
 *  - A kind is a cascade of levels, one per regex: level k finds its matches
 *    in each piece of level k - 1, and the matches and the gaps between them
 *    become the pieces level k + 1 works on; the last level's pieces go to the
 *    caller. split_level recurses one level per regex, so nothing is
 *    allocated and the depth is at most six.
 *  - A level is a match function: given a start position and the end of the
 *    piece it works in, it returns the end of the match there, found the way
 *    a backtracking regex engine finds it (alternatives in order, greedy
 *    quantifiers that give back only what the next item needs), or reports no
 *    match and where the next attempt may start. Anchors and look-aheads
 *    ($, (?!\S)) see the end of the piece, as they see the end of the
 *    substring a Split pre-tokenizer is given.
 *  - Units are code points decoded from UTF-8 (Unicode's well-formed
 *    sequences only: no overlongs, surrogates or values above U+10FFFF); any
 *    other byte is a unit of one byte with the classes of U+FFFD.
 *
 * Cost: every level visits each unit of its piece a bounded number of times
 * (a failed \s+$ resumes after the whitespace run it scanned), so a split is
 * O(len * levels).
 */
#include "engine/tokenizer/pretokenize.h"

#include <stdint.h>
#include <string.h>

#include "engine/tokenizer/unicode_data.h"

#define CP_INVALID 0x110000u /* an ill-formed byte */
#define CP_NONE 0x110001u    /* past the end of the piece */

typedef struct unit {
    uint32_t cp;
    uint16_t fl; /* FG_UC_* */
    uint8_t n;   /* bytes; 0 past the end */
} unit;

static uint16_t cp_flags(uint32_t cp)
{
    if (cp < 128)
        return fg_ucd_ascii[cp];
    size_t lo = 0, hi = fg_ucd_n_ranges; /* last entry with first <= cp */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (fg_ucd_ranges[mid].first <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return fg_ucd_ranges[lo].flags;
}

static bool cont(unsigned char b) { return (b & 0xc0) == 0x80; }

/* The unit at s[pos], pos < end (the piece end is always a unit boundary). */
static unit unit_at(const unsigned char *s, size_t pos, size_t end)
{
    if (pos >= end)
        return (unit){CP_NONE, 0, 0};
    unsigned char b = s[pos];
    size_t left = end - pos;
    uint32_t cp = CP_INVALID;
    uint8_t n = 1;
    if (b < 0x80) {
        return (unit){b, fg_ucd_ascii[b], 1};
    } else if (b >= 0xc2 && b <= 0xdf) {
        if (left >= 2 && cont(s[pos + 1])) {
            cp = (uint32_t)(b & 0x1f) << 6 | (s[pos + 1] & 0x3f);
            n = 2;
        }
    } else if (b >= 0xe0 && b <= 0xef) {
        /* E0 needs A0..BF next (no overlong), ED 80..9F (no surrogate). */
        unsigned char lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
        if (left >= 3 && s[pos + 1] >= lo && s[pos + 1] <= hi && cont(s[pos + 2])) {
            cp = (uint32_t)(b & 0x0f) << 12 | (uint32_t)(s[pos + 1] & 0x3f) << 6 | (s[pos + 2] & 0x3f);
            n = 3;
        }
    } else if (b >= 0xf0 && b <= 0xf4) {
        /* F0 needs 90..BF next (no overlong), F4 80..8F (<= U+10FFFF). */
        unsigned char lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
        if (left >= 4 && s[pos + 1] >= lo && s[pos + 1] <= hi && cont(s[pos + 2]) &&
            cont(s[pos + 3])) {
            cp = (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[pos + 1] & 0x3f) << 12 |
                 (uint32_t)(s[pos + 2] & 0x3f) << 6 | (s[pos + 3] & 0x3f);
            n = 4;
        }
    }
    return (unit){cp, cp_flags(cp == CP_INVALID ? 0xfffd : cp), n};
}

/* End of the run of units with any of the flags in mask, from pos. */
static size_t run(const unsigned char *s, size_t pos, size_t end, uint16_t mask)
{
    for (unit u; (u = unit_at(s, pos, end)).n && (u.fl & mask);)
        pos += u.n;
    return pos;
}

/* The whitespace run from pos: its end; *last the start of its last unit;
 * *after_rn the end of its last \r or \n (0 when it holds none). */
static size_t ws_run(const unsigned char *s, size_t pos, size_t end, size_t *last, size_t *after_rn)
{
    *after_rn = 0;
    *last = pos;
    for (unit u; (u = unit_at(s, pos, end)).n && (u.fl & FG_UC_WS);) {
        *last = pos;
        pos += u.n;
        if (u.cp == '\r' || u.cp == '\n')
            *after_rn = pos;
    }
    return pos;
}

/* \s+(?!\S)|\s+ at a whitespace unit: the run, less its last unit when a
 * non-space follows inside the piece and the run has more than one unit. */
static size_t ws_keep_last(const unsigned char *s, size_t pos, size_t end)
{
    size_t last, rn;
    size_t w = ws_run(s, pos, end, &last, &rn);
    return w < end && last > pos ? last : w;
}

/* A match function: returns the end of the match at pos (pos < end) or pos
 * when there is none; then *next is where the next attempt starts (> pos). */
typedef size_t (*match_fn)(const unsigned char *s, size_t pos, size_t end, size_t *next);

static size_t no_match(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    *next = pos + unit_at(s, pos, end).n;
    return pos;
}

/* \p{N}{1,3} */
static size_t m_digits3(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    size_t p = pos;
    for (int i = 0; i < 3; i++) {
        unit u = unit_at(s, p, end);
        if (!(u.fl & FG_UC_N))
            break;
        p += u.n;
    }
    return p > pos ? p : no_match(s, pos, end, next);
}

/* A run of one class: X+ */
static size_t run_or_none(const unsigned char *s, size_t pos, size_t end, size_t *next, uint16_t mask)
{
    size_t p = run(s, pos, end, mask);
    return p > pos ? p : no_match(s, pos, end, next);
}

/* \s?X+ */
static size_t space_opt_run(const unsigned char *s, size_t pos, size_t end, size_t *next, uint16_t mask)
{
    unit c = unit_at(s, pos, end);
    if ((c.fl & FG_UC_WS) && (unit_at(s, pos + c.n, end).fl & mask))
        return run(s, pos + c.n, end, mask);
    return run_or_none(s, pos, end, next, mask);
}

/* [\r\n] */
static size_t m_newline(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    return s[pos] == '\r' || s[pos] == '\n' ? pos + 1 : no_match(s, pos, end, next);
}

static size_t m_v3_cjk(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    return run_or_none(s, pos, end, next, FG_UC_V3_CJK);
}

static bool ascii_alpha(uint32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* deepseek-v3's third regex:
 *   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ |
 *    ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+                        */
static size_t m_v3_main(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    unit c = unit_at(s, pos, end);
    unit d = unit_at(s, pos + c.n, end);
    /* The bracket holds exactly the 32 ASCII characters of \p{P} and \p{S}. */
    if (c.cp < 128 && (c.fl & (FG_UC_P | FG_UC_S)) && d.n && ascii_alpha(d.cp)) {
        size_t p = pos + 1;
        while (p < end && ascii_alpha(s[p]))
            p++;
        return p;
    }
    if (c.cp != '\r' && c.cp != '\n' && !(c.fl & (FG_UC_L | FG_UC_P | FG_UC_S)) &&
        (d.fl & (FG_UC_L | FG_UC_M)))
        return run(s, pos + c.n, end, FG_UC_L | FG_UC_M);
    if (c.fl & (FG_UC_L | FG_UC_M))
        return run(s, pos, end, FG_UC_L | FG_UC_M);
    size_t q = c.cp == ' ' && (d.fl & (FG_UC_P | FG_UC_S)) ? pos + 1 : pos;
    if (unit_at(s, q, end).fl & (FG_UC_P | FG_UC_S)) {
        size_t p = run(s, q, end, FG_UC_P | FG_UC_S);
        while (p < end && (s[p] == '\r' || s[p] == '\n'))
            p++;
        return p;
    }
    if (c.fl & FG_UC_WS) {
        size_t last, rn;
        ws_run(s, pos, end, &last, &rn);
        /* \s*[\r\n]+ ends after the run's last newline: \s* gives back to it. */
        return rn ? rn : ws_keep_last(s, pos, end);
    }
    return no_match(s, pos, end, next);
}

/* 's|'t|'re|'ve|'m|'ll|'d at pos: its length, or 0. */
static size_t contraction_len(const unsigned char *s, size_t pos, size_t end)
{
    if (s[pos] != '\'' || end - pos < 2)
        return 0;
    unsigned char a = s[pos + 1], b = end - pos >= 3 ? s[pos + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t m_gpt2(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    (void)next; /* every unit starts a match */
    size_t k = contraction_len(s, pos, end);
    if (k)
        return pos + k;
    unit c = unit_at(s, pos, end);
    size_t q = pos;
    if (c.cp == ' ') {
        unit d = unit_at(s, pos + 1, end);
        if (d.n && !(d.fl & FG_UC_WS)) {
            q = pos + 1;
            c = d;
        }
    }
    if (c.fl & FG_UC_L)
        return run(s, q, end, FG_UC_L);
    if (c.fl & FG_UC_N)
        return run(s, q, end, FG_UC_N);
    if (!(c.fl & FG_UC_WS)) { /* [^\s\p{L}\p{N}]+ */
        size_t p = q;
        for (unit u; (u = unit_at(s, p, end)).n && !(u.fl & (FG_UC_WS | FG_UC_L | FG_UC_N));)
            p += u.n;
        return p;
    }
    return ws_keep_last(s, pos, end);
}

/* ---------------------------------------------------------------- legacy */

/* The byte-class splitter: GPT-2's pattern with ASCII classes, every byte
 * >= 0x80 a letter, whitespace the C locale's isspace set. */
enum { CLS_SPACE, CLS_LETTER, CLS_DIGIT, CLS_OTHER };

static int byte_class(unsigned char c)
{
    if (c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return CLS_LETTER;
    if (c >= '0' && c <= '9')
        return CLS_DIGIT;
    if (c == ' ' || (c >= '\t' && c <= '\r')) /* \t \n \v \f \r */
        return CLS_SPACE;
    return CLS_OTHER;
}

static size_t m_legacy(const unsigned char *s, size_t pos, size_t len, size_t *next)
{
    (void)next; /* every byte starts a match */
    size_t k = contraction_len(s, pos, len);
    if (k)
        return pos + k;
    /* ' '? followed by a run of one non-space class. */
    size_t start = pos;
    if (s[start] == ' ' && start + 1 < len && byte_class(s[start + 1]) != CLS_SPACE)
        start++;
    int cls = byte_class(s[start]);
    if (cls != CLS_SPACE) {
        size_t e = start + 1;
        while (e < len && byte_class(s[e]) == cls)
            e++;
        return e;
    }
    /* \s+(?!\S), else \s+ */
    size_t e = pos + 1;
    while (e < len && byte_class(s[e]) == CLS_SPACE)
        e++;
    if (e < len && e - pos > 1)
        e--;
    return e;
}

/* ---------------------------------------------------------------- the cascades */

static size_t m_llm_letters(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    return space_opt_run(s, pos, end, next, FG_UC_LLM_LETTER);
}

static size_t m_llm_punct(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    return space_opt_run(s, pos, end, next, FG_UC_LLM_PUNCT);
}

/* \s+$ : only a run that reaches the piece's end; a shorter one fails at
 * every position inside it, so the next attempt starts after it. */
static size_t m_trailing_space(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    size_t p = run(s, pos, end, FG_UC_WS);
    if (p == end)
        return p;
    return p > pos ? (*next = p, pos) : no_match(s, pos, end, next);
}

static size_t m_llm_cjk(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    return run_or_none(s, pos, end, next, FG_UC_LLM_CJK);
}

static size_t m_digits(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    return run_or_none(s, pos, end, next, FG_UC_N);
}

static size_t m_letters(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    return space_opt_run(s, pos, end, next, FG_UC_L);
}

static size_t m_punct(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    return space_opt_run(s, pos, end, next, FG_UC_P);
}

static size_t m_digit(const unsigned char *s, size_t pos, size_t end, size_t *next)
{
    unit u = unit_at(s, pos, end);
    return u.fl & FG_UC_N ? pos + u.n : no_match(s, pos, end, next);
}

#define MAX_LEVELS 6

typedef struct cascade {
    const char *name;
    fg_pretok_kind kind;
    int n;
    match_fn level[MAX_LEVELS];
} cascade;

static const cascade k_cascades[] = {
    {"gpt2", FG_PRETOK_LEGACY, 1, {m_legacy}},
    {"gpt-2", FG_PRETOK_GPT2, 1, {m_gpt2}},
    {"deepseek-v3", FG_PRETOK_DEEPSEEK3, 3, {m_digits3, m_v3_cjk, m_v3_main}},
    {"deepseek-llm", FG_PRETOK_DEEPSEEK_LLM, 6,
     {m_newline, m_llm_letters, m_llm_punct, m_trailing_space, m_llm_cjk, m_digits}},
    {"deepseek-coder", FG_PRETOK_DEEPSEEK_CODER, 5,
     {m_newline, m_letters, m_punct, m_llm_cjk, m_digit}},
};
#define N_CASCADES (sizeof k_cascades / sizeof k_cascades[0])

bool fg_pretok_kind_from_name(const char *name, size_t len, fg_pretok_kind *out)
{
    for (size_t i = 0; i < N_CASCADES; i++) {
        if (name && strlen(k_cascades[i].name) == len && memcmp(k_cascades[i].name, name, len) == 0) {
            *out = k_cascades[i].kind;
            return true;
        }
    }
    return false;
}

typedef struct split_state {
    const cascade *c;
    const unsigned char *s;
    fg_pretok_piece_fn fn;
    void *ctx;
} split_state;

static int split_level(const split_state *st, int k, size_t a, size_t b)
{
    if (k == st->c->n)
        return st->fn(st->ctx, a, b);
    size_t gap = a, pos = a;
    int rc;
    while (pos < b) {
        size_t next = pos;
        size_t m = st->c->level[k](st->s, pos, b, &next);
        if (m > pos) {
            if (gap < pos && (rc = split_level(st, k + 1, gap, pos)) != 0)
                return rc;
            if ((rc = split_level(st, k + 1, pos, m)) != 0)
                return rc;
            gap = pos = m;
        } else {
            pos = next;
        }
    }
    return gap < b ? split_level(st, k + 1, gap, b) : 0;
}

int fg_pretok_split(fg_pretok_kind kind, const char *text, size_t len, fg_pretok_piece_fn fn,
                    void *ctx)
{
    const cascade *c = &k_cascades[0];
    for (size_t i = 0; i < N_CASCADES; i++)
        if (k_cascades[i].kind == kind)
            c = &k_cascades[i];
    if (len == 0)
        return 0;
    split_state st = {c, (const unsigned char *)text, fn, ctx};
    return split_level(&st, 0, 0, len);
}
