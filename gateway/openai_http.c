/* openai_http.c: the HTTP routes that OpenAI's SDKs call, in OpenAI's shapes:
 * GET /v1/models and GET /v1/models/{id} (the one model the engine serves),
 * POST /v1/chat/completions (openai_chat.c), POST /v1/responses (openai_responses.c),
 * GET/DELETE /v1/responses/{id}, POST /v1/realtime/client_secrets (client_secrets.h),
 * and their errors as {"error":{"message","type","param","code"}}, the body
 * the SDKs turn into APIError subclasses. Authenticated with a tenant's API
 * key, like the realtime handshake. Service thread only.
 */
#include "gateway/openai_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gateway/client_secrets.h"
#include "gateway/gateway_internal.h"
#include "gateway/log.h"
#include "gateway/openai_chat.h"
#include "gateway/openai_req.h"
#include "gateway/openai_responses.h"

void gw_openai_error(gw_http_req *req, unsigned status, const char *type, const char *code, const char *param,
                     const char *message)
{
    char m[400], p[160], body[700];
    snprintf(body, sizeof body, "{\"error\":{\"message\":%s,\"type\":\"%s\",\"param\":%s,\"code\":\"%s\"}}",
             fg_log_str(m, sizeof m, message), type, param ? fg_log_str(p, sizeof p, param) : "null", code);
    gw_http_reply(req, status, body);
}

const char *gw_openai_model_id(const fg_gateway_t *gw)
{
    return gw->model_id;
}

void gw_openai_model_id_init(fg_gateway_t *gw)
{
    /* The file's name without its directory and ".gguf": what an operator calls the model. */
    const char *path = gw->cfg->model.path ? gw->cfg->model.path : "";
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    if (n == 0 || n >= sizeof gw->model_id)
        snprintf(gw->model_id, sizeof gw->model_id, "flashgate");
    else
        snprintf(gw->model_id, sizeof gw->model_id, "%.*s", (int)n, base);
    gw->started_unix = (int64_t)time(NULL);
}

/* POST /v1/realtime/client_secrets: a browser credential of the caller's
 * tenant (client_secrets.h), in OpenAI's reply shape {value, expires_at,
 * session}. Minted with an API key only: a secret cannot mint another. */
static void client_secret(fg_gateway_t *gw, gw_http_req *req)
{
    const int tenant = gw_openai_admit(gw, req, "POST", 1);
    if (tenant < 0)
        return;
    size_t len;
    const char *body = gw_http_body(req, &len);
    gw_secret_req r;
    gw_oa_error err;
    if (gw_secret_parse(body, len, &gw->limits, gw->model_id, &r, &err) != FG_OK) {
        gw_secret_req_free(&r);
        return gw_openai_error(req, err.status, err.type, err.code, err.param[0] ? err.param : NULL, err.message);
    }
    char value[GW_SECRET_LEN + 1];
    fg_err e = gw_secrets_mint(gw->secrets, tenant, gw_http_bearer(req), fg_clock_mono_s(), r.ttl_s, r.session_event,
                               value);
    if (e == FG_ERR_BUSY) {
        gw_openai_error(req, 429, "rate_limit_error", "too_many_client_secrets", NULL,
                        "this tenant holds as many live client secrets as the server keeps for one tenant; "
                        "wait for some to expire");
    } else if (e != FG_OK) {
        gw_openai_error(req, 500, "server_error", "internal_error", NULL, "no client secret could be made");
    } else {
        const size_t cap = strlen(r.session_json) + 128;
        char *out = malloc(cap);
        if (!out) {
            gw_openai_error(req, 500, "server_error", "internal_error", NULL, "out of memory");
        } else {
            snprintf(out, cap, "{\"value\":\"%s\",\"expires_at\":%lld,\"session\":%s}", value,
                     (long long)time(NULL) + r.ttl_s, r.session_json);
            gw_http_reply(req, 200, out);
            free(out);
        }
    }
    gw_secret_req_free(&r);
}

static int put_model(const fg_gateway_t *gw, char *out, size_t cap)
{
    char id[160];
    return snprintf(out, cap, "{\"id\":%s,\"object\":\"model\",\"created\":%lld,\"owned_by\":\"flashgate\"}",
                    fg_log_str(id, sizeof id, gw->model_id), (long long)gw->started_unix);
}

int gw_openai_admit(fg_gateway_t *gw, gw_http_req *req, const char *method, int starts_work)
{
    if (strcmp(gw_http_method(req), method) != 0) {
        char use[16];
        snprintf(use, sizeof use, "use %s", method);
        gw_openai_error(req, 405, "invalid_request_error", "method_not_allowed", NULL, use);
        return -1;
    }
    const int tenant = gw_tenant_by_key(gw, gw_http_bearer(req));
    if (tenant < 0) {
        gw_openai_error(req, 401, "invalid_request_error", "invalid_api_key", NULL,
                        "missing or unknown API key (Authorization: Bearer KEY)");
        return -1;
    }
    if (starts_work && gw->draining) {
        gw_openai_error(req, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        return -1;
    }
    return tenant;
}

int gw_openai_route(fg_gateway_t *gw, gw_http_req *req)
{
    const char *path = gw_http_path(req);
    if (!strcmp(path, "/v1/chat/completions")) {
        gw_openai_chat(gw, req);
        return 1;
    }
    if (!strcmp(path, "/v1/responses")) {
        gw_openai_responses(gw, req);
        return 1;
    }
    if (!strcmp(path, "/v1/realtime/client_secrets")) {
        client_secret(gw, req);
        return 1;
    }
    if (!strncmp(path, "/v1/responses/", 14)) {
        gw_openai_response_stored(gw, req, path + 14);
        return 1;
    }
    if (strcmp(path, "/v1/models") != 0 && strncmp(path, "/v1/models/", 11) != 0)
        return 0;
    if (gw_openai_admit(gw, req, "GET", 0) < 0)
        return 1;
    char model[256], body[320];
    put_model(gw, model, sizeof model);
    if (!strcmp(path, "/v1/models")) {
        snprintf(body, sizeof body, "{\"object\":\"list\",\"data\":[%s]}", model);
        gw_http_reply(req, 200, body);
    } else if (!strcmp(path + 11, gw->model_id)) {
        gw_http_reply(req, 200, model);
    } else {
        char msg[320];
        snprintf(msg, sizeof msg, "The model '%.64s' does not exist; this server serves '%s'", path + 11, gw->model_id);
        gw_openai_error(req, 404, "invalid_request_error", "model_not_found", "model", msg);
    }
    return 1;
}
