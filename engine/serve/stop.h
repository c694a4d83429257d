/* stop.h: finding stop strings in generated text as it grows.
 * Pure; safe from any thread.
 */
#ifndef FG_STOP_H
#define FG_STOP_H

#include <stddef.h>

/* Searches text[0..len) for the earliest occurrence of any stop string that
 * ends at or after byte new_from (the bytes appended since the last call), so
 * a stop string split across tokens is found once its last byte arrives.
 * Returns the offset where the match starts, or -1. Empty stop strings are ignored. */
long fg_stop_find(const char *text, size_t len, size_t new_from, const char *const *stops, int n_stops);

#endif
