/* tenants.c: the gateway's tenant table (see tenants.h). */
#include "gateway/tenants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway_internal.h"

int gw_tenant_intern(fg_gateway_t *gw, const fg_tenant_record *rec)
{
    for (int i = 0; i < gw->n_tenants; i++)
        if (!strcmp(gw->tenants[i].rec.id, rec->id)) {
            gw->tenants[i].rec = *rec;
            return i;
        }
    if (gw->n_tenants == gw->cap_tenants) {
        int cap = gw->cap_tenants ? gw->cap_tenants * 2 : 16;
        gw_tenant *t = realloc(gw->tenants, (size_t)cap * sizeof *t);
        if (!t)
            return -1;
        gw->tenants = t;
        gw->cap_tenants = cap;
    }
    gw->tenants[gw->n_tenants] = (gw_tenant){.rec = *rec};
    return gw->n_tenants++;
}

gw_tenant *gw_tenant_at(fg_gateway_t *gw, int index)
{
    return index >= 0 && index < gw->n_tenants ? &gw->tenants[index] : NULL;
}

int gw_tenant_by_key(fg_gateway_t *gw, const char *api_key)
{
    fg_tenant_record rec;
    if (gw->quota) {
        if (!fg_quota_tenant_by_key(gw->quota, api_key, &rec))
            return -1;
        return gw_tenant_intern(gw, &rec);
    }
    const fg_config_tenant *t = fg_config_find_tenant_by_key(gw->cfg, api_key);
    if (!t)
        return -1;
    memset(&rec, 0, sizeof rec);
    snprintf(rec.id, sizeof rec.id, "%s", t->id);
    snprintf(rec.name, sizeof rec.name, "%s", t->name ? t->name : t->id);
    rec.limits.weight = t->weight;
    return gw_tenant_intern(gw, &rec);
}

void gw_tenants_free(fg_gateway_t *gw)
{
    free(gw->tenants);
    gw->tenants = NULL;
    gw->n_tenants = gw->cap_tenants = 0;
}
