/* openai_ws.c: the Responses API's WebSocket mode on /v1/responses
 * (gateway_internal.h, "openai_ws.c"). The client sends response.create
 * events, each holding a POST /v1/responses body, and gets that response's
 * streaming events (response.created ... response.completed) as messages, one
 * response at a time; refusals are error events {"type":"error","status",
 * "error":{type, code, message, param}}. The responses run as calls of
 * openai_responses.c on the same session layer as HTTP; previous_response_id
 * continues a stored response as over HTTP, and also the connection's newest
 * store: false response, whose session this connection keeps until it ends
 * or a newer store: false response replaces it. The connection's reading,
 * rate limit, message size limit and output limits are conn.c's. Service
 * thread only. */
#include <stdio.h>
#include <string.h>

#include "gateway/gateway_internal.h"
#include "gateway/log.h"
#include "gateway/openai_responses.h"
#include "gateway/openai_sink.h"

void gw_rws_error(gw_conn *c, unsigned status, const char *type, const char *code, const char *param,
                  const char *msg)
{
    char body[800], m[400], p[160];
    snprintf(body, sizeof body,
             "{\"type\":\"error\",\"status\":%u,\"error\":{\"type\":\"%s\",\"code\":\"%s\",\"message\":%s,"
             "\"param\":%s}}",
             status, type, code, fg_log_str(m, sizeof m, msg), param ? fg_log_str(p, sizeof p, param) : "null");
    gw_conn_push_text(c, body, strlen(body));
}

void gw_rws_on_message(gw_conn *c, const char *text, size_t len)
{
    if (c->rws_call)
        return gw_rws_error(c, 409, "invalid_request_error", "response_in_progress", NULL,
                      "a response is in progress on this connection: send the next response.create after its "
                      "response.completed (or open another connection)");
    gw_openai_responses_ws(c->sink.gw, c, text, len);
}

/* Ends the session kept for this connection, if it is still idle (a request
 * continuing it over HTTP holds it meanwhile: it ends with that call). */
static void end_kept(gw_conn *c)
{
    gw_session *s = c->rws_unstored[0] ? gw_session_find(c->sink.gw, c->rws_unstored, strlen(c->rws_unstored)) : NULL;
    c->rws_unstored[0] = 0;
    if (s && !s->sink && !s->responding && !s->quota_pending && !s->n_saved)
        gw_session_destroy(s, false);
}

void gw_conn_keep_unstored(gw_conn *c, gw_session *s, bool conn_local)
{
    const bool same = !strcmp(c->rws_unstored, s->id);
    if (!conn_local) { /* stored now: it lives on as any stored response's session */
        if (same)
            c->rws_unstored[0] = 0;
        return;
    }
    if (!same)
        end_kept(c);
    snprintf(c->rws_unstored, sizeof c->rws_unstored, "%s", s->id);
}

void gw_rws_on_close(gw_conn *c)
{
    if (c->rws_call)
        gw_oa_call_gone(c->rws_call); /* its response is cancelled, its session ends */
    end_kept(c);
}
