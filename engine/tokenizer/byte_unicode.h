/* byte_unicode.h: GPT-2's reversible byte <-> unicode mapping used by
 * byte-level BPE vocabularies: printable Latin-1 bytes map to themselves,
 * the other 68 bytes to U+0100.. in byte order. Token strings in a GGUF
 * vocabulary are UTF-8 text of these code points.
 * Pure functions over a constant table; safe from any thread.
 */
#ifndef FG_BYTE_UNICODE_H
#define FG_BYTE_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Writes the UTF-8 encoding (1 or 2 bytes) of byte b's code point; returns its length. */
int fg_byte_to_utf8(uint8_t b, char out[4]);

/* Decodes one mapped code point at s[0..len); returns the byte (0..255) and sets
 * *used to the UTF-8 length, or returns -1 if s does not start with a mapped
 * code point. */
int fg_utf8_to_byte(const char *s, size_t len, size_t *used);

#endif
