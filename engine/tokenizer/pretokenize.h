/* pretokenize.h: splitting text into pieces before BPE, as the vocabulary's
 * family does it (tokenizer.ggml.pre). BPE merges never cross a piece.
 *
 * Kinds, by the tokenizer.ggml.pre value that selects them:
 *   "deepseek-v3"     DeepSeek V3, R1, V4: llama.cpp's three regexes for it,
 *                     applied in turn (each splits the pieces of the one before):
 *                     \p{N}{1,3} | [一-龥぀-ゟ゠-ヿ]+ |
 *                     [ASCII punct][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ |
 *                     ' '?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 *   "deepseek-llm"    DeepSeek LLM, V2, V2-Lite: [\r\n] | \s?[cased letters]+ |
 *                     \s?[!-/:-~！-／：-～‘-‟　-。]+ | \s+$ | [一-龥ࠀ-一가-퟿]+ | \p{N}+
 *   "deepseek-coder"  [\r\n] | \s?\p{L}+ | \s?\p{P}+ | [一-龥ࠀ-一가-퟿]+ | \p{N}
 *   "gpt-2"           GPT-2's regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
 *                     ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ with Unicode classes
 *   "gpt2", or no key the byte-class GPT-2 splitter older generated models were
 *                     trained with: ASCII classes, every byte >= 0x80 a letter
 * A regex's matches and the text between them are both pieces, as in Hugging
 * Face's Split(behavior = Isolated) and llama.cpp's unicode_regex_split.
 * Classes come from engine/tokenizer/unicode_data.h (\s is White_Space). Matching is over
 * code points of UTF-8; a byte that does not begin a well-formed sequence is a
 * unit of its own, classed like U+FFFD (a symbol, as llama.cpp classes the
 * U+FFFD it substitutes), and stays in its piece, so any byte string splits
 * without loss.
 *
 * Pure; safe from any thread.
 */
#ifndef FG_PRETOKENIZE_H
#define FG_PRETOKENIZE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum fg_pretok_kind {
    FG_PRETOK_LEGACY,         /* "gpt2" or no tokenizer.ggml.pre */
    FG_PRETOK_GPT2,           /* "gpt-2" */
    FG_PRETOK_DEEPSEEK3,      /* "deepseek-v3" */
    FG_PRETOK_DEEPSEEK_LLM,   /* "deepseek-llm" */
    FG_PRETOK_DEEPSEEK_CODER, /* "deepseek-coder" */
} fg_pretok_kind;

/* The names fg_pretok_kind_from_name accepts, comma separated, for messages. */
#define FG_PRETOK_NAMES "deepseek-v3, deepseek-llm, deepseek-coder, gpt-2, gpt2"

/* The kind a tokenizer.ggml.pre value names (len bytes, not NUL-terminated);
 * false for a name not in FG_PRETOK_NAMES. */
bool fg_pretok_kind_from_name(const char *name, size_t len, fg_pretok_kind *out);

/* Called for each piece [start, end) in order; a nonzero return stops the split. */
typedef int (*fg_pretok_piece_fn)(void *ctx, size_t start, size_t end);

/* Splits text[0..len): the pieces are non-empty, contiguous and cover the
 * text. Returns 0, or the first nonzero value fn returned. */
int fg_pretok_split(fg_pretok_kind kind, const char *text, size_t len, fg_pretok_piece_fn fn,
                    void *ctx);

#endif
