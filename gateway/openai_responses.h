/* openai_responses.h: POST /v1/responses (openai_responses.c). Service thread only. */
#ifndef FG_GATEWAY_OPENAI_RESPONSES_H
#define FG_GATEWAY_OPENAI_RESPONSES_H

#include "gateway/http.h"

/* Answers the request now (refused) or later (the response, streamed or not). */
void gw_openai_responses(fg_gateway_t *gw, gw_http_req *req);

#endif
