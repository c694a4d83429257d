/* openai_responses.h: POST /v1/responses (openai_responses.c). Service thread only. */
#ifndef FG_GATEWAY_OPENAI_RESPONSES_H
#define FG_GATEWAY_OPENAI_RESPONSES_H

#include "gateway/http.h"

/* Answers the request now (refused) or later (the response, streamed or not). */
void gw_openai_responses(fg_gateway_t *gw, gw_http_req *req);
/* One response.create message of the Responses WebSocket mode on ws (no
 * call in progress there): refused with an error event, or run as a call
 * whose events go to ws as messages. */
struct gw_conn;
void gw_openai_responses_ws(fg_gateway_t *gw, struct gw_conn *ws, const char *text, size_t len);

/* GET /v1/responses/{id} (the stored Response object) and DELETE (it goes;
 * the newest of a conversation ends the conversation's session). id: the
 * path after "/v1/responses/". Answers the request now. */
void gw_openai_response_stored(fg_gateway_t *gw, gw_http_req *req, const char *id);

#endif
