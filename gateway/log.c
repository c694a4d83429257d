/* log.c: JSON-lines logging (see log.h). */
#include "gateway/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile int min_level = FG_LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

#define FG_LOG_ID_BYTES 140 /* tenant ids are 64 bytes, session ids 37: room for escapes */

void fg_log_set_level(fg_log_level level) { min_level = (int)level; }
int fg_log_enabled(fg_log_level level) { return (int)level >= min_level; }

#define LINE_MAX_BYTES 2048

static void vlog(fg_log_level level, const char *event, const char *tenant, const char *session,
                 const char *fields_fmt, va_list ap)
{
    char line[LINE_MAX_BYTES], t[FG_LOG_ID_BYTES + 2], sid[FG_LOG_ID_BYTES + 2];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line,
                     "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"level\":\"%s\",\"event\":\"%s\","
                     "\"tenant\":%s,\"session\":%s,\"fields\":{",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_names[level], event, tenant ? fg_log_str(t, sizeof t, tenant) : "null",
                     session ? fg_log_str(sid, sizeof sid, session) : "null");
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 4)
        n = (int)sizeof line - 4;
    if (fields_fmt) {
        /* room is kept for the closing "}}\n"; a cut line is still one line, if not valid JSON */
        const size_t room = sizeof line - (size_t)n - 3;
        int m = vsnprintf(line + n, room, fields_fmt, ap);
        if (m > 0)
            n += m < (int)room ? m : (int)room - 1;
    }
    line[n++] = '}';
    line[n++] = '}';
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

void fg_log_at(fg_log_level level, const char *event, const char *tenant, const char *session,
               const char *fields_fmt, ...)
{
    if (!fg_log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fields_fmt);
    vlog(level, event, tenant, session, fields_fmt, ap);
    va_end(ap);
}

void fg_log(fg_log_level level, const char *event, const char *fields_fmt, ...)
{
    if (!fg_log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fields_fmt);
    vlog(level, event, NULL, NULL, fields_fmt, ap);
    va_end(ap);
}

const char *fg_log_str(char *buf, size_t cap, const char *s)
{
    size_t o = 0;
    if (cap < 3) {
        if (cap)
            buf[0] = 0;
        return buf;
    }
    buf[o++] = '"';
    for (; s && *s && o + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(buf + o, cap - o, "\\u%04x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o] = 0;
    return buf;
}
