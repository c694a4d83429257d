/* status.h: GET /v1/status, the JSON figures the dashboard shows, with a
 * short history: a ring of GW_STATUS_SAMPLES samples taken once a second
 * (from the gateway's periodic sweep), so a page opened now plots the last ten
 * minutes at once. docs/metrics.md describes every field.
 *
 * Service thread only: samples and renders read gw_metrics and the session
 * table, which belong to it.
 */
#ifndef FG_GATEWAY_STATUS_H
#define FG_GATEWAY_STATUS_H

typedef struct fg_gateway fg_gateway_t;
typedef struct gw_status gw_status;

#define GW_STATUS_SAMPLES 600  /* ten minutes at one sample per second */
#define GW_STATUS_TENANTS 16   /* tenants with a sessions series (by tenant index); others have none */

/* The ring, allocated once (about 100 KiB); NULL on out of memory. */
gw_status *gw_status_create(void);
void gw_status_destroy(gw_status *st);
/* Takes one sample now (call about once a second; the interval is measured). */
void gw_status_sample(fg_gateway_t *gw);
/* Hands this instance's load to the cluster view (policies/session_dir.h; the quota
 * thread publishes it once a second). Nothing without the session directory. */
void gw_status_publish(fg_gateway_t *gw);
/* The status document as a new malloc'd JSON string; NULL on out of memory. */
char *gw_status_render(fg_gateway_t *gw);

#endif
