/* session_persist.c: the persistence calls of engine.h (fork, meta, restore,
 * save_all, delete, tenant usage). Filled in step by step; until then the
 * calls not yet written return FG_ERR_UNSUPPORTED. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

fg_err fg_session_fork(fg_session_t *src, const fg_session_params *p, fg_session_t **out, fg_diag *diag)
{
    (void)src;
    (void)p;
    *out = NULL;
    return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "fg_session_fork is not written yet");
}

fg_err fg_session_set_meta(fg_session_t *s, const void *meta, size_t len, fg_diag *diag)
{
    (void)s;
    (void)meta;
    (void)len;
    return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "fg_session_set_meta is not written yet");
}

size_t fg_session_get_meta(fg_session_t *s, void *buf, size_t cap)
{
    (void)s;
    (void)buf;
    (void)cap;
    return 0;
}

fg_err fg_session_restore(fg_engine_t *e, const fg_session_params *p, fg_session_t **out, fg_diag *diag)
{
    (void)e;
    (void)p;
    *out = NULL;
    return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "fg_session_restore is not written yet");
}

fg_err fg_engine_save_all(fg_engine_t *e, fg_diag *diag)
{
    (void)e;
    return fg_diag_set(diag, FG_ERR_UNSUPPORTED, "fg_engine_save_all is not written yet");
}

bool fg_session_on_disk(fg_session_t *s)
{
    (void)s;
    return false;
}

void fg_session_delete(fg_session_t *s)
{
    fg_session_free(s);
}

fg_err fg_engine_tenant_usage(fg_engine_t *e, const char *tenant_name, fg_tenant_kv_usage *u)
{
    (void)e;
    memset(u, 0, sizeof *u);
    if (tenant_name && !fg_session_name_valid(tenant_name))
        return FG_ERR_INVALID_ARG;
    return FG_ERR_UNSUPPORTED;
}
