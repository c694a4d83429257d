/* name.h: the one rule for names that reach file paths, Redis keys, logs and
 * metrics labels: tenant ids, session names and session ids are 1 to
 * FG_NAME_MAX bytes of [A-Za-z0-9_-]. Pure; any thread.
 */
#ifndef FG_NAME_H
#define FG_NAME_H

#include <stdbool.h>
#include <stddef.h>

#define FG_NAME_MAX 64 /* bytes of a name */

/* True when s[0, len) is 1..FG_NAME_MAX bytes of [A-Za-z0-9_-] (so it holds no NUL). */
bool fg_name_valid(const char *s, size_t len);

#endif
