/* pretokenize.h: GPT-2 style splitting of text into pieces before BPE.
 *
 * Pieces, tried in order at each position (ASCII classes; every byte >= 0x80
 * counts as a letter, so UTF-8 text stays inside words and any byte string is
 * split without loss):
 *   's 't 're 've 'm 'll 'd  |  ' '? letters+  |  ' '? digits+  |
 *   ' '? other-symbols+      |  whitespace+ not followed by non-space (the last
 *   space is left to prefix the next word)  |  whitespace+
 * Shared by the tokenizer and the BPE trainer of the model generator so that
 * both see the same pieces. Pure; safe from any thread.
 */
#ifndef FG_PRETOKENIZE_H
#define FG_PRETOKENIZE_H

#include <stddef.h>

/* Returns the end (exclusive) of the piece starting at pos; pos < len. Always > pos. */
size_t fg_pretok_next(const char *text, size_t len, size_t pos);

#endif
