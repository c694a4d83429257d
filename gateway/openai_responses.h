/* openai_responses.h: POST /v1/responses (openai_responses.c). Service thread only. */
#ifndef FG_GATEWAY_OPENAI_RESPONSES_H
#define FG_GATEWAY_OPENAI_RESPONSES_H

#include "gateway/http.h"

/* Answers the request now (refused) or later (the response, streamed or not). */
void gw_openai_responses(fg_gateway_t *gw, gw_http_req *req);

/* GET /v1/responses/{id} (the stored Response object) and DELETE (it goes;
 * the newest of a conversation ends the conversation's session). id: the
 * path after "/v1/responses/". Answers the request now. */
void gw_openai_response_stored(fg_gateway_t *gw, gw_http_req *req, const char *id);

#endif
