/* tenants.h: the tenants this gateway has seen, by a small index that sessions,
 * the engine scheduler (tenant id) and metrics use. Records come from the
 * quota module's cache (Redis) or, without Redis, from the config. Entries are
 * never removed (tenants are few), so indexes stay valid. Service thread only.
 */
#ifndef FG_GATEWAY_TENANTS_H
#define FG_GATEWAY_TENANTS_H

#include "gateway/metrics.h"
#include "policies/quota.h"

typedef struct fg_gateway fg_gateway_t;

typedef struct gw_tenant {
    fg_tenant_record rec;   /* refreshed from the quota cache at each handshake */
    int sessions;           /* open on this gateway */
    gw_tenant_counters m;   /* metrics.h */
} gw_tenant;

/* Index of the tenant with rec->id, added or updated; -1 on out of memory. */
int gw_tenant_intern(fg_gateway_t *gw, const fg_tenant_record *rec);
gw_tenant *gw_tenant_at(fg_gateway_t *gw, int index);
/* The tenant of an API key: from the quota cache, else the config. -1 if unknown. */
int gw_tenant_by_key(fg_gateway_t *gw, const char *api_key);
void gw_tenants_free(fg_gateway_t *gw);

#endif
