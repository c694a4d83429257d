/* stop.c: stop-string search over the tail of the generated text. */
#include "engine/serve/stop.h"

#include <string.h>

long fg_stop_find(const char *text, size_t len, size_t new_from, const char *const *stops, int n_stops)
{
    long best = -1;
    for (int i = 0; i < n_stops; i++) {
        size_t sl = stops[i] ? strlen(stops[i]) : 0;
        if (sl == 0 || sl > len)
            continue;
        /* A match must end past new_from: it starts at >= new_from + 1 - sl. */
        size_t from = new_from + 1 > sl ? new_from + 1 - sl : 0;
        for (size_t at = from; at + sl <= len; at++) {
            if (memcmp(text + at, stops[i], sl) == 0) {
                if (best < 0 || (long)at < best)
                    best = (long)at;
                break;
            }
        }
    }
    return best;
}
