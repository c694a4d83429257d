/* openai_http.h: the OpenAI-compatible HTTP routes (openai_http.c) and the
 * model id they and the realtime session report. Service thread only.
 */
#ifndef FG_GATEWAY_OPENAI_HTTP_H
#define FG_GATEWAY_OPENAI_HTTP_H

#include "gateway/http.h"

/* Sets the model id (the model file's name without ".gguf") and the time
 * GET /v1/models reports as "created". Once, at gateway creation. */
void gw_openai_model_id_init(fg_gateway_t *gw);
const char *gw_openai_model_id(const fg_gateway_t *gw);

/* Returns 1 when the path is an OpenAI route (then answered), 0 otherwise. */
int gw_openai_route(fg_gateway_t *gw, gw_http_req *req);

/* The checks every OpenAI route makes first: the method, the API key, and
 * (for a call that starts work, starts_work) the drain. Returns the tenant,
 * or -1 after answering the request with OpenAI's error. */
int gw_openai_admit(fg_gateway_t *gw, gw_http_req *req, const char *method, int starts_work);

/* Sends {"error":{"message","type","param","code"}} with status; param NULL is null. */
void gw_openai_error(gw_http_req *req, unsigned status, const char *type, const char *code, const char *param,
                     const char *message);

#endif
