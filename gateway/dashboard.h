/* dashboard.h: the dashboard page's static files (gateway/dashboard/ in the
 * source tree, installed as share/flashgate/dashboard/), read into memory once
 * at start so a request never touches the file system and only these names
 * can be served (no path from a request reaches open()).
 *
 * Where they are looked for, first found wins: $FLASHGATE_DASHBOARD_DIR, then
 * <directory of the binary>/../share/flashgate/dashboard (an installed
 * flashgate), then the source tree the binary was built from.
 * Service thread (create and destroy at start and stop).
 */
#ifndef FG_GATEWAY_DASHBOARD_H
#define FG_GATEWAY_DASHBOARD_H

#include <stddef.h>

typedef struct gw_dashboard gw_dashboard;

typedef struct gw_dashboard_file {
    const char *name;          /* "index.html", "app.js", "style.css" */
    const char *content_type;
    char *data;
    size_t len;
} gw_dashboard_file;

/* Loads the files; NULL when any is missing or unreadable (the gateway then
 * answers 503 on /dashboard and logs where it looked). */
gw_dashboard *gw_dashboard_load(void);
void gw_dashboard_free(gw_dashboard *d);
/* The file of that name, or NULL (also when d is NULL). */
const gw_dashboard_file *gw_dashboard_find(const gw_dashboard *d, const char *name);

#endif
