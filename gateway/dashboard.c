/* dashboard.c: finding and loading the dashboard's files (see dashboard.h). */
#include "gateway/dashboard.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gateway/log.h"

#ifndef FG_DASHBOARD_SOURCE_DIR
#define FG_DASHBOARD_SOURCE_DIR ""
#endif

#define MAX_FILE_BYTES (1u << 20) /* the page is a few tens of KiB: anything larger is not ours */

static const struct {
    const char *name, *type;
} FILES[] = {
    {"index.html", "text/html; charset=utf-8"},
    {"app.js", "text/javascript; charset=utf-8"},
    {"style.css", "text/css; charset=utf-8"},
};
#define N_FILES (sizeof FILES / sizeof *FILES)

struct gw_dashboard {
    gw_dashboard_file files[N_FILES];
};

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(MAX_FILE_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_FILE_BYTES + 1, f) : 0;
    const int bad = !buf || ferror(f) || n > MAX_FILE_BYTES;
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static gw_dashboard *load_from(const char *dir)
{
    if (!dir || !*dir)
        return NULL;
    gw_dashboard *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    for (size_t i = 0; i < N_FILES; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, FILES[i].name);
        gw_dashboard_file *f = &d->files[i];
        f->name = FILES[i].name;
        f->content_type = FILES[i].type;
        f->data = read_all(path, &f->len);
        if (!f->data) {
            gw_dashboard_free(d);
            return NULL;
        }
    }
    return d;
}

gw_dashboard *gw_dashboard_load(void)
{
    gw_dashboard *d = load_from(getenv("FLASHGATE_DASHBOARD_DIR"));
    if (d)
        return d;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/../share/flashgate/dashboard", dirname(exe));
        if ((d = load_from(dir)))
            return d;
    }
    if ((d = load_from(FG_DASHBOARD_SOURCE_DIR)))
        return d;
    char where[600];
    fg_log(FG_LOG_WARN, "dashboard_missing", "\"source_dir\":%s",
           fg_log_str(where, sizeof where, FG_DASHBOARD_SOURCE_DIR));
    return NULL;
}

void gw_dashboard_free(gw_dashboard *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < N_FILES; i++)
        free(d->files[i].data);
    free(d);
}

const gw_dashboard_file *gw_dashboard_find(const gw_dashboard *d, const char *name)
{
    if (!d)
        return NULL;
    for (size_t i = 0; i < N_FILES; i++)
        if (!strcmp(d->files[i].name, name))
            return &d->files[i];
    return NULL;
}
