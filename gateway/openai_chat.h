/* openai_chat.h: POST /v1/chat/completions (openai_chat.c). Service thread only. */
#ifndef FG_GATEWAY_OPENAI_CHAT_H
#define FG_GATEWAY_OPENAI_CHAT_H

#include "gateway/http.h"

/* Answers the request now (refused) or later (the completion, streamed or not). */
void gw_openai_chat(fg_gateway_t *gw, gw_http_req *req);

#endif
