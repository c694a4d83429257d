/* protocol_internal.h: what the protocol_*.c files share and nobody else uses.
 * Not part of the module's interface; include only from gateway/protocol*.c. */
#ifndef FG_GATEWAY_PROTOCOL_INTERNAL_H
#define FG_GATEWAY_PROTOCOL_INTERNAL_H

#include <stddef.h>

/* Decodes the UTF-8 sequence at p[0..n), n >= 1. Returns its length (1..4)
 * when well-formed; -k when p starts an ill-formed sequence whose maximal
 * subpart (Unicode 15, 3.9 "U+FFFD substitution") is k bytes; 0 when p[0..n)
 * is a well-formed but incomplete prefix cut by the end of the buffer. */
int fg_proto_utf8_next(const unsigned char *p, size_t n);

/* Offset of the first byte of the first ill-formed (or incomplete) sequence
 * in s[0..n), or n when all of it is well-formed. */
size_t fg_proto_utf8_check(const char *s, size_t n);

#endif
