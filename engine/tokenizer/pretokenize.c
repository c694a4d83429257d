/* pretokenize.c: GPT-2 style pre-tokenization over bytes.
 *
 * Design: this is a hand-written matcher for GPT-2's split pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with ASCII classes: letters are A-Z, a-z and every byte >= 0x80 (so UTF-8
 * sequences, valid or not, stay inside words), digits are 0-9, whitespace is
 * the C locale's isspace set (space, \t, \n, \v, \f, \r), and "other" is every
 * remaining byte, NUL included. Alternatives are tried in the pattern's order
 * and each is greedy, exactly as the regex engine would do it, so the function
 * needs no backtracking beyond the one "give back the last whitespace" step.
 *
 * Cost: each call scans only the piece it returns (plus, for whitespace, the
 * rest of the whitespace run), so splitting a whole text is O(len).
 *
 * The tokenizer and the model generator's BPE trainer both call this; any
 * change of behaviour changes the pieces the vocabulary was trained on.
 */
#include "engine/tokenizer/pretokenize.h"

#include <stdbool.h>

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

/* Length of the contraction at s[0..n) (s[0] is '\''), or 0. */
static size_t contraction_len(const unsigned char *s, size_t n)
{
    if (n >= 2 && (s[1] == 's' || s[1] == 't' || s[1] == 'm' || s[1] == 'd'))
        return 2;
    if (n >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e') ||
                   (s[1] == 'l' && s[2] == 'l')))
        return 3;
    return 0;
}

size_t fg_pretok_next(const char *text, size_t len, size_t pos)
{
    const unsigned char *s = (const unsigned char *)text;
    if (pos >= len) /* outside the contract; never return <= pos to a looping caller */
        return pos + 1;

    if (s[pos] == '\'') {
        size_t c = contraction_len(s + pos, len - pos);
        if (c)
            return pos + c;
    }

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

    /* Whitespace run. \s+(?!\S): when a non-space follows, give its last
     * byte back so that it can prefix the next word; if that would leave
     * nothing, \s+ takes the single byte. */
    size_t e = pos + 1;
    while (e < len && byte_class(s[e]) == CLS_SPACE)
        e++;
    if (e < len && e - pos > 1)
        e--;
    return e;
}
