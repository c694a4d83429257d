/* unicode_data.h: the code point classes the pre-tokenizers test, as a table
 * generated from Unicode's data (engine/tokenizer/unicode_data.c, written by
 * engine/tools/gen_unicode_data.py; its header names the Unicode version).
 *
 * The classes are bits, so one lookup answers every question a splitter asks
 * about a code point. Immutable; safe from any thread.
 */
#ifndef FG_UNICODE_DATA_H
#define FG_UNICODE_DATA_H

#include <stddef.h>
#include <stdint.h>

enum {
    FG_UC_L = 1 << 0,          /* \p{L}: general category L* */
    FG_UC_M = 1 << 1,          /* \p{M} */
    FG_UC_N = 1 << 2,          /* \p{N} */
    FG_UC_P = 1 << 3,          /* \p{P} */
    FG_UC_S = 1 << 4,          /* \p{S} */
    FG_UC_WS = 1 << 5,         /* \s: the White_Space property */
    FG_UC_V3_CJK = 1 << 6,     /* deepseek-v3: [一-龥぀-ゟ゠-ヿ] */
    FG_UC_LLM_LETTER = 1 << 7, /* deepseek-llm: its cased-letter class */
    FG_UC_LLM_PUNCT = 1 << 8,  /* deepseek-llm: [!-/:-~！-／：-～‘-‟　-。] */
    FG_UC_LLM_CJK = 1 << 9,    /* deepseek-llm and -coder: [一-龥ࠀ-一가-퟿] */
};

/* Code points first .. (next entry's first - 1) have flags; sorted, the first
 * entry is 0, the last reaches U+10FFFF. */
typedef struct fg_ucd_range {
    uint32_t first;
    uint16_t flags;
} fg_ucd_range;

extern const char fg_ucd_version[];      /* e.g. "14.0.0" */
extern const uint16_t fg_ucd_ascii[128]; /* the flags of U+0000..U+007F */
extern const fg_ucd_range fg_ucd_ranges[];
extern const size_t fg_ucd_n_ranges;

#endif
