/* log.h: structured logs, one JSON object per line on stderr:
 *   {"time":"2026-11-29T18:00:00.123Z","level":"info","event":"session_created",
 *    "tenant":"acme","session":"sess_...","fields":{"reason":"..."}}
 * Every line has all six members: tenant and session are null when the event
 * concerns neither, fields is {} when there are none. Fields are written by
 * the caller as a JSON fragment ("\"port\":8080") built with fg_log_str for
 * strings. Never log API keys or message contents (prompts, outputs,
 * instructions): tests/gateway/test_logs.py checks a session's log for them.
 * The level threshold comes from the config's log.level.
 * Thread safety: any thread; each line is one write(2).
 */
#ifndef FG_LOG_H
#define FG_LOG_H

#include <stddef.h>

typedef enum fg_log_level { FG_LOG_DEBUG = 0, FG_LOG_INFO, FG_LOG_WARN, FG_LOG_ERROR } fg_log_level;

void fg_log_set_level(fg_log_level level);
int fg_log_enabled(fg_log_level level);

/* An event about a tenant and/or a session (either may be NULL: null in the line).
 * fields_fmt: a printf format producing JSON members without braces (may be NULL). */
void fg_log_at(fg_log_level level, const char *event, const char *tenant, const char *session,
               const char *fields_fmt, ...) __attribute__((format(printf, 5, 6)));

/* An event about neither a tenant nor a session. */
void fg_log(fg_log_level level, const char *event, const char *fields_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes s as a JSON string literal (quotes included, escaped, cut to cap) into buf. */
const char *fg_log_str(char *buf, size_t cap, const char *s);

#endif
