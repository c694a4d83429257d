/* log.h: structured logs, one JSON object per line on stderr:
 *   {"time":"2026-11-29T18:00:00.123Z","level":"info","event":"listening", ...fields}
 * Fields are written by the caller as a JSON fragment ("\"port\":8080") built
 * with fg_log_str for strings. Never log API keys or message contents.
 * Thread safety: any thread; each line is one write(2).
 */
#ifndef FG_LOG_H
#define FG_LOG_H

#include <stddef.h>

typedef enum fg_log_level { FG_LOG_DEBUG = 0, FG_LOG_INFO, FG_LOG_WARN, FG_LOG_ERROR } fg_log_level;

void fg_log_set_level(fg_log_level level);
int fg_log_enabled(fg_log_level level);

/* fields_fmt: a printf format producing JSON members without braces (may be NULL). */
void fg_log(fg_log_level level, const char *event, const char *fields_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes s as a JSON string literal (quotes included, escaped, cut to cap) into buf. */
const char *fg_log_str(char *buf, size_t cap, const char *s);

#endif
