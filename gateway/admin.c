/* admin.c: the admin HTTP API (placeholder until the quota integration lands):
 * every /admin/ path answers 501. */
#include <string.h>

#include "gateway/http.h"

int gw_admin_route(fg_gateway_t *gw, gw_http_req *req)
{
    (void)gw;
    if (strncmp(gw_http_path(req), "/admin/", 7) != 0)
        return 0;
    gw_http_error(req, 501, "not_implemented", "the admin API is not available in this build");
    return 1;
}
