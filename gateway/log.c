/* log.c: JSON-lines logging (see log.h). */
#include "gateway/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile int min_level = FG_LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void fg_log_set_level(fg_log_level level) { min_level = (int)level; }
int fg_log_enabled(fg_log_level level) { return (int)level >= min_level; }

void fg_log(fg_log_level level, const char *event, const char *fields_fmt, ...)
{
    if (!fg_log_enabled(level))
        return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"level\":\"%s\",\"event\":\"%s\"",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_names[level], event);
    if (fields_fmt && n > 0 && (size_t)n < sizeof line - 4) {
        line[n++] = ',';
        va_list ap;
        va_start(ap, fields_fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n - 3, fields_fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m < (int)(sizeof line - (size_t)n - 3) ? m : (int)(sizeof line - (size_t)n - 4);
    }
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 3)
        n = (int)sizeof line - 3;
    line[n++] = '}';
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
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
